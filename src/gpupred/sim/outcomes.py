"""Tables, goal checks and the closing note of notebook 07 from :func:`gpupred.sim.experiment.run_trace` rows (never
typed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.sim.experiment import POLICY_ORDER
from gpupred.sim.metrics import interval, oracle_gain_share, paired_differences, report_metrics, summarize_seeds

GOAL_RHO = 0.10  # Gavel trace: ours' p95 rho at least this far below Horus's (relative), at equal or better throughput
GOAL_SHARE = 0.25  # Gavel trace: ours gets at least this share of the oracle pairing gain over random pairing
TABLE_KEYS: tuple[str, ...] = ("mean_jct_s", "p95_jct_s", "p95_rho", "ooms", "failed_placements", "throughput")


def trace_tables(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per load: (summary over seeds, paired differences against Horus, oracle-gain shares), each with a load column."""
    summaries, paired, shares = [], [], []
    for load, r in runs.groupby("load", sort=True):
        order = [p for p in POLICY_ORDER if p in set(r["policy"])]
        r = r.assign(policy=pd.Categorical(r["policy"], order)).sort_values(["seed", "policy"])
        r = r.assign(policy=r["policy"].astype(str))
        summaries.append(summarize_seeds(r).assign(load=load))
        paired.append(paired_differences(r, base="horus", policies=tuple(p for p in order if p != "horus")).assign(load=load))
        shares.append(oracle_gain_share(r).assign(load=load))
    return pd.concat(summaries, ignore_index=True), pd.concat(paired, ignore_index=True), pd.concat(shares, ignore_index=True)


def trace_metrics(prefix: str, summary: pd.DataFrame, paired: pd.DataFrame, shares: pd.DataFrame) -> dict[str, float]:
    """metrics.json keys of one trace (:func:`gpupred.sim.metrics.report_metrics`), one prefix per load
    (``<prefix>_load<L>``)."""
    out: dict[str, float] = {}
    for load, s in summary.groupby("load"):
        key = f"{prefix}_load{load:g}".replace(".", "p")
        out.update(report_metrics(s, paired[paired["load"] == load], key, shares[shares["load"] == load]))
    return out


def display_table(summary: pd.DataFrame, keys: tuple[str, ...] = TABLE_KEYS) -> pd.DataFrame:
    """The summary as ``mean ± half-width`` strings, one row per (load, policy)."""
    out = summary[["load", "policy"]].copy()
    for k in keys:
        out[k] = [f"{m:,.3g} ± {h:,.2g}" if np.isfinite(h) else f"{m:,.3g}" for m, h in zip(summary[k], summary[f"{k}_ci"])]
    return out


POLICY_FIGURES: dict[str, tuple[float, str, str]] = {  # key -> (scale, axis label, what the figure shows)
    "mean_jct_s": (1 / 3600, "mean job completion time (h)", "mean JCT"),
    "p95_rho": (1.0, "p95 of ρ = JCT / solo run time", "p95 finish-time fairness ρ"),
}


def plot_policies(summaries: dict[str, pd.DataFrame], key: str = "mean_jct_s") -> Any:
    """Each policy's ``key`` (:data:`POLICY_FIGURES`: JCT in hours) as the mean over seeds (bars) with its 95 %
    half-width (whiskers), one panel per trace and load: ``summaries`` maps a trace to its :func:`trace_tables`
    summary."""
    import matplotlib.pyplot as plt

    scale, ylabel, what = POLICY_FIGURES[key]
    loads = sorted({float(v) for s in summaries.values() for v in s["load"]})
    fig, axes = plt.subplots(len(loads), len(summaries), figsize=(5.2 * len(summaries), 3.4 * len(loads)),
                             squeeze=False, sharex=True)
    for j, (name, summary) in enumerate(summaries.items()):
        for i, load in enumerate(loads):
            s = summary[summary["load"] == load]
            order = [p for p in POLICY_ORDER if p in set(s["policy"])]
            s = s.set_index("policy").loc[order]
            hours, half = s[key].to_numpy(float) * scale, s[f"{key}_ci"].to_numpy(float) * scale
            ax = axes[i, j]
            ax.bar(order, hours, yerr=np.where(np.isfinite(half), half, 0), capsize=3,
                   color=["tab:orange" if p == "ours" else "tab:blue" for p in order])
            seeds = f", {int(s['seeds'].max())} seeds" if "seeds" in s.columns else ""
            ax.set_title(f"{name} trace, load {load:g}x{seeds}", fontsize=10)
            ax.set_ylabel(ylabel)
            ax.grid(axis="y", alpha=0.3)
            ax.tick_params(axis="x", labelrotation=30)
    fig.suptitle(f"Scheduling simulation: {what} per placement policy on each trace's evaluation slice "
                 "(ours: held-out predictions, pair slowdowns adapted on k co-runs; whiskers: 95 % CI over seeds)", fontsize=10.5)
    fig.tight_layout()
    return fig


def _row(frame: pd.DataFrame, load: float, column: str, value: str) -> pd.Series | None:
    sel = frame[(frame["load"] == load) & (frame[column] == value)]
    return sel.iloc[0] if len(sel) else None


