"""Notebooks 06 (co-location) and 07 (scheduling simulation) on FIXTURE trees (made-up data, not measurements)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures_coloc import write_notebook_tree

from gpupred.errors import GpupredError

pytestmark = pytest.mark.notebook

POLICIES = ("slot", "reactive", "random", "horus", "ours", "oracle")
SMALL_07 = {"seeds": [0, 1, 2, 3, 4], "n_folds": 3, "lucid": False, "openb": False, "gavel": False, "trace_loads": [1.0],
            "eval_tasks": 60, "tune_frac": 0.3, "tune_weight": [0.0, 1.0], "tune_oom_risk": [0.05, 0.5], "tune_seeds": 2}


def write_openb_fixture(folder: Path, n: int = 160, seed: int = 0) -> Path:
    """FIXTURE files in the openb layout (made-up tasks and nodes; not rows of the published trace)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    created = np.sort(rng.uniform(0, 20_000, n)).round()
    num = rng.choice([0, 1, 1, 1, 1, 2], n)
    pd.DataFrame({
        "name": [f"fixture-pod-{k}" for k in range(n)], "cpu_milli": 4000, "memory_mib": 8192, "num_gpu": num,
        "gpu_milli": np.where(num == 1, rng.choice([250, 500, 1000], n), np.where(num > 1, 1000, 0)), "gpu_spec": "",
        "qos": "LS", "pod_phase": "Succeeded", "creation_time": created,
        "deletion_time": created + 10 + rng.lognormal(6, 1, n).round(), "scheduled_time": created + 5,
    }).to_csv(folder / "openb_pod_list_default.csv", index=False)
    pd.DataFrame({"sn": [f"fixture-node-{k}" for k in range(8)], "cpu_milli": 64000, "memory_mib": 262144,
                  "gpu": [2, 4] * 4, "model": ["T4", "G2"] * 4}).to_csv(folder / "openb_node_list_gpu_node.csv", index=False)
    return folder


def write_gavel_fixture(path: Path) -> Path:
    """A FIXTURE throughput file in Gavel's layout (made up; tests/fixtures_gavel.py), read without the sha256 pin."""
    from fixtures_gavel import fixture_throughput_text

    path.write_text(fixture_throughput_text())
    return path


SMALL_06 = {"n_folds": 3, "lucid": False, "gavel": False, "max_k": 2, "gavel_gpus": ["v100"]}


def test_06_colocation_on_fixture(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path)
    gavel = write_gavel_fixture(tmp_path / "gavel-fixture.json")
    run_notebook("06-colocation", {**SMALL_06, "gavel_fixture_file": str(gavel)})
    metrics = json.loads((tmp_path / "reports" / "metrics" / "06-colocation.json").read_text())
    own = [k.removeprefix("slowdown_rows_") for k in metrics if k.startswith("slowdown_rows_own_")]
    assert len(own) == 1 and metrics["slowdown_rows_gavel_v100"] > 0
    for name in (*own, "gavel_v100"):
        for metric in ("spearman_pooled", "spearman_cell", "spearman_job", "mae"):
            assert f"slowdown_{metric}_{name}_adapted_k2" in metrics and f"slowdown_{metric}_{name}_corrected" in metrics
    for key in ("sum_util_pred", "timeshare_phys", "timeshare_meas"):
        assert f"slowdown_spearman_pooled_{own[0]}_{key}_unflagged" in metrics
    assert metrics["slowdown_spearman_pooled_gavel_v100_adapted_k2"] > metrics["slowdown_spearman_pooled_gavel_v100_step_share"]
    assert "slowdown_goal_spearman_cell_gavel_v100_met" in metrics and metrics["memfit_pairs"] > 0
    assert not any("." in k for k in metrics)
    html = (tmp_path / "reports" / "06-colocation.html").read_text()
    assert "Closing note (every figure read from this run" in html and "Goal on gavel_v100" in html
    for fig in ("06-slowdowns-by-slice", "06-scoring-table", "06-adaptation-curve"):
        assert (tmp_path / "reports" / "figures" / f"{fig}.png").exists()
    assert not (tmp_path / "data" / "processed" / "colocation.parquet").exists()  # nothing reads it: not written
    choice = json.loads((tmp_path / "data" / "processed" / "slowdown_choice.json").read_text())  # what 08 ships
    assert choice["slice"] == f"own_{own[0].removeprefix('own_')}" and choice["estimator"]["name"] == "timeshare_pred"
    assert choice["interval"]["rows"] == metrics[f"slowdown_rows_{own[0]}"] and choice["interval"]["level"] == 0.9


