"""Held-out scoring of slowdown estimators by whole model group: pooled, per-cell and within-job Spearman, and MAE.

- **Cells.** Model groups are shuffled (``seed``) into ``n_folds`` folds. Cell ``(fa, fb)``, ``fa <= fb``, holds out
  every job of the groups in folds ``fa`` and ``fb``: its model trains on the pairs with neither member held out and
  predicts the pairs whose members are both held out and span exactly ``fa`` and ``fb``. Every such pair is scored
  once, by a model that saw no pair of either member's model group (a fixed *reference job*, never held out, is the
  one exception: its pairs with training jobs stay in training, and no pair holding one is ever scored).
- **Adaptation** (:func:`adaptation_predictions`): in each cell a held-out job's only pairs the model may use are
  its ``k`` co-runs with the first ``k`` reference jobs; scored pairs hold no reference job, so they never include
  those co-runs.
- **Scores** (:func:`score`): Spearman over all scored rows (``pooled``); the mean over cells of the Spearman within
  each cell (``cell``: each cell's model sits at its own level, which the pooled figure also measures); the mean over
  jobs of the Spearman of one job's slowdowns beside its different partners (``job``: how one job's partners rank);
  and the mean absolute error of the slowdown (``mae``).
- **Solo-baseline check** (:func:`solo_baseline_flags`): sharing a GPU cannot speed a job up, so a job whose mean log
  slowdown over its co-runs is below 0 by more than ``z`` standard errors of the self-pair noise was measured against
  a wrong solo baseline; it is flagged, and results are reported with and without the pairs holding a flagged job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpupred.learn.evaluation import spearman
from gpupred.slowdown.estimator import SlowdownEstimator, SlowdownModel
from gpupred.errors import GpupredError

MIN_CELL_ROWS = 10  # a cell's Spearman counts when it scores at least this many rows
MIN_JOB_ROWS = 4  # a job's within-job Spearman counts when it has at least this many scored rows
METRICS: tuple[str, ...] = ("spearman_pooled", "spearman_cell", "spearman_job", "mae")


@dataclass(frozen=True)
class Cell:
    """One cross-fitting cell: its two folds, training rows, scored rows and held-out jobs."""

    folds: tuple[int, int]
    train: np.ndarray
    test: np.ndarray
    heldout: tuple[str, ...]


def fold_of_groups(groups: Iterable[str], n_folds: int, seed: int) -> dict[str, int]:
    """A balanced random fold per model group (sorted, then shuffled with ``seed``)."""
    g = np.array(sorted({str(x) for x in groups}), dtype=object)
    g = g[np.random.default_rng(seed).permutation(len(g))]
    return {str(k): i % n_folds for i, k in enumerate(g)}


def group_cells(X: pd.DataFrame, n_folds: int = 5, seed: int = 0, fixed: Iterable[str] = ()) -> list[Cell]:
    """The cells of a pair frame held out by whole model group; ``fixed`` jobs (references) are never held out."""
    if n_folds < 2:
        raise GpupredError(f"n_folds={n_folds}: holding out model groups needs at least 2 folds")
    fixed = set(fixed)
    fold = fold_of_groups(set(X["model_group"]) | set(X["partner_group"]), n_folds, seed)
    fo, fp = X["model_group"].map(fold).to_numpy(), X["partner_group"].map(fold).to_numpy()
    own_fixed, partner_fixed = X["job_key"].isin(fixed).to_numpy(), X["partner_key"].isin(fixed).to_numpy()
    lo, hi = np.minimum(fo, fp), np.maximum(fo, fp)
    cells = []
    for fa in range(n_folds):
        for fb in range(fa, n_folds):
            held_own = np.isin(fo, (fa, fb)) & ~own_fixed
            held_partner = np.isin(fp, (fa, fb)) & ~partner_fixed
            train = np.flatnonzero(~held_own & ~held_partner)
            test = np.flatnonzero(held_own & held_partner & (lo == fa) & (hi == fb))
            if len(test):
                jobs = tuple(sorted(set(X["job_key"].to_numpy()[held_own])))
                cells.append(Cell((fa, fb), train, test, jobs))
    return cells


def cell_index(n_rows: int, cells: list[Cell]) -> np.ndarray:
    """The position in ``cells`` of the cell that scores each row (-1: never scored)."""
    out = np.full(n_rows, -1, dtype=np.int64)
    for k, c in enumerate(cells):
        out[c.test] = k
    return out


def crossfit_predict(make: Callable[[], SlowdownEstimator], X: pd.DataFrame, cells: list[Cell],
                     min_train: int = 20) -> tuple[np.ndarray, list[SlowdownEstimator]]:
    """Held-out predictions of a fresh ``make()`` per cell (NaN where a cell had too few training rows); the models."""
    y = X["slowdown"].to_numpy(float)
    pred = np.full(len(X), np.nan)
    models = []
    for c in cells:
        if len(c.train) < min_train:
            continue
        est = make().fit(X.iloc[c.train], y[c.train])
        pred[c.test] = est.predict(X.iloc[c.test])
        models.append(est)
    return pred, models


def coruns_with(X: pd.DataFrame, job: str, refs: Iterable[str]) -> pd.DataFrame:
    """The rows of ``job``'s co-runs with the reference jobs ``refs`` (both members of each)."""
    refs = set(refs) - {job}
    rows = ((X["job_key"] == job) & X["partner_key"].isin(refs)) | ((X["partner_key"] == job) & X["job_key"].isin(refs))
    return X[rows.to_numpy()]


