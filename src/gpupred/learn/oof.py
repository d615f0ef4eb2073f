"""Out-of-fold predictions: the only predictions downstream stages (co-location, scheduling) may read.

Contract of ``data/processed/oof_predictions.parquet`` (``config.OOF_PREDICTIONS``):

- one row per dataset row; columns ``KEY_COLUMNS`` (``run_id``, ``workload_id``, ``gpu``, ``source``,
  ``fold``) then, for each predicted target ``t``, ``t``, ``t_low`` and ``t_high``;
- each row was predicted by models fitted on no row of its own fold, and folds are grouped by
  workload (every run of a workload, on any GPU or source, is in one fold), so no prediction is
  scored, or consumed, on a row its model saw;
- the file's parquet metadata carries ``gpupred.dataset_fingerprint``: the
  :func:`gpupred.dataset.dataset_fingerprint` of the dataset it was computed from. Readers refuse a
  file whose fingerprint differs from the current dataset's: stale predictions are never consumed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gpupred import config
from gpupred.dataset import dataset_fingerprint
from gpupred.errors import GpupredError
from gpupred.files import atomic_write

KEY_COLUMNS: tuple[str, ...] = ("run_id", "workload_id", "gpu", "source", "fold")
FINGERPRINT_KEY = b"gpupred.dataset_fingerprint"


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


def write_oof_predictions(predictions: pd.DataFrame, dataset: pd.DataFrame, path: Path | None = None) -> Path:
    """Write out-of-fold predictions with the fingerprint of the dataset they were computed from."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_oof(predictions)
    extra = set(predictions["run_id"]) - set(dataset["run_id"])
    if extra:
        raise GpupredError(f"out-of-fold predictions name {len(extra)} runs not in the dataset, e.g. {sorted(extra)[0]!r}")
    path = Path(path) if path is not None else config.OOF_PREDICTIONS
    table = pa.Table.from_pandas(predictions.reset_index(drop=True), preserve_index=False)
    meta = {**(table.schema.metadata or {}), FINGERPRINT_KEY: dataset_fingerprint(dataset).encode()}
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
