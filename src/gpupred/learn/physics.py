"""Physics x a learned correction, evaluated on the same outer splits as the regressors.

For each outer split (grouped random, leave-one-family-out, cross-GPU: the splits of
:mod:`gpupred.learn.evaluate` and :mod:`gpupred.learn.crossgpu`):

1. the step model's constants are fitted per (GPU kind, measurement protocol) on the outer **training** rows
   (:func:`gpupred.perf.fit.fit_table`); a pair without training rows keeps the published defaults;
2. the step model predicts every row with them: ``physics`` (utilization for ``gpu_util`` and ``sm_active``, step
   time for ``iter_time_mean_s``);
3. a CV+ conformal regressor (:class:`gpupred.learn.intervals.ConformalRegressor`) learns the correction
   ``log(measured / physics)`` from the features and the fitted physics on the outer training rows (the
   regressor's log1p target is ``100 x measured / physics``); its calibration folds are the scheme's groups
   (whole families under ``lofo``), so the intervals carry leave-one-family-out residuals there. The point
   correction is bounded by the 2-98 % range of its source's training corrections: a tree ensemble asked about
   an unseen family otherwise borrows a leaf of another source's outliers (0.05x for held-out MobileNets); and
   its strength (0, 0.5 or 1 times the learned log-correction, :class:`ShrunkCorrection`) is chosen by an inner
   CV grouped like the scheme (families under ``lofo``), so a correction that does not carry to unseen
   families is switched off there by the training rows themselves. A row whose (GPU kind, protocol) had no
   training rows (an extrapolated GPU or protocol: its constants borrowed, :meth:`ConstantsTable.get`) gets an
   interval at least as wide as the extrapolation width measured on the training rows by the same procedure: each
   training key (or, for a row whose protocol has no fit at all, each training protocol) held out in turn, its rows
   predicted by physics alone from the other keys' fits as an unseen one is, the conformal 90 % quantile of
   their |log error| with every held-out key weighing the same (:func:`extrapolation_width`, :func:`widen_extrapolated`).

``weighting`` says which training rows the correction sees: ``pooled`` (all), ``balanced`` (at most
``BALANCED_CAP`` workloads per source, so 3,000 imported MLP runs do not outvote 200 own runs) or
``per_source`` (a test row's correction is trained on its own source's rows, on every training row when its source
has fewer than 30, and not at all when its source has none: a correction learns what the step model misses under
one source's protocol and harness, so a source absent from training gets physics alone, its interval widened as an
extrapolated GPU's). Also scored on the same splits:
the constant baseline (the training rows' mean of log1p(label)) and the current regressor (the same regressor
on the features without the physics). Every method's predictions of every outer test row come back as a
:class:`gpupred.learn.nested.NestedResult`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone

from gpupred.dataset import SOURCE_OWN
from gpupred.errors import GpupredError
from gpupred.hardware import gpu_spec
from gpupred.learn.conformal import conformal_quantile, widen
from gpupred.learn.evaluate import Split, constant_baseline, fold_groups, rmsle
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.nested import CVSettings, NestedResult, inner_splits, prediction_frame, result_from_frames
from gpupred.learn.regressors import make_regressor
from gpupred.perf.constants import FITTED, ConstantsTable
from gpupred.perf.fit import FitRows, fit_table, predict_rows
from gpupred.perf.timeline import STEP_COLUMNS

__all__ = [
    "FITTED", "PHYSICS_TARGETS", "METHODS", "WEIGHTINGS", "PhysicsData", "physics_data", "fitted_physics", "evaluate_physics",
    "compare_methods", "weighting_effect", "comparison_table", "score", "ShrunkCorrection", "correction_bounds", "protocol_of",
    "correction_frame", "correction_shap", "correction_model", "tested_on", "PhysicsPredictor", "fit_physics_predictor",
    "heldout_errors", "extrapolation_width", "HELDOUT_MIN_ROWS", "physics_log_error", "default_log_error",
]

PHYSICS_TARGETS: dict[str, str] = {"gpu_util": "util", "sm_active": "util", "iter_time_mean_s": "step"}
METHODS: tuple[str, ...] = ("constant", "regressor", "physics", "physics+correction")
WEIGHTINGS: tuple[str, ...] = ("pooled", "balanced", "per_source")
CORRECTION_FEATURES: tuple[str, ...] = (  # what the "physics" feature set gives the correction besides the fitted physics
    "batch_size", "params", "flops_train", "activation_bytes", "arithmetic_intensity", "n_nodes", "is_bf16", "is_fp16",
    "is_adam", "host_batches", "sync_kernel", "sync_window", "util_nonzero_only", *STEP_COLUMNS,
)
FEATURE_SETS: tuple[str, ...] = ("physics", "all")
SHRINK_WEIGHTS: tuple[float, ...] = (0.0, 0.5, 1.0)  # correction strengths the inner CV chooses from
BALANCED_CAP = 300  # workloads per source the balanced correction keeps (a deterministic sample)
CORRECTION_MODEL = "lightgbm"
BOUND_QUANTILE = 0.02  # a point correction stays within its source's 2-98 % training range (bounded, multiplicative)


def protocol_of(sampler: str) -> str:
    """The measurement protocol of a sampler name: its interval dropped (``nvml-poll-50ms`` -> ``nvml-poll``)."""
    return re.sub(r"-\d+(\.\d+)?m?s(?=$|-)", "", str(sampler))


@dataclass
class PhysicsData:
    """The step model's inputs for every dataset row: kernels, GPU, protocol, labels, and the constants key."""

    rows: FitRows
    keys: list[tuple[str, str]]
    cache: dict[tuple[int, ...], Any] = field(default_factory=dict)


