"""Feature importance: impurity (averaged over tree models, as Horus did), permutation, and SHAP."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from gpupred.learn.regressors import TREE_MODELS, make_regressor
from gpupred.reports import MetricsSchema


def _xy(df: pd.DataFrame, target: str) -> tuple[pd.DataFrame, np.ndarray]:
    from gpupred.dataset import feature_columns

    data = df[df[target].notna()]
    return data[feature_columns(data)].astype(float), np.log1p(data[target].to_numpy(float))


def _final(model: Any) -> Any:
    """The last step of a (grid-searched) pipeline."""
    model = getattr(model, "best_estimator_", model)
    return model.steps[-1][1] if hasattr(model, "steps") else model


def impurity_importance(df: pd.DataFrame, target: str, models: Iterable[str] = TREE_MODELS, tune: bool = False,
                        seed: int = 0) -> pd.DataFrame:
    """Normalized impurity importance per tree model (columns) and their mean, features as rows, sorted."""
    X, z = _xy(df, target)
    cols = {}
    for name in models:
        imp = np.asarray(_final(make_regressor(name, tune=tune, seed=seed).fit(X.to_numpy(), z)).feature_importances_, float)
        cols[name] = imp / imp.sum() if imp.sum() > 0 else imp
    out = pd.DataFrame(cols, index=X.columns)
    out["mean"] = out.mean(axis=1)
    return out.sort_values("mean", ascending=False)


def permutation(df: pd.DataFrame, target: str, model: str = "lightgbm", n_repeats: int = 5, seed: int = 0,
                test_size: float = 0.2) -> pd.DataFrame:
    """Permutation importance (drop in R² on log1p target) on held-out workloads (a grouped split)."""
    from sklearn.inspection import permutation_importance
    from sklearn.model_selection import GroupShuffleSplit

    X, z = _xy(df, target)
    groups = df.loc[df[target].notna(), "workload_id"].astype(str).to_numpy()
    train, test = next(GroupShuffleSplit(1, test_size=test_size, random_state=seed).split(X, z, groups))
    fitted = make_regressor(model, tune=False, seed=seed).fit(X.to_numpy()[train], z[train])
    r = permutation_importance(fitted, X.to_numpy()[test], z[test], n_repeats=n_repeats, random_state=seed, n_jobs=1)
    return (pd.DataFrame({"mean": r.importances_mean, "std": r.importances_std}, index=X.columns)
            .sort_values("mean", ascending=False))


def _shap() -> Any:
    """The shap module, imported quietly: it imports tqdm.auto, which warns in a kernel without ipywidgets."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import shap
    return shap


def plot_shap_summary(explanation: Any, title: str, max_display: int = 15) -> Any:
    """SHAP's beeswarm summary of an explanation, alone on a new figure titled ``title`` (name the model and rows)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.38 * max_display + 1.6))
    _shap().plots.beeswarm(explanation, max_display=max_display, ax=ax, show=False, plot_size=None)
    ax.set_title(title)
    ax.set_xlabel("SHAP value (change in the model's log1p output)")
    fig.tight_layout()
    return fig


def plot_shap_dependence(explanation: Any, feature: str, title: str = "") -> Any:
    """SHAP's dependence scatter of one feature (coloured by its strongest interaction), alone on a new figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    _shap().plots.scatter(explanation[:, feature], color=explanation, ax=ax, show=False,
                          ylabel=f"SHAP value of {feature} (log1p output)")
    ax.set_xlabel(f"{feature} (signed log1p of the feature)")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def shap_explanation(df: pd.DataFrame, target: str, model: str = "lightgbm", seed: int = 0, max_rows: int = 500) -> Any:
    """A ``shap.Explanation`` of a tree model fitted on the whole dataset (features on the model's log scale)."""
    shap = _shap()

    from gpupred.learn.transform import signed_log1p

    X, z = _xy(df, target)
    fitted = make_regressor(model, tune=False, seed=seed).fit(X.to_numpy(), z)
    Xs = X.sample(min(max_rows, len(X)), random_state=seed)
    Xlog = pd.DataFrame(signed_log1p(Xs.to_numpy()), columns=X.columns, index=Xs.index)
    explanation = shap.TreeExplainer(_final(fitted))(Xlog)
    explanation.feature_names = list(X.columns)
    return explanation


def plot_importance(table: pd.DataFrame, column: str = "mean", top: int = 15, title: str = "",
                    xlabel: str = "importance") -> Any:
    """A horizontal bar chart of the ``top`` features of an importance table, alone on a new figure."""
    import matplotlib.pyplot as plt

    t = table[column].head(top)[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(t) + 1.2))
    ax.barh([str(i) for i in t.index], t.to_numpy(float), color="tab:blue")
    ax.set(title=title, xlabel=xlabel, ylabel="feature")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


EXPLAIN_METRICS = MetricsSchema("04-explain", (
    (r"\w+_top_features_permutation", "the five features whose permutation costs the most held-out accuracy"),
    (r"step_weighting_effect", "{target: {scheme: {tested: {weighting: error}}}} of the step estimator's correction"),
))
