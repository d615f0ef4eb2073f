"""GPU memory of a training job: Horus's formula, the first analytical estimate with a learned residual, and
the analytic footprint of :mod:`gpupred.footprint` times a bounded learned correction, with intervals
calibrated on leave-one-family-out residuals (:class:`FootprintModel`).

The first analytical estimate (``analytical``, ``analytical+residual``: kept as the baseline it was):

Analytical estimate (MiB) = weights + gradients + optimizer state + autocast weight copies +
activations kept for backward + overhead, where weights = gradients = ``param_bytes`` (fp32 master
weights, also under bf16/fp16 autocast), optimizer state = 1x (SGD momentum) or 2x (Adam moments)
``param_bytes``, autocast's cached 16-bit copies of the weights = ``param_bytes / 2`` under bf16 and fp16,
activations = ``activation_bytes`` (gpupred.graph already sizes them by the precision: autocast outputs
2 bytes, fp32-kept ops 4), and overhead (CUDA context, cuBLAS/cuDNN workspaces, caching-allocator slack)
is the median gap left in the training data, per GPU kind (one GPU kind per source here). Horus's
baseline counts weights and forward feature maps only: ``(4 * params + activation_bytes) / 2**20``
(Yeung et al., TPDS 2022, our reading of their formula).

Evaluation (:func:`evaluate_memory`, notebook 05) uses the same splits as the regressors (grouped by workload, and
leave-one-family-out with sibling families together) and reports every figure per source as well;
:func:`compare_memory` (notebook 03) scores the constant baseline, the current regressor, the footprint and the
footprint x correction on the splits of the utilization comparison (:func:`gpupred.step.evaluate.comparison_splits`).
The correction's setting is chosen inside :meth:`FootprintModel.fit`, on the rows it is given
(:func:`inner_lofo_residuals`), so both evaluations are nested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpupred.dataset import SOURCE_OWN, own_rows
from gpupred.errors import GpupredError
from gpupred.reports import MetricsSchema

MIB = float(2**20)
METHODS: tuple[str, ...] = ("horus", "analytical", "analytical+residual", "footprint", "footprint*correction")
OLD_METHODS: tuple[str, ...] = METHODS[:3]
BEST = "footprint*correction"
CORRECTION_CLIP = 0.2  # the default bound of |log correction| (x0.82 .. x1.22), kept when nothing can be selected
COVERAGE = 0.9  # nominal coverage of the intervals
MAX_ROWS_PER_SOURCE = 600  # the model is fitted on at most this many rows per source (seeded sample; keeps it fast)
CORRECTION_FEATURES: tuple[str, ...] = (  # scale-free: the correction multiplies, it never sets the size
    "is_bf16", "is_adam", "frac_flops_conv", "frac_flops_matmul", "frac_flops_recurrent", "frac_flops_norm",
    "frac_flops_act", "frac_flops_pool", "frac_flops_elementwise")


def horus_mib(df: pd.DataFrame) -> np.ndarray:
    """Horus's memory formula: weights plus forward feature maps, fp32."""
    return (4.0 * df["params"].to_numpy(float) + df["activation_bytes"].to_numpy(float)) / MIB


def analytical_bytes(df: pd.DataFrame) -> np.ndarray:
    """Weights + gradients + optimizer state + activations kept for backward, in bytes (no overhead)."""
    for col in ("param_bytes", "activation_bytes", "optimizer"):
        if col not in df.columns:
            raise GpupredError(f"memory estimate needs column {col!r}; use a dataset frame (gpupred.dataset)")
    from gpupred.footprint import OPTIMIZER_STATES

    p = df["param_bytes"].to_numpy(float)
    states = df["optimizer"].astype(str).str.lower().map(OPTIMIZER_STATES).fillna(1.0).to_numpy(float)
    half = df["precision"].isin(["bf16", "fp16"]).to_numpy(float) if "precision" in df.columns else 0.0
    act = df["activation_bytes"].to_numpy(float)  # already at the precision's dtype sizes
    return p * (2.0 + states + 0.5 * half) + act


