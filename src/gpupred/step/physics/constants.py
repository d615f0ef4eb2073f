"""The step model's constants: defaults from published figures, fitted per (GPU kind, measurement protocol).

Defaults (any GPU of :mod:`gpupred.hardware` gets an answer with them):

- ``tensor_eff`` 0.55, ``compute_eff`` 0.70, ``memory_eff`` 0.70: achieved fractions of the datasheet peaks for
  tensor-core contractions, FP32 CUDA-core work and streaming kernels (NVIDIA's cuBLAS and STREAM-like figures on
  A100/H100 run at 60-80% of dense peak; training layers are smaller, tensor cores harder to feed);
- ``launch_s`` 8 us per forward kernel: eager PyTorch's Python + dispatcher + ``cudaLaunchKernel`` per op
  (PyTorch's own profiler shows 5-10 us CPU per small op); backward kernels 0.6x (autograd engine in C++),
  optimizer (foreach) launches 1.5x (Python list handling per op), launches from inside a library or C++ loop
  0.25x (a bare ``cudaLaunchKernel``, 2-3 us);
- ``step_overhead_s`` 150 us: the Python step outside the ops (batch, zero_grad, autocast, loss, optimizer);
- ``param_host_s`` 0.2 us per parameter tensor (the optimizer's per-tensor Python bookkeeping);
- ``min_kernel_s`` 2.5 us: the shortest kernel a GPU runs (launch latency on the device, a few microseconds);
- ``depthwise_eff`` 0.05 of the FP32 peak: depthwise convolutions (one group per channel) run on CUDA cores with
  little reuse, their weight gradient a reduction over batch and space (published MobileNet profiles: a few % of peak);
- ``sync_s`` 15 us: a ``cudaStreamSynchronize`` round trip (the loop's ``loss.item()``: a wait and a scalar's copy);
  ``host_copy_gbs`` 12 GB/s: a pageable host-to-device copy;
- ``blocking_s`` 15 us (``sync_s``'s default): the host's wait for each kernel under ``CUDA_LAUNCH_BLOCKING=1``
  (the ``kernel`` protocol), beyond its launch: the driver's poll for the kernel's end, no copy. Runs of that
  protocol beside runs of another on the same GPU kind identify it: :func:`~gpupred.step.physics.fit.fit_constants`
  fits it there (``blocking_runs``: on how many), and a key without such runs borrows it as it borrows the launch
  cost. It prices the launch-blocking timeline only, so no other protocol's answer moves with it.

The host constants are the host CPU's as much as the software's: fitted constants record the single-core score of
the hosts they were fitted on (``host_score``, :mod:`gpupred.loader.speed`: 1.0 = the reference host, this project's
development machine), and a launch cost borrowed onto another lab's host moves by the speed ratio
(:meth:`ConstantsTable.get`).

:func:`gpupred.step.physics.fit.fit_constants` fits the seven of ``FITTED`` to training rows of one (GPU kind, protocol).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from gpupred.errors import GpupredError

HOST_CONSTANTS: tuple[str, ...] = ("launch_s", "step_overhead_s")  # the host's and harness's, not the GPU's
DEVICE_CONSTANTS: tuple[str, ...] = (  # the GPU's
    "compute_eff", "tensor_eff", "memory_eff", "min_kernel_s", "depthwise_eff")
FITTED: tuple[str, ...] = (*DEVICE_CONSTANTS[:3], *HOST_CONSTANTS, *DEVICE_CONSTANTS[3:])
BOUNDS: dict[str, tuple[float, float]] = {  # plausible ranges the fit stays in
    "compute_eff": (0.05, 1.0), "tensor_eff": (0.05, 1.0), "memory_eff": (0.05, 1.0), "launch_s": (1e-6, 60e-6),
    "step_overhead_s": (0.0, 5e-3), "min_kernel_s": (0.5e-6, 20e-6), "depthwise_eff": (0.005, 1.0),
}


@dataclass(frozen=True)
class StepConstants:
    """The constants of the step model for one (GPU kind, measurement protocol)."""

    compute_eff: float = 0.70  # of the FP32 (CUDA-core) peak
    tensor_eff: float = 0.55  # of the tensor-core peak (TF32 convolutions, 16-bit contractions)
    memory_eff: float = 0.70
    launch_s: float = 8e-6
    step_overhead_s: float = 150e-6
    min_kernel_s: float = 2.5e-6
    depthwise_eff: float = 0.05  # of the FP32 (CUDA-core) peak, for depthwise convolutions each way
    backward_launch_ratio: float = 0.6
    optimizer_launch_ratio: float = 1.5
    library_launch_ratio: float = 0.25  # a bare cudaLaunchKernel from C++ (cuDNN RNN steps, foreach chunks)
    param_host_s: float = 0.2e-6
    sync_s: float = 15e-6
    blocking_s: float = 15e-6  # per kernel under CUDA_LAUNCH_BLOCKING=1 (the kernel protocol's timeline only)
    host_copy_gbs: float = 12.0
    host_score: float = float("nan")  # single-core score of the hosts fitted on (gpupred.loader.speed); NaN: unknown
    blocking_runs: int = 0  # launch-blocking (sync="kernel") runs ``blocking_s`` was fitted on; 0: the default
    source: str = "default"  # "default" or what they were fitted on

    def with_fitted(self, values: dict[str, float], source: str) -> "StepConstants":
        """A copy with the fitted constants replaced."""
        return replace(self, **{k: float(v) for k, v in values.items() if k in FITTED}, source=source)

    def as_dict(self) -> dict[str, Any]:
        """Plain values, for cards and JSON (an unknown ``host_score`` as None)."""
        out = asdict(self)
        out["host_score"] = None if np.isnan(self.host_score) else float(self.host_score)
        return out

    def reference_launch_s(self) -> float:
        """``launch_s`` moved to the reference host (single-core score 1.0) by the speed ratio; as fitted where the
        fit's host is unknown."""
        return self.launch_s * (self.host_score if np.isfinite(self.host_score) else 1.0)

    def reference_blocking_s(self) -> float:
        """``blocking_s`` moved to the reference host as :meth:`reference_launch_s` moves the launch cost: the wait's
        host side (the driver's poll, the return to Python) runs on the host's CPU."""
        return self.blocking_s * (self.host_score if np.isfinite(self.host_score) else 1.0)


