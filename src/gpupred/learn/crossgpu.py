"""Does a predictor trained on one GPU kind carry to another? Cross-GPU figures against the within-GPU one.

For every test GPU kind ``b`` (the dataset's short ``gpu`` name) with enough workloads:

- **within b**: grouped random K-fold over ``b``'s own rows (train and test on ``b``, unseen workloads): the
  reference a cross-GPU figure is read against;
- **a -> b**: trained on GPU ``a``'s rows only; **rest -> b**: on every other GPU kind's rows (with three or
  more kinds), so the hardware columns vary in training;
- where workloads were measured on both sides (twins: the H200 re-runs of H100 specs), each cross figure comes
  twice: ``unseen`` drops the twins from training (a new GPU *and* a new workload), ``twins`` keeps them (a new
  GPU, a workload seen on another one: what a scheduler knows once a job has run elsewhere). Without twins only
  ``unseen`` exists.

Every figure is that of the nested procedure (:func:`gpupred.learn.nested.nested_cv`: the model is chosen by
inner CV on the training side only) on rows never fitted. :func:`twin_ratios` gives the measured ratio of
two GPU kinds' labels over their twin runs, per family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from gpupred.learn.evaluation import Split, grouped_random_splits
from gpupred.learn.nested import CVSettings, NestedResult, nested_cv

WITHIN, REST = "within", "rest"
COLUMNS = ["test_gpu", "train", "workloads", "n_train", "n_test", "rmsle", "coverage", "models"]  # of the table


@dataclass(frozen=True)
class TransferSplit:
    """One outer split of the cross-GPU evaluation: row positions and what they mean."""

    train: np.ndarray
    test: np.ndarray
    test_gpu: str
    train_gpus: str  # a GPU kind, "rest" (every other kind) or "within" (the test GPU's other workloads)
    workloads: str  # "unseen": no test workload in training; "twins": their runs on other GPUs kept
    fold: str = ""

    @property
    def label(self) -> str:
        """The split's name, e.g. ``A100->H200 (unseen)`` or ``within H200 fold0``."""
        if self.train_gpus == WITHIN:
            return f"within {self.test_gpu} {self.fold}"
        return f"{self.train_gpus}->{self.test_gpu} ({self.workloads})"

    def as_split(self) -> Split:
        """The (train, test, label) triple nested_cv takes."""
        return self.train, self.test, self.label


def _within(gpu: np.ndarray, workloads: np.ndarray, b: str, n_within: int, seed: int) -> list[TransferSplit]:
    """Grouped random folds over the rows of GPU ``b`` alone, as positions in the whole frame."""
    rows = np.flatnonzero(gpu == b)
    return [TransferSplit(rows[tr], rows[te], b, WITHIN, "unseen", label)
            for tr, te, label in grouped_random_splits(workloads[rows], n_within, seed)]


def _across(gpu: np.ndarray, workloads: np.ndarray, b: str, sources: list[str],
            min_workloads: int) -> list[TransferSplit]:
    """``a -> b`` for each other kind ``a`` (and ``rest -> b``): unseen, plus twins where the sides share workloads."""
    test = np.flatnonzero(gpu == b)
    seen_on_b = np.isin(workloads, workloads[test])
    out = []
    for a in sources:
        train_all = np.flatnonzero(gpu != b) if a == REST else np.flatnonzero(gpu == a)
        variants = [("unseen", train_all[~seen_on_b[train_all]])]
        if seen_on_b[train_all].any():
            variants.append(("twins", train_all))
        out += [TransferSplit(train, test, b, a, kind) for kind, train in variants
                if len(set(workloads[train])) >= min_workloads]
    return out


def transfer_splits(df: pd.DataFrame, n_within: int = 5, seed: int = 0, min_workloads: int = 6) -> list[TransferSplit]:
    """Every within-GPU fold and cross-GPU split of a dataset frame (columns ``gpu`` and ``workload_id``).

    A GPU kind with fewer than ``min_workloads`` distinct workloads is neither tested nor a training side on its
    own (it still counts in ``rest``); a training side left with fewer (after dropping twins) is skipped. Empty
    when no cross-GPU split remains (a single GPU kind, say): within-GPU folds alone compare nothing.
    """
    gpu = df["gpu"].astype(str).to_numpy()
    workloads = df["workload_id"].astype(str).to_numpy()
    n_work = pd.Series(workloads).groupby(gpu).nunique()
    kinds = sorted(k for k, n in n_work.items() if n >= min_workloads)
    within: list[TransferSplit] = []
    across: list[TransferSplit] = []
    for b in kinds:
        sources = [a for a in kinds if a != b] + ([REST] if len(n_work) > 2 else [])
        within += _within(gpu, workloads, b, n_within, seed)
        across += _across(gpu, workloads, b, sources, min_workloads)
    return within + across if across else []


