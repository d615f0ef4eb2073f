"""Held-out slowdown and failure predictions for every ordered pair of a set of jobs: what a scheduler may know.

The cells of :mod:`gpupred.slowdown.evaluate` (whole model groups held out, reference jobs fixed) decide which model
answers a pair: a pair of two held-out jobs is answered by the cell of their two folds; a pair of a held-out job and a
reference job by the cell of the job's own fold (held out alone); a pair of two reference jobs by a model that
trained on them (references are the adaptation's fixed partners, always measured). In each cell the model is fitted
on the pairs with no held-out member and every held-out job is adapted on its co-runs with the first ``k``
reference jobs only (:class:`~gpupred.slowdown.estimator.SlowdownModel`, and for failures
:class:`~gpupred.colocation.failures.FailureModel`). The upper bound of a slowdown is the point times
``exp(q)``, ``q`` the conformal ``level`` quantile of the held-out absolute log errors on the measured pairs the same
cells predicted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpupred.slowdown.estimator import SlowdownModel
from gpupred.colocation.failures import FailureModel
from gpupred.slowdown.evaluate import coruns_with, fold_of_groups
from gpupred.errors import GpupredError


def ordered_pairs(jobs: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """A pair frame of every ordered pair (self-pairs included) of ``jobs`` (``job_key``, ``model_group``, inputs)."""
    w = len(jobs)
    a, b = np.repeat(np.arange(w), w), np.tile(np.arange(w), w)
    out = pd.DataFrame({"job_key": jobs["job_key"].to_numpy()[a], "partner_key": jobs["job_key"].to_numpy()[b],
                        "model_group": jobs["model_group"].to_numpy()[a], "partner_group": jobs["model_group"].to_numpy()[b],
                        "member": 0})
    for c in columns:
        v = jobs[c].to_numpy(float)
        out[f"own_{c}"], out[f"partner_{c}"] = v[a], v[b]
    return out


@dataclass
class PairKnowledge:
    """Held-out predictions over the ordered pairs of ``jobs``: slowdown point and upper bound, failure probability."""

    jobs: list[str]
    point: np.ndarray
    high: np.ndarray
    fail: np.ndarray | None
    width: float  # the log half-width of the upper bound
    refs: list[str]


def _answering_cell(fold: np.ndarray, is_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fa, fb) of the cell that answers each ordered pair (flattened rows x columns)."""
    w = len(fold)
    fa, fb = np.repeat(fold, w), np.tile(fold, w)
    ra, rb = np.repeat(is_ref, w), np.tile(is_ref, w)
    fa = np.where(ra & ~rb, fb, fa)
    fb = np.where(rb & ~ra, fa, fb)
    both = ra & rb
    fa, fb = np.where(both, 0, fa), np.where(both, 0, fb)
    return np.minimum(fa, fb), np.maximum(fa, fb)


def _adapted(model: SlowdownModel, failure: FailureModel | None, X: pd.DataFrame, F: pd.DataFrame | None,
                held: list[str], refs: list[str]) -> None:
    """Calibrate every held-out job on its co-runs with ``refs`` (slowdowns from ``X``, failures from ``F``)."""
    for job in held:
        model.adapt(job, coruns_with(X, job, refs))
        if failure is not None and F is not None:
            failure.adapt(job, coruns_with(F, job, refs))


def heldout_matrices(X: pd.DataFrame, jobs: pd.DataFrame, columns: tuple[str, ...] | list[str],
                     make: Callable[[], SlowdownModel], refs: list[str], k: int, n_folds: int = 5, seed: int = 0,
                     F: pd.DataFrame | None = None, level: float = 0.9) -> PairKnowledge:
    """Held-out predictions for every ordered pair of ``jobs`` from measured pairs ``X`` (see the module doc).

    ``F`` (a pair frame with failed pairs too) adds failure probabilities; ``k`` co-runs adapt each held-out job.
    """
    from gpupred.learn.conformal import conformal_quantile

    if not set(refs[:k]) <= set(X["job_key"]):
        raise GpupredError(f"reference jobs {sorted(set(refs[:k]) - set(X['job_key']))} have no measured pair")
    groups = set(X["model_group"]) | set(X["partner_group"]) | set(jobs["model_group"])
    fold_of = fold_of_groups(groups, n_folds, seed)
    fold = jobs["model_group"].map(fold_of).to_numpy(int)
    is_ref = jobs["job_key"].isin(refs).to_numpy()
    lo, hi = _answering_cell(fold, is_ref)
    allp = ordered_pairs(jobs, columns)
    w = len(jobs)
    point, fail = np.full(w * w, np.nan), (np.full(w * w, np.nan) if F is not None else None)
    xf = {"own": X["model_group"].map(fold_of).to_numpy(), "partner": X["partner_group"].map(fold_of).to_numpy()}
    ref_x = {"own": X["job_key"].isin(refs).to_numpy(), "partner": X["partner_key"].isin(refs).to_numpy()}
    errors = []
    for fa in range(n_folds):
        for fb in range(fa, n_folds):
            sel = (lo == fa) & (hi == fb)
            held_own = np.isin(xf["own"], (fa, fb)) & ~ref_x["own"]
            held_partner = np.isin(xf["partner"], (fa, fb)) & ~ref_x["partner"]
            train = ~held_own & ~held_partner
            if not sel.any() or train.sum() < 4:
                continue
            model = make().fit(X[train], X["slowdown"].to_numpy(float)[train])
            failure = None
            if F is not None:
                f_held = F["model_group"].map(fold_of).isin((fa, fb)) & ~F["job_key"].isin(refs)
                f_held |= F["partner_group"].map(fold_of).isin((fa, fb)) & ~F["partner_key"].isin(refs)
                failure = FailureModel(tuple(refs[:k])).fit(F[~f_held.to_numpy()])
            held = sorted(set(X["job_key"][held_own]) | set(jobs["job_key"][np.isin(fold, (fa, fb)) & ~is_ref]))
            _adapted(model, failure, X, F, held, refs[:k])
            point[sel] = model.predict(allp[sel])
            if failure is not None:
                fail[sel] = failure.predict_proba(allp[sel])
            test = held_own & held_partner & (np.minimum(xf["own"], xf["partner"]) == fa) & (np.maximum(xf["own"], xf["partner"]) == fb)
            if test.any():
                errors.append(np.abs(np.log(model.predict(X[test])) - np.log(X["slowdown"].to_numpy(float)[test])))
    err = np.concatenate(errors) if errors else np.zeros(1)
    width = float(conformal_quantile(err[np.isfinite(err)], 1.0 - level))
    shape = (w, w)
    return PairKnowledge(jobs["job_key"].tolist(), point.reshape(shape), (point * np.exp(width)).reshape(shape),
                         fail.reshape(shape) if fail is not None else None, width, list(refs[:k]))
