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
# # 05 · GPU memory: Horus's formula, an analytical estimate, and a learned residual
# Relative error |estimate − measured| / measured of each method, out of sample, under random and
# leave-one-family-out splits. Goal: median ≤ 5 %, p90 ≤ 15 %.

# %% tags=["parameters"]
n_repeats: int = 5  # random 80/20 repeats
headline_scheme: str = "lofo"  # split whose figures go to metrics.json

# %%
import matplotlib.pyplot as plt

from gpupred import dataset, memory, reports

df = dataset.load_dataset()  # MissingInput until real runs are collected and notebook 02 has run
errors = memory.evaluate_memory(df, n_repeats=n_repeats)
table = memory.summarize_memory(errors)
table.round(3)

# %%
fig = memory.plot_memory(errors)
reports.save_figure(fig, "05-memory-rel-err")
plt.show()

# %%
metrics = {
    "memory_median_rel_err": table.loc["analytical+residual", ("median", headline_scheme)],
    "memory_p90_rel_err": table.loc["analytical+residual", ("p90", headline_scheme)],
}
for method in memory.METHODS:
    for scheme in table.columns.get_level_values(1).unique():
        key = method.replace("+", "_plus_")
        metrics[f"memory_{key}_{scheme}_median_rel_err"] = table.loc[method, ("median", scheme)]
        metrics[f"memory_{key}_{scheme}_p90_rel_err"] = table.loc[method, ("p90", scheme)]
reports.update_metrics(metrics)
metrics

# %% [markdown]
# Horus counts weights and forward feature maps only; gradients, optimizer state and the CUDA
# context are what it misses. The analytical estimate adds them, with the context/allocator
# overhead taken from the data per GPU; the learned residual corrects what remains.
