"""The micro-benchmarks of ``gpupred calibrate`` (and of issue 38's host and device tables): what each measures, the
grid of cases, and the loop that runs them on a backend within a time budget.

Every case is ``(bench, params)``; a backend returns its values (seconds unless the name says otherwise):

- ``memory`` (first, before anything else touches the GPU): NVML's device memory in use before torch's first CUDA
  call, after it (one 4-byte tensor), after the first cuBLAS matmul and after the first cuDNN convolution, with the
  caching allocator's reserved and allocated bytes at each stage; the cuBLAS workspace (allocated bytes a matmul
  leaves behind beyond its output) and the cuDNN workspace (peak allocated bytes of a convolution beyond its
  tensors). -> the footprint's context and workspace.
- ``allocator``: a seeded sequence of tensors of lognormal sizes (activations, then gradients while every other
  activation is freed); peak requested, allocated and reserved bytes. -> the footprint's allocator ratio.
- ``launch``: eager PyTorch's host cost per kernel: a chain of ``ops`` tiny out-of-place multiplications on a
  tensor that requires grad (autograd records, as in a training forward), timed on the host clock; ``sync=step``
  synchronizes after every chain (one training step's sync), ``sync=op`` after every multiplication (as
  ``CUDA_LAUNCH_BLOCKING=1`` does: one round trip per kernel, ``ops`` of them a chain, so the round trip is no longer
  the small difference of two large times). -> ``launch_s``, ``sync_s``.
- ``backward``: the same chain's ``backward()``: host seconds per backward kernel (the autograd engine launches
  them from C++). -> ``backward_launch_ratio``.
- ``min_kernel``: device time per tiny kernel queued back to back behind a long one (CUDA events). ->
  ``min_kernel_s``.
- ``matmul``: ``torch.mm`` of an (m, k) by a (k, n) matrix, device time (CUDA events); fp32 with TF32 off and on,
  bf16, fp16. -> ``compute_eff`` (fp32, TF32 off: torch's matmul default), ``tensor_eff`` (bf16, fp16).
- ``conv``: 2-D convolutions of ResNet-like layers (NCHW, cuDNN autotuned as the profiler runs them), forward or
  forward + backward (``train``); a depthwise layer (one group per channel). -> ``tensor_eff`` (fp32 in TF32:
  cuDNN's default; bf16, fp16), ``depthwise_eff``.
- ``elementwise``: copy, add and scale of large tensors: device time. -> ``memory_eff``.
- ``optimizer``: ``step()`` of SGD (momentum 0.9) and Adam, torch's foreach and fused implementations, over
  parameter lists of several tensor counts and sizes: host and device time. -> ``optimizer_launch_ratio``,
  ``param_host_s`` (foreach, the step model's default).

Cases measured but not mapped to a constant (fp32 matmuls with TF32 on, convolutions with TF32 off, fused optimizers)
are kept in the file: they say what the GPU does under settings the step model does not assume.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from gpupred.calibration.benchbackend import Backend, ReplayedFailure
from gpupred.errors import GpupredError

DEFAULT_SECONDS = 40.0  # the measuring budget of a whole calibration (set-up and cuDNN autotuning come on top)
MATMUL_SHAPES: tuple[tuple[int, int, int], ...] = (  # (m, n, k): square, and a tall one like a batch of tokens
    (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 1024, 4096))
PRECISIONS: tuple[tuple[str, bool], ...] = (("fp32", False), ("fp32", True), ("bf16", False), ("fp16", False))
CONV_LAYERS: tuple[tuple[int, int, int, int, int], ...] = (  # (batch, channels, size, out channels, kernel)
    (32, 64, 56, 64, 3), (32, 128, 28, 128, 3), (32, 256, 14, 256, 3), (32, 64, 56, 256, 1))
DEPTHWISE_LAYER: tuple[int, int, int, int, int] = (32, 128, 56, 128, 3)  # groups = channels
ELEMENTWISE_SIZES: tuple[int, ...] = (1 << 20, 1 << 24, 1 << 26)
OPTIMIZER_SIZES: tuple[tuple[int, int], ...] = ((16, 1 << 20), (160, 1 << 20), (160, 1 << 25), (640, 1 << 25))
LAUNCH_OPS = 256
SYNC_OPS = 64  # a chain of the per-kernel sync case (sync=op): one round trip per multiplication
MIN_KERNEL_OPS = 1000


@dataclass(frozen=True)
class Case:
    """One micro-benchmark case: its benchmark, parameters, and its share of the time budget."""

    bench: str
    params: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0

    def key(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """A hashable identity: benchmark and sorted parameters."""
        return case_key(self.bench, self.params)


def case_key(bench: str, params: dict[str, Any]) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """The identity of a (benchmark, parameters) pair, as a recorded result is looked up by."""
    return bench, tuple(sorted(params.items()))


def _contraction_cases() -> list[Case]:
    """matmul and conv cases: every precision on every shape, forward + backward on two layers, depthwise."""
    cases = [Case("matmul", {"m": m, "n": n, "k": k, "dtype": d, "tf32": t}) for m, n, k in MATMUL_SHAPES
             for d, t in PRECISIONS]
    for (b, c, s, o, k) in CONV_LAYERS:
        cases += [Case("conv", {"batch": b, "channels": c, "size": s, "out_channels": o, "kernel": k, "groups": 1,
                                "dtype": d, "tf32": t, "direction": "forward"}) for d, t in PRECISIONS]
    for (b, c, s, o, k) in (CONV_LAYERS[0], CONV_LAYERS[2]):
        cases += [Case("conv", {"batch": b, "channels": c, "size": s, "out_channels": o, "kernel": k, "groups": 1,
                                "dtype": d, "tf32": t, "direction": "train"}, 2.0) for d, t in (("fp32", True), ("bf16", False))]
    b, c, s, o, k = DEPTHWISE_LAYER
    cases += [Case("conv", {"batch": b, "channels": c, "size": s, "out_channels": o, "kernel": k, "groups": c,
                            "dtype": d, "tf32": True, "direction": direction}, 1.5)
              for d in ("fp32", "bf16") for direction in ("forward", "train")]
    return cases


def default_cases() -> list[Case]:
    """The whole calibration, in the order it runs (``memory`` first: it must see the first CUDA call)."""
    cases = [Case("memory", {}, 2.0), Case("allocator", {"tensors": 256, "seed": 0}, 1.0),
             Case("launch", {"ops": LAUNCH_OPS, "sync": "none"}, 3.0), Case("launch", {"ops": LAUNCH_OPS, "sync": "step"}, 3.0),
             Case("launch", {"ops": SYNC_OPS, "sync": "op"}, 2.0),
             Case("backward", {"ops": LAUNCH_OPS // 2}, 3.0), Case("min_kernel", {"ops": MIN_KERNEL_OPS}, 2.0)]
    cases += _contraction_cases()
    cases += [Case("elementwise", {"op": op, "numel": n, "dtype": "fp32"}) for op in ("copy", "add", "scale")
              for n in ELEMENTWISE_SIZES]
    cases += [Case("elementwise", {"op": "add", "numel": n, "dtype": "bf16"}) for n in ELEMENTWISE_SIZES]
    cases += [Case("optimizer", {"kind": kind, "impl": impl, "tensors": t, "params": p}) for kind in ("sgd", "adam")
              for impl in ("foreach", "fused") for t, p in OPTIMIZER_SIZES]
    return cases


def run_benchmarks(backend: Backend, seconds: float = DEFAULT_SECONDS, cases: list[Case] | None = None,
                   progress: bool = True) -> list[dict[str, Any]]:
    """Every case measured on ``backend``, each given its share of ``seconds``: one record per case
    (``bench``, ``params``, ``values``, ``wall_s``; ``error`` and no values where the case failed). A replaying
    backend keeps each case's recorded ``wall_s`` (``Backend.recorded_wall_s``): a replay measures no time itself."""
    from gpupred.reports import progress_bar

    cases = default_cases() if cases is None else cases
    total = sum(c.weight for c in cases) or 1.0
    out = []
    bar = progress_bar(iterable=cases, desc="calibrate", unit="case", disable=not progress)
    for case in bar:
        bar.set_postfix_str(case.bench, refresh=False)
        t0 = time.monotonic()
        record: dict[str, Any] = {"bench": case.bench, "params": dict(case.params), "values": {}}
        try:
            values = backend.measure(case.bench, dict(case.params), seconds * case.weight / total)
            record["values"] = {k: math.nan if v is None else float(v) for k, v in values.items()}
        except GpupredError:
            raise
        except Exception as err:  # one case's failure (out of memory, an API a torch lacks) is recorded, not fatal
            text = " ".join(str(err).split())
            record["error"] = (text if isinstance(err, ReplayedFailure) else f"{type(err).__name__}: {text}")[:300]
        recorded = backend.recorded_wall_s(case.bench, case.params)
        record["wall_s"] = round(time.monotonic() - t0, 3) if recorded is None else recorded
        out.append(record)
    return out
