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

from gpupred.learn.forest import FOREST_MAX_ROWS, Forest, leading_functions
from gpupred.learn.parallel import cores
from gpupred.learn.params import Estimator


THREADED_MIN_ROWS = 2048  # from this many rows the libraries predict on every core given (cores())
DIRECT_MAX_VALUES = 200_000  # cvplus_kth sorts rows x n values directly up to this many


class ConformalRegressor(Estimator):
    """A regressor on log1p targets with CV+ intervals at nominal coverage ``1 - alpha``."""

    APART = ("model", "full_model_", "fold_models_")  # pickled apart: the numpy forest answers a few rows without them

    def __init__(self, model: Any, alpha: float = 0.1, n_folds: int = 5, seed: int = 0) -> None:
        self.model = model
        self.alpha = alpha
        self.n_folds = n_folds
        self.seed = seed

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None,
            strata: np.ndarray | None = None) -> "ConformalRegressor":
        """Fit the full model and the K fold models; keep out-of-fold residuals (and each row's stratum)."""
        from sklearn.base import clone
        from sklearn.model_selection import GroupKFold, KFold

        for cache in ("_offsets_cache", "_constant_cache"):  # what an earlier fit's residuals and models answered
            self.__dict__.pop(cache, None)
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
        self.n_folds_ = len(self.fold_models_)
        self.forest_pending()
        return self

    def build_forest(self) -> Forest | None:
        """The numpy forest of the full and fold models (None unless tree ensembles it reproduces)."""
        return Forest.from_models([self.full_model_, *self.fold_models_])

    def model_predictions(self, X: np.ndarray) -> np.ndarray:
        """Predictions of the full model and each fold model, shape (1 + K, rows), on the log1p scale.

        A few rows go through the numpy forest where it is built or worth building (the same numbers, without each
        library's per-call overhead: :meth:`few_rows_forest`); more go to the libraries, several threads each.
        """
        forest = self.few_rows_forest() if len(X) <= FOREST_MAX_ROWS else None
        if forest is not None:
            return forest.predict(X)
        models = [self.full_model_, *self.fold_models_]
        threads = cores() if len(X) >= THREADED_MIN_ROWS else 1
        shared = leading_functions(models[0])
        shared = shared if all(leading_functions(m)[:len(shared)] == shared for m in models) else []
        Z = X
        for func in shared:  # the models' common input transform, applied once rather than 1 + K times
            Z = func(Z)
        return np.stack([np.asarray(fast_predict(m, Z, threads, applied=len(shared)), dtype=float) for m in models])

    def predict_log(self, X: np.ndarray, strata: np.ndarray | None = None,
                    preds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(point, low, high) on the log1p scale; with ``strata`` (and strata given at fit) Mondrian quantiles.

        ``preds``: :meth:`model_predictions` of ``X`` when already known.
        """
        X = np.asarray(X, dtype=float)
        if preds is None and len(X) and self.constant():
            return self._constant_log(X, strata)
        preds = self.model_predictions(X) if preds is None else preds
        point, fold_pred = preds[0], preds[1:]  # (K, m)
        lo, hi = np.empty(len(point)), np.empty(len(point))
        fitted_strata = self.strata_
        if strata is None or fitted_strata is None:
            lo[:], hi[:] = self._bounds(fold_pred, None)
        else:
            strata = np.asarray(strata).astype(str)
            need = int(np.ceil(1 / self.alpha)) - 1  # fewer training rows give an infinite upper quantile
            for s in np.unique(strata):
                cols = np.flatnonzero(strata == s)
                own = int((fitted_strata == s).sum()) >= need
                lo[cols], hi[cols] = self._bounds(fold_pred[:, cols], s if own else None)
        return point, np.minimum(lo, point), np.maximum(hi, point)

    def constant(self) -> bool:
        """Whether every model (the full one and each fold's) predicts one value whatever the row: its numpy forest,
        once built, holds no tree (a correction shrunk to its median, :class:`gpupred.step.correction.ShrunkCorrection`
        at weight 0). A row's answer then depends on its stratum alone."""
        forest = self.__dict__.get(self.FOREST)
        return forest is not None and len(forest.roots) == 0

    def _constant_log(self, X: np.ndarray, strata: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`predict_log` of a :meth:`constant` model: each stratum's answer, computed once on one of its rows (CV+
        bounds a row from its own predictions only) and kept."""
        cache = self.__dict__.setdefault("_constant_cache", {})
        labels = np.zeros(len(X), dtype=int) if strata is None else np.asarray(strata).astype(str)
        uniques, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
        out = np.empty((3, len(X)))
        for j, (label, i) in enumerate(zip(uniques.tolist(), first)):
            key = (strata is None, label)
            if key not in cache:  # the regular way, its predictions given
                answer = self.predict_log(X[i:i + 1], None if strata is None else labels[i:i + 1],
                                          self.model_predictions(X[i:i + 1]))
                cache[key] = np.array([a[0] for a in answer])
            out[:, inverse.reshape(-1) == j] = cache[key][:, None]
        return out[0], out[1], out[2]

    def _bounds(self, fold_pred: np.ndarray, stratum: str | None) -> tuple[np.ndarray, np.ndarray]:
        """CV+ lower and upper quantiles for the columns of ``fold_pred`` from the residuals of the training rows
        of ``stratum`` (None: every training row)."""
        lower, upper = self._offsets(-1.0, stratum), self._offsets(1.0, stratum)
        n = sum(len(o) for o in lower)
        k_lo = int(np.floor(self.alpha * (n + 1))) - 1
        k_hi = int(np.ceil((1 - self.alpha) * (n + 1))) - 1
        m = fold_pred.shape[1]
        lo = cvplus_kth(fold_pred, lower, k_lo) if k_lo >= 0 else np.full(m, -np.inf)
        hi = cvplus_kth(fold_pred, upper, k_hi) if k_hi < n else np.full(m, np.inf)
        return lo, hi

    def _offsets(self, sign: float, stratum: str | None = None) -> list[np.ndarray]:
        """Each fold's out-of-fold residuals (of ``stratum``'s training rows, or all) times ``sign``, sorted."""
        cache = self.__dict__.setdefault("_offsets_cache", {})
        if (sign, stratum) not in cache:
            rows = np.ones(len(self.residuals_), bool) if stratum is None else self.strata_ == stratum
            cache[(sign, stratum)] = [np.sort(sign * self.residuals_[rows & (self.fold_of_ == k)])
                                      for k in range(self.n_folds_)]
        return cache[(sign, stratum)]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the sorted-residual and constant-answer caches (rebuilt on first use); the fitted models
        apart where the numpy forest stands in for them (:class:`gpupred.learn.params.PickledApart`)."""
        state = super().__getstate__()
        state.pop("_offsets_cache", None)
        state.pop("_constant_cache", None)
        return state

    def predict(self, X: np.ndarray, strata: np.ndarray | None = None,
                preds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(point, low, high) on the original scale, floored at 0."""
        return tuple(np.clip(np.expm1(a), 0, None) for a in self.predict_log(X, strata, preds))  # type: ignore[return-value]


def cvplus_kth(centers: np.ndarray, offsets: list[np.ndarray], kth: int, max_width: int = 64,
               direct_max_values: int = DIRECT_MAX_VALUES) -> np.ndarray:
    """For every row i, the ``kth`` smallest (0-based) of ``centers[k, i] + offsets[k][j]`` over all folds k and j.

    The same numbers as sorting all n values of every row (CV+'s definition), without building the n x rows
    matrix. ``offsets[k]`` is sorted ascending. Rounding is monotone, so the answer lies between
    ``min_k centers[k, i] + a`` and ``max_k centers[k, i] + a``, ``a`` the ``kth`` smallest of all offsets
    pooled. Per fold, ``searchsorted`` splits the values into those below that bracket (minus a margin far
    larger than rounding), inside it, and above it; only the few inside are gathered and sorted, and the
    answer is the (kth - number below)-th of them. Where fold models disagree, the bracket holds many values:
    it is first halved (:func:`_narrow`, a few ``searchsorted`` per round) until at most ``max_width`` remain;
    rows still wider after that are computed the direct way. Up to ``direct_max_values`` values in all, the
    direct way is used for every row.
    """
    centers = np.asarray(centers, dtype=float)
    n_folds, m = centers.shape
    if m * sum(len(o) for o in offsets) <= direct_max_values:  # few rows: the definition is cheapest
        values = np.concatenate([centers[k][None, :] + offsets[k][:, None] for k in range(n_folds)])
        return np.partition(values, kth, axis=0)[kth]
    merged = np.sort(np.concatenate(offsets))
    a = merged[kth]
    c_min, c_max = centers.min(axis=0), centers.max(axis=0)
    lo, hi = c_min + a, c_max + a
    scale = np.abs(centers).max(axis=0) + np.abs(merged[[0, -1]]).max() + np.abs(lo) + np.abs(hi)
    margin = 16 * np.finfo(float).eps * scale + np.finfo(float).tiny
    lo, hi = _narrow(centers, offsets, kth, lo - margin, hi + margin, margin, max_width)
    starts, counts = [], []
    for k in range(n_folds):
        s = np.searchsorted(offsets[k], lo - centers[k], side="left")
        e = np.searchsorted(offsets[k], hi - centers[k], side="right")
        starts.append(s)
        counts.append(e - s)
    below = np.sum(starts, axis=0)
    inside = np.sum(counts, axis=0)
    rank = kth - below
    out = np.empty(m)
    wide = inside > max_width
    narrow = ~wide
    if narrow.any():
        out[narrow] = _gather_kth(centers[:, narrow], offsets, [s[narrow] for s in starts], [c[narrow] for c in counts],
                                  rank[narrow], int(inside[narrow].max(initial=1)))
    if wide.any():
        rows = np.flatnonzero(wide)
        values = np.concatenate([centers[k][rows][None, :] + offsets[k][:, None] for k in range(n_folds)])  # (n, rows)
        out[rows] = np.partition(values, kth, axis=0)[kth]
    return out


def _count_le(centers: np.ndarray, offsets: list[np.ndarray], rows: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each row in ``rows``, how many ``centers[k, row] + offsets[k][j]`` are <= ``t`` (up to rounding)."""
    return np.sum([np.searchsorted(o, t - centers[k, rows], side="right") for k, o in enumerate(offsets)], axis=0)


def _narrow(centers: np.ndarray, offsets: list[np.ndarray], kth: int, lo: np.ndarray, hi: np.ndarray,
            margin: np.ndarray, width: int, rounds: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Halve each row's bracket [lo, hi] around its kth smallest value until it holds at most ``width`` values.

    Counting at the midpoint is exact up to rounding, which ``margin`` bounds: with at least kth + 1 values
    counted at ``mid`` the answer is <= mid + margin, otherwise it is > mid - margin; so the bracket keeps
    the answer whatever the rounding. Rows that do not get narrow enough in ``rounds`` keep their bracket.
    """
    lo, hi = lo.copy(), hi.copy()
    n_lo = _count_le(centers, offsets, np.arange(len(lo)), lo)
    n_hi = _count_le(centers, offsets, np.arange(len(hi)), hi)
    for _ in range(rounds):
        rows = np.flatnonzero(n_hi - n_lo > width)
        if not len(rows):
            break
        mid = 0.5 * (lo[rows] + hi[rows])
        count = _count_le(centers, offsets, rows, mid)
        up = count >= kth + 1
        hi[rows[up]], n_hi[rows[up]] = mid[up] + margin[rows[up]], count[up]
        lo[rows[~up]], n_lo[rows[~up]] = mid[~up] - margin[rows[~up]], count[~up]
    return lo, hi


def _gather_kth(centers: np.ndarray, offsets: list[np.ndarray], starts: list[np.ndarray], counts: list[np.ndarray],
                rank: np.ndarray, width: int) -> np.ndarray:
    """The rank-th smallest of each row's values inside the bracket (a row x width matrix padded with +inf)."""
    m = centers.shape[1]
    table = np.full((m, max(width, 1)), np.inf)
    filled = np.zeros(m, dtype=np.int64)
    for k, (s, c) in enumerate(zip(starts, counts)):
        total = int(c.sum())
        if not total:
            continue
        rows = np.repeat(np.arange(m), c)
        step = np.arange(total) - np.repeat(np.cumsum(c) - c, c)
        table[rows, filled[rows] + step] = centers[k][rows] + offsets[k][s[rows] + step]
        filled += c
    table.sort(axis=1)
    return table[np.arange(m), rank]


def fast_predict(model: Any, X: np.ndarray, threads: int = 1, applied: int = 0) -> np.ndarray:
    """``model.predict(X)`` for a fitted regressor, without scikit-learn's per-call checks where that is safe.

    A (grid-searched) Pipeline's opening FunctionTransformers are applied as plain functions (``applied``: how
    many of them ``X`` has been through already); a final XGBoost or LightGBM is called directly (the numbers
    are those of ``predict``), other remaining steps through the pipeline's own ``predict``.
    """
    from sklearn.pipeline import Pipeline

    inner = getattr(model, "best_estimator_", model)
    if not isinstance(inner, Pipeline):
        return model.predict(X)
    funcs = leading_functions(inner)
    Z = X
    for func in funcs[applied:]:
        Z = func(Z)
    if len(funcs) < len(inner.steps) - 1:  # a fitted transformer (a scaler) still to come
        return inner[len(funcs):].predict(Z)
    last = inner.steps[-1][1]
    kind = type(last).__name__
    if kind == "XGBRegressor":
        return _xgboost_predict(last, Z, threads)
    if kind == "LGBMRegressor":
        return np.asarray(last.booster_.predict(Z, num_threads=threads), dtype=float)
    return last.predict(Z)


def _xgboost_predict(model: Any, Z: np.ndarray, threads: int) -> np.ndarray:
    """The booster's ``inplace_predict`` on ``threads`` threads: the numbers of ``XGBRegressor.predict``."""
    best = getattr(model, "best_iteration", None)  # set only when trained with early stopping
    rng = (0, best + 1) if best is not None else (0, 0)
    booster = model.get_booster()
    if threads > 1:
        booster.set_param({"nthread": threads})
    try:
        out = booster.inplace_predict(Z, iteration_range=rng, predict_type="value", missing=model.missing,
                                      validate_features=False)
    finally:
        if threads > 1:
            booster.set_param({"nthread": model.n_jobs or 1})
    return np.asarray(out, dtype=float).reshape(len(Z), -1)[:, 0] if np.ndim(out) > 1 else np.asarray(out, dtype=float)
