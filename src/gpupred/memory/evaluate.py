"""The memory estimator beside its baselines (evaluation only: nothing at run time imports it).

Evaluation (:func:`evaluate_memory`, notebook 05) uses the same splits as the regressors (grouped by workload, and
leave-one-family-out with sibling families together) and reports every figure per source as well:
Horus's formula, the first analytical estimate with a learned residual (:mod:`gpupred.memory.baselines`), the
footprint and the footprint x correction (:class:`gpupred.memory.estimator.MemoryEstimator`).
:func:`compare_memory` (notebook 03) scores the constant baseline, the current regressor, the footprint and the
footprint x correction on the splits of the utilization comparison (:func:`gpupred.step.evaluate.comparison_splits`).
The correction's setting is chosen inside :meth:`MemoryEstimator.fit`, on the rows it is given, so both
evaluations are nested.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.dataset import own_rows
from gpupred.memory.estimator import BEST, MemoryEstimator
from gpupred.memory.baselines import MemoryModel
from gpupred.reports import MetricsSchema

METHODS: tuple[str, ...] = ("horus", "analytical", "analytical+residual", "footprint", "footprint*correction")
OLD_METHODS: tuple[str, ...] = METHODS[:3]


def evaluate_memory(df: pd.DataFrame, schemes: tuple[str, ...] = ("grouped_random", "lofo"), n_folds: int = 5,
                    target: str = "memory_mib", seed: int = 0, residual_model: str = "lightgbm") -> pd.DataFrame:
    """Out-of-sample estimate, relative error and interval of every method, one row per (scheme, split, run, method).

    ``df`` needs the footprint's graph terms (:func:`gpupred.memory.physics.footprint_columns`) for the footprint
    methods to count activations from the graph; without them the footprint falls back to ``activation_bytes``.
    """
    from gpupred.learn.evaluation import splits_for

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
    new = MemoryEstimator(seed=seed).fit(train, target).predict(test)
    return pd.concat([old, new], axis=1)


TORCH_FIGURES: dict[str, str] = {"allocated": "torch_peak_allocated_mib", "reserved": "torch_peak_reserved_mib"}


def _error_rows(test: pd.DataFrame, est: pd.DataFrame, target: str, scheme: str, label: str) -> pd.DataFrame:
    """Long table of one split: estimate, relative error and interval coverage per run and method, and on the best
    method's rows its torch figures beside the measured ones (``TORCH_FIGURES``)."""
    measured = test[target].to_numpy(float)
    source = test["source"].to_numpy() if "source" in test.columns else np.full(len(test), "")
    inside = ((est["low"] <= measured) & (measured <= est["high"])).to_numpy(float)
    torch_figures: dict[str, Any] = {}
    for figure, column in TORCH_FIGURES.items():
        torch_figures[f"{figure}_mib"] = est[figure].to_numpy(float)
        torch_figures[f"{figure}_measured_mib"] = (test[column].to_numpy(float) if column in test.columns
                                                   else np.full(len(test), np.nan))
    rows = []
    for method in METHODS:
        e = est[method].to_numpy(float)
        rows.append(pd.DataFrame({
            "scheme": scheme, "split": label, "method": method, "run_id": test["run_id"].to_numpy(),
            "estimate_mib": e, "measured_mib": measured, "rel_err": np.abs(e - measured) / measured,
            "covered": inside if method == BEST else np.nan, "source": source, "family": test["family"].to_numpy(),
            "precision": test["precision"].to_numpy() if "precision" in test.columns else "",
            **(torch_figures if method == BEST else dict.fromkeys(torch_figures, np.nan))}))
    return pd.concat(rows, ignore_index=True)


def torch_figure_metrics(errors: pd.DataFrame) -> dict[str, float]:
    """The estimator's torch figures (allocated and reserved peaks, :meth:`MemoryEstimator.predict`) against the
    peaks this project's profiler read from torch, on its own runs, per scheme: median and 90th-percentile relative
    error over every run and over the 16-bit ones. The profiler's peaks span the job's life, cuDNN's autotuning
    included (``cudnn.benchmark``: its trial workspaces), which the fp32 convolution nets' peaks show and no count of
    the step's tensors holds; the 16-bit runs' peaks are the step's."""
    rows = own_rows(errors)
    rows = rows[rows["method"] == BEST]
    out: dict[str, float] = {}
    for figure in TORCH_FIGURES:
        for scheme, g in rows.groupby("scheme"):
            for label, part in (("", g), ("_16bit", g[g["precision"].isin(["bf16", "fp16", "bf16-pure"])])):
                measured = part[f"{figure}_measured_mib"].to_numpy(float)
                ok = np.isfinite(measured) & (measured > 0)
                err = np.abs(part[f"{figure}_mib"].to_numpy(float)[ok] / measured[ok] - 1)
                key = f"memory_torch_{figure}_{scheme}{label}_own"
                out[f"{key}_median_rel_err"] = float(np.median(err)) if len(err) else float("nan")
                out[f"{key}_p90_rel_err"] = float(np.quantile(err, 0.9)) if len(err) else float("nan")
                out[f"{key}_rows"] = float(len(err))
    return out


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
        ax.set_title(f"source: {src}" if src else "")
    fig.suptitle("Memory: relative error of each method on held-out rows, per split scheme (colour) and source")
    fig.tight_layout()
    return fig


