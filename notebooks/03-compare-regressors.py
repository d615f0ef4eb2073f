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
# # 03 · Compare regressors, honestly
# Eleven regressors predict steady-state GPU utilization, memory and SM activity from graph + GPU +
# protocol features on log1p targets. The model is **chosen inside an inner cross-validation** on each
# outer fold's training rows and **scored on the outer fold**, so every figure below is the error of the
# whole procedure (choice included) on workloads it never saw. By default the procedure chooses among three
# regressors of `gpupred.learn.regressors.EXPORTABLE`: the two boosted-tree libraries the inner CVs chose among all nine
# exportable ones on these data (XGBoost for utilization, LightGBM for SM activity; scikit-learn's gradient
# boosting, chosen for memory, is their slower equivalent and costs more than the other candidates together)
# and ridge as a linear reference. Fewer candidates cut the notebook's time (about 2.5 times faster than with all
# nine on this project's 2-core machine), and the choice stays nested; `models=None` brings back all nine. Two outer
# schemes:
#
# - **grouped random** — K folds over whole workloads (every run of a workload, on any GPU or from any
#   source, falls on one side), stratified by source;
# - **leave-one-family-out** — one fold per family group, sibling families held out together
#   (lstm/gru; bert/gpt/seq2seq/vit; mobilenet/efficientnet; vgg/alexnet; mlp/fcnet; the ResNets with the
#   CIFAR ResNet-18): the test of an architecture never seen. Run here for utilization (`lofo_targets`); the
#   leave-one-family-out figures of SM activity and memory are in the physics comparison below, where the
#   current regressor stands beside the step model and the analytic footprint on the same splits.
#
# **RMSLE** is `sqrt(mean((log1p(pred) − log1p(measured))²))` with utilization in **percent** (0–100)
# and memory in MiB; 0.15 is roughly a 15 % relative error. Figures are given pooled over every row and
# per source. Intervals are 90 % CV+ conformal, calibrated per source, and their coverage is measured on
# the outer folds too. The grouped-random predictions are written for every dataset row as the
# out-of-fold file that notebooks 06/07 read.

# %% tags=["parameters"]
targets: list = ["gpu_util", "memory_mib", "sm_active"]  # labels to model (skipped when fewer than 10 rows have them)
models: list | None = ["ridge", "lightgbm", "xgboost"]  # regressors the procedure chooses from (and exports); None = gpupred.learn.regressors.EXPORTABLE
compared: list | None = None  # regressors scored on the outer folds for the comparison table; None = the candidates
schemes: list = ["grouped_random", "lofo"]  # outer split schemes (the out-of-fold file needs grouped_random)
lofo_targets: list | None = ["gpu_util"]  # labels of the nested leave-one-family-out (None: all)
n_outer: int = 5  # grouped random outer folds
n_inner: int = 3  # inner (model-selection) folds
n_cal: int = 5  # CV+ calibration folds inside each outer training side
alpha: float = 0.1  # 1 - nominal interval coverage
tune: bool = False  # small grid search inside every fit (slower: each candidate then runs its own CV)
compare_lofo: bool = False  # also score the compared regressors on the leave-one-family-out folds (slower)
cross_gpu_targets: list = ["gpu_util"]  # labels of the cross-GPU evaluation (about 2 min each here; [] skips it)
physics_targets: list = ["gpu_util", "iter_time_mean_s", "sm_active", "memory_mib"]  # the comparison's labels ([]: none)
physics_schemes: list = ["within", "lofo", "cross_gpu", "cross_gpu_twins"]  # its split schemes
physics_weighting: str = "per_source"  # training rows of the correction: pooled, balanced or per_source
physics_interval_groups: str = "family"  # what the step estimator's (and baselines') conformal folds keep whole: family or workload
n_within: int = 5  # grouped folds of the within-GPU reference of the cross-GPU evaluation
n_jobs: int = 2  # parallel fits
seed: int = 0  # fold assignment and model seeds
realworld: list | None = None  # corpus models of the real-world section (None: all of data/corpus/; []: skip it)
realworld_gpu: str | None = None  # the GPU they are predicted on (None: the measured kind with the most runs)
pipeline_source: str = "lucid"  # the imported source whose jobs are predicted with their input pipelines ("": skip)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from gpupred.learn.regressors import EXPORTABLE
from gpupred import dataset, reports
from gpupred.learn.choice import write_model_choice
from gpupred.learn.crossgpu import cross_gpu_evaluation, twin_gpu_pairs, twin_ratios
from gpupred.learn.folds import sibling_group
from gpupred.learn.evaluation import splits_for
from gpupred.learn.nested import CVSettings, choose_for_export, nested_cv, oof_frame, plot_comparison, plot_outer
from gpupred.learn.oof import write_oof_predictions
from gpupred.learn.summary import learning_metrics

