"""The openb trace scenario on FIXTURE tasks and nodes (made up here; not rows of the trace)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixtures_coloc import fixture_workload_table

from gpupred import sim
from gpupred.sim.openb import (
    assign_workloads, cluster_for_load, gpu_tasks, relative_speed, slice_trace, trace_jobs, with_speeds,
)
from gpupred.errors import GpupredError


def fixture_tasks(n: int = 50, seed: int = 0) -> pd.DataFrame:
    """FIXTURE tasks in the importer's task table layout."""
    rng = np.random.default_rng(seed)
    num = rng.choice([0, 1, 1, 1, 2], n)
    start = np.sort(rng.uniform(0, 10_000, n))
    dur = rng.lognormal(6, 1, n)
    dur[3] = np.nan  # never scheduled
    return pd.DataFrame({
        "task_id": [f"fixture-{k}" for k in range(n)], "arrival_s": start, "start_s": start, "duration_s": dur,
        "num_gpu": num, "gpu_share": np.where(num == 1, rng.choice([0.25, 0.5, 1.0], n), np.where(num > 1, 1.0, 0.0)),
        "phase": "Succeeded", "censored": False, "cpu_milli": 1000.0, "qos": "LS",
    })


def fixture_nodes() -> pd.DataFrame:
    return pd.DataFrame({"node_id": [f"fixture-node-{k}" for k in range(6)], "model": ["T4", "G2"] * 3,
                         "gpus": [2, 4] * 3, "gpu_memory_mib": [16384.0, 24576.0] * 3, "memory_source": "fixture"})


def test_slices_are_contiguous_and_disjoint() -> None:
    tasks = fixture_tasks()
    s = slice_trace(tasks, tune_frac=0.25, eval_tasks=10, skip_frac=0.05)
    ran, counts = gpu_tasks(tasks)
    assert counts["cpu_only"] == int((tasks["num_gpu"] == 0).sum()) and counts["never_ran"] == 1
    assert s.counts["eval_tasks"] == 10 and s.tune["arrival_s"].max() <= s.evaluate["arrival_s"].min()
    assert not set(s.tune["task_id"]) & set(s.evaluate["task_id"])
    skip = s.counts["prehistory_skipped"]
    assert ran["task_id"].iloc[skip:skip + len(s.tune)].tolist() == s.tune["task_id"].tolist()
    with pytest.raises(GpupredError, match="tune_frac"):
        slice_trace(tasks, tune_frac=1.5)


def test_workload_assignment_follows_the_share_and_the_seed() -> None:
    util = np.array([90.0, 10.0, 50.0])
    share = np.array([0.1] * 50 + [1.0] * 50)
    kind = assign_workloads(share, util, seed=0, jitter=0.0)
    assert (util[kind[:50]].mean() < util[kind[50:]].mean())  # small shares get low-utilization workloads
    assert (assign_workloads(share, util, 0) == assign_workloads(share, util, 0)).all()
    assert (assign_workloads(share, util, 0) != assign_workloads(share, util, 1)).any()


def test_trace_jobs_split_clip_and_cluster_for_load() -> None:
    tasks = fixture_tasks()
    ran, _ = gpu_tasks(tasks)
    table = fixture_workload_table(6)
    jobs = trace_jobs(ran, table, seed=0, max_duration_s=500.0)
    assert len(jobs) == int(ran["num_gpu"].sum()) and jobs["work_s"].max() <= 500.0
    assert jobs["arrival_s"].min() == 0.0 and jobs["job_id"].str.contains(r"\.g1$").any()
    cluster = cluster_for_load(fixture_nodes(), jobs, load=1.0, seed=0)
    span = jobs["arrival_s"].max() - jobs["arrival_s"].min()
    assert cluster.n_gpus == int(np.ceil(jobs["work_s"].sum() / span))
    assert set(cluster.capacity) <= {16384.0, 24576.0}
    assert cluster_for_load(fixture_nodes(), jobs, load=0.5, seed=0).n_gpus >= cluster.n_gpus
    with pytest.raises(GpupredError, match="needs"):
        cluster_for_load(fixture_nodes(), jobs, load=0.001, seed=0)


def test_node_speeds_from_hardware_with_a_logged_fallback(caplog: pytest.LogCaptureFixture) -> None:
    nodes = with_speeds(fixture_nodes(), "RTX 3090")
    t4 = nodes[nodes["model"] == "T4"].iloc[0]
    assert t4["speed_source"] == "gpupred.hardware"
    assert t4["speed"] == pytest.approx(np.sqrt(8.1 / 35.6 * 320 / 936))  # FP32 and bandwidth ratios to the RTX 3090
    g2 = nodes[nodes["model"] == "G2"].iloc[0]
    assert g2["speed"] == sim.openb.SPEED_FALLBACK and g2["speed_source"] == "fallback"
    sim.openb._logged_fallbacks.discard("G9")
    with caplog.at_level("WARNING"):
        assert relative_speed("G9", "RTX 3090") == (sim.openb.SPEED_FALLBACK, "fallback")
    assert "G9" in caplog.text


def test_cluster_for_load_counts_speed_not_gpus() -> None:
    ran, _ = gpu_tasks(fixture_tasks())
    jobs = trace_jobs(ran, fixture_workload_table(6), seed=0, max_duration_s=500.0)
    plain = cluster_for_load(fixture_nodes(), jobs, load=1.0, seed=0)
    fast = cluster_for_load(fixture_nodes().assign(speed=2.0), jobs, load=1.0, seed=0)
    span = jobs["arrival_s"].max() - jobs["arrival_s"].min()
    assert (plain.speed == 1.0).all() and fast.speed.sum() >= jobs["work_s"].sum() / span
    assert fast.n_gpus == int(np.ceil(plain.n_gpus / 2))  # twice as fast: half the GPUs carry the same load
