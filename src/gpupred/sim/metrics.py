"""Summaries of simulation results: per-policy tables, utilization over time, spread over seeds, report keys.

Keys written to ``reports/metrics.json`` (:func:`report_metrics`), for ``<policy>`` in slot, reactive,
horus, ours and ``<metric>`` in :data:`REPORT_KEYS` (``avg_util`` %, ``makespan_s``, ``mean_jct_s``,
``p95_jct_s``, ``mean_wait_s`` (queueing delay), ``ooms`` (out-of-memory failures)):

- ``sim_<policy>_<metric>``: mean over seeds on the synthetic trace; ``sim_<policy>_<metric>_ci``: the
  half-width of its 95 % confidence interval (Student t over seeds);
- ``sim_trace_<policy>_<metric>`` and ``..._ci``: the same on the public-format (Philly/Helios) trace;
- ``sim_ours_minus_<other>_<metric>`` and ``..._ci`` (``sim_trace_ours_minus_...`` on the public trace):
  the paired difference ours - other over the same seeds, for other in slot and horus;
- ``sim_seeds``, ``sim_pairs_measured_frac`` (share of co-locations whose slowdown was measured).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.reports import MetricsSchema
from gpupred.sim.cluster import SimResult

METRIC_KEYS: tuple[str, ...] = (
    "avg_util", "makespan_s", "mean_jct_s", "median_jct_s", "p95_jct_s", "mean_wait_s", "ooms", "migrations", "n_jobs",
    "pairs_measured", "pairs_modelled",
)
REPORT_KEYS: tuple[str, ...] = ("avg_util", "makespan_s", "mean_jct_s", "p95_jct_s", "mean_wait_s", "ooms")


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
    """Mean and CI half-width over seeds per policy (``runs``: one row per seed and policy, as run_seeds gives)."""
    rows = []
    for policy, g in runs.groupby("policy", sort=False):
        row: dict[str, object] = {"policy": policy, "seeds": int(g["seed"].nunique())}
        for k in keys:
            row[k] = float(g[k].mean())
            row[f"{k}_ci"] = ci_halfwidth(g[k].to_numpy())
        rows.append(row)
    return pd.DataFrame(rows)


def paired_differences(runs: pd.DataFrame, ours: str = "ours", others: tuple[str, ...] = ("slot", "horus"),
                       keys: tuple[str, ...] = REPORT_KEYS) -> pd.DataFrame:
    """Ours minus each other policy, paired by seed: mean difference and CI half-width per metric."""
    wide = runs.pivot(index="seed", columns="policy")
    rows = []
    for other in others:
        if other not in runs["policy"].values or ours not in runs["policy"].values:
            continue
        row: dict[str, object] = {"comparison": f"{ours}_minus_{other}"}
        for k in keys:
            d = (wide[(k, ours)] - wide[(k, other)]).to_numpy(float)
            row[k] = float(np.mean(d))
            row[f"{k}_ci"] = ci_halfwidth(d)
        rows.append(row)
    return pd.DataFrame(rows)


def report_metrics(summary: pd.DataFrame, differences: pd.DataFrame | None = None, prefix: str = "sim") -> dict[str, float]:
    """Flat metrics.json keys (see the module doc) from :func:`summarize_seeds` and :func:`paired_differences`."""
    out: dict[str, float] = {}
    for _, r in summary.iterrows():
        for k in REPORT_KEYS:
            out[f"{prefix}_{r['policy']}_{k}"] = r[k]
            out[f"{prefix}_{r['policy']}_{k}_ci"] = r[f"{k}_ci"]
    for _, r in (differences if differences is not None else pd.DataFrame()).iterrows():
        for k in REPORT_KEYS:
            out[f"{prefix}_{r['comparison']}_{k}"] = r[k]
            out[f"{prefix}_{r['comparison']}_{k}_ci"] = r[f"{k}_ci"]
    return out


def verdict(paired: pd.DataFrame, label: str) -> str:
    """One line: ours - Horus mean JCT with its 95 % interval and OOM difference, and whether ours beats Horus."""
    row = paired[paired["comparison"] == "ours_minus_horus"].iloc[0]
    lo, hi = row["mean_jct_s"] - row["mean_jct_s_ci"], row["mean_jct_s"] + row["mean_jct_s_ci"]
    beats = hi < 0 and row["ooms"] <= 0
    return (f"{label}: ours - Horus mean JCT {row['mean_jct_s']:+.0f} s [{lo:+.0f}, {hi:+.0f}], OOMs {row['ooms']:+.1f}, "
            f"p95 JCT {row['p95_jct_s']:+.0f} s: {'beats Horus' if beats else 'does not beat Horus'}")


def why_line(sharing: pd.DataFrame, candidates: dict[str, float], max_slowdown: float, quality: str = "ours") -> str:
    """One line, from the numbers: how often ours and Horus share, what it costs in waiting, and how many pairs ours may pack."""
    s = sharing[sharing["quality"] == quality].set_index("policy") if "quality" in sharing else sharing.set_index("policy")
    o, h = s.loc["ours"], s.loc["horus"]
    return (f"ours shares {o['shared_per_job']:.3f} co-locations per job against Horus's {h['shared_per_job']:.3f} and waits "
            f"{o['mean_wait_s']:.0f} s against {h['mean_wait_s']:.0f} s (OOMs {o['ooms']:.1f} vs {h['ooms']:.1f}); at its bound "
            f"{max_slowdown} its upper-bound slowdowns allow {candidates['upper_bound']:.0%} of workload pairs, its point "
            f"predictions {candidates['point']:.0%}, the truth {candidates['truth']:.0%} (median true pair slowdown "
            f"{candidates['truth_median']:.2f}, median upper bound {candidates['upper_bound_median']:.2f})")


def load_key(load: float) -> str:
    """A load as a metrics-key part: no "." in a key (1.5 -> '1p5', 1.0 -> '1')."""
    return f"{load:g}".replace(".", "p")


SIM_METRICS = MetricsSchema("07-scheduling-sim", (
    (r"sim_\w+", "each policy's scheduling figures, their paired differences and the trace's (see this module)"),
    (r"openb_\w+", "the openb trace's import and slice counts"),
))
