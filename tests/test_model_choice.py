"""The model-choice contract (gpupred.learn.choice) on a FIXTURE dataset frame (never data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError, MissingInput
from gpupred.learn.choice import read_choice, read_model_choice, write_model_choice


def test_choice_round_trips_and_refuses_another_dataset(tmp_path: Path) -> None:
    df = fixture_dataset(n_batch_sizes=2)
    path = write_model_choice({"gpu_util": "lightgbm", "memory_mib": "ridge"}, df, tmp_path / "choice.json")
    assert read_model_choice(df, path) == {"gpu_util": "lightgbm", "memory_mib": "ridge"}
    other = df.assign(gpu_util=df["gpu_util"] * 1.01)  # a label changed: the choice was made on other data
    with pytest.raises(GpupredError, match="stale"):
        read_model_choice(other, path)


def test_missing_choice_is_missing_input(tmp_path: Path) -> None:
    with pytest.raises(MissingInput, match="notebook 03"):
        read_model_choice(fixture_dataset(n_batch_sizes=1), tmp_path / "none.json")


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.pop("models"), "missing keys"),
    (lambda c: c.update(schema=99), "schema 99"),
    (lambda c: c.update(models={"gpu_util": "oracle"}), "unknown regressors"),
    (lambda c: c.update(models={}), "at least one target"),
    (lambda c: c.update(step=[]), "'step' must be"),
    (lambda c: c.update(heldout={"commercial": {}}), "unknown predictor variants"),
])
def test_reader_checks_the_contract(edit, message: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    df = fixture_dataset(n_batch_sizes=1)
    path = write_model_choice({"gpu_util": "xgboost"}, df, tmp_path / "choice.json")
    choice = json.loads(path.read_text())
    edit(choice)
    path.write_text(json.dumps(choice))
    with pytest.raises(GpupredError, match=message):
        read_model_choice(df, path)
    path.write_text("{not json")
    with pytest.raises(GpupredError, match="not valid JSON"):
        read_model_choice(df, path)


def test_writer_refuses_an_unknown_regressor(tmp_path: Path) -> None:
    with pytest.raises(GpupredError, match="unknown regressors"):
        write_model_choice({"gpu_util": "oracle"}, fixture_dataset(n_batch_sizes=1), tmp_path / "choice.json")


def test_the_shipped_estimator_and_its_figures_round_trip(tmp_path: Path) -> None:
    """The step estimator's parameters and the held-out figures per variant come back as written."""
    df = fixture_dataset(n_batch_sizes=1)
    figures = {"default": {"gpu_util": {"leave one family out": {"H100 SXM": {"error": 0.2, "metric": "rmsle",
                                                                              "coverage": 0.9, "n": 10}}}}}
    path = write_model_choice({"gpu_util": "xgboost"}, df, tmp_path / "choice.json",
                              step={"weighting": "per_source", "targets": ("gpu_util",)}, heldout=figures)
    choice = read_choice(df, path)
    assert choice["step"] == {"weighting": "per_source", "targets": ["gpu_util"]} and choice["heldout"] == figures