df = dataset.load_dataset()  # MissingInput until data is imported or collected and notebook 02 has run
cv = CVSettings(n_outer=n_outer, n_inner=n_inner, alpha=alpha, n_cal=n_cal, tune=tune, seed=seed, n_jobs=n_jobs)
candidates = list(models or EXPORTABLE)  # full-depth forests are compared below but never exported (size)
comparison = list(compared or candidates)
info = dataset.summarize(df)
df.groupby(["source", "gpu", "sampler", "sync"]).agg(runs=("run_id", "size"), workloads=("workload_id", "nunique"),
                                                     families=("family", "nunique"))

# %% [markdown]
# ## Labels across sources
# All three sources read the same NVML utilization counter, but not the same way: Lucid under
# `CUDA_LAUNCH_BLOCKING=1` (`sync = kernel`) polling nvidia-smi every 0.2 s, GPUMemNet averaging only
# the non-zero 1 s DCGM samples, this project's sweeps polling NVML every 50 ms with a sync per step.
# Utilization is pooled with those protocol traits as features (`sync_kernel`, `sync_window`,
# `util_nonzero_only`, `host_batches`), and memory is pooled (CUDA context included everywhere); within
# the imported data a protocol comes with one GPU kind, so the two are not separable yet — hence the
# per-source figures. Details: `gpupred.dataset`.

# %%
folds = splits_for(df, "grouped_random", n_outer, seed)  # one partition for every target: the OOF file's folds
results: dict[str, dict[str, object]] = {scheme: {} for scheme in schemes}
for target in targets:
    labelled = df[df[target].notna()]
    if len(labelled) < 10:
        print(f"{target}: {len(labelled)} labelled runs, skipped")
        continue
    for scheme in schemes:
        groups = {sibling_group(f) for f in labelled["family"]}
        if scheme == "lofo" and lofo_targets is not None and target not in lofo_targets:
            continue
        if scheme == "lofo" and len(groups) < 3:
            print(f"{target}: only {len(groups)} family group(s) labelled ({', '.join(sorted(groups))}): no leave-one-family-out")
            continue
        results[scheme][target] = nested_cv(
            df, target, candidates, scheme, cv, splits=folds if scheme == "grouped_random" else None,
            compare=comparison if scheme == "grouped_random" or compare_lofo else False)

# %% [markdown]
# ## Outer-fold figures
# One row per target and scheme: RMSLE and interval coverage pooled and per source, and which models
# the inner cross-validations chose (a different choice per fold is expected; the figures are those of
# the procedure).

# %%
rows = []
for scheme, per_target in results.items():
    for target, res in per_target.items():
        row = {"target": target, "scheme": scheme, "rmsle": res.rmsle(), "coverage": res.coverage(),
               "chosen (folds)": res.chosen()}
        row.update({f"rmsle {s}": v for s, v in res.rmsle("source").items()})
        row.update({f"coverage {s}": v for s, v in res.coverage("source").items()})
        rows.append(row)
summary = pd.DataFrame(rows).set_index(["target", "scheme"])
summary.round(3)

# %%
per_fold = {s: r["gpu_util"].folds.drop(columns=["fold"]) for s, r in results.items() if "gpu_util" in r}
pd.concat(per_fold, names=["scheme"]).round(3) if per_fold else "no gpu_util results"

# %% [markdown]
# Each compared regressor on the grouped-random outer folds (mean ± sd over folds). This is a table of
# information, not a selection: the inner cross-validations chose the models above without seeing
# these folds.

# %%
for target in [t for t in targets if t in results.get("grouped_random", {})]:
    per_scheme = {s: r[target] for s, r in results.items() if target in r and len(r[target].comparison)}
    if per_scheme:
        fig = plot_comparison(per_scheme, title=f"{target}: outer-fold RMSLE of each regressor")
        reports.save_figure(fig, f"03-rmsle-{target}")
        plt.show()

