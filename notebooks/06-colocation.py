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
# # 06 — Co-location, honestly scored: priors, a gated correction, and adaptation from reference co-runs
#
# A co-located job's slowdown is its co-located over its solo step time (1 / normalized speed). The pairs are
# *measured*, in **slices** of one GPU kind each (`gpupred.colocation.study`): Lucid's RTX 3090 pairs without
# and with the reinforcement-learning jobs (which have no graph, hence no prediction: in the with-RL slice their
# measured solo inputs stand in, and the slice says how many rows that touches), Gavel's matrix on K80, P100
# and V100 (no utilization recorded: its priors come from solo throughput), and this project's own pairs
# (`data/raw`) once they exist.
#
# **Predictors, from cheapest to richest** (`gpupred.slowdown.estimator`, scikit-learn style):
# zero-parameter priors — summed predicted utilization, the time-sharing estimate from the step model's busy
# and host time, from predicted utilization, from measured solo utilization (oracles), and on Gavel the step
# share of solo step times and the time-sharing estimate from a busy share fitted to each job's solo steps on
# P100 and V100 with the datasheets' speed ratio; the **correction** of the time-sharing prior (or on Gavel, the step share), kept only in cells
# where an inner cross-validation over the training model groups shows it ranking better than the prior in every
# inner fold; and **adaptation**: each job's sensitivity and aggressiveness fitted from `k` short co-runs with
# fixed reference jobs, shrunk to the prior (`SlowdownModel.adapt`), for `k` = 0..5.
#
# **Scoring** (`gpupred.slowdown.evaluate`): held out by whole model group in cross-fitting cells; every pair
# is predicted by a model that saw no pair of either member's model group; a held-out job's only pairs the
# adaptation may use are its `k` co-runs with the reference jobs, and no pair holding a reference job is ever
# scored (so every figure of a slice is on the same rows). Reported: Spearman pooled, per cell (each cell's model
# sits at its own level, which the pooled figure also measures) and within job (how one job's partners rank),
# and the MAE of the slowdown; with and without jobs whose solo baseline the check below flags.

# %% tags=["parameters"]
n_folds: int = 5  # model-group folds for cross-fitting (cell (a, b) trains on pairs touching neither fold)
seed: int = 0  # fold assignment and model seed
lucid: bool = True  # include Lucid's pairs when gpupred.importers.lucid has imported them
gavel: bool = True  # include Gavel's matrix when gpupred.importers.gavel has imported it (`gpupred import gavel`)
gavel_gpus: list = ["k80", "p100", "v100"]  # Gavel GPU kinds to score (each its own slice)
gavel_fixture_file: str = ""  # tests only: a FIXTURE file in Gavel's layout, read without the sha256 pin
max_k: int = 5  # adaptation is scored for k = 0..max_k reference co-runs (max_k reference jobs per slice)
interval_level: float = 0.9  # central level of the out-of-fold memory intervals (notebook 03's conformal bounds)
max_oom_risk: float = 0.05  # a pair is placed only when its predicted out-of-memory probability is at most this

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from gpupred import config
from gpupred.colocation.effects import job_effects
from gpupred.colocation.gavelpairs import load_gavel
from gpupred.colocation.members import align, baseline_slowdown, predicted_features
from gpupred.colocation.memfit import group_memory_fit
from gpupred.colocation.pairtable import SOLO_COLUMNS, TABLE_COLUMNS, load_pair_sources
from gpupred.colocation import closing, study
from gpupred.errors import MissingInput
from gpupred.contracts import COLOCATION_METRICS
from gpupred.reports import progress_bar, save_figure, write_metrics

notes: list[str] = []
try:
    table, solo, source_notes = load_pair_sources(config.RAW, lucid=lucid)
    notes += source_notes
except MissingInput as err:  # no own or Lucid pairs: Gavel's matrix may still be there
    table, solo = pd.DataFrame(columns=list(TABLE_COLUMNS)), pd.DataFrame(columns=list(SOLO_COLUMNS))
    notes.append(str(err))
gavel_frames = load_gavel(gavel_fixture_file, allow_import=gavel)  # imports at the pinned commit if needed
if isinstance(gavel_frames, str):
    notes.append(gavel_frames)
if table.empty and isinstance(gavel_frames, str):
    raise MissingInput("no measured co-located pairs: " + "; ".join(notes))
features = None
if len(table):
    from gpupred.dataset import load_dataset
    from gpupred.learn.oof import read_oof_predictions

    dataset = load_dataset()  # every row, as notebook 03 predicted them; MissingInput until the dataset is built
    oof = read_oof_predictions(dataset)  # refuses stale predictions
    features = predicted_features(dataset, oof)
