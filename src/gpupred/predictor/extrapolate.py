"""How wide a prediction's interval must be on a GPU the predictor has no measurements on.

CV+ intervals (:mod:`gpupred.learn.intervals`) are calibrated on unseen *workloads* of the GPUs in the
training data. On a GPU with no measurements the error is larger and of another kind, so such a prediction
is marked extrapolated and its interval is widened to at least ``point ± width`` on the log1p scale, where
``width`` is measured by holding data out the way extrapolation does:

- **leave one GPU kind out** when the training data hold two or more kinds: fit on the other kinds, take
  the conformal ``1 - alpha`` quantile (:func:`gpupred.learn.conformal.conformal_quantile`) of the held-out
  kind's absolute log residuals, and keep the widest
  kind (the worst transfer seen, not an average that the largest source would dominate);
- **leave one family out** when they hold a single kind: the only shift those data can measure (residuals
  pooled over the held-out families, each too small for a quantile of its own). The true cross-GPU error is
  then not measured at all, and the card says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpupred.learn.conformal import conformal_quantile
from gpupred.learn.folds import sibling_group

BASIS_GPU = "leave-one-GPU-kind-out"
BASIS_FAMILY = ("leave-one-family-out (one GPU kind in the training data: the cross-GPU error itself is not "
                "measured, and is likely larger)")


@dataclass(frozen=True)
class UnseenGpuWidth:
    """The half-width (log1p scale) of an extrapolated interval, and how it was measured."""

    width: float
    basis: str
    n_held_out: int  # GPU kinds or family groups held out

    def describe(self) -> str:
        """One line for the card."""
        return (f"at least ±{self.width:.3f} on the log1p scale (×{np.exp(self.width):.2f}), the conformal quantile "
                f"of {self.basis} residuals over {self.n_held_out} held-out groups")


def held_out_residuals(model: object, X: np.ndarray, z: np.ndarray, groups: np.ndarray) -> dict[str, np.ndarray]:
    """Per group: the log1p residuals of its rows under ``model`` fitted on the other groups' rows."""
    from sklearn.base import clone

    out = {}
    for g in np.unique(groups):
        test = groups == g
        if test.all():
            continue
        fitted = clone(model).fit(X[~test], z[~test])
        out[str(g)] = z[test] - np.asarray(fitted.predict(X[test]), dtype=float)
    return out


def unseen_gpu_width(model: object, X: np.ndarray, y: np.ndarray, gpu_kinds: np.ndarray, families: np.ndarray,
                     alpha: float) -> UnseenGpuWidth:
    """The extrapolated-interval half-width for one target, from the training rows (see the module docstring).

    Held-out GPU kinds are large enough for a quantile each, and the widest is kept; held-out families are too
    small for that (a handful of runs each), so their residuals are pooled.
    """
    z = np.log1p(np.asarray(y, dtype=float))
    kinds = np.asarray(gpu_kinds).astype(str)
    if len(np.unique(kinds)) >= 2:
        residuals = held_out_residuals(model, X, z, kinds)
        per_kind = [q for q in (conformal_quantile(r, alpha) for r in residuals.values()) if np.isfinite(q)]
        pooled = conformal_quantile(np.concatenate(list(residuals.values())), alpha)
        return UnseenGpuWidth(max(per_kind) if per_kind else pooled, BASIS_GPU, len(residuals))
    residuals = held_out_residuals(model, X, z, np.asarray([sibling_group(str(f)) for f in families]))
    pooled = np.concatenate(list(residuals.values())) if residuals else np.empty(0)
    return UnseenGpuWidth(conformal_quantile(pooled, alpha), BASIS_FAMILY, len(residuals))
