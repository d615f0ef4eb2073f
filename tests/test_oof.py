"""The out-of-fold predictions contract (gpupred.learn.oof) on a FIXTURE dataset: round trip and stale refusal."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gpupred.errors import GpupredError
from gpupred.learn.oof import check_oof_step, read_oof_predictions, write_oof_predictions
from gpupred.errors import MissingInput

from fixtures_learning import fixture_dataset


def _fixture_predictions(df: pd.DataFrame) -> pd.DataFrame:
    """FIXTURE predictions: made-up numbers in the contract's columns, one row per dataset run."""
    return pd.DataFrame({"run_id": df["run_id"], "workload_id": df["workload_id"], "gpu": df["gpu"], "source": "fixture",
                         "fold": range(len(df)), "gpu_util": 50.0, "gpu_util_low": 40.0, "gpu_util_high": 60.0})


def test_round_trip_keeps_rows(tmp_path: Path) -> None:
    df = fixture_dataset()
    path = write_oof_predictions(_fixture_predictions(df), df, tmp_path / "oof.parquet")
    back = read_oof_predictions(df, path)
    assert list(back["run_id"]) == list(df["run_id"]) and (back["gpu_util_high"] == 60.0).all()


def test_predictions_of_another_dataset_are_refused(tmp_path: Path) -> None:
    df = fixture_dataset()
    path = write_oof_predictions(_fixture_predictions(df), df, tmp_path / "oof.parquet")
    changed = df.assign(gpu_util=df["gpu_util"] + 1.0)  # the labels moved: the predictions are stale
    with pytest.raises(GpupredError, match="stale"):
        read_oof_predictions(changed, path)


def test_missing_file_and_broken_contract(tmp_path: Path) -> None:
    df = fixture_dataset()
    with pytest.raises(MissingInput, match="notebook 03"):
        read_oof_predictions(df, tmp_path / "none.parquet")
    with pytest.raises(GpupredError, match="fold"):
        write_oof_predictions(_fixture_predictions(df).drop(columns="fold"), df, tmp_path / "oof.parquet")
    with pytest.raises(GpupredError, match="not in the dataset"):
        write_oof_predictions(_fixture_predictions(df), df.iloc[1:], tmp_path / "oof.parquet")


def test_a_model_choice_of_another_step_estimator_is_refused(tmp_path: Path) -> None:
    """The file keeps the parameters of the step estimator that made it (FIXTURE predictions); the exporter's check
    passes the same parameters (as the model choice's JSON gives them back) and refuses others, naming the file."""
    import json

    from gpupred.step.estimator import StepEstimator

    df = fixture_dataset()
    params = StepEstimator(weighting="per_source", alpha=0.1, seed=0).get_params()
    path = write_oof_predictions(_fixture_predictions(df), df, tmp_path / "oof.parquet", step=params)
    check_oof_step(json.loads(json.dumps(params)), path)
    with pytest.raises(GpupredError, match="oof.parquet: made by the step estimator .*same physics_"):
        check_oof_step({**params, "weighting": "pooled"}, path)
    unstamped = write_oof_predictions(_fixture_predictions(df), df, tmp_path / "plain.parquet")
    check_oof_step({**params, "weighting": "pooled"}, unstamped)  # no step estimator made it: nothing to compare
    check_oof_step(params, tmp_path / "none.parquet")

