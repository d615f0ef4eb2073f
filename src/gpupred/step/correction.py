"""The learned correction of the step estimator: a CV+ regressor of ``measured / physics`` per target.

The regressor (a small LightGBM on signed-log features, :func:`correction_model`) learns ``log(measured /
physics)`` from the job's features and the fitted physics (its log1p target is ``100 x measured / physics``). Its
strength (0, 0.5 or 1 times the learned log-correction, :class:`ShrunkCorrection`) is chosen by an inner CV grouped
like the calibration (families, by default), so a correction that does not carry to unseen families is switched off
by the training rows themselves; its point is bounded by the 2-98 % range of its source's training corrections (a
tree ensemble asked about an unseen family otherwise borrows a leaf of another source's outliers); its intervals
are CV+ conformal, calibrated per source (Mondrian) on folds grouped the same way.

``weighting`` says which training rows a correction learns from: ``pooled`` (all), ``balanced`` (at most
``BALANCED_CAP`` workloads per source, so 3,000 imported MLP runs do not outvote 200 own runs) or ``per_source``
(a row's correction learns from its own source's rows, from every row when its source has fewer than
``MIN_SOURCE_ROWS``, and not at all when its source has none: a correction learns what the step model misses under
one source's protocol and harness, so a source absent from training gets physics alone, with the interval the
pooled correction's calibration gives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from gpupred.columnar import Rows, matrix
from gpupred.errors import GpupredError
from gpupred.learn.folds import inner_splits
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.params import Estimator
from gpupred.step.physics.timeline import STEP_COLUMNS

CORRECTION_FEATURES: tuple[str, ...] = (  # what the correction reads besides the fitted physics
    "batch_size", "params", "flops_train", "activation_bytes", "arithmetic_intensity", "n_nodes", "is_bf16", "is_fp16",
    "is_adam", "host_batches", "sync_kernel", "sync_window", "util_nonzero_only", *STEP_COLUMNS,
)
WEIGHTINGS: tuple[str, ...] = ("pooled", "balanced", "per_source")
SHRINK_WEIGHTS: tuple[float, ...] = (0.0, 0.5, 1.0)  # correction strengths the inner CV chooses from
BALANCED_CAP = 300  # workloads per source the balanced correction keeps (a deterministic sample)
MIN_SOURCE_ROWS = 30  # a source with fewer training rows gets the correction of every training row
BOUND_QUANTILE = 0.02  # a point correction stays within its source's 2-98 % training range (bounded, multiplicative)
BOUND_MIN_ROWS = 20  # a source with fewer training rows is bounded by every training row's range


class ShrunkCorrection(Estimator):
    """A regressor whose predictions are pulled towards the training median by ``1 - weight`` (0: no correction
    beyond a constant factor, 1: the regressor as it is). Its weight is chosen by inner grouped CV."""

    def __init__(self, model: Any = None, weight: float = 1.0) -> None:
        self.model = model
        self.weight = weight

    def fit(self, X: np.ndarray, y: np.ndarray) -> "ShrunkCorrection":
        """Fit the regressor (not at weight 0) and keep the median target."""
        from sklearn.base import clone

        self.center_ = float(np.median(y))
        self.model_ = clone(self.model).fit(X, y) if self.weight > 0 else None
        return self

    def forest_parts(self) -> tuple[Any, float, float]:
        """(the fitted regressor or None, the centre, the weight): what :class:`gpupred.learn.forest.Forest` needs to
        evaluate this correction in numpy with the same numbers."""
        return self.model_, self.center_, float(self.weight)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The shrunk prediction."""
        if self.model_ is None:
            return np.full(len(X), self.center_)
        return self.center_ + self.weight * (np.asarray(self.model_.predict(X), dtype=float) - self.center_)


