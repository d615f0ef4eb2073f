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
# # 06 — Co-location: slowdown against summed utilization, and a learned slowdown model
#
# Each co-located job's slowdown is its co-located mean iteration time over its solo mean iteration time
# (same workload, same GPU kind). The HotCloud'20 figure plots it against the pair's summed solo GPU
# utilization; the additive baseline says `max(1, summed util / 100)`. The learned model predicts each
# job's slowdown from all members' solo features *as the predictor gives them before running*, and is
# scored on groups whose workloads were held out of training.

# %% tags=["parameters"]
predictions_path: str = ""  # parquet of per-workload predictor outputs (e.g. out-of-fold); "" = the exported predictor
n_splits: int = 3  # workload folds for the held-out evaluation
seed: int = 0  # fold assignment and model seed

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from gpupred import colocation, config
from gpupred.pipeline import MissingInput
from gpupred.profile.schema import read_runs
from gpupred.reports import save_figure, update_metrics

runs = colocation.refuse_simulated(read_runs(config.RAW))
if not (runs["group_size"] > 1).any():
    raise MissingInput(f"no co-located runs under {config.RAW}; run a co-location sweep first")
table, solo = colocation.load_colocation(config.RAW)
config.COLOCATION.parent.mkdir(parents=True, exist_ok=True)
table.to_parquet(config.COLOCATION, index=False)
measured = table[np.isfinite(table["slowdown"].astype(float))]
print(f"{table['group_id'].nunique()} co-located groups, {len(measured)} jobs with a measured slowdown, "
      f"GPU kinds: {sorted(table['gpu_name'].unique())}")

# %% [markdown]
# ## Normalized JCT against summed solo GPU utilization (HotCloud'20, Fig. 1)

# %%
x = np.linspace(0, max(200.0, float(measured["sum_util"].max()) + 10), 50)
g = sns.relplot(data=measured, x="sum_util", y="slowdown", hue="precision", col="gpu_name", kind="scatter",
                height=3.5, aspect=1.2, alpha=0.7)
for ax in g.axes.flat:
    ax.plot(x, colocation.baseline_slowdown(x), "k--", lw=1, label="max(1, sum/100)")
    ax.set_xlabel("summed solo GPU utilization (%)")
    ax.set_ylabel("normalized JCT (co-located / solo)")
g.axes.flat[0].legend(loc="upper left")
save_figure(g.figure, "06-slowdown-vs-summed-util")

# %%
failed = colocation.failed_groups(table)
print(f"{len(failed)} groups failed together (every member oom/error)")
failed.head(20)

# %% [markdown]
# ## The slowdown model against the baseline, on held-out workloads

# %%
from gpupred.predictor import dataset_predictions

dataset, predictions = dataset_predictions(predictions_path)
features = colocation.predicted_features(dataset, predictions)
metrics, heldout = colocation.evaluate_heldout(table, features, n_splits=n_splits, seed=seed)
update_metrics(metrics)
pd.Series(metrics)

# %%
long = heldout.melt(id_vars=["slowdown", "gpu_name"], value_vars=["predicted", "baseline"], var_name="method",
                    value_name="estimate")
g = sns.relplot(data=long, x="slowdown", y="estimate", col="method", hue="gpu_name", height=3.5, alpha=0.7)
for ax in g.axes.flat:
    lim = [1.0, float(max(long["slowdown"].max(), long["estimate"].max())) * 1.05]
    ax.plot(lim, lim, "k:", lw=1)
    ax.set_xlabel("measured slowdown")
g.figure.suptitle("held-out workloads: learned model vs additive baseline", y=1.03)
save_figure(g.figure, "06-slowdown-model-vs-baseline")
plt.show()

# %% [markdown]
# The learned model uses predicted (not measured) solo features; the baseline is given the *measured*
# summed utilization, which favours it. Spearman is over jobs of held-out groups pooled across folds.