def cross_gpu_evaluation(df: pd.DataFrame, target: str, models: Iterable[str] | dict[str, Any],
                         cv: CVSettings | None = None, n_within: int = 5,
                         min_workloads: int = 6) -> tuple[pd.DataFrame, NestedResult | None]:
    """(one row per test GPU, training side and workload kind; the nested result) for one label.

    Columns: ``test_gpu``, ``train`` (a GPU kind, ``rest`` or ``within``), ``workloads`` (``unseen``/``twins``),
    ``n_train`` (labelled training rows; the largest fold's for ``within``) and ``n_test`` (summed over the
    within folds), ``rmsle`` and ``coverage`` of the outer predictions (pooled over the within folds), and the
    ``models`` the inner CVs chose (with their fold counts).
    """
    data = df[df[target].notna()].reset_index(drop=True)
    cv = cv or CVSettings()
    splits = transfer_splits(data, n_within, cv.seed, min_workloads)
    if not splits:
        return pd.DataFrame(columns=COLUMNS), None
    res = nested_cv(data, target, models, "cross_gpu", cv, splits=[s.as_split() for s in splits], compare=False)
    meta = pd.DataFrame([{"fold_label": s.label, "test_gpu": s.test_gpu, "train": s.train_gpus,
                          "workloads": s.workloads} for s in splits])
    return summarize_transfer(res, meta), res


def summarize_transfer(res: NestedResult, meta: pd.DataFrame) -> pd.DataFrame:
    """Pool a cross-GPU nested result's outer predictions per (test GPU, training side, workload kind)."""
    keys = ["test_gpu", "train", "workloads"]
    preds = res.predictions.merge(meta, on="fold_label")
    folds = dict(list(res.folds.merge(meta, on="fold_label").groupby(keys, sort=False)))
    rows = []
    for key, p in preds.groupby(keys, sort=False):
        part = NestedResult(res.target, res.scheme, p, folds[key], res.comparison.iloc[:0])
        rows.append({**dict(zip(keys, key)), "n_train": int(part.folds["n_train"].max()),
                     "n_test": int(part.folds["n_test"].sum()), "rmsle": part.rmsle(), "coverage": part.coverage(),
                     "models": part.chosen()})
    order = {WITHIN: 0, REST: 2}
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["_o"] = [order.get(t, 1) for t in out["train"]]
    return out.sort_values(["test_gpu", "_o", "train", "workloads"]).drop(columns="_o").reset_index(drop=True)


def twin_ratios(df: pd.DataFrame, numerator: str, denominator: str,
                labels: Iterable[str] = ("gpu_util", "iter_time_mean_s", "memory_mib", "sm_active")) -> pd.DataFrame:
    """Per family: twin count and the median (min, max) ratio ``numerator / denominator`` of each label.

    Twins are runs of one workload under one ``sync`` setting measured on both GPU kinds (short ``gpu`` names);
    with several runs of a twin on one kind, their mean is used. The last row, ``all``, pools every twin.
    Empty (with the columns) when the kinds share no workload.
    """
    labels = [c for c in labels if c in df.columns]
    keys = ["workload_id", "sync"]
    side = {g: df[df["gpu"] == g].groupby(keys).agg(family=("family", "first"), **{c: (c, "mean") for c in labels})
            for g in (numerator, denominator)}
    joined = side[numerator].merge(side[denominator], left_index=True, right_index=True, suffixes=("_num", "_den"))
    columns = ["family", "twins"] + [f"{c}_{s}" for c in labels for s in ("ratio_median", "ratio_min", "ratio_max")]
    if joined.empty:
        return pd.DataFrame(columns=columns)
    ratios = pd.DataFrame({c: joined[f"{c}_num"] / joined[f"{c}_den"] for c in labels})
    ratios["family"] = joined["family_num"].to_numpy()
    rows = []
    for fam, g in [*ratios.groupby("family", sort=True), ("all", ratios)]:
        row: dict[str, Any] = {"family": fam, "twins": len(g)}
        for c in labels:
            v = g[c].replace([np.inf, -np.inf], np.nan).dropna()
            row.update({f"{c}_ratio_median": v.median(), f"{c}_ratio_min": v.min(), f"{c}_ratio_max": v.max()})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def twin_gpu_pairs(df: pd.DataFrame) -> list[tuple[str, str, int]]:
    """(kind a, kind b, shared workloads) for every pair of GPU kinds measuring some workload in common, a < b."""
    per = df.groupby("gpu")["workload_id"].apply(set)
    kinds = sorted(per.index)
    return [(a, b, len(per[a] & per[b])) for i, a in enumerate(kinds) for b in kinds[i + 1:] if per[a] & per[b]]


def _extremes(table: pd.DataFrame, column: str) -> str:
    """'from <lo> (<family>) to <hi> (<family>)' of a per-family ratio column (the pooled 'all' row left out)."""
    fam = table[table["family"] != "all"].dropna(subset=[column])
    if fam.empty:
        return "no family figure"
    lo, hi = fam.loc[fam[column].idxmin()], fam.loc[fam[column].idxmax()]
    return f"per family from {lo[column]:.2f} ({lo['family']}) to {hi[column]:.2f} ({hi['family']})"


def twins_prose(ratios: dict[str, pd.DataFrame]) -> str:
    """One paragraph per GPU pair of :func:`twin_ratios` tables (keyed 'b/a'), its figures read from the tables."""
    lines = []
    for kinds, table in ratios.items():
        pooled = table[table["family"] == "all"]
        if pooled.empty:
            continue
        row = pooled.iloc[0]
        parts = [f"**{kinds}**, {int(row['twins'])} twins:"]
        for label, name in (("iter_time_mean_s", "iteration time"), ("gpu_util", "utilization"), ("memory_mib", "memory")):
            column = f"{label}_ratio_median"
            if column in table.columns and pd.notna(row[column]):
                parts.append(f"{name} median ratio {row[column]:.2f} ({_extremes(table, column)});")
        lines.append(" ".join(parts).rstrip(";") + ".")
    return "\n\n".join(lines) or "No workload has been measured on two GPU kinds yet."
