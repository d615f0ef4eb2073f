"""The Alibaba openb GPU-sharing trace as a simulator scenario: real arrivals, durations, GPU requests and nodes.

What comes from the trace (:mod:`gpupred.importers.alibaba`), and what had to be decided (documented once, here):

- **Tasks.** Tasks that asked for a GPU and ran (a scheduled time, hence a duration). CPU-only tasks and
  tasks never scheduled (``Pending``: no duration) are left out; counted by :func:`trace_counts`.
  A task of ``num_gpu`` GPUs becomes ``num_gpu`` single-GPU jobs arriving together (the simulator does
  not gang-schedule; the count says how many jobs came from such tasks). Arrival = creation time;
  work = the task's running time (scheduled to deleted), clipped at ``max_duration_s`` so a few
  months-long pods do not fix every policy's makespan (the count of clipped tasks is kept).
- **Prehistory.** The first ``skip_frac`` (1 %) of tasks by arrival are long-lived pods created over
  the ~110 days before the trace's dense month; they are left out.
- **Slices.** The remaining tasks, in arrival order, split into a *tuning* slice (the first
  ``tune_frac``) where policy constants may be fitted, and an *evaluation* slice right after it (at most
  ``eval_tasks`` tasks, contiguous): results are reported on the evaluation slice only.
- **Workloads.** The trace names no models. Each job gets a measured workload (a row of the world's
  workload table: measured solo utilization and memory on the GPU the co-location truth was measured
  on) by its requested GPU share: jobs are ranked by share (ties broken at random with the seed), the
  rank's quantile plus a seeded jitter (``jitter``, in quantiles) picks the workload at that quantile of
  measured solo utilization. A task that asked for a small share gets a workload that measured low
  utilization; the seed changes the assignment.
- **GPUs.** Nodes as listed, each GPU with its model's memory (:func:`gpupred.importers.alibaba.node_memory_gb`;
  G1-G3 undisclosed: 24 GB assumed).
- **GPU speed.** A job's work (its trace duration) is its solo run time on the truth's GPU (the RTX 3090).
  A GPU of another model runs it ``speed`` times as fast (:func:`relative_speed`): the geometric mean of
  its FP32 peak ratio and memory-bandwidth ratio to the truth's GPU (:mod:`gpupred.hardware`), since a
  training step is partly compute- and partly bandwidth-bound (V100 0.65, A10 0.75, T4 0.28 of an RTX
  3090). Models missing from that table (the undisclosed G1-G3) get :data:`SPEED_FALLBACK` (1: the
  truth's GPU, as their memory is), logged once per model and counted per GPU (``speed_source``).
  Pair slowdowns are the truth's GPU's on every model.
- **Load.** The trace's cluster was mostly idle for these tasks; a *load* ``L`` keeps a seeded random
  subset of nodes whose summed GPU speed is the slice's solo GPU work over (``L`` x its arrival span).
- **Gavel's trace** (:func:`homogeneous_scenario`): the same slices' arrivals and durations, each job one of
  Gavel's job types drawn uniformly at random (seeded; heavy ones included), on identical GPUs of the matrix's kind,
  as many as the load asks for.
- **Multi-GPU tasks** are not gang-scheduled: each of their GPUs is an independent job (they are 1 % of
  the GPU tasks; gang placement would need node structure in :class:`gpupred.sim.cluster.Cluster` and in every
  policy, left undone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.sim.cluster import Cluster
from gpupred.sim.arrivals import check_workload_table, jobs_from


@dataclass(frozen=True)
class TraceSlices:
    """The trace's GPU tasks cut into a tuning slice and an evaluation slice (see the module doc)."""

    tune: pd.DataFrame
    evaluate: pd.DataFrame
    counts: dict[str, int]


