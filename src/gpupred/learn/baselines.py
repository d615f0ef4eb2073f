"""Baselines as estimators: what the step and memory estimators are compared with on the same splits.

Each takes dataset rows and returns, per row, its target's point and ``_low``/``_high`` bounds, like the
estimators, so one evaluation loop scores them all (:mod:`gpupred.step.evaluate`, :mod:`gpupred.memory`):

- :class:`ConstantBaseline`: the training rows' mean of log1p(label), its interval their quantiles;
- :class:`RegressorBaseline`: a CV+ regressor (HotCloud/Horus style: graph, GPU and protocol features; no step model,
  no footprint) on log1p(label), calibrated per source on folds grouped as the estimator's are.

The regressors themselves (:mod:`gpupred.learn.regressors`) and their nested comparison (:mod:`gpupred.learn.nested`)
are notebook 03's first half.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.learn.folds import interval_groups
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.params import Estimator

PERCENT_TARGETS: frozenset[str] = frozenset({"gpu_util", "gpu_util_buffered", "sm_active"})


def _frame(index: pd.Index, target: str, pt: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> pd.DataFrame:
    if target in PERCENT_TARGETS:
        pt, lo, hi = (np.clip(a, 0, 100) for a in (pt, lo, hi))
    return pd.DataFrame({target: pt, f"{target}_low": lo, f"{target}_high": hi}, index=index)


class ConstantBaseline(Estimator):
    """The training rows' mean of log1p(``target``), with their ``alpha/2`` and ``1 - alpha/2`` quantiles."""

    def __init__(self, target: str = "gpu_util", alpha: float = 0.1) -> None:
        self.target = target
        self.alpha = alpha

    def fit(self, X: pd.DataFrame, physics: Any = None) -> "ConstantBaseline":
        """Keep the labelled rows' mean and quantiles of log1p(label)."""
        z = np.log1p(X[self.target].dropna().to_numpy(float))
        self.point_ = float(np.expm1(z.mean()))
        self.low_, self.high_ = (float(v) for v in np.expm1(np.quantile(z, [self.alpha / 2, 1 - self.alpha / 2])))
        return self

    def predict(self, X: pd.DataFrame, physics: Any = None) -> pd.DataFrame:
        """The same point and interval for every row."""
        n = len(X)
        return _frame(X.index, self.target, np.full(n, self.point_), np.full(n, self.low_), np.full(n, self.high_))


class RegressorBaseline(Estimator):
    """A CV+ regressor of log1p(``target``) on ``columns`` (default: the dataset's feature columns, which leave out the step
    model's, without the footprint's graph terms), calibrated per source on folds keeping whole ``interval_groups``."""

    def __init__(self, target: str = "gpu_util", model: str = "lightgbm", columns: tuple[str, ...] | None = None,
                 interval_groups: str = "family", alpha: float = 0.1, n_cal: int = 5, seed: int = 0) -> None:
        self.target = target
        self.model = model
        self.columns = columns
        self.interval_groups = interval_groups
        self.alpha = alpha
        self.n_cal = n_cal
        self.seed = seed

    def _regressor(self) -> Any:
        from gpupred.learn.regressors import correction_model, make_regressor

        return correction_model(self.seed) if self.model == "lightgbm" else make_regressor(self.model, tune=False,
                                                                                           seed=self.seed)

    def fit(self, X: pd.DataFrame, physics: Any = None) -> "RegressorBaseline":
        """Fit the CV+ regressor on the labelled rows."""
        from gpupred.dataset import feature_columns
        from gpupred.memory.physics import FOOTPRINT_COLUMNS

        data = X[X[self.target].notna()]
        self.columns_ = list(self.columns or [c for c in feature_columns(data) if c not in FOOTPRINT_COLUMNS])
        self.model_ = ConformalRegressor(self._regressor(), self.alpha, self.n_cal, self.seed).fit(
            data[self.columns_].to_numpy(float), data[self.target].to_numpy(float),
            groups=interval_groups(data, self.interval_groups), strata=data["source"].astype(str).to_numpy())
        return self

    def predict(self, X: pd.DataFrame, physics: Any = None) -> pd.DataFrame:
        """Point and CV+ bounds per row (calibrated on the row's source where it has one)."""
        strata = X["source"].astype(str).to_numpy() if "source" in X.columns else None
        pt, lo, hi = self.model_.predict(X[self.columns_].to_numpy(float), strata)
        return _frame(X.index, self.target, pt, lo, hi)
