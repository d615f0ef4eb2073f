"""The figures of merit the two notebooks 03 write, computed here from the estimators' and baselines' outer-fold
results. ``03-compare-regressors`` writes the nested regressors' and the dataset's (its schema
:data:`gpupred.contracts.LEARNING_METRICS`: :data:`REGRESSOR_METRIC_KEYS` here); ``03-physics-first`` the shipped
estimators' beside their baselines (:data:`gpupred.contracts.ESTIMATOR_METRICS`, assembled from ``STEP_METRIC_KEYS``
in :mod:`gpupred.step.evaluate`, ``MEMORY_METRIC_KEYS`` in :mod:`gpupred.memory.evaluate`, the real-world section's
and :data:`CHOICE_METRIC_KEYS` here).

03-physics-first:

- headline figures (:func:`headline_metrics`), ``<target>_<metric>_<split>``: the shipped estimators on this project's
  own runs (the default predictor), ``<target>`` one of ``gpu_util``, ``sm_active``, ``iter_time``, ``memory``,
  ``<metric>`` ``rmsle`` or ``mre`` (median relative error) or ``coverage``, ``<split>`` ``within``, ``lofo`` or
  ``crossgpu``; with ``_baseline``: the regressor baseline on the same splits;
- the comparison of every method on the same splits (every source): ``comparison_<gpu>`` for each GPU kind this
  project measured (:func:`gpu_key`; ``{target: {scheme: {tested: {method: figure}}}}`` on that kind's runs: RMSLE,
  or the median relative error for ``RELATIVE_TARGETS``), ``comparison_<gpu>_coverage`` (90 % interval coverage),
  ``comparison_<target>_coverage_<scheme>`` (physics x correction, every row), ``step_constants`` and
  ``step_weighting``;
- ``regressors_<target>_model``: the baseline exported for bare feature rows (:func:`choice_metrics`).

03-compare-regressors:

- the nested regressors (HotCloud/Horus, every source): ``regressors_<target>_rmsle_<scheme>``,
  ``regressors_<target>_coverage_<scheme>``, ``regressors_gpu_util_rmsle_by_source`` and
  ``regressors_gpu_util_coverage_by_source`` (``{source: {scheme: figure}}``), ``regressors_<target>_rmsle_within_gpu``
  and ``regressors_<target>_rmsle_cross_gpu``;
- ``twin_ratio_median`` per GPU pair, and the dataset's counts ``dataset_*`` (:func:`gpupred.dataset.summarize`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.learn import evaluation
from gpupred.learn.nested import NestedResult

METHODS: tuple[str, ...] = ("constant", "regressor", "physics", "physics+correction")  # the comparison's, in order
SCHEME_LABELS: dict[str, str] = {"within": "within GPU (grouped)", "lofo": "leave one family out",
                                 "cross_gpu": "cross GPU (unseen)", "cross_gpu_twins": "cross GPU (twins)"}


def metric_key(target: str) -> str:
    """The prefix of a nested regressor's keys: ``regressors_<target>``."""
    return f"regressors_{target}"


def outer_metrics(results: dict[str, dict[str, NestedResult]]) -> dict[str, Any]:
    """Pooled outer-fold RMSLE and coverage per target and scheme."""
    out: dict[str, Any] = {}
    for target in sorted({t for per_target in results.values() for t in per_target}):
        key = metric_key(target)
        for scheme, per_target in results.items():
            if target in per_target:
                out[f"{key}_rmsle_{scheme}"] = per_target[target].rmsle()
                out[f"{key}_coverage_{scheme}"] = per_target[target].coverage()
    return out


def by_source(results: dict[str, dict[str, NestedResult]], target: str, sources: list[str]) -> dict[str, Any]:
    """``{key}_rmsle_by_source`` and ``{key}_coverage_by_source``: ``{source: {scheme: figure}}``."""
    per_scheme = {s: r[target] for s, r in results.items() if target in r}
    key = metric_key(target)
    rmsle = {s: r.rmsle("source") for s, r in per_scheme.items()}
    coverage = {s: r.coverage("source") for s, r in per_scheme.items()}
    return {f"{key}_rmsle_by_source": {src: {s: v.get(src) for s, v in rmsle.items()} for src in sources},
            f"{key}_coverage_by_source": {src: {s: v.get(src) for s, v in coverage.items()} for src in sources}}


