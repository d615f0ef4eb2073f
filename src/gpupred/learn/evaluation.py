"""What every evaluation shares: the splits estimators and regressors are scored under (grouped random,
leave-one-family-out, cross-GPU) and the metric functions their figures are computed with (RMSLE, median relative
and absolute error, interval coverage, Spearman). Each estimator's ``evaluate`` module computes its figures with
these and declares their keys (``*_METRIC_KEYS``); the notebooks' metrics contracts are assembled from those keys
(:mod:`gpupred.contracts`).

Every split keeps a workload's runs together (on any GPU, from any source): ``grouped_random`` deals whole
workloads to folds, ``lofo`` holds out whole sibling groups of families (:data:`~gpupred.learn.folds.SIBLINGS`:
lstm/gru, the Transformers, the ResNets with their CIFAR variant, ...), ``cross_gpu`` trains on one GPU kind and tests
on another, dropping from the training side every workload that is also in the test side. RMSLE is
computed on percent utilization (and MiB): ``sqrt(mean((log1p(pred) - log1p(true))^2))``.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.learn.folds import sibling_group

Split = tuple[np.ndarray, np.ndarray, str]


def rmsle(y_true: Any, y_pred: Any) -> float:
    """Root mean squared log error: sqrt(mean((log1p(pred) - log1p(true))²)), predictions floored at 0."""
    t = np.log1p(np.clip(np.asarray(y_true, dtype=float), 0, None))
    p = np.log1p(np.clip(np.asarray(y_pred, dtype=float), 0, None))
    return float(np.sqrt(np.mean((p - t) ** 2)))


def median_rel_error(y_true: Any, y_pred: Any) -> float:
    """Median of |pred / true - 1| over the pairs where it is defined (NaN when none is)."""
    rel = np.abs(np.asarray(y_pred, dtype=float) / np.asarray(y_true, dtype=float) - 1.0)
    return float(np.nanmedian(rel)) if np.isfinite(rel).any() else float("nan")


def median_abs_error(y_true: Any, y_pred: Any) -> float:
    """Median of |pred - true| (in the target's units: utilization points, say)."""
    return float(np.median(np.abs(np.asarray(y_pred, dtype=float) - np.asarray(y_true, dtype=float))))


def interval_coverage(y_true: Any, low: Any, high: Any) -> float:
    """The share of ``y_true`` inside [low, high]."""
    y = np.asarray(y_true, dtype=float)
    return float(((y >= np.asarray(low, dtype=float)) & (y <= np.asarray(high, dtype=float))).mean())


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``, ties sharing their average (scipy's ``rankdata(x)``, the same floats: every rank is a
    whole or half number) without scipy's per-call dispatch, which was most of a Spearman on a few dozen pairs (06's
    study computes 47,000 of them)."""
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, len(x)])
    ranks = np.empty(len(x), dtype=float)
    ranks[order] = np.repeat(starts + (counts + 1) / 2.0, counts)
    return ranks


def spearman(a: Any, b: Any) -> float:
    """Spearman of finite pairs (Pearson of average ranks); NaN with fewer than 3 or a constant side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return float("nan")
    return float(np.corrcoef(average_ranks(a[ok]), average_ranks(b[ok]))[0, 1])


SCHEMES: tuple[str, ...] = ("grouped_random", "lofo", "cross_gpu")


def check_grouped(splits: list[Split], groups: Iterable[str]) -> list[Split]:
    """Raise if any group has rows on both sides of a split (a workload straddling train and test)."""
    g = np.asarray(list(groups))
    for train, test, label in splits:
        both = set(g[train]) & set(g[test])
        if both:
            raise GpupredError(f"split {label}: {len(both)} groups on both sides, e.g. {sorted(both)[0]!r}")
    return splits


