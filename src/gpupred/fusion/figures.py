"""Figures of the fusion advisor (notebook 09): utilization, samples/s and memory against F, per model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd

from gpupred.workloads.spec import WorkloadSpec

PANELS: tuple[tuple[str, str], ...] = (("gpu_util", "GPU utilization (%)"), ("samples_per_s", "samples/s (all copies)"),
                                       ("memory_mib", "memory (MiB)"))
COLORS: dict[str, str] = {"fp32": "tab:blue", "bf16": "tab:orange"}
STYLES: dict[str, str] = {"vmap": "-", "graph": ":"}


def model_row(model: str) -> str:
    """The row a model is drawn in: its id without the precision (fp32 and bf16 share a row)."""
    spec = WorkloadSpec.from_id(model)
    return replace(spec, precision="fp32").id.replace("-fp32-", "-")


def _draw_curves(ax: Any, g: pd.DataFrame, column: str) -> None:
    """Predicted curves of one model (each precision and step model), the vmap ones with their 90 % interval."""
    for (precision, step), c in g.groupby(["precision", "step"]):
        c = c.sort_values("F")
        ax.plot(c["F"], c[column], STYLES.get(step, "-"), color=COLORS.get(precision, "grey"), marker=".",
                label=f"{precision}, {step}")
        if step == "vmap":
            ax.fill_between(c["F"], c[f"{column}_low"], c[f"{column}_high"], color=COLORS.get(precision, "grey"),
                            alpha=0.12, linewidth=0)


def _draw_choices(ax: Any, g: pd.DataFrame, advice: pd.DataFrame) -> None:
    """The advisor's F (star) and Hydro's F (triangle) on the samples/s panel, vmap step model."""
    for _, a in advice[advice["step"] == "vmap"].iterrows():
        c = g[(g["model"] == a["model"]) & (g["step"] == "vmap")].set_index("F")
        color = COLORS.get(WorkloadSpec.from_id(a["model"]).precision, "grey")
        for f, marker in ((a["f"], "*"), (a["hydro_f"], "^")):
            if pd.notna(f) and int(f) in c.index:
                ax.plot([int(f)], [c.at[int(f), "samples_per_s"]], marker, color=color, markersize=12,
                        markeredgecolor="black")


def _draw_measured(ax: Any, m: pd.DataFrame, column: str) -> None:
    """Measured fused runs (dots; x where out of memory) and co-located copies (squares)."""
    for (kind, precision), c in m.groupby(["kind", "precision"]):
        ok = c[c["status"] == "ok"]
        marker = "o" if kind == "fused" else "s"
        ax.plot(ok["F"], ok[column], marker, color=COLORS.get(precision, "grey"), markeredgecolor="black",
                linestyle="none", label=f"measured {kind}, {precision}")
        if column == "memory_mib":
            for f in c.loc[c["status"] == "oom", "F"]:
                ax.axvline(f, color=COLORS.get(precision, "grey"), linestyle="--", linewidth=1)


def curves_figure(curves: pd.DataFrame, advice: pd.DataFrame, measured: pd.DataFrame, gpu: str) -> Any:
    """One row per model, columns utilization / samples/s / memory against F on ``gpu``: predicted curves, the
    advisor's and Hydro's F, the card's memory, and measured runs where there are any."""
    import matplotlib.pyplot as plt

    g = curves[curves["gpu"] == gpu].assign(precision=lambda d: d["model"].map(lambda m: WorkloadSpec.from_id(m).precision),
                                            row=lambda d: d["model"].map(model_row))
    m = measured[measured["gpu"] == gpu].assign(precision=lambda d: d["model"].map(lambda x: WorkloadSpec.from_id(x).precision),
                                                row=lambda d: d["model"].map(model_row))
    rows = list(dict.fromkeys(g["row"]))
    fig, axes = plt.subplots(len(rows), len(PANELS), figsize=(4.2 * len(PANELS), 2.8 * len(rows)), squeeze=False)
    for i, row in enumerate(rows):
        gr, mr = g[g["row"] == row], m[m["row"] == row]
        for j, (column, label) in enumerate(PANELS):
            ax = axes[i, j]
            _draw_curves(ax, gr, column)
            if len(mr):
                _draw_measured(ax, mr, column)
            if column == "samples_per_s":
                _draw_choices(ax, gr, advice[(advice["gpu"] == gpu) & advice["model"].isin(set(gr["model"]))])
            if column == "memory_mib":
                ax.axhline(float(gr["card_mib"].iloc[0]), color="black", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log" if column != "gpu_util" else "linear")
            ax.set_xticks(sorted(set(gr["F"])), [str(int(f)) for f in sorted(set(gr["F"]))])
            ax.set_title(f"{row}" if j == 0 else label, fontsize=8)
            ax.set_ylabel(label if j == 0 else "", fontsize=8)
            ax.set_xlabel("F (fused copies)" if i == len(rows) - 1 else "", fontsize=8)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{gpu}: predicted (lines, vmap with 90 % band; dotted: the fused graph's kernels), "
                 "advisor's F (star), Hydro's F (triangle), card memory (black)", fontsize=9)
    fig.tight_layout()
    return fig
