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
# # 03 · Physics first: the shipped estimators, held out, beside their baselines
# The predictor does not ship a regressor on aggregate features: it ships physics with a learned correction. The
# step estimator (`gpupred.step.estimator.StepEstimator`) expands each graph into the kernels of one training step
# and runs them on the GPU's timeline; the memory estimator (`gpupred.memory.estimator.MemoryEstimator`) counts the
# footprint tensor by tensor. This notebook scores both **held out** (within a GPU kind, on unseen families, on
# another GPU kind) beside the constant baseline and the regressor of `03-compare-regressors` on the same splits,
# takes them to real-world graphs at real scale and to jobs fed by their input pipelines, gives the figures each
# predictor's card states, and writes the choice notebooks 04 and 08 read (`data/processed/model_choice.json`).
#
# It shares its inputs with `03-compare-regressors` and none of its outputs, so the pipeline runs the two side by
# side. Errors as there: RMSLE of utilization in percent, the median relative error of iteration time and memory.

# %% tags=["parameters"]
targets: list = ["gpu_util", "memory_mib", "sm_active"]  # labels whose bare-feature-row baseline is chosen for export (when 10 rows have them)
models: list | None = ["ridge", "lightgbm", "xgboost"]  # regressors the baselines are chosen from (as in 03-compare-regressors); None = gpupred.learn.regressors.EXPORTABLE
n_outer: int = 5  # grouped random outer folds
n_inner: int = 3  # inner (model-selection) folds
n_cal: int = 5  # CV+ calibration folds inside each outer training side
alpha: float = 0.1  # 1 - nominal interval coverage
tune: bool = False  # small grid search inside every fit (slower: each candidate then runs its own CV)
physics_targets: list = ["gpu_util", "iter_time_mean_s", "sm_active", "memory_mib"]  # the comparison's labels ([]: none)
physics_schemes: list = ["within", "lofo", "cross_gpu", "cross_gpu_twins"]  # its split schemes
physics_weighting: str = "per_source"  # training rows of the correction: pooled, balanced or per_source
physics_interval_groups: str = "family"  # what the step estimator's (and baselines') conformal folds keep whole: family or workload
n_within: int = 5  # grouped folds of the within-GPU reference of the cross-GPU splits
n_jobs: int = 0  # processes for the fits (0: one per core this notebook is given: gpupred.learn.parallel.cores)
seed: int = 0  # fold assignment and model seeds
realworld: list | None = None  # corpus models of the real-world section (None: all of data/corpus/; []: skip it)
realworld_gpu: str | None = None  # the GPU they are predicted on (None: the measured kind with the most runs)
pipeline_source: str = "lucid"  # the imported source whose jobs are predicted with their input pipelines ("": skip)

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown

from gpupred import dataset, reports
from gpupred.contracts import ESTIMATOR_METRICS
from gpupred.learn.choice import write_model_choice
from gpupred.learn.nested import CVSettings, choose_for_export
from gpupred.learn.regressors import EXPORTABLE
from gpupred.learn.summary import choice_metrics

df = dataset.load_dataset()  # MissingInput until data is imported or collected and notebook 02 has run
cv = CVSettings(n_outer=n_outer, n_inner=n_inner, alpha=alpha, n_cal=n_cal, tune=tune, seed=seed, n_jobs=n_jobs)
candidates = list(models or EXPORTABLE)

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
             if pdata is not None else pd.DataFrame(columns=["gpu", "protocol", *FITTED, "blocking_s", "blocking_runs"])
             ).set_index(["gpu", "protocol"])
own_gpus = sorted(dataset.own_rows(df)["gpu"].unique())  # the kinds this project measured
own = phys_table[np.logical_or.reduce([tested_on(phys_table, g) for g in own_gpus])] if own_gpus else phys_table[:0]
(own.pivot_table(index=["target", "scheme", "tested"], columns="method", values=["rmsle", "median_rel_err", "coverage"])
 .round(3) if len(own) else "no physics comparison on this project's runs")

# %% [markdown]
# The step model's constants fitted on every row (what the predictor uses; the figures above refit them
# on each split's training rows). Times in seconds. `blocking_s`, the host's wait for each kernel under
# `CUDA_LAUNCH_BLOCKING=1`, is fitted only where a GPU kind has launch-blocking runs beside runs of another protocol
# (`blocking_runs` of them: the catalog's launch-blocking twins), the seven then on the others alone; a kind without them
# keeps the default, and Lucid's runs, all launch-blocking, borrow the measured wait moved to their host by the speed
# ratio, as they borrow the launch cost (`gpupred.step.physics.fit`).

# %%
constants[[*FITTED, "blocking_s", "blocking_runs"]]

# %%
for gpu in own_gpus if len(own) else []:
    fig = plot_methods(phys_table, gpu=gpu)
    reports.save_figure(fig, f"03-physics-vs-regressors-{gpu_key(gpu)}")
    plt.show()

# %%
phys_metrics = comparison_metrics(phys_table, own_gpus, phys_results, constants, physics_weighting)  # gpupred.learn.summary
reports.write_metrics(ESTIMATOR_METRICS, phys_metrics)
reports.metrics_table({k: v for k, v in phys_metrics.items()
                       if k.startswith("comparison_") and k.split("_")[-2] == "coverage"}, ESTIMATOR_METRICS)

