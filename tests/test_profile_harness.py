"""The harness and co-location on the CPU with the fake NVML backend and tiny MLPs (simulated, never data)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

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


def test_children_fork_from_a_server_that_imported_torch(tmp_path: Path) -> None:
    """A script without a main guard runs its unit once (the child does not run the parent's main module again), the
    child's torch import is already done (the fork server's), and the child sees the parent's environment as it was
    when the child was asked for, not as it was when the server started."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import json, os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from gpupred.profile.fake import FakeBackend\n"
        "from gpupred.profile.harness import child_context, run_unit\n"
        "from gpupred.workloads.spec import WorkloadSpec\n"
        "from profile_faults import TINY, tiny_config\n"
        "print('main ran', flush=True)\n"
        "run_unit([WorkloadSpec.from_id(TINY)], FakeBackend(), tiny_config())\n"  # starts the fork server
        "os.environ['GPUPRED_FAULT'] = 'error'\n"  # set after the server started: the next child must see it
        "r = run_unit([WorkloadSpec.from_id(TINY)], FakeBackend(), tiny_config())\n"
        "row = r.runs.to_pylist()[0]\n"
        "print(json.dumps({'status': row['status'], 'message': row['message'], 'timings': r.timings}))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent.parent / "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines.count("main ran") == 1, lines
    out = json.loads(lines[-1])
    assert out["status"] == "error" and "injected" in out["message"], out
    assert out["timings"][0]["import_s"] < 0.5, out["timings"]
