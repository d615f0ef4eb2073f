"""gpupred.sim on tiny hand-made clusters whose outcome is computed by hand (FIXTURE jobs, not measurements)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures_coloc import fixture_workload_table
from gpupred.errors import GpupredError
from gpupred.sim import (
    BaselineSlowdown, Cluster, MatrixSlowdown, OursPolicy, ProactivePolicy, ReactivePolicy, SlotPolicy, Simulator,
    load_trace_csv, make_policy, metrics_table, report_metrics, simulate, synthetic_trace, util_timeseries,
)

CAP = 80_000.0


class Const:
    """A constant slowdown for every co-located job."""

    def __init__(self, s: float) -> None:
        self.s = s

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.full(len(a), self.s)


def jobs(*specs: dict) -> pd.DataFrame:
    """FIXTURE jobs: each spec overrides arrival_s, work_s, util, mem, pred_mem..."""
    rows = []
    for k, s in enumerate(specs):
        util, mem = s.get("util", 40.0), s.get("mem", 10_000.0)
        rows.append(
            {"job_id": f"j{k}", "arrival_s": s.get("arrival", 0.0), "work_s": s.get("work", 100.0), "kind": k,
             "true_util": util, "true_mem_mib": mem, "pred_util": s.get("pred_util", util),
             "pred_util_high": s.get("pred_util_high", util), "pred_mem_mib": s.get("pred_mem", mem),
             "pred_mem_mib_high": s.get("pred_mem_high", s.get("pred_mem", mem))}
        )
    return pd.DataFrame(rows)


def one_gpu() -> Cluster:
    return Cluster(1, 1, gpu_memory_mib=CAP)


def jct(res) -> list[float]:
    return res.jobs.sort_values("job_id").jct_s.round(6).tolist()


def test_slot_serializes_two_jobs() -> None:
    res = simulate(jobs({}, {}), one_gpu(), SlotPolicy())
    assert jct(res) == [100.0, 200.0]
    assert res.metrics["makespan_s"] == 200.0 and res.metrics["mean_wait_s"] == 50.0
    assert res.metrics["avg_util"] == pytest.approx(40.0)


@pytest.mark.parametrize("policy", [OursPolicy(max_slowdown=2.0), ProactivePolicy()])
def test_packing_overlaps_with_given_slowdown(policy) -> None:
    res = simulate(jobs({}, {}), one_gpu(), policy, slowdown=Const(1.5))
    assert jct(res) == [150.0, 150.0]  # t x s
    assert res.metrics["mean_wait_s"] == 0.0
    # GPU util while shared: min(100, 40/1.5 + 40/1.5)
    assert res.metrics["avg_util"] == pytest.approx(80 / 1.5)


def test_partner_speeds_up_when_other_finishes() -> None:
    res = simulate(jobs({"work": 100.0}, {"work": 200.0}), one_gpu(), OursPolicy(max_slowdown=2.0), slowdown=Const(1.5))
    # A: 100 / (1/1.5) = 150; B did 100 by then, 100 left alone: 250
    assert jct(res) == [150.0, 250.0]


def test_ours_refuses_pair_above_slowdown_cap() -> None:
    res = simulate(jobs({}, {}), one_gpu(), OursPolicy(max_slowdown=1.4), slowdown=Const(1.5))
    assert jct(res) == [100.0, 200.0]


def test_memory_never_overcommitted_in_policy_view() -> None:
    table = jobs(*({"arrival": float(k), "mem": 30_000.0, "util": 20.0} for k in range(12)))
    cluster = Cluster(1, 3, gpu_memory_mib=CAP, max_per_gpu=2)
    for policy in (OursPolicy(max_slowdown=3.0), ProactivePolicy(), ReactivePolicy(profile_s=5.0)):
        sim = Simulator(table, cluster, Const(1.2))
        res = sim.run(policy)
        assert sim.max_view_mem_frac <= 1.0 and res.metrics["ooms"] == 0
        assert res.jobs.finish_s.notna().all()
    # 3 x 30 GB would not fit; pairs (60 GB) do: the policies did pack
    assert sim.max_view_mem_frac == pytest.approx(0.75)


def test_oom_counted_when_prediction_said_it_fits() -> None:
    table = jobs({"mem": 50_000.0, "pred_mem": 30_000.0}, {"mem": 50_000.0, "pred_mem": 30_000.0})
    res = simulate(table, one_gpu(), ProactivePolicy(), slowdown=Const(1.0), oom_restart_s=30.0)
    assert res.metrics["ooms"] == 1
    # the newcomer OOMs at 0, runs alone after the first (100 s) with 30 s restart cost: 230
    assert jct(res) == [100.0, 230.0]
    assert res.jobs.sort_values("job_id").ooms.tolist() == [0, 1]
    # the upper bound protects "ours": 2 x 60 GB > 80 GB, so no pairing and no OOM
    hi = table.assign(pred_mem_mib_high=60_000.0)
    res = simulate(hi, one_gpu(), OursPolicy(max_slowdown=3.0), slowdown=Const(1.0))
    assert res.metrics["ooms"] == 0 and jct(res) == [100.0, 200.0]


def test_reactive_profiling_delay() -> None:
    # B arrives at 1 but needs an empty GPU to profile: it waits for A (done at 1000), profiles 60 s, goes on.
    table = jobs({"work": 1000.0}, {"arrival": 1.0, "work": 100.0})
    res = simulate(table, one_gpu(), ReactivePolicy(profile_s=60.0), slowdown=Const(1.0))
    assert jct(res) == [1000.0, 1099.0]
    assert res.jobs.sort_values("job_id").wait_s.tolist() == [0.0, 999.0]
    # proactive packs B at once (slowdown 1)
    res = simulate(table, one_gpu(), ProactivePolicy(), slowdown=Const(1.0))
    assert jct(res) == [1000.0, 100.0]


def test_reactive_migrates_when_slowdown_crosses_threshold() -> None:
    table = jobs({"work": 200.0, "util": 30.0}, {"work": 200.0, "util": 30.0})
    res = simulate(table, Cluster(1, 2, CAP), ReactivePolicy(profile_s=60.0, migrate_slowdown=1.5, observe_s=60.0,
                                                             migration_cost_s=10.0), slowdown=Const(2.0))
    # both profile 0-60 alone; B packs with A at 60; at 120 (s=2 > 1.5) B migrates to the free GPU, +10 s
    assert res.metrics["migrations"] == 1
    assert jct(res) == [230.0, 240.0]


def test_baseline_and_matrix_slowdowns() -> None:
    util = np.array([60.0, 70.0])
    np.testing.assert_allclose(BaselineSlowdown(util).pair(np.array([0]), np.array([1])), [1.3])
    m = MatrixSlowdown(np.array([[1.0, 1.2], [1.7, 1.0]]), np.array([0, 1, 1]))
    np.testing.assert_allclose(m.pair(np.array([0, 1]), np.array([2, 0])), [1.2, 1.7])
    with pytest.raises(GpupredError, match="slowdown matrix"):
        MatrixSlowdown(np.ones((2, 2)), np.array([0, 5]))


def test_metrics_and_timeseries() -> None:
    res = simulate(jobs({"util": 60.0}), Cluster(1, 2, CAP), SlotPolicy())
    assert res.metrics["avg_util"] == pytest.approx(30.0)  # one of two GPUs at 60 %
    ts = res.util_over_time(50.0)
    np.testing.assert_allclose(ts.util, [30.0, 30.0])
    flat = report_metrics([res])
    assert flat["sim_slot_avg_util"] == pytest.approx(30.0) and "sim_slot_mean_wait_s" in flat
    assert list(metrics_table([res]).policy) == ["slot"]
    assert set(util_timeseries([res], 50.0).policy) == {"slot"}


def test_job_too_big_for_gpu_rejected() -> None:
    with pytest.raises(GpupredError, match="need more memory"):
        simulate(jobs({"mem": 90_000.0}), one_gpu(), SlotPolicy())


def test_all_policies_on_small_synthetic_trace() -> None:
    table = fixture_workload_table(6)
    trace = synthetic_trace(table, 400, n_gpus=8, load=1.3, seed=3, median_duration_s=600)
    assert trace.equals(synthetic_trace(table, 400, n_gpus=8, load=1.3, seed=3, median_duration_s=600))
    cluster = Cluster(2, 4, gpu_memory_mib=24_000.0)
    results = []
    for name in ("slot", "reactive", "proactive", "ours"):
        sim = Simulator(trace, cluster, BaselineSlowdown(trace.true_util.to_numpy()))
        res = sim.run(make_policy(name))
        assert res.jobs.finish_s.notna().all()
        assert (res.jobs.jct_s >= trace.work_s.to_numpy() - 1e-6).all()
        assert sim.max_view_mem_frac <= 1.0 + 1e-9
        assert 0 < res.metrics["avg_util"] <= 100
        results.append(res)
    # packing helps queueing on an overloaded cluster
    m = metrics_table(results).set_index("policy")
    assert m.loc["ours", "mean_wait_s"] < m.loc["slot", "mean_wait_s"]
    with pytest.raises(GpupredError, match="unknown policy"):
        make_policy("fifo")


def test_trace_csv_loader(tmp_path: Path) -> None:
    table = fixture_workload_table(5)
    csv = tmp_path / "trace.csv"
    csv.write_text(
        "JobID,submit_time,duration,num_gpus\n"
        "a,2020-10-01 00:00:10,100,1\nb,2020-10-01 00:00:00,50,1\nc,2020-10-01 00:01:00,70,4\nd,2020-10-01 00:02:00,10,0\n"
    )
    t = load_trace_csv(csv, table)
    assert list(t.job_id) == ["b", "a"] and t.arrival_s.tolist() == [0.0, 10.0] and t.work_s.tolist() == [50.0, 100.0]
    assert t.kind.equals(load_trace_csv(csv, table).kind)  # deterministic mapping
    assert set(t.workload_id) <= set(table.workload_id)
    split = load_trace_csv(csv, table, multi_gpu="split")
    assert len(split) == 6 and split.job_id.str.startswith("c.g").sum() == 4


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("job_id,duration,gpu_num\n1,10,1\n", "no submit column"),
        ("job_id,submit_time,duration,gpu_num\n1,0,ten,1\n", "'duration' row 2"),
        ("job_id,submit_time,duration,gpu_num\n1,0,10,-1\n", "'gpu_num' row 2"),
        ("job_id,submit_time,duration,gpu_num\n1,yesterday-ish,10,1\n", "neither seconds nor a date"),
        ("job_id,submit_time,duration,gpu_num\n1,0,10,2\n", "no single-GPU jobs"),
        ("", "not a readable CSV"),
    ],
)
def test_trace_csv_errors_name_the_file(tmp_path: Path, text: str, match: str) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text(text)
    with pytest.raises(GpupredError, match=match) as err:
        load_trace_csv(csv, fixture_workload_table(3))
    assert str(csv) in str(err.value) and "\n" not in str(err.value)


def test_trace_csv_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GpupredError, match="not found"):
        load_trace_csv(tmp_path / "nope.csv", fixture_workload_table(3))
