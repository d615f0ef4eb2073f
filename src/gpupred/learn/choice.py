"""What notebook 03-physics-first chose, and how the chosen estimators scored: the file notebooks 04 and 08 (the
predictor) read.

Contract of ``data/processed/model_choice.json`` (``config.MODEL_CHOICE``), a JSON object:

- ``schema``: :data:`SCHEMA_VERSION`;
- ``dataset_fingerprint``: :func:`gpupred.dataset.dataset_fingerprint` of the dataset the choice was made on.
  Readers refuse a file made from another dataset: a stale choice is never consumed;
- ``models``: ``{target: regressor}``, the baseline regressors that answer bare feature rows, each a name of
  :data:`gpupred.learn.regressors.REGRESSORS`, chosen by a grouped inner cross-validation over every labelled row
  (:func:`gpupred.learn.nested.choose_for_export`). The score that chose it is a selection score, not a
  performance figure, and is not in the file;
- ``step``: the parameters of the :class:`gpupred.step.estimator.StepEstimator` the predictor ships (``get_params()``:
  the notebook's declared settings, the same the comparison scored);
- ``heldout``: ``{variant: figures}``, the shipped estimators' held-out figures for each predictor variant
  (``default``: scored on this project's runs with only those in training, as the default predictor is trained;
  ``noncommercial``: every source), as :func:`gpupred.predictor.heldout.heldout_figures` gives them. The cards say
  these, never a figure computed on the rows a model was fitted on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from gpupred import config
from gpupred.dataset import dataset_fingerprint
from gpupred.errors import GpupredError, MissingInput
from gpupred.files import atomic_write_bytes, read_json_object

SCHEMA_VERSION = 2  # 2: the shipped step estimator's parameters and the held-out figures per variant
KEYS: tuple[str, ...] = ("schema", "dataset_fingerprint", "models", "step", "heldout")
VARIANTS: tuple[str, ...] = ("default", "noncommercial")


def check_choice(choice: dict[str, object], source: str = "model choice") -> dict[str, str]:
    """The ``models`` of a model-choice object, checked against the contract (keys, schema, known regressors)."""
    from gpupred.learn.regressors import REGRESSORS

    missing = [k for k in KEYS if k not in choice]
    if missing:
        raise GpupredError(f"{source}: missing keys {missing} of the model-choice contract (gpupred.learn.choice)")
    if choice["schema"] != SCHEMA_VERSION:
        raise GpupredError(f"{source}: schema {choice['schema']!r}, expected {SCHEMA_VERSION}; "
                           "re-run notebook 03-physics-first")
    models = choice["models"]
    if not isinstance(models, dict) or not models:
        raise GpupredError(f"{source}: 'models' must map at least one target to a regressor")
    unknown = {t: m for t, m in models.items() if m not in REGRESSORS}
    if unknown:
        raise GpupredError(f"{source}: unknown regressors {unknown}; known: {', '.join(REGRESSORS)}")
    if not isinstance(choice["step"], dict) or not isinstance(choice["heldout"], dict):
        raise GpupredError(f"{source}: 'step' must be the step estimator's parameters and 'heldout' its figures")
    odd = sorted(set(choice["heldout"]) - set(VARIANTS))
    if odd:
        raise GpupredError(f"{source}: unknown predictor variants {odd} under 'heldout'; known: {', '.join(VARIANTS)}")
    return {str(t): str(m) for t, m in models.items()}


def write_model_choice(models: dict[str, str], dataset: pd.DataFrame, path: Path | None = None,
                       step: dict[str, Any] | None = None, heldout: dict[str, Any] | None = None) -> Path:
    """Write the chosen baseline per target, the shipped step estimator's parameters and the held-out figures per
    variant, with the fingerprint of the dataset they were chosen on."""
    from gpupred.reports import json_safe

    choice = {"schema": SCHEMA_VERSION, "dataset_fingerprint": dataset_fingerprint(dataset), "models": dict(models),
              "step": dict(step or {}), "heldout": dict(heldout or {})}
    check_choice(choice)
    path = Path(path) if path is not None else config.MODEL_CHOICE
    atomic_write_bytes(path, (json.dumps(json_safe(choice), indent=2, sort_keys=True) + "\n").encode())
    return path


def read_choice(dataset: pd.DataFrame, path: Path | None = None) -> dict[str, Any]:
    """The whole choice notebook 03 made for ``dataset`` (checked); MissingInput if absent, GpupredError if stale."""
    path = Path(path) if path is not None else config.MODEL_CHOICE
    if not path.is_file():
        raise MissingInput(f"no model choice at {path}: run notebook 03-physics-first first")
    choice = read_json_object(path, "re-run notebook 03-physics-first")
    check_choice(choice, str(path))
    if choice["dataset_fingerprint"] != dataset_fingerprint(dataset):
        raise GpupredError(f"{path}: chosen on another dataset than the current one (stale); "
                           "re-run notebook 03-physics-first")
    return choice


def read_model_choice(dataset: pd.DataFrame, path: Path | None = None) -> dict[str, str]:
    """``{target: regressor}`` notebook 03 chose for ``dataset``; MissingInput if absent, GpupredError if stale."""
    return check_choice(read_choice(dataset, path), str(path or config.MODEL_CHOICE))