# %% [markdown]
# The **nested baseline regressor** (the one that answers bare feature rows, chosen per outer fold among the
# candidates, every source), not the shipped step estimator, whose held-out figures on this project's runs are in
# "What ships" below. Measured against out-of-fold predicted values (log axes) with each row's 90 % interval in grey. Each source
# spans its own range of utilization (the table below the figures: per source, its 10th to 90th percentile), and
# light jobs (PointNet, NeuMF) sit far below heavy ones (ResNet-50, BERT). Under leave-one-family-out the points
# scatter far more and the
# intervals widen: an unseen family is much harder than an unseen width or batch size of a known one.
# Holding out the fully connected group leaves only Lucid's 60 jobs to learn from, so every GPUMemNet
# network gets nearly the same prediction there.

# %%
for target in [t for t in ("gpu_util", "memory_mib") if any(t in r for r in results.values())]:
    fig = plot_outer({s: r[target] for s, r in results.items() if target in r},
                     title=f"{target}: the nested baseline regressor, every source (not the shipped step estimator: "
                           "see 'What ships')")
    reports.save_figure(fig, f"03-oof-{target}")
    plt.show()
df.groupby("source")["gpu_util"].quantile([0.1, 0.5, 0.9]).unstack().round(1)

# %% [markdown]
# ## Across GPU kinds
# Does a predictor trained on one GPU kind carry to another? For each GPU kind with enough workloads, the
# same nested procedure is trained on **another kind's rows** (`a -> b`) or on **every other kind's**
# (`rest -> b`) and scored on all of `b`'s rows, against the **within-GPU** reference: grouped folds over
# `b`'s own workloads. `unseen` splits drop from training every workload also measured on `b`; where
# workloads were measured on both kinds (twins, e.g. H200 re-runs of H100 specs) a `twins` split keeps
# them, the case of a job that has already run on another GPU kind. Each imported source comes with its
# own GPU *and* protocol (and GPUMemNet's networks are all fully connected), so a cross figure between
# sources mixes the three; between this project's own sweeps only the GPU differs. `gpupred.learn.crossgpu`.

# %%
transfer: dict[str, pd.DataFrame] = {}
for target in [t for t in cross_gpu_targets if t in df.columns]:
    table, _ = cross_gpu_evaluation(df, target, candidates, cv, n_within)
    if len(table):
        transfer[target] = table
    else:
        print(f"{target}: fewer than two GPU kinds with enough workloads ({', '.join(info['gpus'])}): no cross-GPU figure")
pd.concat(transfer, names=["target"]).round(3) if transfer else "no cross-GPU figures"

# %%
for target, table in transfer.items():
    grid = table.assign(side=table["train"] + " (" + table["workloads"] + ")").pivot(index="side", columns="test_gpu",
                                                                                      values="rmsle")
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * grid.shape[1], 0.9 + 0.45 * grid.shape[0]))
    sns.heatmap(grid, annot=True, fmt=".2f", cmap="rocket_r", cbar_kws={"label": "RMSLE"}, ax=ax)
    ax.set(xlabel="tested on", ylabel="trained on", title=f"{target}: RMSLE across GPU kinds")
    reports.save_figure(fig, f"03-cross-gpu-{target}")
    plt.show()

# %% [markdown]
# Measured ratio between two GPU kinds over their twin runs (one workload and `sync` setting measured on
# both), per family: how far utilization, iteration time and memory move when only the GPU changes.
#
# The H100 SXM and H200 twins are the cleanest case: the same specs, driver and torch on two Hopper cards with
# the same compute and different memory (3.35 against 4.8 TB/s, 80 against 141 GB). What they show, from the
# table:

# %%
from IPython.display import Markdown

from gpupred.learn.crossgpu import twins_prose

ratios = {f"{b}/{a}": twin_ratios(df, b, a) for a, b, _ in twin_gpu_pairs(df)}
display(Markdown(twins_prose(ratios)))
pd.concat(ratios, names=["kinds"]).round(3) if ratios else "no workload measured on two GPU kinds yet"