def _ref_rank(X: pd.DataFrame, refs: list[str]) -> np.ndarray:
    """Per row: the position in ``refs`` of the reference job in the pair (the larger if both are; len(refs) if none)."""
    rank = {r: i for i, r in enumerate(refs)}
    own = X["job_key"].map(rank).to_numpy(float)
    partner = X["partner_key"].map(rank).to_numpy(float)
    both = np.where(np.isnan(own), partner, np.where(np.isnan(partner), own, np.fmax(own, partner)))
    return np.nan_to_num(both, nan=len(refs)).astype(np.int64)


def adaptation_predictions(make: Callable[[], SlowdownModel], X: pd.DataFrame, cells: list[Cell], refs: list[str],
                            ks: Iterable[int] = range(6), min_train: int = 20) -> tuple[dict[int, np.ndarray], pd.DataFrame]:
    """Per ``k``: held-out predictions of a model fitted per cell, each held-out job adapted on its co-runs with
    ``refs[:k]``; and per (cell, job, k) how many co-runs it had. The model's prior must have no parameters (its log
    on the co-runs is computed once)."""
    ks = list(ks)
    y = X["slowdown"].to_numpy(float)
    preds = {k: np.full(len(X), np.nan) for k in ks}
    rank = _ref_rank(X, refs)
    candidates = X[rank < len(refs)]
    candidates = candidates.assign(log_prior=make().prior.log_predict(candidates),  # zero-parameter prior: once
                                   ref_rank=rank[rank < len(refs)])
    per_job = {job: coruns_with(candidates, job, refs) for job in set(X["job_key"]) - set(refs)}
    subsets = {(job, k): rows[rows["ref_rank"].to_numpy() < k] for job, rows in per_job.items() for k in ks}
    used = []
    for c in cells:
        if len(c.train) < min_train:
            continue
        model = make().fit(X.iloc[c.train], y[c.train])
        for k in ks:
            for job in c.heldout:
                model.adapt(job, subsets[(job, k)])
                used.append({"folds": c.folds, "job_key": job, "k": k, "coruns": model.adapted_[job]})
            preds[k][c.test] = model.predict(X.iloc[c.test])
    return preds, pd.DataFrame(used)


def _mean_within(keys: np.ndarray, y: np.ndarray, pred: np.ndarray, min_rows: int) -> tuple[float, int]:
    """Mean Spearman within each key's rows (keys with at least ``min_rows`` finite rows) and how many counted."""
    ok = np.isfinite(pred) & np.isfinite(y)
    values = []
    for idx in pd.Series(np.arange(len(keys))[ok]).groupby(keys[ok]).indices.values():
        if len(idx) >= min_rows:
            rows = np.flatnonzero(ok)[idx]
            rho = spearman(pred[rows], y[rows])
            if np.isfinite(rho):
                values.append(rho)
    return (float(np.mean(values)) if values else float("nan")), len(values)


def score(X: pd.DataFrame, pred: np.ndarray, cell: np.ndarray, rows: np.ndarray | None = None) -> dict[str, float]:
    """Pooled, per-cell and within-job Spearman and MAE of ``pred`` on the scored rows (``rows``: a subset mask)."""
    y = X["slowdown"].to_numpy(float)
    sel = (cell >= 0) & np.isfinite(pred) & np.isfinite(y)
    if rows is not None:
        sel &= rows
    y, p, c, jobs = y[sel], pred[sel], cell[sel], X["job_key"].to_numpy()[sel]
    per_cell, n_cells = _mean_within(c, y, p, MIN_CELL_ROWS)
    per_job, n_jobs = _mean_within(jobs, y, p, MIN_JOB_ROWS)
    return {"spearman_pooled": spearman(p, y), "spearman_cell": per_cell, "spearman_job": per_job,
            "mae": float(np.mean(np.abs(y - p))) if len(y) else float("nan"), "rows": int(len(y)), "cells": n_cells,
            "jobs": n_jobs}