for note in notes:
    print("note:", note)

# %%
slices = []
if features is not None:
    slices += study.lucid_slices(table, solo, features) + study.own_slices(table, solo, features)
if not isinstance(gavel_frames, str):
    slices += [study.gavel_slice(*gavel_frames, g) for g in gavel_gpus]
summary = pd.DataFrame([{"slice": s.name, "label": s.label, "pairs": s.X["group_id"].nunique(), "member_rows": len(s.X),
                         "jobs": s.X["job_key"].nunique(), "model_groups": s.X["model_group"].nunique(),
                         "failed_pairs": s.failed_pairs, "self_pair_noise_sd": s.noise_sd} for s in slices])
for s in slices:
    for note in s.notes:
        print(f"{s.name}: {note}")
summary.round(3)

# %% [markdown]
# ## Measured slowdowns
#
# Each point is one member of a measured pair of Lucid's (or this project's) slices, against the summed measured
# solo utilization; the dashed line is HotCloud's additive rule. Gavel records no utilization: its slowdowns are
# shown against the partner's share of the two solo step times.

# %%
frames = []
for s in slices:
    x = s.X["own_util_meas"] + s.X["partner_util_meas"] if "own_util_meas" in s.X else s.X["partner_step_s"] / (
        s.X["own_step_s"] + s.X["partner_step_s"])
    frames.append(pd.DataFrame({"slice": s.name, "x": x, "slowdown": s.X["slowdown"],
                                "axis": "summed solo util (%)" if "own_util_meas" in s.X else "partner step share"}))
points = pd.concat(frames, ignore_index=True)
g = sns.relplot(data=points, x="x", y="slowdown", col="slice", col_wrap=3, kind="scatter", s=8, alpha=0.4, height=2.8,
                facet_kws={"sharex": False, "sharey": False})
for ax, (name, d) in zip(g.axes.flat, points.groupby("slice", sort=False)):
    ax.set_xlabel(d["axis"].iloc[0])
    if d["axis"].iloc[0].startswith("summed"):
        xs = np.linspace(0, max(200.0, float(d["x"].max())), 50)
        ax.plot(xs, baseline_slowdown(xs), "k--", lw=1)
save_figure(g.figure, "06-slowdowns-by-slice")
plt.show()

# %% [markdown]
# ## Scoring every predictor, held out by model group
#
# One run per slice: fixed reference jobs chosen from solo features only (below), cells of model groups, every
# predictor and adaptation at each `k`. The solo-baseline check runs on the same rows: sharing a GPU cannot
# speed a job up, so a job whose mean log slowdown over its co-runs lies below 0 by more than two standard errors
# of the self-pair noise was measured against a wrong solo baseline; it is flagged.

# %%
started = time.perf_counter()
results = [study.run_slice(s, n_folds=n_folds, seed=seed, ks=range(max_k + 1))
           for s in progress_bar(iterable=slices, desc="slices", leave=False)]
print(f"{len(results)} slices scored in {time.perf_counter() - started:.0f} s")
priors = {s.name: s.prior for s in slices}
write_metrics(COLOCATION_METRICS, {k: v for r in results for k, v in study.slice_metrics(r).items()})
flags = pd.concat([r.flags.assign(slice=r.name) for r in results], ignore_index=True)
flags[flags["flagged"]].round(3)

# %% [markdown]
# ### Lucid's pairs from a predictor never trained on Lucid
# The out-of-fold utilization above comes from notebook 03's grouped folds over every source: a Lucid job is predicted
# by estimators that trained on Lucid's other jobs. The input-pipeline issue's goal asks it of the default,
# licence-clean predictor: the step estimator fitted on this project's runs alone, each Lucid job predicted with its
# documented input pipeline under Lucid's launch-blocking protocol (`gpupred.step.evaluate.source_heldout`, as
# notebook 03-physics-first's held-out section). Summed predicted utilization with those answers, scored as above,
# is `sum_util_heldout`.

# %%
lucid_heldout: dict[str, float] = {}
if features is not None and (dataset["source"] == "lucid").any():
    from gpupred.colocation.members import with_utilization
    from gpupred.step.evaluate import source_heldout

    held_features = predicted_features(dataset, with_utilization(oof, source_heldout(dataset, "lucid", seed=seed)))
    for s in study.lucid_slices(table, solo, held_features):
        lucid_heldout.update(study.heldout_metrics(study.run_slice(s, n_folds=n_folds, seed=seed, ks=[0])))
    write_metrics(COLOCATION_METRICS, lucid_heldout)