def gpu_tasks(tasks: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """Tasks that asked for a GPU and ran, in arrival order; and how many were left out and why."""
    gpu = tasks["num_gpu"] > 0
    ran = gpu & tasks["duration_s"].notna() & (tasks["duration_s"] > 0)
    out = tasks[ran].sort_values(["arrival_s", "task_id"], kind="stable").reset_index(drop=True)
    return out, {"tasks": int(len(tasks)), "cpu_only": int((~gpu).sum()), "never_ran": int((gpu & ~ran).sum()),
                 "gpu_tasks_ran": int(len(out))}


def slice_trace(tasks: pd.DataFrame, tune_frac: float = 0.2, eval_tasks: int = 0, skip_frac: float = 0.01) -> TraceSlices:
    """Tuning and evaluation slices of the trace's GPU tasks (``eval_tasks`` 0: every task after the tuning slice)."""
    if not 0 < tune_frac < 1 or not 0 <= skip_frac < 1:
        raise GpupredError(f"tune_frac={tune_frac} must lie in (0, 1) and skip_frac={skip_frac} in [0, 1)")
    ran, counts = gpu_tasks(tasks)
    skip = int(round(skip_frac * len(ran)))
    dense = ran.iloc[skip:].reset_index(drop=True)
    n_tune = int(round(tune_frac * len(dense)))
    tune = dense.iloc[:n_tune].reset_index(drop=True)
    rest = dense.iloc[n_tune:]
    evaluate = (rest.iloc[:eval_tasks] if eval_tasks > 0 else rest).reset_index(drop=True)
    if tune.empty or evaluate.empty:
        raise GpupredError(f"trace of {len(ran)} GPU tasks too small for a tuning and an evaluation slice")
    counts.update({"prehistory_skipped": skip, "tune_tasks": int(len(tune)), "eval_tasks": int(len(evaluate))})
    return TraceSlices(tune, evaluate, counts)


def assign_workloads(share: np.ndarray, util: np.ndarray, seed: int, jitter: float = 0.1) -> np.ndarray:
    """Per job, the index of a workload: the share's rank quantile (+ seeded jitter) at that quantile of ``util``."""
    share = np.asarray(share, dtype=float)
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(len(share)), share))  # by share, ties at random
    q = np.empty(len(share))
    q[order] = (np.arange(len(share)) + 0.5) / max(len(share), 1)
    q = np.clip(q + rng.normal(0.0, jitter, len(share)), 0.0, 1.0 - 1e-9)
    by_util = np.argsort(np.asarray(util, dtype=float), kind="stable")
    return by_util[(q * len(by_util)).astype(np.int64)]


def trace_jobs(tasks: pd.DataFrame, workloads: pd.DataFrame, seed: int, max_duration_s: float = 2 * 86400.0,
               jitter: float = 0.1, assign: str = "share") -> pd.DataFrame:
    """A simulator job table from trace tasks (multi-GPU tasks split, durations clipped, workloads assigned).

    ``assign="share"``: by requested GPU share against measured solo utilization (:func:`assign_workloads`);
    ``"uniform"``: each job a workload drawn uniformly at random (seeded), whatever it asked for.
    """
    if assign not in ("share", "uniform"):
        raise GpupredError(f"assign={assign!r}: workloads are assigned by 'share' or 'uniform'")
    table = check_workload_table(workloads)
    reps = tasks["num_gpu"].to_numpy(np.int64)
    ids = np.array([f"{t}" if r == 1 else f"{t}.g{k}" for t, r in zip(tasks["task_id"], reps) for k in range(r)],
                   dtype=object)
    arrival = np.repeat(tasks["arrival_s"].to_numpy(float), reps)
    work = np.minimum(np.repeat(tasks["duration_s"].to_numpy(float), reps), max_duration_s)
    share = np.repeat(tasks["gpu_share"].to_numpy(float), reps)
    if assign == "share":
        kind = assign_workloads(share, table["true_util"].to_numpy(float), seed, jitter)
    else:
        kind = np.random.default_rng([seed, 11]).integers(0, len(table), size=len(share))
    jobs = jobs_from(table, kind, arrival - arrival.min(), work, ids)
    jobs["gpu_share"] = share
    return jobs


SPEED_FALLBACK = 1.0  # relative speed of a GPU model gpupred.hardware does not know: the truth's GPU's
_logged_fallbacks: set[str] = set()


def relative_speed(model: str, reference: str) -> tuple[float, str]:
    """(speed of a trace node model relative to GPU ``reference``, source): hardware, or fallback (logged once)."""
    import logging

    from gpupred.hardware import gpu_spec
    from gpupred.importers.alibaba import HARDWARE_NAMES

    name = HARDWARE_NAMES.get(model.strip().upper())
    if name is None:
        if model not in _logged_fallbacks:
            _logged_fallbacks.add(model)
            logging.getLogger(__name__).warning("GPU model %r is not in gpupred.hardware: speed %.2f of %s assumed",
                                                model, SPEED_FALLBACK, reference)
        return SPEED_FALLBACK, "fallback"
    g, ref = gpu_spec(name), gpu_spec(reference)
    return float(np.sqrt(g.tflops_fp32 / ref.tflops_fp32 * g.mem_bw_gbs / ref.mem_bw_gbs)), "gpupred.hardware"


def with_speeds(nodes: pd.DataFrame, reference: str) -> pd.DataFrame:
    """``nodes`` with ``speed`` (relative to ``reference``, :func:`relative_speed`) and ``speed_source`` per node."""
    speeds = {m: relative_speed(str(m), reference) for m in nodes["model"].unique()}
    return nodes.assign(speed=[speeds[m][0] for m in nodes["model"]], speed_source=[speeds[m][1] for m in nodes["model"]])