# %% [markdown]
# ## Physics first: the step model and a learned correction
# Aggregate features (FLOPs, bytes, op counts) do not see what sets utilization on a fast GPU: how many
# kernels a training step launches, how long the host takes to launch each, and the shortest time a kernel
# takes. The step model (`gpupred.step.physics`) expands each graph into the kernels of one training step (forward,
# the BatchNorm and Dropout kernels an eval export drops or folds, backward, autocast casts, one kernel per time
# step of a recurrent layer, attention cores as the one fused kernel torch runs each way, the optimizer as torch's
# foreach path runs it, and a GAN's second discriminator pass and second optimizer, from the workload's recipe),
# gives each a roofline time on the GPU's datasheet peaks (depthwise convolutions on the CUDA cores at their own
# efficiency), and runs the host's launch timeline under the source's protocol (`sync`). Its seven constants
# (tensor-core, CUDA-core, memory and depthwise efficiencies, launch cost, per-step overhead, minimum kernel
# time) are fitted per (GPU kind, protocol) on each outer split's **training rows only**. A protocol without
# training rows borrows the launch cost fitted on the training rows (it is eager PyTorch's host cost, not the
# GPU's), moved from the hosts it was fitted on to the row's host by their single-core speeds (the dataset's
# `host_score`; another lab's host, of unknown speed, counts as the reference host), and keeps the published defaults
# for the rest; a source without training rows gets physics alone. A
# (GPU kind, protocol) without training rows has its interval widened to at least what that same borrowing gets
# wrong inside the training rows: each training key (or protocol) held out in turn and predicted from the others'
# fits, the 90 % conformal quantile of the log error with every held-out key weighing the same
# (`gpupred.step.rowphysics.extrapolation_width`). A correction regressor then learns
# log(measured / physics) on the same training rows
# (LightGBM on the physics and a dozen job features, CV+ intervals calibrated per source on folds that keep whole
# family groups (`physics_interval_groups`), its strength chosen by an inner CV grouped the same way, bounded to its
# source's training range). That is `gpupred.step.estimator.StepEstimator`, the very estimator the predictor ships
# (notebook 08 fits it on every row): what is scored here is what users get. Its intervals are calibrated on unseen
# families wherever they are asked, so within one GPU kind they are wider than they need to be: by design, since a
# user's job is as likely to be an unseen family as a new batch size of a known one.
#
# Memory the same way (`gpupred.memory.evaluate.compare_memory`): *physics* is the analytic footprint of
# `gpupred.memory.physics` (weights, gradients, optimizer state, autocast copies, activations saved for backward,
# workspace; the CUDA context and the allocator's ratio fitted per GPU kind and protocol on the training rows),
# and the correction a bounded factor whose clip and size are chosen by a leave-one-family-out **inside the
# training rows** (whose held-out residuals also calibrate its 90 % interval).
#
# Four methods on the same splits, for every target: the constant baseline (the training rows' mean of
# log1p), the current regressor (LightGBM with CV+ intervals on every other feature: no step model, no
# footprint; calibrated like the estimator), physics alone, physics × correction. Splits: within each GPU kind
# (grouped folds over its own workloads), leave one family out, and cross-GPU (another kind's rows, or all other
# kinds', to a kind). Utilization and SM activity are scored by RMSLE, iteration time and memory by the median
# relative error; coverage is that of the 90 % intervals. `gpupred.step.evaluate`, `gpupred.memory`.

# %%
from gpupred import physicstables
from gpupred.memory.evaluate import compare_memory
from gpupred.contracts import LEARNING_METRICS
from gpupred.learn.summary import (
    comparison_metrics, comparison_table, gpu_key, headline_metrics, plot_methods, tested_on,
)
from gpupred.step.physics.constants import FITTED
from gpupred.step import evaluate as step_evaluate
from gpupred.step import rowphysics as step_physics

step_targets = [t for t in physics_targets if t in step_physics.PHYSICS_TARGETS and df[t].notna().sum() >= 10]
pdata = step_physics.physics_data(df) if step_targets else None  # each run's kernels, from its graph
phys_results = step_evaluate.compare_targets(df, tuple(step_targets), cv, physics_weighting, n_within, pdata,
                                            tuple(physics_schemes), interval_groups=physics_interval_groups) if step_targets else {}
if "memory_mib" in physics_targets and df["memory_mib"].notna().sum() >= 10:
    phys_results["memory_mib"] = compare_memory(physicstables.with_terms(df), cv, n_within,
                                                schemes=tuple(physics_schemes))
phys_table = comparison_table(phys_results)
fitted_table = step_physics.fitted_constants(pdata, np.arange(len(df)), seed) if pdata is not None else None
constants = (pd.DataFrame(fitted_table.as_records())
             if pdata is not None else pd.DataFrame(columns=["gpu", "protocol", *FITTED])).set_index(["gpu", "protocol"])