pd.Series(lucid_heldout, dtype=float).round(3) if lucid_heldout else "no Lucid pairs with graphs here"

# %% [markdown]
# ## What a predictor serves
#
# The slowdown a predictor answers (`Predictor.slowdown`, `gpupred colocate`) is the adaptation prior of the slice of
# graph jobs (this project's own pairs once measured, else Lucid's non-RL ones): it has no parameter, so both artifacts
# ship it untrained, with the central `interval_level` quantiles of its held-out log(measured / predicted) as its
# interval, and the adaptation variances that shrink a user's reference co-runs. The learned correction would ship
# only where it was kept in every cell and ranked better pooled. Written to `data/processed/slowdown_choice.json`
# (`gpupred.colocation.served`), which notebook 08 puts in the cards.

# %%
from gpupred.colocation.served import slowdown_choice, write_slowdown_choice  # noqa: E402

shipped = slowdown_choice(results, slices, level=interval_level) if features is not None else None
if shipped is None:
    print("no slice of graph jobs with utilization: no slowdown choice written (predictors serve the prior without "
          "an interval)")
else:
    write_slowdown_choice(shipped, dataset)
    display(pd.DataFrame({"estimator": shipped["estimator"]["name"], "scored on": shipped["label"],
                          **shipped["heldout"], "interval log low": shipped["interval"]["log_low"],
                          "interval log high": shipped["interval"]["log_high"],
                          "coverage (width from other cells)": shipped["interval"]["coverage_cross_cell"],
                          "correction kept in cells": f"{shipped['correction']['kept_cells']} of "
                                                      f"{shipped['correction']['cells']}"}, index=[0]).T.round(3))

# %% [markdown]
# The scoring table: every predictor on every slice, on all held-out rows, and without the rows of flagged jobs.
# Calibration is shown at `k` = 3 here and at every `k` below.

# %%
scores = closing.scores_table(results)
scores_unflagged = closing.scores_table(results, rows_kept="unflagged")
display(scores.drop(columns="predictor").round(3))
scores_unflagged.drop(columns="predictor").round(3)

# %%
save_figure(closing.plot_scores(scores), "06-scoring-table")
plt.show()

# %% [markdown]
# ## Does the correction beat its prior, cell by cell?
#
# Each cell's correction was kept only where its inner cross-validation (over that cell's training model groups)
# ranked better than the prior in every inner fold of three differently dealt splits (choosing the best of three
# candidates on one split is optimistic: it kept corrections that then lost); otherwise the cell returns the prior
# itself. Below: what each cell kept, and in how many cells the result is worse or better than the prior on held-out
# pairs, and worse beyond noise (a gap below -1.96 bootstrap standard errors, the cell's pairs resampled).
# Calibration with `k` = 0 *is* the prior (no co-run, the job's effects are shrunk all the way), so it is never worse.

# %%
comparison = pd.DataFrame([{"slice": r.name, "prior": priors[r.name], **closing.cell_comparison(r, "corrected", priors[r.name]),
                            "kept_correction": int((r.chosen != "prior").sum()), "fitted_cells": len(r.chosen),
                            "kept_kinds": ", ".join(sorted(set(r.chosen) - {"prior"}))} for r in results])
comparison.round(3)

# %% [markdown]
# ## Calibration from `k` reference co-runs
#
# The reference jobs of each slice, in the order adaptation takes them (the first `k` for `k` co-runs): the
# medoid of the jobs' standardized solo features, then each time the job farthest from those chosen, among jobs
# co-run with at least 90 % of the others (which pairs exist is known before any slowdown is read). Then the
# curve: the adapted model's held-out Spearman and MAE against `k`, beside the slice's prior and summed
# utilization on the same rows.

# %%
ref_features = {s.name: s.ref_features for s in slices}
closing.references_table(results, ref_features).round(3)

# %%
curve = closing.adaptation_curve(results)
fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
for ax, metric in zip(axes, ("spearman_pooled", "spearman_cell", "mae")):
    sns.lineplot(data=curve, x="k", y=metric, hue="slice", marker="o", ax=ax, legend=ax is axes[0])
    ax.set_xlabel("reference co-runs per held-out job (k)")
axes[0].legend(fontsize=7)
fig.tight_layout()
save_figure(fig, "06-adaptation-curve")
plt.show()
curve.pivot(index="k", columns="slice", values="spearman_pooled").round(3)

