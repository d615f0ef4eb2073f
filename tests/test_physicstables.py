"""Notebook 02's per-workload tables (gpupred.physicstables): written once, read back exactly, never used stale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpupred import config, physicstables

IDS = ["resnet.resnet18-bs16-img64-fp32-sgd", "mobilenet.mobilenet_v2-bs8-img64-fp16-adam",
       "lstm.lstm-v10000-e256-h512-l2-bs32-seq64-bf16-adam"]


@pytest.fixture()
def tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tables of three store workloads, written into a temporary data/processed (FIXTURE paths)."""
    monkeypatch.setattr(config, "JOB_KERNELS", tmp_path / "job_kernels.parquet")
    monkeypatch.setattr(config, "JOB_TERMS", tmp_path / "job_terms.parquet")
    physicstables.write_job_tables(IDS, progress=False)
    return tmp_path


def test_kernels_and_terms_come_back_as_computed(tables: Path) -> None:
    from gpupred.memory.physics import FOOTPRINT_COLUMNS, footprint_columns
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.workloads.spec import WorkloadSpec

    ids = [IDS[2], IDS[0], IDS[0]]  # any order, repeats included
    stored = physicstables.stored_kernels(ids)
    assert stored is not None
    for wid, kl in zip(ids, stored):
        fresh = spec_kernels(WorkloadSpec.from_id(wid))
        for field in ("flops", "bytes", "tensor_core", "phase", "sync_after"):
            assert np.array_equal(getattr(kl, field), getattr(fresh, field)), (wid, field)
        assert (kl.input_bytes, kl.param_tensors, kl.cycles, kl.precision, dict(kl.counts)) == (
            fresh.input_bytes, fresh.param_tensors, fresh.cycles, fresh.precision, dict(fresh.counts))
        assert (kl.library is None) == (fresh.library is None) and (kl.on_tc is None) == (fresh.on_tc is None)
    frame = pd.DataFrame({"workload_id": ids})
    pd.testing.assert_frame_equal(physicstables.with_terms(frame)[list(FOOTPRINT_COLUMNS)],
                                  footprint_columns(frame)[list(FOOTPRINT_COLUMNS)])


def test_a_stale_or_incomplete_table_is_not_used(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert physicstables.stored_kernels([IDS[0], "resnet.resnet50-bs8-img64-fp32-sgd"]) is None  # not in the table
    monkeypatch.setattr(physicstables, "code_fingerprint", lambda: "other code")
    assert physicstables.stored_kernels(IDS) is None and physicstables.stored_terms(IDS) is None
    assert len(physicstables.kernels_of(pd.DataFrame({"workload_id": IDS[:1]}))) == 1  # computed from the graph instead


def test_the_kernel_table_is_each_workloads_frame_stacked() -> None:
    """The table built column by column over all workloads equals a frame per workload (its scalars assigned to
    every row), concatenated: same rows, order, values and dtypes."""
    import json

    from gpupred.step.physics.columns import spec_kernels
    from gpupred.workloads.spec import WorkloadSpec

    workloads = [(w, spec_kernels(WorkloadSpec.from_id(w))) for w in (IDS[1], IDS[0])]

    def one(wid: str, kl) -> pd.DataFrame:  # type: ignore[no-untyped-def]
        n = len(kl)
        return pd.DataFrame({
            "workload_id": wid, "flops": kl.flops.astype(float), "bytes": kl.bytes.astype(float),
            "tensor_core": kl.tensor_core.astype(np.int8), "phase": kl.phase.astype(np.int8),
            "sync_after": kl.sync_after.astype(bool),
            "library": kl.library.astype(bool) if kl.library is not None else np.zeros(n, dtype=bool),
            "on_tc": kl.on_tc.astype(bool) if kl.on_tc is not None else np.zeros(n, dtype=bool)}).assign(
            input_bytes=float(kl.input_bytes), param_tensors=int(kl.param_tensors), cycles=int(kl.cycles),
            precision=kl.precision, micro_batches=int(kl.micro_batches), counts=json.dumps(dict(kl.counts)),
            traits=json.dumps(kl.traits), has_library=kl.library is not None, has_on_tc=kl.on_tc is not None)

    expected = pd.concat([one(w, kl) for w, kl in workloads], ignore_index=True)
    table = physicstables.kernel_table(workloads)
    pd.testing.assert_frame_equal(table, expected)
    assert list(table["workload_id"].drop_duplicates()) == [IDS[1], IDS[0]]
    assert len(table) == sum(len(kl) for _, kl in workloads) > 0


def test_kernel_lists_read_back_every_field_of_every_workload() -> None:
    """The table's rows cut back into lists (column by column) give each workload's list as computed, every field,
    with the arrays' values and kinds, whatever order the workloads' rows come in."""
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.workloads.spec import WorkloadSpec

    fresh = {w: spec_kernels(WorkloadSpec.from_id(w)) for w in (IDS[1], IDS[0], IDS[2])}
    table = physicstables.kernel_table(list(fresh.items()))
    mixed = table.iloc[np.argsort(table["workload_id"].map({IDS[0]: 0, IDS[2]: 1, IDS[1]: 2}), kind="stable")]
    for frame, order in ((table, [IDS[1], IDS[0], IDS[2]]), (mixed, [IDS[0], IDS[2], IDS[1]])):
        lists = physicstables.kernel_lists(frame)
        assert list(lists) == order
        for wid, kl in lists.items():
            want = fresh[wid]
            for field in ("flops", "bytes", "tensor_core", "phase", "sync_after", "library", "on_tc"):
                got, exp = getattr(kl, field), getattr(want, field)
                assert (got is None) == (exp is None), (wid, field)
                if exp is not None:
                    assert np.array_equal(got, exp) and got.dtype.kind == np.asarray(exp).dtype.kind, (wid, field)
            assert (kl.input_bytes, kl.param_tensors, kl.cycles, kl.precision, kl.micro_batches, dict(kl.counts),
                    kl.traits) == (want.input_bytes, want.param_tensors, want.cycles, want.precision,
                                   want.micro_batches, dict(want.counts), want.traits)