def cell_spearman(X: pd.DataFrame, pred: np.ndarray, cell: np.ndarray) -> pd.Series:
    """Spearman within each cell (cells with at least :data:`MIN_CELL_ROWS` scored rows), indexed by cell."""
    y = X["slowdown"].to_numpy(float)
    out = {}
    for k in np.unique(cell[cell >= 0]):
        sel = (cell == k) & np.isfinite(pred) & np.isfinite(y)
        if sel.sum() >= MIN_CELL_ROWS:
            out[int(k)] = spearman(pred[sel], y[sel])
    return pd.Series(out, dtype=float)


def cell_gap_se(held: pd.DataFrame, predictor: str, prior: str, n_boot: int = 200, seed: int = 0) -> pd.Series:
    """Per cell, the bootstrap standard error of ``predictor``'s Spearman minus ``prior``'s: the cell's pairs
    (``group_id``, both members together) resampled with replacement ``n_boot`` times. ``held``: one row per scored
    member with ``cell``, ``group_id``, ``slowdown`` and a column per predictor."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, rows in held[held["cell"] >= 0].groupby("cell"):
        if len(rows) < MIN_CELL_ROWS:
            continue
        codes, uniques = pd.factorize(rows["group_id"])
        members = [np.flatnonzero(codes == g) for g in range(len(uniques))]
        y, a, b = (rows[c].to_numpy(float) for c in ("slowdown", predictor, prior))
        gaps = []
        for _ in range(n_boot):
            take = np.concatenate([members[g] for g in rng.integers(0, len(members), len(members))])
            gaps.append(spearman(a[take], y[take]) - spearman(b[take], y[take]))
        out[int(k)] = float(np.nanstd(gaps))
    return pd.Series(out, dtype=float)


def solo_baseline_flags(X: pd.DataFrame, noise_sd: float, z: float = 2.0) -> pd.DataFrame:
    """Per job: co-runs, mean log slowdown, the threshold ``-z noise_sd / sqrt(n)`` and whether it is below it.

    ``noise_sd`` is the self-pair noise of one log slowdown (:func:`gpupred.colocation.effects.self_pair_noise`); NaN
    (no noise estimate) flags nothing.
    """
    y = np.log(np.maximum(X["slowdown"].to_numpy(float), 1e-6))
    d = pd.DataFrame({"job_key": X["job_key"].to_numpy(), "log_slowdown": y})
    d = d[np.isfinite(d["log_slowdown"])]
    per = d.groupby("job_key")["log_slowdown"].agg(["size", "mean", "min"]).rename(
        columns={"size": "coruns", "mean": "mean_log_slowdown", "min": "min_log_slowdown"})
    per["threshold"] = -z * float(noise_sd) / np.sqrt(per["coruns"]) if np.isfinite(noise_sd) else np.nan
    per["flagged"] = (per["mean_log_slowdown"] < per["threshold"]).fillna(False).astype(bool)
    return per.reset_index()


def reference_jobs(features: pd.DataFrame, k: int = 5, candidates: Iterable[str] | None = None) -> list[str]:
    """``k`` reference jobs from solo features only: the medoid first, then each time the job farthest from those chosen.

    ``features`` is indexed by ``job_key`` (numeric columns, standardized here; NaN columns dropped); the order is
    nested (the first ``j`` are the choice for ``j``). ``candidates`` restricts who may be chosen.
    """
    f = features.astype(float).dropna(axis=1, how="any")
    if f.empty or not f.shape[1]:
        raise GpupredError("reference jobs: no solo feature known for every job")
    z = ((f - f.mean()) / f.std(ddof=0).replace(0.0, 1.0)).to_numpy()
    allowed = np.array([True] * len(f)) if candidates is None else f.index.isin(list(candidates))
    if allowed.sum() < k:
        raise GpupredError(f"reference jobs: {int(allowed.sum())} candidates for {k} references")
    dist = np.sqrt(((z[:, None, :] - z[None, :, :]) ** 2).sum(axis=2))
    medoid = np.where(allowed, dist.sum(axis=1), np.inf)
    chosen = [int(np.argmin(medoid))]
    while len(chosen) < k:
        gap = np.where(allowed, dist[:, chosen].min(axis=1), -np.inf)
        gap[chosen] = -np.inf
        chosen.append(int(np.argmax(gap)))
    return [str(f.index[i]) for i in chosen]


def corun_coverage(X: pd.DataFrame) -> pd.Series:
    """Per job: the share of the other jobs it was co-run with (measured or failed), from which pairs exist only."""
    jobs = sorted(set(X["job_key"]))
    partners = X.groupby("job_key")["partner_key"].agg(lambda s: len(set(s)))
    return (partners.reindex(jobs).fillna(0) / max(len(jobs), 1)).rename("coverage")


# What notebook 06 writes of the slowdown estimators (gpupred.contracts assembles its contract).
SLOWDOWN_METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (r"slowdown_\w+", "per slice and slowdown predictor, held out by model group: pooled, per-cell and within-job "
     "Spearman, MAE (slice_metrics); ceilings, noise floors and the goals (gpupred.colocation.closing)"),
)
