"""The Gavel-matrix world and trace, and notebook 07's goal checks (FIXTURE matrix from tests/fixtures_gavel.py and
FIXTURE openb-layout tasks; nothing here is a measurement)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixtures_gavel import fixture_throughputs

from gpupred.sim.experiment import POLICY_ORDER, Settings, run_trace
from gpupred.sim.openb import homogeneous_scenario
from gpupred.sim.world import World, gavel_world
from gpupred.errors import GpupredError
from gpupred.importers.gavel import tables_from_json
from gpupred.sim import outcomes


@pytest.fixture(scope="module")
def world() -> World:
    return gavel_world(*tables_from_json(fixture_throughputs(), "FIXTURE.json"), "v100", k=3, n_folds=3)


def fixture_tasks(n: int = 120, seed: int = 0) -> pd.DataFrame:
    """FIXTURE trace tasks in gpupred.importers.alibaba's task layout (made up)."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 20_000, n))
    return pd.DataFrame({"task_id": [f"fixture-{k}" for k in range(n)], "arrival_s": arrival, "start_s": arrival,
                         "duration_s": rng.lognormal(6.5, 1.0, n), "num_gpu": 1, "gpu_share": 1.0, "phase": "Succeeded",
                         "censored": False, "cpu_milli": 1000.0, "qos": "LS"})


def test_gavel_world_truth_and_knowledge(world: World) -> None:
    n = len(world.workloads)
    assert n == 19 and world.measured_fraction == 1.0 and world.failed is not None and world.failed.any()
    others = world.workloads.job_key.ne("FixHuge").to_numpy()
    assert not world.failed[np.ix_(others, others)].any()  # only the fixture's huge job fails
    assert np.isfinite(world.predicted).all() and (world.predicted_high >= world.predicted).all()
    assert world.predicted_fail is not None and (world.predicted_fail[world.failed] == 1.0).all()
    assert (world.workloads.true_util == world.workloads.pred_util).all() and (world.workloads.true_mem_mib == 0).all()
    with pytest.raises(GpupredError, match="no utilization estimate"):
        gavel_world(*tables_from_json(fixture_throughputs(), "FIXTURE.json"), "k80")


def test_homogeneous_scenario_sizes_the_cluster_for_the_load(world: World) -> None:
    tasks = fixture_tasks()
    jobs, cluster = homogeneous_scenario(tasks, world.workloads, 1.0, world.gpu_memory_mib)(0)
    span = jobs.arrival_s.max() - jobs.arrival_s.min()
    assert cluster.n_gpus == int(np.ceil(jobs.work_s.sum() / span)) and (cluster.speed == 1.0).all()
    again, _ = homogeneous_scenario(tasks, world.workloads, 1.0, world.gpu_memory_mib)(0)
    other, _ = homogeneous_scenario(tasks, world.workloads, 1.0, world.gpu_memory_mib)(1)
    assert jobs.kind.equals(again.kind) and not jobs.kind.equals(other.kind)  # uniform draws, seeded
    _, loaded = homogeneous_scenario(tasks, world.workloads, 2.0, world.gpu_memory_mib)(0)
    assert loaded.n_gpus < cluster.n_gpus


def test_every_policy_on_the_gavel_trace_and_the_goal_checks(world: World) -> None:
    make = homogeneous_scenario(fixture_tasks(), world.workloads, 1.5, world.gpu_memory_mib)
    runs = run_trace(world, make, [0, 1, 2, 3, 4], Settings()).assign(load=1.5)
    assert set(runs.policy) == set(POLICY_ORDER) and len(runs) == 30
    by = runs.groupby("policy")["failed_placements"].sum()
    assert by["oracle"] == 0 and by["ours"] == 0  # ours' reference co-runs caught FixHuge; the oracle knows
    summary, paired, shares = outcomes.trace_tables(runs)
    assert set(paired.comparison) == {f"{p}_minus_horus" for p in POLICY_ORDER if p != "horus"}
    goals = outcomes.gavel_goals(runs, summary, paired, shares)
    assert goals["sim_gavel_goal_load1p5_ours_failed_placements"] == 0 and goals["sim_gavel_goal_load1p5_zero_failed_met"] == 1
    metrics = outcomes.trace_metrics("sim_gavel", summary, paired, shares)
    assert "sim_gavel_load1p5_ours_minus_horus_p95_rho_ci" in metrics and "sim_gavel_load1p5_ours_oracle_gain_share" in metrics
    assert not any("." in k for k in {**metrics, **goals})
    text = outcomes.closing_markdown({"gavel": (summary, paired, shares)}, goals)
    assert "| ours |" in text and "sim_gavel_goal_load1p5_zero_failed: met" in text


def test_openb_goal_reads_the_interval() -> None:
    paired = pd.DataFrame([{"load": 1.0, "comparison": "ours_minus_horus", "mean_jct_s": -50.0, "mean_jct_s_ci": 20.0,
                            "ooms": 0.0},
                           {"load": 1.5, "comparison": "ours_minus_horus", "mean_jct_s": -50.0, "mean_jct_s_ci": 60.0,
                            "ooms": 0.0}])
    goals = outcomes.openb_goals(paired)
    assert goals["sim_openb_goal_load1_met"] == 1.0 and goals["sim_openb_goal_load1_jct_diff_high"] == -30.0
    assert goals["sim_openb_goal_load1p5_met"] == 0.0  # the interval reaches above 0
    assert outcomes.openb_goals(paired.assign(ooms=1.0))["sim_openb_goal_load1_met"] == 0.0
