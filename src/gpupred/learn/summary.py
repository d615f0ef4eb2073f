"""The figures of merit notebook 03 writes to ``reports/metrics.json``, named once here.

Keys (``key`` is ``util`` for ``gpu_util``, else the target's name): ``{key}_rmsle_{scheme}`` and
``{key}_interval_coverage_{scheme}`` (nested outer folds, pooled), ``{key}_best_model`` (the export choice),
for utilization also ``util_rmsle_by_source`` and ``util_interval_coverage_by_source``; with a cross-GPU
evaluation ``{key}_rmsle_within_gpu`` and ``{key}_rmsle_cross_gpu``; ``twin_ratio_median`` per GPU pair; and
the dataset's counts (:func:`gpupred.dataset.summarize`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpupred.learn.nested import NestedResult


def metric_key(target: str) -> str:
    """The prefix of a target's keys: ``util`` for ``gpu_util`` (the headline label), else the target."""
    return "util" if target == "gpu_util" else target


def outer_metrics(results: dict[str, dict[str, NestedResult]], chosen: dict[str, str]) -> dict[str, Any]:
    """Pooled outer-fold RMSLE and coverage per target and scheme, and the model chosen for export."""
    out: dict[str, Any] = {}
    targets = sorted({t for per_target in results.values() for t in per_target} | set(chosen))
    for target in targets:
        key = metric_key(target)
        for scheme, per_target in results.items():
            if target in per_target:
                out[f"{key}_rmsle_{scheme}"] = per_target[target].rmsle()
                out[f"{key}_interval_coverage_{scheme}"] = per_target[target].coverage()
        if target in chosen:
            out[f"{key}_best_model"] = chosen[target]
    return out


def by_source(results: dict[str, dict[str, NestedResult]], target: str, sources: list[str]) -> dict[str, Any]:
    """``{key}_rmsle_by_source`` and ``{key}_interval_coverage_by_source``: ``{source: {scheme: figure}}``."""
    per_scheme = {s: r[target] for s, r in results.items() if target in r}
    key = metric_key(target)
    rmsle = {s: r.rmsle("source") for s, r in per_scheme.items()}
    coverage = {s: r.coverage("source") for s, r in per_scheme.items()}
    return {f"{key}_rmsle_by_source": {src: {s: v.get(src) for s, v in rmsle.items()} for src in sources},
            f"{key}_interval_coverage_by_source": {src: {s: v.get(src) for s, v in coverage.items()} for src in sources}}


def transfer_metrics(transfer: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """Within-GPU and cross-GPU RMSLE per target from :func:`gpupred.learn.crossgpu.cross_gpu_evaluation` tables."""
    out: dict[str, Any] = {}
    for target, table in transfer.items():
        key = metric_key(target)
        out[f"{key}_rmsle_within_gpu"] = {r.test_gpu: r.rmsle for r in table[table["train"] == "within"].itertuples()}
        out[f"{key}_rmsle_cross_gpu"] = {f"{r.train}->{r.test_gpu} ({r.workloads})": r.rmsle
                                         for r in table[table["train"] != "within"].itertuples()}
    return out


def learning_metrics(info: dict[str, Any], results: dict[str, dict[str, NestedResult]], chosen: dict[str, str],
                     transfer: dict[str, pd.DataFrame], ratios: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """Every key notebook 03 writes to reports/metrics.json (``info`` from :func:`gpupred.dataset.summarize`)."""
    metrics: dict[str, Any] = {k: info[k] for k in ("n_runs", "n_workloads", "sources", "gpus", "n_families")}
    metrics.update(outer_metrics(results, chosen))
    if any("gpu_util" in r for r in results.values()):
        metrics.update(by_source(results, "gpu_util", list(info["sources"])))
    metrics.update(transfer_metrics(transfer))
    metrics["twin_ratio_median"] = {kinds: r.set_index("family").filter(like="_ratio_median").to_dict("index")
                                    for kinds, r in ratios.items()}
    return metrics
