"""The real-world section's figures (gpupred.predictor.realworld_report): the analytic mixed-precision Adam count against a
hand computation, and corpus graphs through the step model and the footprint against torch's recorded counts.

The corpus folder here is a FIXTURE: two real corpus graphs copied from data/corpus/ with their index entries, and
one of them again under a decoder's name ("llm-fixture") with the dimensions of its small GPT-2 config, so that the
decoder rows are computed too. Torch-free.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gpupred import config
from gpupred.memory.physics import Footprint
from gpupred.step.physics.constants import ConstantsTable
from gpupred.predictor.realworld_report import korthikanti_bytes, realworld_metrics, realworld_table


def test_korthikanti_count_by_hand() -> None:
    """1e9 parameters, 2 layers, h 1024, 16 heads, s 512, b 2: 16 GB of states, per layer s b h (34 + 5 a s / h)."""
    states = 16 * 1e9
    assert korthikanti_bytes(1e9, 2, 1024, 16, 512, 2) == states + 2 * 512 * 2 * 1024 * (34 + 40)
    assert korthikanti_bytes(1e9, 2, 1024, 16, 512, 2, scores=False) == states + 2 * 512 * 2 * 1024 * 34


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FIXTURE corpus folder (see the module docstring)."""
    folder = tmp_path_factory.mktemp("corpus")
    index = json.loads((config.CORPUS / "index.json").read_text())
    models = {n: index["models"][n] for n in ("timm-resnet18", "hf-gpt2")}
    for name in models:
        shutil.copy(config.CORPUS / f"{name}.onnx.gz", folder / f"{name}.onnx.gz")
    shutil.copy(config.CORPUS / "hf-gpt2.onnx.gz", folder / "llm-fixture.onnx.gz")
    models["llm-fixture"] = {**models["hf-gpt2"], "fixed_batch": None,
                             "dims": {"layers": 2, "hidden": 128, "heads": 4, "vocab": 1000}}
    (folder / "index.json").write_text(json.dumps({"models": models}))
    return folder


def test_corpus_graphs_through_the_physics(corpus: Path) -> None:
    rw = realworld_table("H100 SXM", ConstantsTable({}), Footprint(), folder=corpus, progress=False)
    assert list(rw.index) == ["timm-resnet18", "hf-gpt2", "llm-fixture"]
    assert (rw["params_ratio"] == 1.0).all() and ((rw["flops_ratio"] - 1).abs() <= 0.02).all()
    assert (rw["step_s"] > 0).all() and (rw["util"].between(0, 100)).all() and (rw["memory_gib"] > 0).all()
    assert list(rw["batch_size"]) == [64, 32, 1]
    llm = rw.loc["llm-fixture"]
    want = korthikanti_bytes(llm["torch_params"], 2, 128, 4, 32, 1, scores=False) / 2**30
    assert llm["korthikanti_fused_gib"] == pytest.approx(want) and llm["korthikanti_gib"] > want
    assert rw[["korthikanti_gib"]].notna().sum().item() == 1  # only the entry with recorded dimensions
    metrics = realworld_metrics(rw, "H100 SXM")
    assert metrics["realworld_params_exact_share"] == 1.0 and set(metrics["realworld_llm"]) == {"llm-fixture"}
    apart = realworld_table("H100 SXM", ConstantsTable({}), Footprint(), folder=corpus, progress=False, n_jobs=2)
    pd.testing.assert_frame_equal(apart.drop(columns="seconds"), rw.drop(columns="seconds"), check_exact=True)
