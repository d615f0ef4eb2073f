"""Tables, goal checks and the closing note of notebook 06, computed from :func:`gpupred.colocation.study.run_slice`.

Every figure in the closing note is read from these results (never typed): :func:`closing_markdown` renders it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.slowdown.evaluate import METRICS, cell_gap_se
from gpupred.colocation.study import LABELS, SliceResult

GOAL_LUCID = 0.10  # k = 3 adaptation over summed utilization on Lucid non-RL, pooled and per cell (issue 61)
GOAL_GAVEL = 0.25  # k = 3 adaptation over its prior on Gavel V100, pooled and per cell
GOAL_K = 3
Z_95 = 1.96  # a cell's gap is beyond noise below -Z_95 bootstrap standard errors


def label(name: str) -> str:
    """A predictor's readable name."""
    if name.startswith("adapted_k"):
        return f"adapted, k = {name.removeprefix('adapted_k')} reference co-runs"
    return LABELS.get(name, name)


def scores_table(results: list[SliceResult], rows_kept: str = "all", adapted: tuple[int, ...] = (GOAL_K,)) -> pd.DataFrame:
    """One row per (slice, predictor): the four metrics and the scored rows (adaptation only at ``adapted`` k)."""
    frames = []
    keep = {f"adapted_k{k}" for k in adapted}
    for r in results:
        s = r.scores[r.scores["rows_kept"] == rows_kept]
        s = s[~s["predictor"].str.startswith("adapted_k") | s["predictor"].isin(keep)]
        frames.append(s.assign(slice=r.name, predictor_label=s["predictor"].map(label)))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return out[["slice", "predictor", "predictor_label", *METRICS, "rows", "cells", "jobs"]] if len(out) else out


SPEARMAN_NAMES: dict[str, str] = {"spearman_pooled": "pooled over every held-out pair",
                                   "spearman_cell": "within a cell (mean)", "spearman_job": "per job (mean)"}


def plot_scores(scores: pd.DataFrame, wrap: int = 34) -> Any:
    """The scoring table as a figure: one panel per slice, stacked, each predictor's Spearman correlations of the
    slowdown ranking (held out by model group) as bars, predictor names wrapped so that no label overlaps."""
    import textwrap

    import matplotlib.pyplot as plt

    slices = list(dict.fromkeys(scores["slice"]))
    counts = [int((scores["slice"] == s).sum()) for s in slices]
    fig, axes = plt.subplots(len(slices), 1, figsize=(9, 0.5 * sum(counts) + 1.1 * len(slices) + 0.6), squeeze=False,
                             sharex=True, gridspec_kw={"height_ratios": counts})
    kinds = [k for k in SPEARMAN_NAMES if k in scores.columns]
    height = 0.8 / len(kinds)
    for ax, name in zip(axes[:, 0], slices):
        t = scores[scores["slice"] == name].reset_index(drop=True)
        y = np.arange(len(t))
        for i, kind in enumerate(kinds):
            ax.barh(y + (i - (len(kinds) - 1) / 2) * height, t[kind].to_numpy(float), height=height,
                    color=f"C{i}", label=SPEARMAN_NAMES[kind])
        ax.set_yticks(y, [textwrap.fill(str(v), wrap) for v in t["predictor_label"]], fontsize=8.5)
        ax.invert_yaxis()
        ax.axvline(0, color="k", lw=0.6)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"slice {name}: held out by model group", fontsize=10, loc="left")
    axes[-1, 0].set_xlabel("Spearman correlation of predicted and measured slowdown (1 = same ranking)")
    axes[0, 0].legend(loc="lower left", bbox_to_anchor=(0, 1.12), ncol=len(kinds), fontsize=8.5, frameon=False)
    fig.suptitle("Co-location: each slowdown predictor on each slice (adaptation at k = 3 reference co-runs)",
                 y=1.0)
    fig.tight_layout()
    return fig


def adaptation_curve(results: list[SliceResult]) -> pd.DataFrame:
    """Per slice and k: the adapted model's metrics, beside its prior and summed utilization on the same rows."""
    rows = []
    for r in results:
        s = r.scores[r.scores["rows_kept"] == "all"].set_index("predictor")
        for name in s.index[s.index.str.startswith("adapted_k")]:
            rows.append({"slice": r.name, "k": int(name.removeprefix("adapted_k")),
                         **{m: float(s.loc[name, m]) for m in METRICS}})
    return pd.DataFrame(rows)


