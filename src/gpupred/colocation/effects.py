"""How much of a pair's slowdown the members' own features could explain: per-job effects and their ceiling.

Each measured pair gives two log slowdowns, one per member. An *additive* two-way model writes the log
slowdown of job ``a`` beside job ``b`` as ``c + sensitivity_a + aggressiveness_b``: how much ``a`` suffers
from any partner, and how much ``b`` hurts any partner. Fitted on job identities (ridge, every pair), it is
the ceiling of any model that scores a pair from one vector per member and adds the members' parts (and what
adaptation from reference co-runs, :class:`gpupred.slowdown.estimator.SlowdownModel`, approaches as its co-runs grow):
its in-sample R² and Spearman bound that form, and what is left (R² below 1) is pair-specific interaction and
measurement noise.

These are diagnostics of the measured pairs (every pair is used): they never feed a held-out prediction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.colocation.pairtable import log_slowdown
from gpupred.errors import GpupredError


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


def partner_rows(table: pd.DataFrame) -> np.ndarray:
    """For each row of a table of pairs, the position of its partner's row (GpupredError on larger groups)."""
    pos = np.arange(len(table))
    out = np.full(len(table), -1, dtype=np.int64)
    for idx in pd.Series(pos).groupby(table["group_id"].to_numpy()).indices.values():
        if len(idx) != 2:
            raise GpupredError(f"a group of {len(idx)} jobs: the effects model needs pairs")
        out[idx[0]], out[idx[1]] = idx[1], idx[0]
    return out


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
