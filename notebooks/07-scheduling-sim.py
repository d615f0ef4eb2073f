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
# # 07 — Scheduling simulation: slot, reactive, proactive (Horus) and ours
#
# A discrete-event simulation of a GPU cluster (`gpupred.sim`). Jobs take their attributes from the real
# per-workload table: measured solo iteration time, utilization and memory (the truth the simulator runs
# on) and the predictor's outputs with interval upper bounds (what the proactive policies believe).
# Co-located jobs progress at the learned slowdown (notebook 06) when co-location data exists, else at
# the additive baseline. "Ours" decides with the same learned model it is simulated with, so its
# numbers are an optimistic bound on what the model's errors allow.

# %% tags=["parameters"]
predictions_path: str = ""  # parquet of per-workload predictor outputs (e.g. out-of-fold); "" = the exported predictor
gpu_name: str = ""  # GPU kind whose measurements drive the simulation; "" = the dataset's most common
gpu_memory_mib: float = 0.0  # GPU memory capacity; 0 = from the raw runs of that GPU kind
nodes: int = 4  # cluster nodes
gpus_per_node: int = 8  # GPUs per node
n_jobs: int = 3000  # jobs in the synthetic trace
load: float = 1.0  # offered load: arriving solo work per second / GPU count
loads: list = [0.5, 0.8, 1.0, 1.3]  # offered loads for the sensitivity sweep
median_duration_s: float = 1800.0  # median solo job duration of the synthetic trace
trace_csv: str = ""  # optional Philly/Helios-style job-trace CSV to simulate instead of the synthetic trace
profile_s: float = 60.0  # reactive policy's profiling time per job
bin_s: float = 600.0  # utilization-over-time bin width
seed: int = 0  # trace seed

# %%
import numpy as np
import pandas as pd
import seaborn as sns

from gpupred import colocation, config, sim
from gpupred.pipeline import MissingInput
from gpupred.profile.schema import read_runs
from gpupred.reports import save_figure, update_metrics

from gpupred.predictor import dataset_predictions

dataset, predictions = dataset_predictions(predictions_path)
table = sim.workload_table(dataset, predictions, gpu_name or None)
gpu = table.attrs["gpu_name"]
if gpu_memory_mib <= 0:
    runs = read_runs(config.RAW)
    caps = runs.loc[runs["gpu_name"] == gpu, "gpu_memory_total_mib"].dropna()
    if caps.empty:
        raise MissingInput(f"no raw runs of {gpu!r} to read its memory capacity from; pass gpu_memory_mib")
    gpu_memory_mib = float(caps.max())
fits = table["true_mem_mib"] <= gpu_memory_mib
table = table[fits].reset_index(drop=True)
cluster = sim.Cluster(nodes, gpus_per_node, gpu_memory_mib=gpu_memory_mib)
print(f"{gpu}: {len(table)} workloads ({int((~fits).sum())} too big for {gpu_memory_mib:.0f} MiB dropped), "
      f"{cluster.n_gpus} GPUs")

# %%
features = colocation.predicted_features(dataset, predictions)
features = features[features["gpu_name"] == gpu].set_index("workload_id").loc[table["workload_id"]].reset_index()
coloc = pd.read_parquet(config.COLOCATION) if config.COLOCATION.exists() else None  # written by notebook 06
if coloc is not None:
    coloc = coloc[(coloc["gpu_name"] == gpu) & np.isfinite(coloc["slowdown"].astype(float))]
if coloc is not None and len(coloc) >= 4:
    model = colocation.SlowdownModel.fit(coloc, colocation.predicted_features(dataset, predictions))
    matrix = model.pair_matrix(features)
    slowdown_source = f"learned slowdown model ({len(coloc)} co-located jobs)"
else:
    u = table["true_util"].to_numpy()
    matrix = colocation.baseline_slowdown(u[:, None] + u[None, :])
    slowdown_source = "additive baseline max(1, summed util / 100) (no co-location data for this GPU)"
print("co-located jobs progress at:", slowdown_source)


def make_trace(at_load: float) -> pd.DataFrame:
    """The job trace at a given load (or the CSV trace)."""
    if trace_csv:
        return sim.load_trace_csv(trace_csv, table)
    return sim.synthetic_trace(table, n_jobs, cluster.n_gpus, load=at_load, seed=seed, median_duration_s=median_duration_s)


def run_all(trace: pd.DataFrame) -> list:
    """The four policies on one trace."""
    sd = sim.MatrixSlowdown(matrix, trace["kind"].to_numpy())
    policies = [sim.SlotPolicy(), sim.ReactivePolicy(profile_s=profile_s), sim.ProactivePolicy(), sim.OursPolicy()]
    return [sim.simulate(trace, cluster, p, sd) for p in policies]


results = run_all(make_trace(load))
table_m = sim.metrics_table(results)
update_metrics(sim.report_metrics(results))
table_m

# %% [markdown]
# ## Cluster GPU utilization over time (HotCloud'20 evaluation figure)

# %%
ts = sim.util_timeseries(results, bin_s)
ts["t_h"] = ts["t_s"] / 3600
ax = sns.lineplot(data=ts, x="t_h", y="util", hue="policy")
ax.set(xlabel="time (h)", ylabel="cluster GPU utilization (%)", title=f"{gpu}, load {load}")
save_figure(ax.figure, "07-util-over-time")

# %% [markdown]
# ## Sensitivity to load

# %%
rows = []
for at in ([] if trace_csv else loads):
    for r in run_all(make_trace(at)):
        rows.append({"load": at, "policy": r.policy, **r.metrics})
sens = pd.DataFrame(rows)
if len(sens):
    long = sens.melt(id_vars=["load", "policy"], value_vars=["avg_util", "mean_jct_s", "mean_wait_s"])
    g = sns.relplot(data=long, x="load", y="value", hue="policy", col="variable", kind="line", marker="o",
                    facet_kws={"sharey": False}, height=3.2)
    save_figure(g.figure, "07-sensitivity-to-load")
sens