def references_table(results: list[SliceResult], features: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per slice: the reference jobs in order (the first k are adaptation's k) with the solo features they were
    chosen from (``features``: slice name -> per-job solo features)."""
    rows = []
    for r in results:
        f = features.get(r.name, pd.DataFrame())
        for i, job in enumerate(r.refs):
            extra = f.loc[job].to_dict() if job in f.index else {}
            rows.append({"slice": r.name, "order": i + 1, "job_key": job, **extra})
    return pd.DataFrame(rows)


def cell_comparison(result: SliceResult, predictor: str, prior: str) -> dict[str, float]:
    """Cells where ``predictor`` ranks worse / better than ``prior`` (Spearman within the cell), the mean gap, and the
    cells where it is worse beyond noise (a gap below -1.96 bootstrap standard errors, pairs resampled)."""
    pc = result.per_cell
    if predictor not in pc or prior not in pc:
        return {"cells": 0, "worse": 0, "better": 0, "worse_beyond_noise": 0, "mean_gap": float("nan")}
    d = (pc[predictor] - pc[prior]).dropna()
    worse = d[d < -1e-9]
    se = cell_gap_se(result.heldout, predictor, prior) if len(worse) else pd.Series(dtype=float)
    beyond = int((worse < -Z_95 * se.reindex(worse.index).fillna(np.inf)).sum())
    return {"cells": int(len(d)), "worse": int(len(worse)), "better": int((d > 1e-9).sum()),
            "worse_beyond_noise": beyond, "mean_gap": float(d.mean()) if len(d) else float("nan")}


def _metric(result: SliceResult, predictor: str, metric: str) -> float:
    s = result.scores[(result.scores["rows_kept"] == "all") & (result.scores["predictor"] == predictor)]
    return float(s[metric].iloc[0]) if len(s) else float("nan")


def goal_checks(results: list[SliceResult], priors: dict[str, str]) -> dict[str, float]:
    """The issue's goals from the results: adaptation at k = 3 against its reference, and correction vs prior per cell.

    ``priors``: slice name -> its prior. On Lucid non-RL the reference is summed utilization (the larger of its
    predicted and measured Spearman); on Gavel V100, the slice's prior.
    """
    by = {r.name: r for r in results}
    out: dict[str, float] = {}
    for name, ref_names, goal in (("lucid_nonrl", ("sum_util_pred", "sum_util_meas"), GOAL_LUCID),
                                  ("gavel_v100", (priors.get("gavel_v100", "step_share"),), GOAL_GAVEL)):
        if name not in by:
            continue
        for m in ("spearman_pooled", "spearman_cell"):
            ref = max(_metric(by[name], n, m) for n in ref_names)
            got = _metric(by[name], f"adapted_k{GOAL_K}", m)
            out[f"slowdown_goal_{m}_{name}_reference"] = ref
            out[f"slowdown_goal_{m}_{name}_gain"] = got - ref
            out[f"slowdown_goal_{m}_{name}_met"] = float(got - ref >= goal)
    for r in results:
        c = cell_comparison(r, "corrected", priors[r.name])
        out[f"slowdown_cells_worse_than_prior_{r.name}_corrected"] = c["worse"]
        out[f"slowdown_cells_worse_beyond_noise_{r.name}_corrected"] = c["worse_beyond_noise"]
        out[f"slowdown_cells_{r.name}"] = c["cells"]
    return out


def _fmt(v: float) -> str:
    return "n/a" if not np.isfinite(v) else f"{v:.3f}"


def closing_markdown(results: list[SliceResult], goals: dict[str, float], priors: dict[str, str]) -> str:
    """The closing note: per slice the scoring table, the adaptation curve, and whether each goal is met."""
    lines = ["### Closing note (every figure read from this run's results)", ""]
    for r in results:
        s = r.scores[r.scores["rows_kept"] == "all"].set_index("predictor")
        lines += [f"**{r.label}** ({int(s['rows'].max())} held-out member rows, {int(s['cells'].max())} cells; references: "
                  f"{', '.join(r.refs[:GOAL_K])}):", "",
                  "| predictor | pooled | per cell | within job | MAE |", "|---|---|---|---|---|"]
        for name in s.index:
            if name.startswith("adapted_k") and name != f"adapted_k{GOAL_K}":
                continue
            lines.append(f"| {label(name)} | {_fmt(s.loc[name, 'spearman_pooled'])} | {_fmt(s.loc[name, 'spearman_cell'])} | "
                         f"{_fmt(s.loc[name, 'spearman_job'])} | {_fmt(s.loc[name, 'mae'])} |")
        curve = s[s.index.str.startswith("adapted_k")]
        lines += ["", "adaptation, k = 0..5, pooled: " + ", ".join(_fmt(v) for v in curve["spearman_pooled"])
                  + "; per cell: " + ", ".join(_fmt(v) for v in curve["spearman_cell"]), ""]
        c = cell_comparison(r, "corrected", priors[r.name])
        lines += [f"the correction is worse than its prior ({label(priors[r.name])}) in {c['worse']} of {c['cells']} "
                  f"cells ({c['worse_beyond_noise']} beyond noise), better in {c['better']} (mean gap "
                  f"{_fmt(c['mean_gap'])}); it was kept in "
                  f"{int((r.chosen != 'prior').sum())} of {len(r.chosen)} cells.", ""]
    for name, goal in (("lucid_nonrl", GOAL_LUCID), ("gavel_v100", GOAL_GAVEL)):
        if f"slowdown_goal_spearman_pooled_{name}_met" not in goals:
            lines.append(f"Goal on {name}: not evaluated (slice not present).")
            continue
        parts = [f"{m.removeprefix('spearman_')} {goals[f'slowdown_goal_{m}_{name}_gain']:+.3f} over "
                 f"{_fmt(goals[f'slowdown_goal_{m}_{name}_reference'])}" for m in ("spearman_pooled", "spearman_cell")]
        met = all(goals[f"slowdown_goal_{m}_{name}_met"] for m in ("spearman_pooled", "spearman_cell"))
        lines.append(f"Goal on {name} (k = {GOAL_K} at least +{goal:.2f}): {'met' if met else 'not met'} ({'; '.join(parts)}).")
    return "\n".join(lines)
