"""Notebooks 06 (co-location) and 07 (scheduling simulation) on FIXTURE trees (made-up data, not measurements)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NB06, NB07 = "06-colocation.json", "07-scheduling-sim.json"  # reports/metrics/<notebook>.json
from fixtures_coloc import write_fixture_trace_csv, write_notebook_tree

from gpupred.errors import GpupredError

pytestmark = pytest.mark.notebook

POLICIES = ("slot", "reactive", "horus", "ours")
SIM_METRICS = ("avg_util", "makespan_s", "mean_jct_s", "mean_wait_s")
SMALL_07 = {"nodes": 1, "gpus_per_node": 4, "n_jobs": 120, "loads": [], "seeds": [0, 1, 2, 3, 4],
            "median_duration_s": 300.0, "bin_s": 300.0, "n_folds": 3, "lucid": False, "openb": False}


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


def test_06_colocation_on_fixture(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path)
    run_notebook("06-colocation", {"n_folds": 3, "lucid": False})
    metrics = json.loads((tmp_path / "reports" / "metrics" / NB06).read_text())
    for key in ("slowdown_spearman_heldout", "slowdown_mae_heldout", "slowdown_spearman_heldout_baseline_predicted",
                "slowdown_spearman_heldout_baseline_measured", "slowdown_spearman_heldout_by_model",
                "slowdown_spearman_heldout_timeshare_predicted", "slowdown_mae_heldout_timeshare_measured_by_model"):
        assert key in metrics
    assert metrics["memfit_pairs"] > 0 and 0 <= metrics["memfit_q95_coverage"] <= 1
    assert metrics["slowdown_heldout_pairs"] > 0 and metrics["slowdown_excluded_jobs"] >= 2  # the failed pair
    for fig in ("06-slowdown-vs-summed-util", "06-slowdown-model-vs-baselines"):
        assert (tmp_path / "reports" / "figures" / f"{fig}.png").exists()
    assert not (tmp_path / "data" / "processed" / "colocation.parquet").exists()  # nothing reads it: not written


def test_06_refuses_stale_predictions(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path, stale_oof=True)
    with pytest.raises(GpupredError, match="stale"):
        run_notebook("06-colocation", {"n_folds": 3, "lucid": False})


def test_06_missing_input_without_pairs(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path, pairs=False)
    run_notebook("06-colocation", {"lucid": False}, allow_missing_input=True)
    html = (tmp_path / "reports" / "06-colocation.html").read_text()
    assert "MissingInput" in html and "no measured co-located pairs" in html
    assert not (tmp_path / "reports" / "metrics" / NB06).exists()


def test_07_scheduling_sim_on_fixture(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path)
    trace = write_fixture_trace_csv(tmp_path / "fixture-trace.csv")
    run_notebook("07-scheduling-sim", {**SMALL_07, "trace_csv": str(trace)})
    metrics = json.loads((tmp_path / "reports" / "metrics" / NB07).read_text())
    for prefix in ("sim", "sim_trace"):
        for policy in POLICIES:
            for m in SIM_METRICS:
                assert f"{prefix}_{policy}_{m}" in metrics and f"{prefix}_{policy}_{m}_ci" in metrics
        for other in ("slot", "horus"):
            assert f"{prefix}_ours_minus_{other}_mean_jct_s_ci" in metrics
    assert metrics["sim_seeds"] == 5 and 0 <= metrics["sim_pairs_measured_frac"] <= 1
    for fig in ("07-policies-synthetic", "07-util-over-time"):
        assert (tmp_path / "reports" / "figures" / f"{fig}.png").exists()


def test_07_openb_section_on_fixture_files(tmp_path: Path, run_notebook) -> None:
    write_notebook_tree(tmp_path)
    fixture = write_openb_fixture(tmp_path / "openb-fixture")
    params = {**SMALL_07, "n_jobs": 40, "seeds": [0, 1, 2, 3, 4], "openb_fixture_dir": str(fixture), "trace_loads": [1.0],
              "eval_tasks": 60, "tune_frac": 0.3, "tune_oom_risk": [0.05, 1.0], "tune_min_gain": [0.0]}
    run_notebook("07-scheduling-sim", params)
    metrics = json.loads((tmp_path / "reports" / "metrics" / NB07).read_text())
    assert metrics["openb_tasks"] == 160 and metrics["openb_eval_tasks"] == 60
    for quality in ("ours", "perfect", "degraded"):
        for key in ("mean_jct_s", "p95_jct_s", "mean_wait_s", "ooms", "avg_util", "makespan_s"):
            assert f"sim_openb_load1_{quality}_ours_minus_horus_{key}_ci" in metrics
    assert metrics["sim_openb_changed_max_oom_risk"] in (0.05, 1.0) and metrics["sim_openb_changed_min_gain"] == 0.0
    assert 0 <= metrics["sim_gain_truth_gain_positive"] <= 1 and "openb_gpus_speed_fallback" in metrics
    assert "sim_openb_load1_changed_ours_minus_horus_mean_jct_s" in metrics
    html = (tmp_path / "reports" / "07-scheduling-sim.html").read_text()
    assert "ours - Horus mean JCT" in html and (tmp_path / "reports" / "figures" / "07-openb-policies.png").exists()


def test_07_skips_the_public_trace_when_absent(tmp_path: Path, run_notebook) -> None:
    """...and a second run draws the very same figures (bootstrapped intervals are seeded: make all on unchanged
    data changes no committed figure)."""
    write_notebook_tree(tmp_path)
    params = {**SMALL_07, "trace_csv": str(tmp_path / "none.csv"), "loads": [0.8, 1.2]}  # five seeds: bootstrapped CIs
    figures = tmp_path / "reports" / "figures"
    drawn = []
    for _ in range(2):
        run_notebook("07-scheduling-sim", params)
        drawn.append({f.name: f.read_bytes() for f in sorted(figures.glob("07-*.png"))})
    assert len(drawn[0]) == 3 and drawn[0] == drawn[1]
    html = (tmp_path / "reports" / "07-scheduling-sim.html").read_text()
    assert "public-trace section skipped" in html
    metrics = json.loads((tmp_path / "reports" / "metrics" / NB07).read_text())
    assert "sim_ours_avg_util" in metrics and not any(k.startswith("sim_trace_") for k in metrics)
    assert (tmp_path / "reports" / "figures" / "07-sensitivity-to-load.png").exists()


def test_07_missing_input_without_dataset(tmp_path: Path, run_notebook) -> None:
    result = run_notebook("07-scheduling-sim", {"lucid": False}, allow_missing_input=True)
    assert "MissingInput" in result.with_suffix(".html").read_text()