def physics_data(df: pd.DataFrame) -> PhysicsData:
    """The step model's inputs for every row of a dataset frame (kernels from each workload's graph)."""
    from gpupred.perf.table import spec_kernels
    from gpupred.reports import progress_bar
    from gpupred.workloads.spec import WorkloadSpec

    kernels = [spec_kernels(WorkloadSpec.from_id(w)) for w in progress_bar(
        iterable=df["workload_id"].tolist(), desc="step kernels", unit="run", leave=False)]
    rows = FitRows(kernels, [gpu_spec(g) for g in df["gpu"]], df["precision"].tolist(), df["sync"].tolist(),
                   df["host_batches"].astype(bool).tolist(), df["gpu_util"].to_numpy(float),
                   df["iter_time_mean_s"].to_numpy(float))
    return PhysicsData(rows, [(str(g), protocol_of(s)) for g, s in zip(df["gpu"], df["sampler"])])


def fitted_physics(pdata: PhysicsData, train: np.ndarray, seed: int = 0) -> tuple[ConstantsTable, np.ndarray, np.ndarray]:
    """(constants fitted on the rows ``train``, utilization % and step s of every row under them)."""
    key = tuple(np.sort(train))
    if key not in pdata.cache:
        r = pdata.rows
        sub = FitRows([r.kernels[i] for i in train], [r.gpus[i] for i in train], [r.precisions[i] for i in train],
                      [r.syncs[i] for i in train], [r.host_batches[i] for i in train], r.util[train], r.step_s[train])
        table = fit_table(sub, [pdata.keys[i] for i in train], seed)
        util, step = np.empty(len(r)), np.empty(len(r))
        for k in set(pdata.keys):
            idx = [i for i, kk in enumerate(pdata.keys) if kk == k]
            util[idx], step[idx] = predict_rows(r, table.get(*k), idx)
        pdata.cache[key] = (table, util, step)
    return pdata.cache[key]


class ShrunkCorrection(RegressorMixin, BaseEstimator):
    """A regressor whose predictions are pulled towards the training median by ``1 - weight`` (0: no correction
    beyond a constant factor, 1: the regressor as it is). Its weight is chosen by inner grouped CV."""

    def __init__(self, model: Any = None, weight: float = 1.0) -> None:
        self.model = model
        self.weight = weight

    def fit(self, X: np.ndarray, y: np.ndarray) -> "ShrunkCorrection":
        """Fit the regressor (not at weight 0) and keep the median target."""
        self.center_ = float(np.median(y))
        self.model_ = clone(self.model).fit(X, y) if self.weight > 0 else None
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The shrunk prediction."""
        if self.model_ is None:
            return np.full(len(X), self.center_)
        return self.center_ + self.weight * (np.asarray(self.model_.predict(X), dtype=float) - self.center_)


def _correction_rows(df: pd.DataFrame, rows: np.ndarray, weighting: str, seed: int) -> np.ndarray:
    """The training rows the correction sees under ``weighting`` (``per_source`` is handled by the caller)."""
    if weighting != "balanced":
        return rows
    rng = np.random.default_rng(seed)
    keep = []
    sub = df.iloc[rows]
    for _, part in sub.groupby("source", sort=True):
        workloads = part["workload_id"].unique()
        if len(workloads) > BALANCED_CAP:
            workloads = rng.choice(np.sort(workloads), BALANCED_CAP, replace=False)
        keep.append(rows[np.isin(sub["workload_id"].to_numpy(), workloads) & (sub["source"] == part["source"].iloc[0]).to_numpy()])
    return np.sort(np.concatenate(keep))


def _conformal(model: str | Any, X: np.ndarray, y: np.ndarray, groups: np.ndarray, strata: np.ndarray, train: np.ndarray,
               test: np.ndarray, cv: CVSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CV+ point and interval for ``test`` from a regressor (a name or an estimator) fitted on ``train`` (log1p target)."""
    if isinstance(model, str):
        est = correction_model(cv.seed) if model == CORRECTION_MODEL else make_regressor(model, tune=False, seed=cv.seed)
    else:
        est = model
    cr = ConformalRegressor(est, cv.alpha, cv.n_cal, cv.seed)
    cr.fit(X[train], y[train], groups=groups[train], strata=strata[train])
    return cr.predict(X[test], strata[test])


