"""Notebooks 06 (co-location) and 07 (scheduling simulation) on FIXTURE trees (made-up data, not measurements)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupred.colocation import load_colocation

from fixtures_coloc import all_pairs, fixture_dataset, fixture_predictions, fixture_solo, write_raw_tree

pytestmark = pytest.mark.notebook


def _fixture_tree(root: Path, pairs: bool = True) -> Path:
    """data/raw (solo + co-located FIXTURE runs), data/processed/dataset.parquet and a predictions parquet."""
    solo = fixture_solo(8)
    write_raw_tree(root / "data" / "raw", solo, all_pairs(8) if pairs else [], failed=[(0, 1)] if pairs else [])
    (root / "data" / "processed").mkdir(parents=True, exist_ok=True)
    fixture_dataset(solo).to_parquet(root / "data" / "processed" / "dataset.parquet")
    preds = root / "fixture-predictions.parquet"
    fixture_predictions(solo).to_parquet(preds)
    return preds


def test_06_colocation_on_fixture(tmp_path: Path, run_notebook) -> None:
    preds = _fixture_tree(tmp_path)
    run_notebook("06-colocation", {"predictions_path": str(preds), "n_splits": 2})
    metrics = json.loads((tmp_path / "reports" / "metrics.json").read_text())
    for key in ("slowdown_spearman_heldout", "slowdown_mae_heldout", "baseline_slowdown_spearman_heldout",
                "baseline_slowdown_mae_heldout"):
        assert key in metrics
    assert (tmp_path / "reports" / "figures" / "06-slowdown-vs-summed-util.png").exists()
    assert (tmp_path / "data" / "processed" / "colocation.parquet").exists()


def test_06_missing_input_without_colocated_runs(tmp_path: Path, run_notebook) -> None:
    _fixture_tree(tmp_path, pairs=False)
    run_notebook("06-colocation", allow_missing_input=True)
    html = (tmp_path / "reports" / "06-colocation.html").read_text()
    assert "MissingInput" in html and "no co-located runs" in html
    assert not (tmp_path / "reports" / "metrics.json").exists()


def test_07_scheduling_sim_on_fixture(tmp_path: Path, run_notebook) -> None:
    preds = _fixture_tree(tmp_path)
    params = {"predictions_path": str(preds), "nodes": 1, "gpus_per_node": 4, "n_jobs": 150, "loads": [0.6, 1.2],
              "median_duration_s": 300.0, "bin_s": 300.0}
    table, _ = load_colocation(tmp_path / "data" / "raw")  # what notebook 06 writes
    table.to_parquet(tmp_path / "data" / "processed" / "colocation.parquet")
    run_notebook("07-scheduling-sim", params)
    metrics = json.loads((tmp_path / "reports" / "metrics.json").read_text())
    for policy in ("slot", "reactive", "proactive", "ours"):
        for m in ("avg_util", "makespan_s", "mean_jct_s", "mean_wait_s"):
            assert f"sim_{policy}_{m}" in metrics
    assert (tmp_path / "reports" / "figures" / "07-util-over-time.png").exists()
    assert (tmp_path / "reports" / "figures" / "07-sensitivity-to-load.png").exists()


def test_07_missing_input_without_dataset(tmp_path: Path, run_notebook) -> None:
    result = run_notebook("07-scheduling-sim", allow_missing_input=True)
    assert "MissingInput" in result.with_suffix(".html").read_text()
