"""The step model's timeline for many runs at once: :func:`gpupred.step.physics.timeline.simulate` over every kernel of every
run in a few numpy passes (torch-free).

Fitting the constants evaluates hundreds of runs a few hundred times each (a bounded least-squares fit with a
finite-difference Jacobian); one :func:`~gpupred.step.physics.timeline.simulate` call per run costs a Python round trip
per run and evaluation. :class:`BatchedRuns` lays every run's kernels end to end once, with each kernel's peaks
(its run's GPU and precision) beside it; :meth:`BatchedRuns.simulate` then prices every kernel, launches them and
runs each run's queue with segment sums and segment maxima. Runs whose host waits inside the step (a GradScaler's
inf check: ``sync_after``) keep the per-run path. The answers are :func:`~gpupred.step.physics.timeline.simulate`'s to the
rounding (``tests/test_perf.py`` checks them, to a relative 1e-9, on graphs of several kinds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from gpupred.hardware import GpuSpec
from gpupred.step.physics.constants import StepConstants
from gpupred.step.physics.kernels import BWD, DEPTHWISE, OPT, KernelList
from gpupred.step.physics.timeline import LoaderTimes, loader_arrays, on_tensor_cores, peaks, simulate, with_loader


@dataclass
class BatchedRuns:
    """Every kernel of many runs, end to end, with what the timeline needs per kernel and per run."""

    starts: np.ndarray  # per run: index of its first kernel (runs without kernels are left to the per-run path)
    flops: np.ndarray
    bytes: np.ndarray
    tc_peak: np.ndarray  # per kernel: its run's tensor-core peak (FLOP/s) where it runs on tensor cores, else 0
    fp32_peak: np.ndarray  # per kernel: its run's CUDA-core peak
    depthwise: np.ndarray  # bool
    bandwidth: np.ndarray  # per kernel: its run's bytes/s
    phase: np.ndarray
    library: np.ndarray  # bool
    cycles: np.ndarray  # per run
    param_tensors: np.ndarray
    copy_bytes: np.ndarray  # per run: input bytes copied each step (0 without host batches)
    counts: np.ndarray  # per run: kernels
    sync: np.ndarray  # per run: the protocol's sync mode
    per_run: np.ndarray  # bool per run: simulated one by one (a host wait inside the step, or no kernels)
    run_of: np.ndarray  # per kernel: its position among the batched runs

    @classmethod
    def build(cls, kernels: Sequence[KernelList], gpus: Sequence[GpuSpec], precisions: Sequence[str],
              syncs: Sequence[str], host_batches: Sequence[bool]) -> "BatchedRuns":
        """Lay out ``kernels`` (one KernelList per run) with each run's GPU, precision, sync mode and input feeding."""
        per_run = np.array([len(k) == 0 or bool(np.any(k.sync_after)) for k in kernels], dtype=bool)
        batched = [i for i in range(len(kernels)) if not per_run[i]]
        counts = np.array([len(k) for k in kernels], dtype=int)
        starts = np.zeros(len(kernels), dtype=int)
        starts[batched] = np.concatenate(([0], np.cumsum(counts[batched])[:-1])) if batched else []
        flops, nbytes, tc_peak, fp32_peak, depthwise, bandwidth, phase, library = _laid_out(
            [kernels[i] for i in batched], [gpus[i] for i in batched], [precisions[i] for i in batched])
        return cls(starts, flops, nbytes, tc_peak, fp32_peak, depthwise, bandwidth, phase, library,
                   np.array([k.cycles for k in kernels], dtype=float),
                   np.array([k.param_tensors for k in kernels], dtype=float),
                   np.array([float(k.input_bytes) if h else 0.0 for k, h in zip(kernels, host_batches)]),
                   counts, np.asarray(syncs, dtype=object), per_run,
                   np.repeat(np.arange(len(batched)), counts[batched]) if batched else np.empty(0, dtype=int))

    def simulate(self, c: StepConstants, kernels: Sequence[KernelList], gpus: Sequence[GpuSpec],
                 precisions: Sequence[str], syncs: Sequence[str],
                 host_batches: Sequence[bool],
                 loaders: Sequence[LoaderTimes | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(analytic utilization %, step s) of every run under constants ``c`` (the inputs as given to :meth:`build`,
        for the runs that keep the per-run path; ``loaders``: each run's host input pipeline, None resident)."""
        n = len(self.counts)
        busy, step, host = np.zeros(n), np.zeros(n), np.zeros(n)
        batched = np.flatnonzero(~self.per_run)
        if len(batched):
            busy[batched], step[batched], host[batched] = self._timeline(c, batched)
        for i in np.flatnonzero(self.per_run):
            est = simulate(kernels[i], gpus[i], precisions[i], c, syncs[i], bool(host_batches[i]))
            busy[i], step[i], host[i] = est.gpu_busy_s, est.step_s, est.host_s
        if loaders is not None:
            step, host = with_loader(step, busy, host, self.sync, loader_arrays(loaders, n))
        util = np.where(step > 0, 100.0 * busy / np.where(step > 0, step, 1.0), 0.0)
        return util, step

    def _timeline(self, c: StepConstants, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batched runs' (GPU-busy s, step s, host s): kernel times, launches, and each run's queue."""
        starts, counts = self.starts[runs], self.counts[runs]
        g, busy, cum_g = self._kernel_times(c, starts)
        launch, launched, cum_launch = self._launches(c, starts)
        pre = c.step_overhead_s * self.cycles[runs] + c.param_host_s * self.param_tensors[runs]
        pre = pre + self.copy_bytes[runs] / (c.host_copy_gbs * 1e9)
        host = pre + launched
        lead = _segment_lead(g, cum_g, cum_launch, starts, self.run_of, pre)  # max over a run's kernels of (issue -
        end = busy + np.maximum(0.0, lead)  # GPU work before)
        sync = self.sync[runs]
        step = np.where(sync == "step", np.maximum(host, end) + c.sync_s, np.maximum(host, busy))
        step = np.where(sync == "kernel", host + c.blocking_s * counts + busy, step)
        step = np.maximum(step, busy)
        return busy, step, host

    def _masks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Kernels on tensor cores, in the backward, in the optimizer (worked out once)."""
        if "masks_" not in self.__dict__:
            self.__dict__["masks_"] = (self.tc_peak > 0, self.phase == BWD, self.phase == OPT)
        return self.__dict__["masks_"]

    def _kernel_times(self, c: StepConstants, starts: np.ndarray) -> tuple[np.ndarray, ...]:
        """Each kernel's GPU time, each run's sum of them, and their running sum. A fit's Jacobian moves one
        constant at a time: the launch constants leave these as they were (kept for the last ``KEPT`` constants)."""
        key = (c.tensor_eff, c.compute_eff, c.depthwise_eff, c.memory_eff, c.min_kernel_s)
        return _kept(self.__dict__.setdefault("kernel_times_", {}), key, lambda: self._price(c, starts))

    def _price(self, c: StepConstants, starts: np.ndarray) -> tuple[np.ndarray, ...]:
        tc, _, _ = self._masks()
        peak = np.where(tc, self.tc_peak * c.tensor_eff, self.fp32_peak * c.compute_eff)
        peak = np.where(self.depthwise, self.fp32_peak * c.depthwise_eff, peak)
        g = np.maximum(self.flops / peak, self.bytes / (self.bandwidth * c.memory_eff)) + c.min_kernel_s
        return g, np.add.reduceat(g, starts), np.cumsum(g)

    def _launches(self, c: StepConstants, starts: np.ndarray) -> tuple[np.ndarray, ...]:
        """Each kernel's launch time, each run's sum of them, and their running sum (kept as :meth:`_kernel_times`
        keeps its own, for the device constants' moves)."""
        key = (c.launch_s, c.backward_launch_ratio, c.optimizer_launch_ratio, c.library_launch_ratio)
        return _kept(self.__dict__.setdefault("launches_", {}), key, lambda: self._launch(c, starts))

    def _launch(self, c: StepConstants, starts: np.ndarray) -> tuple[np.ndarray, ...]:
        _, bwd, opt = self._masks()
        scale = np.ones(len(self.flops))
        scale[bwd] = c.backward_launch_ratio
        scale[opt] = c.optimizer_launch_ratio
        scale[self.library] = c.library_launch_ratio
        launch = c.launch_s * scale
        return launch, np.add.reduceat(launch, starts), np.cumsum(launch)


KEPT = 2  # constants' arrays a BatchedRuns keeps per half (the point a Jacobian moves from, and the last); keyed by
# the constants alone: ``simulate`` always times the same runs (those off the per-run path)


def _kept(store: dict[Any, Any], key: tuple[float, ...], compute: Any) -> Any:
    """``store[key]``, computed on a miss; the oldest of more than ``KEPT`` entries is dropped."""
    if key not in store:
        if len(store) >= KEPT:
            store.pop(next(iter(store)))
        store[key] = compute()
    return store[key]


def _laid_out(kernels: Sequence[KernelList], gpus: Sequence[GpuSpec],
              precisions: Sequence[str]) -> tuple[np.ndarray, ...]:
    """Runs' kernels end to end: FLOPs, bytes, tensor-core peak (0 off tensor cores), CUDA-core peak, depthwise,
    bandwidth, phase, library launch; each run's peaks and bandwidth repeated over its kernels (empty without runs)."""
    if not kernels:
        empty = np.empty(0)
        return empty, empty, empty, empty, empty.astype(bool), empty, empty.astype(int), empty.astype(bool)
    counts = [len(kl) for kl in kernels]
    rates = [kl.precision if kl.on_tc is not None else p for kl, p in zip(kernels, precisions)]  # as kernel_times
    run_peaks = np.array([peaks(gpu, rate) for gpu, rate in zip(gpus, rates)], dtype=float).reshape(-1, 2)
    on_tc = np.concatenate([on_tensor_cores(kl, rate) for kl, rate in zip(kernels, rates)])
    library = np.concatenate([kl.library if kl.library is not None else np.zeros(len(kl), dtype=bool)
                              for kl in kernels])
    unit = np.concatenate([kl.tensor_core for kl in kernels])
    return (np.concatenate([kl.flops for kl in kernels], dtype=float),
            np.concatenate([kl.bytes for kl in kernels], dtype=float),
            np.where(on_tc, np.repeat(run_peaks[:, 0], counts), 0.0), np.repeat(run_peaks[:, 1], counts),
            unit == DEPTHWISE, np.repeat([gpu.mem_bw_gbs * 1e9 for gpu in gpus], counts),
            np.concatenate([kl.phase for kl in kernels]).astype(int), library.astype(bool))


def _segment_lead(g: np.ndarray, cum_g: np.ndarray, cum_launch: np.ndarray, starts: np.ndarray, run_of: np.ndarray,
                  pre: np.ndarray) -> np.ndarray:
    """Per run: max over its kernels i of (issue_i - GPU work of the kernels before i), issue_i = pre + its launches
    up to i (the queue of :func:`gpupred.step.physics.timeline._queue` without a host wait: the GPU ends at busy + this);
    ``cum_g`` and ``cum_launch``: the running sums of the kernels' GPU and launch times."""
    before_launch = np.where(starts > 0, cum_launch[np.maximum(starts - 1, 0)], 0.0)
    before_g = np.where(starts > 0, cum_g[np.maximum(starts - 1, 0)], 0.0)
    issue = pre[run_of] + cum_launch - before_launch[run_of]
    prev = cum_g - g - before_g[run_of]
    return np.maximum.reduceat(issue - prev, starts)
