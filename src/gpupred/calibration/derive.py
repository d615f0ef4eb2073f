"""From a calibration's raw micro-benchmark results to the constants the predictor uses (torch-free).

Each constant comes from its own benchmark (``MEASURED_BY`` says how); nothing else is read. Efficiencies are fitted
through the step model itself: each case becomes the kernels the step model would charge for it (a matmul or a
forward convolution one kernel, a training convolution three: forward, data and weight gradient), and the efficiency
is the one for which :func:`gpupred.step.physics.timeline.kernel_times` (roofline on the GPU's peaks + the minimum kernel
time) best matches the measured device times in log (so one code path predicts a training step and reads a
calibration). Peaks are the datasheet's (:mod:`gpupred.hardware`) for a GPU in the table; for any other GPU the best
rate measured in each category stands in for the peak (and the file says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpupred.errors import GpupredError
from gpupred.hardware import GpuSpec
from gpupred.step.physics.constants import BOUNDS, DEFAULT, StepConstants
from gpupred.step.physics.kernels import CONV, DEPTHWISE, MATMUL, OPTIMIZER_OPS, KernelList, foreach_launches

PRIOR_WEIGHT = 1e-3  # squared-log pull of a fitted efficiency towards the predictor's own value
ITEM_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
STEP_MEASURED: tuple[str, ...] = (  # the StepConstants a calibration replaces (the rest keep their fits)
    "compute_eff", "tensor_eff", "memory_eff", "depthwise_eff", "min_kernel_s", "launch_s", "sync_s",
    "backward_launch_ratio", "optimizer_launch_ratio", "param_host_s")
MEMORY_MEASURED: tuple[str, ...] = ("context_mib", "workspace_mib", "fixed_mib", "allocator")  # the footprint's
MEASURED_BY: dict[str, str] = {
    "compute_eff": "matmul in fp32 with TF32 off (torch's matmul default): the step model's kernel time fitted to the "
                   "measured device times, against the FP32 peak",
    "tensor_eff": "matmul in bf16 and fp16, and convolutions in fp32 with TF32 (cuDNN's default), bf16 and fp16, "
                  "forward and train, depthwise excluded: fitted against the precision's tensor-core peak",
    "memory_eff": "elementwise copy, add and scale: fitted against the memory bandwidth",
    "depthwise_eff": "depthwise convolutions (one group per channel), forward and train: fitted against the FP32 peak",
    "min_kernel_s": "min_kernel: device seconds per tiny kernel queued back to back behind a long one",
    "launch_s": "launch without sync: host seconds per eager kernel launch with autograd recording",
    "sync_s": "launch with a sync per kernel: wall seconds per kernel less its launch and one minimum kernel (a "
              "recording without that case: with a sync per chain, wall seconds per chain less its launches and one "
              "minimum kernel)",
    "backward_launch_ratio": "backward: host seconds per backward kernel over those per forward kernel of one chain",
    "optimizer_launch_ratio": "optimizer, foreach SGD and Adam: host seconds per step() = param_host_s x tensors + "
                              "launch_s x (this ratio x ops + library_launch_ratio x further chunk launches), "
                              "bounded least squares in relative error",
    "param_host_s": "optimizer, foreach: the per-tensor term of the same fit",
    "context_mib": "memory: NVML device memory after torch's first CUDA call less before it, less the caching "
                   "allocator's reserved bytes: the bare CUDA context (NVML's per-process figure where the device's "
                   "is missing)",
    "workspace_mib": "memory: cuBLAS workspace (allocated bytes a first matmul leaves beyond its output) + cuDNN "
                     "workspace (a first convolution's peak allocated bytes beyond its tensors)",
    "fixed_mib": "memory: NVML device memory after the first cuBLAS matmul and cuDNN convolution beyond the caching "
                 "allocator's reserved bytes (context, library handles and kernel images), plus the workspaces: what a "
                 "training process holds before its own tensors",
    "allocator": "allocator: peak reserved over peak requested bytes of a seeded activation/gradient pattern",
}
NOT_MEASURED: dict[str, str] = {
    "step_overhead_s": "the training harness's per-step Python (batch, zero_grad, loss): no micro-benchmark has it",
    "library_launch_ratio": "launches from inside libraries (cuDNN RNN steps, foreach chunks)",
    "host_copy_gbs": "pageable host-to-device copies (predictions assume device-resident batches)",
    "blocking_s": "the wait per kernel under CUDA_LAUNCH_BLOCKING=1: fitted on launch-blocking sweep runs instead",
}


@dataclass(frozen=True)
class Derived:
    """What a calibration measured, as the predictor uses it."""

    step: dict[str, float]  # StepConstants fields (STEP_MEASURED that could be measured)
    memory: dict[str, float]  # MEMORY_MEASURED that could be measured
    peaks: dict[str, Any]  # the GpuSpec fields the efficiencies are fractions of, and their source
    notes: list[str] = field(default_factory=list)

    def constants(self, base: StepConstants = DEFAULT, source: str = "calibration") -> StepConstants:
        """``base`` with every measured step constant replaced."""
        from dataclasses import replace

        return replace(base, **self.step, source=source)


def _values(results: list[dict[str, Any]], bench: str) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """(params, values) of every recorded case of one benchmark."""
    return [(r["params"], r["values"]) for r in results if r["bench"] == bench]


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


@dataclass(frozen=True)
class KernelCase:
    """One measured case as the step model sees it: ``n`` equal kernels of one kind and precision."""

    n: int
    flops: float
    bytes: float
    kind: int  # 0 CUDA cores, MATMUL, CONV, DEPTHWISE
    precision: str
    seconds: float  # measured device seconds of the whole case


def matmul_case(p: dict[str, Any], v: dict[str, float]) -> KernelCase:
    """A ``torch.mm`` as one contraction kernel."""
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    return KernelCase(1, 2.0 * m * n * k, float(m * k + k * n + m * n) * ITEM_BYTES[p["dtype"]], MATMUL, p["dtype"],
                      float(v["device_s"]))


def conv_case(p: dict[str, Any], v: dict[str, float]) -> KernelCase:
    """A convolution: one kernel forward, three in training (forward, data gradient, weight gradient)."""
    b, c, s, o, k, g = (int(p[q]) for q in ("batch", "channels", "size", "out_channels", "kernel", "groups"))
    item = ITEM_BYTES[p["dtype"]]
    flops = 2.0 * b * o * s * s * (c // g) * k * k
    nbytes = float(b * c * s * s + o * (c // g) * k * k + b * o * s * s) * item
    kind = DEPTHWISE if g == c and c > 1 else CONV
    return KernelCase(3 if p["direction"] == "train" else 1, flops, nbytes, kind, p["dtype"], float(v["device_s"]))


def elementwise_case(p: dict[str, Any], v: dict[str, float]) -> KernelCase:
    """A copy (2 tensors moved), add (3) or scale (2) as one CUDA-core kernel."""
    n, op = int(p["numel"]), p["op"]
    moved = float(n * ITEM_BYTES[p["dtype"]] * (3 if op == "add" else 2))
    return KernelCase(1, 0.0 if op == "copy" else float(n), moved, 0, "fp32", float(v["device_s"]))


def predicted_seconds(cases: list[KernelCase], gpu: GpuSpec, c: StepConstants) -> np.ndarray:
    """The step model's device seconds of each case under constants ``c``."""
    from gpupred.step.physics.timeline import kernel_times

    out = np.empty(len(cases))
    for i, kc in enumerate(cases):
        kl = KernelList(np.array([kc.flops]), np.array([kc.bytes]), np.array([kc.kind], np.int8), np.zeros(1, np.int8),
                        np.zeros(1, bool))
        out[i] = kc.n * float(kernel_times(kl, gpu, kc.precision, c)[0])
    return out


