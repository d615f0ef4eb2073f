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
# # 03 · Compare regressors
# Eleven regressors, each with a small tuning grid, predict steady-state GPU utilization (and memory,
# SM activity) from graph + GPU features on log1p targets. They are scored by RMSLE (also MAE, R²)
# under repeated random 80/20 splits (the papers' protocol), leave-one-family-out (unseen
# architectures: the honest test) and, where two GPU kinds were measured, train-on-one/predict-the-other.

# %% tags=["parameters"]
targets: list = ["gpu_util", "memory_mib", "sm_active"]  # labels to model (skipped when not recorded)
models: list | None = None  # regressor names; None = all of gpupred.learn.REGRESSORS
n_repeats: int = 5  # random 80/20 repeats
tune: bool = True  # small grid search inside each fit
n_jobs: int = 2  # parallel fits (2 cores is enough)

# %%
import matplotlib

import gpupred.learn as learn
from gpupred import dataset, reports
from gpupred.learn.evaluate import choose_model, plot_results

df = dataset.load_dataset()  # MissingInput until real runs are collected and notebook 02 has run
info = dataset.summarize(df)
info

# %%
results = {}
for target in targets:
    if df[target].notna().sum() < 10:
        print(f"{target}: fewer than 10 labelled runs, skipped")
        continue
    results[target] = learn.evaluate(df, target, models=models or learn.REGRESSORS, n_repeats=n_repeats, tune=tune, n_jobs=n_jobs)
    display(learn.summarize(results[target]).round(3))

# %%
for target, res in results.items():
    fig = plot_results(res, title=f"{target}: RMSLE by model and split")
    reports.save_figure(fig, f"03-rmsle-{target}")
    matplotlib.pyplot.show()

# %% [markdown]
# The model is chosen by the lowest mean leave-one-family-out RMSLE: the random split flatters
# models that memorize near-duplicate batch sizes of an architecture already seen in training.

# %%
util = results["gpu_util"]
best = choose_model(util, "lofo")
by = util[util["model"] == best].groupby("scheme")["rmsle"].mean()
metrics = {**info, "util_best_model": best, "util_rmsle_random": by.get("random"), "util_rmsle_lofo": by.get("lofo")}
if "cross_gpu" in by:
    metrics["util_rmsle_cross_gpu"] = by["cross_gpu"]
for target, res in results.items():
    if target != "gpu_util":
        b = choose_model(res, "lofo")
        m = res[res["model"] == b].groupby("scheme")["rmsle"].mean()
        metrics.update({f"{target}_best_model": b, f"{target}_rmsle_random": m.get("random"), f"{target}_rmsle_lofo": m.get("lofo")})
reports.update_metrics(metrics)
metrics
