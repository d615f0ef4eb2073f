"""What the shipped estimators get wrong on rows they never saw: their out-of-fold predictions (what notebooks 06
and 07 consume) and their held-out figures (what each predictor's card states).

- :func:`oof_predictions`: every dataset row predicted by the step estimator and the memory footprint model fitted on
  the other grouped-random folds (whole workloads), in the :mod:`gpupred.learn.oof` contract;
- :func:`heldout_figures`: from a comparison table (:func:`gpupred.learn.summary.comparison_table`), the shipped
  method's figures per target, scheme (within GPU, leave one family out, cross-GPU) and tested GPU: its error (RMSLE,
  or the median relative error for iteration time and memory), the coverage of its 90 % intervals, and its rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from gpupred.learn.evaluation import Split

SHIPPED_METHOD = "physics+correction"  # the comparison's name for the shipped estimators (step and memory)
MEMORY_TARGET = "memory_mib"


def heldout_figures(table: pd.DataFrame) -> dict[str, Any]:
    """``{target: {scheme: {tested: {"error", "metric", "coverage", "n"}}}}`` of the shipped method in ``table``."""
    from gpupred.learn.summary import RELATIVE_TARGETS

    out: dict[str, Any] = {}
    rows = table[table["method"] == SHIPPED_METHOD]
    for r in rows.itertuples(index=False):
        relative = r.target in RELATIVE_TARGETS
        entry = {"error": float(r.median_rel_err if relative else r.rmsle),
                 "metric": "median_rel_err" if relative else "rmsle",
                 "coverage": None if pd.isna(r.coverage) else float(r.coverage), "n": int(r.n)}
        out.setdefault(r.target, {}).setdefault(r.scheme, {})[r.tested] = entry
    return out


def step_fold(df: pd.DataFrame, train: np.ndarray, test: np.ndarray, step: Any, pdata: Any) -> pd.DataFrame:
    """The unfitted ``step`` estimator fitted on the rows ``train`` and asked about the rows ``test``, without its
    derived throughput and extrapolation columns."""
    pred = clone(step).fit(df.iloc[train], pdata.subset(train)).predict(df.iloc[test], pdata.subset(test))
    return pred.drop(columns=[c for c in pred.columns if c.startswith("samples_per_s") or c == "extrapolated"])


def step_oof(df: pd.DataFrame, folds: list[Split], step: Any, pdata: Any, n_jobs: int = 1) -> pd.DataFrame:
    """Each row of ``df`` predicted by the unfitted ``step`` estimator fitted on the other ``folds`` (:func:`step_fold`
    each, on ``n_jobs`` processes), in ``df``'s order."""
    from gpupred.learn.parallel import parallel_map

    tasks = [(df, train, test, step, pdata) for train, test, _ in folds]
    parts = parallel_map(step_fold, tasks, n_jobs, progress=False)
    return pd.concat(parts).loc[df.index]


def _memory_oof(df: pd.DataFrame, folds: list[Split], seed: int) -> pd.DataFrame:
    from gpupred.physicstables import with_terms
    from gpupred.memory.estimator import BEST, MemoryEstimator

    data = with_terms(df)
    parts = []
    for train, test, _ in folds:
        est = MemoryEstimator(seed=seed).fit(data.iloc[train]).predict(data.iloc[test])
        parts.append(pd.DataFrame({MEMORY_TARGET: est[BEST], f"{MEMORY_TARGET}_low": est["low"],
                                   f"{MEMORY_TARGET}_high": est["high"]}, index=data.index[test]))
    return pd.concat(parts).loc[df.index]


def oof_predictions(df: pd.DataFrame, folds: list[Split], step: Any = None, pdata: Any = None,
                    seed: int = 0, n_jobs: int = 1) -> pd.DataFrame:
    """Every row of ``df`` predicted by the shipped estimators, each fitted on the other ``folds`` (which must test
    every row once): the unfitted ``step`` estimator's targets (none without one: rows without graphs; its folds on
    ``n_jobs`` processes, to the bit as in one) and the memory footprint model's, with ``<target>_model`` naming the
    estimator; keys of the out-of-fold contract."""
    from gpupred.errors import GpupredError
    from gpupred.learn.oof import KEY_COLUMNS
    from gpupred.step.rowphysics import physics_data

    tested = np.concatenate([test for _, test, _ in folds]) if folds else np.empty(0, int)
    if len(tested) != len(df) or len(np.unique(tested)) != len(df):
        raise GpupredError(f"out-of-fold folds must test every dataset row once ({len(tested)} tests, {len(df)} rows)")
    df = df.reset_index(drop=True)
    out = df[[c for c in KEY_COLUMNS if c != "fold"]].copy()
    out["fold"] = 0
    for k, (_, test, _) in enumerate(folds):
        out.loc[test, "fold"] = k
    if step is not None:
        pdata = pdata.align(df) if pdata is not None else physics_data(df)
        part = step_oof(df, folds, step, pdata, n_jobs)
        for target in [t for t in step.targets if t in part.columns]:
            out[[target, f"{target}_low", f"{target}_high"]] = part[[target, f"{target}_low", f"{target}_high"]]
            out[f"{target}_model"] = "StepEstimator"
    out[[MEMORY_TARGET, f"{MEMORY_TARGET}_low", f"{MEMORY_TARGET}_high"]] = _memory_oof(df, folds, seed)
    out[f"{MEMORY_TARGET}_model"] = "MemoryEstimator"
    return out


def with_shipped(oof: pd.DataFrame, shipped: pd.DataFrame) -> pd.DataFrame:
    """The out-of-fold frame ``oof`` (baselines for every target) with the shipped estimators' columns in place of
    the baselines' wherever ``shipped`` (:func:`oof_predictions`, on the same folds) predicts a target."""
    from gpupred.errors import GpupredError

    merged = oof.set_index("run_id")
    other = shipped.set_index("run_id").loc[merged.index]
    if not (other["fold"].to_numpy() == merged["fold"].to_numpy()).all():
        raise GpupredError("the shipped estimators' out-of-fold predictions were made on other folds than the baselines'")
    targets = [c[: -len("_model")] for c in other.columns if c.endswith("_model")]
    for target in targets:
        for column in (target, f"{target}_low", f"{target}_high", f"{target}_model"):
            merged[column] = other[column]
    return merged.reset_index()[list(oof.columns) + [c for c in merged.columns if c not in oof.columns]]
