"""The discrete-event GPU cluster: GPUs, running jobs, their progress under co-location, and the event loop.

Model (documented once, here):

- A job is single-GPU. Its ``work_s`` is its solo run time (iterations x solo iteration time). Alone on a
  GPU it progresses at rate 1; sharing a GPU with another job it progresses at ``1 / slowdown``, where
  the slowdown comes from the :class:`Slowdown` passed to the simulator (the learned model, or the
  baseline ``max(1, summed utilization / 100)``). At most ``max_per_gpu`` (2) jobs share a GPU.
- A GPU's utilization is ``min(100, sum of true util_i / slowdown_i)``: a job slowed ``s`` times keeps
  the GPU busy ``1/s`` as often. Cluster utilization is the mean over GPUs.
- Memory: a policy places a job only where the memory it believes in (true after profiling, point
  prediction, or interval upper bound) fits the GPU's capacity. If the *true* memory of the GPU's jobs
  then exceeds the capacity, the newcomer fails at start with an OOM: it is counted, leaves the GPU,
  pays ``oom_restart_s`` of extra work (restart from its last checkpoint), is marked never-pack and is
  requeued at the head of the queue. Jobs already on the GPU keep running.
- Queueing delay of a job is the total time it spent waiting in a queue (JCT minus running time).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.sim.policies import Policy

# Columns a job table passed to the simulator must hold (see gpupred.sim.traces).
JOB_COLUMNS: tuple[str, ...] = (
    "job_id",
    "arrival_s",
    "work_s",
    "kind",  # integer index of the job's workload in the per-workload table (slowdown matrices use it)
    "true_util",  # % solo GPU utilization (ground truth the simulator runs on)
    "true_mem_mib",
    "pred_util",  # the predictor's point prediction
    "pred_util_high",  # upper bound of its interval
    "pred_mem_mib",
    "pred_mem_mib_high",
)

QUEUED, PROFILING, RUNNING, DONE = 0, 1, 2, 3
_EV_FINISH, _EV_PROFILE, _EV_CHECK = 0, 1, 2


class Slowdown(Protocol):
    """How much job ``a`` slows down sharing a GPU with job ``b`` (indices into the job table)."""

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns (>= 1) of jobs ``a`` each sharing with the matching job of ``b``."""
        ...


class BaselineSlowdown:
    """The additive baseline: both jobs slow down by ``max(1, (util_a + util_b) / 100)``."""

    def __init__(self, util: np.ndarray) -> None:
        self.util = np.asarray(util, dtype=float)

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns of ``a`` sharing with ``b``."""
        return np.maximum(1.0, (self.util[a] + self.util[b]) / 100.0)


class MatrixSlowdown:
    """Slowdowns looked up in a workload x workload matrix: ``matrix[kind[a], kind[b]]``."""

    def __init__(self, matrix: np.ndarray, kind: np.ndarray) -> None:
        self.matrix = np.maximum(1.0, np.asarray(matrix, dtype=float))
        self.kind = np.asarray(kind, dtype=np.int64)
        if self.kind.size and (self.kind.min() < 0 or self.kind.max() >= self.matrix.shape[0]):
            raise GpupredError(f"slowdown matrix is {self.matrix.shape}, but job kinds reach {int(self.kind.max())}")

    def pair(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns of ``a`` sharing with ``b``."""
        return self.matrix[self.kind[a], self.kind[b]]


@dataclass
class Cluster:
    """A homogeneous cluster: ``nodes`` x ``gpus_per_node`` GPUs of ``gpu_memory_mib`` each."""

    nodes: int = 1
    gpus_per_node: int = 1
    gpu_memory_mib: float = 81_559.0
    max_per_gpu: int = 2

    @property
    def n_gpus(self) -> int:
        """Total GPU count."""
        return self.nodes * self.gpus_per_node


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