def fit_efficiency(name: str, cases: list[KernelCase], gpu: GpuSpec, base: StepConstants) -> float | None:
    """The value of efficiency ``name`` whose predicted times best match ``cases`` in log (None: no case informs it).

    Where every value above (or below) some point predicts the same times (a case bound by bandwidth there), the fit
    keeps the point nearest ``base``'s value (a pull of ``PRIOR_WEIGHT`` in squared log units)."""
    from dataclasses import replace

    from scipy.optimize import minimize_scalar

    cases = [kc for kc in cases if kc.seconds > 0 and math.isfinite(kc.seconds)]
    if not cases:
        return None
    measured = np.log([kc.seconds for kc in cases])
    lo, hi = (math.log(b) for b in BOUNDS[name])
    at_lo = predicted_seconds(cases, gpu, replace(base, **{name: math.exp(lo)}))
    at_hi = predicted_seconds(cases, gpu, replace(base, **{name: math.exp(hi)}))
    if np.all(np.abs(np.log(at_lo / at_hi)) < 0.01):  # every case is set by other terms (bandwidth, minimum)
        return None

    prior = math.log(getattr(base, name))

    def loss(theta: float) -> float:  # a faint pull to the prior picks it where the cases cannot tell values apart
        pred = predicted_seconds(cases, gpu, replace(base, **{name: math.exp(theta)}))
        return float(np.sum((np.log(pred) - measured) ** 2)) + PRIOR_WEIGHT * (theta - prior) ** 2

    return float(math.exp(minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x))