class MemoryModel:
    """Analytical memory plus fitted overhead, and a learned multiplicative residual on top."""

    def __init__(self, residual_model: str = "lightgbm", seed: int = 0) -> None:
        self.residual_model = residual_model
        self.seed = seed

    def fit(self, df: pd.DataFrame, target: str = "memory_mib") -> "MemoryModel":
        """Fit the overhead (median gap per GPU) and the residual model on log(measured / analytical)."""
        from gpupred.dataset import feature_columns
        from gpupred.learn.regressors import make_regressor

        data = df[df[target].notna()]
        gap = data[target].to_numpy(float) - analytical_bytes(data) / MIB
        self.overhead_ = pd.Series(gap, index=data["gpu"].to_numpy()).groupby(level=0).median().to_dict()
        self.overhead_default_ = float(np.median(gap))
        from gpupred.footprint import FOOTPRINT_COLUMNS

        self.features_ = [c for c in feature_columns(data) if c not in FOOTPRINT_COLUMNS]  # the baseline as it was
        ratio = np.log(data[target].to_numpy(float)) - np.log(np.maximum(self.analytical(data), 1.0))
        self.residual_ = make_regressor(self.residual_model, tune=False, seed=self.seed).fit(
            data[self.features_].to_numpy(float), ratio)
        return self

    def analytical(self, df: pd.DataFrame) -> np.ndarray:
        """The analytical estimate in MiB, overhead included."""
        overhead = (df["gpu"].map(self.overhead_).fillna(self.overhead_default_).to_numpy(float) if "gpu" in df
                    else self.overhead_default_)
        return analytical_bytes(df) / MIB + overhead

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """Each method's estimate in MiB: horus, analytical, analytical+residual."""
        ana = self.analytical(df)
        corrected = np.maximum(ana, 1.0) * np.exp(self.residual_.predict(df[self.features_].to_numpy(float)))
        return pd.DataFrame({"horus": horus_mib(df), "analytical": ana, "analytical+residual": corrected},
                            index=df.index)


def evaluate_memory(df: pd.DataFrame, schemes: tuple[str, ...] = ("grouped_random", "lofo"), n_folds: int = 5,
                    target: str = "memory_mib", seed: int = 0, residual_model: str = "lightgbm") -> pd.DataFrame:
    """Out-of-sample estimate, relative error and interval of every method, one row per (scheme, split, run, method).

    ``df`` needs the footprint's graph terms (:func:`gpupred.footprint.footprint_columns`) for the footprint
    methods to count activations from the graph; without them the footprint falls back to ``activation_bytes``.
    """
    from gpupred.learn.splits import splits_for

    data = df[df[target].notna()].reset_index(drop=True)
    out = []
    for scheme in schemes:
        for train, test, label in splits_for(data, scheme, n_folds, seed):
            est = _estimates(data.iloc[train], data.iloc[test], target, seed, residual_model)
            out.append(_error_rows(data.iloc[test], est, target, scheme, label))
    return pd.concat(out, ignore_index=True)


def _estimates(train: pd.DataFrame, test: pd.DataFrame, target: str, seed: int, residual_model: str) -> pd.DataFrame:
    """Every method's estimate for ``test`` from models fitted on ``train`` (plus the best method's interval)."""
    old = MemoryModel(residual_model=residual_model, seed=seed).fit(train, target).predict(test)
    new = FootprintModel(seed=seed).fit(train, target).predict(test)
    return pd.concat([old, new], axis=1)


def _error_rows(test: pd.DataFrame, est: pd.DataFrame, target: str, scheme: str, label: str) -> pd.DataFrame:
    """Long table of one split: estimate, relative error and interval coverage per run and method."""
    measured = test[target].to_numpy(float)
    source = test["source"].to_numpy() if "source" in test.columns else np.full(len(test), "")
    inside = ((est["low"] <= measured) & (measured <= est["high"])).to_numpy(float)
    rows = []
    for method in METHODS:
        e = est[method].to_numpy(float)
        rows.append(pd.DataFrame({
            "scheme": scheme, "split": label, "method": method, "run_id": test["run_id"].to_numpy(),
            "estimate_mib": e, "measured_mib": measured, "rel_err": np.abs(e - measured) / measured,
            "covered": inside if method == BEST else np.nan, "source": source, "family": test["family"].to_numpy()}))
    return pd.concat(rows, ignore_index=True)