class Simulator:
    """Runs one policy over one job table on one cluster; the slowdown decides how co-located jobs progress."""

    def __init__(
        self,
        jobs: pd.DataFrame,
        cluster: Cluster,
        slowdown: Slowdown | None = None,
        oom_restart_s: float = 30.0,
    ) -> None:
        missing = [c for c in JOB_COLUMNS if c not in jobs.columns]
        if missing:
            raise GpupredError(f"job table lacks columns {missing}; build it with gpupred.sim.traces")
        if cluster.max_per_gpu not in (1, 2):
            raise GpupredError(f"max_per_gpu={cluster.max_per_gpu}: the simulator shares a GPU between at most 2 jobs")
        too_big = jobs["true_mem_mib"].to_numpy(float) > cluster.gpu_memory_mib
        if too_big.any():
            raise GpupredError(
                f"{int(too_big.sum())} jobs (e.g. {jobs['job_id'].iloc[int(np.argmax(too_big))]!r}) need more memory than a "
                f"{cluster.gpu_memory_mib:.0f} MiB GPU even alone; drop them from the trace"
            )
        self.table = jobs.reset_index(drop=True)
        self.cluster = cluster
        n = len(self.table)
        col = lambda c: self.table[c].to_numpy(dtype=float).copy()  # noqa: E731
        self.arrival, self.work = col("arrival_s"), col("work_s")
        self.util = {"true": col("true_util"), "pred": col("pred_util"), "high": col("pred_util_high")}
        self.mem = {"true": col("true_mem_mib"), "pred": col("pred_mem_mib"), "high": col("pred_mem_mib_high")}
        self.kind = self.table["kind"].to_numpy(dtype=np.int64)
        self.slowdown: Slowdown = slowdown if slowdown is not None else BaselineSlowdown(self.util["true"])
        self.oom_restart_s = oom_restart_s
        # per job state
        self.n = n
        self.rem = self.work.copy()
        self.rate = np.zeros(n)
        self.last_t = np.zeros(n)
        self.version = np.zeros(n, dtype=np.int64)
        self.state = np.full(n, QUEUED, dtype=np.int8)
        self.gpu_of = np.full(n, -1, dtype=np.int64)
        self.first_start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.enqueued_at = np.zeros(n)
        self.wait = np.zeros(n)
        self.ooms = np.zeros(n, dtype=np.int64)
        self.migrations = np.zeros(n, dtype=np.int64)
        self.no_pack = np.zeros(n, dtype=bool)  # run alone from now on (after an OOM or a migration)
        self.profiled = np.zeros(n, dtype=bool)
        self.placed_at = np.zeros(n)
        self.placements = np.zeros(n, dtype=np.int64)  # times placed; profile-end events carry it
        # per GPU state
        g = cluster.n_gpus
        self.gpu_jobs: list[list[int]] = [[] for _ in range(g)]
        self.gpu_n = np.zeros(g, dtype=np.int64)
        self.load_util = {k: np.zeros(g) for k in self.util}
        self.load_mem = {k: np.zeros(g) for k in self.mem}
        self.gpu_busy = np.zeros(g)  # actual utilization of each GPU, %
        self.mate = np.full(g, -1, dtype=np.int64)  # the job alone on a GPU (-1 if empty or shared)
        self.busy_sum = 0.0
        self.tl_t: list[float] = [0.0]
        self.tl_u: list[float] = [0.0]
        self.heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.n_ooms = 0
        self.n_migrations = 0
        self.max_view_mem_frac = 0.0  # largest (believed memory on a shared GPU) / capacity seen
        self.now = 0.0
        self.epoch = 0  # bumps on every change of any GPU's jobs
        # bumps whenever a job leaves a GPU: a job that found no GPU (so no GPU was empty) cannot find one
        # before that, so policies cache failed placements by it
        self.freed = 0

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
            rates = [1.0]
        elif len(jobs) == 2:
            a, b = jobs
            s = self.slowdown.pair(np.array([a, b]), np.array([b, a]))
            rates = [1.0 / max(1.0, float(s[0])), 1.0 / max(1.0, float(s[1]))]
        else:
            rates = []
        busy = 0.0
        ut = self.util["true"]
        for j, r in zip(jobs, rates):
            self.rate[j] = r
            self.version[j] += 1
            busy += ut[j] * r
            if self.state[j] == RUNNING or self.state[j] == PROFILING:
                self.push(now + max(self.rem[j], 0.0) / r, _EV_FINISH, j, int(self.version[j]))
        self.epoch += 1
        busy = min(100.0, busy)
        self.busy_sum += busy - self.gpu_busy[g]
        self.gpu_busy[g] = busy
        self.mate[g] = jobs[0] if len(jobs) == 1 else -1
        u = self.busy_sum / len(self.gpu_busy)
        if self.tl_t[-1] == now:
            self.tl_u[-1] = u
        else:
            self.tl_t.append(now)
            self.tl_u.append(u)

    def _load(self, g: int, j: int, sign: float) -> None:
        for k in self.load_util:
            self.load_util[k][g] += sign * self.util[k][j]
            self.load_mem[k][g] += sign * self.mem[k][j]
        self.gpu_n[g] += int(sign)

    def place(self, j: int, g: int, view: str = "true", profiling: bool = False) -> bool:
        """Start job ``j`` on GPU ``g``; False (and an OOM counted) if the true memory overflows."""
        now = self.now
        if self.gpu_n[g] >= self.cluster.max_per_gpu:
            raise GpupredError(f"policy bug: GPU {g} already holds {self.gpu_n[g]} jobs")
        cap = self.cluster.gpu_memory_mib
        if self.gpu_n[g] > 0:
            believed = (self.load_mem[view][g] + self.mem[view][j]) / cap
            self.max_view_mem_frac = max(self.max_view_mem_frac, believed)
            if self.load_mem["true"][g] + self.mem["true"][j] > cap:  # mispredicted overflow: the newcomer OOMs
                self.n_ooms += 1
                self.ooms[j] += 1
                self.wait[j] += now - self.enqueued_at[j]
                self.enqueued_at[j] = now
                self.no_pack[j] = True
                self.rem[j] += self.oom_restart_s
                return False
        self.wait[j] += now - self.enqueued_at[j]
        if math.isnan(self.first_start[j]):
            self.first_start[j] = now
        self._advance(g)
        self.gpu_jobs[g].append(j)
        self._load(g, j, 1.0)
        self.gpu_of[j] = g
        self.state[j] = PROFILING if profiling else RUNNING
        self.last_t[j] = now
        self.placed_at[j] = now
        self.placements[j] += 1
        self._rerate(g)
        return True

    def remove(self, j: int) -> int:
        """Take job ``j`` off its GPU (progress kept); return the GPU."""
        g = int(self.gpu_of[j])
        self._advance(g)
        self.gpu_jobs[g].remove(j)
        self.freed += 1
        self._load(g, j, -1.0)
        self.gpu_of[j] = -1
        self.version[j] += 1
        self.rate[j] = 0.0
        self._rerate(g)
        return g

    def requeue(self, j: int, extra_work_s: float = 0.0) -> None:
        """Mark job ``j`` as waiting again (the policy puts it in its queue)."""
        self.state[j] = QUEUED
        self.enqueued_at[j] = self.now
        self.rem[j] += extra_work_s

    def slowdown_on(self, g: int) -> float:
        """The largest current slowdown among the jobs on GPU ``g``."""
        jobs = self.gpu_jobs[g]
        return max((1.0 / self.rate[j] for j in jobs if self.rate[j] > 0), default=1.0)

    # --- the loop -------------------------------------------------------------------------------------
    def run(self, policy: "Policy") -> SimResult:
        """Simulate every job to completion under ``policy``."""
        policy.attach(self)
        order = np.argsort(self.arrival, kind="stable")
        arrivals = self.arrival[order]
        i, n = 0, self.n
        heap = self.heap
        inf = math.inf
        while i < n or heap:
            next_arrival = arrivals[i] if i < n else inf
            if heap and heap[0][0] <= next_arrival:
                t, _, ev, a, b = heapq.heappop(heap)
                self.now = t
                if ev == _EV_FINISH:
                    if b != self.version[a]:
                        continue  # stale: the job's rate changed since
                    g = int(self.gpu_of[a])
                    self._advance(g)
                    self.gpu_jobs[g].remove(a)
                    self.freed += 1
                    self._load(g, a, -1.0)
                    self.gpu_of[a] = -1
                    self.state[a] = DONE
                    self.finish[a] = t
                    self.rem[a] = 0.0
                    self._rerate(g)
                    policy.on_free(g)
                elif ev == _EV_PROFILE:
                    if self.state[a] != PROFILING or b != self.placements[a]:
                        continue
                    policy.on_profile_end(a)
                else:
                    policy.on_check(a, b)
            else:
                j = int(order[i])
                i += 1
                self.now = float(arrivals[i - 1])
                self.enqueued_at[j] = self.now
                policy.submit(j)
            policy.schedule()
            if not heap and i >= n and policy.pending():
                raise GpupredError(f"{policy.name}: {policy.pending()} jobs can never be placed (scheduler stalled)")
        return self._result(policy.name)

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
        jobs = pd.DataFrame(
            {
                "job_id": self.table["job_id"].to_numpy(),
                "arrival_s": self.arrival,
                "start_s": self.first_start,
                "finish_s": self.finish,
                "jct_s": jct,
                "wait_s": self.wait,
                "ooms": self.ooms,
                "migrations": self.migrations,
            }
        )
        metrics = {
            "n_jobs": int(self.n),
            "avg_util": avg_util,
            "makespan_s": span,
            "mean_jct_s": float(np.mean(jct)) if self.n else 0.0,
            "median_jct_s": float(np.median(jct)) if self.n else 0.0,
            "mean_wait_s": float(np.mean(self.wait)) if self.n else 0.0,
            "ooms": int(self.n_ooms),
            "migrations": int(self.n_migrations),
        }
        return SimResult(name, jobs, t, u, metrics)


def simulate(jobs: pd.DataFrame, cluster: Cluster, policy: "Policy", slowdown: Slowdown | None = None,
             oom_restart_s: float = 30.0) -> SimResult:
    """Simulate ``jobs`` on ``cluster`` under ``policy``; co-located jobs progress at ``slowdown``."""
    return Simulator(jobs, cluster, slowdown, oom_restart_s).run(policy)