SCHEME_NAMES: dict[str, str] = {"grouped_random": "grouped random folds (unseen workloads)",
                                 "lofo": "leave one family out", "cross_gpu": "cross GPU (unseen kind)"}


def mib_axis(axis: Any) -> None:
    """Readable ticks on a log axis of MiB: 256 MiB, 1 GiB, 4 GiB... instead of powers of ten."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = [2.0 ** k for k in range(4, 21)]  # 16 MiB .. 1 TiB
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1024:g} GiB" if v >= 1024 else f"{v:g} MiB"))


def plot_estimates(errors: pd.DataFrame, scheme: str = "grouped_random", ncols: int = 3) -> Any:
    """Estimated vs measured memory (log axes in MiB/GiB) per method under one held-out scheme, coloured by source.

    The axes span the measured range: an estimate below it is drawn on the bottom edge as a triangle and counted in
    its panel's title, so that one method's far misses do not squash every panel into a corner."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = errors[errors["scheme"] == scheme]
    methods = list(dict.fromkeys(data["method"]))
    nrows = -(-len(methods) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 4.2 * nrows), squeeze=False, sharex=True, sharey=True)
    lo = float(data["measured_mib"].min()) / 2
    hi = float(data[["estimate_mib", "measured_mib"]].max().max()) * 1.3
    sources = sorted(data["source"].unique())
    for i, (ax, method) in enumerate(zip(axes.flat, methods)):
        d = data[data["method"] == method].assign(shown=lambda t: t["estimate_mib"].clip(lower=lo * 1.05))
        below = d["estimate_mib"] < lo
        sns.scatterplot(data=d[~below], x="measured_mib", y="shown", hue="source", hue_order=sources, s=12,
                        alpha=0.6, linewidth=0, ax=ax, legend=i == 0)
        ax.scatter(d.loc[below, "measured_mib"], d.loc[below, "shown"], marker="v", s=14, color="0.4")
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
        note = f"\n{int(below.sum())} estimates below {lo:.0f} MiB (triangles)" if below.any() else ""
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=f"{method}{note}",
               xlabel="measured peak memory", ylabel="estimate")
        mib_axis(ax.xaxis)
        mib_axis(ax.yaxis)
        ax.tick_params(axis="x", labelrotation=45)
    for i, ax in enumerate(list(axes.flat)[len(methods):], start=len(methods)):
        ax.set_visible(False)
        axes.flat[i - ncols].tick_params(axis="x", labelbottom=True, labelrotation=45)
        axes.flat[i - ncols].set_xlabel("measured peak memory")
    fig.suptitle(f"Memory estimate vs measured, held out by {SCHEME_NAMES.get(scheme, scheme)}, every source")
    fig.tight_layout()
    return fig


COMPARISON_METHODS: dict[str, str] = {  # notebook 03's method names (gpupred.step.evaluate.METHODS) -> what memory runs
    "constant": "the training rows' mean of log1p(memory)", "regressor": "the current regressor (CV+ LightGBM on the "
    "features, no footprint)", "physics": "the analytic footprint", "physics+correction": BEST}


def regressor_columns(df: pd.DataFrame) -> list[str]:
    """The current regressor's inputs: the dataset's feature columns without the footprint's graph terms."""
    from gpupred.dataset import feature_columns
    from gpupred.memory.physics import FOOTPRINT_COLUMNS

    return [c for c in feature_columns(df) if c not in FOOTPRINT_COLUMNS]


def split_methods(data: pd.DataFrame, train: np.ndarray, test: np.ndarray, groups: np.ndarray, cv: Any,
                  target: str = "memory_mib") -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every comparison method's (point, low, high) in MiB on the ``test`` rows, fitted on the ``train`` rows only."""
    from gpupred.learn.evaluation import constant_baseline
    from gpupred.learn.intervals import ConformalRegressor
    from gpupred.learn.parallel import one_thread
    from gpupred.learn.regressors import correction_model

    y = data[target].to_numpy(float)
    strata = data["source"].astype(str).to_numpy()
    X = data[regressor_columns(data)].to_numpy(float)
    with one_thread():  # one thread per parallel split
        reg = ConformalRegressor(correction_model(cv.seed), cv.alpha, cv.n_cal, cv.seed)
        reg.fit(X[train], y[train], groups=groups[train], strata=strata[train])
        regressed = reg.predict(X[test], strata[test])
        est = MemoryEstimator(seed=cv.seed).fit(data.iloc[train], target).predict(data.iloc[test])
    nan = np.full(len(test), np.nan)
    return {"constant": constant_baseline(y[train], len(test), cv.alpha), "regressor": regressed,
            "physics": (est["footprint"].to_numpy(), nan, nan),
            "physics+correction": (est[BEST].to_numpy(), est["low"].to_numpy(), est["high"].to_numpy())}


