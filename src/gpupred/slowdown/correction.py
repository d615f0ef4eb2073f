"""The slowdown estimators' learned correction: inputs from the members' features and the log prior, a boosted or
ridge model of the log residual and the grouped folds its inner cross-validation runs on (it is judged by Spearman,
:func:`gpupred.learn.evaluation.spearman`: :class:`gpupred.slowdown.estimator.CorrectedSlowdown` keeps it only where it
ranks better than its prior)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


def group_folds(X: pd.DataFrame, n_folds: int, shuffle: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) rows per fold of whole model groups: test rows are the fold's jobs' rows, train rows the pairs
    with no member in the fold (a test job is in no training pair). Groups are dealt to folds in sorted order, or in
    an order shuffled by seed ``shuffle`` (a repeat of the split)."""
    groups = sorted(set(X["model_group"]) | set(X["partner_group"]))
    if shuffle is not None:
        groups = [groups[i] for i in np.random.default_rng(shuffle).permutation(len(groups))]
    fold_of = {g: k % n_folds for k, g in enumerate(groups)}
    own = X["model_group"].map(fold_of).to_numpy()
    partner = X["partner_group"].map(fold_of).to_numpy()
    return [(np.flatnonzero((own != k) & (partner != k)), np.flatnonzero(own == k)) for k in range(n_folds)]


def correction_features(X: pd.DataFrame, features: list[str], log_prior: np.ndarray) -> np.ndarray:
    """The correction's inputs: log prior, own and partner features (log1p of non-negative ones)."""
    cols = [log_prior]
    for f in features:
        for side in ("own", "partner"):
            v = X[f"{side}_{f}"].to_numpy(float)
            cols.append(np.log1p(np.maximum(v, 0.0)) if np.nanmin(np.append(v, 0.0)) >= 0 else v)
    return np.column_stack(cols)


@dataclass(frozen=True)
class CorrectionSetting:
    """One setting of the correction: its model of the log residual and the weight of the log correction it adds."""

    model: str  # "boosted" (gradient boosting) or "linear" (ridge)
    weight: float  # the prior's log is moved by weight x the model's log correction

    def describe(self) -> str:
        """A short label, e.g. 'boosted x 0.5'."""
        return f"{self.model} x {self.weight:g}"


CORRECTION_GRID: dict[str, CorrectionSetting] = {  # the settings tried against the prior, by the name a choice keeps
    "boosted": CorrectionSetting("boosted", 1.0), "boosted_half": CorrectionSetting("boosted", 0.5),
    "linear": CorrectionSetting("linear", 1.0),
}


def single_thread() -> Any:
    """A context that keeps OpenMP to one thread: small fits run far faster than with threads on a shared CPU."""
    from gpupred.learn.parallel import one_thread

    return one_thread("openmp")


def fit_correction(model: str, x: np.ndarray, resid: np.ndarray, seed: int) -> Any:
    """A ``"boosted"`` (gradient boosting) or ``"linear"`` (ridge) model of the log residual on inputs ``x``; the
    boosted one sees only the columns with at least two distinct values (returned with it)."""
    if model == "boosted":
        from sklearn.ensemble import HistGradientBoostingRegressor

        varied = np.array([np.unique(c[np.isfinite(c)]).size > 1 for c in x.T])
        with single_thread():
            fitted = HistGradientBoostingRegressor(max_iter=60, learning_rate=0.1, max_leaf_nodes=7, l2_regularization=1.0,
                                                   min_samples_leaf=max(2, min(40, len(x) // 20)),
                                                   random_state=seed).fit(x[:, varied], resid)
        return fitted, varied
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 3, 12))).fit(np.nan_to_num(x), resid)


def apply_correction(model: str, fitted: Any, x: np.ndarray) -> np.ndarray:
    """The log correction a fitted model predicts on inputs ``x``."""
    if model == "boosted":
        trees, varied = fitted
        with single_thread():
            return trees.predict(x[:, varied])
    return fitted.predict(np.nan_to_num(x))