own_gpus = sorted(dataset.own_rows(df)["gpu"].unique())  # the kinds this project measured
own = phys_table[np.logical_or.reduce([tested_on(phys_table, g) for g in own_gpus])] if own_gpus else phys_table[:0]
(own.pivot_table(index=["target", "scheme", "tested"], columns="method", values=["rmsle", "median_rel_err", "coverage"])
 .round(3) if len(own) else "no physics comparison on this project's runs")

# %% [markdown]
# The step model's constants fitted on every row (what the predictor uses; the figures above refit them
# on each split's training rows). Times in seconds.

# %%
constants[list(FITTED)]

# %%
for gpu in own_gpus if len(own) else []:
    fig = plot_methods(phys_table, gpu=gpu)
    reports.save_figure(fig, f"03-physics-vs-regressors-{gpu_key(gpu)}")
    plt.show()

# %%
phys_metrics = comparison_metrics(phys_table, own_gpus, phys_results, constants, physics_weighting)  # gpupred.learn.summary
reports.write_metrics(LEARNING_METRICS, phys_metrics)
reports.metrics_table({k: v for k, v in phys_metrics.items()
                       if k.startswith("comparison_") and k.split("_")[-2] == "coverage"}, LEARNING_METRICS)

# %% [markdown]
# Where it still fails: host-side work that no graph shows. Lucid's PointNet jobs load and sample point
# clouds on the host each step (an order of magnitude below the step model's utilization here; the input-pipeline
# section below takes their loader in), and every job that
# copies batches from host memory pays a transfer the model prices at a flat bandwidth. Under
# leave-one-family-out, the families whose kernels no other family resembles miss most: EfficientNet, held out
# with MobileNet, gets its depthwise efficiency from ShuffleNet alone and comes out too slow; Inception's
# branchy blocks run faster than their kernels' sum; DCGAN's step is still short of the measured one even with
# its recipe (loss and optimizer kernels of two networks); and GPUMemNet's non-zero-only averaging is a protocol
# the timeline does not simulate (its constants absorb it). SM activity has no occupancy model: it is the step
# model's busy fraction times the correction.
#
# Between the two Hoppers (when both were measured), from the comparison above: the cell below gives physics ×
# correction trained on one kind and tested on the other's workloads against within the tested kind's own runs.
# Where one kind's workloads are all measured on the other, that direction exists only with the twins kept
# (`cross GPU (twins)`): there a regressor that has seen the same job on the other card has an advantage no new
# job gives it.
#
# Memory: under leave-one-family-out the correction learned on other families barely helps the footprint (the
# inner selection often switches it off), and GPUMemNet's held-out fully connected group is a protocol never
# measured in training, so its context and allocator are defaults (far off: the table above). Across GPU kinds each
# source brings its own protocol too: a figure such as RTX 3090 -> H200 measures a new protocol as much as a new
# GPU. Notebook 05 breaks memory down further (Horus's formula, the first analytical estimate, per source).

# %%
from gpupred.learn.summary import cross_gpu_prose

display(Markdown(cross_gpu_prose(phys_table, own_gpus)))

# %% [markdown]
# ## Real-world graphs at real scale
# The catalog's textbook models are not what reaches a cluster. The corpus (`data/corpus/`: 64 timm architectures,
# 19 Hugging Face models from small configs, and four real-size decoders exported without their weights:
# GPT-2-large, OPT-1.3B, LLaMA-7B and LLaMA-13B at sequence 2048; `gpupred export --corpus`, `docs/corpus.md`)
# goes through the predictor's physics here, torch-free: the graph's parameters and forward FLOPs against torch's
# `sum(p.numel())` and FlopCounterMode (recorded at export); the step model's step time and the analytic footprint
# on one measured GPU kind, with the constants fitted on every run above, in bf16 autocast with Adam, at a batch a
# user would train with (timm 64 images, the small Hugging Face configs 32 sequences of 32 tokens, the decoders one
# sequence of 2048); and for the decoders the analytic mixed-precision Adam count of Korthikanti et al. (2022):
# 16 bytes per parameter plus `s·b·h·(34 + 5·a·s/h)` bytes of activations per layer, or `34·s·b·h` without the
# attention scores a fused attention kernel never stores (as torch's scaled_dot_product_attention and the
# footprint assume). The learned corrections are left out: they are bounded and fitted on the catalog, and these
# models lie outside it. `gpupred.predictor.realworld_report`. The section adds about 32 s of CPU to the notebook (97 s
# wall on this project's 2-core machine under a load of 5); `realworld=[]` skips it.

