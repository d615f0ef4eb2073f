"""The harness and co-location on the CPU with the fake NVML backend and tiny MLPs (simulated, never data)."""

from __future__ import annotations

import math

import pytest

from gpupred.profile.fake import FakeBackend
from gpupred.profile.harness import run_unit
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA
from gpupred.profile.units import Unit
from gpupred.workloads.spec import WorkloadSpec

from profile_faults import TINY, TINY2, tiny_config


def test_solo_run_ok() -> None:
    spec = WorkloadSpec.from_id(TINY)
    r = run_unit([spec], FakeBackend(), tiny_config(), sweep_id="fixture")
    assert r.runs.schema == RUN_SCHEMA and r.samples.schema == SAMPLE_SCHEMA
    row = r.runs.to_pylist()[0]
    assert row["status"] == "ok", row["message"]
    assert row["run_id"] == row["group_id"] == TINY and row["group_size"] == 1 and row["simulated"]
    assert row["n_iters"] >= 3 and len(row["iter_times_s"]) == row["n_iters"]
    assert row["window_end_s"] - row["window_start_s"] >= 0.2
    assert math.isclose(row["iter_time_mean_s"], sum(row["iter_times_s"]) / row["n_iters"])
    assert row["samples_per_s"] > 0 and row["warmup_iters"] >= 1
    assert WorkloadSpec.from_json(row["spec_json"]) == spec
    t = r.samples.column("t_s").to_pylist()
    assert min(t) >= row["window_start_s"] - 0.5 - 1e-9 and max(t) <= row["window_end_s"] + 0.5 + 1e-9
    assert {"gpu_util", "sm_active", "proc_mem_mib"} <= set(r.samples.column("metric").to_pylist())


@pytest.mark.slow
@pytest.mark.parametrize("fault,status,text", [("oom", "oom", "out of memory"), ("crash", "error", "exited with code 3"),
                                               ("error", "error", "injected")])
def test_failures_are_recorded(fault: str, status: str, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPRED_FAULT", fault)
    r = run_unit([WorkloadSpec.from_id(TINY)], FakeBackend(), tiny_config())
    row = r.runs.to_pylist()[0]
    assert row["status"] == status and text in row["message"], row
    assert row["n_iters"] == 0 and math.isnan(row["iter_time_mean_s"])


@pytest.mark.slow
def test_hang_hits_the_hard_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPRED_FAULT", "hang")
    cfg = tiny_config(startup_timeout_s=12.0, warmup_max_s=0.5, max_window_s=0.5, slack_s=0.0)
    r = run_unit([WorkloadSpec.from_id(TINY)], FakeBackend(), cfg)
    row = r.runs.to_pylist()[0]
    assert row["status"] == "timeout" and "hard timeout" in row["message"]
    assert r.wall_s < 30


def test_colocated_pair_starts_together_and_overlaps() -> None:
    specs = [WorkloadSpec.from_id(TINY), WorkloadSpec.from_id(TINY2)]
    r = run_unit(specs, FakeBackend(), tiny_config(window_s=0.3), Unit((TINY, TINY2)).group_id)
    rows = r.runs.to_pylist()
    assert [x["status"] for x in rows] == ["ok", "ok"], [x["message"] for x in rows]
    gid = rows[0]["group_id"]
    assert gid.startswith("co2-") and [x["run_id"] for x in rows] == [f"{gid}.m0", f"{gid}.m1"]
    assert all(x["group_size"] == 2 for x in rows) and [x["member"] for x in rows] == [0, 1]
    # synchronized start: both measured windows start within a moment of each other and overlap
    starts = [x["window_start_s"] for x in rows]
    ends = [x["window_end_s"] for x in rows]
    assert abs(starts[0] - starts[1]) < 0.5
    assert min(ends) > max(starts)
    procs = r.samples.to_pandas().query("metric == 'proc_mem_mib'")
    assert set(procs["member"]) == {0, 1}
