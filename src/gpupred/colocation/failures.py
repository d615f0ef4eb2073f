"""Which pairs fail to run together where no memory was recorded: the reference co-runs as a memory probe.

Gavel's matrix records failed co-runs (zero throughput) but no memory, so the memory intervals that decide whether a
pair fits (:mod:`gpupred.colocation.memfit`) have nothing to start from. A failure there is a pair whose memory sum
exceeds the GPU's; the reference jobs bracket a new job's size from its co-runs with them: a job that failed beside
a reference is larger than the room that reference leaves, one that ran beside every reference is not. The rule
(:class:`FailureModel`), with ``P`` the failure probability a scheduler caps:

- a pair measured together (a training pair, or a job's own co-run with a reference) fails as measured;
- otherwise ``P = 1`` when either job failed beside one of its reference co-runs (too large to share safely),
  else ``P`` = the failure rate of the training pairs of jobs that never failed beside a reference job.

A first form, ``P = sigmoid(c + z_a + z_b)`` by logistic regression on job identities with each new job's ``z``
adapted on its co-runs, was tried on Gavel's V100 world and replaced (after seeing it): held out by model group
its probabilities ranked failed pairs at AUC 0.75 and left 32 of 40 failed ordered pairs under a 5 % cap, because a
few failure events cannot teach an additive logit how large the heaviest jobs are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.learn.params import Estimator


class FailureModel(Estimator):
    """Pair failure probabilities from measured outcomes and reference co-runs (see the module doc)."""

    def __init__(self, refs: tuple[str, ...] = ()) -> None:
        self.refs = refs

    def fit(self, X: pd.DataFrame, failed: np.ndarray | None = None) -> FailureModel:
        """Record the training pairs' outcomes (``failed``: per row of the pair frame ``X``; default its column)."""
        f = np.asarray(X["failed"] if failed is None else failed, dtype=bool)
        self.outcome_: dict[tuple[str, str], bool] = {}
        for a, b, v in zip(X["job_key"].astype(str), X["partner_key"].astype(str), f):
            self.outcome_[(a, b)] = self.outcome_[(b, a)] = bool(v)
        refs = set(self.refs)
        large = {a for (a, b), v in self.outcome_.items() if v and b in refs}
        rest = [v for (a, b), v in self.outcome_.items() if a not in large and b not in large]
        self.base_rate_ = float(np.mean(rest)) if rest else 0.0
        self.large_: set[str] = large
        self.adapted_: dict[str, int] = {}
        return self

    def adapt(self, job: str, coruns: pd.DataFrame) -> FailureModel:
        """Record ``job``'s co-runs with reference jobs and whether it failed beside any of them."""
        rows = coruns[(coruns["job_key"] == job) & coruns["partner_key"].isin(set(self.refs) - {job})]
        failed = rows["failed"].to_numpy(bool)
        for partner, v in zip(rows["partner_key"].astype(str), failed):
            self.outcome_[(job, partner)] = self.outcome_[(partner, job)] = bool(v)
        if failed.any():
            self.large_.add(job)
        else:
            self.large_.discard(job)
        self.adapted_[job] = int(len(rows))
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        """Probability that each row's pair fails (see the module doc)."""
        out = np.empty(len(X))
        for i, (a, b) in enumerate(zip(X["job_key"].astype(str), X["partner_key"].astype(str))):
            known = self.outcome_.get((a, b))
            if known is not None:
                out[i] = float(known)
            else:
                out[i] = 1.0 if (a in self.large_ or b in self.large_) else self.base_rate_
        return out
