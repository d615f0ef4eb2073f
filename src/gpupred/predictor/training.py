"""Training a predictor on the dataset (:func:`train_predictor`) and exporting it as models/predictor.joblib with the
card beside it (:func:`export_predictor`); notebook 08's metrics schema (:data:`EXPORT_METRICS`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from gpupred import config
from gpupred.dataset import fingerprint
from gpupred.files import sha256
from gpupred.reports import MetricsSchema
from gpupred.learn.intervals import ConformalRegressor
from gpupred.predictor.card import baseline_card, source_cards, usage_restriction, variant
from gpupred.predictor.extrapolate import unseen_gpu_width
from gpupred.predictor.loading import SCHEMA_VERSION, library_versions
from gpupred.predictor.predictor import Predictor

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.step.estimator import StepEstimator


def train_predictor(df: pd.DataFrame, models: str | dict[str, str] = "xgboost", alpha: float = 0.1, n_folds: int = 5,
                    tune: bool = True, seed: int = 0, min_sm_rows: int = 10, physics: bool = False,
                    step: StepEstimator | None = None) -> Predictor:
    """Fit one CV+ conformal regressor per target (gpu_util, memory_mib, sm_active when recorded) on every row.

    CV+ folds are grouped by workload (as the grouped-random coverage notebook 03 measures) and residuals
    are kept per source for source-calibrated intervals on dataset rows. With ``physics`` it also fits the
    physics-first core (:class:`gpupred.predictor.core.PhysicsCore`), which answers jobs given as graphs and adds
    iteration time and throughput; it needs every row's graph and the dataset's step-model columns. ``step`` is the
    unfitted :class:`gpupred.step.estimator.StepEstimator` it fits (notebook 03's choice; default: its defaults).
    """
    from gpupred.dataset import feature_columns, validate_dataset
    from gpupred.learn.parallel import one_thread
    from gpupred.learn.regressors import make_regressor

    validate_dataset(df)
    feats = feature_columns(df)
    names = ["gpu_util", "memory_mib"] + (["sm_active"] if df.get("sm_active", pd.Series(dtype=float)).notna().sum() >= min_sm_rows else [])
    chosen = {t: (models if isinstance(models, str) else models.get(t) or "xgboost") for t in names}
    targets, widths = {}, {}
    with one_thread():
        for t in names:
            data = df[df[t].notna()]
            X, y = data[feats].to_numpy(float), data[t].to_numpy(float)
            model = make_regressor(chosen[t], tune=tune, seed=seed)
            targets[t] = ConformalRegressor(model, alpha, n_folds, seed).fit(
                X, y, groups=data["workload_id"].astype(str).to_numpy(), strata=data["source"].astype(str).to_numpy())
            widths[t] = unseen_gpu_width(model, X, y, data["gpu"].to_numpy(), data["family"].to_numpy(), alpha)
    measured = {str(k): int(v) for k, v in df["gpu"].value_counts().sort_index().items()}
    core = None
    if physics:  # needs every row's graph (the store's, or an imported network's) and the dataset's phys_* columns
        from gpupred.predictor.core import PhysicsCore

        core = PhysicsCore(alpha, seed, step).fit(df)
    return Predictor(feats, targets, chosen, sorted(df["gpu_name"].unique().tolist()), alpha, measured, widths, core)


def export_predictor(predictor: Predictor, df: pd.DataFrame, path: Path | None = None,
                     heldout: dict[str, Any] | None = None) -> Path:
    """Write the joblib artifact and its JSON card beside it; return the joblib path. ``heldout``: the shipped
    estimators' held-out figures for this variant (notebook 03's, :mod:`gpupred.predictor.heldout`).

    Re-exporting the very same predictor (same bytes, same card) leaves the card, and so its ``created_at``,
    as it was: ``make all`` on unchanged data changes nothing that is committed.
    """
    import joblib

    from gpupred.files import atomic_write, atomic_write_bytes
    from gpupred.reports import json_safe
    from gpupred.predictor.slowdowns import served_of

    path = Path(path) if path is not None else config.PREDICTOR
    predictor.card = {}
    atomic_write(path, lambda fh: joblib.dump(predictor, fh, compress=3))
    card = {
        "schema_version": SCHEMA_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "variant": variant(df),
        "answers": {"graphs": "the core: a job given as a graph (ONNX file, workload id) is answered by the step and "
                              "memory estimators below, physics x a learned correction",
                    "feature_rows": "the baseline regressors: a bare feature row has no kernels for the step model"},
        "core": predictor.core.describe() if predictor.core is not None else
        "none: every job gets the baseline regressors (exported without the physics core)",
        "heldout": heldout or {},
        "slowdown": served_of(predictor).describe(),
        "gpus": predictor.gpus,
        "measured_gpus": predictor.measured_gpus,
        "usage_restriction": usage_restriction(df),
        "sources": source_cards(df),
        "protocol_of_predictions": "a new job is predicted as this project's sweeps measure: NVML polled every 50 ms, "
                                   "a sync every step, device-resident batches (encodings at their defaults)",
        "baseline": baseline_card(predictor),
        "training_data": {"n_runs": int(len(df)), "n_workloads": int(df["workload_id"].nunique()),
                          "families": sorted(df["family"].unique().tolist()),
                          "fingerprint_sha256": fingerprint(df, [*predictor.feature_names, *predictor.targets])},
        "library_versions": library_versions(),
        "sha256": sha256(path),
    }
    card_path = path.with_suffix(".json")
    text = json.dumps(json_safe(card), indent=2) + "\n"
    if not _same_card(card_path, json.loads(text)):
        atomic_write_bytes(card_path, text.encode())
    return path


def _same_card(path: Path, new: dict[str, Any]) -> bool:
    """Whether the card at ``path`` says what the card ``new`` (as JSON reads it) says, its creation time aside."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return {k: v for k, v in old.items() if k != "created_at"} == {k: v for k, v in new.items() if k != "created_at"}


EXPORT_METRICS = MetricsSchema("08-export-predictor", (
    (r"predictor_(sha256|noncommercial_sha256|models|usage_restriction)",
     "the exported artifacts' sha256, baseline regressors and usage restriction"),
))
