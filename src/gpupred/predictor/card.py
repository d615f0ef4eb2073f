"""What a predictor's card says of it beside its numbers: the sources it was trained on and under what licence, the
usage restriction that licence passes on, which variant it is (licence-clean or non-commercial), and its baseline
regressors (:func:`baseline_card`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.predictor.predictor import Predictor


def source_cards(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per source in the training data: runs, and for imported sources where and under what licence they came from."""
    from gpupred import importers

    out: dict[str, dict[str, Any]] = {}
    for name, n in df["source"].value_counts().sort_index().items():
        entry: dict[str, Any] = {"n_runs": int(n), "gpus": sorted(df.loc[df["source"] == name, "gpu_name"].unique().tolist())}
        if name in importers.SOURCES:
            src = importers.SOURCES[name]
            entry.update({"upstream_repo": src.repo, "commit": src.commit, "licence": src.licence,
                          "measured": src.measured, "citation": src.citation,
                          "files": {f.path: f.sha256 for f in src.files}})
        else:
            entry.update({"licence": "this project's own measurements (MIT, as the package)", "measured": "gpupred sweeps (NVML)"})
        out[str(name)] = entry
    return out


NON_COMMERCIAL = ("Non-commercial use only: trained on Lucid's measurements (S-Lab License 1.0: redistribution and use for "
                  "non-commercial purposes only, notice retained) and GPUMemNet's (no licence file at the pinned commit; "
                  "later upstream READMEs state CC BY-NC 4.0). The restriction passes to this artifact and its predictions.")


def usage_restriction(df: pd.DataFrame) -> str:
    """The licence restriction a predictor trained on ``df`` inherits ('' when it holds only unrestricted data)."""
    return NON_COMMERCIAL if set(df["source"]) & {"lucid", "gpumemnet"} else ""


LICENCE_CLEAN = "licence-clean: trained on this project's own measurements only (MIT, like the code)"
WITH_IMPORTS = "non-commercial: trained on this project's measurements and the imported published ones"


def licence_clean(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` that this project measured itself (what the default, MIT-licensed predictor trains on)."""
    from gpupred.dataset import own_rows

    return own_rows(df)


def variant(df: pd.DataFrame) -> str:
    """Which artifact a predictor trained on ``df`` is: licence-clean, or non-commercial with imported data."""
    return WITH_IMPORTS if usage_restriction(df) else LICENCE_CLEAN


def own_folds(predictor: Predictor) -> dict[str, dict[str, float]]:
    """Per target, the RMSLE of the artifact's own CV+ folds (workload-grouped, out of fold; the model class was
    chosen beforehand by notebook 03, so this is not a nested estimate)."""
    return {t: {"rmsle": float(np.sqrt(np.mean(m.residuals_ ** 2))), "n_rows": int(len(m.residuals_))}
            for t, m in predictor.targets.items()}


def baseline_card(predictor: Predictor) -> dict[str, Any]:
    """What the card says of the baseline regressors (what answers bare feature rows): inputs, models, intervals,
    their own out-of-fold residuals, and how an unmeasured GPU's intervals widen."""
    return {
        "answers": "feature rows without a graph (a featurize dict, dataset rows)",
        "feature_names": predictor.feature_names,
        "targets": {t: {"transform": "log1p", "model": predictor.model_names[t],
                        "interval": f"CV+ conformal, {1 - predictor.alpha:.0%} nominal, workload-grouped folds; "
                                    "calibrated per source for rows that name their source, pooled otherwise"}
                    for t in predictor.targets},
        "model_names": sorted(set(predictor.model_names.values())),
        "own_folds": own_folds(predictor),
        "extrapolation": {"rule": "a GPU in gpupred.hardware without measurements here is predicted with its hardware "
                                  "features and marked extrapolated: no measurements on this GPU",
                          "interval": {t: w.describe() for t, w in predictor.unseen_widths.items()}},
    }
