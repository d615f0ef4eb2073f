"""Summaries of simulation results: per-policy tables over seeds, paired differences, the oracle-gain share, keys.

Keys written to ``reports/metrics.json`` (:func:`report_metrics`), for a trace prefix ``<p>`` (e.g.
``sim_openb_load1``), ``<policy>`` in :data:`gpupred.sim.experiment.POLICY_ORDER` and ``<metric>`` in
:data:`REPORT_KEYS` (``mean_jct_s``, ``p95_jct_s``, ``p95_rho`` (Themis finish-time fairness: JCT over solo run time),
``ooms``, ``failed_placements`` (OOMs plus placements beside a partner measured to fail), ``throughput`` (work per
second per unit of GPU speed while jobs arrive), ``avg_util`` %, ``mean_wait_s``):

- ``<p>_<policy>_<metric>``: mean over seeds; ``<p>_<policy>_<metric>_ci``: half-width of its 95 % interval
  (Student t over seeds);
- ``<p>_<policy>_minus_horus_<metric>`` and ``..._ci``: the paired difference policy - Horus over the same seeds;
- ``<p>_<policy>_oracle_gain_share`` and ``..._low`` / ``..._high``: the share of the oracle pairing's mean-JCT gain
  over random pairing that the policy gets (:func:`oracle_gain_share`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.reports import MetricsSchema
from gpupred.sim.cluster import SimResult

METRIC_KEYS: tuple[str, ...] = (
    "avg_util", "makespan_s", "mean_jct_s", "median_jct_s", "p95_jct_s", "mean_wait_s", "ooms", "failed_pairs",
    "failed_placements", "p95_rho", "mean_rho", "throughput", "migrations", "n_jobs", "pairs_measured", "pairs_modelled",
)
REPORT_KEYS: tuple[str, ...] = ("mean_jct_s", "p95_jct_s", "p95_rho", "ooms", "failed_placements", "throughput",
                                "avg_util", "mean_wait_s")


def metrics_table(results: list[SimResult]) -> pd.DataFrame:
    """One row per policy with every summary metric."""
    return pd.DataFrame([{"policy": r.policy, **{k: r.metrics[k] for k in METRIC_KEYS}} for r in results])


def util_timeseries(results: list[SimResult], bin_s: float) -> pd.DataFrame:
    """Cluster utilization per ``bin_s`` seconds for each policy (long format: policy, t_s, util)."""
    frames = [r.util_over_time(bin_s).assign(policy=r.policy) for r in results]
    return pd.concat(frames, ignore_index=True)


def ci_halfwidth(values: np.ndarray, level: float = 0.95) -> float:
    """Half-width of the Student-t confidence interval of the mean (NaN with fewer than 2 values)."""
    from scipy.stats import t

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return float("nan")
    return float(t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def summarize_seeds(runs: pd.DataFrame, keys: tuple[str, ...] = REPORT_KEYS) -> pd.DataFrame:
    """Mean and CI half-width over seeds per policy (``runs``: one row per seed and policy)."""
    rows = []
    for policy, g in runs.groupby("policy", sort=False):
        row: dict[str, object] = {"policy": policy, "seeds": int(g["seed"].nunique())}
        for k in keys:
            row[k] = float(g[k].mean())
            row[f"{k}_ci"] = ci_halfwidth(g[k].to_numpy())
        rows.append(row)
    return pd.DataFrame(rows)


def paired_differences(runs: pd.DataFrame, base: str = "horus", policies: tuple[str, ...] | None = None,
                       keys: tuple[str, ...] = REPORT_KEYS) -> pd.DataFrame:
    """Each policy minus ``base``, paired by seed: mean difference and CI half-width per metric."""
    wide = runs.pivot(index="seed", columns="policy")
    present = list(dict.fromkeys(runs["policy"]))
    rows = []
    for policy in policies if policies is not None else [p for p in present if p != base]:
        if policy not in present or base not in present:
            continue
        row: dict[str, object] = {"comparison": f"{policy}_minus_{base}"}
        for k in keys:
            d = (wide[(k, policy)] - wide[(k, base)]).to_numpy(float)
            row[k] = float(np.mean(d))
            row[f"{k}_ci"] = ci_halfwidth(d)
        rows.append(row)
    return pd.DataFrame(rows)


def _shares(v: np.ndarray, r: int, o: int) -> np.ndarray:
    """``(v[:, r] - v) / (v[:, r] - v[:, o])`` per row of means (NaN where the oracle column is no lower)."""
    gap = v[:, r] - v[:, o]
    safe = np.where(gap > 0, gap, 1.0)
    return np.where((gap > 0)[:, None], (v[:, [r]] - v) / safe[:, None], np.nan)


def oracle_gain_share(runs: pd.DataFrame, metric: str = "mean_jct_s", n_boot: int = 2000,
                      seed: int = 0) -> pd.DataFrame:
    """Per policy: ``(random - policy) / (random - oracle)`` of the mean ``metric`` over seeds, with a 95 % bootstrap
    interval over seeds (resampled together for every policy; NaN where the oracle gains nothing over random)."""
    wide = runs.pivot(index="seed", columns="policy", values=metric)
    if not {"random", "oracle"} <= set(wide.columns):
        return pd.DataFrame(columns=["policy", "share", "low", "high"])
    cols = list(wide.columns)
    r, o = cols.index("random"), cols.index("oracle")
    v = wide.to_numpy(float)
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))
    draws = _shares(v[idx].mean(axis=1), r, o)
    point = _shares(v.mean(axis=0, keepdims=True), r, o)[0]
    with np.errstate(all="ignore"):
        low, high = np.nanquantile(draws, 0.025, axis=0), np.nanquantile(draws, 0.975, axis=0)
    return pd.DataFrame({"policy": cols, "share": point, "low": low, "high": high})


def report_metrics(summary: pd.DataFrame, differences: pd.DataFrame | None = None, prefix: str = "sim",
                   shares: pd.DataFrame | None = None) -> dict[str, float]:
    """Flat metrics.json keys (see the module doc) from the summaries of :func:`summarize_seeds` and friends."""
    out: dict[str, float] = {}
    for _, r in summary.iterrows():
        for k in REPORT_KEYS:
            out[f"{prefix}_{r['policy']}_{k}"] = r[k]
            out[f"{prefix}_{r['policy']}_{k}_ci"] = r[f"{k}_ci"]
    for _, r in (differences if differences is not None else pd.DataFrame()).iterrows():
        for k in REPORT_KEYS:
            out[f"{prefix}_{r['comparison']}_{k}"] = r[k]
            out[f"{prefix}_{r['comparison']}_{k}_ci"] = r[f"{k}_ci"]
    for _, r in (shares if shares is not None else pd.DataFrame()).iterrows():
        out[f"{prefix}_{r['policy']}_oracle_gain_share"] = r["share"]
        out[f"{prefix}_{r['policy']}_oracle_gain_share_low"] = r["low"]
        out[f"{prefix}_{r['policy']}_oracle_gain_share_high"] = r["high"]
    return out


def interval(row: pd.Series, key: str) -> tuple[float, float, float]:
    """(mean, low, high) of a summary or difference row's ``key`` with its 95 % half-width."""
    m, h = float(row[key]), float(row[f"{key}_ci"])
    return m, m - h, m + h


SIM_METRICS = MetricsSchema("07-scheduling-sim", (
    (r"sim_\w+", "each trace's policies: figures with 95 % intervals, paired differences against Horus, the goals"),
    (r"openb_\w+", "the openb trace's import and slice counts"),
    (r"gavel_\w+", "the Gavel-matrix trace's counts"),
))
