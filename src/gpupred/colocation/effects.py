"""How much of a pair's slowdown the members' own features could explain: per-job effects and their ceiling.

Each measured pair gives two log slowdowns, one per member. An *additive* two-way model writes the log
slowdown of job ``a`` beside job ``b`` as ``c + sensitivity_a + aggressiveness_b``: how much ``a`` suffers
from any partner, and how much ``b`` hurts any partner. Fitted on job identities (ridge, every pair), it is
the ceiling of any model that scores a pair from one vector per member and adds the members' parts: its
in-sample R² and Spearman bound what member features can do in that form, and what is left (R² below 1)
is pair-specific interaction and measurement noise. Whether a model *reaches* that ceiling depends on
whether a job's features predict its two effects; :func:`effect_predictability` measures that held out by
whole model group (each group's jobs predicted by a ridge fitted on the other groups' jobs).

These are diagnostics of the measured pairs (every pair is used): they never feed a held-out prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpupred.colocation.table import log_slowdown
from gpupred.errors import GpupredError

LOG_COLUMNS: tuple[str, ...] = ("mem_mib", "flops_train", "arithmetic_intensity")  # right-skewed: log1p before ridge


def _design(table: pd.DataFrame) -> tuple[np.ndarray, pd.Index]:
    """One-hot own job and partner job columns of each row, and the job index."""
    jobs = pd.Index(sorted(table["job_key"].astype(str).unique()))
    own = jobs.get_indexer(table["job_key"].astype(str))
    other = jobs.get_indexer(table["job_key"].astype(str).to_numpy()[partner_rows(table)])
    x = np.zeros((len(table), 2 * len(jobs)))
    x[np.arange(len(table)), own] = 1.0
    x[np.arange(len(table)), len(jobs) + other] = 1.0
    return x, jobs


def _in_sample_r2(y: np.ndarray, fit: np.ndarray) -> float:
    """R² of a fit scored on the rows it was fitted on: 1 - var(residual) / var(y)."""
    return float(1 - np.var(y - fit) / np.var(y))


def job_effects(table: pd.DataFrame, alpha: float = 1.0) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per job: sensitivity, aggressiveness and its pair count; and the additive model's in-sample fit.

    The fit holds ``intercept``, ``r2``, ``spearman`` (the ceiling), and ``r2_own`` / ``r2_partner``: the R² of own-job and
    partner-job identity alone.
    """
    from scipy.stats import spearmanr
    from sklearn.linear_model import Ridge

    y = log_slowdown(table)
    if not np.isfinite(y).all() or len(y) < 4:
        raise GpupredError("job effects need at least 4 rows, every one with a measured slowdown")
    x, jobs = _design(table)
    n = len(jobs)
    fit = Ridge(alpha=alpha).fit(x, y)

    def identity_r2(cols: slice) -> float:
        return _in_sample_r2(y, Ridge(alpha=alpha).fit(x[:, cols], y).predict(x[:, cols]))

    p = fit.predict(x)
    effects = pd.DataFrame({"job_key": jobs, "sensitivity": fit.coef_[:n], "aggressiveness": fit.coef_[n:],
                            "pairs": x[:, :n].sum(axis=0).astype(int)})
    return effects, {"intercept": float(fit.intercept_), "r2": _in_sample_r2(y, p),
                     "spearman": float(spearmanr(p, y).statistic),
                     "r2_own": identity_r2(slice(0, n)), "r2_partner": identity_r2(slice(n, 2 * n))}


