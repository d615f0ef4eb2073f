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
# # 08 · Export the predictor
# Fits what notebook 03 chose and scored, on every row: the physics-first core (the step estimator with the
# parameters 03 declared, and the memory footprint model), which answers jobs given as graphs, and the baseline
# regressors 03 chose by a grouped inner cross-validation, which answer bare feature rows. It writes two artifacts,
# each with its card (the estimators, their held-out figures from notebook 03, training sources with their
# licences, data fingerprint, library versions, sha256):
#
# - `models/predictor.joblib`, the default: **this project's own measurements only**, MIT like the code,
#   so that users inside companies can use it;
# - `models/predictor-noncommercial.joblib`: the same recipe on every source. Trained on published data, it
#   inherits their licences: Lucid's S-Lab License 1.0 allows non-commercial use only (the card says so).
#
# A GPU in `gpupred.hardware` with no measurements in an artifact's data is still answered, marked
# *extrapolated*, with intervals widened by a held-out width (leave one GPU kind out, or leave one family out
# when the data hold a single kind; `gpupred.predictor.extrapolate`).

# %% tags=["parameters"]
model: str = ""  # baseline regressor for every target; "" = notebook 03's choice per target (data/processed/model_choice.json)
alpha: float = 0.1  # 1 - nominal interval coverage
n_folds: int = 5  # CV+ folds (grouped by workload)
tune: bool = False  # small grid search inside each fit
physics: bool = True  # fit the physics-first core (step model and footprint x corrections; needs every run's graph)

# %%
import pandas as pd

from gpupred import config, dataset, reports
from gpupred.learn.choice import read_choice
from gpupred.learn.oof import check_oof_step
from gpupred.predictor.card import licence_clean
from gpupred.predictor.loading import load_predictor
from gpupred.predictor.training import EXPORT_METRICS, export_predictor, train_predictor
from gpupred.step.estimator import StepEstimator
from gpupred.colocation.served import read_slowdown_choice
from gpupred.errors import GpupredError
from gpupred.predictor.slowdowns import attach_slowdown

everything = dataset.load_dataset()  # MissingInput until data is imported or collected and notebook 02 has run
own = licence_clean(everything)
choice = read_choice(everything)  # MissingInput until notebook 03 has run; refused if made from another dataset
models = {t: model for t in ("gpu_util", "memory_mib", "sm_active")} if model else choice["models"]
step = StepEstimator(**choice["step"])  # exactly the estimator notebook 03 scored
check_oof_step(choice["step"])  # and the one whose out-of-fold predictions 06 and 07 simulate with
try:  # what notebook 06 chose to serve, with its held-out figures; optional (06 skips without measured pairs)
    slowdown_choice = read_slowdown_choice(everything)
except GpupredError as err:  # absent or stale: the prior ships without an interval, and the cards say so
    slowdown_choice = None
    print(f"note: {err}")
print(f"step estimator: {step}; baseline regressors: {models}")
print(f"default artifact: {len(own)} own runs; non-commercial artifact: {len(everything)} runs")

# %%
cards = {}
for df, path, variant in ((own, config.PREDICTOR, "default"), (everything, config.PREDICTOR_NONCOMMERCIAL, "noncommercial")):
    if not len(df):
        print(f"{path.name}: no rows to train on; not exported")
        continue
    predictor = train_predictor(df, models=models, alpha=alpha, n_folds=n_folds, tune=tune, physics=physics, step=step)
    if slowdown_choice is not None and slowdown_choice["correction"]["ships"]:
        print(f"{path.name}: notebook 06 kept the correction in every cell, but serving it is not implemented: "
              "the prior ships")
    attach_slowdown(predictor, slowdown_choice, variant)  # the served slowdown estimator and its held-out interval
    figures = choice["heldout"].get(variant, {}) if physics else {}  # notebook 03's figures of the core shipped here
    cards[path.name] = load_predictor(export_predictor(predictor, df, path, heldout=figures)).card  # checks pass
pd.DataFrame({name: {k: v for k, v in entry.items() if k in ("n_runs", "gpus", "licence", "commit")}
              for card in cards.values() for name, entry in card["sources"].items()}).T

# %%
pd.DataFrame({name: {"variant": c["variant"], "measured GPUs": c["measured_gpus"],
                     "baseline own-fold RMSLE": c["baseline"]["own_folds"],
                     "usage restriction": c["usage_restriction"] or "none", "sha256": c["sha256"][:12]}
              for name, c in cards.items()}).T

# %% [markdown]
# A job given as a graph (an ONNX file, a workload id) is answered by the physics-first core: the step model's
# utilization and step time, with constants fitted per (GPU kind, protocol), times a learned correction; the
# analytic memory footprint times a bounded correction; iteration time and throughput besides. Its constants:

# %%
pd.DataFrame([{"artifact": name, **rec} for name, c in cards.items() if isinstance(c.get("core"), dict)
              for rec in c["core"]["step"]["constants"]])

# %% [markdown]
# Each card's `heldout` holds notebook 03's figures of the core it ships, per target, split and tested GPU kind:
# error (RMSLE for utilization and SM activity, median relative error for iteration time and memory) and the
# coverage of its 90 % intervals, for the default predictor from the comparison run on this project's runs alone
# (as it is trained), for the non-commercial one on every source; never a figure computed on the rows the exported
# model was fitted on. Its `baseline` section describes the regressors that answer bare feature rows, with
# `own_folds`, the RMSLE of their own workload-grouped CV+ folds (out of fold; the model class was chosen by
# notebook 03, so not a nested estimate). A new job is predicted as this project's own sweeps measure (NVML every
# 50 ms, a sync per step, device-resident batches). The default predictor's leave-one-family-out figures:

# %%
rows = [{"target": t, "scheme": sc, "tested": g, **e} for t, per in choice["heldout"].get("default", {}).items()
        for sc, tested in per.items() for g, e in tested.items()]
pd.DataFrame(rows).set_index(["target", "scheme", "tested"]).round(3) if rows else "no held-out figures (no core)"

# %% [markdown]
# Each card's `slowdown` says what `Predictor.slowdown` and `gpupred colocate` answer with: the zero-parameter
# time-sharing prior from the members' predicted utilization (trained on nothing, so the licence-clean artifact ships
# it too), where notebook 06 scored it, its held-out figures and the width of its interval there.

# %%
pd.DataFrame({name: {"estimator": c["slowdown"]["estimator"]["name"], "source": c["slowdown"]["source"],
                     "interval": c["slowdown"]["basis"]} for name, c in cards.items()}).T

# %%
default = cards.get(config.PREDICTOR.name, {})
reports.write_metrics(EXPORT_METRICS, {"predictor_sha256": default.get("sha256"), "predictor_models": models,
                        "predictor_usage_restriction": default.get("usage_restriction"),
                        "predictor_noncommercial_sha256": cards.get(config.PREDICTOR_NONCOMMERCIAL.name, {}).get("sha256")})
