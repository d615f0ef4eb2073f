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
# # 07 — Scheduling simulation: slot, reactive, Horus and ours, on measured co-location
#
# A discrete-event simulation of a GPU cluster (`gpupred.sim`). **The truth is measured**: jobs are
# workloads with measured solo runs on one GPU kind (Lucid's solo jobs on the RTX 3090, or this
# project's own), and two jobs sharing a GPU progress at the *measured* slowdown of that pair where it
# was measured, else at a model fitted on measured solo features (each run counts which). **The
# policies' knowledge is predicted**: out-of-fold utilization and memory with interval upper bounds
# (notebook 03), and for ours pair slowdowns cross-fitted so that no prediction came from a model that
# saw that pair's workloads. The simulator seals its truth while a policy decides (any read fails).
#
# Rules shared by every policy: one FIFO queue with the same look-ahead, at most two jobs per GPU, a
# job joins a GPU only where the memory the policy believes in fits (an OOM otherwise, counted).
# Where a policy's definition departs from these, it says so: **slot** never packs; **reactive** first
# profiles each job alone for one minute (measuring its utilization and memory), then packs while the
# measured utilizations sum to at most 100 %, and moves a job off a GPU whose observed slowdown stays
# above 1.5; **Horus** places each job on the GPU of least cost, `1.3 × (used memory fraction + job
# memory / capacity) + |GPU util + job util − 100| / 100 (× 1.6 above 100) + jobs there`, from
# predicted utilization and memory, and serves per-class queues (k-means classes fitted on a *separate
# history* of jobs, never the trace scheduled) by weighted fair queueing when `horus_queue="wfq"`;
# **ours** takes an empty GPU when one is free, else the partner whose predicted upper-bound pair
# slowdown is smallest if it is at most `max_slowdown`, with memory upper bounds.

# %% tags=["parameters"]
gpu_name: str = ""  # GPU kind whose measured pairs drive the simulation; empty: the kind with most measured pairs
gpu_memory_mib: float = 0.0  # GPU memory capacity in MiB; 0: the vendor size of that GPU (gpupred.hardware)
nodes: int = 4  # cluster nodes
gpus_per_node: int = 8  # GPUs per node
n_jobs: int = 3000  # jobs in each synthetic trace
load: float = 1.2  # offered load of the synthetic trace: arriving solo work per second / GPU count
loads: list = [0.6, 1.0, 1.4]  # offered loads for the sensitivity sweep (an empty list skips it)
seeds: list = [0, 1, 2, 3, 4]  # trace seeds: the spread behind every interval (at least 5)
median_duration_s: float = 1800.0  # median solo job duration of the synthetic traces
trace_csv: str = ""  # a Philly/Helios-format job-trace CSV; empty or a missing file skips that section
n_folds: int = 5  # workload folds for the cross-fitted pair slowdowns of ours
max_slowdown: float = 1.5  # ours: the largest upper-bound pair slowdown it packs
profile_s: float = 60.0  # reactive: profiling time per job
horus_queue: str = "wfq"  # Horus queue: wfq (classes from a separate history) or fifo (the shared queue)
lucid: bool = True  # use the published Lucid pairs when gpupred.importers.lucid has imported them
bin_s: float = 1800.0  # utilization-over-time bin width

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from gpupred import colocation, config, sim
from gpupred.dataset import load_dataset
from gpupred.learn.oof import read_oof_predictions
from gpupred.reports import save_figure, update_metrics

table, solo, notes = colocation.load_pair_sources(config.RAW, lucid=lucid)  # MissingInput when no source has pairs
for note in notes:
    print("note:", note)
dataset = load_dataset()  # every row, as notebook 03 predicted them
features = colocation.predicted_features(dataset, read_oof_predictions(dataset))  # out-of-fold, fingerprint-checked
world = sim.build_world(table, solo, features, gpu_name or None, gpu_memory_mib or None, n_folds=n_folds)
for note in world.notes:
    print("note:", note)
cluster = sim.Cluster(nodes, gpus_per_node, gpu_memory_mib=world.gpu_memory_mib)
classes = sim.history_classes(world, cluster.n_gpus) if horus_queue == "wfq" else None
settings = sim.Settings(profile_s=profile_s, max_slowdown=max_slowdown, horus_classes=classes)
print(f"{world.gpu_name}: {len(world.workloads)} workloads, {world.gpu_memory_mib:.0f} MiB per GPU, {cluster.n_gpus} GPUs; "
      f"{world.measured_fraction:.0%} of workload pairs measured, the rest from the measured-feature model")

