"""Slowdown estimators, from the cheapest to the richest, in scikit-learn form (fit / predict / get_params / describe).

Every estimator reads a *pair frame* (:func:`pair_frame`): one row per member of a co-located pair, with the member's
and its partner's keys (``job_key``, ``partner_key``, ``model_group``, ``partner_group``) and solo inputs
(``own_<c>``, ``partner_<c>``), and predicts each member's slowdown. ``fit(X, y)`` takes the measured slowdowns of
the training rows. What each one knows:

- **Zero-parameter priors** (``fit`` learns nothing): :class:`SummedUtilization` (``max(1, (u_a + u_b) / 100)``,
  HotCloud's additive rule), :class:`TimeSharing` (``s_a = 1 + b_a q_b`` from the members' GPU-busy fractions,
  :mod:`gpupred.slowdown.physics`: the step model's busy over step time, or utilization / 100) and
  :class:`StepShare` (``1 + T_b / (T_a + T_b)`` from solo step times alone: a member waits for its partner's share
  of the two steps; the prior where no utilization was recorded, as in Gavel's matrix).
- **A learned correction** (:class:`CorrectedSlowdown`): the prior times a correction learned on the training pairs'
  member features, *kept only when an inner cross-validation over the training rows' model groups shows it ranks
  better than its prior* -- in every inner fold of ``repeats`` differently dealt splits, and by ``margin`` in
  Spearman on average -- (otherwise the prior itself is returned, so a cell never trades its prior for a guess).
  One split of three folds is not enough: choosing the best of three candidates on it kept the correction in 8 of
  15 Lucid cells, and it then ranked worse than the prior in 6 of them; with three splits it was kept in none.
- **Adaptation from reference co-runs** (:class:`SlowdownModel`): ``log s(a|b) = log prior(a, b) + sens_a + aggr_b``,
  each job's sensitivity and aggressiveness fitted on training pairs (ridge on job identities, no intercept); a new
  job gets both from ``k`` short co-runs with fixed reference jobs (:meth:`SlowdownModel.adapt`), each effect the
  mean of its co-run residuals shrunk to 0 (the prior) by ``noise variance / effect variance`` (empirical Bayes from
  the training fit). With no co-run a new job is predicted by the prior exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.learn.evaluation import spearman
from gpupred.learn.params import Estimator
from gpupred.slowdown.correction import (
    CORRECTION_GRID, apply_correction, correction_features, fit_correction, group_folds,
)
from gpupred.slowdown.physics import timeshare_slowdown

PAIR_KEYS: tuple[str, ...] = ("group_id", "member", "job_key", "partner_key", "model_group", "partner_group")


def pair_frame(table: pd.DataFrame, member: pd.DataFrame | None = None, columns: tuple[str, ...] | list[str] = ()) -> pd.DataFrame:
    """One row per member of every pair (groups of two) of a co-location table, with own and partner inputs.

    ``member`` is aligned with ``table`` (e.g. :func:`gpupred.colocation.members.align`); each of its ``columns`` gives
    ``own_<c>`` and ``partner_<c>``. Keeps ``slowdown`` and ``failed`` (the group failed); larger groups are left out.
    """
    t = table.reset_index(drop=True)
    size = t.groupby("group_id")["group_id"].transform("size").to_numpy()
    keep = np.flatnonzero(size == 2)
    t = t.iloc[keep].reset_index(drop=True)
    order = np.lexsort((t["member"].to_numpy(), pd.factorize(t["group_id"])[0]))
    t = t.iloc[order].reset_index(drop=True)
    partner = np.arange(len(t)) ^ 1  # rows come in (member 0, member 1) order per group
    out = pd.DataFrame({
        "group_id": t["group_id"].to_numpy(), "member": t["member"].to_numpy(), "job_key": t["job_key"].astype(str).to_numpy(),
        "partner_key": t["job_key"].astype(str).to_numpy()[partner], "model_group": t["model_group"].astype(str).to_numpy(),
        "partner_group": t["model_group"].astype(str).to_numpy()[partner], "gpu_name": t["gpu_name"].to_numpy(),
        "slowdown": t["slowdown"].astype(float).to_numpy(), "failed": t["group_failed"].astype(bool).to_numpy(),
    })
    if member is not None and len(columns):
        m = member.reset_index(drop=True)
        if len(m) != len(table):
            raise GpupredError(f"member inputs have {len(m)} rows for a table of {len(table)}; align them first")
        m = m.iloc[keep].reset_index(drop=True).iloc[order].reset_index(drop=True)
        for c in columns:
            v = m[c].to_numpy(float) if c in m.columns else np.full(len(m), np.nan)
            out[f"own_{c}"], out[f"partner_{c}"] = v, v[partner]
    return out


def _pair(X: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(own, partner) values of one input column of a pair frame."""
    missing = [c for c in (f"own_{column}", f"partner_{column}") if c not in X.columns]
    if missing:
        raise GpupredError(f"pair frame lacks {missing}; build it with pair_frame(..., columns=[{column!r}, ...])")
    return X[f"own_{column}"].to_numpy(float), X[f"partner_{column}"].to_numpy(float)


