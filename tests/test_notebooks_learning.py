"""Notebooks 03, 04, 05, 08 on a FIXTURE dataset.parquet in a temporary GPUPRED_ROOT (never data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures_learning import write_fixture_dataset

pytestmark = pytest.mark.notebook

NOTEBOOKS = ["03-compare-regressors", "04-explain", "05-memory", "08-export-predictor"]
SMALL = {
    "03-compare-regressors": {"targets": ["gpu_util", "memory_mib"], "models": ["ridge", "knn", "xgboost"], "n_repeats": 1,
                              "tune": False, "n_jobs": 1},
    "04-explain": {"tree_models": ["decision_tree", "xgboost"], "n_permutations": 2, "top": 1},
    "05-memory": {"n_repeats": 1},
    "08-export-predictor": {"model": "ridge", "n_folds": 3, "tune": False, "coverage_repeats": 1},
}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_missing_input_skips(name: str, run_notebook, tmp_path: Path) -> None:
    run_notebook(name, SMALL[name], allow_missing_input=True)
    summary = json.loads((tmp_path / "reports" / f"{name}.ipynb").read_text())
    assert "MissingInput" in json.dumps(summary)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_runs_on_fixture_dataset(name: str, run_notebook, tmp_path: Path) -> None:
    write_fixture_dataset(tmp_path, gpus=("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), n_batch_sizes=2)
    run_notebook(name, SMALL[name])
    metrics_path = tmp_path / "reports" / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    figures = list((tmp_path / "reports" / "figures").glob("*.png")) if name != "08-export-predictor" else []
    if name == "03-compare-regressors":
        assert {"util_rmsle_random", "util_rmsle_lofo", "util_rmsle_cross_gpu", "n_runs", "n_families", "gpus"} <= set(metrics)
        assert figures
    elif name == "04-explain":
        assert any("shap-beeswarm" in f.name for f in figures) and any("shap-dependence" in f.name for f in figures)
    elif name == "05-memory":
        assert {"memory_median_rel_err", "memory_p90_rel_err"} <= set(metrics)
    else:
        assert {"util_interval_coverage_random", "util_interval_coverage_lofo"} <= set(metrics)
        assert (tmp_path / "models" / "predictor.joblib").exists() and (tmp_path / "models" / "predictor.json").exists()


def test_export_takes_the_model_notebook_03_chose(run_notebook, tmp_path: Path) -> None:
    """08 with no model named exports 03's choice and carries 03's RMSLE figures in the card (FIXTURE data)."""
    write_fixture_dataset(tmp_path, n_batch_sizes=2)
    run_notebook("03-compare-regressors", {**SMALL["03-compare-regressors"], "models": ["ridge", "knn"]})
    chosen = json.loads((tmp_path / "reports" / "metrics.json").read_text())["util_best_model"]
    run_notebook("08-export-predictor", {**SMALL["08-export-predictor"], "model": ""})
    card = json.loads((tmp_path / "models" / "predictor.json").read_text())
    assert card["targets"]["gpu_util"]["model"] == chosen in ("ridge", "knn")
    assert "util_rmsle_lofo" in card["cv_metrics"] and "util_interval_coverage_lofo" in card["cv_metrics"]
