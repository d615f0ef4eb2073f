"""gpupred.sim on tiny hand-made clusters whose outcome is computed by hand (FIXTURE jobs, not measurements)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures_coloc import fixture_lucid, fixture_predicted_features, fixture_workload_table

from gpupred.colocation.members import baseline_slowdown
from gpupred.colocation.pairtable import lucid_solo_truth, lucid_table
from gpupred.sim.experiment import POLICY_ORDER, Settings, measured_share, policy_metrics, run_trace, tune_settings
from gpupred.sim.metrics import (
    ci_halfwidth, metrics_table, oracle_gain_share, paired_differences, report_metrics, summarize_seeds,
    util_timeseries,
)
from gpupred.sim.policies import RandomPairPolicy, pair_gain
from gpupred.sim.world import World, build_world
from gpupred.errors import GpupredError
from gpupred.sim.cluster import (
    BaselineSlowdown, Cluster, MatrixSlowdown, PairSlowdown, PredictedSlowdown, Simulator, Slowdown, TruthLeak,
    simulate,
)
from gpupred.sim.policies import (
    HorusClasses, HorusPolicy, OursPolicy, ReactivePolicy, SlotPolicy, horus_cost, make_policy,
)
from gpupred.sim.arrivals import load_trace_csv, synthetic_trace

CAP = 80_000.0


class Const(Slowdown):
    """FIXTURE truth: a constant slowdown for every co-located job."""

    def __init__(self, s: float) -> None:
        self.s = s

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.full(len(a), self.s)


def predicted(s: float, n: int = 2) -> PredictedSlowdown:
    """FIXTURE knowledge: every pair of ``n`` jobs (kinds 0..n-1) predicted at ``s`` (upper bound too)."""
    m = np.full((n, n), s)
    return PredictedSlowdown(m, m, np.arange(n))


def jobs(*specs: dict) -> pd.DataFrame:
    """FIXTURE jobs: each spec overrides arrival, work, util, mem, pred_util, pred_mem, pred_mem_high..."""
    rows = []
    for k, s in enumerate(specs):
        util, mem = s.get("util", 40.0), s.get("mem", 10_000.0)
        rows.append({
            "job_id": f"j{k}", "arrival_s": s.get("arrival", 0.0), "work_s": s.get("work", 100.0), "kind": k,
            "true_util": util, "true_mem_mib": mem, "pred_util": s.get("pred_util", util),
            "pred_util_high": s.get("pred_util_high", s.get("pred_util", util)), "pred_mem_mib": s.get("pred_mem", mem),
            "pred_mem_mib_high": s.get("pred_mem_high", s.get("pred_mem", mem)),
        })
    return pd.DataFrame(rows)


def one_gpu() -> Cluster:
    return Cluster(1, 1, gpu_memory_mib=CAP)


def jct(res) -> list[float]:
    return res.jobs.sort_values("job_id").jct_s.round(6).tolist()


# --- two-job cases, computed by hand, for each policy ------------------------------------------------------


def test_slot_serializes_two_jobs() -> None:
    res = simulate(jobs({}, {}), one_gpu(), SlotPolicy(), Const(1.0))
    assert jct(res) == [100.0, 200.0]
    assert res.metrics["makespan_s"] == 200.0 and res.metrics["mean_wait_s"] == 50.0
    assert res.metrics["avg_util"] == pytest.approx(40.0)
    res = simulate(jobs({}, {}), Cluster(1, 2, CAP), SlotPolicy(), Const(1.0))
    assert jct(res) == [100.0, 100.0] and res.metrics["avg_util"] == pytest.approx(40.0)


def test_ours_packs_when_the_predicted_pair_gains() -> None:
    res = simulate(jobs({}, {}), one_gpu(), OursPolicy(predicted(1.4)), Const(1.5))  # gain 2 / 1.4 - 1 > 0
    assert jct(res) == [150.0, 150.0]  # work x true slowdown
    assert res.metrics["mean_wait_s"] == 0.0
    assert res.metrics["avg_util"] == pytest.approx(80 / 1.5)  # min(100, 40/1.5 + 40/1.5)
    assert res.metrics["pairs_modelled"] == 1 and res.metrics["pairs_measured"] == 0


def test_ours_refuses_a_pair_predicted_to_lose_combined_throughput() -> None:
    res = simulate(jobs({}, {}), one_gpu(), OursPolicy(predicted(2.5)), Const(1.1))  # gain 2 / 2.5 - 1 < 0
    assert jct(res) == [100.0, 200.0]  # serialized, although the truth (1.1) would have gained
    assert jct(simulate(jobs({}, {}), one_gpu(), HorusPolicy(), Const(1.1))) == [110.0, 110.0]  # Horus packs
    refuse = OursPolicy(predicted(1.8), min_gain=0.2)  # gain 2 / 1.8 - 1 = 0.11: above 0, below the bar
    assert jct(simulate(jobs({}, {}), one_gpu(), refuse, Const(1.8))) == [100.0, 200.0]


def test_ours_weighs_the_predicted_gain_against_horus_cost() -> None:
    # an empty GPU costs 1.3 x 0.125 + 0.6 = 0.7625 for a 40 %, 10 GB job; beside a partner 1.525 - weight x gain
    res = simulate(jobs({}, {}), Cluster(1, 2, CAP), OursPolicy(predicted(1.0), weight=0.5), Const(1.5))
    assert jct(res) == [100.0, 100.0]  # 1.525 - 0.5 > 0.7625: the empty GPU, as Horus
    res = simulate(jobs({}, {}), Cluster(1, 2, CAP), OursPolicy(predicted(1.0), weight=1.0), Const(1.5))
    assert jct(res) == [150.0, 150.0]  # 1.525 - 1 < 0.7625: a predicted gain of 1 beats the empty GPU
    # among partners, the one of larger predicted gain wins at equal cost: C joins A (gain 1), not B (gain 0.25)
    point = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.6], [1.0, 1.6, 1.0]])
    table = jobs({}, {}, {"arrival": 1.0})
    res = simulate(table, Cluster(1, 2, CAP), OursPolicy(PredictedSlowdown(point, point, np.arange(3)), weight=0.1),
                   Const(1.0))
    gpu = res.jobs.set_index("job_id").gpu
    assert gpu["j2"] == gpu["j0"] != gpu["j1"]


def test_ours_partners_are_the_pairs_whose_predictions_pass_its_bounds() -> None:
    # FIXTURE: six jobs of four workloads (two share one), four of them running alone on four of five GPUs; ours'
    # partners for each waiting job are exactly the running jobs whose predicted pair (looked up per workload when the
    # policy attaches) gains more than min_gain and fails with probability at most max_fail; NaN: no prediction
    point = np.array([[1.0, 1.1, 1.5, 1.0], [1.1, 2.0, 1.2, np.nan], [1.05, 1.3, 1.2, 1.0], [1.0, 1.0, 1.9, 1.0]])
    fail = np.zeros((4, 4))
    fail[1, 0], fail[1, 2], fail[2, 0], fail[2, 2], fail[2, 3] = 0.01, 0.2, np.nan, 0.03, 0.04
    kind = np.array([0, 1, 2, 3, 1, 2])
    knowledge = PredictedSlowdown(point, point * 1.2, kind, fail)
    sim = Simulator(jobs(*[{"mem": 1_000.0}] * 6), Cluster(1, 5, CAP), Const(1.0))
    ours = OursPolicy(knowledge, min_gain=0.1, max_fail=0.05)
    ours.attach(sim)
    for j, g in ((0, 0), (1, 1), (2, 2), (3, 3)):
        assert sim.place(j, g, ours.view)
    for j, partners in ((4, [0]), (5, [1, 2, 3])):  # 4 (workload 1): 1-1 gains 0, 1-2 may fail, 1-3 unknown;
        gpus, mates = ours.candidates(j)  # 5 (workload 2): 2-0 unknown failure (NaN: taken to fail)
        running = np.arange(4)
        both = np.full(4, j)
        gain = pair_gain(knowledge.pair(both, running), knowledge.pair(running, both))
        passes = (gain > 0.1) & (knowledge.fail_probability(both, running) <= 0.05)
        assert gpus[0] == 4 and mates[0] == -1  # the empty GPU first
        assert mates[1:].tolist() == running[passes].tolist() == partners
        assert ours.score(j, gpus, mates).tolist() == (ours.cost(j, gpus, mates) - np.append(0.0, gain[passes])).tolist()



def test_the_counts_of_empty_and_open_gpus_follow_every_placement_and_departure() -> None:
    # FIXTURE: twelve jobs through three GPUs under Horus (which packs and leaves); at every decision the simulator's
    # kept counts equal what its GPU table says
    seen: list[tuple[int, int]] = []

    class Checked(HorusPolicy):
        def schedule(self) -> None:
            sim = self.sim
            assert sim.empty_gpus == int((sim.gpu_n == 0).sum())
            assert sim.open_gpus == int((sim.gpu_n < sim.cluster.max_per_gpu).sum())
            seen.append((sim.empty_gpus, sim.open_gpus))
            super().schedule()

    table = jobs(*[{"arrival": 10.0 * k, "work": 50.0 + 20 * (k % 4), "util": 30.0} for k in range(12)])
    simulate(table, Cluster(1, 3, CAP), Checked(), Const(1.2))
    assert (0, 0) in seen and (3, 3) in seen and any(0 < e < o for e, o in seen)

def test_partner_speeds_up_when_other_finishes() -> None:
    res = simulate(jobs({"work": 100.0}, {"work": 200.0}), one_gpu(), OursPolicy(predicted(1.0)), Const(1.5))
    # A: 100 / (1/1.5) = 150; B did 100 by then, 100 left alone: 250
    assert jct(res) == [150.0, 250.0]


def test_horus_cost_matches_the_published_formula() -> None:
    # GPU with a 60 % job using 8 of 24 GB; a 30 % job of 6 GB: 1.3 x (8/24 + 6/24) + |60 + 30 - 100| / 100 + 1
    assert horus_cost(np.array([60.0]), np.array([8 / 24]), np.array([1.0]), 30.0, 6 / 24)[0] == pytest.approx(1.858333, abs=1e-6)
    # over 100 %: |90 + 30 - 100| x 1.6 / 100 = 0.32
    assert horus_cost(np.array([90.0]), np.array([0.25]), np.array([1.0]), 30.0, 0.25)[0] == pytest.approx(1.3 * 0.5 + 0.32 + 1)
    # an empty GPU: 1.3 x 0.25 + |30 - 100| / 100
    assert horus_cost(np.array([0.0]), np.array([0.0]), np.array([0.0]), 30.0, 0.25)[0] == pytest.approx(1.025)


def test_horus_two_jobs_pack_on_one_gpu_and_wait_when_memory_is_short() -> None:
    res = simulate(jobs({}, {}), one_gpu(), HorusPolicy(), Const(1.5))
    assert jct(res) == [150.0, 150.0]
    # predicted memory 2 x 45 GB > 80 GB: the second job waits for the first
    res = simulate(jobs({"mem": 45_000.0}, {"mem": 45_000.0}), one_gpu(), HorusPolicy(), Const(1.5))
    assert jct(res) == [100.0, 200.0]


def test_horus_picks_the_cheapest_partner() -> None:
    # A (90 %) and B (20 %) take the two empty GPUs; C (30 %) then costs 0.32 beside A, 0.50 beside B: A's GPU.
    table = jobs({"util": 90.0}, {"util": 20.0}, {"util": 30.0, "arrival": 1.0})
    res = simulate(table, Cluster(1, 2, CAP), HorusPolicy(), Const(1.0))
    gpu = res.jobs.set_index("job_id").gpu
    assert gpu["j0"] != gpu["j1"] and gpu["j2"] == gpu["j0"]


def test_horus_fair_queueing_over_classes_from_a_history() -> None:
    # One GPU, nothing packs (2 x 50 GB > 80 GB). L runs 0-100; a (class 0) waits from 1; b, c, d (class 1) from
    # 50, 55, 60. At 100: class 0 weight (100 - 1) x 1 = 99, class 1 (100 - 55) x 3 = 135: b starts, not a.
    big = {"mem": 50_000.0}
    table = jobs({**big, "util": 20.0}, {**big, "util": 20.0, "arrival": 1.0}, {**big, "util": 90.0, "arrival": 50.0},
                 {**big, "util": 90.0, "arrival": 55.0}, {**big, "util": 90.0, "arrival": 60.0})
    x = np.log1p(50_000.0) / 10
    classes = HorusClasses(np.array([[0.2, x], [0.9, x]]))  # as if fitted on a separate history
    res = simulate(table, one_gpu(), HorusPolicy(classes), Const(1.0))
    start = res.jobs.set_index("job_id").start_s
    assert start["j2"] == 100.0 and start["j1"] > 100.0
    fifo = simulate(table, one_gpu(), HorusPolicy(), Const(1.0)).jobs.set_index("job_id").start_s
    assert fifo["j1"] == 100.0
    # fitting takes a history, never the trace being scheduled: the policy only assigns
    fitted = HorusClasses.fit(np.array([20.0, 22.0, 90.0, 88.0]), np.array([5e4, 5e4, 5e4, 5e4]), k=2)
    policy = HorusPolicy(fitted)
    before = fitted.centers.copy()
    simulate(table, one_gpu(), policy, Const(1.0))
    np.testing.assert_array_equal(policy.classes.centers, before)


def test_reactive_profiles_then_packs_by_measurement() -> None:
    # Two GPUs: A and B profile alone 0-60 (util 30 % each, measured); at 60 A resumes on an empty GPU and B,
    # measured 30 + 30 <= 100, joins it. Shared at slowdown 1.5 (not > 1.5: no migration): 140 x 1.5 = 210 more.
    table = jobs({"work": 200.0, "util": 30.0}, {"work": 200.0, "util": 30.0})
    res = simulate(table, Cluster(1, 2, CAP), ReactivePolicy(profile_s=60.0), Const(1.5))
    assert jct(res) == [270.0, 270.0]
    assert res.metrics["avg_util"] == pytest.approx((30 * 60 + 20 * 210) / 270)  # (2 x 30 %, then 40 % and 0 %) / 2 GPUs


def test_reactive_profiling_delay() -> None:
    # B arrives at 1 but needs an empty GPU to profile: it waits for A (done at 1000), profiles 60 s, goes on.
    table = jobs({"work": 1000.0}, {"arrival": 1.0, "work": 100.0})
    res = simulate(table, one_gpu(), ReactivePolicy(profile_s=60.0), Const(1.0))
    assert jct(res) == [1000.0, 1099.0]
    assert res.jobs.sort_values("job_id").wait_s.tolist() == [0.0, 999.0]
    # horus packs B at once (slowdown 1)
    res = simulate(table, one_gpu(), HorusPolicy(), Const(1.0))
    assert jct(res) == [1000.0, 100.0]


def test_reactive_migrates_when_slowdown_crosses_threshold() -> None:
    table = jobs({"work": 200.0, "util": 30.0}, {"work": 200.0, "util": 30.0})
    res = simulate(table, Cluster(1, 2, CAP), ReactivePolicy(profile_s=60.0, migrate_slowdown=1.5, observe_s=60.0,
                                                             migration_cost_s=10.0), Const(2.0))
    # both profile 0-60 alone; B packs with A at 60; at 120 (s=2 > 1.5) B migrates to the free GPU, +10 s
    assert res.metrics["migrations"] == 1
    assert jct(res) == [230.0, 240.0]


# --- the truth stays the simulator's ----------------------------------------------------------------------


class PeekingOurs(OursPolicy):
    """A CHEAT: decides with the simulator's truth slowdown instead of its predictions."""

    def choose(self, j: int) -> int:
        gpus, mates = self._mates(j)
        if len(gpus) and self.sim.truth.pair(np.full(len(mates), j), mates).min() <= 1.5:
            return int(gpus[0])
        return self._empty_gpu(j)


