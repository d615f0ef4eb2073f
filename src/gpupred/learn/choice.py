"""The model notebook 03 chose per target: the file notebooks 04 (explanations) and 08 (the predictor) read.

Contract of ``data/processed/model_choice.json`` (``config.MODEL_CHOICE``), a JSON object:

- ``schema``: :data:`SCHEMA_VERSION`;
- ``dataset_fingerprint``: :func:`gpupred.dataset.dataset_fingerprint` of the dataset the choice was made on.
  Readers refuse a file made from another dataset: a stale choice is never consumed;
- ``models``: ``{target: regressor}``, each regressor a name of :data:`gpupred.learn.regressors.REGRESSORS`,
  chosen by a grouped inner cross-validation over every labelled row
  (:func:`gpupred.learn.nested.choose_for_export`). The score that chose it is a selection score, not a
  performance figure, and is not in the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from gpupred import config
from gpupred.dataset import dataset_fingerprint
from gpupred.errors import GpupredError, MissingInput
from gpupred.files import atomic_write_bytes, read_json_object

SCHEMA_VERSION = 1
KEYS: tuple[str, ...] = ("schema", "dataset_fingerprint", "models")


def check_choice(choice: dict[str, object], source: str = "model choice") -> dict[str, str]:
    """The ``models`` of a model-choice object, checked against the contract (keys, schema, known regressors)."""
    from gpupred.learn.regressors import REGRESSORS

    missing = [k for k in KEYS if k not in choice]
    if missing:
        raise GpupredError(f"{source}: missing keys {missing} of the model-choice contract (gpupred.learn.choice)")
    if choice["schema"] != SCHEMA_VERSION:
        raise GpupredError(f"{source}: schema {choice['schema']!r}, expected {SCHEMA_VERSION}; re-run notebook 03")
    models = choice["models"]
    if not isinstance(models, dict) or not models:
        raise GpupredError(f"{source}: 'models' must map at least one target to a regressor")
    unknown = {t: m for t, m in models.items() if m not in REGRESSORS}
    if unknown:
        raise GpupredError(f"{source}: unknown regressors {unknown}; known: {', '.join(REGRESSORS)}")
    return {str(t): str(m) for t, m in models.items()}


def write_model_choice(models: dict[str, str], dataset: pd.DataFrame, path: Path | None = None) -> Path:
    """Write the chosen regressor per target with the fingerprint of the dataset they were chosen on."""
    choice = {"schema": SCHEMA_VERSION, "dataset_fingerprint": dataset_fingerprint(dataset), "models": dict(models)}
    check_choice(choice)
    path = Path(path) if path is not None else config.MODEL_CHOICE
    atomic_write_bytes(path, (json.dumps(choice, indent=2, sort_keys=True) + "\n").encode())
    return path


def read_model_choice(dataset: pd.DataFrame, path: Path | None = None) -> dict[str, str]:
    """``{target: regressor}`` notebook 03 chose for ``dataset``; MissingInput if absent, GpupredError if stale."""
    path = Path(path) if path is not None else config.MODEL_CHOICE
    if not path.is_file():
        raise MissingInput(f"no model choice at {path}: run notebook 03-compare-regressors first")
    choice = read_json_object(path, "re-run notebook 03")
    models = check_choice(choice, str(path))
    if choice["dataset_fingerprint"] != dataset_fingerprint(dataset):
        raise GpupredError(f"{path}: chosen on another dataset than the current one (stale); "
                           "re-run notebook 03-compare-regressors")
    return models
