"""Summaries of simulation results: per-policy metric tables, utilization over time, report keys."""

from __future__ import annotations

import pandas as pd

from gpupred.sim.cluster import SimResult

METRIC_KEYS: tuple[str, ...] = (
    "avg_util", "makespan_s", "mean_jct_s", "median_jct_s", "mean_wait_s", "ooms", "migrations", "n_jobs",
)
REPORT_KEYS: tuple[str, ...] = ("avg_util", "makespan_s", "mean_jct_s", "mean_wait_s", "ooms", "migrations")


def metrics_table(results: list[SimResult]) -> pd.DataFrame:
    """One row per policy with every summary metric."""
    return pd.DataFrame([{"policy": r.policy, **{k: r.metrics[k] for k in METRIC_KEYS}} for r in results])


def util_timeseries(results: list[SimResult], bin_s: float) -> pd.DataFrame:
    """Cluster utilization per ``bin_s`` seconds for each policy (long format: policy, t_s, util)."""
    frames = [r.util_over_time(bin_s).assign(policy=r.policy) for r in results]
    return pd.concat(frames, ignore_index=True)


def report_metrics(results: list[SimResult], prefix: str = "sim") -> dict[str, float]:
    """Flat metrics for reports/metrics.json: ``<prefix>_<policy>_<metric>``."""
    return {f"{prefix}_{r.policy}_{k}": r.metrics[k] for r in results for k in REPORT_KEYS}