def _contraction_cases(results: list[dict[str, Any]]) -> dict[str, list[KernelCase]]:
    """The cases each efficiency is fitted on (see ``MEASURED_BY``)."""
    mm = [(p, matmul_case(p, v)) for p, v in _values(results, "matmul") if _finite(v.get("device_s"))]
    cv = [(p, conv_case(p, v)) for p, v in _values(results, "conv") if _finite(v.get("device_s"))]
    return {
        "memory_eff": [elementwise_case(p, v) for p, v in _values(results, "elementwise") if _finite(v.get("device_s"))],
        "compute_eff": [kc for p, kc in mm if p["dtype"] == "fp32" and not p["tf32"]],
        "tensor_eff": [kc for p, kc in mm if p["dtype"] != "fp32"]
        + [kc for p, kc in cv if kc.kind == CONV and (p["dtype"] != "fp32" or p["tf32"])],
        "depthwise_eff": [kc for _, kc in cv if kc.kind == DEPTHWISE],
    }


def measured_peaks(results: list[dict[str, Any]]) -> dict[str, float]:
    """The best rate measured per category (TFLOP/s, GB/s): the stand-in peaks of a GPU outside the table."""
    def best(rows: list[KernelCase]) -> float:
        rates = [r.n * r.flops / r.seconds / 1e12 for r in rows if r.seconds > 0]
        return max(rates, default=0.0)

    mm = [(p, matmul_case(p, v)) for p, v in _values(results, "matmul") if _finite(v.get("device_s"))]
    cv = [(p, conv_case(p, v)) for p, v in _values(results, "conv") if _finite(v.get("device_s"))]
    both = [(p, kc) for p, kc in mm + cv if kc.kind != DEPTHWISE]
    ew = [elementwise_case(p, v) for p, v in _values(results, "elementwise") if _finite(v.get("device_s"))]
    fp32 = best([kc for p, kc in mm if p["dtype"] == "fp32" and not p["tf32"]])
    return {"tflops_fp32": fp32,
            "tflops_tf32": best([kc for p, kc in both if p["dtype"] == "fp32" and p["tf32"]]) or fp32,
            "tflops_bf16": best([kc for p, kc in both if p["dtype"] == "bf16"]) or fp32,
            "tflops_fp16": best([kc for p, kc in both if p["dtype"] == "fp16"]) or fp32,
            "mem_bw_gbs": max((kc.bytes / kc.seconds / 1e9 for kc in ew if kc.seconds > 0), default=0.0)}


