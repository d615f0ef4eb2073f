"""Conformal prediction intervals (CV+, Barber et al. 2021) on the log1p scale, and their measured coverage.

A short implementation rather than MAPIE: the exported predictor must unpickle with only the light
runtime (numpy, scikit-learn, xgboost, lightgbm), and MAPIE is not one of its dependencies.

CV+: split the training rows into K folds; fit one model per fold on the other folds and keep each
row's out-of-fold absolute residual R_i. For a new x the interval is
``[q_lo{mu_-k(i)(x) - R_i}, q_hi{mu_-k(i)(x) + R_i}]`` with the ⌊α(n+1)⌋-th smallest and ⌈(1-α)(n+1)⌉-th
smallest values; the point estimate is the model fitted on all rows. With ``groups`` (workloads or
families) the folds are whole groups (GroupKFold), so residuals reflect unseen workloads and intervals
widen honestly for them.

Mondrian variant (``strata``, e.g. the source): the quantiles for a row of stratum s use only the
residuals of training rows of stratum s (Vovk et al.'s label-conditional/Mondrian conformal prediction),
so a source whose rows are harder to predict gets wider intervals instead of borrowing the easy source's;
a stratum with fewer than ``ceil(1/alpha) - 1`` training rows falls back to every residual.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, KFold


class ConformalRegressor:
    """A regressor on log1p targets with CV+ intervals at nominal coverage ``1 - alpha``."""

    def __init__(self, model: Any, alpha: float = 0.1, n_folds: int = 5, seed: int = 0) -> None:
        self.model = model
        self.alpha = alpha
        self.n_folds = n_folds
        self.seed = seed

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None,
            strata: np.ndarray | None = None) -> "ConformalRegressor":
        """Fit the full model and the K fold models; keep out-of-fold residuals (and each row's stratum)."""
        self.strata_ = None if strata is None else np.asarray(strata).astype(str)
        X = np.asarray(X, dtype=float)
        z = np.log1p(np.asarray(y, dtype=float))
        n = len(z)
        if groups is not None and len(set(groups)) >= 2:
            k = min(self.n_folds, len(set(groups)))
            folds = list(GroupKFold(k).split(X, z, groups))
        else:
            folds = list(KFold(min(self.n_folds, n), shuffle=True, random_state=self.seed).split(X))
        self.fold_models_: list[Any] = []
        self.fold_of_ = np.empty(n, dtype=int)
        self.residuals_ = np.empty(n, dtype=float)
        for k, (train, test) in enumerate(folds):
            m = clone(self.model).fit(X[train], z[train])
            self.fold_models_.append(m)
            self.fold_of_[test] = k
            self.residuals_[test] = np.abs(z[test] - m.predict(X[test]))
        self.full_model_ = clone(self.model).fit(X, z)
        return self

    def _bounds(self, fold_pred: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CV+ lower and upper quantiles for test columns of ``fold_pred`` from the residuals of training ``rows``."""
        per_row = fold_pred[self.fold_of_[rows]]  # (n, m)
        res = self.residuals_[rows][:, None]
        n = len(rows)
        k_lo = int(np.floor(self.alpha * (n + 1))) - 1
        k_hi = int(np.ceil((1 - self.alpha) * (n + 1))) - 1
        m = fold_pred.shape[1]
        lo = np.partition(per_row - res, k_lo, axis=0)[k_lo] if k_lo >= 0 else np.full(m, -np.inf)
        hi = np.partition(per_row + res, k_hi, axis=0)[k_hi] if k_hi < n else np.full(m, np.inf)
        return lo, hi

    def predict_log(self, X: np.ndarray, strata: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(point, low, high) on the log1p scale; with ``strata`` (and strata given at fit) Mondrian quantiles."""
        X = np.asarray(X, dtype=float)
        point = np.asarray(self.full_model_.predict(X), dtype=float)
        fold_pred = np.stack([np.asarray(m.predict(X), dtype=float) for m in self.fold_models_])  # (K, m)
        everyone = np.arange(len(self.residuals_))
        lo, hi = np.empty(len(point)), np.empty(len(point))
        fitted_strata = getattr(self, "strata_", None)
        if strata is None or fitted_strata is None:
            lo[:], hi[:] = self._bounds(fold_pred, everyone)
        else:
            strata = np.asarray(strata).astype(str)
            need = int(np.ceil(1 / self.alpha)) - 1  # fewer training rows give an infinite upper quantile
            for s in np.unique(strata):
                cols = np.flatnonzero(strata == s)
                rows = np.flatnonzero(fitted_strata == s)
                lo[cols], hi[cols] = self._bounds(fold_pred[:, cols], rows if len(rows) >= need else everyone)
        return point, np.minimum(lo, point), np.maximum(hi, point)

    def predict(self, X: np.ndarray, strata: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(point, low, high) on the original scale, floored at 0."""
        return tuple(np.clip(np.expm1(a), 0, None) for a in self.predict_log(X, strata))  # type: ignore[return-value]


def interval_coverage(
    df: pd.DataFrame,
    target: str,
    model: str = "xgboost",
    schemes: tuple[str, ...] = ("grouped_random", "lofo"),
    alpha: float = 0.1,
    n_repeats: int = 3,
    n_folds: int = 5,
    tune: bool = False,
    seed: int = 0,
) -> pd.DataFrame:
    """Measured coverage and relative width of CV+ intervals per split (one fixed model; one row per (scheme, split)).

    Notebook 03 measures coverage of the nested procedure itself (gpupred.learn.nested); this is the
    fixed-model check.
    """
    from gpupred.dataset import feature_columns
    from gpupred.learn.evaluate import fold_groups, splits_for
    from gpupred.learn.regressors import make_regressor

    data = df[df[target].notna()].reset_index(drop=True)
    X, y = data[feature_columns(data)].to_numpy(float), data[target].to_numpy(float)
    strata = data["source"].to_numpy() if "source" in data.columns else None
    rows = []
    for scheme in schemes:
        groups = fold_groups(data, scheme)
        for train, test, label in splits_for(data, scheme, n_repeats, seed):
            cr = ConformalRegressor(make_regressor(model, tune=tune, seed=seed), alpha, n_folds, seed)
            cr.fit(X[train], y[train], groups=groups[train], strata=None if strata is None else strata[train])
            point, lo, hi = cr.predict(X[test], None if strata is None else strata[test])
            covered = (y[test] >= lo) & (y[test] <= hi)
            rows.append({"scheme": scheme, "split": label, "n_test": len(test), "covered": int(covered.sum()),
                         "coverage": float(covered.mean()),
                         "median_rel_width": float(np.median((hi - lo) / np.maximum(point, 1e-9)))})
    return pd.DataFrame(rows)


def overall_coverage(cov: pd.DataFrame) -> dict[str, float]:
    """Pooled coverage per scheme (covered rows / tested rows)."""
    g = cov.groupby("scheme")[["covered", "n_test"]].sum()
    return {str(s): float(r["covered"] / r["n_test"]) for s, r in g.iterrows()}