# %%
from gpupred import config
from gpupred.memory import physics as footprint
from gpupred.graph.corpus import read_corpus_index
from gpupred.step.physics.constants import ConstantsTable
from gpupred.predictor.realworld_report import plot_realworld_steps, realworld_metrics, realworld_table

corpus_models = read_corpus_index()["models"]
names = [n for n in corpus_models if realworld is None or n in realworld]
own_runs = dataset.own_rows(df)
rw_gpu = realworld_gpu or (own_runs if len(own_runs) else df)["gpu"].value_counts().index[0]
fdf = physicstables.with_terms(df)  # each run's footprint terms (notebook 02's table)
fitted_fp = footprint.Footprint().fit(fdf[fdf["memory_mib"].notna()])
rw = (realworld_table(rw_gpu, fitted_table or ConstantsTable({}), fitted_fp, names=names, n_jobs=n_jobs) if names
      else pd.DataFrame())
print(f"{len(rw)} corpus models on {rw_gpu} ({config.CORPUS}); {rw['seconds'].sum() if len(rw) else 0:.0f} s")
(rw.groupby("kind")[["params_ratio", "flops_ratio"]].agg(["median", "min", "max"]).round(4) if len(rw)
 else "no corpus graphs here")

# %% [markdown]
# Parameters agree with torch's exactly and forward FLOPs within 2% for every corpus model but one (Pegasus-X's dead
# encoder branch, 4.1%: `docs/corpus.md`). The real-size decoders: predicted memory beside the analytic count, the
# card's memory (`gpu_gib`), and the predicted step time of one 2048-token sequence. The footprint lies above the
# analytic count for each: it keeps fp32 master weights and gradients plus a 16-bit autocast copy of every weight
# (18 bytes per parameter with Adam, as torch's autocast trains, against the 16 of Megatron-style mixed precision),
# it counts what these layers save beyond GPT-2's `34·s·b·h` (LLaMA's RMSNorm in fp32, its rotary embeddings and
# gated MLP), and the fp32 loss buffers of the logits. LLaMA-7B and 13B fit no single card with plain Adam at any
# batch: such jobs shard their states (FSDP, ZeRO) or offload them, which the predictor does not model yet. Their
# step times rest on constants fitted on the catalog's small models, far from these in size.

# %%
llm_cols = ["params", "torch_params", "flops_ratio", "memory_gib", "korthikanti_fused_gib", "korthikanti_gib",
            "gpu_gib", "step_s", "util"]
llms = rw[rw["kind"] == "llm"] if len(rw) else rw
llms[llm_cols].round(3) if len(llms) else "no real-size decoder in the corpus here"

# %%
if len(rw):
    fig = plot_realworld_steps(df, rw, rw_gpu)
    reports.save_figure(fig, "03-realworld-step-time")
    plt.show()
    reports.write_metrics(LEARNING_METRICS, realworld_metrics(rw, rw_gpu))

# %% [markdown]
# ## Jobs as they really run: their input pipeline
# This project's sweeps train on batches already on the GPU. Real jobs feed the GPU from a host input pipeline:
# DataLoader workers read, decode and augment samples, the main process receives, pins and copies each batch. The
# step model's timeline takes the pipeline in (`gpupred.step.physics.inputfeed`, `gpupred.step.physics.timeline.with_loader`): its
# per-sample costs come from a host profile (`gpupred loader bench`; the reference is this project's development
# machine, `data/hosts/`), each job's pipeline from its upstream script (`gpupred.importers.lucid`: CIFAR's and
# FakeData's PIL transforms in 2 workers, ShapeNet's point clouds parsed from text in 2 workers, SQuAD's features in
# the main process). The imported jobs are predicted here as the default predictor would: its step estimator fitted
# on this project's runs alone, never on them; *before* drops the pipelines (every host batch only copied), *after*
# keeps them.

# %%
from gpupred.step.evaluate import pipeline_metrics, pipeline_table, plot_pipelines, source_heldout, without_pipelines

fed = {}
if pipeline_source and (df["source"] == pipeline_source).any():
    fed = {"before": source_heldout(without_pipelines(df), pipeline_source, alpha=alpha, seed=seed),
           "after": source_heldout(df, pipeline_source, alpha=alpha, seed=seed)}
    pipeline_figures = pipeline_metrics(fed, pipeline_source)
    reports.write_metrics(LEARNING_METRICS, pipeline_figures)
    fig = plot_pipelines(fed, pipeline_source)
    reports.save_figure(fig, "03-input-pipelines")
    plt.show()