class SlowdownEstimator(Estimator):
    """Base of the slowdown estimators: ``fit(X, y)``, ``predict(X)`` (slowdown per pair-frame row), ``describe()``."""

    kind = "prior"  # "prior" (zero parameters), "learned" or "adapted"
    what = ""  # one line: what it computes

    def fit(self, X: pd.DataFrame, y: np.ndarray | None = None) -> SlowdownEstimator:
        """Learn from training rows (priors learn nothing)."""
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted slowdown of each row (NaN where an input is missing)."""
        raise NotImplementedError

    def log_predict(self, X: pd.DataFrame) -> np.ndarray:
        """The log of :meth:`predict`."""
        return np.log(np.maximum(self.predict(X), 1e-6))

    def describe(self) -> dict[str, Any]:
        """Name, kind, settings and one line of what it computes."""
        params = {k: (v.describe()["name"] if isinstance(v, SlowdownEstimator) else v) for k, v in self.get_params(deep=False).items()}
        return {"name": type(self).__name__, "kind": self.kind, "params": params, "what": self.what}


class SummedUtilization(SlowdownEstimator):
    """``max(1, (u_own + u_partner) / 100)`` from a utilization input (%)."""

    what = "max(1, summed solo utilization / 100): the additive rule"

    def __init__(self, column: str = "util_pred") -> None:
        self.column = column

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """The additive rule on each row."""
        own, partner = _pair(X, self.column)
        return np.maximum(1.0, (own + partner) / 100.0)


class TimeSharing(SlowdownEstimator):
    """``s = 1 + b_own q_partner`` from GPU-busy fractions (0..1): :func:`gpupred.slowdown.physics.timeshare_slowdown`."""

    what = "time-sharing estimate from the members' GPU-busy fractions"

    def __init__(self, column: str = "busy_pred") -> None:
        self.column = column

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """The time-sharing estimate on each row."""
        own, partner = _pair(X, self.column)
        return timeshare_slowdown(own, partner)


class StepShare(SlowdownEstimator):
    """``1 + T_partner / (T_own + T_partner)`` from solo step times: the partner's share of the two steps."""

    what = "1 + the partner's share of the two solo step times"

    def __init__(self, column: str = "step_s") -> None:
        self.column = column

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """The step-share estimate on each row."""
        own, partner = _pair(X, self.column)
        return 1.0 + partner / (own + partner)


