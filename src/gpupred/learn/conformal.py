"""The one finite-sample conformal quantile every interval half-width of gpupred takes (split-conformal rule).

Given the absolute residuals of ``n`` held-out rows, the half-width that covers a new row with probability at
least ``1 - alpha`` (exchangeable rows) is the ⌈(1 - alpha)(n + 1)⌉-th smallest; with fewer than
⌈1/alpha⌉ - 1 residuals no finite half-width does, and the rule says so (infinity). Used by the memory
intervals (:mod:`gpupred.memory`) and the extrapolated widths (:mod:`gpupred.predictor.extrapolate`); CV+
(:mod:`gpupred.learn.intervals`) takes the same rank over its per-row bounds.
"""

from __future__ import annotations

import numpy as np


def conformal_quantile(residuals: np.ndarray, alpha: float) -> float:
    """The ⌈(1 - alpha)(n + 1)⌉-th smallest absolute residual (infinite when there are too few)."""
    r = np.sort(np.abs(np.asarray(residuals, dtype=float)))
    k = int(np.ceil((1 - alpha) * (len(r) + 1)))
    return float(r[k - 1]) if 0 < k <= len(r) else float("inf")