def gavel_goals(runs: pd.DataFrame, summary: pd.DataFrame, paired: pd.DataFrame, shares: pd.DataFrame) -> dict[str, float]:
    """Per load on the Gavel trace: ours' failed placements (every seed), p95 rho and throughput against Horus, the
    oracle-gain share, and whether each goal is met ("equal or better throughput": the paired difference's 95 %
    interval reaches 0 or above)."""
    out: dict[str, float] = {}
    for load in sorted(summary["load"].unique()):
        key = f"sim_gavel_goal_load{load:g}".replace(".", "p")
        ours, horus = _row(summary, load, "policy", "ours"), _row(summary, load, "policy", "horus")
        share = _row(shares, load, "policy", "ours")
        if ours is None or horus is None:
            continue
        fails = int(runs[(runs["load"] == load) & (runs["policy"] == "ours")]["failed_placements"].sum())
        rho_drop = 1.0 - ours["p95_rho"] / horus["p95_rho"] if horus["p95_rho"] > 0 else float("nan")
        d = _row(paired, load, "comparison", "ours_minus_horus")
        _, _, tp_high = interval(d, "throughput") if d is not None else (np.nan, np.nan, np.nan)
        out.update({f"{key}_ours_failed_placements": fails, f"{key}_p95_rho_drop": rho_drop,
                    f"{key}_throughput_diff": float(d["throughput"]) if d is not None else float("nan"),
                    f"{key}_oracle_share": float(share["share"]) if share is not None else float("nan"),
                    f"{key}_zero_failed_met": float(fails == 0),
                    f"{key}_rho_met": float(rho_drop >= GOAL_RHO and tp_high >= 0),
                    f"{key}_share_met": float(share is not None and share["share"] >= GOAL_SHARE)})
    return out


def openb_goals(paired: pd.DataFrame) -> dict[str, float]:
    """Per load on the openb trace: ours - Horus mean JCT with its interval and OOMs, and whether the goal is met
    (the interval's upper end at most 0, no more OOMs)."""
    out: dict[str, float] = {}
    for load in sorted(paired["load"].unique()):
        d = _row(paired, load, "comparison", "ours_minus_horus")
        if d is None:
            continue
        key = f"sim_openb_goal_load{load:g}".replace(".", "p")
        m, lo, hi = interval(d, "mean_jct_s")
        out.update({f"{key}_jct_diff": m, f"{key}_jct_diff_low": lo, f"{key}_jct_diff_high": hi,
                    f"{key}_ooms_diff": float(d["ooms"]), f"{key}_met": float(hi <= 0 and d["ooms"] <= 0)})
    return out


def _fmt_interval(row: pd.Series | None, key: str) -> str:
    if row is None:
        return "n/a"
    m, lo, hi = interval(row, key)
    return f"{m:+,.3g} [{lo:+,.3g}, {hi:+,.3g}]"


def trace_markdown(name: str, summary: pd.DataFrame, paired: pd.DataFrame, shares: pd.DataFrame) -> list[str]:
    """Markdown lines: per load, the policy table (mean over seeds) and ours - Horus with 95 % intervals."""
    lines = []
    for load in sorted(summary["load"].unique()):
        lines += [f"**{name}, load {load:g}** (mean over seeds; ± is the 95 % half-width)", "",
                  "| policy | mean JCT (s) | p95 JCT (s) | p95 rho | OOMs | failed placements | throughput | oracle-gain share |",
                  "|---|---|---|---|---|---|---|---|"]
        for _, r in summary[summary["load"] == load].iterrows():
            sh = _row(shares, load, "policy", r["policy"])
            cells = [f"{r[k]:,.4g} ± {r[f'{k}_ci']:,.2g}" for k in TABLE_KEYS]
            share = f"{sh['share']:.2f} [{sh['low']:.2f}, {sh['high']:.2f}]" if sh is not None and np.isfinite(sh["share"]) else "n/a"
            lines.append(f"| {r['policy']} | " + " | ".join(cells) + f" | {share} |")
        d = _row(paired, load, "comparison", "ours_minus_horus")
        lines += ["", "ours - Horus (paired by seed): " + "; ".join(f"{k} {_fmt_interval(d, k)}" for k in TABLE_KEYS), ""]
    return lines


def closing_markdown(traces: dict[str, tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]], goals: dict[str, float]) -> str:
    """The closing note: both policy tables and the goals, every figure read from the results."""
    lines = ["### Closing note (every figure read from this run's results)", ""]
    for name, (summary, paired, shares) in traces.items():
        lines += trace_markdown(name, summary, paired, shares)
    for k in sorted(goals):
        if k.endswith("_met"):
            stem = k.removesuffix("_met")
            lines.append(f"- {stem}: {'met' if goals[k] else 'not met'}")
    details = {k: v for k, v in goals.items() if not k.endswith("_met")}
    lines += ["", "goal figures: " + "; ".join(f"{k} = {v:,.3g}" for k, v in sorted(details.items()))]
    return "\n".join(lines)


__all__ = ["TABLE_KEYS", "closing_markdown", "display_table", "gavel_goals", "openb_goals", "trace_metrics", "trace_tables"]
