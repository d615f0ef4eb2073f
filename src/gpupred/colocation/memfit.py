"""Whether two jobs fit in one GPU's memory together, and the probability that they do not.

Each member's memory is taken as lognormal around its predicted point, with the spread its prediction
interval implies: ``sigma = log(high / point) / z`` where ``z`` is the standard normal quantile of the
interval's upper end (a central ``level`` interval; the upper side is the one that matters for an
out-of-memory failure). The pair's memory is the sum of two independent lognormals, approximated by one
lognormal with the same mean and variance (Fenton-Wilkinson); the failure probability is the chance it
exceeds the capacity (less a fixed reserve, e.g. a second CUDA context). A pair a scheduler places with
risk at most ``max_risk`` can still fail, but never because the point estimate was optimistic: a point
sum that fits with a wide interval above it is refused.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError


@functools.lru_cache(maxsize=16)
def _upper_z(level: float) -> float:
    """The standard normal quantile of a central ``level`` interval's upper end."""
    from scipy.special import ndtri

    if not 0 < level < 1:
        raise GpupredError(f"interval level {level} must lie in (0, 1)")
    return float(ndtri(0.5 + level / 2))


def log_sigma(point: np.ndarray, high: np.ndarray, level: float = 0.9) -> np.ndarray:
    """Spread of log memory implied by a central ``level`` interval's upper bound (0 where high <= point)."""
    p = np.maximum(np.asarray(point, dtype=float), 1e-9)
    h = np.asarray(high, dtype=float)
    return np.maximum(0.0, np.log(np.maximum(h, p) / p)) / _upper_z(float(level))


def sum_lognormal(point_a: np.ndarray, sigma_a: np.ndarray, point_b: np.ndarray,
                  sigma_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mu, sigma) of the lognormal matching the mean and variance of two independent lognormals' sum.

    Each member's point prediction is its median (``exp(mu)``).
    """
    mean, var = np.zeros(np.broadcast(point_a, point_b).shape), np.zeros(np.broadcast(point_a, point_b).shape)
    for p, s in ((point_a, sigma_a), (point_b, sigma_b)):
        mu, s2 = np.log(np.maximum(np.asarray(p, dtype=float), 1e-9)), np.asarray(s, dtype=float) ** 2
        m = np.exp(mu + s2 / 2)
        mean = mean + m
        var = var + (np.exp(s2) - 1) * m * m
    sigma2 = np.log1p(var / (mean * mean))
    return np.log(mean) - sigma2 / 2, np.sqrt(sigma2)


def pair_oom_probability(point_a: np.ndarray, high_a: np.ndarray, point_b: np.ndarray, high_b: np.ndarray,
                         capacity_mib: float | np.ndarray, level: float = 0.9, reserve_mib: float = 0.0) -> np.ndarray:
    """Probability that two jobs' memory together exceeds ``capacity_mib - reserve_mib`` (predicted points, upper bounds)."""
    from scipy.special import ndtr

    mu, sigma = sum_lognormal(point_a, log_sigma(point_a, high_a, level), point_b, log_sigma(point_b, high_b, level))
    room = np.asarray(capacity_mib, dtype=float) - reserve_mib
    z = (np.log(np.maximum(room, 1e-9)) - mu) / np.where(sigma > 0, sigma, 1.0)
    exact = np.where(np.exp(mu) > room, 1.0, 0.0)  # no spread: the point decides
    return np.where(sigma > 0, ndtr(-z), exact)


def pair_memory_quantile(point_a: np.ndarray, high_a: np.ndarray, point_b: np.ndarray, high_b: np.ndarray,
                         q: float = 0.95, level: float = 0.9) -> np.ndarray:
    """The ``q`` quantile of two jobs' memory together (MiB)."""
    from scipy.special import ndtri

    mu, sigma = sum_lognormal(point_a, log_sigma(point_a, high_a, level), point_b, log_sigma(point_b, high_b, level))
    return np.exp(mu + float(ndtri(q)) * sigma)


def fits_together(point_a: np.ndarray, high_a: np.ndarray, point_b: np.ndarray, high_b: np.ndarray,
                  capacity_mib: float | np.ndarray, max_risk: float = 0.05, level: float = 0.9) -> np.ndarray:
    """Whether each pair fits with an out-of-memory risk of at most ``max_risk``."""
    return pair_oom_probability(point_a, high_a, point_b, high_b, capacity_mib, level) <= max_risk


def group_memory_fit(table: pd.DataFrame, member: pd.DataFrame, capacity_mib: float, level: float = 0.9,
                     max_risk: float = 0.05) -> pd.DataFrame:
    """Per pair of a co-location table: predicted memory sum, its 95 % quantile, P(OOM), the decision, what happened.

    ``member`` is aligned with ``table`` and holds ``mem_mib`` and ``mem_mib_high`` (out-of-fold). ``measured_mib``
    is the pair's measured device memory; ``failed`` whether a member ended out of memory (own sweeps).
    """
    if "mem_mib_high" not in member.columns:
        raise GpupredError("member features lack mem_mib_high (the memory interval's upper bound); run notebook 03")
    d = pd.DataFrame({"group_id": table["group_id"].to_numpy(), "p": member["mem_mib"].to_numpy(float),
                      "h": member["mem_mib_high"].to_numpy(float), "measured_mib": table["group_memory_mib"].to_numpy(float),
                      "oom": (table["status"].astype(str) == "oom").to_numpy()})
    d = d[table["group_size"].to_numpy() == 2]
    first = d.groupby("group_id").nth(0).set_index("group_id")
    second = d.groupby("group_id").nth(1).set_index("group_id").reindex(first.index)
    out = pd.DataFrame({"point_sum_mib": first["p"].to_numpy() + second["p"].to_numpy()}, index=first.index)
    args = (first["p"].to_numpy(), first["h"].to_numpy(), second["p"].to_numpy(), second["h"].to_numpy())
    out["q95_mib"] = pair_memory_quantile(*args, q=0.95, level=level)
    out["p_oom"] = pair_oom_probability(*args, capacity_mib, level)
    out["place"] = out["p_oom"] <= max_risk
    out["measured_mib"] = first["measured_mib"].to_numpy()
    out["failed"] = first["oom"].to_numpy() | second["oom"].to_numpy()
    return out.dropna(subset=["point_sum_mib"]).reset_index()


# What notebook 06 writes of the pair memory fit (gpupred.contracts assembles its contract).
MEMFIT_METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (r"memfit_\w+", "the pair memory fit: coverage of the predicted quantile and the OOM pairs it would place"),
)