class PeekingHorus(HorusPolicy):
    """A CHEAT: reads true utilization while deciding."""

    def choose(self, j: int) -> int:
        _ = self.sim.true_util[j]
        return super().choose(j)


@pytest.mark.parametrize("policy", [PeekingOurs(predicted(1.0)), PeekingHorus()], ids=["truth-slowdown", "true-util"])
def test_a_policy_that_reads_the_truth_is_caught(policy) -> None:
    with pytest.raises(TruthLeak, match="read the simulator's truth") as err:
        simulate(jobs({}, {}), one_gpu(), policy, Const(1.2))
    assert "\n" not in str(err.value)


def test_ours_handed_the_truth_matrix_is_caught() -> None:
    measured = np.array([[1.1, 1.3], [1.2, 1.05]])
    truth = PairSlowdown(measured, np.ones((2, 2)), np.arange(2))
    cheat = PredictedSlowdown(measured.copy(), measured * 1.1, np.arange(2))  # the "prediction" is the measurement
    with pytest.raises(TruthLeak, match="equal the simulator's measured truth"):
        simulate(jobs({}, {}), one_gpu(), OursPolicy(cheat), truth)
    # the same object as truth and knowledge: caught the moment ours asks it
    shared = PredictedSlowdown(np.full((2, 2), 1.2), np.full((2, 2), 1.3), np.arange(2))
    with pytest.raises(TruthLeak):
        simulate(jobs({}, {}), one_gpu(), OursPolicy(shared), shared)
    with pytest.raises(GpupredError, match="PredictedSlowdown"):
        OursPolicy(truth)  # type: ignore[arg-type]
    # after a caught run, the truth is usable again by the simulator (seals released)
    res = simulate(jobs({}, {}), one_gpu(), OursPolicy(predicted(1.3)), truth)
    # job 0 at 1/1.3 and job 1 at 1/1.2 (measured): job 1 ends at 120, job 0 then runs alone: 120 + 100 - 120 / 1.3
    assert jct(res) == [pytest.approx(120 + 100 - 120 / 1.3), 120.0] and res.metrics["pairs_measured"] == 1


