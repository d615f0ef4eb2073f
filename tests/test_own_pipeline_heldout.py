"""Notebook 03's own pipeline-fed runs: held out from the step estimator that predicts them, and their figures
(fixture frames built here; no measured data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpupred.dataset import SOURCE_OWN
from gpupred.step import evaluate


def _fixture_rows() -> pd.DataFrame:
    return pd.DataFrame({
        "source": [SOURCE_OWN] * 4 + ["lucid"],
        "workload_id": ["a", "a", "b", "b", "c"],
        "loader_produce_s": [np.nan, 0.4, np.nan, 0.2, 0.1],  # NaN: a resident batch
        "gpu_util": [95.0, 10.0, 90.0, 40.0, 50.0],
    })


def test_the_fed_runs_are_predicted_by_an_estimator_fitted_on_the_other_own_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def spy(train: pd.DataFrame, test: pd.DataFrame, alpha: float, seed: int) -> pd.DataFrame:
        seen["train"], seen["test"] = train, test
        return test

    monkeypatch.setattr(evaluate, "heldout_rows", spy)
    evaluate.own_pipeline_heldout(_fixture_rows())
    assert seen["train"]["loader_produce_s"].isna().all() and set(seen["train"]["source"]) == {SOURCE_OWN}
    assert list(seen["test"]["gpu_util"]) == [10.0, 40.0]


def test_without_fed_runs_there_is_nothing_to_score() -> None:
    rows = _fixture_rows().assign(loader_produce_s=np.nan)
    assert evaluate.own_pipeline_heldout(rows).empty and evaluate.own_pipeline_metrics(pd.DataFrame()) == {}


def test_the_figures_of_a_fixture_with_known_errors() -> None:
    rows = pd.DataFrame({"gpu_util": [10.0, 40.0, 80.0], "pred_gpu_util": [10.0, 60.0, 70.0],
                         "pred_gpu_util_low": [5.0, 45.0, 50.0], "pred_gpu_util_high": [15.0, 80.0, 75.0],
                         "physics_gpu_util": [10.0, 40.0, 80.0],
                         "iter_time_mean_s": [1.0, 0.5, 0.1], "pred_iter_time_mean_s": [1.1, 0.5, 0.08]})
    f = evaluate.own_pipeline_metrics(rows)
    assert f["pipeline_own_runs"] == 3 and f["pipeline_own_gpu_util_rmsle_physics"] == 0.0
    assert f["pipeline_own_gpu_util_spearman"] == pytest.approx(1.0)
    assert f["pipeline_own_gpu_util_mae_points"] == 10.0 and f["pipeline_own_gpu_util_coverage"] == pytest.approx(1 / 3)
    assert f["pipeline_own_iter_time_mre"] == pytest.approx(0.1)
    logs = np.log1p([10.0, 40.0, 80.0]) - np.log1p([10.0, 60.0, 70.0])
    assert f["pipeline_own_gpu_util_rmsle"] == pytest.approx(np.sqrt(np.mean(logs**2)))
