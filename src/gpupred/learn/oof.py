"""Out-of-fold predictions: the only predictions downstream stages (co-location, scheduling) may read.

Contract of ``data/processed/oof_predictions.parquet`` (``config.OOF_PREDICTIONS``):

- one row per dataset row; columns ``KEY_COLUMNS`` (``run_id``, ``workload_id``, ``gpu``, ``source``,
  ``fold``) then, for each predicted target ``t``, ``t``, ``t_low`` and ``t_high``;
- each row was predicted by models fitted on no row of its own fold, and folds are grouped by
  workload (every run of a workload, on any GPU or source, is in one fold), so no prediction is
  scored, or consumed, on a row its model saw;
- the file's parquet metadata carries ``gpupred.dataset_fingerprint``: the
  :func:`gpupred.dataset.dataset_fingerprint` of the dataset it was computed from. Readers refuse a
  file whose fingerprint differs from the current dataset's: stale predictions are never consumed;
- where the shipped step estimator made the predictions, the metadata carries its parameters too
  (``gpupred.step_params``, JSON). Notebook 03-compare-regressors writes the file and 03-physics-first the model
  choice, each from its own parameters; the exporter refuses a model choice whose step estimator is not the one the
  out-of-fold file (which notebooks 06 and 07 simulate with) was made by (:func:`check_oof_step`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from gpupred import config
from gpupred.dataset import dataset_fingerprint
from gpupred.errors import GpupredError
from gpupred.files import atomic_write

KEY_COLUMNS: tuple[str, ...] = ("run_id", "workload_id", "gpu", "source", "fold")
FINGERPRINT_KEY = b"gpupred.dataset_fingerprint"
STEP_PARAMS_KEY = b"gpupred.step_params"


def check_oof(predictions: pd.DataFrame, source: str = "out-of-fold predictions") -> pd.DataFrame:
    """Check a frame against the contract (key columns, complete targets, one row per run); return it."""
    missing = [c for c in KEY_COLUMNS if c not in predictions.columns]
    if missing:
        raise GpupredError(f"{source}: missing columns {missing} of the out-of-fold contract (gpupred.learn.oof)")
    targets = [c for c in predictions.columns if f"{c}_low" in predictions.columns and f"{c}_high" in predictions.columns]
    if "gpu_util" not in targets:
        raise GpupredError(f"{source}: no gpu_util / gpu_util_low / gpu_util_high columns")
    if predictions["run_id"].duplicated().any():
        raise GpupredError(f"{source}: duplicate run_id values; one row per dataset row")
    return predictions


def write_oof_predictions(predictions: pd.DataFrame, dataset: pd.DataFrame, path: Path | None = None,
                          step: dict[str, Any] | None = None) -> Path:
    """Write out-of-fold predictions with the fingerprint of the dataset they were computed from and, when the shipped
    step estimator made some of them, its parameters (``step``: ``StepEstimator.get_params()``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_oof(predictions)
    extra = set(predictions["run_id"]) - set(dataset["run_id"])
    if extra:
        raise GpupredError(f"out-of-fold predictions name {len(extra)} runs not in the dataset, e.g. {sorted(extra)[0]!r}")
    path = Path(path) if path is not None else config.OOF_PREDICTIONS
    table = pa.Table.from_pandas(predictions.reset_index(drop=True), preserve_index=False)
    meta = {**(table.schema.metadata or {}), FINGERPRINT_KEY: dataset_fingerprint(dataset).encode()}
    if step is not None:
        meta[STEP_PARAMS_KEY] = params_json(step).encode()
    atomic_write(path, lambda fh: pq.write_table(table.replace_schema_metadata(meta), fh))
    return path


def read_oof_predictions(dataset: pd.DataFrame, path: Path | None = None) -> pd.DataFrame:
    """The out-of-fold predictions for ``dataset``; MissingInput if absent, GpupredError if stale."""
    import pyarrow.parquet as pq

    from gpupred.errors import MissingInput

    path = Path(path) if path is not None else config.OOF_PREDICTIONS
    if not path.is_file():
        raise MissingInput(f"no out-of-fold predictions at {path}: run notebook 03-compare-regressors first")
    table = pq.read_table(path)
    stored = (table.schema.metadata or {}).get(FINGERPRINT_KEY, b"").decode()
    if stored != dataset_fingerprint(dataset):
        raise GpupredError(f"{path}: computed from another dataset than the current one (stale); "
                           "re-run notebook 03-compare-regressors")
    return check_oof(table.to_pandas(), str(path))


def params_json(params: dict[str, Any]) -> str:
    """Estimator parameters as the files store them (JSON-safe, keys sorted): two sets compare equal as text."""
    from gpupred.reports import json_safe

    return json.dumps(json_safe(params), sort_keys=True)


def check_oof_step(step: dict[str, Any], path: Path | None = None) -> None:
    """Refuse a step estimator (its parameters, ``step``) other than the one the out-of-fold file's step predictions
    were made by: notebooks 06 and 07 would simulate another estimator than the one shipped. Nothing to check where the
    file is absent or no step estimator made its predictions."""
    import pyarrow.parquet as pq

    path = Path(path) if path is not None else config.OOF_PREDICTIONS
    if not path.is_file():
        return
    stored = (pq.read_schema(path).metadata or {}).get(STEP_PARAMS_KEY)
    if stored is not None and stored.decode() != params_json(step):
        raise GpupredError(f"{path}: made by the step estimator {stored.decode()}, but the model choice ships "
                           f"{params_json(step)}; run both notebooks 03 with the same physics_* parameters")
