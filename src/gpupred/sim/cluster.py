"""The discrete-event GPU cluster: GPUs, running jobs, their progress under co-location, and the event loop.

Model (documented once, here):

- **Truth is measured, knowledge is predicted.** A job is single-GPU. Its ``work_s`` is its solo run
  time. Alone on a GPU it progresses at rate 1; sharing a GPU with one other job it progresses at
  ``1 / slowdown``, where the slowdown is the simulator's *truth* (:class:`Slowdown`): the measured
  slowdown of that pair where it was measured, else a model fitted on separate data
  (:class:`PairSlowdown` says which and the run counts both). Truth below 1 (measurement noise) runs at 1.
  At most ``max_per_gpu`` (2) jobs share a GPU.
- Policies never read the truth while deciding: the simulator *seals* its truth slowdown (and its true
  utilization and memory) around every policy callback, and any read raises :class:`TruthLeak`. What a
  policy may know sits in ``known_util`` / ``known_mem``: ``"pred"`` (point predictions), ``"high"``
  (interval upper bounds), and ``"measured"`` (NaN until the job's profiling window measured it).
  Running jobs' progress rates are observable (:meth:`Simulator.observed_slowdown`).
- **GPU speed.** ``work_s`` is the solo run time on the GPU the truth was measured on; a GPU of relative
  speed ``v`` (:attr:`Cluster.per_gpu_speed`, 1 by default) runs a job ``v`` times as fast (a shared one
  ``v / slowdown``). The slowdown of a pair is taken to be the same on every GPU.
- A GPU's utilization is ``min(100, sum of true util_i / slowdown_i)``: a job slowed ``s`` times keeps the
  GPU busy ``1/s`` as often. Cluster utilization is the mean over GPUs.
- Memory: a policy places a job only where the memory it believes in fits the GPU's capacity (GPUs may
  differ: :attr:`Cluster.per_gpu_memory_mib`). If the *true* memory of the GPU's jobs then exceeds the
  capacity, the newcomer fails at start with an OOM: it is counted, leaves the GPU, pays
  ``oom_restart_s`` of extra work and is requeued; beside a partner it is marked never-pack, alone it is
  known from then on to need more than that GPU's capacity (``need_mib``, observable, not truth).
- Queueing delay of a job is the total time it spent waiting in a queue (JCT minus running time).
- A pair whose measured co-run failed (:meth:`PairSlowdown.fails`) fails at start like an out-of-memory newcomer:
  counted as a failed pair (``failed_pairs``; ``failed_placements`` = OOMs + failed pairs), same penalty and rule.
- Finish-time fairness (Themis): ``rho`` = a job's JCT over its solo run time on the GPU it finished on;
  ``throughput``: work done per second between the first and the last arrival, per unit of summed GPU speed.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError

# Columns a job table passed to the simulator must hold (see gpupred.sim.arrivals).
JOB_COLUMNS: tuple[str, ...] = (
    "job_id",
    "arrival_s",
    "work_s",
    "kind",  # integer index of the job's workload in the per-workload table (slowdown matrices use it)
    "true_util",  # % measured solo GPU utilization (the truth the simulator runs on)
    "true_mem_mib",  # measured solo GPU memory
    "pred_util",  # the predictor's point prediction (out-of-fold)
    "pred_util_high",  # upper bound of its interval
    "pred_mem_mib",
    "pred_mem_mib_high",
)
VIEWS: tuple[str, ...] = ("pred", "high", "measured")

QUEUED, PROFILING, RUNNING, DONE = 0, 1, 2, 3
EV_FINISH, EV_PROFILE, EV_CHECK = 0, 1, 2


class TruthLeak(GpupredError):
    """A policy read the simulator's truth (measured slowdowns, true utilization or memory) while deciding."""