def test_measured_truth_or_fallback_counted() -> None:
    measured = np.array([[np.nan, 1.3], [1.2, np.nan]])
    truth = PairSlowdown(measured, np.full((2, 2), 2.0), np.array([0, 1, 0]))
    np.testing.assert_allclose(truth.pair(np.array([0, 1, 0]), np.array([1, 0, 2])), [1.3, 1.2, 2.0])
    np.testing.assert_array_equal(truth.measured(np.array([0, 0]), np.array([1, 2])), [True, False])
    # two jobs of kinds 0 and 1: measured; kinds 0 and 0: the fallback model's 2.0
    same = PairSlowdown(measured, np.full((2, 2), 2.0), np.array([0, 0]))
    res = simulate(jobs({}, {}).assign(kind=[0, 0]), one_gpu(), OursPolicy(predicted(1.0)), same)
    assert res.metrics["pairs_modelled"] == 1 and jct(res) == [200.0, 200.0]
    with pytest.raises(GpupredError, match="fallback"):
        PairSlowdown(measured, np.full((2, 2), np.nan), np.arange(2))


# --- memory --------------------------------------------------------------------------------------------------


def test_memory_never_overcommitted_in_policy_view() -> None:
    table = jobs(*({"arrival": float(k), "mem": 30_000.0, "util": 20.0} for k in range(12)))
    cluster = Cluster(1, 3, gpu_memory_mib=CAP, max_per_gpu=2)
    knowledge = PredictedSlowdown(np.ones((12, 12)), np.ones((12, 12)), np.arange(12))
    for policy in (OursPolicy(knowledge), HorusPolicy(), ReactivePolicy(profile_s=5.0)):
        s = Simulator(table, cluster, Const(1.2))
        res = s.run(policy)
        assert s.max_view_mem_frac <= 1.0 and res.metrics["ooms"] == 0
        assert res.jobs.finish_s.notna().all()
    # 3 x 30 GB would not fit; pairs (60 GB) do: the policies did pack
    assert s.max_view_mem_frac == pytest.approx(0.75)