DEFAULT = StepConstants()


def constants_from_dict(data: dict[str, Any]) -> StepConstants:
    """Rebuild constants from :meth:`StepConstants.as_dict` output (unknown keys ignored)."""
    names = {f.name for f in fields(StepConstants)}
    values = {k: v for k, v in data.items() if k in names}
    if values.get("host_score", 0.0) is None:
        values["host_score"] = float("nan")
    return StepConstants(**values)


def same_architecture(a: str, b: str) -> bool:
    """GPU kinds ``a`` and ``b`` have one architecture (:func:`gpupred.hardware.architecture`); a kind the table does
    not place shares none."""
    from gpupred.hardware import architecture

    try:
        return architecture(a) == architecture(b)
    except (GpupredError, KeyError):
        return a == b


def geometric_mean(values: Any) -> float:
    """The geometric mean of the positive finite ``values``; NaN when there are none."""
    arr = np.asarray(list(values), dtype=float)
    known = arr[np.isfinite(arr) & (arr > 0)]
    return float(np.exp(np.mean(np.log(known)))) if len(known) else float("nan")


def geometric_means(constants: list[StepConstants], names: tuple[str, ...]) -> dict[str, float]:
    """Per name, the geometric mean over ``constants`` ({} when there are none)."""
    if not constants:
        return {}
    return {k: float(np.exp(np.mean([np.log(getattr(c, k)) for c in constants]))) for k in names}