def summarize_memory(errors: pd.DataFrame, by_source: bool = False) -> pd.DataFrame:
    """Median, p90 and max relative error and interval coverage per method and scheme (and per source)."""
    keys = ["method", "scheme", *(["source"] if by_source else [])]
    g = errors.groupby(keys)
    rel = g["rel_err"]
    table = pd.DataFrame({"median": rel.median(), "p90": rel.quantile(0.9), "max": rel.max(),
                          "coverage": g["covered"].mean(), "n": rel.size()})
    return table.unstack("scheme")


def plot_memory(errors: pd.DataFrame) -> Any:
    """Box plots of relative error per method and scheme (log scale), one panel per source."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sources = sorted(errors["source"].unique()) if "source" in errors.columns else [None]
    fig, axes = plt.subplots(1, len(sources), figsize=(6.5 * len(sources), 3.5), squeeze=False, sharex=True)
    for ax, src in zip(axes[0], sources):
        data = errors if src is None else errors[errors["source"] == src]
        sns.boxplot(data=data, x="rel_err", y="method", hue="scheme", ax=ax, showfliers=True)
        ax.set_xscale("log")
        ax.set_xlabel("relative error |estimate - measured| / measured")
        ax.set_title(src or "")
    fig.tight_layout()
    return fig


def plot_estimates(errors: pd.DataFrame, scheme: str = "grouped_random") -> Any:
    """Estimated vs measured memory (MiB, log axes) for every method under one scheme, coloured by source."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = errors[errors["scheme"] == scheme]
    methods = list(dict.fromkeys(data["method"]))
    fig, axes = plt.subplots(1, len(methods), figsize=(4.6 * len(methods), 4.2), squeeze=False, sharey=True)
    lo = max(1.0, float(data[["estimate_mib", "measured_mib"]].min().min()) * 0.8)
    hi = float(data[["estimate_mib", "measured_mib"]].max().max()) * 1.2
    for ax, method in zip(axes[0], methods):
        sns.scatterplot(data=data[data["method"] == method], x="measured_mib", y="estimate_mib", hue="source", s=12,
                        alpha=0.6, linewidth=0, ax=ax)
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=method, xlabel="measured MiB",
               ylabel="estimate MiB")
    fig.tight_layout()
    return fig


def correction_features(df: pd.DataFrame) -> np.ndarray:
    """Scale-free inputs of the correction: flags, FLOP mix, and each footprint term's share of the total."""
    from gpupred.footprint import footprint_terms, sources

    terms = footprint_terms(df, sources(df))
    shares = terms.to_numpy(float) / np.maximum(terms.sum(axis=1).to_numpy(float)[:, None], 1e-9)
    flags = np.column_stack([df[c].fillna(0.0).to_numpy(float) if c in df.columns else np.zeros(len(df))
                             for c in CORRECTION_FEATURES])
    return np.column_stack([flags, shares])


def per_source_sample(df: pd.DataFrame, max_rows: int, seed: int = 0) -> pd.DataFrame:
    """At most ``max_rows`` rows of each source (seeded sample): a source's weight is its total anyway."""
    if "source" not in df.columns:
        return df
    parts = [g if len(g) <= max_rows else g.sample(max_rows, random_state=seed)
             for _, g in df.groupby("source", sort=False)]
    return df[df.index.isin(pd.concat(parts).index)] if parts else df


def source_weights(df: pd.DataFrame) -> np.ndarray:
    """Per-row weights giving every source the same total (3,000 imported MLPs do not outvote 200 own runs)."""
    src = df["source"].astype(str).to_numpy(dtype=object) if "source" in df.columns else np.full(len(df), "")
    _, inverse, counts = np.unique(src, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse].astype(float)


