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
import seaborn as sns

from gpupred import config
from gpupred.pipeline import MissingInput
from gpupred.profile.schema import read_runs, read_samples
from gpupred.profile.store import window_means_all
from gpupred.reports import save_figure, update_metrics

if collect:
    from gpupred.profile.sweep import run_sweep

    if not out:
        raise ValueError("collect=True needs out=data/raw/<gpu>/<sweep-id>")
    print(run_sweep(plan, Path(out), window_s=window_s).line())

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
# ## Utilization timelines of a few runs (NVML samples over the measured window)

# %%
ok = runs[runs["status"] == "ok"].drop_duplicates("group_id").head(max_timelines)
fig, axes = plt.subplots(len(ok), 1, figsize=(8, 2.2 * max(len(ok), 1)), squeeze=False)
for ax, (_, run) in zip(axes[:, 0], ok.iterrows()):
    s = read_samples(Path(run["sweep_dir"]), [run["group_id"]])
    s = s[s["metric"].isin(["gpu_util", "sm_active", "mem_util"])]
    sns.lineplot(data=s, x="t_s", y="value", hue="metric", style="source", ax=ax)
    ax.axvspan(run["window_start_s"], run["window_end_s"], color="grey", alpha=0.15)
    ax.set_title(f"{tag}{run['workload_id']}", fontsize=9)
    ax.set_ylabel("%")
fig.tight_layout()
save_figure(fig, "01-utilization-timelines")

# %% [markdown]
# ## Distributions: mean utilization over the window, and peak memory, per run

# %%
means = window_means_all(runs)
cols = [c for c in ("gpu_util", "sm_active", "mem_util") if c in means]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
sns.histplot(data=means[cols].melt(var_name="metric"), x="value", hue="metric", bins=20, ax=axes[0])
axes[0].set_title(f"{tag}window-mean utilization (%)")
mem_col = next((c for c in ("torch_peak_reserved_mib", "proc_mem_mib", "mem_used_mib") if c in means and means[c].notna().any()), None)
if mem_col:  # torch's peak is absent on CPU dry runs: fall back to NVML's per-process / device memory
    sns.histplot(data=means.dropna(subset=[mem_col]), x=mem_col, hue="family", bins=20, ax=axes[1])
axes[1].set_title(f"{tag}{mem_col or 'no memory figures'} (MiB)")
fig.tight_layout()
save_figure(fig, "01-distributions")
update_metrics({"profiles_runs": int(len(runs)), "profiles_ok": int((runs["status"] == "ok").sum()),
                "profiles_simulated": simulated})
