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
# # 04 · What drives utilization
# Impurity importance averaged over the tree models (as Horus did), permutation importance on a
# held-out split, and SHAP (beeswarm, then dependence plots of the top features).

# %% tags=["parameters"]
target: str = "gpu_util"  # label to explain
tree_models: list = ["decision_tree", "random_forest", "extra_trees", "gradient_boosting", "xgboost", "lightgbm"]  # averaged
explain_model: str = "xgboost"  # model for permutation importance and SHAP
n_permutations: int = 10  # permutation repeats
top: int = 3  # dependence plots for this many top features

# %%
import matplotlib.pyplot as plt
import shap

from gpupred import dataset, reports
from gpupred.learn import importance

df = dataset.load_dataset()  # MissingInput until real runs are collected and notebook 02 has run

# %%
imp = importance.impurity_importance(df, target, models=tree_models)
reports.save_figure(importance.plot_importance(imp, title=f"{target}: impurity importance (mean of tree models)"), f"04-impurity-{target}")
imp.head(15).round(3)

# %%
perm = importance.permutation(df, target, model=explain_model, n_repeats=n_permutations)
reports.save_figure(importance.plot_importance(perm, title=f"{target}: permutation importance ({explain_model})"), f"04-permutation-{target}")
perm.head(15).round(4)

# %%
explanation = importance.shap_explanation(df, target, model=explain_model)
shap.plots.beeswarm(explanation, max_display=15, show=False)
reports.save_figure(plt.gcf(), f"04-shap-beeswarm-{target}")
plt.show()

# %%
for feature in perm.index[:top]:
    shap.plots.scatter(explanation[:, feature], color=explanation, show=False)
    reports.save_figure(plt.gcf(), f"04-shap-dependence-{target}-{feature}")
    plt.show()

# %% [markdown]
# SHAP values are on the model's log1p(target) scale, and feature values on its signed-log scale.
# Agreement between the three rankings is what to look for; where they differ, permutation
# importance (held-out, model-agnostic) is the one to trust.