def test_oom_counted_when_prediction_said_it_fits() -> None:
    table = jobs({"mem": 50_000.0, "pred_mem": 30_000.0}, {"mem": 50_000.0, "pred_mem": 30_000.0})
    res = simulate(table, one_gpu(), HorusPolicy(), Const(1.0), oom_restart_s=30.0)
    assert res.metrics["ooms"] == 1
    # the newcomer OOMs at 0, runs alone after the first (100 s) with 30 s restart cost: 230
    assert jct(res) == [100.0, 230.0]
    assert res.jobs.sort_values("job_id").ooms.tolist() == [0, 1]
    # the upper bound protects "ours": 2 x 60 GB > 80 GB, so no pairing and no OOM
    hi = table.assign(pred_mem_mib_high=60_000.0)
    res = simulate(hi, one_gpu(), OursPolicy(predicted(1.0)), Const(1.0))
    assert res.metrics["ooms"] == 0 and jct(res) == [100.0, 200.0]


def test_job_too_big_for_gpu_rejected() -> None:
    with pytest.raises(GpupredError, match="need more memory"):
        simulate(jobs({"mem": 90_000.0}), one_gpu(), SlotPolicy())


# --- slowdown sources, metrics, traces ----------------------------------------------------------------------


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
    np.testing.assert_allclose(res.util_over_time(50.0).util, [30.0, 30.0])
    assert list(metrics_table([res]).policy) == ["slot"]
    assert set(util_timeseries([res], 50.0).policy) == {"slot"}


