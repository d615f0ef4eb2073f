"""Rows without pandas (gpupred.columnar): the readers give on :class:`Columns` what they give on the DataFrame of the
same records, and the shipped estimators answer the predictor's core's columns to the bit as they answer the frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpupred.columnar import Columns, equal, floats, frame_values, matrix, notna, numeric, row_sums, text, values

REPO = Path(__file__).resolve().parent.parent
RECORDS = [  # FIXTURE rows: every kind of value a job's row holds, gaps and a key one row lacks
    {"s": "adam", "b": True, "i": 3, "f": 1.5, "g": None, "o": None, "m": "sgd", "n": np.int64(4), "h": 2.0},
    {"s": "sgd", "b": False, "i": 4, "f": np.nan, "g": 2.0, "o": True, "m": None, "n": np.int64(5)},
    {"s": "adamw", "b": True, "i": 5, "f": 3.0, "g": None, "o": None, "m": "sgd", "n": np.int64(6), "h": 1.0},
]


def test_the_readers_give_on_columns_what_they_give_on_the_frame_of_the_same_records() -> None:
    cols, frame = Columns.from_records(RECORDS), pd.DataFrame(RECORDS)
    assert len(cols) == len(frame) and list(cols.columns) == list(frame.columns)
    assert pd.DataFrame({"x": np.zeros(len(cols))}, index=cols.index).index.equals(frame.index)  # a frame's index
    for name in frame.columns:
        assert np.array_equal(notna(cols, name), notna(frame, name)), name
        if name not in ("s", "m"):  # text
            assert np.array_equal(numeric(cols, name), numeric(frame, name)), name
            assert np.array_equal(floats(cols, name), floats(frame, name), equal_nan=True), name
    for name in ("s", "i"):
        assert list(text(cols, name)) == list(text(frame, name)), name
    assert list(values(cols, "s")) == list(values(frame, "s"))
    for name, value in (("b", False), ("o", True), ("s", "sgd"), ("i", 4)):
        assert np.array_equal(equal(cols, name, value), equal(frame, name, value)), name
    names = ["f", "absent", "i", "b", "g"]
    assert np.array_equal(matrix(cols, names), matrix(frame, names), equal_nan=True)
    assert np.array_equal(numeric(cols, "absent"), np.zeros(3)) and not notna(cols, "absent").any()
    assert list(cols.assign(z=np.arange(3)).columns)[-1] == "z"


@pytest.mark.parametrize("n, gaps", [(1, False), (3, False), (7, True), (256, False), (256, True)])
def test_row_sums_add_as_the_frame_adds(n: int, gaps: bool) -> None:
    rng = np.random.default_rng(n)
    columns = {f"t{i}": rng.lognormal(3, 4, n) for i in range(11)}  # FIXTURE terms, MiB
    if gaps:
        columns["t3"][::2] = np.nan
    frame = pd.DataFrame(columns)
    assert np.array_equal(row_sums(columns), frame.sum(axis=1).to_numpy(float))
    assert np.array_equal(frame_values(columns), frame.to_numpy(float), equal_nan=True)


@pytest.fixture(scope="module")
def core():  # type: ignore[no-untyped-def]
    from gpupred.predictor.loading import load_predictor

    return load_predictor(REPO / "models" / "predictor.joblib").core


def _jobs() -> list:  # type: ignore[type-arg]
    """Varied jobs: CNNs, transformers, an MLP and an LSTM at several batch sizes under several setups."""
    from gpupred.predictor.jobs import JobOptions, resolve_graph
    from gpupred.setups import TrainingSetup

    setups = [None, TrainingSetup(precision="bf16", optimizer="adam", optimizer_impl="fused"),
              TrainingSetup(precision="fp32", optimizer="sgd", checkpointing=True),
              TrainingSetup(precision="bf16", optimizer="adamw", lora_rank=4, lora_targets=("linear1",), accumulation=2)]
    cases = [("resnet.resnet50-bs64-img224-fp32-sgd", 64, 0), ("vgg.vgg16-bs64-img160-fp32-adam", 8, 1),
             ("gpt.gpt-v8192-m256-h4-l12-bs32-seq128-fp32-adam", 16, 2),
             ("gpt.gpt-v8192-m256-h4-l12-bs32-seq128-fp32-adam", 8, 3),
             ("mlp.mlp-w512-d2-bs256-in784-fp32-adam", 32, 1), ("lstm.lstm-v33278-e128-h256-l3-bs32-seq32-fp32-sgd", 4, 0)]
    jobs = []
    for workload, batch, k in cases:
        setup = setups[k]
        options = JobOptions(batch, None if setup is None else setup.precision,
                             None if setup is None else setup.optimizer, "H100 SXM", setup)
        jobs.append(resolve_graph(workload, options))
    return jobs


@pytest.mark.parametrize("gpu", ["H100 SXM", "L4"])
def test_the_estimators_answer_columns_to_the_bit_as_they_answer_the_frame(core, gpu: str) -> None:  # type: ignore[no-untyped-def]
    """The core hands its estimators :class:`Columns`; what they answer is what the frame of the same records gets
    (the shipped predictor; one job alone and a batch of varied jobs)."""
    from gpupred.predictor.core import job_records
    from gpupred.setups import RESIDENT

    jobs = _jobs()
    for batch in ([jobs[0]], jobs):
        records, physics = job_records(batch, gpu, [RESIDENT] * len(batch))
        cols, frame = Columns.from_records(records), pd.DataFrame(records)
        pd.testing.assert_frame_equal(core.step_.predict(cols, physics), core.step_.predict(frame, physics),
                                      check_exact=True)
        fast, slow = core.memory_.explain(cols), core.memory_.explain(frame)
        pd.testing.assert_frame_equal(fast.estimate, slow.estimate, check_exact=True)
        pd.testing.assert_frame_equal(fast.terms, slow.terms, check_exact=True)
        for part in ("at_backward", "context", "ratio", "steady", "varying"):
            assert np.array_equal(getattr(fast, part), getattr(slow, part)), part
        last = len(batch) - 1
        pd.testing.assert_frame_equal(fast.row(last).estimate, slow.estimate.iloc[last:], check_exact=True)
