"""The slowdown estimator a predictor serves, and what its interval is based on.

Notebook 08 attaches one to each artifact (:func:`attach_slowdown`) from notebook 06's choice
(:mod:`gpupred.colocation.served`): the zero-parameter time-sharing prior from the members' predicted GPU-busy
fractions (``gpu_util / 100``), ``s_a = 1 + b_a q_b`` (:mod:`gpupred.slowdown.physics`), with its 90 % interval the
central quantiles of its held-out ``log(measured / predicted)`` on the slice notebook 06 scored it on. The default,
licence-clean predictor holds no co-located measurement of its own: the prior has no parameter to train, and its
interval is a held-out figure of notebook 06, measured where it was scored (the card names the slice and GPU). A
learned correction ships only where notebook 06's choice says it beat the prior in every cell (it never has: the
prior ships, in both artifacts).

An artifact exported before this existed has no slowdown estimator: :func:`served_of` then falls back to the same
prior, which needs no fitted state, with no interval (no held-out width travels with it), and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

FALLBACK = "fallback"  # the prior without notebook 06's figures: an artifact exported without a slowdown estimator
SHIPPED = "artifact"
PRIOR_CLASSES: dict[str, tuple[str, str]] = {  # the estimator class notebook 06 names -> (its input column, the unit)
    "TimeSharing": ("busy_pred", "fraction"), "SummedUtilization": ("util_pred", "percent"),
}


@dataclass
class ServedSlowdown:
    """A zero-parameter slowdown prior and, when notebook 06 scored it, its held-out figures and interval widths."""

    choice: dict[str, Any] = field(default_factory=dict)  # notebook 06's choice, {} for the fallback
    source: str = FALLBACK  # SHIPPED (in the artifact) or FALLBACK
    variant: str = ""  # "default" or "noncommercial"

    @property
    def name(self) -> str:
        """The estimator's name in notebook 06 (``timeshare_pred``)."""
        return str(self.choice.get("estimator", {}).get("name", "timeshare_pred"))

    @property
    def class_name(self) -> str:
        """The :mod:`gpupred.slowdown.estimator` class it is."""
        return str(self.choice.get("estimator", {}).get("class", "TimeSharing"))

    def estimator(self) -> Any:
        """The :class:`gpupred.slowdown.estimator.SlowdownEstimator` (built on use: nothing fitted is pickled)."""
        from gpupred.slowdown import estimator as kinds

        column, _ = PRIOR_CLASSES[self.class_name]
        return getattr(kinds, self.class_name)(column)

    def inputs(self, util: np.ndarray) -> dict[str, np.ndarray]:
        """The estimator's member inputs from predicted GPU utilization (%)."""
        u = np.asarray(util, dtype=float)
        return {"busy_pred": np.clip(u / 100.0, 0.0, 1.0), "util_pred": u}

    def width(self, k: int = 0) -> tuple[float, float] | None:
        """``(log_low, log_high)`` of the held-out interval with ``k`` reference co-runs per member (0: the prior);
        None where notebook 06 measured none."""
        if not self.choice:
            return None
        if k > 0:
            by_k = self.choice.get("adaptation", {}).get("by_k", {})
            known = sorted(int(x) for x in by_k if int(x) > 0)
            if not known:
                return None
            q = by_k[str(max(x for x in known if x <= k) if any(x <= k for x in known) else known[0])]
        else:
            q = self.choice.get("interval", {})
        lo, hi = q.get("log_low"), q.get("log_high")
        return (float(lo), float(hi)) if lo is not None and hi is not None and np.isfinite([lo, hi]).all() else None

    def level(self) -> float | None:
        """The nominal level of the interval (0.9), None without one."""
        return float(self.choice["interval"]["level"]) if self.choice.get("interval") else None

    def adaptation_variances(self) -> tuple[float, float, float] | None:
        """(noise, sensitivity, aggressiveness) variances for shrinking co-run residuals; None without them."""
        c = self.choice.get("adaptation", {})
        keys = ("noise_var", "sens_var", "aggr_var")
        return tuple(float(c[k]) for k in keys) if all(c.get(k) is not None for k in keys) else None  # type: ignore

    def basis(self, k: int = 0) -> str:
        """One line: what the interval is based on (or that there is none)."""
        if not self.choice:
            why = ("this predictor was exported without a slowdown estimator" if self.source == FALLBACK else
                   "notebook 06 had scored no slice of graph jobs when this predictor was exported")
            return (f"no interval: {why}, so it carries no held-out width (re-export with notebook 08 after notebook "
                    "06); the point is the zero-parameter time-sharing prior")
        c = self.choice
        q = c["interval"] if k <= 0 else c["adaptation"]["by_k"].get(str(k), c["interval"])
        what = "the prior" if k <= 0 else f"adaptation with {k} reference co-runs"
        return (f"central {c['interval']['level']:.0%} of held-out log(measured/predicted) of {what}, {q.get('rows', 0)} "
                f"member rows of {c['label']} ({c['gpu']}), held out by model group (notebook 06); other GPUs unmeasured")

    def predict(self, util_own: np.ndarray, util_partner: np.ndarray) -> np.ndarray:
        """The slowdown of each own job beside its partner, from predicted utilizations (%)."""
        return self.estimator().predict(self.pair_frame(util_own, util_partner))

    def pair_frame(self, util_own: np.ndarray, util_partner: np.ndarray, own: Any = None,
                   partner: Any = None) -> pd.DataFrame:
        """A pair frame (own and partner inputs, job keys where given) as the estimators read it."""
        import pandas as pd

        a, b = self.inputs(util_own), self.inputs(util_partner)
        n = len(np.atleast_1d(util_own))
        frame = pd.DataFrame({f"{side}_{c}": np.atleast_1d(v[c]) for side, v in (("own", a), ("partner", b)) for c in v})
        frame["job_key"] = own if own is not None else [""] * n
        frame["partner_key"] = partner if partner is not None else [""] * n
        return frame

    def describe(self) -> dict[str, Any]:
        """What the card says of it: estimator, where it was scored, held-out figures and interval, adaptation."""
        if not self.choice:
            return {"estimator": {"name": "timeshare_pred", "class": "TimeSharing"}, "source": self.source,
                    "interval": None, "basis": self.basis()}
        c = self.choice
        return {"estimator": c["estimator"], "source": self.source, "scored_on": {"slice": c["slice"], "label": c["label"],
                                                                                  "gpu": c["gpu"]},
                "trained_on": "nothing: a zero-parameter prior from the members' predicted GPU utilization",
                "heldout": c["heldout"], "interval": c["interval"], "correction": c["correction"],
                "adaptation": c["adaptation"], "other_priors": c["other_priors"], "basis": self.basis()}


def served_slowdown(choice: dict[str, Any] | None, variant: str) -> ServedSlowdown:
    """The estimator an artifact ships, from notebook 06's choice (None: the prior, with no interval)."""
    if choice is None:
        return ServedSlowdown({}, SHIPPED, variant)
    from gpupred.errors import GpupredError

    if choice.get("estimator", {}).get("class") not in PRIOR_CLASSES:
        raise GpupredError(f"slowdown choice: {choice.get('estimator')} is not a prior a predictor serves")
    return ServedSlowdown(dict(choice), SHIPPED, variant)


def attach_slowdown(predictor: Any, choice: dict[str, Any] | None, variant: str) -> Any:
    """Attach the served slowdown estimator to a predictor before it is exported (notebook 08); return it."""
    predictor.slowdown_ = served_slowdown(choice, variant)
    return predictor


def served_of(predictor: Any) -> ServedSlowdown:
    """The predictor's slowdown estimator, or the zero-parameter prior (no interval) when it was exported without."""
    served = predictor.__dict__.get("slowdown_")
    return served if isinstance(served, ServedSlowdown) else ServedSlowdown({}, FALLBACK, "")