pipeline_table(fed).round(3) if fed else f"no {pipeline_source or 'held-out'} rows here: the section is skipped"

# %%
if fed:
    print(f"{pipeline_source}, utilization RMSLE over {len(fed['after'])} runs: "
          f"{pipeline_figures[f'pipeline_{pipeline_source}_gpu_util_rmsle_before']:.3f} without pipelines, "
          f"{pipeline_figures[f'pipeline_{pipeline_source}_gpu_util_rmsle_after']:.3f} with them; median step-time "
          f"error {pipeline_figures[f'pipeline_{pipeline_source}_iter_time_mre_before']:.1%} -> "
          f"{pipeline_figures[f'pipeline_{pipeline_source}_iter_time_mre_after']:.1%}")
    fed["after"].loc[fed["after"]["loader_workers"].notna(), ["family", "batch_size", "precision", "gpu_util",
                     "pred_gpu_util", "iter_time_mean_s", "pred_iter_time_mean_s", "loader_produce_s",
                     "loader_workers"]].round(3).sort_values(["family", "batch_size"])

# %% [markdown]
# This project's own pipeline-fed runs: catalog families fed by real DataLoaders over synthetic files on a lent GPU's
# host (`plans/input-pipelines.txt`, the campaign's stage 2; its host profile recorded beside them). They are
# predicted by the shipped step estimator fitted on every other own run, none of them pipeline-fed, so what it knows
# of pipelines is the timeline's physics.

# %%
from gpupred.step.evaluate import own_pipeline_heldout, own_pipeline_metrics

own_fed = own_pipeline_heldout(df, alpha=alpha, seed=seed)
own_fed_figures = own_pipeline_metrics(own_fed)
if own_fed_figures:
    reports.write_metrics(LEARNING_METRICS, own_fed_figures)
    print(f"{len(own_fed)} own pipeline-fed runs: utilization RMSLE {own_fed_figures['pipeline_own_gpu_util_rmsle']:.3f} "
          f"(physics alone {own_fed_figures['pipeline_own_gpu_util_rmsle_physics']:.3f}), Spearman "
          f"{own_fed_figures['pipeline_own_gpu_util_spearman']:.2f}, median |error| "
          f"{own_fed_figures['pipeline_own_gpu_util_mae_points']:.1f} points, interval coverage "
          f"{own_fed_figures['pipeline_own_gpu_util_coverage']:.0%}; median step-time error "
          f"{own_fed_figures['pipeline_own_iter_time_mre']:.1%}")
(own_fed[["workload_id", "loader_workers", "gpu_util", "pred_gpu_util", "physics_gpu_util", "iter_time_mean_s",
          "pred_iter_time_mean_s"]].round(3).sort_values(["workload_id", "loader_workers"])
 if len(own_fed) else "no own pipeline-fed runs here")

# %% [markdown]
# What the figures say (the table and the line above): on most of these jobs the pipeline does not bind. A CIFAR
# batch costs a worker a few milliseconds of PIL transforms on the reference host, well inside the measured steps,
# so the pipeline adds only the main process's receiving and copying. The large errors are the device step's, on a
# GPU and protocol never measured (an RTX 3090 under `CUDA_LAUNCH_BLOCKING=1`, constants borrowed). PointNet is the
# job whose pipeline binds. Its loader parses two text files per sample with `np.loadtxt`, and Lucid's workloads pin
# numpy 1.21.5, whose `loadtxt` parsed in Python: the importer feeds it through the `txt-legacy` array format, which
# the host profile times with that parser (`gpupred.loader.legacytext`; 13-15x numpy's C parser since 1.23, and
# 0.89x numpy 1.21.5's own on one interpreter, `benchmarks/bench_loadtxt_legacy.py`). Its predicted loader time per
# batch and worker (`loader_produce_s`) now sets its step, and its utilization comes within 10 points of the measured
# one; its steps are still predicted at about half the measured length, the part of a worker's cost on Lucid's host
# (its CPU and Python version are not published) that the reference host does not show. A user measures their own
# loader on their own host instead (`gpupred loader measure`, `gpupred.measure_loader`) and predicts with it
# (`--data measured --loader-profile FILE`).

