"""Scheduling policies: slot-based, reactive (profile, then pack), Horus (its published cost), random pairing and ours.

Shared rules (every policy, unless its definition below says otherwise):

- one FIFO queue with the same look-ahead (``lookahead`` jobs from the head may start out of order when
  the ones ahead of them cannot start);
- a job goes to an empty GPU or next to exactly one *running* job (pairs only);
- memory: a job may join a GPU only where the memory the policy believes in (its ``view``: predicted,
  upper bound, or measured) fits the capacity; the simulator checks the true memory and counts an OOM.

Definitions:

- **slot**: one job per GPU, FIFO (Kubernetes' device plugin). Never packs, so it needs no knowledge.
- **reactive**: each new job first runs alone for ``profile_s`` (one minute) on an empty GPU, which
  measures its solo utilization and memory; then it is packed next to a measured running job when the
  measured utilizations sum to at most ``util_cap`` and the measured memory fits, else it runs alone. A
  job whose observed slowdown exceeds ``migrate_slowdown`` after ``observe_s`` is moved off (paying
  ``migration_cost_s``) and runs alone from then on (Gandiva-style introspection).
- **horus**: predicted (point) utilization and memory; each fitting GPU costs
  ``1.3 x (used-memory fraction + job memory / capacity) + u / 100 + jobs running there`` with
  ``u = |GPU util + job util - 100|``, times 1.6 when the sum exceeds 100 (the authors' public simulator,
  ``matthewygf/GPUSchedule``, ``core/scheduling/horus.py``); the cheapest GPU wins. With ``classes``
  (k-means on predicted utilization and memory, fitted on a *separate history*, never the scheduled
  trace) it serves per-class queues by weighted fair queueing (weight: median wait x queue length), as
  the paper describes; without, the shared FIFO queue.
- **random**: Horus's queue and memory view; an empty GPU when one fits (as Horus's cost always picks), else a
  uniformly random running partner whose predicted memory fits (seeded): partner choice at its worst informed.
- **ours**: Horus's policy -- the same queues and the same cost on the same predicted utilization and memory --
  with three changes, each resting on a prediction: (1) a *hard* memory fit: a partner is allowed only when the
  pair's predicted out-of-memory probability from the memory intervals
  (:func:`gpupred.colocation.memfit.pair_oom_probability`) is at most ``max_oom_risk``, and (where failures were
  modelled, :class:`gpupred.colocation.failures.FailureModel`) its predicted failure probability at most ``max_fail``;
  an empty GPU needs its upper-bound memory to fit; (2) refusal: a partner whose predicted throughput gain
  :func:`pair_gain`, ``1/s_ab + 1/s_ba - 1``, is at most ``min_gain`` (0: sharing would lose combined throughput)
  is not a candidate; (3) complementarity: among the candidates it minimizes Horus's cost minus ``weight`` x the
  predicted gain (0 for an empty GPU), so partners whose slowdowns on each other are small win; ``weight`` is
  chosen on a tuning slice. With perfect knowledge (the measured matrix as its predictions) it is the *oracle*
  pairing.
- Heterogeneous GPUs: an empty GPU is the fastest one where the job fits in the policy's memory view, the
  smallest of those on a tie
  (slot knows no memory; reactive only after profiling; after an OOM alone every policy knows the job
  needs a larger GPU).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from gpupred.errors import GpupredError
from gpupred.sim.cluster import EV_CHECK, EV_PROFILE, PROFILING, RUNNING, PredictedSlowdown, Simulator

HORUS_MEMCOST = 1.3  # weight of the memory term (horus.py: MEMCOST)
HORUS_UTILCOST = 1.6  # multiplier of the utilization term above 100 % (horus.py: UTILCOST)


class Policy:
    """A FIFO scheduler with a look-ahead; subclasses say where a job may go (``choose``)."""

    name = "policy"
    view = "pred"  # which knowledge of memory/utilization the policy uses: "pred", "high" or "measured"

    def __init__(self, lookahead: int = 8) -> None:
        self.lookahead = lookahead
        self.sim: Simulator | None = None
        self.queue: deque[int] = deque()
        self._failed_at: dict[int, int] = {}
        self._by_preference = np.zeros(0, dtype=np.int64)  # set by attach
        self._cap_by_preference = np.zeros(0)

    def attach(self, sim: Simulator) -> None:
        """Bind to a simulator before its run."""
        self.sim = sim
        self.queue = deque()
        self._failed_at = {}
        # the GPUs in the order an empty one is preferred (fastest, then smallest, then lowest index: lexsort is
        # stable), and their capacities in that order; a simulator's GPUs never change
        self._by_preference = np.lexsort((sim.cap, -sim.speed))
        self._cap_by_preference = sim.cap[self._by_preference]

    def knowledge(self) -> dict[str, np.ndarray]:
        """The slowdown matrices this policy decides with (the simulator refuses copies of its truth)."""
        return {}

    def submit(self, j: int) -> None:
        """A job arrives."""
        self.queue.append(j)

    def pending(self) -> int:
        """How many jobs wait."""
        return len(self.queue)

    def on_free(self, g: int) -> None:
        """A job finished on GPU ``g``."""

    def on_profile_end(self, j: int) -> None:
        """Job ``j``'s profiling window ended (its measurements are in ``known_*["measured"]``)."""

    def on_check(self, g: int, j: int) -> None:
        """A delayed check of GPU ``g`` after job ``j`` joined it."""

    # --- helpers ---------------------------------------------------------------------------------
    def _full(self) -> bool:
        return self.sim.open_gpus == 0

    def fit_mib(self, j: int) -> float:
        """The memory this policy believes job ``j`` needs (its view; 0 where unknown; at least what an OOM showed).

        A belief above every GPU's capacity is capped at the largest GPU: a job is never refused by every GPU.
        """
        sim = self.sim
        known = sim.known_mem.get(self.view)
        v = float(known[j]) if known is not None else 0.0
        return min(max(0.0 if math.isnan(v) else v, float(sim.need_mib[j])), float(sim.cap.max()))

    def _empty_gpu(self, j: int) -> int:
        """An empty GPU where ``j`` fits in this policy's view: the fastest, then the smallest (lowest index on ties); or -1."""
        order = self._by_preference
        ok = (self.sim.gpu_n[order] == 0) & (self._cap_by_preference >= self.fit_mib(j))
        first = int(ok.argmax())
        return int(order[first]) if ok[first] else -1

    def _running_mates(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """GPUs holding exactly one running, packable job that ``j`` may join (and those jobs), memory unchecked."""
        sim = self.sim
        if sim.no_pack[j] or sim.cluster.max_per_gpu < 2:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        gpus = np.flatnonzero(sim.mate >= 0)
        mates = sim.mate[gpus]
        ok = (~sim.no_pack[mates]) & (sim.state[mates] == RUNNING)
        return gpus[ok], mates[ok]

    def _mates(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """GPUs holding exactly one running, packable job whose believed memory fits beside ``j`` (and those jobs)."""
        gpus, mates = self._running_mates(j)
        ok = self.pair_fits(j, mates, self.sim.cap[gpus])
        return gpus[ok], mates[ok]

    def pair_fits(self, j: int, mates: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Whether ``j`` fits beside each of ``mates`` on GPUs of capacity ``cap``, in this policy's memory view."""
        sim = self.sim
        mem = sim.known_mem[self.view] if self.view in sim.known_mem else np.zeros(sim.n)
        return mem[mates] + max(float(mem[j]), float(sim.need_mib[j])) <= cap

    def choose(self, j: int) -> int:
        """The GPU for job ``j`` now, or -1 to keep it waiting."""
        raise NotImplementedError

    def after_place(self, j: int, g: int, shared: bool) -> None:
        """Hook after job ``j`` started on GPU ``g``."""

    def _try(self, j: int) -> bool | None:
        """Place ``j`` if a GPU suits it: True placed, False OOM (requeued), None nothing suits."""
        sim = self.sim
        if self._failed_at.get(j) == sim.freed:
            return None  # no job left any GPU since it last found none: it cannot find one now
        g = self.choose(j)
        if g < 0:
            self._failed_at[j] = sim.freed
            return None
        self._failed_at.pop(j, None)
        shared = bool(sim.gpu_n[g] > 0)
        if not sim.place(j, g, self.view, profiling=self._profiling(j)):
            sim.requeue(j)
            return False
        self.after_place(j, g, shared)
        return True

    def _profiling(self, j: int) -> bool:
        return False

    def needs_empty(self, j: int) -> bool:
        """Whether job ``j`` can only go to an empty GPU now."""
        return bool(self.sim.no_pack[j]) or self.sim.cluster.max_per_gpu < 2 or self._profiling(j)

    def _skip(self, j: int) -> bool:
        """Cheap test: ``j`` needs an empty GPU and there is none (placements never create one)."""
        return self.needs_empty(j) and self.sim.empty_gpus == 0

    def _serve(self, q: deque[int]) -> bool:
        """Start the first job among the first ``lookahead`` of ``q`` that finds a GPU; whether one started."""
        i = 0
        while i < min(len(q), self.lookahead):
            j = q[i]
            outcome = None if self._skip(j) else self._try(j)
            if outcome:
                del q[i]
                return True
            if outcome is False:
                continue  # an OOM taught the job something (never-pack, or a larger GPU): it tries again at once
            i += 1  # nothing suits
        return False

    def schedule(self) -> None:
        """Start whatever waiting jobs fit now (FIFO with look-ahead)."""
        while self.queue and not self._full() and self._serve(self.queue):
            pass


class SlotPolicy(Policy):
    """One job per GPU (Kubernetes-like device plugin): FIFO onto empty GPUs."""

    name = "slot"
    view = "none"  # knows nothing of memory: an empty GPU of any size (until an OOM shows the job needs more)

    def choose(self, j: int) -> int:
        """An empty GPU, or wait."""
        return self._empty_gpu(j)



class ReactivePolicy(Policy):
    """Profile each job alone for ``profile_s``, then pack by measured utilization; migrate on high slowdown."""

    name = "reactive"
    view = "measured"

    def __init__(self, profile_s: float = 60.0, util_cap: float = 100.0, migrate_slowdown: float = 1.5,
                 observe_s: float = 60.0, migration_cost_s: float = 10.0, lookahead: int = 8) -> None:
        super().__init__(lookahead)
        self.profile_s = profile_s
        self.util_cap = util_cap
        self.migrate_slowdown = migrate_slowdown
        self.observe_s = observe_s
        self.migration_cost_s = migration_cost_s

    def _profiling(self, j: int) -> bool:
        return not self.sim.profiled[j] and self.profile_s > 0

    def choose(self, j: int) -> int:
        """Unprofiled: an empty GPU. Profiled: the best-filling measured partner within the cap, else an empty GPU."""
        sim = self.sim
        if self._profiling(j):
            return self._empty_gpu(j)
        gpus, mates = self._mates(j)
        if len(gpus):
            u = sim.known_util["measured"][mates] + sim.known_util["measured"][j]
            ok = u <= self.util_cap  # NaN (never measured) is not <= anything
            if ok.any():
                return int(gpus[ok][np.argmax(u[ok])])
        return self._empty_gpu(j)

    def after_place(self, j: int, g: int, shared: bool) -> None:
        """Start the profiling clock, or the interference watch on a shared GPU."""
        sim = self.sim
        if sim.state[j] == PROFILING:
            sim.push(sim.now + self.profile_s, EV_PROFILE, j, int(sim.placements[j]))
        elif shared:
            sim.push(sim.now + self.observe_s, EV_CHECK, g, j)

    def on_profile_end(self, j: int) -> None:
        """Measured: leave the profiling GPU and queue (at the head) for packing."""
        sim = self.sim
        sim.remove(j)
        sim.requeue(j)
        self.queue.appendleft(j)

    def on_check(self, g: int, j: int) -> None:
        """Migrate ``j`` off ``g`` if the pair still shares it and its observed slowdown crossed the threshold."""
        sim = self.sim
        if sim.gpu_of[j] != g or sim.gpu_n[g] < 2 or sim.observed_slowdown(g) <= self.migrate_slowdown:
            return
        sim.remove(j)
        sim.migrations[j] += 1
        sim.n_migrations += 1
        sim.no_pack[j] = True
        sim.requeue(j, self.migration_cost_s)
        self.queue.appendleft(j)


def horus_cost(gpu_util: np.ndarray, gpu_mem_frac: np.ndarray, n_jobs: np.ndarray, job_util: float,
               job_mem_frac: float | np.ndarray) -> np.ndarray:
    """Horus's placement cost of a job on each GPU (see the module doc); lower is better."""
    over = np.asarray(gpu_util, dtype=float) + job_util - 100.0
    util_cost = np.where(over > 0, over * HORUS_UTILCOST, -over)
    return HORUS_MEMCOST * (np.asarray(gpu_mem_frac, dtype=float) + job_mem_frac) + util_cost / 100.0 + n_jobs


@dataclass
class HorusClasses:
    """Job classes for Horus's fair queueing: k-means centres on (util / 100, log1p(memory MiB) / 10)."""

    centers: np.ndarray

    @staticmethod
    def _x(util: np.ndarray, mem: np.ndarray) -> np.ndarray:
        return np.column_stack([np.asarray(util, float) / 100.0, np.log1p(np.maximum(np.asarray(mem, float), 0.0)) / 10.0])

    @classmethod
    def fit(cls, util: np.ndarray, mem: np.ndarray, k: int = 3, seed: int = 0) -> HorusClasses:
        """Fit on a history's predicted utilization and memory (never the trace to be scheduled)."""
        from sklearn.cluster import KMeans

        x = cls._x(util, mem)
        k = int(min(k, len(np.unique(x, axis=0))))
        if k < 1:
            raise GpupredError("Horus classes need a non-empty history")
        if k == 1:
            return cls(x.mean(axis=0, keepdims=True))
        return cls(KMeans(n_clusters=k, n_init=3, random_state=seed).fit(x).cluster_centers_)

    def assign(self, util: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """The class of each job (nearest centre)."""
        x = self._x(util, mem)
        return np.argmin(((x[:, None, :] - self.centers[None, :, :]) ** 2).sum(axis=2), axis=1).astype(np.int64)


class HorusPolicy(Policy):
    """Horus: predicted util/memory, the published cost, cheapest GPU; per-class fair queues when given classes."""

    name = "horus"
    view = "pred"

    def __init__(self, classes: HorusClasses | None = None, lookahead: int = 8) -> None:
        super().__init__(lookahead)
        self.classes = classes
        self.queues: list[deque[int]] = []
        self.cls = np.zeros(0, dtype=np.int64)

    def attach(self, sim: Simulator) -> None:
        """Assign every job its class (from centres fitted on a separate history)."""
        super().attach(sim)
        if self.classes is None:
            self.cls = np.zeros(sim.n, dtype=np.int64)
            self.queues = [self.queue]
        else:
            self.cls = self.classes.assign(sim.known_util["pred"], sim.known_mem["pred"])
            self.queues = [deque() for _ in range(len(self.classes.centers))]

    def submit(self, j: int) -> None:
        """Queue the job in its class."""
        self.queues[self.cls[j]].append(j)

    def pending(self) -> int:
        """Jobs waiting in all classes."""
        return sum(len(q) for q in self.queues)

    def candidates(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """The GPUs ``j`` may take now and the job on each (-1: the empty GPU :meth:`Policy._empty_gpu` picks, first),
        beside every running partner whose memory fits in this policy's view."""
        gpus, mates = self._mates(j)
        empty = self._empty_gpu(j)
        if empty >= 0:
            gpus, mates = np.append(empty, gpus), np.append(-1, mates)
        return gpus.astype(np.int64), mates.astype(np.int64)

    def cost(self, j: int, gpus: np.ndarray, mates: np.ndarray) -> np.ndarray:
        """Horus's cost of each candidate, from predicted (point) utilization and memory."""
        sim = self.sim
        util, mem = sim.known_util["pred"], sim.known_mem["pred"]
        shared = mates >= 0
        mate = np.where(shared, mates, 0)
        cap = sim.cap[gpus]
        return horus_cost(np.where(shared, util[mate], 0.0), np.where(shared, mem[mate], 0.0) / cap,
                          shared.astype(float), float(util[j]), float(mem[j]) / cap)

    def score(self, j: int, gpus: np.ndarray, mates: np.ndarray) -> np.ndarray:
        """What :meth:`choose` minimizes over the candidates (Horus: its cost)."""
        return self.cost(j, gpus, mates)

    def choose(self, j: int) -> int:
        """The candidate of lowest :meth:`score` (an empty GPU, or one beside a running partner), or -1."""
        gpus, mates = self.candidates(j)
        if not len(gpus):
            return -1
        return int(gpus[int(np.argmin(self.score(j, gpus, mates)))])

    def schedule(self) -> None:
        """Serve the queues (one: FIFO; per class: highest weight first) until none can start a job."""
        sim = self.sim
        while not self._full():
            live = [q for q in self.queues if q]
            if not live:
                return
            if len(live) > 1:
                now = sim.now
                weights = np.array([((now - sim.arrival[q[len(q) // 2]]) + 1e-9) * len(q) for q in live])
                live = [live[i] for i in np.argsort(-weights, kind="stable")]
            if not any(self._serve(q) for q in live):
                return


class RandomPairPolicy(HorusPolicy):
    """Horus's queue and memory view, but the partner drawn at random: an empty GPU when one fits, else a uniformly
    random running partner whose predicted memory fits (seeded). The lower bound of partner choice."""

    name = "random"

    def __init__(self, classes: HorusClasses | None = None, lookahead: int = 8, seed: int = 0) -> None:
        super().__init__(classes, lookahead)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def attach(self, sim: Simulator) -> None:
        """Bind and restart the partner draws from the seed."""
        super().attach(sim)
        self.rng = np.random.default_rng(self.seed)

    def choose(self, j: int) -> int:
        """An empty GPU if one fits, else a random fitting partner's GPU, else -1."""
        gpus, mates = self.candidates(j)
        if not len(gpus):
            return -1
        if mates[0] < 0:
            return int(gpus[0])
        return int(gpus[int(self.rng.integers(len(gpus)))])


def pair_gain(s_ab: np.ndarray, s_ba: np.ndarray) -> np.ndarray:
    """Throughput gained by sharing a GPU instead of running one job after the other: ``1/s_ab + 1/s_ba - 1``.

    Slowdowns below 1 count as 1; a pair without a prediction (NaN) gains ``-inf`` (never packed).
    """
    a, b = np.maximum(1.0, np.asarray(s_ab, dtype=float)), np.maximum(1.0, np.asarray(s_ba, dtype=float))
    gain = 1.0 / a + 1.0 / b - 1.0
    return np.where(np.isfinite(gain), gain, -np.inf)


class OursPolicy(HorusPolicy):
    """Horus's queue and cost, plus a hard memory fit, refusal of predicted losing pairs, and complementarity."""

    name = "ours"
    view = "high"

    def __init__(self, predicted: PredictedSlowdown, classes: HorusClasses | None = None, weight: float = 1.0,
                 min_gain: float = 0.0, max_oom_risk: float = 0.05, max_fail: float = 0.05, interval_level: float = 0.9,
                 lookahead: int = 8) -> None:
        super().__init__(classes, lookahead)
        if not isinstance(predicted, PredictedSlowdown):
            raise GpupredError(f"ours needs a PredictedSlowdown (held-out predictions), got {type(predicted).__name__}")
        self.predicted = predicted
        self.weight = weight
        self.min_gain = min_gain
        self.max_oom_risk = max_oom_risk
        self.max_fail = max_fail
        self.interval_level = interval_level
        self._gain = np.zeros(0)
        self._kind_gain = np.zeros((0, 0))  # per workload pair, set by attach: the predicted gain and whether it passes
        self._kind_passes = np.zeros((0, 0), dtype=bool)

    def attach(self, sim: Simulator) -> None:
        """Bind, and tabulate per workload pair the predicted gain of sharing and whether a pair passes the gain and
        failure bounds, read once through the predictions' own readers (one job of each workload stands for it): each
        decision then looks its pairs up."""
        super().attach(sim)
        predicted = self.predicted
        present, first = np.unique(predicted.kind, return_index=True)
        a, b = np.repeat(first, len(first)), np.tile(first, len(first))
        gain = pair_gain(predicted.pair(a, b), predicted.pair(b, a))
        passes = (gain > self.min_gain) & (predicted.fail_probability(a, b) <= self.max_fail)
        size = int(present.max()) + 1 if len(present) else 0
        cells = np.ix_(present, present)
        self._kind_gain = np.full((size, size), -np.inf)
        self._kind_gain[cells] = gain.reshape(len(present), len(present))
        self._kind_passes = np.zeros((size, size), dtype=bool)
        self._kind_passes[cells] = passes.reshape(len(present), len(present))

    def knowledge(self) -> dict[str, np.ndarray]:
        """The predicted slowdown matrices (point and upper bound)."""
        return {"point": self.predicted.point, "upper-bound": self.predicted.high}

    def oom_risk(self, j: int, mates: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Predicted probability that ``j`` beside each of ``mates`` overflows GPUs of capacity ``cap`` (0 where no
        memory is known at all, as for Gavel's job types)."""
        from gpupred.colocation.memfit import pair_oom_probability

        sim = self.sim
        point, high = sim.known_mem["pred"], sim.known_mem["high"]
        if not len(mates) or (high[j] <= 0 and not (high[mates] > 0).any()):
            return np.zeros(len(mates))
        return pair_oom_probability(np.full(len(mates), max(point[j], sim.need_mib[j])), np.full(len(mates), high[j]),
                                    point[mates], high[mates], cap, self.interval_level)

    def candidates(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """An empty GPU where ``j``'s upper-bound memory fits, and every running partner that passes the hard memory fit
        (pair OOM probability <= ``max_oom_risk``), the failure cap (<= ``max_fail``) and gains more than ``min_gain``."""
        gpus, mates = self._running_mates(j)
        empty = self._empty_gpu(j)
        if not len(mates):
            self._gain = np.zeros(1 if empty >= 0 else 0)
            return (np.array([empty]), np.array([-1])) if empty >= 0 else (gpus, mates)
        kind = self.predicted.kind
        mine, theirs = kind[j], kind[mates]
        ok = self._kind_passes[mine, theirs]  # gain > min_gain and failure probability <= max_fail (see attach)
        gpus, mates, gain = gpus[ok], mates[ok], self._kind_gain[mine, theirs[ok]]
        fits = self.oom_risk(j, mates, self.sim.cap[gpus]) <= self.max_oom_risk  # the costlier test, on fewer partners
        gpus, mates, gain = gpus[fits], mates[fits], gain[fits]
        if empty >= 0:
            gpus, mates, gain = np.append(empty, gpus), np.append(-1, mates), np.append(0.0, gain)
        self._gain = gain
        return gpus.astype(np.int64), mates.astype(np.int64)

    def score(self, j: int, gpus: np.ndarray, mates: np.ndarray) -> np.ndarray:
        """Horus's cost minus ``weight`` x the predicted throughput gain of the pair (0 for an empty GPU)."""
        return self.cost(j, gpus, mates) - self.weight * self._gain


class OraclePolicy(OursPolicy):
    """Ours handed the measured matrix, the true failures and the true memory as its predictions (an oracle run)."""

    name = "oracle"


POLICIES: dict[str, type[Policy]] = {
    "slot": SlotPolicy,
    "reactive": ReactivePolicy,
    "horus": HorusPolicy,
    "random": RandomPairPolicy,
    "ours": OursPolicy,
    "oracle": OraclePolicy,
}


def make_policy(name: str, **kwargs: object) -> Policy:
    """A policy by name (slot, reactive, horus, ours) with its keyword settings."""
    if name not in POLICIES:
        raise GpupredError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return POLICIES[name](**kwargs)  # type: ignore[arg-type]