def transfer_metrics(transfer: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """Within-GPU and cross-GPU RMSLE per target from :func:`gpupred.learn.crossgpu.cross_gpu_evaluation` tables."""
    out: dict[str, Any] = {}
    for target, table in transfer.items():
        key = metric_key(target)
        out[f"{key}_rmsle_within_gpu"] = {r.test_gpu: r.rmsle for r in table[table["train"] == "within"].itertuples()}
        out[f"{key}_rmsle_cross_gpu"] = {f"{r.train}->{r.test_gpu} ({r.workloads})": r.rmsle
                                         for r in table[table["train"] != "within"].itertuples()}
    return out


def learning_metrics(info: dict[str, Any], results: dict[str, dict[str, NestedResult]],
                     transfer: dict[str, pd.DataFrame], ratios: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The nested regressors' keys, the twins and the dataset's counts (``info`` from :func:`gpupred.dataset.summarize`)."""
    metrics: dict[str, Any] = {"dataset_runs_all": info["n_runs"], "dataset_workloads_all": info["n_workloads"],
                               "dataset_sources": info["sources"], "dataset_gpus": info["gpus"],
                               "dataset_families": info["n_families"]}
    metrics.update(outer_metrics(results))
    if any("gpu_util" in r for r in results.values()):
        metrics.update(by_source(results, "gpu_util", list(info["sources"])))
    metrics.update(transfer_metrics(transfer))
    metrics["twin_ratio_median"] = {kinds: r.set_index("family").filter(like="_ratio_median").to_dict("index")
                                    for kinds, r in ratios.items()}
    return metrics


def median_rel_error(res: NestedResult, rows: pd.Series | None = None) -> float:
    """Median of |prediction / measured - 1| over labelled outer rows (optionally only where ``rows`` is true)."""
    p = res.predictions
    mask = p["y"].notna() & p["pred"].notna()
    if rows is not None:
        mask &= rows.to_numpy()
    return evaluation.median_rel_error(p.loc[mask, "y"], p.loc[mask, "pred"])  # NaN without rows


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
    c = q[q["low"].notna()]
    return {"rmsle": evaluation.rmsle(q["y"], q["pred"]),
            "median_rel_err": evaluation.median_rel_error(q["y"], q["pred"]),
            "coverage": evaluation.interval_coverage(c["y"], c["low"], c["high"]) if len(c) else np.nan,
            "n": int(len(q))}


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


RELATIVE_TARGETS: tuple[str, ...] = ("iter_time_mean_s", "memory_mib")  # scored by median relative error, not RMSLE


def headline_metric(table: pd.DataFrame) -> pd.Series:
    """Each comparison row's figure: the median relative error for ``RELATIVE_TARGETS``, else the RMSLE."""
    return pd.Series(np.where(table["target"].isin(RELATIVE_TARGETS), table["median_rel_err"], table["rmsle"]),
                     index=table.index)


def nested_figures(table: pd.DataFrame, column: str, leaf: str = "method") -> dict[str, Any]:
    """``{target: {scheme: {tested: {<leaf>: value}}}}`` of one column of a comparison table (``leaf``: the column
    that names the innermost keys, e.g. ``method`` or ``weighting``)."""
    out: dict[str, Any] = {}
    columns = ["target", "scheme", "tested", leaf, column]
    for target, scheme, tested, key, value in table[columns].itertuples(index=False):
        out.setdefault(target, {}).setdefault(scheme, {}).setdefault(tested, {})[key] = value
    return out


def weighting_metrics(effect: pd.DataFrame) -> dict[str, Any]:
    """``{target: {scheme: {tested: {weighting: error}}}}`` of a :func:`gpupred.step.evaluate.weighting_effect` table
    with an ``error`` column (:func:`headline_metric`), for reports/metrics.json."""
    return nested_figures(effect, "error", leaf="weighting")


def gpu_key(gpu: str) -> str:
    """A GPU kind's short name as a metrics-key suffix: ``H200`` -> ``h200``, ``H100 SXM`` -> ``h100_sxm``."""
    return gpu.lower().replace(" ", "_")


def comparison_metrics(table: pd.DataFrame, gpus: list[str], results: dict[str, dict[str, dict[str, Any]]],
                       constants: pd.DataFrame, weighting: str) -> dict[str, Any]:
    """The comparison's keys (see the module docstring): per GPU kind of ``gpus``, the comparison table's rows scored on
    its runs; every target's ``{scheme: {method: NestedResult}}``; the step model's constants fitted on every row."""
    out: dict[str, Any] = {"step_constants": constants.reset_index().to_dict("records"), "step_weighting": weighting}
    for gpu in gpus:
        own = table[tested_on(table, gpu)]
        out[f"comparison_{gpu_key(gpu)}"] = nested_figures(own.assign(figure=headline_metric(own)), "figure")
        out[f"comparison_{gpu_key(gpu)}_coverage"] = nested_figures(own[own["coverage"].notna()], "coverage")
    for target, per_scheme in results.items():
        for scheme, per_method in per_scheme.items():
            out[f"comparison_{target}_coverage_{scheme}"] = score(per_method["physics+correction"])["coverage"]
    return out


def plot_methods(table: pd.DataFrame, gpu: str = "H200") -> Any:
    """The item-8 figure: one panel per target, each method's figure on ``gpu``'s runs per split (RMSLE; median
    relative error for ``RELATIVE_TARGETS``)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    rows = table[tested_on(table, gpu)].copy()
    rows["metric"] = headline_metric(rows)
    twins = np.where(rows["scheme"].str.contains("twins"), " (twins)", "")
    rows["split"] = np.where(rows["scheme"].str.startswith("cross"), rows["tested"] + twins, rows["scheme"])
    targets = list(dict.fromkeys(rows["target"])) or [""]
    fig, axes = plt.subplots(1, len(targets), figsize=(5.0 * len(targets), 4.2), squeeze=False)
    for ax, target in zip(axes[0], targets):
        sns.barplot(data=rows[rows["target"] == target], x="split", y="metric", hue="method",
                    hue_order=list(METHODS), ax=ax)
        ax.set(xlabel="", ylabel="median relative error" if target in RELATIVE_TARGETS else "RMSLE",
               title=f"{target} on {gpu} runs")
        ax.tick_params(axis="x", rotation=25)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


HEADLINE_TARGETS: dict[str, str] = {"gpu_util": "gpu_util", "sm_active": "sm_active", "iter_time_mean_s": "iter_time",
                                    "memory_mib": "memory"}
HEADLINE_SPLITS: dict[str, str] = {"within": "within", "lofo": "lofo", "cross_gpu": "crossgpu"}


def relative_width(res: NestedResult) -> float:
    """The median width of a result's 90 % intervals relative to its prediction, ``(high - low) / pred``."""
    p = res.predictions
    q = p[p["low"].notna() & p["high"].notna() & (p["pred"] > 0)]
    return float(np.median((q["high"] - q["low"]) / q["pred"])) if len(q) else float("nan")


def headline_metrics(results: dict[str, dict[str, dict[str, NestedResult]]], method: str = "physics+correction",
                     suffix: str = "") -> dict[str, Any]:
    """``<target>_<metric>_<split>{suffix}`` of one method, pooled over every row each split tested: ``rmsle`` for
    utilization and SM activity, ``mre`` (median relative error) for iteration time and memory, and the 90 %
    intervals' ``coverage`` and median relative ``width`` under leave one family out. ``results``: target -> scheme -> method -> NestedResult."""
    out: dict[str, Any] = {}
    for target, per_scheme in results.items():
        name = HEADLINE_TARGETS.get(target)
        if name is None:
            continue
        metric = "mre" if target in RELATIVE_TARGETS else "rmsle"
        for scheme, split in HEADLINE_SPLITS.items():
            res = per_scheme.get(scheme, {}).get(method)
            if res is None or not len(res.predictions):
                continue
            figures = score(res)
            out[f"{name}_{metric}_{split}{suffix}"] = figures["median_rel_err" if metric == "mre" else "rmsle"]
            if scheme == "lofo" and not suffix:
                out[f"{name}_coverage_{split}"] = figures["coverage"]
                out[f"{name}_width_{split}"] = relative_width(res)
    return out


# What notebook 03 writes of the nested regressors (the HotCloud/Horus baselines) and of the dataset; its whole
# contract is assembled in gpupred.contracts.
REGRESSOR_METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (r"regressors_\w+_(rmsle|coverage)_(grouped_random|lofo)", "the nested regressors' outer-fold figures"),
    (r"regressors_gpu_util_(rmsle|coverage)_by_source", "{source: {scheme: figure}}"),
    (r"regressors_\w+_rmsle_(within|cross)_gpu", "the nested regressors within and across GPU kinds"),
    (r"dataset_(runs|workloads)_all|dataset_(sources|gpus|families)", "the dataset's counts"),
    (r"twin_ratio_median", "per GPU pair, per family: the measured ratio of twin runs"),
)


CHOICE_METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (r"regressors_\w+_model", "the baseline regressor chosen for bare feature rows"),
)