def compare_memory(df: pd.DataFrame, cv: Any = None, n_within: int = 5, target: str = "memory_mib",
                   schemes: tuple[str, ...] = ("within", "lofo", "cross_gpu")) -> dict[str, dict[str, Any]]:
    """Notebook 03's four methods (``COMPARISON_METHODS``) on the splits of the utilization comparison
    (:func:`gpupred.step.evaluate.comparison_splits`), as ``{scheme: {method: NestedResult}}``.

    ``df`` needs the footprint's graph terms (:func:`gpupred.memory.physics.footprint_columns`). Outer splits run in
    parallel (``cv.n_jobs``); each method is fitted on the split's training rows alone."""
    from gpupred.learn.folds import interval_groups
    from gpupred.learn.nested import CVSettings, prediction_frame, result_from_frames
    from gpupred.learn.parallel import parallel_map
    from gpupred.step.evaluate import comparison_splits

    cv = cv or CVSettings()
    data = df[df[target].notna()].reset_index(drop=True)
    y = data[target].to_numpy(float)
    todo = [(name, "family", k, split) for name, splits in comparison_splits(data, n_within, cv.seed).items()
            if name in schemes for k, split in enumerate(splits)]
    groups = {"family": interval_groups(data, "family")}  # the regressor baseline calibrated as the step estimator
    fits: dict[tuple[bytes, str], list[int]] = {}  # splits with one training side (e.g. A100 -> H200, A100 -> RTX 3090)
    for i, (_, grouping, _, split) in enumerate(todo):
        fits.setdefault((np.sort(split[0]).tobytes(), grouping), []).append(i)
    jobs = [(todo[m[0]][3][0], np.concatenate([todo[i][3][1] for i in m]), groups[g]) for (_, g), m in fits.items()]
    outs = parallel_map(split_methods, [(data, train, test, grp, cv, target) for train, test, grp in jobs], cv.n_jobs,
                        progress=False)
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


def memory_metrics(errors: pd.DataFrame, model: MemoryEstimator | None = None,
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
    out.update(torch_figure_metrics(errors))
    if model is not None:
        out["memory_footprint_constants"] = model.footprint_.constants()
        out["memory_interval_log_halfwidth"] = {k: round(v, 4) for k, v in model.halfwidth_.items()}
        out["memory_correction_setting"] = model.setting_.describe()
    return out


# What notebook 03 writes of the memory estimator beside the step estimator's (gpupred.contracts assembles its
# contract); notebook 05's own contract is MEMORY_METRICS below.
MEMORY_METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (r"memory_(rmsle|mre)_(within|lofo|crossgpu)(_baseline)?",
     "the shipped estimators' held-out error on this project's runs (with _baseline: the regressor baseline's)"),
    (r"memory_coverage_lofo", "their 90 % intervals' coverage, leave one family out"),
    (r"memory_width_lofo",
     "their 90 % intervals' median width relative to the prediction, (high - low) / prediction, leave one family out"),
)


MEMORY_METRICS = MetricsSchema("05-memory", (
    (r"memory_finetune_\w+_(full|lora|qlora)_(memory_gib|states_count_gib)",
     "a real-size decoder's fine-tune (full, LoRA, QLoRA: gpupred.predictor.realworld_report.finetune_recipes) on "
     "one GPU: predicted memory (GiB, the default predictor's memory estimator) and the hand count of its weights, "
     "gradients and optimizer state (GiB)"),
    (r"memory_finetune_measured_\w+", "this project's measured fine-tunes (the campaign's stage 3) against the memory "
     "estimator: runs compared, and the median and 90th-percentile |predicted / measured - 1| of torch's allocated "
     "peak, its reserved peak and NVML's device memory (gpupred.predictor.realworld_report.finetune_measured)"),
    (r"memory_torch_(allocated|reserved)_\w+", "the memory estimator's torch figures (allocated and reserved peaks, "
     "the physics' own) against the peaks the profiler read from torch on this project's runs, per scheme, over every "
     "run and the 16-bit ones (whose peaks hold no cuDNN autotuning): median and p90 relative error, rows scored "
     "(torch_figure_metrics)"),
    (r"memory_\w+", "memory estimates' errors per method and scheme, pooled, own runs and per source (memory_metrics)"),
))