def test_06_runs_on_gavel_alone_without_a_dataset(tmp_path: Path, run_notebook) -> None:
    gavel = write_gavel_fixture(tmp_path / "gavel-fixture.json")
    run_notebook("06-colocation", {**SMALL_06, "gavel_fixture_file": str(gavel)})
    metrics = json.loads((tmp_path / "reports" / "metrics" / "06-colocation.json").read_text())
    assert "slowdown_rows_gavel_v100" in metrics and not any(k.startswith("slowdown_rows_own") for k in metrics)
    assert not (tmp_path / "data" / "processed" / "slowdown_choice.json").exists()  # no slice of graph jobs


def test_06_refuses_stale_predictions(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path, stale_oof=True)
    with pytest.raises(GpupredError, match="stale"):
        run_notebook("06-colocation", SMALL_06)


def test_06_missing_input_without_pairs(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path, pairs=False)
    run_notebook("06-colocation", SMALL_06, allow_missing_input=True)
    html = (tmp_path / "reports" / "06-colocation.html").read_text()
    assert "MissingInput" in html and "no measured co-located pairs" in html
    assert not (tmp_path / "reports" / "metrics" / "06-colocation.json").exists()


def test_07_scheduling_sim_on_fixture(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path)
    params = {**SMALL_07, "openb_fixture_dir": str(write_openb_fixture(tmp_path / "openb-fixture")),
              "gavel_fixture_file": str(write_gavel_fixture(tmp_path / "gavel-fixture.json"))}
    run_notebook("07-scheduling-sim", params)
    metrics = json.loads((tmp_path / "reports" / "metrics" / "07-scheduling-sim.json").read_text())
    assert metrics["openb_tasks"] == 160 and metrics["openb_eval_tasks"] == 60
    for trace in ("openb", "gavel"):
        for policy in POLICIES:
            for key in ("mean_jct_s", "p95_jct_s", "p95_rho", "ooms", "failed_placements", "throughput"):
                assert f"sim_{trace}_load1_{policy}_{key}_ci" in metrics
        assert f"sim_{trace}_load1_ours_minus_horus_p95_rho_ci" in metrics
        assert f"sim_{trace}_load1_ours_oracle_gain_share" in metrics and f"sim_{trace}_tuned_weight" in metrics
        assert f"sim_{trace}_tuned_max_oom_risk" in metrics
    assert metrics["sim_gavel_load1_oracle_failed_placements"] == 0 and "sim_openb_goal_load1_met" in metrics
    assert "sim_gavel_goal_load1_rho_met" in metrics and not any("." in k for k in metrics)
    html = (tmp_path / "reports" / "07-scheduling-sim.html").read_text()
    assert "Closing note (every figure read from this run" in html
    for fig in ("07-policies-by-trace", "07-p95-rho-by-trace"):
        assert (tmp_path / "reports" / "figures" / f"{fig}.png").exists()


def test_07_runs_the_gavel_trace_without_a_dataset_and_draws_the_same_figures_twice(tmp_path: Path, run_notebook) -> None:
    """...a second run draws the very same figures (intervals are seeded: make all on unchanged data changes no
    committed figure)."""
    params = {**SMALL_07, "openb_fixture_dir": str(write_openb_fixture(tmp_path / "openb-fixture")),
              "gavel_fixture_file": str(write_gavel_fixture(tmp_path / "gavel-fixture.json")), "seeds": [0, 1]}
    figures = tmp_path / "reports" / "figures"
    drawn = []
    for _ in range(2):
        run_notebook("07-scheduling-sim", params)
        drawn.append({f.name: f.read_bytes() for f in sorted(figures.glob("07-*.png"))})
    assert len(drawn[0]) == 2 and drawn[0] == drawn[1]
    metrics = json.loads((tmp_path / "reports" / "metrics" / "07-scheduling-sim.json").read_text())
    assert "sim_gavel_load1_ours_mean_jct_s" in metrics and not any(k.startswith("sim_openb_load") for k in metrics)
    assert "openb world skipped" in (tmp_path / "reports" / "07-scheduling-sim.html").read_text()


def test_07_missing_input_without_the_openb_trace(tmp_path: Path, run_notebook) -> None:
    result = run_notebook("07-scheduling-sim", {**SMALL_07, "openb": False}, allow_missing_input=True)
    html = result.with_suffix(".html").read_text()
    assert "MissingInput" in html and "openb trace" in html