class CorrectedSlowdown(SlowdownEstimator):
    """Its prior times a learned correction, or the prior alone where inner CV shows no correction ranks better."""

    kind = "learned"
    what = ("prior x learned correction, kept only where it beats the prior in every inner fold of repeated splits "
            "by model group")

    def __init__(self, prior: SlowdownEstimator | None = None, features: tuple[str, ...] = (), n_inner: int = 3,
                 margin: float = 0.02, seed: int = 0, repeats: int = 3) -> None:
        self.prior = prior
        self.features = features
        self.n_inner = n_inner
        self.margin = margin
        self.seed = seed
        self.repeats = repeats

    def _inner_scores(self, X: pd.DataFrame, y: np.ndarray, log_prior: np.ndarray,
                      x: np.ndarray) -> dict[str, list[float]]:
        """Spearman per inner fold (whole model groups) of the prior and of each candidate, over ``repeats`` splits
        (the first deals groups in sorted order, the others in orders shuffled from ``seed``)."""
        scores: dict[str, list[float]] = {"prior": [], **{c: [] for c in CORRECTION_GRID}}
        resid = np.log(y) - log_prior
        splits = [fold for r in range(max(1, self.repeats))
                  for fold in group_folds(X, self.n_inner, None if r == 0 else self.seed + r)]
        for tr, te in splits:
            if len(tr) < 20 or len(te) < 4:
                continue
            scores["prior"].append(spearman(log_prior[te], y[te]))
            models = {s.model for s in CORRECTION_GRID.values()}
            fitted = {m: apply_correction(m, fit_correction(m, x[tr], resid[tr], self.seed), x[te]) for m in models}
            for name, s in CORRECTION_GRID.items():
                scores[name].append(spearman(log_prior[te] + s.weight * fitted[s.model], y[te]))
        return scores

    def _beats(self, scores: dict[str, list[float]], name: str) -> bool:
        """Whether candidate ``name`` ranks better than the prior in every inner fold (of every split) and by
        ``margin`` on average."""
        d = np.asarray(scores[name], dtype=float) - np.asarray(scores["prior"], dtype=float)
        return bool(len(d) and np.isfinite(d).all() and (d > 0).all() and d.mean() > self.margin)

    def fit(self, X: pd.DataFrame, y: np.ndarray | None = None) -> CorrectedSlowdown:
        """Choose (inner CV) and fit the correction on the training rows; ``chosen_`` says which, ``inner_`` the scores."""
        if self.prior is None:
            raise GpupredError("CorrectedSlowdown needs a prior estimator")
        y = np.asarray(y if y is not None else X["slowdown"], dtype=float)
        ok = np.isfinite(y) & (y > 0)
        X, y = X[ok].reset_index(drop=True), y[ok]
        log_prior = self.prior.fit(X, y).log_predict(X)
        x = correction_features(X, list(self.features), log_prior)
        scores = self._inner_scores(X, y, log_prior, x) if self.features else {"prior": []}
        self.inner_ = {k: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan") for k, v in scores.items()}
        best = max(CORRECTION_GRID, key=lambda c: np.nan_to_num(self.inner_.get(c, np.nan), nan=-2.0))
        beats = best in scores and self._beats(scores, best)
        self.chosen_ = best if beats else "prior"
        resid = np.log(y) - log_prior
        self.model_ = fit_correction(CORRECTION_GRID[best].model, x, resid, self.seed) if beats else None
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """The prior, times the chosen correction when one was kept."""
        log_prior = self.prior.log_predict(X)
        if self.model_ is None:
            return self.prior.predict(X)
        s = CORRECTION_GRID[self.chosen_]
        x = correction_features(X, list(self.features), log_prior)
        return np.exp(log_prior + s.weight * apply_correction(s.model, self.model_, x))


class SlowdownModel(SlowdownEstimator):
    """``log s(a|b) = log prior(a, b) + sens_a + aggr_b``: job effects on a prior, adapted for new jobs from co-runs."""

    kind = "adapted"
    what = "prior x exp(own sensitivity + partner aggressiveness); new jobs adapted from reference co-runs"

    def __init__(self, prior: SlowdownEstimator | None = None, alpha: float = 1.0) -> None:
        self.prior = prior
        self.alpha = alpha

    def fit(self, X: pd.DataFrame, y: np.ndarray | None = None) -> SlowdownModel:
        """Fit every training job's two effects (ridge on identities) and the noise and effect variances."""
        from sklearn.linear_model import Ridge

        if self.prior is None:
            raise GpupredError("SlowdownModel needs a prior estimator")
        y = np.asarray(y if y is not None else X["slowdown"], dtype=float)
        ok = np.isfinite(y) & (y > 0)
        X, y = X[ok].reset_index(drop=True), y[ok]
        if len(X) < 4:
            raise GpupredError(f"{len(X)} co-located jobs with a measured slowdown: fit on at least 4")
        resid = np.log(y) - self.prior.fit(X, y).log_predict(X)
        jobs = pd.Index(sorted(set(X["job_key"]) | set(X["partner_key"])))
        own, partner = jobs.get_indexer(X["job_key"]), jobs.get_indexer(X["partner_key"])
        n = len(jobs)
        design = np.zeros((len(X), 2 * n))
        design[np.arange(len(X)), own] = 1.0
        design[np.arange(len(X)), n + partner] = 1.0
        ok_rows = np.isfinite(resid)
        fit = Ridge(alpha=self.alpha, fit_intercept=False).fit(design[ok_rows], resid[ok_rows])
        self.sens_ = dict(zip(jobs, fit.coef_[:n]))
        self.aggr_ = dict(zip(jobs, fit.coef_[n:]))
        seen_own, seen_partner = np.unique(own[ok_rows]), np.unique(partner[ok_rows])
        self.noise_var_ = float(np.mean((resid[ok_rows] - fit.predict(design[ok_rows])) ** 2))
        self.sens_var_ = float(np.mean(fit.coef_[:n][seen_own] ** 2)) or 1e-6
        self.aggr_var_ = float(np.mean(fit.coef_[n:][seen_partner] ** 2)) or 1e-6
        self.adapted_: dict[str, int] = {}
        return self

    def adapt(self, job: str, coruns: pd.DataFrame) -> SlowdownModel:
        """Fit ``job``'s sensitivity and aggressiveness from its co-runs with jobs the model knows, shrunk to the prior.

        ``coruns`` are pair-frame rows (with ``slowdown``) of ``job`` beside reference jobs and of the references
        beside ``job``; rows with another job, an unknown partner or no finite slowdown are ignored. A ``log_prior``
        column, when present, is taken as the prior's log on those rows (callers that adapt often compute it once).
        """
        own, partner = coruns["job_key"].to_numpy(), coruns["partner_key"].to_numpy()
        y = coruns["slowdown"].to_numpy(float)
        log_prior = coruns["log_prior"].to_numpy(float) if "log_prior" in coruns else self.prior.log_predict(coruns)
        resid = np.log(np.where(y > 0, y, np.nan)) - log_prior
        usable = np.isfinite(resid)
        as_own = [i for i in np.flatnonzero(usable) if own[i] == job and partner[i] != job and partner[i] in self.aggr_]
        as_partner = [i for i in np.flatnonzero(usable) if partner[i] == job and own[i] != job and own[i] in self.sens_]
        e_sens = np.array([resid[i] - self.aggr_[partner[i]] for i in as_own])
        e_aggr = np.array([resid[i] - self.sens_[own[i]] for i in as_partner])
        self.sens_[job] = float(e_sens.sum() / (len(e_sens) + self.noise_var_ / self.sens_var_))
        self.aggr_[job] = float(e_aggr.sum() / (len(e_aggr) + self.noise_var_ / self.aggr_var_))
        self.adapted_[job] = int(min(len(e_sens), len(e_aggr)))
        return self

    def effects(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(own sensitivity, partner aggressiveness) of each row: 0 for a job neither fitted nor adapted."""
        sens = X["job_key"].map(self.sens_).fillna(0.0).to_numpy(float)
        aggr = X["partner_key"].map(self.aggr_).fillna(0.0).to_numpy(float)
        return sens, aggr

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """The prior times ``exp(sens_own + aggr_partner)``."""
        sens, aggr = self.effects(X)
        return np.exp(self.prior.log_predict(X) + sens + aggr)