@dataclass
class ConstantsTable:
    """Fitted constants per (GPU kind, measurement protocol: the sampler, e.g. ``nvml-poll``); other pairs get the defaults.

    The synchronization mode (``sync``) is not part of the key: the timeline simulates it.
    """

    fitted: dict[tuple[str, str], StepConstants]

    def get(self, gpu: str, protocol: str = "nvml-poll", host_score: float = float("nan")) -> StepConstants:
        """The constants for a GPU kind (``gpu_spec(...).name``) and measurement protocol, on a host of single-core
        score ``host_score`` (:mod:`gpupred.loader.speed`; NaN: not known).

        A pair without a fit borrows from the fits of the same protocol on other GPU kinds, when there are any:
        the host constants (``HOST_CONSTANTS``: launch cost and per-step overhead, set by the host, the software and
        the harness, not the GPU) from all of them, the device constants (efficiencies, minimum kernel time) from
        those of the same architecture (:data:`gpupred.hardware.ARCHITECTURES`: the same kernels and libraries reach
        similar fractions of the peaks), each a geometric mean; what there is nothing to borrow from stays the
        published default. A protocol without any fit borrows only the launch cost, from
        every fitted pair: the host time of one eager-PyTorch launch (Python, dispatcher, ``cudaLaunchKernel``) is the
        software's and the host CPU's, whatever samples the GPU, while the per-step overhead is the harness's (its
        loop, data loading: 0.6 ms on this project's H200 harness against 3.3-3.6 ms fitted on Lucid's and
        GPUMemNet's) and the efficiencies absorb how a protocol samples utilization. Another protocol is another
        lab's machine, so that launch cost moves between hosts by the speed ratio: each fit's at its hosts' score
        (``host_score``; an unknown one counts as the reference host's, 1.0) to ``host_score`` (unknown: the
        reference host, as a pipeline's costs are moved, :attr:`gpupred.setups.InputPipeline.host_speed`). This
        project's GPU hosts score 0.40-0.55 of the reference (their host profiles), so their fitted 38-46 us a launch
        is about half that on the reference host. The wait for each kernel under launch blocking (``blocking_s``)
        is borrowed alike, from the fits that measured it (``blocking_runs``; moved by the speed ratio to another
        protocol's host), the published default where none did.
        """
        if (gpu, protocol) in self.fitted:
            return self.fitted[(gpu, protocol)]
        return self.borrowed(gpu, protocol, host_score=host_score)

    def borrowed(self, gpu: str, protocol: str = "nvml-poll", kin: bool = True,
                 host_score: float = float("nan")) -> StepConstants:
        """What a pair without a fit borrows (:meth:`get`); ``kin=False``: as if no fit of its protocol shared its
        architecture (the device constants the published defaults), how a GPU of an unfitted architecture is
        predicted."""
        same = sorted((g, c) for (g, p), c in self.fitted.items() if p == protocol)
        if not same:
            return self._other_protocols(protocol, host_score)
        kin_fits = [(g, c) for g, c in same if kin and same_architecture(g, gpu)]
        values = {**geometric_means([c for _, c in kin_fits], DEVICE_CONSTANTS),
                  **geometric_means([c for _, c in same], HOST_CONSTANTS),
                  **geometric_means([c for _, c in same if c.blocking_runs], ("blocking_s",))}
        source = f"host constants of {protocol} on {', '.join(g for g, _ in same)}; device constants " + (
            f"of {', '.join(g for g, _ in kin_fits)} (same architecture)" if kin_fits else "published defaults")
        return replace(DEFAULT, **values, source=source)

    def new_architecture(self, gpu: str, protocol: str = "nvml-poll") -> bool:
        """No fit of ``protocol`` is on a GPU of ``gpu``'s architecture (its device constants are the defaults)."""
        return not any(p == protocol and same_architecture(g, gpu) for g, p in self.fitted)

    def _other_protocols(self, protocol: str, host_score: float = float("nan")) -> StepConstants:
        """A protocol without fits: the launch cost of every fitted pair and the launch-blocking wait of those that
        measured it, each moved from its hosts to a host of ``host_score`` (:meth:`get`), the rest default."""
        every = sorted(self.fitted.items())
        if not every:
            return DEFAULT
        target = float(host_score) if np.isfinite(host_score) else 1.0
        launch = geometric_mean(c.reference_launch_s() for _, c in every) / target
        pairs = ", ".join(f"{g} ({p})" for (g, p), _ in every)
        where = f"a host of single-core score {target:.2f}" if np.isfinite(host_score) else "the reference host"
        blocked = [(k, c) for k, c in every if c.blocking_runs]
        blocking = (geometric_mean(c.reference_blocking_s() for _, c in blocked) / target if blocked
                    else DEFAULT.blocking_s)
        measured = (f" and the launch-blocking wait of {', '.join(f'{g} ({p})' for (g, p), _ in blocked)}"
                    if blocked else "")
        source = (f"launch cost of {pairs}{measured}, moved to {where}; no fit of {protocol}: other constants "
                  "published defaults")
        return replace(DEFAULT, launch_s=launch, blocking_s=blocking, source=source)

    def as_records(self) -> list[dict[str, Any]]:
        """One plain record per fitted pair, for the predictor's card."""
        return [{"gpu": g, "protocol": p, **c.as_dict()} for (g, p), c in sorted(self.fitted.items())]
