"""GPU time per kernel (roofline with a minimum) and the host launch timeline of one training step (torch-free).

Each kernel's GPU time is ``max(FLOPs / (peak x efficiency), bytes / (bandwidth x memory efficiency)) + minimum
kernel time``: the minimum is a fixed cost every kernel pays on the device (its launch latency, ramp-up and tail;
added rather than a floor, which fitted this project's H200 runs better: utilization RMSLE 0.205 against 0.227
in-sample), with the tensor-core peak of the precision for contractions (fp32 convolutions and
recurrent layers run TF32, torch's cuDNN default; fp32 matmuls run at the FP32 peak, torch's matmul default; the
training setup's ``tf32_conv`` and ``tf32_matmul`` change them: :attr:`gpupred.step.physics.kernels.KernelList.on_tc`)
and the FP32 peak for everything else; tensor-core kernels run at ``tensor_eff`` of their peak, depthwise
convolutions at ``depthwise_eff`` of the FP32 peak, the rest at ``compute_eff``. The host launches kernels one
after another (a launch cost per kernel, scaled per phase: the autograd engine launches backward kernels from
C++, cheaper than Python's forward), after a fixed per-step overhead (the Python step: batch, zero_grad,
autocast, loss, optimizer loop; paid once per zero_grad/backward/step cycle, twice in a GAN's step). The GPU runs
kernel i at ``max(launch_i, end_{i-1})``. How the step ends depends on the measurement protocol (the
dataset's ``sync``):

- ``step``: the loop reads the loss each step: the host waits for the GPU, then pays a synchronization latency;
- ``window``: one synchronization per window: the host runs ahead, so a step takes ``max(host, GPU)``;
- ``kernel``: ``CUDA_LAUNCH_BLOCKING=1``: every launch waits for its kernel, ``blocking_s`` beyond it (Lucid's
  protocol).

A batch copied from host memory (``host_batches``) blocks the host for ``input bytes / host_copy_gbs`` with
the GPU idle. A host input pipeline (:class:`LoaderTimes`, resolved from a host profile by
:mod:`gpupred.step.physics.inputfeed`) joins the same timeline (:func:`with_loader`): with no DataLoader workers the main
process makes each batch in line, the GPU idle meanwhile; with workers it only receives (and pins) each batch, while
the workers make batches in parallel, so the steady period is the longest of the step, one batch's making shared by
the workers, and the CPU time of the whole job shared by its cores. Under gradient accumulation a step is one optimizer step: every micro-batch's kernels, overhead and
batch copy. Analytic utilization is GPU-busy time over step time (NVML counts a sample period busy when a
kernel runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gpupred.hardware import GpuSpec
from gpupred.step.physics.constants import StepConstants
from gpupred.step.physics.kernels import BWD, CONV, DEPTHWISE, MATMUL, OPT, KernelList

SYNC_MODES: tuple[str, ...] = ("step", "window", "kernel")


@dataclass(frozen=True)
class StepEstimate:
    """The step model's answer for one job on one GPU: times in seconds, utilization in percent."""

    step_s: float
    gpu_busy_s: float
    host_s: float
    util: float  # analytic utilization, percent (0-100)
    kernels: int

    def columns(self) -> dict[str, float]:
        """The feature-table columns (``STEP_COLUMNS``) of this estimate."""
        return {"phys_step_s": self.step_s, "phys_gpu_busy_s": self.gpu_busy_s, "phys_host_s": self.host_s,
                "phys_util": self.util, "phys_kernels": float(self.kernels)}


@dataclass(frozen=True)
class LoaderTimes:
    """A host input pipeline's times per batch on the job's host, as the timeline reads them (seconds)."""

    produce_s: float  # one process's time to make one batch: read, decode, augment, collate (and pin, in line)
    main_s: float = 0.0  # with workers: the main thread's time per batch beside the step (receive it)
    workers: int = 0  # DataLoader num_workers (0: the main process makes every batch in line)
    cores: float = float("inf")  # CPU cores the job's processes share
    pin_s: float = 0.0  # with workers and pin_memory: the pin-memory thread's time per batch (it runs beside the step)
    host_guessed: bool = False  # the job named no host: priced on a GPU server as measured (gpupred.loader.speed)