def _sealed_reader(raw: Callable[..., np.ndarray], what: str) -> Callable[..., np.ndarray]:
    """``raw`` that raises TruthLeak while its instance is a running simulator's truth and a policy decides."""

    @functools.wraps(raw)
    def guarded(self: Slowdown, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self._seal_depth > 0:
            raise TruthLeak(f"a policy read the simulator's truth ({what}) while deciding; "
                            "policies may use predictions or what their own profiling measured")
        return raw(self, a, b)

    return guarded


class Slowdown:
    """How much job ``a`` slows down sharing a GPU with job ``b`` (indices into the job table).

    Subclasses implement :meth:`pair`; it (and any other reader in ``READERS``) is guarded: while an instance is
    the truth of a running simulator and a policy is deciding, calling it raises :class:`TruthLeak`.
    """

    _seal_depth = 0
    READERS: tuple[str, ...] = ("pair", "upper", "fails")  # the methods that read the truth: sealed while a policy decides

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in Slowdown.READERS:
            raw = cls.__dict__.get(name)
            if raw is not None:
                setattr(cls, name, _sealed_reader(raw, f"{cls.__name__}.{name}"))

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns (>= 1 in effect) of jobs ``a`` each sharing with the matching job of ``b``."""
        raise NotImplementedError

    def measured(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each (a, b) slowdown is a measurement (False: a model's)."""
        return np.zeros(len(np.atleast_1d(a)), dtype=bool)

    def fails(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each pair (a, b) fails to run together (a measured failed co-run); False by default."""
        return np.zeros(len(np.atleast_1d(a)), dtype=bool)


class BaselineSlowdown(Slowdown):
    """The additive rule: both jobs slow down by ``max(1, (util_a + util_b) / 100)``."""

    def __init__(self, util: np.ndarray) -> None:
        self.util = np.asarray(util, dtype=float)

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns of ``a`` sharing with ``b``."""
        return np.maximum(1.0, (self.util[a] + self.util[b]) / 100.0)


def workload_kinds(kind: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Jobs' workload indices as int64, each checked to index a row of ``shape`` (``what`` opens the error)."""
    kind = np.asarray(kind, dtype=np.int64)
    if kind.size and (kind.min() < 0 or kind.max() >= shape[0]):
        raise GpupredError(f"{what} {shape}, but job kinds reach {int(kind.max())}")
    return kind


class MatrixSlowdown(Slowdown):
    """Slowdowns looked up in a workload x workload matrix: ``matrix[kind[a], kind[b]]`` (NaN: unknown)."""

    def __init__(self, matrix: np.ndarray, kind: np.ndarray) -> None:
        self.matrix = np.asarray(matrix, dtype=float)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != self.matrix.shape[1]:
            raise GpupredError(f"slowdown matrix must be square, got shape {self.matrix.shape}")
        self.kind = workload_kinds(kind, self.matrix.shape, "slowdown matrix is")

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns of ``a`` sharing with ``b``."""
        return self.matrix[self.kind[a], self.kind[b]]


class PairSlowdown(Slowdown):
    """The simulator's truth: measured pair slowdowns where measured, else a fitted model's (both per workload);
    ``failed`` marks the pairs whose measured co-run failed (they never run together)."""

    def __init__(self, measured: np.ndarray, fallback: np.ndarray, kind: np.ndarray,
                 failed: np.ndarray | None = None) -> None:
        measured = np.asarray(measured, dtype=float)
        fallback = np.asarray(fallback, dtype=float)
        if measured.shape != fallback.shape:
            raise GpupredError(f"measured {measured.shape} and fallback {fallback.shape} slowdown matrices differ in shape")
        self.failed = np.zeros(measured.shape, dtype=bool) if failed is None else np.asarray(failed, dtype=bool)
        if self.failed.shape != measured.shape or (self.failed != self.failed.T).any():
            raise GpupredError(f"failed-pair matrix must be symmetric and of shape {measured.shape}")
        if not np.isfinite(fallback[~np.isfinite(measured) & ~self.failed]).all():
            raise GpupredError("the fallback slowdown model leaves a pair without a slowdown (NaN)")
        both = np.isfinite(measured) & np.isfinite(measured.T)  # a pair counts as measured when both members were
        self.is_measured = both
        self.matrix = np.where(both, measured, np.where(self.failed, np.nan, fallback))
        self.kind = workload_kinds(kind, self.matrix.shape, "slowdown matrices are")

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns of ``a`` sharing with ``b``."""
        return self.matrix[self.kind[a], self.kind[b]]

    def measured(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each (a, b) slowdown was measured."""
        return self.is_measured[self.kind[a], self.kind[b]]

    def fails(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each pair's measured co-run failed."""
        return self.failed[self.kind[a], self.kind[b]]


class PredictedSlowdown(Slowdown):
    """A policy's knowledge of pair slowdowns: point predictions and interval upper bounds per workload pair, and
    (where failures were modelled) the probability that a pair fails to run together."""

    def __init__(self, point: np.ndarray, high: np.ndarray, kind: np.ndarray, fail: np.ndarray | None = None) -> None:
        self.point = np.asarray(point, dtype=float)
        self.high = np.fmax(np.asarray(high, dtype=float), self.point)
        if self.point.shape != self.high.shape or self.point.ndim != 2:
            raise GpupredError(f"predicted slowdown matrices differ in shape: {self.point.shape} vs {self.high.shape}")
        self.fail = None if fail is None else np.asarray(fail, dtype=float)
        if self.fail is not None and self.fail.shape != self.point.shape:
            raise GpupredError(f"predicted failure matrix {self.fail.shape} differs from the slowdowns' {self.point.shape}")
        self.kind = workload_kinds(kind, self.point.shape, "predicted slowdown matrix is")

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Predicted slowdowns of ``a`` sharing with ``b`` (NaN: no prediction)."""
        return self.point[self.kind[a], self.kind[b]]

    def upper(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Upper bounds of the predicted slowdowns of ``a`` sharing with ``b`` (NaN: no prediction)."""
        return self.high[self.kind[a], self.kind[b]]

    def fail_probability(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Predicted probability that ``a`` and ``b`` fail to run together (0 where failures were not modelled)."""
        if self.fail is None:
            return np.zeros(len(np.atleast_1d(a)))
        p = self.fail[self.kind[a], self.kind[b]]
        return np.where(p == p, p, 1.0)  # NaN (no prediction): taken to fail


@dataclass
class Cluster:
    """``nodes`` x ``gpus_per_node`` GPUs of ``gpu_memory_mib`` each, or one GPU per ``per_gpu_memory_mib`` entry."""

    nodes: int = 1
    gpus_per_node: int = 1
    gpu_memory_mib: float = 81_559.0
    max_per_gpu: int = 2
    per_gpu_memory_mib: tuple[float, ...] = ()  # heterogeneous: each GPU's capacity (overrides the three above)
    per_gpu_speed: tuple[float, ...] = ()  # heterogeneous: each GPU's speed relative to the truth's GPU (default 1)

    @property
    def n_gpus(self) -> int:
        """Total GPU count."""
        return len(self.per_gpu_memory_mib) or self.nodes * self.gpus_per_node

    @property
    def capacity(self) -> np.ndarray:
        """Each GPU's memory capacity (MiB)."""
        if self.per_gpu_memory_mib:
            return np.asarray(self.per_gpu_memory_mib, dtype=float)
        return np.full(self.n_gpus, float(self.gpu_memory_mib))

    @property
    def speed(self) -> np.ndarray:
        """Each GPU's speed relative to the GPU the truth was measured on (1: as fast; a job's rate scales by it)."""
        if not self.per_gpu_speed:
            return np.ones(self.n_gpus)
        speed = np.asarray(self.per_gpu_speed, dtype=float)
        if len(speed) != self.n_gpus or not (speed > 0).all():
            raise GpupredError(f"per_gpu_speed needs one positive speed per GPU ({self.n_gpus}), got {len(speed)}")
        return speed


@dataclass
class SimResult:
    """What one simulation produced: per-job outcomes, the utilization timeline and summary metrics."""

    policy: str
    jobs: pd.DataFrame
    timeline_t: np.ndarray  # event times (s)
    timeline_util: np.ndarray  # cluster GPU utilization (%, mean over GPUs) from that time on
    metrics: dict[str, float] = field(default_factory=dict)

    def util_over_time(self, bin_s: float) -> pd.DataFrame:
        """Cluster utilization averaged over bins of ``bin_s`` seconds (time-weighted)."""
        t, u = self.timeline_t, self.timeline_util
        end = float(t[-1]) if len(t) else 0.0
        edges = np.arange(0.0, end + bin_s, bin_s)
        cum = np.concatenate([[0.0], np.cumsum(u[:-1] * np.diff(t))])  # integral up to each event time
        at = np.interp(edges, t, cum) if len(t) else np.zeros_like(edges)
        width = np.diff(edges)
        return pd.DataFrame({"t_s": edges[:-1], "util": np.diff(at) / np.where(width > 0, width, 1.0)})


class SchedulingPolicy(Protocol):
    """What the simulator calls on a scheduling policy (:class:`gpupred.sim.policies.Policy` implements it)."""

    name: str

    def attach(self, sim: "Simulator") -> None:
        """Bind to a simulator before its run."""
        ...

    def knowledge(self) -> dict[str, np.ndarray]:
        """The slowdown matrices the policy decides with (the simulator refuses copies of its truth)."""
        ...

    def submit(self, j: int) -> None:
        """A job arrives."""
        ...

    def pending(self) -> int:
        """How many jobs wait."""
        ...

    def schedule(self) -> None:
        """Start whatever waiting jobs fit now."""
        ...

    def on_free(self, g: int) -> None:
        """A job finished on GPU ``g``."""
        ...

    def on_profile_end(self, j: int) -> None:
        """Job ``j``'s profiling window ended."""
        ...

    def on_check(self, g: int, j: int) -> None:
        """A delayed check of GPU ``g`` after job ``j`` joined it."""
        ...


class Simulator:
    """Runs one policy over one job table on one cluster; the truth slowdown decides how co-located jobs progress."""

    def __init__(self, jobs: pd.DataFrame, cluster: Cluster, truth: Slowdown | None = None,
                 oom_restart_s: float = 30.0, oracle: bool = False) -> None:
        missing = [c for c in JOB_COLUMNS if c not in jobs.columns]
        if missing:
            raise GpupredError(f"job table lacks columns {missing}; build it with gpupred.sim.arrivals")
        if cluster.max_per_gpu not in (1, 2):
            raise GpupredError(f"max_per_gpu={cluster.max_per_gpu}: the simulator shares a GPU between at most 2 jobs")
        self.cap = cluster.capacity
        self.speed = cluster.speed
        too_big = jobs["true_mem_mib"].to_numpy(float) > self.cap.max()
        if too_big.any():
            raise GpupredError(
                f"{int(too_big.sum())} jobs (e.g. {jobs['job_id'].iloc[int(np.argmax(too_big))]!r}) need more memory than a "
                f"{self.cap.max():.0f} MiB GPU even alone; drop them from the trace"
            )
        self.table = jobs.reset_index(drop=True)
        self.cluster = cluster
        n = len(self.table)
        col = lambda c: self.table[c].to_numpy(dtype=float).copy()
        self.arrival, self.work = col("arrival_s"), col("work_s")
        self._true_util, self._true_mem = col("true_util"), col("true_mem_mib")
        self.known_util = {"pred": col("pred_util"), "high": col("pred_util_high"), "measured": np.full(n, np.nan)}
        self.known_mem = {"pred": col("pred_mem_mib"), "high": col("pred_mem_mib_high"), "measured": np.full(n, np.nan)}
        self.kind = self.table["kind"].to_numpy(dtype=np.int64)
        self.truth: Slowdown = truth if truth is not None else BaselineSlowdown(self._true_util)
        self.oom_restart_s = oom_restart_s
        self.oracle = oracle  # an explicit perfect-knowledge run: policies may hold a copy of the truth (never read it)
        self._deciding = 0
        self._init_state(n, cluster.n_gpus)

    def _init_state(self, n: int, g: int) -> None:
        """Per-job and per-GPU state at time 0."""
        self.n = n
        self.rem = self.work.copy()
        self.rate = np.zeros(n)
        self.last_t = np.zeros(n)
        self.version = np.zeros(n, dtype=np.int64)
        self.state = np.full(n, QUEUED, dtype=np.int8)
        self.gpu_of = np.full(n, -1, dtype=np.int64)
        self.last_gpu = np.full(n, -1, dtype=np.int64)  # the GPU a job last ran on
        self.first_start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.enqueued_at = np.zeros(n)
        self.wait = np.zeros(n)
        self.ooms = np.zeros(n, dtype=np.int64)
        self.migrations = np.zeros(n, dtype=np.int64)
        self.no_pack = np.zeros(n, dtype=bool)  # run alone from now on (after an OOM or a migration)
        self.need_mib = np.zeros(n)  # memory a job is known to need (more than a GPU it ran out of memory on alone)
        self.profiled = np.zeros(n, dtype=bool)
        self.placements = np.zeros(n, dtype=np.int64)  # times placed; profile-end events carry it
        self.gpu_jobs: list[list[int]] = [[] for _ in range(g)]
        self.gpu_n = np.zeros(g, dtype=np.int64)
        self.empty_gpus = g  # GPUs holding no job, and GPUs with room for one more (kept by place and _leave)
        self.open_gpus = g
        self.gpu_busy = np.zeros(g)  # actual utilization of each GPU, %
        self.gpu_rate = np.zeros(g)  # summed progress rate of the jobs on each GPU (work-seconds per second)
        self.rate_sum = 0.0
        self.tl_r: list[float] = [0.0]
        self.mate = np.full(g, -1, dtype=np.int64)  # the job alone on a GPU (-1 if empty or shared)
        self.busy_sum = 0.0
        self.tl_t: list[float] = [0.0]
        self.tl_u: list[float] = [0.0]
        self.heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.n_ooms = 0
        self.n_failed_pairs = 0  # placements beside a partner whose measured co-run failed
        self.n_migrations = 0
        self.n_pairs_measured = 0
        self.n_pairs_modelled = 0
        self.max_view_mem_frac = 0.0  # largest (believed memory on a shared GPU) / capacity seen
        self.now = 0.0
        # bumps whenever a job leaves a GPU: a job that found no GPU cannot find one before that
        self.freed = 0

    # --- what policies may and may not read -------------------------------------------------------------
    @property
    def true_util(self) -> np.ndarray:
        """True solo utilization of every job (the simulator's truth; sealed while a policy decides)."""
        self._check_open("true utilization")
        return self._true_util

    @property
    def true_mem(self) -> np.ndarray:
        """True solo memory of every job (the simulator's truth; sealed while a policy decides)."""
        self._check_open("true memory")
        return self._true_mem

    def _check_open(self, what: str) -> None:
        if self._deciding:
            raise TruthLeak(f"a policy read the simulator's truth ({what}) while deciding; "
                            "policies may use predictions or what their own profiling measured")

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a policy callback with the truth sealed."""
        self._deciding += 1
        self.truth._seal_depth += 1
        try:
            return fn(*args)
        finally:
            self._deciding -= 1
            self.truth._seal_depth -= 1

    def _truth_pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The simulator's own read of the truth slowdown (unsealed for the call)."""
        depth = self.truth._seal_depth
        self.truth._seal_depth = 0
        try:
            return self.truth.pair(a, b)
        finally:
            self.truth._seal_depth = depth

    def _truth_fails(self, a: int, b: int) -> bool:
        """The simulator's own read of whether jobs ``a`` and ``b`` fail together (unsealed for the call)."""
        depth = self.truth._seal_depth
        self.truth._seal_depth = 0
        try:
            return bool(self.truth.fails(np.array([a]), np.array([b]))[0])
        finally:
            self.truth._seal_depth = depth

    def _refuse_copy_of_truth(self, policy: str, name: str, matrix: np.ndarray) -> None:
        """TruthLeak if a policy's slowdown knowledge equals the truth on every measured pair (unless an oracle run)."""
        if self.oracle:
            return
        truth = getattr(self.truth, "matrix", None)
        matrix = np.asarray(matrix, dtype=float)
        if truth is None or matrix.shape != truth.shape:
            return
        mask = getattr(self.truth, "is_measured", np.isfinite(truth))
        if mask.any() and np.array_equal(matrix[mask], truth[mask]):
            raise TruthLeak(f"policy {policy}: its {name} slowdowns equal the simulator's measured truth on all "
                            f"{int(mask.sum())} measured pairs; predictions must come from a cross-fitted model")

    def observed_slowdown(self, g: int) -> float:
        """The largest slowdown the jobs on GPU ``g`` show now (observable from their progress)."""
        jobs = self.gpu_jobs[g]
        return max((self.speed[g] / self.rate[j] for j in jobs if self.rate[j] > 0), default=1.0)

    # --- events -------------------------------------------------------------------------------------
    def push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        """Schedule an event (finish / profile end / migration check)."""
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, kind, a, b))

    # --- GPU membership -------------------------------------------------------------------------------
    def _advance(self, g: int) -> None:
        now = self.now
        for j in self.gpu_jobs[g]:
            self.rem[j] -= (now - self.last_t[j]) * self.rate[j]
            self.last_t[j] = now

    def _rerate(self, g: int) -> None:
        jobs = self.gpu_jobs[g]
        now = self.now
        if len(jobs) == 1:
            slow = [1.0]
        elif len(jobs) == 2:
            a, b = jobs
            s = self._truth_pair(np.array([a, b]), np.array([b, a]))
            slow = [max(1.0, float(s[0])), max(1.0, float(s[1]))]
        else:
            slow = []
        busy = rates = 0.0
        ut = self._true_util
        for j, sj in zip(jobs, slow):
            r = float(self.speed[g]) / sj  # a GPU of relative speed v runs the job's work v times as fast
            self.rate[j] = r
            rates += r
            self.version[j] += 1
            busy += ut[j] / sj
            self.push(now + max(self.rem[j], 0.0) / r, EV_FINISH, j, int(self.version[j]))
        busy = min(100.0, busy)
        self.busy_sum += busy - self.gpu_busy[g]
        self.gpu_busy[g] = busy
        self.rate_sum += rates - self.gpu_rate[g]
        self.gpu_rate[g] = rates
        self.mate[g] = jobs[0] if len(jobs) == 1 else -1
        u = self.busy_sum / len(self.gpu_busy)
        if self.tl_t[-1] == now:
            self.tl_u[-1], self.tl_r[-1] = u, self.rate_sum
        else:
            self.tl_t.append(now)
            self.tl_u.append(u)
            self.tl_r.append(self.rate_sum)

    def place(self, j: int, g: int, view: str = "pred", profiling: bool = False) -> bool:
        """Start job ``j`` on GPU ``g``; False (and an OOM counted) if the true memory overflows."""
        now = self.now
        if self.gpu_n[g] >= self.cluster.max_per_gpu:
            raise GpupredError(f"policy bug: GPU {g} already holds {self.gpu_n[g]} jobs")
        cap = self.cap[g]
        self.wait[j] += now - self.enqueued_at[j]
        self.enqueued_at[j] = now
        if self.gpu_n[g] == 0 and self._true_mem[j] > cap:  # too big for this GPU even alone
            return self._oom(j, float(cap), alone=True)
        if self.gpu_n[g] > 0:
            others = self.gpu_jobs[g]
            known = self.known_mem[view] if view in self.known_mem else np.zeros(self.n)
            self.max_view_mem_frac = max(self.max_view_mem_frac, (sum(known[o] for o in others) + known[j]) / cap)
            if sum(self._true_mem[o] for o in others) + self._true_mem[j] > cap:  # mispredicted: the newcomer OOMs
                return self._oom(j, float(cap), alone=False)
            if self._truth_fails(j, others[0]):  # a co-run measured to fail: the newcomer fails as on an OOM
                return self._oom(j, float(cap), alone=False, failed_pair=True)
            if bool(self.truth.measured(np.array([j]), np.array([others[0]]))[0]):
                self.n_pairs_measured += 1
            else:
                self.n_pairs_modelled += 1
        if math.isnan(self.first_start[j]):
            self.first_start[j] = now
        self._advance(g)
        self.gpu_jobs[g].append(j)
        self.empty_gpus -= int(self.gpu_n[g] == 0)
        self.gpu_n[g] += 1
        self.open_gpus -= int(self.gpu_n[g] == self.cluster.max_per_gpu)
        self.gpu_of[j] = g
        self.last_gpu[j] = g
        self.state[j] = PROFILING if profiling else RUNNING
        self.last_t[j] = now
        self.placements[j] += 1
        self._rerate(g)
        return True

    def _oom(self, j: int, cap: float, alone: bool, failed_pair: bool = False) -> bool:
        """Count an out-of-memory start of ``j`` (or, ``failed_pair``, a start beside a partner it was measured to fail
        with): alone, it needs more than ``cap``; beside a partner, never pack it."""
        if failed_pair:
            self.n_failed_pairs += 1
        else:
            self.n_ooms += 1
        self.ooms[j] += 1
        if alone:
            self.need_mib[j] = max(self.need_mib[j], cap + 1.0)
        else:
            self.no_pack[j] = True
        self.rem[j] += self.oom_restart_s
        return False

    def _leave(self, j: int) -> int:
        """Take job ``j`` off its GPU (progress kept); return the GPU."""
        g = int(self.gpu_of[j])
        self._advance(g)
        self.gpu_jobs[g].remove(j)
        self.open_gpus += int(self.gpu_n[g] == self.cluster.max_per_gpu)
        self.gpu_n[g] -= 1
        self.empty_gpus += int(self.gpu_n[g] == 0)
        self.freed += 1
        self.gpu_of[j] = -1
        self.version[j] += 1
        self.rate[j] = 0.0
        self._rerate(g)
        return g

    def remove(self, j: int) -> int:
        """Take running job ``j`` off its GPU (progress kept; the policy requeues it); return the GPU."""
        return self._leave(j)

    def requeue(self, j: int, extra_work_s: float = 0.0) -> None:
        """Mark job ``j`` as waiting again (the policy puts it in its queue)."""
        self.state[j] = QUEUED
        self.enqueued_at[j] = self.now
        self.rem[j] += extra_work_s

    # --- the loop -------------------------------------------------------------------------------------
    def _finish(self, j: int) -> int:
        g = self._leave(j)
        self.state[j] = DONE
        self.finish[j] = self.now
        self.rem[j] = 0.0
        return g

    def _profile_end(self, j: int) -> None:
        """The profiling window of ``j`` measured its solo utilization and memory."""
        self.profiled[j] = True
        self.known_util["measured"][j] = self._true_util[j]
        self.known_mem["measured"][j] = self._true_mem[j]

    def _event(self, policy: SchedulingPolicy, t: float, ev: int, a: int, b: int) -> None:
        self.now = t
        if ev == EV_FINISH:
            if b != self.version[a]:
                return  # stale: the job's rate changed since
            g = self._finish(a)
            self._call(policy.on_free, g)
        elif ev == EV_PROFILE:
            if self.state[a] != PROFILING or b != self.placements[a]:
                return
            self._profile_end(a)
            self._call(policy.on_profile_end, a)
        else:
            self._call(policy.on_check, a, b)

    def run(self, policy: SchedulingPolicy) -> SimResult:
        """Simulate every job to completion under ``policy``."""
        try:
            self._call(policy.attach, self)
            for name, matrix in policy.knowledge().items():
                self._refuse_copy_of_truth(policy.name, name, matrix)
            order = np.argsort(self.arrival, kind="stable")
            arrivals = self.arrival[order]
            i, n = 0, self.n
            heap = self.heap
            while i < n or heap:
                next_arrival = arrivals[i] if i < n else math.inf
                if heap and heap[0][0] <= next_arrival:
                    t, _, ev, a, b = heapq.heappop(heap)
                    self._event(policy, t, ev, a, b)
                else:
                    j = int(order[i])
                    i += 1
                    self.now = float(arrivals[i - 1])
                    self.enqueued_at[j] = self.now
                    self._call(policy.submit, j)
                self._call(policy.schedule)
                if not heap and i >= n and policy.pending():
                    raise GpupredError(f"{policy.name}: {policy.pending()} jobs can never be placed (scheduler stalled)")
        finally:
            self._deciding = 0
            self.truth._seal_depth = 0
        return self._result(policy.name)

    def _throughput(self) -> float:
        """Work done per second while jobs keep arriving (first to last arrival), per unit of GPU speed.

        1 means every GPU ran one job alone at its speed the whole time; sharing at a gain pushes it above 1.
        """
        if self.n == 0:
            return 0.0
        start, end = float(self.arrival.min()), float(self.arrival.max())
        if end <= start:
            end = float(np.nanmax(self.finish))
        done = _integral(np.asarray(self.tl_t), np.asarray(self.tl_r), start, end)
        return done / ((end - start) * float(self.speed.sum())) if end > start else 0.0

    def _result(self, name: str) -> SimResult:
        jct = self.finish - self.arrival
        t = np.asarray(self.tl_t)
        u = np.asarray(self.tl_u)
        start = float(self.arrival.min()) if self.n else 0.0
        end = float(np.nanmax(self.finish)) if self.n else 0.0
        span = end - start
        if len(t) > 1 and span > 0:
            seg = np.clip(np.diff(np.append(t, end)), 0, None)
            avg_util = float(np.sum(u * seg) / span)
        else:
            avg_util = 0.0
        alone = self.work / self.speed[np.maximum(self.last_gpu, 0)]  # its solo run time on the GPU it finished on
        rho = jct / np.where(alone > 0, alone, np.nan)
        jobs = pd.DataFrame({
            "job_id": self.table["job_id"].to_numpy(), "arrival_s": self.arrival, "start_s": self.first_start,
            "finish_s": self.finish, "jct_s": jct, "wait_s": self.wait, "ooms": self.ooms, "migrations": self.migrations,
            "gpu": self.last_gpu, "rho": rho,
        })
        metrics = {
            "n_jobs": int(self.n),
            "avg_util": avg_util,
            "makespan_s": span,
            "mean_jct_s": float(np.mean(jct)) if self.n else 0.0,
            "median_jct_s": float(np.median(jct)) if self.n else 0.0,
            "p95_jct_s": float(np.quantile(jct, 0.95)) if self.n else 0.0,
            "mean_wait_s": float(np.mean(self.wait)) if self.n else 0.0,
            "ooms": int(self.n_ooms),
            "failed_pairs": int(self.n_failed_pairs),
            "failed_placements": int(self.n_ooms + self.n_failed_pairs),
            "p95_rho": float(np.nanquantile(rho, 0.95)) if self.n else 0.0,
            "mean_rho": float(np.nanmean(rho)) if self.n else 0.0,
            "throughput": self._throughput(),
            "migrations": int(self.n_migrations),
            "pairs_measured": int(self.n_pairs_measured),
            "pairs_modelled": int(self.n_pairs_modelled),
        }
        return SimResult(name, jobs, t, u, metrics)


def _integral(t: np.ndarray, v: np.ndarray, start: float, end: float) -> float:
    """The integral over ``[start, end]`` of the step function equal to ``v[i]`` from ``t[i]`` on."""
    edges = np.clip(np.append(t, np.inf), start, end)
    return float(np.sum(v * np.diff(edges)))


def simulate(jobs: pd.DataFrame, cluster: Cluster, policy: SchedulingPolicy, truth: Slowdown | None = None,
             oom_restart_s: float = 30.0, oracle: bool = False) -> SimResult:
    """Simulate ``jobs`` on ``cluster`` under ``policy``; co-located jobs progress at the ``truth`` slowdown.

    ``oracle=True`` marks a perfect-knowledge run: a policy may *hold* a copy of the truth as its predictions
    (an upper bound); it still cannot read the simulator's sealed truth while deciding.
    """
    return Simulator(jobs, cluster, truth, oom_restart_s, oracle).run(policy)
