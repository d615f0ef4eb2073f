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
#
# What the predictor ships (physics first, with a learned correction) is scored beside these regressors in
# `03-physics-first`, which also chooses the baselines to export. The two notebooks share no output, so the
# pipeline runs them side by side.

# %% tags=["parameters"]
targets: list = ["gpu_util", "memory_mib", "sm_active"]  # labels to model (skipped when fewer than 10 rows have them)
models: list | None = ["ridge", "lightgbm", "xgboost"]  # regressors the procedure chooses from (03-physics-first exports them); None = gpupred.learn.regressors.EXPORTABLE
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
physics_targets: list = ["gpu_util", "iter_time_mean_s", "sm_active", "memory_mib"]  # labels the shipped step estimator predicts out of fold ([]: none)
physics_weighting: str = "per_source"  # the shipped step estimator's (as 03-physics-first scores it): pooled, balanced or per_source
physics_interval_groups: str = "family"  # what the step estimator's (and baselines') conformal folds keep whole: family or workload
n_within: int = 5  # grouped folds of the within-GPU reference of the cross-GPU evaluation
n_jobs: int = 0  # processes for the fits (0: one per core this notebook is given: gpupred.learn.parallel.cores)
seed: int = 0  # fold assignment and model seeds

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from gpupred.learn.regressors import EXPORTABLE
from gpupred import dataset, reports
from gpupred.learn.crossgpu import cross_gpu_evaluation, twin_gpu_pairs, twin_ratios
from gpupred.learn.folds import sibling_group
from gpupred.learn.evaluation import splits_for
from gpupred.learn.nested import CVSettings, nested_cv, oof_frame, plot_comparison, plot_outer
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
# ## Out-of-fold predictions for downstream notebooks
# Every dataset row, predicted by the shipped estimators fitted on the other grouped-random folds (whole
# workloads), with their intervals: `data/processed/oof_predictions.parquet` (`gpupred.learn.oof`), stamped with
# the dataset's fingerprint; notebooks 06 and 07 read them. A target the shipped estimators do not cover here
# (the step model needs each run's graph) keeps the nested regressor's out-of-fold prediction; the file's
# `<target>_model` column says which made each.

# %%
from gpupred.predictor.heldout import oof_predictions, with_shipped
from gpupred.step import rowphysics as step_physics
from gpupred.step.estimator import StepEstimator

step_targets = [t for t in physics_targets if t in step_physics.PHYSICS_TARGETS and df[t].notna().sum() >= 10]
pdata = step_physics.physics_data(df) if step_targets else None  # each run's kernels, from its graph
shipped_step = StepEstimator(weighting=physics_weighting, interval_groups=physics_interval_groups, alpha=alpha, n_cal=n_cal,
                             n_inner=n_inner, seed=seed)  # as notebook 08 ships it
oof = oof_frame(dict(results["grouped_random"]), df)  # the nested baselines, every target (the same folds)
oof = with_shipped(oof, oof_predictions(df, folds, shipped_step if step_targets else None, pdata, seed, n_jobs))
path = write_oof_predictions(oof, df, step=shipped_step.get_params() if step_targets else None)
print(f"{len(oof)} rows -> {path}; made by {({c[:-6]: oof[c].iloc[0] for c in oof.columns if c.endswith('_model')})}")
oof.head()

# %%
from gpupred.contracts import LEARNING_METRICS

metrics = learning_metrics(info, results, transfer, ratios)  # gpupred.learn.summary names the keys
reports.write_metrics(LEARNING_METRICS, metrics)
reports.show_table(reports.metrics_table(metrics, LEARNING_METRICS))