def _standard(x: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``columns`` of ``x`` as floats, log1p of :data:`LOG_COLUMNS`."""
    out = x[columns].astype(float).copy()
    for c in columns:
        if c in LOG_COLUMNS:
            out[c] = np.log1p(out[c].clip(lower=0))
    return out


def effect_predictability(effects: pd.DataFrame, features: pd.DataFrame, groups: pd.Series,
                          columns: list[str]) -> dict[str, float]:
    """Held-out (leave one model group out) Spearman and R² of each job effect from job ``features``.

    ``features`` and ``groups`` are indexed by ``job_key``; a ridge (penalty by inner leave-one-out) on the
    standardized ``columns`` (log1p of :data:`LOG_COLUMNS`) of the other groups' jobs predicts each group's.
    """
    from scipy.stats import spearmanr
    from sklearn.linear_model import RidgeCV

    e = effects.set_index("job_key")
    cols = [c for c in columns if c in features.columns and features[c].notna().any()]
    if not cols:
        raise GpupredError(f"none of the columns {columns} has a value")
    x = _standard(features.reindex(e.index), cols)
    x = x.fillna(x.mean())
    g = groups.reindex(e.index).astype(str).to_numpy()
    out: dict[str, float] = {}
    for effect in ("sensitivity", "aggressiveness"):
        y = e[effect].to_numpy(float)
        pred = np.full(len(y), np.nan)
        for held in np.unique(g):
            tr, te = g != held, g == held
            mu, sd = x[tr].mean(), x[tr].std().replace(0, 1).fillna(1)
            model = RidgeCV(alphas=np.logspace(-2, 3, 12)).fit(((x[tr] - mu) / sd).to_numpy(), y[tr])
            pred[te] = model.predict(((x[te] - mu) / sd).to_numpy())
        out[f"{effect}_spearman"] = float(spearmanr(pred, y).statistic)
        out[f"{effect}_r2"] = float(1 - np.mean((y - pred) ** 2) / np.var(y))
    return out


def partner_rows(table: pd.DataFrame) -> np.ndarray:
    """For each row of a table of pairs, the position of its partner's row (GpupredError on larger groups)."""
    pos = np.arange(len(table))
    out = np.full(len(table), -1, dtype=np.int64)
    for idx in pd.Series(pos).groupby(table["group_id"].to_numpy()).indices.values():
        if len(idx) != 2:
            raise GpupredError(f"a group of {len(idx)} jobs: the effects model needs pairs")
        out[idx[0]], out[idx[1]] = idx[1], idx[0]
    return out


@dataclass
class EffectsModel:
    """A log-slowdown residual as ``c + sensitivity(own features) + aggressiveness(partner features)``.

    Fitting: the job effects of the training pairs (:func:`job_effects` on the residual), then one ridge per
    effect from the jobs' standardized features (penalty by inner leave-one-out). Pairwise symmetric: the
    same two functions score every member of every pair, so a pair's two slowdowns come from one model.
    """

    columns: list[str]
    intercept: float
    sensitivity: Any = field(repr=False)
    aggressiveness: Any = field(repr=False)
    mean: pd.Series = field(repr=False)
    scale: pd.Series = field(repr=False)

    @classmethod
    def fit(cls, table: pd.DataFrame, member: pd.DataFrame, columns: list[str], residual: np.ndarray) -> EffectsModel:
        """Fit on the pairs of ``table`` (aligned ``member`` features) to ``residual`` (log slowdown minus any prior)."""
        from sklearn.linear_model import RidgeCV

        effects, fit = job_effects(table.assign(slowdown=np.exp(residual)))
        jobs = member.assign(job_key=table["job_key"].astype(str).to_numpy()).drop_duplicates("job_key")
        x = _standard(jobs.set_index("job_key").reindex(effects["job_key"]), columns)
        mean, scale = x.mean(), x.std().replace(0, 1).fillna(1)
        z = ((x - mean) / scale).fillna(0.0).to_numpy()
        weight = effects["pairs"].to_numpy(float)
        fits = [RidgeCV(alphas=np.logspace(-2, 3, 12)).fit(z, effects[e].to_numpy(float), sample_weight=weight)
                for e in ("sensitivity", "aggressiveness")]
        return cls(columns, fit["intercept"], fits[0], fits[1], mean, scale)

    def _z(self, x: pd.DataFrame) -> np.ndarray:
        return ((_standard(x, self.columns) - self.mean) / self.scale).fillna(0.0).to_numpy()

    def predict(self, own: pd.DataFrame, partner: pd.DataFrame) -> np.ndarray:
        """The residual of each job (row of ``own``) beside the matching row of ``partner``."""
        s = self.sensitivity.predict(self._z(own))
        a = self.aggressiveness.predict(self._z(partner))
        return self.intercept + s + a


def monotone_ceiling(table: pd.DataFrame, util: np.ndarray, sweeps: int = 25) -> dict[str, float]:
    """In-sample fit of ``log s = c + f(own util) + g(partner util)``, ``f``, ``g`` non-decreasing (isotonic, backfitted).

    The job-effects form of :func:`job_effects` with each effect a monotone function of one number per member,
    as the time-sharing physics orders them (a busier job waits more, a busier partner makes it wait more):
    what a model that scores a pair from the members' solo utilization (``util``, aligned with ``table``) can
    reach on these pairs, fitted and scored on all of them. Returns ``spearman`` (0 for a constant fit) and ``r2``.
    """
    from scipy.stats import spearmanr
    from sklearn.isotonic import IsotonicRegression

    y = log_slowdown(table)
    own = np.asarray(util, dtype=float)
    if len(own) != len(table) or not (np.isfinite(y).all() and np.isfinite(own).all()):
        raise GpupredError(f"monotone ceiling: {len(own)} utilizations for {len(table)} rows; "
                           "every one must be finite, with a slowdown")
    partner = own[partner_rows(table)]
    c, f, g = float(y.mean()), np.zeros(len(y)), np.zeros(len(y))
    for _ in range(sweeps):
        f = IsotonicRegression().fit_transform(own, y - c - g)
        f -= f.mean()
        g = IsotonicRegression().fit_transform(partner, y - c - f)
        g -= g.mean()
    fit = c + f + g
    rho = float(spearmanr(fit, y).statistic) if np.ptp(fit) > 0 else 0.0  # a constant fit ranks nothing
    return {"spearman": rho, "r2": _in_sample_r2(y, fit)}


def self_pair_noise(table: pd.DataFrame) -> dict[str, float]:
    """Measurement noise from pairs of a job with itself: both members' slowdowns are one truth measured twice.

    Returns ``pairs`` (how many such pairs), ``noise_sd`` (the standard deviation of one member's log slowdown
    about the pair's truth: sd of the log ratio over sqrt 2) and ``log_sd`` (the sd of every row's log slowdown),
    so ``(noise_sd / log_sd)²`` is the share of the spread that repeated measurement alone would leave; and
    ``both_faster``: the self-pairs whose two members both ran faster than alone. Sharing a GPU with a copy of
    itself cannot speed a job up, so these point at an error in the job's solo baseline: shared by both members,
    it is invisible to ``noise_sd`` and reads as the job's sensitivity.
    """
    y = log_slowdown(table)
    other = partner_rows(table)
    keys = table["job_key"].astype(str).to_numpy()
    first = (np.arange(len(table)) < other) & (keys == keys[other])
    if first.sum() < 2:
        raise GpupredError(f"{int(first.sum())} pairs of a job with itself; the noise estimate needs at least 2")
    ratio = y[first] - y[other[first]]
    faster = int(((y[first] < 0) & (y[other[first]] < 0)).sum())
    return {"pairs": int(first.sum()), "noise_sd": float(np.std(ratio, ddof=1) / np.sqrt(2.0)),
            "log_sd": float(np.std(y, ddof=1)), "both_faster": faster}