# %% [markdown]
# ## The ceiling of the additive form
#
# Calibration fits each job's two effects on top of the prior; an additive model on job *identities*,
# `log s_ab = c + sensitivity_a + aggressiveness_b`, fitted and scored on every pair of a slice
# (`colocation.job_effects`), bounds what it can reach as its co-runs grow. A diagnostic over all pairs: it feeds
# no held-out figure.

# %%
ceiling = {}
for s in slices:
    _, ceiling[s.name] = job_effects(s.X)
ceiling = pd.DataFrame(ceiling).T
write_metrics(COLOCATION_METRICS, {f"slowdown_additive_ceiling_{k}_{name}": float(v) for name, row in ceiling.iterrows()
                for k, v in row.items() if k in ("r2", "spearman")})
ceiling.round(3)

# %% [markdown]
# ## Does a pair fit in memory together?
#
# Each member's memory is lognormal around its out-of-fold point prediction with the spread of its interval
# (`gpupred.colocation.memfit`); the pair's sum is approximated by one lognormal, which gives the probability
# that the pair runs out of memory and a 95 % quantile of its memory. A scheduler places a pair only when that
# probability is at most `max_oom_risk`. Checked against the pairs' measured memory (both CUDA contexts
# included) and their measured out-of-memory failures. Gavel records no memory: its failed pairs are the
# business of notebook 07's failure rule.

# %%
from gpupred.hardware import gpu_spec  # noqa: E402

fit_frames = []
for gpu, idx in (table.groupby("gpu_name").groups.items() if features is not None else []):
    t_gpu = table.loc[idx].reset_index(drop=True)
    m_gpu = align(t_gpu, features)
    try:
        capacity = float(gpu_spec(str(gpu)).memory_gb) * 1024.0
    except Exception:  # a fixture GPU name: the largest pair sum seen stands in for the capacity
        capacity = float(t_gpu["sum_mem_mib"].max())
    usable = (m_gpu["mem_mib"].notna() & m_gpu["mem_mib_high"].notna()).groupby(t_gpu["group_id"]).transform("all")
    fit = group_memory_fit(t_gpu[usable.to_numpy()].reset_index(drop=True),
                           m_gpu[usable.to_numpy()].reset_index(drop=True), capacity, level=interval_level,
                           max_risk=max_oom_risk)
    fit_frames.append(fit.assign(gpu_name=gpu, capacity_mib=capacity))
memfit = pd.concat(fit_frames, ignore_index=True) if fit_frames else pd.DataFrame()
if len(memfit):
    measured_mem = memfit["measured_mib"].notna()
    mem_metrics = {
        "memfit_pairs": int(len(memfit)), "memfit_placed_frac": float(memfit["place"].mean()),
        "memfit_q95_coverage": float((memfit.loc[measured_mem, "measured_mib"] <= memfit.loc[measured_mem, "q95_mib"]).mean())
        if measured_mem.any() else float("nan"),
        "memfit_failed_pairs": int(memfit["failed"].sum()),
        "memfit_failed_pairs_placed": int((memfit["failed"] & memfit["place"]).sum()),
        "memfit_point_fits_but_refused": int(((memfit["point_sum_mib"] <= memfit["capacity_mib"]) & ~memfit["place"]).sum()),
    }
    write_metrics(COLOCATION_METRICS, mem_metrics)
    display(Markdown(f"The measured pair memory stayed under the predicted 95 % quantile for "
                     f"{mem_metrics['memfit_q95_coverage']:.1%} of {mem_metrics['memfit_pairs']} pairs; "
                     f"{mem_metrics['memfit_failed_pairs_placed']} of {mem_metrics['memfit_failed_pairs']} measured "
                     f"out-of-memory pairs would have been placed at risk <= {max_oom_risk}."))
    display(memfit.groupby("gpu_name")[["point_sum_mib", "q95_mib", "p_oom", "measured_mib"]].describe().T.round(2))
else:
    print("no pair with predicted memory: memory-fit check skipped")

# %% [markdown]
# ## Closing note
#
# The scoring table per slice (pooled, per cell, within job, MAE), the adaptation curve for `k` = 0..5, the
# cells where the correction lost to its prior, and the goals: `k` = 3 adaptation at least 0.10 above
# summed utilization (the better of predicted and measured) pooled and per cell on Lucid non-RL, and 0.25 above
# its prior on Gavel V100. Rendered from this run's results.

# %%
goals = closing.goal_checks(results, priors)
write_metrics(COLOCATION_METRICS, goals)
display(Markdown(closing.closing_markdown(results, goals, priors)))
