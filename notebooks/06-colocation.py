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
# # 06 — Co-location: measured slowdowns, a learned slowdown model, and two additive baselines
#
# A co-located job's slowdown is 1 / its normalized co-located speed (co-located over solo iteration
# time). The pairs are *measured*: this project's own co-located sweeps (`data/raw`) and Lucid's 1,388
# published RTX 3090 pairs (`gpupred.importers.lucid`), whichever are there; pairs with a failed member
# are left out. Each member's features are the **out-of-fold** predictions of its solo utilization and
# memory (notebook 03 wrote them; the member's workload was in none of the folds that predicted it) plus
# its graph features. The model is **cross-fitted**: every pair is predicted by a model trained on no
# pair that holds one of its workloads. The baselines are `max(1, Σ util / 100)` with the *predicted*
# utilizations (what a scheduler would have) and with the *measured* solo utilizations (an oracle).

# %% tags=["parameters"]
n_folds: int = 5  # workload folds for cross-fitting (cell (a, b) trains on pairs touching neither fold)
seed: int = 0  # fold assignment and model seed
lucid: bool = True  # include the published Lucid pairs when gpupred.importers.lucid has imported them

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from gpupred import colocation, config
from gpupred.dataset import load_dataset
from gpupred.learn.oof import read_oof_predictions
from gpupred.reports import save_figure, update_metrics

table, solo, notes = colocation.load_pair_sources(config.RAW, lucid=lucid)  # MissingInput when no source has pairs
for note in notes:
    print("note:", note)
dataset = load_dataset()  # every row, as notebook 03 predicted them; MissingInput until the dataset is built
oof = read_oof_predictions(dataset)  # refuses predictions computed from another dataset (stale)
features = colocation.predicted_features(dataset, oof)
measured = table[np.isfinite(table["slowdown"].astype(float))]
colocation.source_summary(table)

# %% [markdown]
# ## Slowdown against summed measured solo utilization (HotCloud'20, Fig. 1)
#
# Each point is one member of a measured pair; the dashed line is the additive rule. Points below 1 are
# pairs that ran as fast as alone within measurement noise (Lucid reports normalized speeds slightly
# above 1). How far the cloud sits from the line, and how wide it is at a given sum, is what the
# additive rule cannot express.

# %%
x = np.linspace(0, max(200.0, float(measured["sum_util"].max()) + 10), 50)
g = sns.relplot(data=measured, x="sum_util", y="slowdown", hue="precision", col="source", kind="scatter",
                height=3.5, aspect=1.2, alpha=0.5, s=12)
for ax in g.axes.flat:
    ax.plot(x, colocation.baseline_slowdown(x), "k--", lw=1, label="max(1, sum/100)")
    ax.set_xlabel("summed measured solo GPU utilization (%)")
    ax.set_ylabel("slowdown (co-located / solo)")
g.axes.flat[0].legend(loc="upper left")
save_figure(g.figure, "06-slowdown-vs-summed-util")

# %%
failed = colocation.failed_groups(table)
print(f"{len(failed)} groups with a failed member (left out of every evaluation)")
failed.head(20)

# %% [markdown]
# ## The cross-fitted model against both baselines, on held-out workloads
#
# Held out by workload: no workload of a predicted pair is in any pair its model trained on. The second
# evaluation holds out whole model groups (e.g. every batch size and precision of ResNet-18 at once), a
# stricter test of unseen architectures. Members without an out-of-fold prediction (a Lucid job not
# rebuilt as a gpupred workload) leave their pair out; the count is reported.

# %%
member = colocation.align(table, features)
metrics, heldout = colocation.evaluate_heldout(table, member, unit="workload_id", n_folds=n_folds, seed=seed)
strict, _ = colocation.evaluate_heldout(table, member, unit="model_group", n_folds=n_folds, seed=seed, suffix="_by_model")
update_metrics({**metrics, **strict})
pd.DataFrame({
    "spearman": [metrics["slowdown_spearman_heldout"], metrics["slowdown_spearman_heldout_baseline_predicted"],
                 metrics["slowdown_spearman_heldout_baseline_measured"]],
    "mae": [metrics["slowdown_mae_heldout"], metrics["slowdown_mae_heldout_baseline_predicted"],
            metrics["slowdown_mae_heldout_baseline_measured"]],
    "spearman_by_model": [strict["slowdown_spearman_heldout_by_model"],
                          strict["slowdown_spearman_heldout_baseline_predicted_by_model"],
                          strict["slowdown_spearman_heldout_baseline_measured_by_model"]],
}, index=["cross-fitted model", "baseline, predicted util", "baseline, measured util"]).round(3)

# %%
print(f"{metrics['slowdown_heldout_pairs']} held-out pairs ({metrics['slowdown_heldout_jobs']} members); "
      f"{metrics['slowdown_excluded_jobs']} members left out (failed, unmeasured or without a prediction)")
colocation.heldout_by_source(heldout).round(3)

# %% [markdown]
# Measured against estimated slowdown for the model and both baselines (the dotted line is equality).
# The baselines are flat at 1 wherever the summed utilization stays under 100 %; the model's estimates
# spread along the measured axis only as far as its inputs let it.

# %%
long = heldout.melt(id_vars=["slowdown", "source"], value_vars=["predicted", "baseline_predicted", "baseline_measured"],
                    var_name="method", value_name="estimate")
g = sns.relplot(data=long, x="slowdown", y="estimate", col="method", hue="source", height=3.3, alpha=0.4, s=10)
lim = [float(min(long["slowdown"].min(), 1.0)) * 0.95, float(max(long["slowdown"].max(), long["estimate"].max())) * 1.05]
for ax in g.axes.flat:
    ax.plot(lim, lim, "k:", lw=1)
    ax.set_xlabel("measured slowdown")
g.figure.suptitle("held-out workloads: cross-fitted model vs additive baselines", y=1.03)
save_figure(g.figure, "06-slowdown-model-vs-baselines")
plt.show()