def gpu_of(gpu: dict[str, Any], results: list[dict[str, Any]]) -> tuple[GpuSpec, str]:
    """The GPU's specs and where its peaks come from: ``datasheet`` (:func:`gpupred.hardware.gpu_spec`) or
    ``measured`` (a GPU outside the table, named as NVML names it, with :func:`measured_peaks`)."""
    from gpupred.hardware import gpu_spec

    try:
        return gpu_spec(str(gpu["name"])), "datasheet"
    except GpupredError:
        pass
    peaks = measured_peaks(results)
    if min(peaks.values()) <= 0:
        raise GpupredError(f"GPU {gpu['name']!r} is not in gpupred's hardware table and its calibration lacks the "
                           "matmul, convolution or elementwise results that would stand in for its peaks")
    return GpuSpec(str(gpu["name"]), int(gpu.get("sm_count") or 0), float(gpu.get("memory_total_mib") or 0.0) / 1024.0,
                   peaks["mem_bw_gbs"], peaks["tflops_fp32"], peaks["tflops_tf32"], peaks["tflops_bf16"],
                   peaks["tflops_fp16"]), "measured"


def efficiencies(results: list[dict[str, Any]], spec: GpuSpec, min_kernel_s: float | None,
                 notes: list[str]) -> dict[str, float]:
    """The four efficiencies, each fitted on its cases in order (memory first: a small matmul may be bandwidth-bound)."""
    from dataclasses import replace

    base = DEFAULT if min_kernel_s is None else replace(DEFAULT, min_kernel_s=min_kernel_s)
    out: dict[str, float] = {}
    for name, cases in _contraction_cases(results).items():
        value = fit_efficiency(name, cases, spec, replace(base, **out))
        if value is None:
            notes.append(f"{name}: no recorded case informs it (kept from the predictor's constants)")
        else:
            out[name] = value
    return out


def host_constants(results: list[dict[str, Any]], min_kernel_s: float, notes: list[str]) -> dict[str, float]:
    """launch_s, sync_s and backward_launch_ratio from the launch and backward benchmarks."""
    out: dict[str, float] = {}
    for p, v in _values(results, "launch"):
        if p.get("sync") == "none" and _finite(v.get("host_s_per_op")):
            out["launch_s"] = float(v["host_s_per_op"])
    for p, v in _values(results, "launch"):
        if p.get("sync") == "step" and "launch_s" in out and _finite(v.get("wall_s_per_step")):
            out["sync_s"] = max(0.0, float(v["wall_s_per_step"]) - int(p["ops"]) * out["launch_s"] - min_kernel_s)
    for p, v in _values(results, "launch"):  # a round trip per kernel, where recorded: the better reading
        if p.get("sync") == "op" and _finite(v.get("wall_s_per_step")) and _finite(v.get("host_s_per_op")):
            per_op = float(v["wall_s_per_step"]) / int(p["ops"])
            out["sync_s"] = max(0.0, per_op - float(v["host_s_per_op"]) - min_kernel_s)
    for _, v in _values(results, "backward"):
        if _finite(v.get("backward_host_s_per_op")) and float(v.get("forward_host_s_per_op") or 0) > 0:
            out["backward_launch_ratio"] = float(v["backward_host_s_per_op"]) / float(v["forward_host_s_per_op"])
    for name in ("launch_s", "sync_s", "backward_launch_ratio"):
        if name not in out:
            notes.append(f"{name}: not recorded (kept from the predictor's constants)")
    return out


def optimizer_constants(results: list[dict[str, Any]], launch_s: float, notes: list[str]) -> dict[str, float]:
    """optimizer_launch_ratio and param_host_s fitted to the foreach optimizer steps' host times (see MEASURED_BY)."""
    from scipy.optimize import lsq_linear

    rows, y = [], []
    for p, v in _values(results, "optimizer"):
        if p.get("impl") != "foreach" or not _finite(v.get("host_s")) or p.get("kind") not in OPTIMIZER_OPS:
            continue
        n, numel = int(p["tensors"]), int(p["params"])
        ops = OPTIMIZER_OPS[p["kind"]]
        extra = sum(foreach_launches(n, numel, r, w) - 1 for r, w in ops)
        target = float(v["host_s"]) - launch_s * DEFAULT.library_launch_ratio * extra
        rows.append([n / float(v["host_s"]), launch_s * len(ops) / float(v["host_s"])])
        y.append(target / float(v["host_s"]))
    if len(rows) < 2:
        notes.append("optimizer_launch_ratio, param_host_s: fewer than two foreach optimizer cases (kept)")
        return {}
    fit = lsq_linear(np.array(rows), np.array(y), bounds=([0.0, 0.05], [2e-5, 20.0]))
    return {"param_host_s": float(fit.x[0]), "optimizer_launch_ratio": float(fit.x[1])}