def test_seed_summary_ci_paired_differences_and_report_keys() -> None:
    runs = pd.DataFrame({"seed": [0, 1, 2] * 2, "policy": ["horus"] * 3 + ["ours"] * 3,
                         "p95_rho": [1.0, 2.0, 3.0, 2.0, 4.0, 6.0], "mean_jct_s": 5.0, "p95_jct_s": 9.0, "ooms": 0,
                         "failed_placements": 0, "throughput": 1.0, "avg_util": 50.0,
                         "mean_wait_s": [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]})
    summary = summarize_seeds(runs).set_index("policy")
    assert summary.loc["horus", "p95_rho"] == 2.0 and summary.loc["horus", "seeds"] == 3
    assert summary.loc["horus", "p95_rho_ci"] == pytest.approx(4.302653 / np.sqrt(3), rel=1e-5)  # t(0.975, 2) x 1 / sqrt 3
    assert summary.loc["horus", "mean_jct_s_ci"] == 0.0
    diff = paired_differences(runs).set_index("comparison")
    assert list(diff.index) == ["ours_minus_horus"]
    assert diff.loc["ours_minus_horus", "p95_rho"] == 2.0 and diff.loc["ours_minus_horus", "mean_wait_s"] == -1.0
    flat = report_metrics(summarize_seeds(runs), paired_differences(runs), prefix="sim_x")
    for key in ("sim_x_horus_p95_rho", "sim_x_horus_p95_rho_ci", "sim_x_ours_minus_horus_p95_rho_ci",
                "sim_x_ours_failed_placements", "sim_x_ours_minus_horus_throughput"):
        assert key in flat
    assert np.isnan(ci_halfwidth(np.array([1.0])))


def test_oracle_gain_share_is_the_fraction_of_the_oracle_gap_closed() -> None:
    jct_of = {"random": [100.0, 120.0], "oracle": [60.0, 80.0], "horus": [90.0, 110.0], "ours": [70.0, 90.0],
              "slot": [200.0, 220.0]}
    runs = pd.DataFrame([{"seed": s, "policy": p, "mean_jct_s": v[s]} for p, v in jct_of.items() for s in (0, 1)])
    share = oracle_gain_share(runs).set_index("policy")
    assert share.loc["ours", "share"] == pytest.approx(0.75) and share.loc["horus", "share"] == pytest.approx(0.25)
    assert share.loc["random", "share"] == 0.0 and share.loc["oracle", "share"] == 1.0
    assert share.loc["slot", "share"] == pytest.approx(-2.5)
    assert share.loc["ours", "low"] == pytest.approx(0.75) and share.loc["ours", "high"] == pytest.approx(0.75)
    assert oracle_gain_share(runs[runs.policy != "oracle"]).empty