def cluster_for_load(nodes: pd.DataFrame, jobs: pd.DataFrame, load: float, seed: int, max_per_gpu: int = 2) -> Cluster:
    """A seeded random subset of the trace's nodes whose summed speed is solo GPU work / (load x arrival span).

    ``nodes`` without a ``speed`` column run at speed 1 (the truth's GPU).
    """
    if load <= 0:
        raise GpupredError(f"load={load} must be positive")
    span = float(jobs["arrival_s"].max() - jobs["arrival_s"].min()) or float(jobs["work_s"].max())
    want = max(1.0, float(jobs["work_s"].sum() / (load * span)))
    speed = nodes["speed"].to_numpy(float) if "speed" in nodes.columns else np.ones(len(nodes))
    order = np.random.default_rng(seed).permutation(len(nodes))
    caps: list[float] = []
    speeds: list[float] = []
    total = 0.0
    for i in order:
        for _ in range(int(nodes["gpus"].iloc[i])):
            if total >= want:
                break
            caps.append(float(nodes["gpu_memory_mib"].iloc[i]))
            speeds.append(float(speed[i]))
            total += float(speed[i])
    if total < want:
        raise GpupredError(f"load {load} needs GPUs of summed speed {want:.0f}; the node list has {total:.0f}")
    return Cluster(max_per_gpu=max_per_gpu, per_gpu_memory_mib=tuple(caps), per_gpu_speed=tuple(speeds))


def fitting_jobs(jobs: pd.DataFrame, cluster: Cluster) -> tuple[pd.DataFrame, int]:
    """The jobs whose measured memory fits the cluster's largest GPU, and how many did not."""
    ok = jobs["true_mem_mib"].to_numpy(float) <= cluster.capacity.max()
    return jobs[ok].reset_index(drop=True), int((~ok).sum())


def trace_counts(slices: TraceSlices, jobs: pd.DataFrame, max_duration_s: float = 2 * 86400.0) -> dict[str, int]:
    """What the evaluation scenario holds: the slices' counts plus jobs, jobs from multi-GPU tasks, clipped tasks."""
    ev = slices.evaluate
    return {**slices.counts, "eval_jobs": int(len(jobs)), "eval_jobs_from_multi_gpu": int(ev.loc[ev["num_gpu"] > 1, "num_gpu"].sum()),
            "eval_fractional_tasks": int(((ev["num_gpu"] == 1) & (ev["gpu_share"] < 1)).sum()),
            "eval_clipped_tasks": int((ev["duration_s"] > max_duration_s).sum())}


def load_openb(fixture_dir: str = "", allow_import: bool = True) -> tuple[pd.DataFrame, pd.DataFrame] | str:
    """(tasks, nodes) of the openb trace, imported at the pinned commit (or its local copy); or one line saying why not.

    ``fixture_dir`` (tests only) reads FIXTURE files in the openb layout from a folder, without the sha256 pin.
    """
    from pathlib import Path

    from gpupred.importers import alibaba
    from gpupred.importers.source import ensure_imported

    if fixture_dir:
        d = Path(fixture_dir)
        return (alibaba.tasks_from_frame(pd.read_csv(d / alibaba.POD_FILE), str(d / alibaba.POD_FILE)),
                alibaba.nodes_from_frame(pd.read_csv(d / alibaba.NODE_FILE), str(d / alibaba.NODE_FILE)))
    if not allow_import:
        return "the openb section is switched off (openb=False)"
    ok, why = ensure_imported(alibaba.SOURCE)
    return (alibaba.read_tasks(), alibaba.read_nodes()) if ok else why


def homogeneous_scenario(part: pd.DataFrame, workloads: pd.DataFrame, load: float, gpu_memory_mib: float,
                         max_duration_s: float = 2 * 86400.0) -> Callable[[int], tuple[pd.DataFrame, Cluster]]:
    """A seed -> (jobs, cluster) maker: the slice's arrivals and durations, workloads drawn uniformly, on as many
    identical GPUs of the truth's kind (speed 1) as make its solo GPU work ``load`` x GPUs x arrival span."""
    if load <= 0:
        raise GpupredError(f"load={load} must be positive")

    def make(seed: int) -> tuple[pd.DataFrame, Cluster]:
        jobs = trace_jobs(part, workloads, seed, max_duration_s=max_duration_s, assign="uniform")
        span = float(jobs["arrival_s"].max() - jobs["arrival_s"].min()) or float(jobs["work_s"].max())
        n = max(1, int(np.ceil(float(jobs["work_s"].sum()) / (load * span))))
        return jobs, Cluster(nodes=1, gpus_per_node=n, gpu_memory_mib=gpu_memory_mib)

    return make


def scenario(part: pd.DataFrame, workloads: pd.DataFrame, nodes: pd.DataFrame, load: float,
             max_duration_s: float = 2 * 86400.0) -> Callable[[int], tuple[pd.DataFrame, Cluster]]:
    """A seed -> (jobs, cluster) maker for one slice of the trace at one load (jobs too big for every GPU dropped)."""
    def make(seed: int) -> tuple[pd.DataFrame, Cluster]:
        jobs = trace_jobs(part, workloads, seed, max_duration_s=max_duration_s)
        cluster = cluster_for_load(nodes, jobs, load, seed)
        return fitting_jobs(jobs, cluster)[0], cluster

    return make
