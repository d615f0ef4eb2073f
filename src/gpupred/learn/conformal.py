"""The one finite-sample conformal quantile every interval half-width of gpupred takes (split-conformal rule).

Given the absolute residuals of ``n`` held-out rows, the half-width that covers a new row with probability at
least ``1 - alpha`` (exchangeable rows) is the ⌈(1 - alpha)(n + 1)⌉-th smallest; with fewer than
⌈1/alpha⌉ - 1 residuals no finite half-width does, and the rule says so (infinity). Used by the memory
intervals (:mod:`gpupred.memory`) and the extrapolated widths (:mod:`gpupred.predictor.extrapolate`); CV+
(:mod:`gpupred.learn.intervals`) takes the same rank over its per-row bounds. :func:`widen` is the one rule by
which an extrapolated interval reaches such a width (the step model's held-out evaluation, the exported predictor).
"""

from __future__ import annotations

import numpy as np


def conformal_quantile(residuals: np.ndarray, alpha: float) -> float:
    """The ⌈(1 - alpha)(n + 1)⌉-th smallest absolute residual (infinite when there are too few)."""
    r = np.sort(np.abs(np.asarray(residuals, dtype=float)))
    k = int(np.ceil((1 - alpha) * (len(r) + 1)))
    return float(r[k - 1]) if 0 < k <= len(r) else float("inf")


def widen(point: np.ndarray, low: np.ndarray, high: np.ndarray, width: float | np.ndarray, rows: np.ndarray,
          log1p: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``low``/``high`` (original scale) widened on ``rows`` to at least ``point`` ×/÷ exp(``width``): in log1p (a
    percentage, floored at 0) or, with ``log1p=False``, in log (a time). ``width``: one value, or one per row."""
    if log1p:
        z = np.log1p(np.clip(point, 0, None))
        return (np.where(rows, np.minimum(low, np.clip(np.expm1(z - width), 0, None)), low),
                np.where(rows, np.maximum(high, np.expm1(z + width)), high))
    return (np.where(rows, np.minimum(low, point * np.exp(-width)), low),
            np.where(rows, np.maximum(high, point * np.exp(width)), high))