def test_world_from_measured_pairs(tmp_path: Path) -> None:
    pairs, solo, latent = fixture_lucid(24, seed=1)
    table = lucid_table(pairs[pairs.pair_id % 7 != 0], solo)  # some pairs never measured
    truth = lucid_solo_truth(solo)
    feats = fixture_predicted_features(latent[latent.workload_id.notna()])
    world = build_world(table, truth, feats, gpu_memory_mib=24_000.0, n_folds=3)
    assert len(world.workloads) == latent.workload_id.notna().sum()  # jobs without predictions left out
    assert world.notes and "no out-of-fold prediction" in world.notes[0]
    assert 0.5 < world.measured_fraction < 1.0 and np.isfinite(world.fallback).all()
    k = {key: i for i, key in enumerate(world.workloads.job_key)}
    first = table[table.group_id == "lucid-1"]
    assert world.measured[k[first.job_key.iloc[0]], k[first.job_key.iloc[1]]] == pytest.approx(first.slowdown.iloc[0])
    both = np.isfinite(world.measured) & np.isfinite(world.predicted)
    assert not np.allclose(world.predicted[both], world.measured[both])  # predictions, not the measurements
    assert len(world.refs) == 3 and "adapted on 3 co-runs" in world.notes[-1]
    cluster = Cluster(1, 4, world.gpu_memory_mib)
    runs = run_trace(world, lambda s: (synthetic_trace(world.workloads, 200, 4, load=1.2, seed=s,
                                                       median_duration_s=300), cluster), [0, 1], Settings())
    assert list(runs.policy[:6]) == list(POLICY_ORDER) and len(runs) == 12
    assert runs.pairs_measured.sum() > 0 and 0 < measured_share(runs) < 1


def test_all_policies_on_small_synthetic_trace() -> None:
    table = fixture_workload_table(6)
    trace = synthetic_trace(table, 400, n_gpus=8, load=1.3, seed=3, median_duration_s=600)
    assert trace.equals(synthetic_trace(table, 400, n_gpus=8, load=1.3, seed=3, median_duration_s=600))
    cluster = Cluster(2, 4, gpu_memory_mib=24_000.0)
    u = table.true_util.to_numpy()
    knowledge = PredictedSlowdown(baseline_slowdown(u[:, None] + u[None, :] + 5), baseline_slowdown(u[:, None] + u[None, :] + 15),
                                  trace.kind.to_numpy())
    results = []
    for policy in (SlotPolicy(), ReactivePolicy(), HorusPolicy(), OursPolicy(knowledge)):
        s = Simulator(trace, cluster, BaselineSlowdown(trace.true_util.to_numpy()))
        res = s.run(policy)
        assert res.jobs.finish_s.notna().all()
        assert (res.jobs.jct_s >= trace.work_s.to_numpy() - 1e-6).all()
        assert s.max_view_mem_frac <= 1.0 + 1e-9
        assert 0 < res.metrics["avg_util"] <= 100
        results.append(res)
    m = metrics_table(results).set_index("policy")
    assert m.loc["ours", "mean_wait_s"] < m.loc["slot", "mean_wait_s"]  # packing helps an overloaded cluster
    with pytest.raises(GpupredError, match="unknown policy"):
        make_policy("fifo")


def test_trace_csv_loader(tmp_path: Path) -> None:
    """A FIXTURE trace in the Philly/Helios export format (made-up jobs)."""
    table = fixture_workload_table(5)
    csv = tmp_path / "trace.csv"
    csv.write_text(
        "JobID,submit_time,duration,num_gpus\n"
        "a,2020-10-01 00:00:10,100,1\nb,2020-10-01 00:00:00,50,1\nc,2020-10-01 00:01:00,70,4\nd,2020-10-01 00:02:00,10,0\n"
    )
    t = load_trace_csv(csv, table)
    assert list(t.job_id) == ["b", "a"] and t.arrival_s.tolist() == [0.0, 10.0] and t.work_s.tolist() == [50.0, 100.0]
    assert t.kind.equals(load_trace_csv(csv, table).kind)  # deterministic mapping for a seed
    kinds = {tuple(load_trace_csv(csv, table, seed=s).kind) for s in range(8)}
    assert len(kinds) > 1  # seeds map the jobs onto other workloads
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


# --- heterogeneous GPUs, OOM risk, oracle runs ------------------------------------------------------------------


def test_heterogeneous_gpus_best_fit_and_oom_alone() -> None:
    cluster = Cluster(per_gpu_memory_mib=(16_000.0, 32_000.0))
    assert cluster.n_gpus == 2 and cluster.capacity.tolist() == [16_000.0, 32_000.0]
    # Horus knows the 20 GB job does not fit the 16 GB GPU: it takes the 32 GB one at once
    res = simulate(jobs({"mem": 20_000.0}), cluster, HorusPolicy())
    assert res.metrics["ooms"] == 0 and res.jobs["gpu"].tolist() == [1]
    # slot knows no memory: the smallest empty GPU first, an OOM there (+30 s of work), then the larger one
    res = simulate(jobs({"mem": 20_000.0}), cluster, SlotPolicy())
    assert res.metrics["ooms"] == 1 and res.jobs["gpu"].tolist() == [1] and jct(res) == [130.0]
    with pytest.raises(GpupredError, match="32000 MiB GPU even alone"):
        Simulator(jobs({"mem": 40_000.0}), cluster)


