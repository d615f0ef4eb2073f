"""Honest comparison of regressors: RMSLE, MAE and R² under random, leave-one-family-out and cross-GPU splits."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.metrics import mean_absolute_error, r2_score

from gpupred.errors import GpupredError
from gpupred.learn.regressors import REGRESSORS, make_regressor

Split = tuple[np.ndarray, np.ndarray, str]


def rmsle(y_true: Any, y_pred: Any) -> float:
    """Root mean squared log error: sqrt(mean((log1p(pred) - log1p(true))²)), predictions floored at 0."""
    t = np.log1p(np.clip(np.asarray(y_true, dtype=float), 0, None))
    p = np.log1p(np.clip(np.asarray(y_pred, dtype=float), 0, None))
    return float(np.sqrt(np.mean((p - t) ** 2)))


def random_splits(n: int, n_repeats: int = 5, test_size: float = 0.2, seed: int = 0) -> list[Split]:
    """``n_repeats`` random train/test splits of ``n`` rows (the papers' protocol)."""
    rng = np.random.default_rng(seed)
    n_test = max(1, int(round(n * test_size)))
    out = []
    for r in range(n_repeats):
        perm = rng.permutation(n)
        out.append((np.sort(perm[n_test:]), np.sort(perm[:n_test]), f"repeat{r}"))
    return out


def lofo_splits(families: Iterable[str]) -> list[Split]:
    """One split per family: train on all others, test on it (unseen architectures)."""
    fam = np.asarray(list(families))
    return [(np.flatnonzero(fam != f), np.flatnonzero(fam == f), str(f)) for f in sorted(set(fam))]


def cross_gpu_splits(gpus: Iterable[str]) -> list[Split]:
    """One split per ordered pair of GPU kinds: train on one, predict the other; empty with one kind."""
    g = np.asarray(list(gpus))
    kinds = sorted(set(g))
    return [(np.flatnonzero(g == a), np.flatnonzero(g == b), f"{a}->{b}") for a in kinds for b in kinds if a != b]


def splits_for(df: pd.DataFrame, scheme: str, n_repeats: int = 5, seed: int = 0) -> list[Split]:
    """The splits of one scheme ('random', 'lofo' or 'cross_gpu') over a dataset frame."""
    if scheme == "random":
        return random_splits(len(df), n_repeats, seed=seed)
    if scheme == "lofo":
        return lofo_splits(df["family"])
    if scheme == "cross_gpu":
        return cross_gpu_splits(df["gpu"])
    raise GpupredError(f"unknown split scheme {scheme!r}; known: random, lofo, cross_gpu")


def fit_log(model: Any, X: np.ndarray, y: np.ndarray) -> Any:
    """Fit a clone of ``model`` on log1p(y)."""
    return clone(model).fit(X, np.log1p(y))


def _score(name: str, model: Any, X: np.ndarray, y: np.ndarray, split: Split, scheme: str) -> dict[str, Any]:
    train, test, label = split
    fitted = fit_log(model, X[train], y[train])
    pred = np.clip(np.expm1(fitted.predict(X[test])), 0, None)
    r2 = r2_score(y[test], pred) if len(test) > 1 else np.nan
    return {"model": name, "scheme": scheme, "split": label, "n_train": len(train), "n_test": len(test),
            "rmsle": rmsle(y[test], pred), "mae": float(mean_absolute_error(y[test], pred)), "r2": float(r2)}


def evaluate(
    df: pd.DataFrame,
    target: str,
    models: Iterable[str] = REGRESSORS,
    schemes: Iterable[str] = ("random", "lofo", "cross_gpu"),
    n_repeats: int = 5,
    tune: bool = True,
    n_jobs: int = 2,
    seed: int = 0,
    features: list[str] | None = None,
) -> pd.DataFrame:
    """Score every model under every split scheme; one row per (model, split) with RMSLE, MAE, R²."""
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    from gpupred.dataset import feature_columns

    data = df[df[target].notna()].reset_index(drop=True)
    if len(data) < 5:
        raise GpupredError(f"only {len(data)} rows with label {target!r}: too few to evaluate")
    cols = features or feature_columns(data)
    X, y = data[cols].to_numpy(float), data[target].to_numpy(float)
    tasks = []
    for scheme in schemes:
        for split in splits_for(data, scheme, n_repeats, seed):
            for name in models:
                tasks.append((name, scheme, split))
    rows = Parallel(n_jobs=n_jobs, return_as="generator")(
        delayed(_score)(name, make_regressor(name, tune=tune, seed=seed), X, y, split, scheme) for name, scheme, split in tasks
    )
    out = [r for r in tqdm(rows, total=len(tasks), desc=f"evaluate {target}", leave=False)]
    return pd.DataFrame(out)


def summarize(results: pd.DataFrame, metric: str = "rmsle") -> pd.DataFrame:
    """Mean and standard deviation of a metric per model and scheme (a results table)."""
    table = results.groupby(["model", "scheme"])[metric].agg(["mean", "std", "count"]).unstack("scheme")
    table.columns = [f"{scheme}_{stat}" for stat, scheme in table.columns]
    order = [c for c in ("random_mean", "lofo_mean") if c in table.columns]
    return table.sort_values(order or list(table.columns[:1]))


def choose_model(results: pd.DataFrame, scheme: str = "lofo") -> str:
    """The model with the lowest mean RMSLE under ``scheme`` (falls back to 'random')."""
    use = scheme if scheme in set(results["scheme"]) else "random"
    return str(results[results["scheme"] == use].groupby("model")["rmsle"].mean().idxmin())


def plot_results(results: pd.DataFrame, metric: str = "rmsle", title: str = "") -> Any:
    """A point plot of a metric per model and scheme, with standard-deviation error bars."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    order = results[results["scheme"] == results["scheme"].iloc[0]].groupby("model")[metric].mean().sort_values().index
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(order) + 1.5))
    sns.pointplot(data=results, y="model", x=metric, hue="scheme", order=order, errorbar="sd", dodge=0.4,
                  linestyle="none", ax=ax)
    ax.set_xlabel(f"{metric.upper()} (mean ± sd over splits)")
    ax.set_title(title)
    fig.tight_layout()
    return fig