# %% [markdown]
# Where it still fails: host-side work that no graph shows. Lucid's PointNet jobs load and sample point
# clouds on the host each step (the input-pipeline section below takes their loader in: without it, the step model
# puts their utilization an order of magnitude too high), and every job that
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
    reports.write_metrics(ESTIMATOR_METRICS, realworld_metrics(rw, rw_gpu))

# %% [markdown]
# ### Measured fine-tunes: step time
# The fine-tune runs this project measured on a lent GPU (the measurement campaign's stage 3, `plans/finetune.txt`:
# full, LoRA and QLoRA fine-tunes of a 1.1B LLaMA and two GPT-2s; notebook 05 compares their memory), against the
# step model with the constants fitted above, physics alone as for the corpus: step time and utilization. No
# training row is one of them: the dataset leaves every run with setup options out.

# %%
from gpupred.predictor.realworld_report import finetune_runs, finetune_step_metrics, finetune_steps

ft_steps = finetune_steps(fitted_table or ConstantsTable({}), finetune_runs())
if len(ft_steps):
    reports.write_metrics(ESTIMATOR_METRICS, finetune_step_metrics(ft_steps))
(ft_steps.drop(columns=["group_id"]).round(3) if len(ft_steps)
 else "no fine-tune run measured yet: the measurement campaign's stage 3 (plans/finetune.txt) records them")

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
    reports.write_metrics(ESTIMATOR_METRICS, pipeline_figures)
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
    reports.write_metrics(ESTIMATOR_METRICS, own_fed_figures)
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
# batch costs a worker a few milliseconds of PIL transforms, well inside the measured steps, so the pipeline adds
# only the main process's receiving and copying. The large errors are the device step's, on a GPU and protocol
# never measured (an RTX 3090 under `CUDA_LAUNCH_BLOCKING=1`, constants borrowed). PointNet is the job whose
# pipeline binds. Its loader parses two text files per sample with `np.loadtxt`, and Lucid's workloads pin numpy
# 1.21.5, whose `loadtxt` parsed in Python: the importer feeds it through the `txt-legacy` array format, which the
# host profile times with that parser (`gpupred.loader.legacytext`; 13-15x numpy's C parser since 1.23, and 0.89x
# numpy 1.21.5's own on one interpreter, `benchmarks/bench_loadtxt_legacy.py`). Its predicted loader time per batch
# and worker (`loader_produce_s`) sets its step. Lucid does not say what CPU its GPUs sat beside, so its jobs run,
# as every job that names no host does, on a GPU server as this project measured them
# (`gpupred.loader.speed.GPU_HOST_SCORE`: the H100's and H200's hosts, about half as fast per core as the development
# machine whose profile holds the costs), a figure read from this project's own host profiles, not fitted to Lucid.
# What that prior cannot know, a user measures: their own loader on their own host (`gpupred loader measure`,
# `gpupred.measure_loader`), predicted with it (`--data measured --loader-profile FILE`).

# %% [markdown]
# ## What ships, and how it scores
# The predictor ships `gpupred.step.estimator.StepEstimator` (utilization, SM activity, iteration time) and the memory
# footprint model (`gpupred.memory.estimator.MemoryEstimator`) with the settings declared in this notebook's parameters
# (`physics_weighting`, `physics_interval_groups`): the very estimators scored above as *physics × correction*.
# Each predictor's card states their held-out figures: the noncommercial predictor's are the comparison above
# (every source); the default predictor is trained on this project's runs alone, so its figures come from the
# same comparison run on those runs alone (below). Notebook 08 reads both, with the estimator's parameters, from
# `data/processed/model_choice.json` (`gpupred.learn.choice`), and the bare-feature-row baselines chosen below
# by inner cross-validation.

# %%
from gpupred.predictor.heldout import heldout_figures
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
reports.write_metrics(ESTIMATOR_METRICS, headline)
reports.show_table(pd.DataFrame([{"variant": v, "target": t, "scheme": s, "tested": g, **e} for v, per in heldout.items()
                                 for t, schemes_ in per.items() for s, tested_ in schemes_.items()
                                 for g, e in tested_.items()]
                                ).pivot_table(index=["target", "scheme", "tested"], columns="variant",
                                              values=["error", "coverage"]))

# %% [markdown]
# ## The model to export
# Notebook 08 fits the shipped estimators above on every row. The baseline regressors that answer bare feature
# rows (no graph: no kernels for the step model) are chosen here per target by the same grouped inner
# cross-validation run on all rows. Both go to `data/processed/model_choice.json` (`gpupred.learn.choice`), which
# notebooks 04 and 08 read, with the held-out figures above. The selection score that picked each baseline is not
# a performance figure and is not reported; the outer-fold figures of `03-compare-regressors` are.

# %%
chosen = {t: choose_for_export(df, t, candidates, cv) for t in targets if df[t].notna().sum() >= 10}
write_model_choice(chosen, df, step=shipped_step.get_params(), heldout=heldout)  # notebooks 04 and 08 read it
reports.write_metrics(ESTIMATOR_METRICS, choice_metrics(chosen))  # regressors_<target>_model
chosen
