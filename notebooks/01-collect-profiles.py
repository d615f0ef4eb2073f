# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 — Collect profiles
#
# Each profile is one training run of one workload on one GPU: warm-up, then a measured window sampled by
# NVML. With `collect=True` this notebook runs (or resumes) a sweep on this machine's GPU; by default it
# only loads and summarizes the raw measurements committed under `data/raw/`.

# %% tags=["parameters"]
plan: str = "catalog:20"  # sweep plan when collecting (catalog, catalog:N, catalog:family=a,b, fused, or a file)
window_s: float = 4.0  # measured window per run, seconds (when collecting)
out: str = ""  # sweep folder to collect into, data/raw/<gpu>/<sweep-id> (required when collecting)
collect: bool = False  # run the sweep first (needs an NVIDIA GPU); False only summarizes data/raw
raw_dir: str = ""  # where to read sweeps from; "" means config.RAW
include_simulated: bool = False  # also show simulated (dry-run) rows; figures are then titled SIMULATED
max_timelines: int = 3  # how many runs' utilization timelines to draw

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from gpupred import config
from gpupred.errors import MissingInput
from gpupred.profile.schema import read_runs, read_samples
from gpupred.profile.store import window_means_all
from gpupred.profile.datacard import PROFILES_METRICS
from gpupred.reports import save_figure, write_metrics

if collect:
    from gpupred.profile.sweep import harness_config, run_sweep

    if not out:
        raise ValueError("collect=True needs out=data/raw/<gpu>/<sweep-id>")
    print(run_sweep(plan, Path(out), harness=harness_config(False, window_s)).line())

root = Path(raw_dir) if raw_dir else config.RAW
runs = read_runs(root)
if not include_simulated and len(runs):
    runs = runs[~runs["simulated"]]
if runs.empty:
    raise MissingInput(f"no runs in data/raw yet ({root}): collect profiles on a GPU first (docs/remote-sweeps.md)")
simulated = bool(runs["simulated"].any())
tag = "SIMULATED (dry run, not data) — " if simulated else ""
sns.set_theme(style="whitegrid")
print(f"{len(runs)} runs from {runs['sweep_dir'].nunique()} sweep folder(s); simulated rows: {int(runs['simulated'].sum())}")

# %% [markdown]
# ## What was collected: runs per family, GPU and status

# %%
print(runs.groupby(["gpu_name", "status"]).size().unstack(fill_value=0))
fig, ax = plt.subplots(figsize=(8, 4))
sns.countplot(data=runs, y="family", hue="status", ax=ax)
ax.set_title(f"{tag}runs per family and status")
save_figure(fig, "01-runs-per-family")

# %% [markdown]
# ## Utilization timelines of a few runs (NVML samples over the measured window, shaded)
# Runs at the low, middle and high end of window-mean utilization, from different families.

# %%
means = window_means_all(runs)
ok = means[(means["status"] == "ok") & means["gpu_util"].notna()].drop_duplicates("group_id")
ok = ok.sort_values(["gpu_util", "workload_id"]).drop_duplicates("family")  # one run per family, the least busy
picks = np.unique(np.linspace(0, len(ok) - 1, max_timelines).round().astype(int)) if len(ok) else []
ok = ok.iloc[picks]
fig, axes = plt.subplots(len(ok), 1, figsize=(9, 2.0 * max(len(ok), 1)), squeeze=False, sharey=True)
for i, (ax, (_, run)) in enumerate(zip(axes[:, 0], ok.iterrows())):
    s = read_samples(Path(run["sweep_dir"]), [run["group_id"]])
    s = s[s["metric"].isin(["gpu_util", "sm_active", "mem_util"])]
    sns.lineplot(data=s, x="t_s", y="value", hue="metric", style="source", ax=ax, legend=i == 0)
    ax.axvspan(run["window_start_s"], run["window_end_s"], color="grey", alpha=0.15)
    ax.set_title(f"{tag}{run['workload_id']} (window mean {run['gpu_util']:.0f} %)", fontsize=9)
    ax.set(ylabel="%", ylim=(-3, 103))
if len(ok):
    sns.move_legend(axes[0, 0], "upper left", bbox_to_anchor=(1.01, 1), frameon=False)
fig.tight_layout()
save_figure(fig, "01-utilization-timelines")

# %% [markdown]
# ## Distributions: mean utilization over the window, and memory, per run

# %%
cols = [c for c in ("gpu_util", "sm_active", "mem_util") if c in means]
mem_col = next((c for c in ("proc_mem_mib", "torch_peak_reserved_mib", "mem_used_mib") if c in means and means[c].notna().any()), None)
n_fam = means["family"].nunique()
fig, axes = plt.subplots(1, 2, figsize=(11, max(3.5, 0.25 * n_fam + 1)))
sns.histplot(data=means[cols].melt(var_name="metric"), x="value", hue="metric", bins=20, element="step", ax=axes[0])
axes[0].set_title(f"{tag}window-mean utilization (%)")
if mem_col:  # NVML's per-process figure (the memory label's usual source), else torch's peak or the device's
    sns.stripplot(data=means.dropna(subset=[mem_col]).sort_values("family"), x=mem_col, y="family", hue="sync",
                  size=4, ax=axes[1])
    axes[1].set_xscale("log")
axes[1].set_title(f"{tag}{mem_col or 'no memory figures'} (MiB, log scale), per family")
fig.tight_layout()
save_figure(fig, "01-distributions")
write_metrics(PROFILES_METRICS, {"profiles_runs": int(len(runs)), "profiles_ok": int((runs["status"] == "ok").sum()),
                "profiles_simulated": simulated})