def _outside_allocator(v: dict[str, float], stage: str) -> float:
    """MiB NVML counts for this process after a memory stage beyond the caching allocator's reserved bytes (the
    device's figure less its pre-CUDA baseline; NVML's per-process figure where the device's is missing)."""
    delta = float(v.get(f"device_used_{stage}_mib", math.nan)) - float(v.get("device_used_base_mib", math.nan))
    if not math.isfinite(delta):
        delta = float(v.get(f"process_{stage}_mib", math.nan))
    return delta - float(v.get(f"reserved_{stage}_mib", math.nan))


def memory_constants(results: list[dict[str, Any]], notes: list[str]) -> dict[str, float]:
    """The footprint's fixed terms and allocator ratio from the memory and allocator benchmarks (see MEASURED_BY)."""
    out: dict[str, float] = {}
    for _, v in _values(results, "memory"):
        ws = [float(v.get(k, math.nan)) for k in ("cublas_workspace_mib", "cudnn_workspace_mib")]
        if all(math.isfinite(w) for w in ws):
            out["workspace_mib"] = sum(max(0.0, w) for w in ws)
        context, libraries = _outside_allocator(v, "context"), _outside_allocator(v, "cudnn")
        if math.isfinite(context) and context > 0:
            out["context_mib"] = context
        if math.isfinite(libraries) and libraries > 0 and "workspace_mib" in out:
            out["fixed_mib"] = libraries + out["workspace_mib"]
    for _, v in _values(results, "allocator"):
        req, res = float(v.get("requested_peak_bytes", math.nan)), float(v.get("reserved_peak_bytes", math.nan))
        if math.isfinite(req) and math.isfinite(res) and req > 0:
            out["allocator"] = float(np.clip(res / req, 0.5, 3.0))
    for name in MEMORY_MEASURED:
        if name not in out:
            notes.append(f"{name}: not measured (NVML or the caching allocator could not say; kept from the fits)")
    return out


def derive(gpu: dict[str, Any], results: list[dict[str, Any]]) -> Derived:
    """Every constant a calibration measures, from its GPU identity and raw results (see ``MEASURED_BY``); cases that
    failed are left out and named in the notes."""
    failed = [r for r in results if r.get("error")]
    notes = [f"{len(failed)} of {len(results)} cases failed, e.g. {failed[0]['bench']} {failed[0]['params']}: "
             f"{failed[0]['error']}"] if failed else []
    results = [r for r in results if not r.get("error")]
    spec, source = gpu_of(gpu, results)
    step: dict[str, float] = {}
    for _, v in _values(results, "min_kernel"):
        if _finite(v.get("device_s_per_op")):
            step["min_kernel_s"] = float(v["device_s_per_op"])
    if "min_kernel_s" not in step:
        notes.append("min_kernel_s: not recorded (kept from the predictor's constants)")
    step.update(efficiencies(results, spec, step.get("min_kernel_s"), notes))
    step.update(host_constants(results, step.get("min_kernel_s", DEFAULT.min_kernel_s), notes))
    step.update(optimizer_constants(results, step.get("launch_s", DEFAULT.launch_s), notes))
    step = {k: float(np.clip(v, *BOUNDS[k])) if k.endswith("_eff") else v for k, v in step.items()}
    peaks = {"source": source, "mem_bw_gbs": spec.mem_bw_gbs, "tflops_fp32": spec.tflops_fp32,
             "tflops_tf32": spec.tflops_tf32, "tflops_bf16": spec.tflops_bf16, "tflops_fp16": spec.fp16}
    return Derived(step, memory_constants(results, notes), peaks, notes)
