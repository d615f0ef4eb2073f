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
# # 02 · Build graph features
# Every catalog workload is exported to ONNX once per architecture (structure only, symbolic batch)
# and featurized at its batch size, precision and optimizer: FLOPs (forward, training), parameters,
# activation and moved bytes, arithmetic intensity, op mix and graph depth. Published measurements of
# other groups (Lucid on an RTX 3090, GPUMemNet on an A100) are imported at their pinned commits and
# their workloads featurized too: Lucid's rebuilt jobs from the committed structure-only graphs in
# `data/graphs/`, GPUMemNet's 3,000 fully connected networks built directly with `onnx.helper`. The
# table is the graph half of the learning dataset: `data/processed/graph_features.parquet`.

# %% tags=["parameters"]
limit: int = 0  # number of catalog specs to featurize (a balanced prefix); 0 = the whole catalog
families: str = ""  # comma-separated families to keep (e.g. "mlp,lstm"); "" = all
workers: int = 2  # parallel export processes
include_measured: bool = True  # also featurize every workload measured in data/raw (fused specs, custom plans)
published: str = "lucid,gpumemnet"  # published sources to import (if not yet) and featurize; "" = none
import_published: bool = True  # try to import missing sources: download at the pinned commit, else the local copy

# %%
import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from gpupred import config, importers, reports
from gpupred.graph.table import build_feature_table, write_feature_table
from gpupred.graph.table import FEATURES_METRICS
from gpupred.importers import graphs
from gpupred.profile.schema import read_runs
from gpupred.workloads.catalog import catalog
from gpupred.workloads.spec import WorkloadSpec

specs = catalog()
if families:
    keep = {f.strip() for f in families.split(",") if f.strip()}
    specs = [s for s in specs if s.family in keep]
if limit:
    specs = specs[:limit]
if include_measured:
    known = {s.id for s in specs}
    measured = sorted(set(read_runs(config.RAW)["workload_id"]) - known)
    specs += [WorkloadSpec.from_id(w) for w in measured]
    print(f"{len(measured)} measured workloads outside the selected catalog slice added")
df = build_feature_table(specs, workers=workers, progress=True)

# %% [markdown]
# ## Published measurements
# Each source is imported once into `data/external/<source>/` (never `data/raw/`, never committed) with
# its provenance: the file is downloaded from the upstream repository at the pinned commit and its
# sha256 checked; offline, the local copy (`GPUPRED_EXTERNAL_LOCAL`, or `../shared/external` beside
# the checkout) is used. A source that cannot be had is skipped, with the reason.

# %%
sources = [s.strip() for s in published.split(",") if s.strip()]
available = []
for name in sources:
    src = importers.get_source(name)
    ok, how = importers.ensure_imported(src) if import_published else (importers.is_imported(src), "import_published=False")
    print(how if ok else f"{name}: skipped: {how}")
    if ok:
        available.append(name)
imported = graphs.feature_rows(graphs.imported_specs(available), progress=True)
df = pd.concat([df, imported[~imported["workload_id"].isin(df["workload_id"])]], ignore_index=True)
path = write_feature_table(df)
print(f"{len(imported)} imported workloads featurized ({', '.join(available) or 'none'})")
print(f"{len(df)} workloads, {df['arch_key'].nunique()} architectures -> {path.relative_to(config.ROOT)}")
print(f"ops without a cost rule: {int(df['unknown_ops'].sum())} ({', '.join(sorted(set(','.join(df['unknown_op_types']).split(',')) - {''})) or 'none'})")

# %% [markdown]
# Training FLOPs, parameters and arithmetic intensity per family (log scale): families spread over
# orders of magnitude. Intensity separates the bandwidth-bound (depthwise CNNs such as MobileNet,
# EfficientNet, ShuffleNet, and the NeuMF recommender, under ~10 FLOPs/byte) from the dense ones
# (VGG, AlexNet, MLPs, RNN language models, ~100 and above); bf16 and fp16 raise it by halving
# activation bytes. GPUMemNet's fully connected networks (`fcnet`) span five orders of magnitude of
# parameters on their own.

# %%
sns.set_theme(style="whitegrid")
fig, axes = plt.subplots(1, 3, figsize=(15, max(3, 0.35 * df["family"].nunique() + 1)), sharey=True)
for ax, col, label in zip(
    axes,
    ["flops_train", "params", "arithmetic_intensity"],
    ["training FLOPs per iteration", "parameters", "FLOPs per byte moved (forward)"],
):
    sns.stripplot(data=df, x=col, y="family", ax=ax, log_scale=True, size=4, alpha=0.7, hue="precision")
    ax.set_xlabel(label)
    ax.set_ylabel("")
fig.tight_layout()
reports.save_figure(fig, "02-graph-features-by-family")
reports.write_metrics(FEATURES_METRICS, {"graph_features_rows": len(df), "graph_features_unknown_ops": int(df["unknown_ops"].sum())})

# %% [markdown]
# ## The learning dataset
# One row per measured solo run, from every source: this project's ok solo runs in `data/raw` (never
# dry-run output; labels from the NVML samples of the measured window) and the imported published runs
# (their labels as published). Each joins the graph features above, the GPU's hardware features and how
# its source measured (`sampler`, `sync`). Excluded runs are listed by reason — the published jobs that
# are not rebuilt (Lucid's reinforcement-learning jobs) among them.

# %%
from gpupred.dataset import build_dataset
from gpupred.errors import MissingInput

try:
    dataset, exclusions = build_dataset(features=df, sources=available)
    print(f"{len(dataset)} runs, {dataset['workload_id'].nunique()} workloads, {dataset['family'].nunique()} families "
          f"-> {config.DATASET.relative_to(config.ROOT)}")
    display(dataset.groupby(["source", "gpu", "sampler", "sync"]).agg(
        runs=("run_id", "size"), workloads=("workload_id", "nunique"), families=("family", "nunique"),
        gpu_util_median=("gpu_util", "median"), memory_mib_median=("memory_mib", "median")).round(1))
    if len(exclusions):
        print(exclusions.groupby("reason").size().rename("runs excluded").to_string())
    else:
        print("no run excluded")
except MissingInput as err:
    print(f"dataset not built: {err}")

# %% [markdown]
# ## What the later stages read per workload
# Every dataset workload's step kernels (the step model's expansion of one training step) and its footprint graph
# terms, computed once here from the graphs and kept in `data/processed/` (`gpupred.physicstables`), so notebooks 03,
# 04, 05 and 08 read them instead of rebuilding them from the graph store each. Each table carries the fingerprint
# of the code that made it; a stale one is recomputed by its reader, never used.

# %%
from gpupred.physicstables import write_job_tables

if config.DATASET.exists():
    written = write_job_tables(pd.read_parquet(config.DATASET)["workload_id"], progress=False)
    print(", ".join(str(p.relative_to(config.ROOT)) for p in written))
else:
    print("no dataset: no per-workload tables")