def test_ours_refuses_a_pair_whose_point_fits_but_risk_is_high() -> None:
    # points 10 + 10 GB fit 24 GB, but upper bounds of 20 GB each make an OOM likely: ours with a risk cap waits
    cluster = Cluster(1, 1, gpu_memory_mib=24_000.0)
    specs = ({"mem": 10_000.0, "pred_mem_high": 20_000.0}, {"mem": 10_000.0, "pred_mem_high": 20_000.0})
    risky = simulate(jobs(*specs), cluster, OursPolicy(predicted(1.1), max_oom_risk=0.05), Const(1.1))
    assert jct(risky) == [100.0, 200.0]  # serialized
    tight = ({"mem": 10_000.0, "pred_mem_high": 10_500.0}, {"mem": 10_000.0, "pred_mem_high": 10_500.0})
    packed = simulate(jobs(*tight), cluster, OursPolicy(predicted(1.1), max_oom_risk=0.05), Const(1.1))
    assert jct(packed) == [pytest.approx(110.0), pytest.approx(110.0)]


def test_oracle_runs_may_hold_the_truth_but_not_read_it() -> None:
    measured = np.array([[1.1, 1.3], [1.2, 1.05]])
    truth = PairSlowdown(measured, np.ones((2, 2)), np.arange(2))
    copy = PredictedSlowdown(measured.copy(), measured.copy(), np.arange(2))
    res = simulate(jobs({}, {}), one_gpu(), OursPolicy(copy), truth, oracle=True)
    assert res.metrics["n_jobs"] == 2
    with pytest.raises(TruthLeak):
        simulate(jobs({}, {}), one_gpu(), OursPolicy(copy), truth)


def test_a_job_believed_too_big_for_every_gpu_still_runs_on_the_largest() -> None:
    res = simulate(jobs({"mem": 10_000.0, "pred_mem_high": 90_000.0}), one_gpu(), OursPolicy(predicted(1.1)), Const(1.1))
    assert jct(res) == [100.0] and res.metrics["ooms"] == 0


# --- GPU speed and ours' throughput rule (issue 37) --------------------------------------------------------


def test_gpu_speed_scales_run_time_and_the_fastest_empty_gpu_is_taken() -> None:
    slow = Cluster(per_gpu_memory_mib=(CAP,), per_gpu_speed=(0.5,))
    res = simulate(jobs({}), slow, SlotPolicy(), Const(1.0))
    assert jct(res) == [200.0]  # 100 s of work at half speed
    res = simulate(jobs({}, {}), slow, OursPolicy(predicted(1.5)), Const(1.5))
    assert jct(res) == [300.0, 300.0]  # shared: speed / slowdown = 1/3
    two = Cluster(per_gpu_memory_mib=(CAP, CAP), per_gpu_speed=(0.5, 2.0))
    res = simulate(jobs({}), two, SlotPolicy(), Const(1.0))
    assert jct(res) == [50.0] and res.jobs["gpu"].tolist() == [1]
    with pytest.raises(GpupredError, match="per_gpu_speed"):
        _ = Cluster(per_gpu_memory_mib=(CAP, CAP), per_gpu_speed=(1.0,)).speed


def test_observed_slowdown_divides_out_the_gpu_speed() -> None:
    s = Simulator(jobs({}, {}), Cluster(per_gpu_memory_mib=(CAP,), per_gpu_speed=(0.5,)), Const(1.6))
    s.place(0, 0)
    s.place(1, 0)
    assert s.observed_slowdown(0) == pytest.approx(1.6)


def test_pair_gain() -> None:
    assert pair_gain(np.array([1.0, 2.0, 1.5, np.nan]), np.array([1.0, 2.0, 3.0, 1.0])).tolist() == pytest.approx(
        [1.0, 0.0, 1 / 1.5 + 1 / 3 - 1, -np.inf])
    # slowdown 1.8 both ways still gains 2 / 1.8 - 1 > 0 of throughput: ours packs, and both finish by 180 s
    res = simulate(jobs({}, {}), one_gpu(), OursPolicy(predicted(1.8)), Const(1.8))
    assert jct(res) == pytest.approx([180.0, 180.0])


def test_a_measured_failed_pair_fails_at_start_and_ours_avoids_a_predicted_one() -> None:
    failed = np.array([[False, True], [True, False]])
    truth = PairSlowdown(np.full((2, 2), 1.2), np.full((2, 2), 1.2), np.arange(2), failed)
    assert truth.fails(np.array([0, 0]), np.array([1, 0])).tolist() == [True, False]
    res = simulate(jobs({}, {}), one_gpu(), HorusPolicy(), truth)
    assert res.metrics["failed_pairs"] == 1 and res.metrics["ooms"] == 0 and res.metrics["failed_placements"] == 1
    assert jct(res) == [100.0, 230.0]  # the newcomer fails at 0 (+30 s of work), runs after the first
    risky = PredictedSlowdown(np.full((2, 2), 1.25), np.full((2, 2), 1.3), np.arange(2), failed.astype(float))
    res = simulate(jobs({}, {}), one_gpu(), OursPolicy(risky), truth)
    assert res.metrics["failed_placements"] == 0 and jct(res) == [100.0, 200.0]
    with pytest.raises(GpupredError, match="symmetric"):
        PairSlowdown(np.ones((2, 2)), np.ones((2, 2)), np.arange(2), np.array([[False, True], [False, False]]))