def loader_arrays(loaders: Sequence[LoaderTimes | None], n: int) -> np.ndarray:
    """``loaders`` (None: resident batches) as an (n, 5) array of produce, main, workers, cores, pin; NaN rows
    resident."""
    out = np.full((n, 5), np.nan)
    for i, lt in enumerate(loaders):
        if lt is not None:
            out[i] = (lt.produce_s, lt.main_s, lt.workers, lt.cores, lt.pin_s)
    return out


def with_loader(step: np.ndarray, busy: np.ndarray, host: np.ndarray, sync: np.ndarray,
                loaders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(step s, host s) of steps fed by host pipelines (``loaders`` from :func:`loader_arrays`; NaN rows keep theirs).

    In line (no workers) the main process makes the batch before it launches the step: host and step grow by the
    batch's time (under ``sync="window"`` the host may still hide behind the GPU). With workers the main thread adds
    only its receiving time, and the steady period is the longest of that step, one batch's making over the workers
    (each worker makes whole batches, ``prefetch_factor`` deep, so a worker never waits on the step in a steady
    state), the pin-memory thread's time per batch, and the CPU time of everything the job's processes do per step
    over the cores they share. The main thread's CPU time per step is the whole step: it waits for the device by
    spinning on a core (``cudaDeviceScheduleAuto``, CUDA's default, spins while the process's CUDA contexts are
    fewer than the host's logical CPUs), so the workers share what the cores give beyond it. Where the workers and the
    main process outnumber the cores, the main thread's CPU work (launches, receiving) also waits its turn whenever
    every core is taken (:func:`main_thread_stretch`).
    """
    produce, main, workers, cores, pin = (loaders[:, j] for j in range(5))
    piped = ~np.isnan(produce)
    if not piped.any():
        return step, host
    inline = np.where(workers > 0, main, produce)
    host2 = host + np.where(piped, inline, 0.0)
    window = np.asarray(sync, dtype=object) == "window"
    step2 = np.where(window, np.maximum(step, host2), step + np.where(piped, inline, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        made = np.where(workers > 0, np.maximum(produce / np.maximum(workers, 1), pin), 0.0)
        cpu = np.where(workers > 0, (produce + step2 + pin) / cores, 0.0)  # the main thread spins through its step
    period = np.maximum(step2, np.maximum(np.nan_to_num(made), np.nan_to_num(cpu)))
    for i in np.flatnonzero(piped & (workers + 1 > cores)):  # more processes than cores: the main thread queues
        stretch = main_thread_stretch(int(workers[i]), float(cores[i]), produce[i] / (workers[i] * period[i]))
        waited = step2[i] + (stretch - 1.0) * host2[i]
        period[i] = max(period[i], waited if not window[i] else max(step[i], host2[i] * stretch))
    return np.where(piped, np.maximum(period, busy), step), np.where(piped, host2, host)


def main_thread_stretch(workers: int, cores: float, busy: float) -> float:
    """How much longer the main thread's CPU work takes beside ``workers`` workers, each making batches a ``busy``
    fraction of the time, on ``cores`` cores: processor sharing, the main thread getting ``cores / (1 + k)`` of a core
    while ``k`` workers run with it (more than ``cores - 1`` of them); the expectation over k ~ Binomial(workers,
    busy), the workers' making independent of the step."""
    from math import comb

    b = min(max(float(busy), 0.0), 1.0)
    return float(sum(comb(workers, k) * b**k * (1 - b) ** (workers - k) * max(1.0, (1 + k) / cores)
                     for k in range(workers + 1)))


STEP_COLUMNS: tuple[str, ...] = ("phys_step_s", "phys_gpu_busy_s", "phys_host_s", "phys_util", "phys_kernels")


def peaks(gpu: GpuSpec, precision: str) -> tuple[float, float]:
    """(tensor-core peak, CUDA-core peak) in FLOP/s for a precision on a GPU: 16-bit precisions at their own tensor
    rate, fp32 at the TF32 rate (what fp32 contractions reach where TF32 is on)."""
    tc = {"bf16": gpu.tflops_bf16, "bf16-pure": gpu.tflops_bf16, "fp16": gpu.fp16}.get(precision, gpu.tflops_tf32)
    return tc * 1e12, gpu.tflops_fp32 * 1e12


def on_tensor_cores(kl: KernelList, precision: str) -> np.ndarray:
    """Which kernels run on tensor cores: as the kernels' training setup decided, or for kernels built without one,
    torch's defaults (cuDNN convolutions in TF32, fp32 matmuls at the FP32 peak)."""
    if kl.on_tc is not None:
        return kl.on_tc
    return (kl.tensor_core == CONV) | ((kl.tensor_core == MATMUL) & (precision != "fp32"))


def kernel_times(kl: KernelList, gpu: GpuSpec, precision: str, c: StepConstants) -> np.ndarray:
    """GPU seconds of each kernel: roofline on the GPU's peaks plus the minimum kernel time."""
    if kl.on_tc is not None:
        precision = kl.precision  # the kernels' own setup decides the tensor-core rate
    tc_peak, fp32_peak = peaks(gpu, precision)
    peak = np.where(on_tensor_cores(kl, precision), tc_peak * c.tensor_eff, fp32_peak * c.compute_eff)
    peak = np.where(kl.tensor_core == DEPTHWISE, fp32_peak * c.depthwise_eff, peak)
    return np.maximum(kl.flops / peak, kl.bytes / (gpu.mem_bw_gbs * 1e9 * c.memory_eff)) + c.min_kernel_s


def launch_costs(kl: KernelList, c: StepConstants) -> np.ndarray:
    """Host seconds to launch each kernel: the launch cost, scaled for backward, optimizer and library launches."""
    scale = np.ones(len(kl))
    scale[kl.phase == BWD] = c.backward_launch_ratio
    scale[kl.phase == OPT] = c.optimizer_launch_ratio
    if kl.library is not None:
        scale[kl.library] = c.library_launch_ratio
    return c.launch_s * scale


def simulate(kl: KernelList, gpu: GpuSpec, precision: str, c: StepConstants, sync: str = "step",
             host_batches: bool = False, loader: LoaderTimes | None = None) -> StepEstimate:
    """One step's timeline under a measurement protocol (``SYNC_MODES``): step, busy and host time, utilization;
    ``loader``: the host input pipeline that feeds it (None: the batch is resident or only copied)."""
    return _timeline(kl, kernel_times(kl, gpu, precision, c), launch_costs(kl, c), c, sync, host_batches, loader)


def simulate_many(kernels: Sequence[KernelList], gpus: Sequence[GpuSpec], precisions: Sequence[str], c: StepConstants,
                  syncs: Sequence[str], host_batches: Sequence[bool],
                  loaders: Sequence[LoaderTimes | None] | None = None) -> list[StepEstimate]:
    """:func:`simulate` of each run under one set of constants, each answer its own to the bit: every run's kernel
    times and launch costs are priced in one pass over their kernels laid end to end (the same operations on each
    kernel), then each run's timeline sums its own."""
    if not kernels:
        return []
    counts = [len(kl) for kl in kernels]
    ends = np.cumsum(counts).tolist()
    g, launch = _kernel_times_many(kernels, gpus, precisions, c, counts), _launch_costs_many(kernels, c)
    loaders = loaders if loaders is not None else [None] * len(kernels)
    return [_timeline(kl, g[end - n:end], launch[end - n:end], c, sync, host, loader)
            for kl, n, end, sync, host, loader in zip(kernels, counts, ends, syncs, host_batches, loaders)]


def _kernel_times_many(kernels: Sequence[KernelList], gpus: Sequence[GpuSpec], precisions: Sequence[str],
                       c: StepConstants, counts: list[int]) -> np.ndarray:
    """:func:`kernel_times` of runs laid end to end: each run's peaks and bandwidth (as it works them out) repeated
    over its kernels."""
    rates = [kl.precision if kl.on_tc is not None else p for kl, p in zip(kernels, precisions)]
    run_peaks = [peaks(gpu, rate) for gpu, rate in zip(gpus, rates)]
    tensor = np.repeat([tc * c.tensor_eff for tc, _ in run_peaks], counts)
    cuda = np.repeat([fp32 * c.compute_eff for _, fp32 in run_peaks], counts)
    depthwise = np.repeat([fp32 * c.depthwise_eff for _, fp32 in run_peaks], counts)
    bandwidth = np.repeat([gpu.mem_bw_gbs * 1e9 * c.memory_eff for gpu in gpus], counts)
    on_tc = np.concatenate([on_tensor_cores(kl, rate) for kl, rate in zip(kernels, rates)])
    peak = np.where(on_tc, tensor, cuda)
    peak = np.where(np.concatenate([kl.tensor_core for kl in kernels]) == DEPTHWISE, depthwise, peak)
    flops, nbytes = (np.concatenate([getattr(kl, name) for kl in kernels]) for name in ("flops", "bytes"))
    return np.maximum(flops / peak, nbytes / bandwidth) + c.min_kernel_s


def _launch_costs_many(kernels: Sequence[KernelList], c: StepConstants) -> np.ndarray:
    """:func:`launch_costs` of runs laid end to end."""
    phase = np.concatenate([kl.phase for kl in kernels])
    library = np.concatenate([kl.library if kl.library is not None else np.zeros(len(kl), bool) for kl in kernels])
    scale = np.ones(len(phase))
    scale[phase == BWD] = c.backward_launch_ratio
    scale[phase == OPT] = c.optimizer_launch_ratio
    scale[library] = c.library_launch_ratio
    return c.launch_s * scale


def _timeline(kl: KernelList, g: np.ndarray, launch: np.ndarray, c: StepConstants, sync: str, host_batches: bool,
              loader: LoaderTimes | None) -> StepEstimate:
    """:func:`simulate`'s timeline of one step whose kernels take ``g`` on the GPU and ``launch`` on the host."""
    busy = float(g.sum())
    pre = c.step_overhead_s * kl.cycles + c.param_host_s * kl.param_tensors
    pre += kl.input_bytes / (c.host_copy_gbs * 1e9) if host_batches else 0.0
    if sync == "kernel":
        host = pre + float(launch.sum()) + c.blocking_s * len(kl)
        step = host + busy
    else:
        end, host_end = _queue(g, pre + np.cumsum(launch), kl.sync_after, c.sync_s)
        host = pre + float(launch.sum())
        step = max(host_end, end) + c.sync_s if sync == "step" else max(host_end, busy)
        if sync == "window":
            step = max(step, host)
    step = max(step, busy)
    if loader is not None:
        s2, h2 = with_loader(np.array([step]), np.array([busy]), np.array([host]), np.array([sync], dtype=object),
                             loader_arrays([loader], 1))
        step, host = float(s2[0]), float(h2[0])
    return StepEstimate(step, busy, host, 100.0 * busy / step if step > 0 else 0.0, len(kl))


def _queue(g: np.ndarray, issue: np.ndarray, sync_after: np.ndarray, sync_s: float) -> tuple[float, float]:
    """(GPU end, host end) of kernels issued at ``issue`` and run in order; the host waits at ``sync_after``."""
    if len(g) == 0:
        return 0.0, float(issue[-1]) if len(issue) else 0.0
    shift = 0.0
    end = 0.0
    start = 0
    for stop in [*np.flatnonzero(sync_after) + 1, len(g)]:
        if stop <= start:
            continue
        seg_issue = issue[start:stop] + shift
        cum = np.cumsum(g[start:stop])
        prev = np.concatenate(([0.0], cum[:-1]))
        # end_i = cum_i + max(end_before, max_{k<=i}(issue_k - prev_k))
        end = float(cum[-1] + max(end, float(np.max(seg_issue - prev))))
        if stop < len(g) and sync_after[stop - 1]:
            wait = max(0.0, end + sync_s - (issue[stop - 1] + shift))
            shift += wait
        start = stop
    return end, float(issue[-1] + shift)