@dataclass(frozen=True)
class CorrectionSetting:
    """One setting of the correction: its clip (|log factor| bound) and its boosted trees' size."""

    clip: float  # the learned log-factor stays within +-clip (x exp(-clip) .. x exp(clip) of the footprint)
    n_estimators: int
    min_samples_leaf: int

    def describe(self) -> str:
        """A short label, e.g. 'clip 0.2, 30 trees, leaves >= 30'."""
        return f"clip {self.clip:g}, {self.n_estimators} trees, leaves >= {self.min_samples_leaf}"


CORRECTION_GRID: tuple[CorrectionSetting, ...] = tuple(  # the settings the inner leave-one-family-out chooses from
    CorrectionSetting(c, n, 20) for c in (0.0, 0.1, 0.2, 0.3, 0.5) for n in (30, 60, 100))
DEFAULT_SETTING = CorrectionSetting(CORRECTION_CLIP, 30, 20)  # when the training rows hold one family group only
TARGET_CLIP = max(s.clip for s in CORRECTION_GRID)  # the trees learn log(measured / footprint) clipped to this


def correction_regressor(setting: CorrectionSetting, seed: int = 0) -> Any:
    """The correction's regressor: small boosted trees (LightGBM, one thread, deterministic; depth-3-sized leaves)."""
    from lightgbm import LGBMRegressor

    return LGBMRegressor(n_estimators=setting.n_estimators, learning_rate=0.08, num_leaves=8, max_depth=3,
                         min_child_samples=setting.min_samples_leaf, subsample=0.8, subsample_freq=1, n_jobs=1,
                         random_state=seed, verbose=-1, deterministic=True, force_col_wise=True)


class FootprintModel:
    """Analytic footprint x a bounded learned correction, with leave-one-family-out calibrated intervals.

    ``fit`` runs a leave-one-family-out over its own (training) rows: every setting of ``settings`` (default
    ``CORRECTION_GRID``) predicts each held-out family from the other families; the setting with the lowest
    source-balanced median |log error| is fitted on all the rows, and its held-out residuals calibrate the
    intervals. Nothing outside the rows given to ``fit`` is seen, so an outer split stays honest.
    """

    def __init__(self, seed: int = 0, calibrate: bool = True,
                 settings: tuple[CorrectionSetting, ...] | None = None) -> None:
        self.seed = seed
        self.calibrate = calibrate
        self.settings = settings

    def fit(self, df: pd.DataFrame, target: str = "memory_mib") -> "FootprintModel":
        """Choose the correction's setting and calibrate on the rows' inner leave-one-family-out, then fit it all."""
        data = per_source_sample(df[df[target].notna()], MAX_ROWS_PER_SOURCE, self.seed)
        grid = tuple(self.settings or CORRECTION_GRID)
        sources = data["source"].astype(str).to_numpy() if "source" in data.columns else np.full(len(data), SOURCE_OWN)
        self.selection_: dict[CorrectionSetting, float] = {}
        self.setting_, self.halfwidth_ = (grid[0] if len(grid) == 1 else DEFAULT_SETTING), {}
        if self.calibrate or len(grid) > 1:
            residuals, seen = inner_lofo_residuals(data, grid, target, self.seed)
            if np.isfinite(residuals[:, seen]).any():  # rows on default constants do not judge the correction
                self.selection_ = {s: selection_score(r[seen], sources[seen]) for s, r in zip(grid, residuals)}
                self.setting_ = min(grid, key=lambda s: (self.selection_[s], grid.index(s)))
            if self.calibrate:
                self.halfwidth_ = lofo_halfwidths(residuals[grid.index(self.setting_)], sources)
        self.footprint_, self.correction_ = fit_correction(data, self.setting_, target, self.seed)
        self.fitted_keys_ = set(self.footprint_.context_mib)
        return self

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Artifacts pickled before the setting was chosen load with the one they were fitted with (clip 0.2)."""
        self.__dict__.update(state)
        self.__dict__.setdefault("setting_", CorrectionSetting(CORRECTION_CLIP, 30, 30))
        self.__dict__.setdefault("selection_", {})
        self.__dict__.setdefault("settings", None)

    def describe(self) -> dict[str, Any]:
        """What a card says of the memory model: fitted constants, the chosen correction setting, interval widths."""
        return {"footprint_constants": self.footprint_.constants(), "correction_clip_log": self.setting_.clip,
                "correction_setting": self.setting_.describe(),
                "correction_selection": (f"lowest source-balanced median |log error| of {len(self.selection_)} "
                                         "settings under a leave-one-family-out of the training rows" if self.selection_ else
                                         "default (fewer than two family groups to choose on)"),
                "interval_halfwidth_log": {k: round(v, 4) for k, v in self.halfwidth_.items()}}

    def correction(self, df: pd.DataFrame) -> np.ndarray:
        """The learned log-factor, clipped to the chosen setting's bound."""
        clip = self.setting_.clip
        return np.clip(self.correction_.predict(correction_features(df)), -clip, clip)

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """footprint, footprint*correction and its interval (``low``, ``high``) in MiB, one row per input row."""
        from gpupred.footprint import source_keys, sources

        base = self.footprint_.predict(df)
        best = np.maximum(base, 1.0) * np.exp(self.correction(df))
        src = sources(df).to_numpy()
        widest = max(self.halfwidth_.values(), default=np.log(2.0))  # nothing calibrated: x2 either way
        seen = np.isin(source_keys(df), list(self.fitted_keys_))
        known = np.isin(src, [k.split("|")[1] for k in self.fitted_keys_])
        # extrapolated: a GPU not measured by the source gets the widest calibrated half-width doubled; a
        # source never measured, whose context and allocator are defaults, that plus log 2 (a factor of 2)
        q = np.array([self.halfwidth_.get(s, widest) if ok else 2.0 * widest if kn else widest + np.log(2.0)
                      for s, ok, kn in zip(src, seen, known)])
        return pd.DataFrame({"footprint": base, BEST: best, "low": best * np.exp(-q), "high": best * np.exp(q)},
                            index=df.index)