def choice_metrics(chosen: dict[str, str]) -> dict[str, str]:
    """``regressors_<target>_model``: the baseline regressor exported per target for bare feature rows."""
    return {f"{metric_key(target)}_model": model for target, model in sorted(chosen.items())}


def cross_gpu_prose(table: pd.DataFrame, gpus: list[str], method: str = "physics+correction") -> str:
    """One sentence per cross-GPU split of a :func:`comparison_table` tested on one of ``gpus``: ``method``'s error
    there against within the tested kind's own runs, per target, read from the table."""
    lines = []
    rows = table[table["method"] == method].assign(figure=lambda t: headline_metric(t))
    for gpu in gpus:
        within = rows[(rows["scheme"] == SCHEME_LABELS["within"]) & (rows["tested"] == gpu)].set_index("target")["figure"]
        cross = rows[rows["scheme"].str.startswith("cross GPU") & rows["tested"].str.endswith(f"->{gpu}")]
        for (scheme, side), part in cross.groupby(["scheme", "tested"], sort=True):
            figures = []
            for r in part.itertuples(index=False):
                unit = "median relative error" if r.target in RELATIVE_TARGETS else "RMSLE"
                ref = f" (within {gpu}: {within[r.target]:.3f})" if r.target in within.index else ""
                figures.append(f"{r.target} {unit} {r.figure:.3f}{ref}")
            lines.append(f"**{side}**, {scheme}: " + "; ".join(figures) + ".")
    return "\n\n".join(lines) or "No cross-GPU split on this project's GPU kinds yet (one kind measured)."
