"""Scheduling policies: slot-based, reactive (profile then pack, Gandiva-like), proactive (Horus) and ours.

Every policy places a job on an empty GPU or next to exactly one running job (pairs only). What a policy
believes about a job's memory decides where it may go; the simulator then checks the job's true memory
and counts an OOM if the belief was wrong (see :mod:`gpupred.sim.cluster`).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from gpupred.sim.cluster import PROFILING, RUNNING, Simulator, Slowdown, _EV_CHECK, _EV_PROFILE


class Policy:
    """A FIFO scheduler with a small look-ahead; subclasses say where a job may go (``choose``)."""

    name = "policy"
    view = "true"  # which memory/utilization the policy believes: "true", "pred" or "high"

    def __init__(self, lookahead: int = 8) -> None:
        self.lookahead = lookahead
        self.sim: Simulator | None = None
        self.queue: deque[int] = deque()
        self._failed_at: dict[int, int] = {}

    def attach(self, sim: Simulator) -> None:
        """Bind to a simulator before its run."""
        self.sim = sim
        self.queue = deque()
        self._failed_at: dict[int, int] = {}

    def submit(self, j: int) -> None:
        """A job arrives."""
        self.queue.append(j)

    def pending(self) -> int:
        """How many jobs wait."""
        return len(self.queue)

    def on_free(self, g: int) -> None:
        """A job finished on GPU ``g``."""

    def on_profile_end(self, j: int) -> None:
        """Job ``j``'s profiling period ended."""

    def on_check(self, g: int, j: int) -> None:
        """A delayed check of GPU ``g`` after job ``j`` joined it."""

    # --- helpers ---------------------------------------------------------------------------------
    def _full(self) -> bool:
        sim = self.sim
        return bool(sim.gpu_n.min() >= sim.cluster.max_per_gpu)

    def _empty_gpu(self) -> int:
        g = int(np.argmin(self.sim.gpu_n))
        return g if self.sim.gpu_n[g] == 0 else -1

    def _mates(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """GPUs holding exactly one running, packable job (and those jobs), if ``j`` may share at all."""
        sim = self.sim
        if sim.no_pack[j] or sim.cluster.max_per_gpu < 2:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        gpus = np.flatnonzero(sim.mate >= 0)
        mates = sim.mate[gpus]
        ok = (~sim.no_pack[mates]) & (sim.state[mates] == RUNNING)
        return gpus[ok], mates[ok]

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
        return self.needs_empty(j) and self.sim.gpu_n.min() > 0

    def schedule(self) -> None:
        """Start whatever waiting jobs fit now."""
        q = self.queue
        i = 0
        while q and i < min(len(q), self.lookahead) and not self._full():
            j = q[i]
            outcome = None if self._skip(j) else self._try(j)
            if outcome is None:
                i += 1
            elif outcome:
                del q[i]
            else:  # OOM: stays in the queue at its place, now never-pack
                i += 1


class SlotPolicy(Policy):
    """One job per GPU (Kubernetes-like device plugin): FIFO onto empty GPUs."""

    name = "slot"

    def choose(self, j: int) -> int:
        """An empty GPU, or wait."""
        return self._empty_gpu()

    def schedule(self) -> None:
        """FIFO: nothing behind the head can go where the head cannot."""
        q = self.queue
        while q:
            g = self._empty_gpu()
            if g < 0:
                return
            j = q.popleft()
            self.sim.place(j, g, self.view)


class ReactivePolicy(Policy):
    """Profile each job alone for ``profile_s``, then pack by measured utilization; migrate on high slowdown."""

    name = "reactive"
    view = "true"  # measured during profiling

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
        """Unprofiled: an empty GPU. Profiled: the best-fitting partner by measured util, else an empty GPU."""
        sim = self.sim
        if self._profiling(j):
            return self._empty_gpu()
        gpus, mates = self._mates(j)
        if len(gpus):
            u = sim.load_util["true"][gpus] + sim.util["true"][j]
            m = sim.load_mem["true"][gpus] + sim.mem["true"][j]
            ok = (u <= self.util_cap) & (m <= sim.cluster.gpu_memory_mib)
            if ok.any():
                return int(gpus[ok][np.argmax(u[ok])])
        return self._empty_gpu()

    def after_place(self, j: int, g: int, shared: bool) -> None:
        """Start the profiling clock, or the interference watch on a shared GPU."""
        sim = self.sim
        if sim.state[j] == PROFILING:
            sim.push(sim.now + self.profile_s, _EV_PROFILE, j, int(sim.placements[j]))
        elif shared:
            sim.push(sim.now + self.observe_s, _EV_CHECK, g, j)

    def on_profile_end(self, j: int) -> None:
        """Measured: leave the profiling GPU and queue (at the head) for packing."""
        sim = self.sim
        sim.profiled[j] = True
        sim.remove(j)
        sim.requeue(j)
        self.queue.appendleft(j)

    def on_check(self, g: int, j: int) -> None:
        """Migrate ``j`` off ``g`` if the pair still shares it and its slowdown crossed the threshold."""
        sim = self.sim
        if sim.gpu_of[j] != g or sim.gpu_n[g] < 2 or sim.slowdown_on(g) <= self.migrate_slowdown:
            return
        sim.remove(j)
        sim.migrations[j] += 1
        sim.n_migrations += 1
        sim.no_pack[j] = True
        sim.requeue(j, self.migration_cost_s)
        self.queue.appendleft(j)


class ProactivePolicy(Policy):
    """Horus: predicted util/memory, a cost on over-100% util and interference, WFQ over k-means classes."""

    name = "proactive"
    view = "pred"

    def __init__(self, k: int = 3, over_weight: float = 1.0, interference_weight: float = 1.0, empty_cost: float = 0.5,
                 kmeans_fit_jobs: int = 2000, lookahead: int = 4) -> None:
        super().__init__(lookahead)
        self.k = k
        self.over_weight = over_weight
        self.interference_weight = interference_weight
        self.empty_cost = empty_cost
        self.kmeans_fit_jobs = kmeans_fit_jobs
        self.queues: list[deque[int]] = []
        self.cls = np.zeros(0, dtype=np.int64)

    def attach(self, sim: Simulator) -> None:
        """Fit the job classes (k-means on predicted util and log memory of the first arrivals)."""
        from sklearn.cluster import KMeans

        super().attach(sim)
        x = np.column_stack([sim.util["pred"] / 100.0, np.log1p(np.maximum(sim.mem["pred"], 0.0)) / 10.0])
        first = np.argsort(sim.arrival, kind="stable")[: self.kmeans_fit_jobs]
        k = int(min(self.k, len(np.unique(x[first], axis=0)))) if len(first) else 1
        if k >= 2:
            km = KMeans(n_clusters=k, n_init=3, random_state=0).fit(x[first])
            self.cls = km.predict(x).astype(np.int64)
        else:
            self.cls = np.zeros(sim.n, dtype=np.int64)
        self.queues = [deque() for _ in range(max(k, 1))]

    def submit(self, j: int) -> None:
        """Queue the job in its class."""
        self.queues[self.cls[j]].append(j)

    def pending(self) -> int:
        """Jobs waiting in all classes."""
        return sum(len(q) for q in self.queues)

    def cost(self, j: int, gpus: np.ndarray) -> np.ndarray:
        """Horus's cost of adding ``j`` to each GPU: over-100% predicted util plus pairwise interference."""
        sim = self.sim
        u_g = sim.load_util["pred"][gpus]
        u = sim.util["pred"][j]
        over = np.maximum(0.0, u_g + u - 100.0) / 100.0
        return self.over_weight * over + self.interference_weight * (u_g * u) / 1e4

    def choose(self, j: int) -> int:
        """The cheapest feasible partner if cheaper than an empty GPU, else an empty GPU."""
        sim = self.sim
        gpus, _ = self._mates(j)
        empty = self._empty_gpu()
        if len(gpus):
            fits = sim.load_mem["pred"][gpus] + sim.mem["pred"][j] <= sim.cluster.gpu_memory_mib
            gpus = gpus[fits]
            if len(gpus):
                c = self.cost(j, gpus)
                b = int(np.argmin(c))
                if c[b] <= self.empty_cost:
                    return int(gpus[b])
        return empty

    def schedule(self) -> None:
        """Serve class heads by weight (median wait x queue length) until none fits."""
        sim = self.sim
        while not self._full():
            live = [q for q in self.queues if q]
            if not live:
                return
            now = sim.now
            weights = [((now - sim.arrival[q[len(q) // 2]]) + 1e-9) * len(q) for q in live]
            placed = False
            for idx in np.argsort(weights)[::-1]:
                q = live[idx]
                for pos in range(min(len(q), self.lookahead)):
                    outcome = None if self._skip(q[pos]) else self._try(q[pos])
                    if outcome:
                        del q[pos]
                        placed = True
                        break
                if placed:
                    break
            if not placed:
                return


class OursPolicy(Policy):
    """Pack on the prediction intervals' upper bounds and the learned slowdown."""

    name = "ours"
    view = "high"

    def __init__(self, predicted_slowdown: Slowdown | None = None, max_slowdown: float = 1.5,
                 util_cap: float = 150.0, lookahead: int = 8) -> None:
        super().__init__(lookahead)
        self.predicted_slowdown = predicted_slowdown
        self.max_slowdown = max_slowdown
        self.util_cap = util_cap

    def choose(self, j: int) -> int:
        """The partner with the smallest predicted pair slowdown if within bounds, else an empty GPU."""
        sim = self.sim
        gpus, mates = self._mates(j)
        if len(gpus):
            ok = (sim.load_mem["high"][gpus] + sim.mem["high"][j] <= sim.cluster.gpu_memory_mib) & (
                sim.load_util["high"][gpus] + sim.util["high"][j] <= self.util_cap
            )
            gpus, mates = gpus[ok], mates[ok]
            if len(gpus):
                sd = self.predicted_slowdown or sim.slowdown
                jj = np.full(len(mates), j)
                score = np.maximum(sd.pair(jj, mates), sd.pair(mates, jj))
                b = int(np.argmin(score))
                if score[b] <= self.max_slowdown:
                    return int(gpus[b])
        return self._empty_gpu()


POLICIES: dict[str, type[Policy]] = {
    "slot": SlotPolicy,
    "reactive": ReactivePolicy,
    "proactive": ProactivePolicy,
    "ours": OursPolicy,
}


def make_policy(name: str, **kwargs: object) -> Policy:
    """A policy by name (slot, reactive, proactive, ours) with its keyword settings."""
    from gpupred.errors import GpupredError

    if name not in POLICIES:
        raise GpupredError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return POLICIES[name](**kwargs)  # type: ignore[arg-type]