def fit_correction(data: pd.DataFrame, setting: CorrectionSetting, target: str = "memory_mib",
                   seed: int = 0) -> tuple[Any, Any]:
    """(the footprint's fitted constants, the correction regressor) fitted on ``data`` with one setting."""
    from gpupred.footprint import Footprint

    fitted = Footprint().fit(data, target)
    ratio = np.log(data[target].to_numpy(float)) - np.log(np.maximum(fitted.predict(data), 1.0))
    model = correction_regressor(setting, seed).fit(correction_features(data),
                                                    np.clip(ratio, -TARGET_CLIP, TARGET_CLIP),
                                                    sample_weight=source_weights(data))
    return fitted, model


def inner_lofo_residuals(data: pd.DataFrame, grid: tuple[CorrectionSetting, ...], target: str = "memory_mib",
                         seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """log(measured / footprint*correction) of every row of ``data`` with its family group held out of ``data``,
    per setting of ``grid`` (shape settings x rows; NaN where a row could not be held out: one group only), and
    per row whether its (GPU kind, source) had rows in the fold's training side (else default constants).

    One footprint fit per held-out group serves every setting, and one tree fit per leaf size serves every clip
    and tree count (the clip bounds the output; fewer trees are the first iterations)."""
    from gpupred.footprint import Footprint, source_keys
    from gpupred.learn.splits import lofo_splits

    y = np.log(data[target].to_numpy(float))
    keys = source_keys(data)
    X = correction_features(data)
    weights = source_weights(data)
    out = np.full((len(grid), len(data)), np.nan)
    seen = np.zeros(len(data), dtype=bool)
    fits: dict[int, list[int]] = {}
    for i, s in enumerate(grid):
        fits.setdefault(s.min_samples_leaf, []).append(i)
    for train, test, _ in lofo_splits(data["family"]):
        if len(train) == 0:
            continue
        fitted = Footprint().fit(data.iloc[train], target)
        ratio = y - np.log(np.maximum(fitted.predict(data), 1.0))
        for leaf, members in fits.items():
            most = max(grid[i].n_estimators for i in members)
            model = correction_regressor(CorrectionSetting(TARGET_CLIP, most, leaf), seed).fit(
                X[train], np.clip(ratio[train], -TARGET_CLIP, TARGET_CLIP), sample_weight=weights[train])
            for i in members:
                learned = model.predict(X[test], num_iteration=grid[i].n_estimators)
                out[i, test] = ratio[test] - np.clip(learned, -grid[i].clip, grid[i].clip)
        seen[test] = np.isin(keys[test], list(fitted.context_mib))
    return out, seen


def selection_score(residuals: np.ndarray, sources: np.ndarray) -> float:
    """The mean over sources of the median |log error| of the held-out rows: every source counts the same."""
    ok = np.isfinite(residuals)
    meds = [np.median(np.abs(residuals[ok & (sources == s)])) for s in pd.unique(sources[ok])]
    return float(np.mean(meds)) if meds else float("inf")


def lofo_halfwidths(residuals: np.ndarray, sources: np.ndarray) -> dict[str, float]:
    """Per source, the conformal COVERAGE quantile of held-out |log error| (sources with fewer than 10 left out)."""
    from gpupred.learn.conformal import conformal_quantile

    out = {}
    for s in pd.unique(sources):
        r = residuals[(sources == s) & np.isfinite(residuals)]
        if len(r) >= 10:
            out[str(s)] = conformal_quantile(r, 1.0 - COVERAGE)
    return out


COMPARISON_METHODS: dict[str, str] = {  # notebook 03's method names (gpupred.step.evaluate.METHODS) -> what memory runs
    "constant": "the training rows' mean of log1p(memory)", "regressor": "the current regressor (CV+ LightGBM on the "
    "features, no footprint)", "physics": "the analytic footprint", "physics+correction": BEST}


def regressor_columns(df: pd.DataFrame) -> list[str]:
    """The current regressor's inputs: the dataset's feature columns without the footprint's graph terms."""
    from gpupred.dataset import feature_columns
    from gpupred.footprint import FOOTPRINT_COLUMNS

    return [c for c in feature_columns(df) if c not in FOOTPRINT_COLUMNS]


def split_methods(data: pd.DataFrame, train: np.ndarray, test: np.ndarray, groups: np.ndarray, cv: Any,
                  target: str = "memory_mib") -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every comparison method's (point, low, high) in MiB on the ``test`` rows, fitted on the ``train`` rows only."""
    from gpupred.learn.splits import constant_baseline
    from gpupred.learn.intervals import ConformalRegressor
    from gpupred.learn.regressors import correction_model

    from threadpoolctl import threadpool_limits

    y = data[target].to_numpy(float)
    strata = data["source"].astype(str).to_numpy()
    X = data[regressor_columns(data)].to_numpy(float)
    with threadpool_limits(limits=1):  # one thread per parallel split
        reg = ConformalRegressor(correction_model(cv.seed), cv.alpha, cv.n_cal, cv.seed)
        reg.fit(X[train], y[train], groups=groups[train], strata=strata[train])
        regressed = reg.predict(X[test], strata[test])
        est = FootprintModel(seed=cv.seed).fit(data.iloc[train], target).predict(data.iloc[test])
    nan = np.full(len(test), np.nan)
    return {"constant": constant_baseline(y[train], len(test), cv.alpha), "regressor": regressed,
            "physics": (est["footprint"].to_numpy(), nan, nan),
            "physics+correction": (est[BEST].to_numpy(), est["low"].to_numpy(), est["high"].to_numpy())}


def compare_memory(df: pd.DataFrame, cv: Any = None, n_within: int = 5, target: str = "memory_mib",
                   schemes: tuple[str, ...] = ("within", "lofo", "cross_gpu")) -> dict[str, dict[str, Any]]:
    """Notebook 03's four methods (``COMPARISON_METHODS``) on the splits of the utilization comparison
    (:func:`gpupred.step.evaluate.comparison_splits`), as ``{scheme: {method: NestedResult}}``.

    ``df`` needs the footprint's graph terms (:func:`gpupred.footprint.footprint_columns`). Outer splits run in
    parallel (``cv.n_jobs``); each method is fitted on the split's training rows alone."""
    from joblib import Parallel, delayed

    from gpupred.learn.folds import calibration_groups
    from gpupred.learn.nested import CVSettings, prediction_frame, result_from_frames
    from gpupred.step.evaluate import comparison_splits

    cv = cv or CVSettings()
    data = df[df[target].notna()].reset_index(drop=True)
    y = data[target].to_numpy(float)
    todo = [(name, "family", k, split) for name, splits in comparison_splits(data, n_within, cv.seed).items()
            if name in schemes for k, split in enumerate(splits)]
    groups = {"family": calibration_groups(data, "family")}  # the regressor baseline calibrated as the step estimator
    fits: dict[tuple[bytes, str], list[int]] = {}  # splits with one training side (e.g. A100 -> H200, A100 -> RTX 3090)
    for i, (_, grouping, _, split) in enumerate(todo):
        fits.setdefault((np.sort(split[0]).tobytes(), grouping), []).append(i)
    jobs = [(todo[m[0]][3][0], np.concatenate([todo[i][3][1] for i in m]), groups[g]) for (_, g), m in fits.items()]
    outs = Parallel(n_jobs=cv.n_jobs)(delayed(split_methods)(data, train, test, grp, cv, target)
                                      for train, test, grp in jobs)
    parts: dict[str, dict[str, list[pd.DataFrame]]] = {}
    for members, out in zip(fits.values(), outs):
        start = 0
        for i in members:
            name, _, k, split = todo[i]
            cut = slice(start, start + len(split[1]))
            start = cut.stop
            for method, (pt, lo, hi) in out.items():
                frame = prediction_frame(data, split[1], k, split[2], y[split[1]], (pt[cut], lo[cut], hi[cut]), method)
                parts.setdefault(name, {}).setdefault(method, []).append(frame)
    return {name: {m: result_from_frames(target, name, p) for m, p in per.items()} for name, per in parts.items()}


def method_key(method: str) -> str:
    """A method's name as a metrics.json key part ('footprint*correction' -> 'footprint_times_correction')."""
    return method.replace("+", "_plus_").replace("*", "_times_")


def memory_metrics(errors: pd.DataFrame, model: FootprintModel | None = None,
                   headline_scheme: str = "grouped_random") -> dict[str, Any]:
    """The figures of merit for reports/metrics.json: per method and scheme, pooled and on this project's own runs."""
    pooled, own = summarize_memory(errors), summarize_memory(own_rows(errors))
    out: dict[str, Any] = {
        "memory_median_rel_err": pooled.loc[BEST, ("median", headline_scheme)],
        "memory_p90_rel_err": pooled.loc[BEST, ("p90", headline_scheme)],
        "memory_median_rel_err_horus": pooled.loc["horus", ("median", headline_scheme)],
    }
    for name, table in (("", pooled), ("_own", own)):
        for method in table.index:
            for scheme in table.columns.get_level_values(1).unique():
                key = f"memory_{method_key(method)}_{scheme}{name}"
                out[f"{key}_median_rel_err"] = float(table.loc[method, ("median", scheme)])
                out[f"{key}_p90_rel_err"] = float(table.loc[method, ("p90", scheme)])
                if method == BEST:
                    out[f"{key}_coverage"] = float(table.loc[method, ("coverage", scheme)])
    by = summarize_memory(errors, by_source=True)
    out["memory_median_rel_err_by_source"] = {
        src: {scheme: {method_key(m): float(by.loc[(m, src), ("median", scheme)])
                       for m in METHODS if (m, src) in by.index}
              for scheme in by.columns.get_level_values(1).unique()} for src in sorted(errors["source"].unique())}
    if model is not None:
        out["memory_footprint_constants"] = model.footprint_.constants()
        out["memory_interval_log_halfwidth"] = {k: round(v, 4) for k, v in model.halfwidth_.items()}
        out["memory_correction_setting"] = model.setting_.describe()
    return out


MEMORY_METRICS = MetricsSchema("05-memory", (
    (r"memory_\w+", "memory estimates' errors per method and scheme, pooled, own runs and per source (memory_metrics)"),
))