def grouped_random_splits(groups: Iterable[str], n_splits: int = 5, seed: int = 0,
                          strata: Iterable[str] | None = None) -> list[Split]:
    """K folds over whole groups (workloads), each group's rows on one side; groups dealt to folds at random.

    With ``strata`` (e.g. the source), groups of each stratum are shuffled and dealt round-robin so every
    fold holds about 1/K of every stratum: per-source figures then come from every fold.
    """
    g = np.asarray(list(groups)).astype(str)
    strat = np.asarray(list(strata)).astype(str) if strata is not None else np.full(len(g), "")
    first = pd.DataFrame({"group": g, "stratum": strat}).drop_duplicates("group")  # a group's stratum: its first row's
    unique = sorted(set(g))
    k = min(n_splits, len(unique))
    if k < 2:
        raise GpupredError(f"only {len(unique)} distinct workloads: too few for grouped splits")
    rng = np.random.default_rng(seed)
    fold_of: dict[str, int] = {}
    offset = 0
    for _, part in first.sort_values("group").groupby("stratum", sort=True):
        names = part["group"].to_numpy()[rng.permutation(len(part))]
        for i, name in enumerate(names):
            fold_of[name] = (offset + i) % k
        offset += len(names)
    fold = np.array([fold_of[x] for x in g])
    return [(np.flatnonzero(fold != f), np.flatnonzero(fold == f), f"fold{f}") for f in range(k)]


def lofo_splits(families: Iterable[str], siblings: bool = True) -> list[Split]:
    """One split per family group: train on all others, test on it (unseen architectures).

    With ``siblings`` (the default) sibling families (:data:`~gpupred.learn.folds.SIBLINGS`) form one group, held out
    together.
    """
    fam = np.asarray([sibling_group(f) if siblings else f for f in families])
    return [(np.flatnonzero(fam != f), np.flatnonzero(fam == f), str(f)) for f in sorted(set(fam))]


def cross_gpu_splits(gpus: Iterable[str], workloads: Iterable[str] | None = None) -> list[Split]:
    """One split per ordered pair of GPU kinds: train on one, predict the other; empty with one kind.

    With ``workloads``, training rows of workloads that are also measured on the test GPU are dropped, so
    the test GPU's workloads are unseen too.
    """
    g = np.asarray(list(gpus))
    w = np.asarray(list(workloads)) if workloads is not None else None
    kinds = sorted(set(g))
    out = []
    for a in kinds:
        for b in kinds:
            if a == b:
                continue
            train, test = np.flatnonzero(g == a), np.flatnonzero(g == b)
            if w is not None:
                train = train[~np.isin(w[train], w[test])]
            if len(train):
                out.append((train, test, f"{a}->{b}"))
    return out


def fold_groups(df: pd.DataFrame, scheme: str) -> np.ndarray:
    """The groups a scheme keeps together: workloads, or sibling family groups under ``lofo``."""
    if scheme == "lofo":
        return np.asarray([sibling_group(f) for f in df["family"]])
    return df["workload_id"].astype(str).to_numpy()


def splits_for(df: pd.DataFrame, scheme: str, n_folds: int = 5, seed: int = 0) -> list[Split]:
    """The splits of one scheme over a dataset frame, each checked to keep a workload's runs on one side.

    ``grouped_random``: ``n_folds``-fold grouped K-fold (at least 2 folds), stratified by source;
    ``lofo``: one split per sibling family group; ``cross_gpu``: one per ordered pair of GPU kinds.
    """
    workloads = df["workload_id"].astype(str).to_numpy()
    if scheme == "grouped_random":
        strata = df["source"] if "source" in df.columns else None
        splits = grouped_random_splits(workloads, max(2, n_folds), seed, strata)
    elif scheme == "lofo":
        splits = lofo_splits(df["family"])
    elif scheme == "cross_gpu":
        splits = cross_gpu_splits(df["gpu"], workloads)
    else:
        raise GpupredError(f"unknown split scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    return check_grouped(splits, workloads)


def constant_baseline(y_train: np.ndarray, n_test: int, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(point, low, high) of the constant baseline for ``n_test`` rows: the training rows' mean of log1p(label), and
    their ``alpha/2`` and ``1 - alpha/2`` quantiles. Sees the training labels only."""
    z = np.log1p(np.asarray(y_train, dtype=float))
    q = np.expm1(np.quantile(z, [alpha / 2, 1 - alpha / 2]))
    return np.full(n_test, np.expm1(z.mean())), np.full(n_test, q[0]), np.full(n_test, q[1])
