"""Sweeps on the CPU with the fake backend (dry runs: simulated, never data): resume after SIGKILL, Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from gpupred.profile import store
from gpupred.profile.units import load_plan
from gpupred.profile.schema import read_runs, read_samples
from gpupred.profile.sweep import SweepOptions, run_sweep

from profile_faults import tiny_config, tiny_ids


def test_dry_sweep_writes_units_manifest_and_skips_finished(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    ids = tiny_ids(2)
    plan.write_text("\n".join(ids) + "\n")
    out = tmp_path / "data" / "dryrun" / "cpu" / "fixture-sweep"
    s = run_sweep(str(plan), out, SweepOptions(dry_run=True, progress=False), tiny_config())
    assert s.done_now == 2 and s.remaining == 0 and not s.stopped
    runs = read_runs(out)
    assert sorted(runs["workload_id"]) == sorted(ids) and runs["simulated"].all() and set(runs["status"]) == {"ok"}
    assert set(read_samples(out)["group_id"]) == set(ids)
    first = (out / "manifest.json").read_bytes()
    m = json.loads(first)
    assert m["dry_run"] and m["counts"] == {"planned": 2, "finished": 2} and m["software"]["torch"]
    again = run_sweep(str(plan), out, SweepOptions(dry_run=True, progress=False), tiny_config())
    assert again.done_now == 0 and again.already_done == 2
    # the second session writes its own manifest and leaves the first session's as it was
    assert (out / "manifest.json").read_bytes() == first
    second = json.loads((out / "manifest-002.json").read_text())
    assert len(second["sessions"]) == 2 and second["sessions"][0] == m["sessions"][0]
    assert store.read_manifest(out) == second and store.latest_manifest_path(out) == out / "manifest-002.json"
    with pytest.raises(Exception, match="window_s"):
        run_sweep(str(plan), out, SweepOptions(dry_run=True, progress=False), tiny_config(window_s=9.0))


def test_sweep_stops_before_the_time_budget(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text("\n".join(tiny_ids(3)) + "\n")
    out = tmp_path / "data" / "dryrun" / "cpu" / "budget"
    s = run_sweep(str(plan), out, SweepOptions(dry_run=True, max_minutes=0.05, progress=False), tiny_config())
    assert s.done_now == 0 and "time budget" in s.stopped and s.remaining == 3  # 3 s < the unit's hard timeout


@pytest.mark.slow
def test_sweep_killed_with_sigkill_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    ids = tiny_ids(6)
    plan = tmp_path / "plan.txt"
    plan.write_text("\n".join(ids) + "\n")
    out = tmp_path / "data" / "dryrun" / "cpu" / "killed"
    cmd = [sys.executable, "-m", "gpupred.cli.profile", "sweep", "--plan", str(plan), "--out", str(out), "--dry-run",
           "--window-s", "0.1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while len(store.finished_units(out)) < 2 and time.monotonic() - t0 < 120 and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = store.finished_units(out)
    assert 2 <= len(before) < 6
    done = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["remaining"] == 0 and summary["done_now"] == 6 - len(before)
    runs = read_runs(out)
    assert Counter(runs["run_id"]) == Counter(ids)  # each unit exactly once
    assert set(read_samples(out)["group_id"]) == set(ids)
    assert not list(out.rglob(".tmp-*"))
    assert [u.group_id for u in load_plan(str(plan))] == ids


@pytest.mark.slow
def test_ray_executor_on_a_local_cpu_instance(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    plan = tmp_path / "plan.txt"
    ids = tiny_ids(2)
    plan.write_text("\n".join(ids) + f"\n{ids[0]} repeat=2\n{ids[1]} sync=window\n")
    out = tmp_path / "data" / "dryrun" / "cpu" / "ray"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        s = run_sweep(str(plan), out, SweepOptions(dry_run=True, executor="ray", ray_num_gpus=0, progress=False),
                          tiny_config())
    finally:
        ray.shutdown()
    assert s.done_now == 4 and s.remaining == 0, s
    runs = read_runs(out).set_index("group_id")
    assert sorted(runs["workload_id"]) == sorted([*ids, *ids]) and runs["simulated"].all()
    # a Ray task runs the plan line's unit: its repeat number and sync mode survive the trip (group id and the run)
    assert runs.at[f"{ids[0]}~rep-2", "sync"] == "step" and runs.at[f"{ids[1]}~sync-window", "sync"] == "window"