@dataclass
class _Inputs:
    """What every split of one target reads."""

    df: pd.DataFrame
    target: str
    y: np.ndarray
    X_plain: np.ndarray  # features without the physics columns (the current regressor's)
    X_all: np.ndarray  # the correction's feature columns
    groups: np.ndarray
    strata: np.ndarray
    pdata: PhysicsData


def _inputs(df: pd.DataFrame, target: str, scheme: str, pdata: PhysicsData, feature_set: str) -> _Inputs:
    from gpupred.dataset import feature_columns

    cols = feature_columns(df)
    plain = [c for c in cols if c not in STEP_COLUMNS]
    corr = [c for c in CORRECTION_FEATURES if c in df.columns] if feature_set == "physics" else cols
    return _Inputs(df, target, df[target].to_numpy(float), df[plain].to_numpy(float), df[corr].to_numpy(float),
                   fold_groups(df, scheme), df["source"].astype(str).to_numpy(), pdata)


def _corrected(inp: _Inputs, train: np.ndarray, test: np.ndarray, base: np.ndarray, phys: tuple[np.ndarray, np.ndarray],
               weighting: str, model: str, cv: CVSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Physics x the CV+ correction for ``test`` rows, trained on ``train`` rows under ``weighting``."""
    X = np.column_stack([inp.X_all, np.log(np.maximum(phys[0], 1e-3)), np.log(np.maximum(phys[1], 1e-9))])
    ratio = 100.0 * inp.y / np.maximum(base, 1e-12)
    out = [np.full(len(test), np.nan) for _ in range(3)]
    parts = [(np.ones(len(test), bool), _correction_rows(inp.df, train, weighting, cv.seed), False)]
    if weighting == "per_source":
        parts = []
        for s in np.unique(inp.strata[test]):
            own = train[inp.strata[train] == s]
            # no rows of this source: nothing was learned under its protocol, so physics alone, with the interval
            # the correction learned on every training row would give (widened further by the caller)
            parts.append((inp.strata[test] == s, own if len(own) >= 30 else train, len(own) == 0))
    for mask, rows, unseen in parts:
        shrunk = _choose_shrink(model, X[rows], ratio[rows], inp.groups[rows], cv)
        pt, lo, hi = _conformal(shrunk, X, ratio, inp.groups, inp.strata, rows, test[mask], cv)
        lo_b, hi_b = correction_bounds(ratio[train], inp.strata[train], inp.strata[test[mask]])
        pt = np.clip(pt, lo_b, hi_b)
        lo, hi = np.minimum(lo, pt), np.maximum(hi, pt)
        if unseen:
            lo, hi, pt = 100.0 * lo / pt, 100.0 * hi / pt, np.full(len(pt), 100.0)
        for arr, vals in zip(out, (pt, lo, hi)):
            arr[mask] = vals * base[test[mask]] / 100.0
    return out[0], out[1], out[2]


def correction_model(seed: int = 0) -> Any:
    """The correction regressor: a small LightGBM on signed-log features (150 trees of at most 15 leaves)."""
    from lightgbm import LGBMRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    from gpupred.learn.regressors import signed_log1p

    return make_pipeline(FunctionTransformer(signed_log1p), LGBMRegressor(
        n_estimators=150, learning_rate=0.05, num_leaves=15, min_child_samples=10, n_jobs=1, random_state=seed, verbose=-1))


def _choose_shrink(model: str, X: np.ndarray, ratio: np.ndarray, groups: np.ndarray, cv: CVSettings) -> ShrunkCorrection:
    """The correction with the strength (``SHRINK_WEIGHTS``) an inner grouped CV on these training rows prefers.

    One fit per inner fold serves every strength (a strength only rescales the fitted model's departure from the
    median); the mean inner RMSLE over folds picks it, ties going to the weaker correction.
    """
    base = correction_model(cv.seed) if model == CORRECTION_MODEL else make_regressor(model, tune=False, seed=cv.seed)
    if len(set(groups)) < 3:
        return ShrunkCorrection(base, SHRINK_WEIGHTS[-1])
    z = np.log1p(ratio)
    scores = {w: [] for w in SHRINK_WEIGHTS}
    for tr, te in inner_splits(groups, cv.n_inner, cv.seed):
        center = float(np.median(z[tr]))
        pred = np.asarray(clone(base).fit(X[tr], z[tr]).predict(X[te]), dtype=float)
        for w in SHRINK_WEIGHTS:
            scores[w].append(float(np.sqrt(np.mean((center + w * (pred - center) - z[te]) ** 2))))
    best = min(SHRINK_WEIGHTS, key=lambda w: (np.mean(scores[w]), w))
    return ShrunkCorrection(base, best)


def correction_bounds(ratio: np.ndarray, strata: np.ndarray, test_strata: np.ndarray,
                      q: float = BOUND_QUANTILE) -> tuple[np.ndarray, np.ndarray]:
    """Per test row, the range a point correction may take: the ``q`` and ``1 - q`` quantiles of the training
    corrections of its stratum (source), or of all training rows when its stratum has fewer than 20."""
    lo, hi = np.empty(len(test_strata)), np.empty(len(test_strata))
    every = np.quantile(ratio, [q, 1 - q])
    for s in np.unique(test_strata):
        own = ratio[strata == s]
        lo[test_strata == s], hi[test_strata == s] = np.quantile(own, [q, 1 - q]) if len(own) >= 20 else every
    return lo, hi


def _split_predictions(inp: _Inputs, split: Split, weighting: str, model: str, cv: CVSettings,
                       methods: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every method's (point, low, high) on the test rows of one outer split."""
    train_all, test, _ = split
    train = train_all[~np.isnan(inp.y[train_all])]
    table, util, step = fitted_physics(inp.pdata, train_all, cv.seed)
    base = step if PHYSICS_TARGETS[inp.target] == "step" else util
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if "constant" in methods:
        out["constant"] = constant_baseline(inp.y[train], len(test), cv.alpha)
    if "regressor" in methods:
        out["regressor"] = _conformal(model, inp.X_plain, inp.y, inp.groups, inp.strata, train, test, cv)
    if "physics" in methods:
        nan = np.full(len(test), np.nan)
        out["physics"] = (base[test], nan, nan)
    if "physics+correction" in methods:
        pt, lo, hi = _corrected(inp, train, test, base, (util, step), weighting, model, cv)
        unfitted = np.array([inp.pdata.keys[i] not in table.fitted for i in test], dtype=bool)
        out["physics+correction"] = widen_extrapolated(inp, train, pt, lo, hi, unfitted, cv.alpha, table, test)
    return out


def widen_extrapolated(inp: _Inputs, train: np.ndarray, pt: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                       unfitted: np.ndarray, alpha: float, table: ConstantsTable | None = None,
                       test: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals of rows whose (GPU kind, protocol) had no training rows reach at least the extrapolation width
    :func:`extrapolation_width` measures on the training rows alone (log1p for utilization, log for step time).

    A test row whose protocol has no fit at all gets the width of held-out *protocols*, one whose protocol was fitted
    on other GPU kinds that of held-out *keys*: each as its prediction borrows (:meth:`ConstantsTable.get`).
    Without ``table``/``test`` (or with no training key to hold out) the default constants' 90 % log error on the
    training rows (the ``phys_*`` columns) is the width.
    """
    if not unfitted.any():
        return pt, lo, hi
    step = PHYSICS_TARGETS[inp.target] == "step"
    widths = np.full(len(pt), _default_width(inp, train, alpha))
    if table is not None and test is not None:
        seen = {p for _, p in table.fitted}
        by_protocol = np.array([inp.pdata.keys[i][1] not in seen for i in test], dtype=bool)
        for level, rows in (("protocol", unfitted & by_protocol), ("key", unfitted & ~by_protocol)):
            if rows.any():
                q = extrapolation_width(inp.pdata, table, train, inp.y, step, alpha, level)
                widths[rows] = widths[rows] if np.isnan(q) else q
    lo, hi = widen(pt, lo, hi, widths, unfitted, log1p=not step)
    return pt, lo, hi


def physics_log_error(y: np.ndarray, pred: np.ndarray, step: bool) -> np.ndarray:
    """The log error of physics' predictions: ``log(y / pred)`` for a step time (``pred`` floored at 1e-12),
    ``log1p y - log1p pred`` for a utilization (a percentage)."""
    y, pred = np.asarray(y, dtype=float), np.asarray(pred, dtype=float)
    return np.log(y / np.maximum(pred, 1e-12)) if step else np.log1p(y) - np.log1p(pred)


def default_log_error(df: pd.DataFrame, target: str) -> np.ndarray:
    """Per row of ``df``, :func:`physics_log_error` of the default-constants step model (its ``phys_step_s`` or
    ``phys_util`` column) against the measured ``target`` (NaN where unlabelled)."""
    step = PHYSICS_TARGETS[target] == "step"
    return physics_log_error(df[target], df["phys_step_s" if step else "phys_util"], step)


def _default_width(inp: _Inputs, train: np.ndarray, alpha: float) -> float:
    """The 1 - alpha quantile of the default-constants physics' log error on the training rows (the fallback width)."""
    return float(np.quantile(np.abs(default_log_error(inp.df, inp.target)[train]), 1 - alpha))


HELDOUT_MIN_ROWS = 20  # a training key held out for the extrapolation width needs at least this many labelled rows


def heldout_errors(pdata: PhysicsData, table: ConstantsTable, rows: np.ndarray, y: np.ndarray, step: bool,
                   level: str = "key") -> dict[tuple[str, str], np.ndarray]:
    """Per fitted (GPU kind, protocol) key with at least ``HELDOUT_MIN_ROWS`` labelled ``rows``, the log errors
    (log1p for utilization, log for step time) of physics alone on those rows, predicted as an unseen key is: with
    that key's fit (``level="key"``) or every fit of its protocol (``level="protocol"``) removed from ``table``, the
    rest borrowed by :meth:`ConstantsTable.get`.

    ``table`` must be fitted on rows that include ``rows`` (:func:`gpupred.perf.fit.fit_table` fits each key on
    its own rows only, so dropping a key's fit is refitting the constants on the other keys' rows); nothing outside
    ``rows`` is read.
    """
    if level not in ("key", "protocol"):
        raise GpupredError(f"unknown hold-out level {level!r}; known: key, protocol")
    rows = rows[np.isfinite(y[rows])]
    keys = [pdata.keys[i] for i in rows]
    errors = {}
    for key in sorted(set(keys) & set(table.fitted)):
        idx = rows[np.array([k == key for k in keys])]
        if len(idx) < HELDOUT_MIN_ROWS:
            continue
        drop = (lambda k: k == key) if level == "key" else (lambda k: k[1] == key[1])
        others = ConstantsTable({k: c for k, c in table.fitted.items() if not drop(k)})
        util, step_s = predict_rows(pdata.rows, others.get(*key), idx)
        err = physics_log_error(y[idx], step_s if step else util, step)
        errors[key] = err[np.isfinite(err)]
    return errors


def extrapolation_width(pdata: PhysicsData, table: ConstantsTable, rows: np.ndarray, y: np.ndarray, step: bool,
                        alpha: float, level: str = "key") -> float:
    """The log width an unseen key's interval needs: the conformal 1 - alpha quantile of :func:`heldout_errors`'
    |log error| pooled with every held-out key weighing the same (a new GPU or protocol is one more key, not 3,000
    more rows of the largest one): each key enters as ``m`` evenly spaced quantiles of its |log error|, ``m`` the
    fewest rows a held-out key has (the smallest key's own errors; no key counts more rows than it has). NaN when no
    key could be held out."""
    errors = [np.abs(e) for e in heldout_errors(pdata, table, rows, y, step, level).values() if len(e)]
    if not errors:
        return float("nan")
    m = min(len(e) for e in errors)
    levels = (np.arange(m) + 0.5) / m
    return conformal_quantile(np.concatenate([np.quantile(e, levels, method="inverted_cdf") for e in errors]), alpha)


def evaluate_physics(df: pd.DataFrame, target: str, scheme: str, splits: list[Split], pdata: PhysicsData | None = None,
                     cv: CVSettings | None = None, weighting: str = "per_source", model: str = CORRECTION_MODEL,
                     methods: tuple[str, ...] = METHODS, feature_set: str = "physics") -> dict[str, NestedResult]:
    """Each method's outer-fold predictions of ``target`` on ``splits`` (rows of ``df``), as NestedResults.

    ``pdata`` (default: built from ``df``) must describe the rows of ``df`` in order; ``scheme`` names the groups
    the CV+ calibration folds keep whole (``lofo``: sibling families).
    """
    from threadpoolctl import threadpool_limits

    from gpupred.reports import progress_bar

    if target not in PHYSICS_TARGETS:
        raise GpupredError(f"no physics for target {target!r}; known: {', '.join(PHYSICS_TARGETS)}")
    if weighting not in WEIGHTINGS:
        raise GpupredError(f"unknown weighting {weighting!r}; known: {', '.join(WEIGHTINGS)}")
    cv = cv or CVSettings()
    if feature_set not in FEATURE_SETS:
        raise GpupredError(f"unknown feature set {feature_set!r}; known: {', '.join(FEATURE_SETS)}")
    inp = _inputs(df, target, scheme, pdata or physics_data(df), feature_set)
    percent = PHYSICS_TARGETS[target] == "util"
    per_method: dict[str, list[pd.DataFrame]] = {m: [] for m in methods}
    with threadpool_limits(limits=1):
        for k, split in enumerate(progress_bar(iterable=splits, desc=f"physics {target} ({scheme})", leave=False)):
            if np.isnan(inp.y[split[0]]).all():
                continue
            for method, (pt, lo, hi) in _split_predictions(inp, split, weighting, model, cv, methods).items():
                if percent:
                    pt, lo, hi = (np.clip(a, 0, 100) for a in (pt, lo, hi))
                per_method[method].append(prediction_frame(df, split[1], k, split[2], inp.y[split[1]],
                                                           (pt, lo, hi), method))
    return {m: result_from_frames(target, scheme, parts) for m, parts in per_method.items()}


def median_rel_error(res: NestedResult, rows: pd.Series | None = None) -> float:
    """Median of |prediction / measured - 1| over labelled outer rows (optionally only where ``rows`` is true)."""
    p = res.predictions
    mask = p["y"].notna() & p["pred"].notna()
    if rows is not None:
        mask &= rows.to_numpy()
    return float(np.median(np.abs(p.loc[mask, "pred"] / p.loc[mask, "y"] - 1))) if mask.any() else float("nan")


def score(res: NestedResult, gpu: str | None = None, source: str | None = None) -> dict[str, float]:
    """RMSLE, median relative error, interval coverage and row count of a result (optionally one GPU / source)."""
    p = res.predictions
    mask = p["y"].notna() & p["pred"].notna()
    if gpu is not None:
        mask &= p["gpu"] == gpu
    if source is not None:
        mask &= p["source"] == source
    q = p[mask]
    if q.empty:
        return {"rmsle": np.nan, "median_rel_err": np.nan, "coverage": np.nan, "n": 0}
    covered = q["low"].notna()
    inside = (q["y"] >= q["low"]) & (q["y"] <= q["high"])
    return {"rmsle": rmsle(q["y"], q["pred"]), "median_rel_err": float(np.median(np.abs(q["pred"] / q["y"] - 1))),
            "coverage": float(inside[covered].mean()) if covered.any() else np.nan, "n": int(len(q))}


SCHEME_LABELS: dict[str, str] = {"within": "within GPU (grouped)", "lofo": "leave one family out",
                                 "cross_gpu": "cross GPU (unseen)", "cross_gpu_twins": "cross GPU (twins)"}


def comparison_splits(df: pd.DataFrame, n_within: int = 5, seed: int = 0) -> dict[str, tuple[str, list[Split]]]:
    """The splits of the comparison, by scheme: (groups the calibration keeps whole, splits over ``df``'s rows).

    ``within``: grouped folds over each GPU kind's own workloads; ``lofo``: one split per sibling family group;
    ``cross_gpu``: each other GPU kind (and all others) -> a GPU kind, no test workload in training;
    ``cross_gpu_twins``: one GPU kind -> another where they share workloads, those twins kept in training (a job
    already run on one kind, predicted on the other; the only direction there is where one kind's workloads are
    all measured on the other too).
    """
    from gpupred.learn.crossgpu import REST, WITHIN, transfer_splits
    from gpupred.learn.evaluate import splits_for

    transfer = transfer_splits(df, n_within, seed)
    within = [s.as_split() for s in transfer if s.train_gpus == WITHIN]
    if not within:  # one GPU kind: grouped folds over its workloads
        within = splits_for(df, "grouped_random", n_within, seed)
    cross = [s.as_split() for s in transfer if s.train_gpus != WITHIN and s.workloads == "unseen"]
    twins = [s.as_split() for s in transfer if s.train_gpus not in (WITHIN, REST) and s.workloads == "twins"]
    out = {"within": ("grouped_random", within), "lofo": ("lofo", splits_for(df, "lofo"))}
    if cross:
        out["cross_gpu"] = ("cross_gpu", cross)
    if twins:
        out["cross_gpu_twins"] = ("cross_gpu", twins)
    return out


def compare_methods(df: pd.DataFrame, target: str, cv: CVSettings | None = None, weighting: str = "per_source",
                    n_within: int = 5, pdata: PhysicsData | None = None,
                    schemes: tuple[str, ...] = ("within", "lofo", "cross_gpu"),
                    methods: tuple[str, ...] = METHODS) -> dict[str, dict[str, NestedResult]]:
    """Each of ``methods`` on the comparison's splits of the rows labelled with ``target``, by scheme."""
    cv = cv or CVSettings()
    data = df[df[target].notna()].reset_index(drop=True)
    pdata = pdata_subset(pdata, df, data) if pdata is not None else physics_data(data)
    splits = comparison_splits(data, n_within, cv.seed)
    return {name: evaluate_physics(data, target, groups, sp, pdata, cv, weighting, methods=methods)
            for name, (groups, sp) in splits.items() if name in schemes}


def weighting_effect(df: pd.DataFrame, targets: list[str], cv: CVSettings | None = None, n_within: int = 5,
                     pdata: PhysicsData | None = None, schemes: tuple[str, ...] = ("within", "lofo"),
                     weightings: tuple[str, ...] = WEIGHTINGS) -> pd.DataFrame:
    """Physics x correction under each of ``weightings`` (which training rows the correction learns from) on the
    comparison's splits: one :func:`comparison_table` row per (target, weighting, scheme, tested GPU). The step
    model's constants are fitted once per split and shared by the weightings (they do not depend on it)."""
    pdata = pdata or physics_data(df)
    tables = []
    for target in targets:
        data = df[df[target].notna()].reset_index(drop=True)
        sub = pdata_subset(pdata, df, data)  # one constants cache per target, shared by its weightings
        for weighting in weightings:
            res = compare_methods(data, target, cv, weighting, n_within, sub, schemes, ("physics+correction",))
            tables.append(comparison_table({target: res}).assign(weighting=weighting))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def pdata_subset(pdata: PhysicsData, df: pd.DataFrame, rows: pd.DataFrame) -> PhysicsData:
    """The physics inputs of ``rows`` (a subset of ``df`` by ``run_id``) from those of ``df`` (``pdata`` itself, with
    its cache of fitted constants, when ``rows`` are all of ``df`` in order)."""
    if len(rows) == len(df) and (rows["run_id"].to_numpy() == df["run_id"].to_numpy()).all():
        return pdata
    pos = pd.Series(np.arange(len(df)), index=df["run_id"]).loc[rows["run_id"]].to_numpy()
    r = pdata.rows
    sub = FitRows([r.kernels[i] for i in pos], [r.gpus[i] for i in pos], [r.precisions[i] for i in pos],
                  [r.syncs[i] for i in pos], [r.host_batches[i] for i in pos], r.util[pos], r.step_s[pos])
    return PhysicsData(sub, [pdata.keys[i] for i in pos])


def comparison_table(results: dict[str, dict[str, dict[str, NestedResult]]]) -> pd.DataFrame:
    """One row per (target, scheme, tested GPU or split side, method): RMSLE, median relative error, coverage, rows.

    ``results`` maps target -> :func:`compare_methods` output. Within-GPU and cross-GPU rows are scored on the
    tested GPU's rows (cross-GPU per training side); leave-one-family-out rows per GPU kind.
    """
    rows = []
    for target, per_scheme in results.items():
        for scheme, per_method in per_scheme.items():
            for method, res in per_method.items():
                p = res.predictions
                cross = scheme.startswith("cross_gpu")
                sides = (p["fold_label"].str.replace(r" \((unseen|twins)\)$", "", regex=True) if cross
                         else pd.Series("", index=p.index))
                for (side, gpu), part in p.groupby([sides, p["gpu"]], sort=True):
                    sub = NestedResult(target, scheme, part, res.folds, res.comparison)
                    label = f"{side}" if cross else gpu
                    rows.append({"target": target, "scheme": SCHEME_LABELS.get(scheme, scheme), "tested": label,
                                 "method": method, **score(sub)})
    return pd.DataFrame(rows)


def tested_on(table: pd.DataFrame, gpu: str) -> pd.Series:
    """Rows of a :func:`comparison_table` scored on ``gpu``'s runs (within, leave-one-family-out, ``x->gpu``)."""
    return (table["tested"] == gpu) | table["tested"].str.endswith(f"->{gpu}")


def correction_frame(df: pd.DataFrame, target: str, pdata: PhysicsData, seed: int = 0) -> pd.DataFrame:
    """Per labelled row: the fitted physics, the measured value and log(measured / physics) (constants fitted on
    every row: an explanation, not an evaluation), with the correction's features."""
    _, util, step = fitted_physics(pdata, np.arange(len(df)), seed)
    base = step if PHYSICS_TARGETS[target] == "step" else util
    out = df[["run_id", "family", "source", "gpu", *[c for c in CORRECTION_FEATURES if c in df.columns]]].copy()
    out["fit_phys_util"], out["fit_phys_step_s"], out["physics"], out["measured"] = util, step, base, df[target]
    out["log_correction"] = np.log(out["measured"] / out["physics"])
    return out[out["measured"].notna()].reset_index(drop=True)


def correction_shap(frame: pd.DataFrame, source: str | None = SOURCE_OWN, seed: int = 0, max_rows: int = 500) -> Any:
    """A ``shap.Explanation`` of the correction model fitted on ``frame`` (one source's rows by default)."""
    import warnings

    from gpupred.learn.regressors import signed_log1p

    with warnings.catch_warnings():  # shap imports tqdm.auto, which warns in a kernel without ipywidgets
        warnings.simplefilter("ignore")
        import shap

    rows = frame if source is None else frame[frame["source"] == source]
    cols = [c for c in (*CORRECTION_FEATURES, "fit_phys_util", "fit_phys_step_s") if c in rows.columns]
    X = rows[cols].to_numpy(float)
    model = correction_model(seed).fit(X, rows["log_correction"].to_numpy(float))
    sample = rows.sample(min(max_rows, len(rows)), random_state=seed)
    explanation = shap.TreeExplainer(model[-1])(pd.DataFrame(signed_log1p(sample[cols].to_numpy(float)), columns=cols))
    explanation.feature_names = cols
    return explanation


@dataclass
class PhysicsPredictor:
    """Physics x correction fitted on every labelled row, for new jobs: the constants table and, per target, a
    CV+ correction (what a predictor artifact can carry; no torch, no training rows kept)."""

    constants: ConstantsTable
    corrections: dict[str, ConformalRegressor]
    feature_names: list[str]
    alpha: float = 0.1

    def predict_row(self, row: dict[str, float], kernels: Any, gpu: str, precision: str, sync: str = "step",
                    host_batches: bool = False, protocol: str = "nvml-poll",
                    constants: Any = None) -> dict[str, float]:
        """Each target's point and ``_low``/``_high`` bounds for one job: its feature row (graph features, encodings
        and default ``phys_*``) and its kernels (:func:`gpupred.perf.kernels_for`); throughput follows from the
        iteration time where ``batch_size`` is in the row. ``constants`` (a calibrated GPU's) replace the table's."""
        from gpupred.perf.timeline import simulate

        constants = constants if constants is not None else self.constants.get(gpu_spec(gpu).name, protocol)
        est = simulate(kernels, gpu_spec(gpu), precision, constants, sync, host_batches)
        x = np.array([[float(row.get(c, 0.0)) for c in self.feature_names] + [np.log(max(est.util, 1e-3)),
                                                                               np.log(max(est.step_s, 1e-9))]])
        out: dict[str, float] = {}
        for target, cr in self.corrections.items():
            base = est.step_s if PHYSICS_TARGETS[target] == "step" else est.util
            pt, lo, hi = (float(a[0]) * base / 100.0 for a in cr.predict(x))
            if PHYSICS_TARGETS[target] == "util":
                pt, lo, hi = (min(v, 100.0) for v in (pt, lo, hi))
            out.update({target: pt, f"{target}_low": lo, f"{target}_high": hi})
        if "iter_time_mean_s" in out and row.get("batch_size"):
            bs = float(row["batch_size"])
            out.update({"samples_per_s": bs / out["iter_time_mean_s"], "samples_per_s_low": bs / out["iter_time_mean_s_high"],
                        "samples_per_s_high": bs / out["iter_time_mean_s_low"]})
        return out


def fit_physics_predictor(df: pd.DataFrame, targets: tuple[str, ...] = tuple(PHYSICS_TARGETS),
                          pdata: PhysicsData | None = None, cv: CVSettings | None = None) -> PhysicsPredictor:
    """Constants and per-target corrections fitted on every labelled row of ``df`` (workload-grouped CV+ folds)."""
    cv = cv or CVSettings()
    pdata = pdata or physics_data(df)
    table, util, step = fitted_physics(pdata, np.arange(len(df)), cv.seed)
    names = [c for c in CORRECTION_FEATURES if c in df.columns]
    X = np.column_stack([df[names].to_numpy(float), np.log(np.maximum(util, 1e-3)), np.log(np.maximum(step, 1e-9))])
    groups = df["workload_id"].astype(str).to_numpy()
    corrections = {}
    for target in targets:
        y = df[target].to_numpy(float)
        rows = np.flatnonzero(~np.isnan(y))
        if len(rows) < 10:
            continue
        base = step if PHYSICS_TARGETS[target] == "step" else util
        ratio = 100.0 * y / np.maximum(base, 1e-12)
        shrunk = _choose_shrink(CORRECTION_MODEL, X[rows], ratio[rows], groups[rows], cv)
        corrections[target] = ConformalRegressor(shrunk, cv.alpha, cv.n_cal, cv.seed).fit(X[rows], ratio[rows], groups=groups[rows])
    return PhysicsPredictor(table, corrections, names, cv.alpha)