# %% [markdown]
# ## What ships, and how it scores
# The predictor ships `gpupred.step.estimator.StepEstimator` (utilization, SM activity, iteration time) and the memory
# footprint model (`gpupred.memory.estimator.MemoryEstimator`) with the settings declared in this notebook's parameters
# (`physics_weighting`, `physics_interval_groups`): the very estimators scored above as *physics × correction*.
# Each predictor's card states their held-out figures: the noncommercial predictor's are the comparison above
# (every source); the default predictor is trained on this project's runs alone, so its figures come from the
# same comparison run on those runs alone (below). Notebook 08 reads both, with the estimator's parameters, from
# `data/processed/model_choice.json` (`gpupred.learn.choice`), and the bare-feature-row baselines notebook 03
# chose by inner cross-validation.

# %%
from gpupred.predictor.heldout import heldout_figures, oof_predictions, with_shipped
from gpupred.step.estimator import StepEstimator

shipped_step = StepEstimator(weighting=physics_weighting, interval_groups=physics_interval_groups, alpha=alpha, n_cal=n_cal,
                             n_inner=n_inner, seed=seed)
own_df = dataset.own_rows(df).reset_index(drop=True)
own_targets = tuple(t for t in step_targets if own_df[t].notna().sum() >= 10)
own_results = step_evaluate.compare_targets(own_df, own_targets, cv, physics_weighting, n_within, pdata,
                                            tuple(physics_schemes), ("regressor", "physics+correction"),
                                            physics_interval_groups) if own_targets else {}
if "memory_mib" in phys_results and own_df["memory_mib"].notna().sum() >= 10:
    own_results["memory_mib"] = compare_memory(physicstables.with_terms(own_df), cv, n_within,
                                               schemes=tuple(physics_schemes))
heldout = {"noncommercial": heldout_figures(phys_table), "default": heldout_figures(comparison_table(own_results))}
headline = {**headline_metrics(own_results), **headline_metrics(own_results, "regressor", "_baseline")}
reports.write_metrics(LEARNING_METRICS, headline)
reports.show_table(pd.DataFrame([{"variant": v, "target": t, "scheme": s, "tested": g, **e} for v, per in heldout.items()
                                 for t, schemes_ in per.items() for s, tested_ in schemes_.items()
                                 for g, e in tested_.items()]
                                ).pivot_table(index=["target", "scheme", "tested"], columns="variant",
                                              values=["error", "coverage"]))

# %% [markdown]
# ## Out-of-fold predictions for downstream notebooks
# Every dataset row, predicted by the shipped estimators fitted on the other grouped-random folds (whole
# workloads), with their intervals: `data/processed/oof_predictions.parquet` (`gpupred.learn.oof`), stamped with
# the dataset's fingerprint; notebooks 06 and 07 read them. A target the shipped estimators do not cover here
# (the step model needs each run's graph) keeps the nested regressor's out-of-fold prediction; the file's
# `<target>_model` column says which made each.

# %%
oof = oof_frame(dict(results["grouped_random"]), df)  # the nested baselines, every target (the same folds)
oof = with_shipped(oof, oof_predictions(df, folds, shipped_step if step_targets else None, pdata, seed, n_jobs))
path = write_oof_predictions(oof, df)
print(f"{len(oof)} rows -> {path}; made by {({c[:-6]: oof[c].iloc[0] for c in oof.columns if c.endswith('_model')})}")
oof.head()

# %% [markdown]
# ## The model to export
# Notebook 08 fits the shipped estimators above on every row. The baseline regressors that answer bare feature
# rows (no graph: no kernels for the step model) are chosen here per target by the same grouped inner
# cross-validation run on all rows. Both go to `data/processed/model_choice.json` (`gpupred.learn.choice`), which
# notebooks 04 and 08 read, with the held-out figures above. The selection score that picked each baseline is not
# a performance figure and is not reported; the outer-fold figures above are.

# %%
chosen = {t: choose_for_export(df, t, candidates, cv) for t in results.get("grouped_random", {})}
write_model_choice(chosen, df, step=shipped_step.get_params(), heldout=heldout)  # notebooks 04 and 08 read it
chosen

# %%
metrics = learning_metrics(info, results, chosen, transfer, ratios)  # gpupred.learn.summary names the keys
reports.write_metrics(LEARNING_METRICS, metrics)
reports.show_table(reports.metrics_table(metrics, LEARNING_METRICS))