# %% [markdown]
# ## Synthetic trace: every policy over the same seeds
#
# Poisson arrivals at the offered load, lognormal durations, workloads drawn uniformly. Means over the
# seeds with 95 % confidence half-widths (Student t); the differences are paired by seed.

# %%
runs, results = sim.run_seeds(world, cluster, lambda s: sim.synthetic_trace(
    world.workloads, n_jobs, cluster.n_gpus, load=load, seed=s, median_duration_s=median_duration_s), seeds, settings)
summary, diffs = sim.summarize_seeds(runs), sim.paired_differences(runs)
update_metrics({**sim.report_metrics(summary, diffs), "sim_seeds": len(seeds),
                "sim_pairs_measured_frac": sim.measured_share(runs)})
print(f"{sim.measured_share(runs):.0%} of co-locations ran at a measured slowdown")
summary.round(1)

# %%
diffs.round(1)

# %% [markdown]
# Per policy, the mean over seeds with its 95 % interval. Slot never shares a GPU, so its utilization is
# bounded by the solo utilizations; the packing policies differ in which jobs they put together.

# %%
fig, axes = plt.subplots(1, len(sim.REPORT_KEYS), figsize=(3.2 * len(sim.REPORT_KEYS), 3.0))
s = summary.set_index("policy").loc[[p for p in sim.POLICY_ORDER if p in set(summary["policy"])]]
for ax, key in zip(axes, sim.REPORT_KEYS):
    ax.bar(s.index, s[key], yerr=s[f"{key}_ci"], capsize=3, color="tab:blue")
    ax.set_title(key)
    ax.tick_params(axis="x", rotation=30)
fig.tight_layout()
save_figure(fig, "07-policies-synthetic")

# %% [markdown]
# ## Cluster GPU utilization over time (first seed)

# %%
ts = sim.util_timeseries(results[seeds[0]], bin_s)
ts["t_h"] = ts["t_s"] / 3600
ax = sns.lineplot(data=ts, x="t_h", y="util", hue="policy", hue_order=list(sim.POLICY_ORDER), seed=0)
ax.set(xlabel="time (h)", ylabel="cluster GPU utilization (%)", title=f"{world.gpu_name}, load {load}, seed {seeds[0]}")
save_figure(ax.figure, "07-util-over-time")
plt.show()

# %% [markdown]
# ## Sensitivity to load
#
# The same comparison at other offered loads (means over the seeds; bands: bootstrap 95 % over seeds).

# %%
sens = sim.loads_sweep(world, cluster, list(loads), list(seeds), n_jobs, median_duration_s, settings)
if len(sens):
    long = sens.melt(id_vars=["load", "seed", "policy"], value_vars=["avg_util", "mean_jct_s", "mean_wait_s"])
    g = sns.relplot(data=long, x="load", y="value", hue="policy", col="variable", kind="line", marker="o",
                    errorbar=("ci", 95), seed=0, facet_kws={"sharey": False}, height=3.2, hue_order=list(sim.POLICY_ORDER))
    save_figure(g.figure, "07-sensitivity-to-load")
    plt.show()

# %% [markdown]
# ## A public trace format (Philly / Helios)
#
# Arrivals and durations from a job-trace CSV; single-GPU jobs only; each seed maps the trace's jobs onto
# the measured workloads differently. The repository ships no such trace: set `trace_csv`.

# %%
trace_path = Path(trace_csv) if trace_csv else None
if trace_path is None or not trace_path.is_file():
    print(f"No Philly/Helios trace at {trace_csv or '(trace_csv not set)'}: public-trace section skipped.")
else:
    runs_t, _ = sim.run_seeds(world, cluster, lambda s: sim.load_trace_csv(trace_path, world.workloads, seed=s),
                              seeds, settings)
    summary_t, diffs_t = sim.summarize_seeds(runs_t), sim.paired_differences(runs_t)
    update_metrics(sim.report_metrics(summary_t, diffs_t, prefix="sim_trace"))
    display(summary_t.round(1), diffs_t.round(1))  # noqa: F821 (IPython)