def correction_features(df: Rows, names: list[str], util: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The correction's inputs: the columns ``names`` of ``df`` (0 where absent) and the log of the fitted physics."""
    cols = matrix(df, names, fill=0.0)  # one conversion, not one per column
    return np.column_stack([cols, np.log(np.maximum(util, 1e-3)), np.log(np.maximum(step, 1e-9))])


def choose_shrink(base: Any, X: np.ndarray, ratio: np.ndarray, groups: np.ndarray, n_inner: int,
                  seed: int) -> ShrunkCorrection:
    """The correction with the strength (``SHRINK_WEIGHTS``) an inner grouped CV on these training rows prefers.

    One fit per inner fold serves every strength (a strength only rescales the fitted model's departure from the
    median); the mean inner RMSLE over folds picks it, ties going to the weaker correction.
    """
    from sklearn.base import clone

    if len(set(groups)) < 3:
        return ShrunkCorrection(base, SHRINK_WEIGHTS[-1])
    z = np.log1p(ratio)
    scores: dict[float, list[float]] = {w: [] for w in SHRINK_WEIGHTS}
    for tr, te in inner_splits(groups, n_inner, seed):
        center = float(np.median(z[tr]))
        pred = np.asarray(clone(base).fit(X[tr], z[tr]).predict(X[te]), dtype=float)
        for w in SHRINK_WEIGHTS:
            scores[w].append(float(np.sqrt(np.mean((center + w * (pred - center) - z[te]) ** 2))))
    best = min(SHRINK_WEIGHTS, key=lambda w: (np.mean(scores[w]), w))
    return ShrunkCorrection(base, best)


def correction_bounds(ratio: np.ndarray, strata: np.ndarray, test_strata: np.ndarray,
                      q: float = BOUND_QUANTILE) -> tuple[np.ndarray, np.ndarray]:
    """Per test row, the range a point correction may take: the ``q`` and ``1 - q`` quantiles of the training
    corrections of its stratum (source), or of all training rows when its stratum has fewer than ``BOUND_MIN_ROWS``."""
    lo, hi = np.empty(len(test_strata)), np.empty(len(test_strata))
    every = np.quantile(ratio, [q, 1 - q])
    for s in np.unique(test_strata):
        own = ratio[strata == s]
        lo[test_strata == s], hi[test_strata == s] = np.quantile(own, [q, 1 - q]) if len(own) >= BOUND_MIN_ROWS else every
    return lo, hi


def balanced_rows(sources: np.ndarray, workloads: np.ndarray, seed: int) -> np.ndarray:
    """Positions of the rows a balanced correction learns from: at most ``BALANCED_CAP`` workloads of each source."""
    rng = np.random.default_rng(seed)
    keep = []
    for s in sorted(set(sources)):
        mine = np.flatnonzero(sources == s)
        chosen = np.unique(workloads[mine])
        if len(chosen) > BALANCED_CAP:
            chosen = rng.choice(chosen, BALANCED_CAP, replace=False)
        keep.append(mine[np.isin(workloads[mine], chosen)])
    return np.sort(np.concatenate(keep)) if keep else np.empty(0, dtype=int)


@dataclass(frozen=True)
class CorrectionSetting:
    """How a correction is fitted: which rows it learns from, its interval level and folds, and its seed."""

    weighting: str = "per_source"
    alpha: float = 0.1
    n_cal: int = 5
    n_inner: int = 3
    seed: int = 0

    def describe(self) -> str:
        """A short label, e.g. 'per_source rows, 90% CV+ intervals on 5 folds, shrink chosen on 3'."""
        return (f"{self.weighting} rows, {1 - self.alpha:.0%} CV+ intervals on {self.n_cal} folds, shrink chosen on "
                f"{self.n_inner}")


class Correction:
    """One target's correction (see the module docstring), fitted on training rows: ``X`` its inputs, ``ratio``
    ``100 x measured / physics``, ``groups`` the calibration groups, ``strata`` each row's source."""

    def __init__(self, setting: CorrectionSetting) -> None:
        self.setting = setting

    def _conformal(self, X: np.ndarray, ratio: np.ndarray, groups: np.ndarray, strata: np.ndarray,
                   rows: np.ndarray) -> ConformalRegressor:
        from gpupred.learn.regressors import correction_model

        s = self.setting
        shrunk = choose_shrink(correction_model(s.seed), X[rows], ratio[rows], groups[rows], s.n_inner, s.seed)
        return ConformalRegressor(shrunk, s.alpha, s.n_cal, s.seed).fit(X[rows], ratio[rows], groups=groups[rows],
                                                                        strata=strata[rows])

    def fit(self, X: np.ndarray, ratio: np.ndarray, groups: np.ndarray, strata: np.ndarray,
            workloads: np.ndarray, asked: Sequence[str] | None = None) -> "Correction":
        """Fit the pooled (or balanced) correction and, under ``per_source``, one per source with enough rows.

        ``asked``: the sources it will be asked about (an evaluation knows its test rows'); a correction none of them
        reads is not fitted. Default: any source, a new one included (what a shipped estimator must answer)."""
        strata = np.asarray(strata).astype(str)
        every = np.arange(len(ratio))
        self.sources_ = sorted(set(strata))
        counts = {s: int((strata == s).sum()) for s in self.sources_}
        asked_set = None if asked is None else {str(a) for a in asked}
        per_source = self.setting.weighting == "per_source"
        own = {s for s in self.sources_ if per_source and counts[s] >= MIN_SOURCE_ROWS
               and (asked_set is None or s in asked_set)}
        needs_pooled = asked_set is None or any(counts.get(a, 0) < MIN_SOURCE_ROWS or not per_source for a in asked_set)
        self.pooled_ = None
        if needs_pooled or any(counts[s] == len(every) for s in own):
            balanced = self.setting.weighting == "balanced"
            rows = balanced_rows(strata, workloads, self.setting.seed) if balanced else every
            self.pooled_ = self._conformal(X, ratio, groups, strata, rows)
        self.by_source_: dict[str, ConformalRegressor] = {}
        for s in sorted(own):
            own_rows = np.flatnonzero(strata == s)
            self.by_source_[s] = self.pooled_ if len(own_rows) == len(every) else self._conformal(
                X, ratio, groups, strata, own_rows)
        self.ratio_, self.strata_ = np.asarray(ratio, dtype=float), strata
        return self

    def _bounds(self, stratum: str) -> tuple[float, float]:
        """:func:`correction_bounds` of a source's rows (fixed once fitted: kept, not recomputed per call)."""
        cache = self.__dict__.setdefault("_bounds_cache", {})
        if stratum not in cache:
            lo, hi = correction_bounds(self.ratio_, self.strata_, np.array([stratum]))
            cache[stratum] = (float(lo[0]), float(hi[0]))
        return cache[stratum]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the bounds cache (rebuilt on first use)."""
        return {k: v for k, v in self.__dict__.items() if k != "_bounds_cache"}

    def predict(self, X: np.ndarray, strata: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(point, low, high) of ``100 x measured / physics`` for rows of sources ``strata``: bounded points; a
        source without training rows (``per_source``) gets 100 (physics alone) with its interval moved around it."""
        strata = np.asarray(strata).astype(str)
        out = [np.full(len(X), np.nan) for _ in range(3)]
        for s in np.unique(strata):
            mask = strata == s
            model = self.by_source_.get(s, self.pooled_)
            if model is None:
                raise GpupredError(f"the correction was fitted for sources {sorted(self.by_source_)} only, not {s!r}")
            pt, lo, hi = model.predict(X[mask], strata[mask])
            lo_b, hi_b = self._bounds(s)
            pt = np.clip(pt, lo_b, hi_b)
            lo, hi = np.minimum(lo, pt), np.maximum(hi, pt)
            if self.setting.weighting == "per_source" and s not in self.sources_:
                lo, hi, pt = 100.0 * lo / pt, 100.0 * hi / pt, np.full(len(pt), 100.0)
            for arr, vals in zip(out, (pt, lo, hi)):
                arr[mask] = vals
        return out[0], out[1], out[2]