def test_random_pairing_takes_an_empty_gpu_then_a_seeded_random_partner() -> None:
    table = jobs({}, {}, {"arrival": 1.0}, {"arrival": 1.0}, {"arrival": 2.0})
    cluster = Cluster(1, 2, CAP)
    first = simulate(table, cluster, RandomPairPolicy(seed=3), Const(1.0)).jobs.set_index("job_id").gpu
    assert first["j0"] != first["j1"]  # two empty GPUs taken first
    again = simulate(table, cluster, RandomPairPolicy(seed=3), Const(1.0)).jobs.set_index("job_id").gpu
    assert first.equals(again)  # seeded
    draws = {tuple(simulate(table, cluster, RandomPairPolicy(seed=s), Const(1.0)).jobs.gpu) for s in range(8)}
    assert len(draws) > 1


def test_rho_and_throughput_by_hand() -> None:
    res = simulate(jobs({}, {}), one_gpu(), SlotPolicy(), Const(1.0))
    assert res.jobs.sort_values("job_id").rho.tolist() == [1.0, 2.0]  # the second waited 100 s for 100 s of work
    assert res.metrics["p95_rho"] == pytest.approx(1.95) and res.metrics["mean_rho"] == pytest.approx(1.5)
    assert res.metrics["throughput"] == pytest.approx(1.0)  # one job's work per second all along
    shared = simulate(jobs({}, {}), one_gpu(), HorusPolicy(), Const(1.5))
    assert shared.metrics["throughput"] == pytest.approx(200.0 / 150.0)  # both at 1 / 1.5 until 150 s
    slow = simulate(jobs({}), Cluster(per_gpu_memory_mib=(CAP,), per_gpu_speed=(0.5,)), SlotPolicy(), Const(1.0))
    assert slow.jobs.rho.tolist() == [1.0]  # its solo run time on that GPU is 200 s


def test_a_setting_is_tuned_on_the_tuning_maker_only() -> None:
    from fixtures_coloc import fixture_workload_table

    table = fixture_workload_table(4)
    n = len(table)
    matrix = np.full((n, n), 1.3)
    world = World("FIXTURE GPU", CAP, table.assign(job_key=table["workload_id"], model_group="g"),
                  np.full((n, n), np.nan), matrix, matrix, matrix * 1.2)
    seen: list[int] = []

    def tuning(seed: int) -> tuple[pd.DataFrame, Cluster]:
        seen.append(seed)
        return synthetic_trace(world.workloads, 60, 2, load=1.5, seed=seed, median_duration_s=300), Cluster(1, 2, CAP)

    settings = Settings()
    grid, best = tune_settings(world, [tuning], [0, 1], settings, [{"min_gain": 0.0}, {"min_gain": 0.9}])
    assert set(seen) == {0, 1} and len(grid) == 2 and best in ({"min_gain": 0.0}, {"min_gain": 0.9})
    # gain 2/1.3 - 1 = 0.54: packing (min_gain 0) beats never packing (0.9) on an overloaded cluster
    assert best == {"min_gain": 0.0} and grid["mean_jct_s"].iloc[0] < grid["mean_jct_s"].iloc[1]
    with pytest.raises(ValueError, match="unknown settings"):
        tune_settings(world, [tuning], [0], settings, [{"speed": 1.0}])
    # a constraint against Horus: never packing (min_gain 0.9) waits longer than Horus, so it is not eligible, and
    # with no eligible change the best of all is kept
    grid, best = tune_settings(world, [tuning], [0, 1], settings, [{"min_gain": 0.0}, {"min_gain": 0.9}],
                               at_most_horus=("mean_jct_s",))
    horus = grid[grid["policy"] == "horus"].iloc[0]
    assert horus["mean_jct_s"] == pytest.approx(policy_metrics(world, tuning, [0, 1], settings, "horus")["mean_jct_s"])
    ours = grid[grid["policy"] == "ours"].set_index("min_gain")
    assert not ours.loc[0.9, "eligible"] and ours.loc[0.9, "mean_jct_s"] > horus["mean_jct_s"]
    assert best == ({"min_gain": 0.0} if ours.loc[0.0, "eligible"] else {"min_gain": float(ours["mean_jct_s"].idxmin())})
    with pytest.raises(GpupredError, match="ours or horus, not 'random'"):
        policy_metrics(world, tuning, [0], settings, "random")
