"""FIXTURE calibration recordings for tests: made up here from a hand-written roofline with known constants.

No GPU ran any of this. A recording has the shape ``gpupred calibrate`` writes (``gpu``, ``software``, ``host``,
``results``), so the FakeBackend can replay it and the derivation can be checked to recover the constants put in.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from gpupred.calibration.bench import default_cases
from gpupred.hardware import gpu_spec
from gpupred.step.physics.kernels import OPTIMIZER_OPS, foreach_launches

# the constants the FIXTURE GPU "has" (deliberately unlike the published defaults)
TRUE_STEP: dict[str, float] = {
    "compute_eff": 0.62, "tensor_eff": 0.41, "memory_eff": 0.83, "depthwise_eff": 0.031, "min_kernel_s": 3.1e-6,
    "launch_s": 6.5e-6, "sync_s": 21e-6, "backward_launch_ratio": 0.45, "optimizer_launch_ratio": 2.2,
    "param_host_s": 0.35e-6,
}
TRUE_MEMORY: dict[str, float] = {"context_mib": 540.0, "workspace_mib": 52.0, "fixed_mib": 705.0, "allocator": 1.12}
ITEM = {"fp32": 4, "bf16": 2, "fp16": 2}


def _roofline(flops: float, nbytes: float, peak_tflops: float, eff: float, bw_gbs: float, c: dict[str, float]) -> float:
    """max(compute, memory) + minimum kernel time, written out by hand (not gpupred.step.physics's code)."""
    return max(flops / (peak_tflops * 1e12 * eff), nbytes / (bw_gbs * 1e9 * c["memory_eff"])) + c["min_kernel_s"]


def _contraction_seconds(bench: str, p: dict[str, Any], gpu: Any, c: dict[str, float]) -> float:
    """A matmul's or convolution's device seconds on the FIXTURE GPU."""
    item = ITEM[p["dtype"]]
    if bench == "matmul":
        m, n, k = p["m"], p["n"], p["k"]
        flops, nbytes, kernels, depthwise, conv = 2.0 * m * n * k, float(m * k + k * n + m * n) * item, 1, False, False
    else:
        b, ch, s, o, kk, g = (p[q] for q in ("batch", "channels", "size", "out_channels", "kernel", "groups"))
        flops = 2.0 * b * o * s * s * (ch // g) * kk * kk
        nbytes = float(b * ch * s * s + o * (ch // g) * kk * kk + b * o * s * s) * item
        kernels, depthwise, conv = (3 if p["direction"] == "train" else 1), g == ch, True
    tensor_peak = {"bf16": gpu.tflops_bf16, "fp16": gpu.fp16}.get(p["dtype"], gpu.tflops_tf32)
    if depthwise:
        peak, eff = gpu.tflops_fp32, c["depthwise_eff"]
    elif p["dtype"] != "fp32" or (p["tf32"] and conv):
        peak, eff = tensor_peak, c["tensor_eff"]
    elif p["tf32"]:  # fp32 matmul with TF32 on: not a constant of the step model; faster than without
        peak, eff = gpu.tflops_tf32, c["tensor_eff"]
    else:  # fp32 at the FP32 peak (matmuls by default, convolutions with TF32 off)
        peak, eff = gpu.tflops_fp32, c["compute_eff"]
    return kernels * _roofline(flops, nbytes, peak, eff, gpu.mem_bw_gbs, c)


def _optimizer_host(p: dict[str, Any], c: dict[str, float]) -> float:
    """The foreach step's host seconds as the step model charges them; fused: one launch per op."""
    ops = OPTIMIZER_OPS[p["kind"]]
    if p["impl"] == "fused":
        return c["launch_s"] * 2.0
    extra = sum(foreach_launches(p["tensors"], p["params"], r, w) - 1 for r, w in ops)
    return c["param_host_s"] * p["tensors"] + c["launch_s"] * (c["optimizer_launch_ratio"] * len(ops) + 0.25 * extra)


def _values(bench: str, p: dict[str, Any], gpu: Any, c: dict[str, float], m: dict[str, float]) -> dict[str, float]:
    """The FIXTURE values of one case."""
    if bench == "memory":
        return {"device_used_base_mib": 0.0, "device_used_context_mib": m["context_mib"] + 2.0, "reserved_context_mib": 2.0,
                "device_used_cudnn_mib": m["fixed_mib"] - m["workspace_mib"] + 90.0, "reserved_cudnn_mib": 90.0,
                "process_cudnn_mib": math.nan, "cublas_workspace_mib": 32.0,
                "cudnn_workspace_mib": m["workspace_mib"] - 32.0}
    if bench == "allocator":
        return {"requested_peak_bytes": 1e9, "allocated_peak_bytes": 1.01e9, "reserved_peak_bytes": 1e9 * m["allocator"]}
    if bench == "launch":
        wall = p["ops"] * c["launch_s"] + (c["min_kernel_s"] + c["sync_s"] if p["sync"] == "step" else 0.0)
        if p["sync"] == "op":
            wall = p["ops"] * (c["launch_s"] + c["min_kernel_s"] + c["sync_s"])
        return {"host_s_per_op": c["launch_s"], "wall_s_per_step": wall, "steps": 100.0}
    if bench == "backward":
        return {"forward_host_s_per_op": c["launch_s"], "backward_host_s_per_op": c["launch_s"] * c["backward_launch_ratio"]}
    if bench == "min_kernel":
        return {"device_s_per_op": c["min_kernel_s"], "batches": 5.0}
    if bench in ("matmul", "conv"):
        return {"device_s": _contraction_seconds(bench, p, gpu, c), "reps": 100.0}
    if bench == "elementwise":
        moved = p["numel"] * ITEM[p["dtype"]] * (3 if p["op"] == "add" else 2)
        return {"device_s": moved / (gpu.mem_bw_gbs * 1e9 * c["memory_eff"]) + c["min_kernel_s"], "reps": 100.0}
    if bench == "optimizer":
        return {"host_s": _optimizer_host(p, c), "device_s": 4.0 * p["params"] * 4 / (gpu.mem_bw_gbs * 1e9), "reps": 10.0}
    raise KeyError(bench)


def fixture_recording(gpu_name: str = "NVIDIA L4", step: dict[str, float] | None = None,
                      memory: dict[str, float] | None = None, noise: float = 0.0, seed: int = 0,
                      torch_version: str = "2.11.0+cu130", cuda: str = "13.0", uuid: str = "GPU-f1x7u4e0-0000",
                      peaks_of: str | None = None, host_score: float | None = None) -> dict[str, Any]:
    """A FIXTURE recording of every default case on a made-up GPU called ``gpu_name`` whose constants are ``step`` and
    ``memory`` (default ``TRUE_*``), with multiplicative log-normal ``noise`` on every device time; ``peaks_of`` names
    the table GPU whose datasheet the made-up timings follow (default ``gpu_name``: it must then be in the table)."""
    c, m = {**TRUE_STEP, **(step or {})}, {**TRUE_MEMORY, **(memory or {})}
    gpu = gpu_spec(peaks_of or gpu_name)
    rng = np.random.default_rng(seed)
    results = []
    for case in default_cases():
        values = _values(case.bench, dict(case.params), gpu, c, m)
        if "device_s" in values and noise:
            values["device_s"] *= float(np.exp(rng.normal(0.0, noise)))
        results.append({"bench": case.bench, "params": dict(case.params), "values": values, "wall_s": 0.1})
    return {
        "gpu": {"name": gpu_name, "uuid": uuid, "sm_count": gpu.sm_count, "memory_total_mib": gpu.memory_gb * 1024.0,
                "sm_clock_max_mhz": 2040.0, "mem_clock_max_mhz": 6251.0, "power_limit_w": 72.0, "compute_capability": "8.9"},
        "software": {"driver": "580.00.00", "cuda_driver": cuda, "cuda_runtime": cuda, "cudnn": "91000",
                     "torch": torch_version, "python": "3.11.0", "gpupred": "0.1.0"},
        "host": {"cpu": "FIXTURE CPU", "cores": 8, "platform": "Linux-FIXTURE",
                 **({} if host_score is None else {"single_core_score": host_score})},
        "results": results,
    }


def write_fixture_calibration(path: Path, **kw: Any) -> Path:
    """Write a FIXTURE recording as a calibration file (replayed through the FakeBackend, as a real one would be)."""
    from gpupred.calibration.run import calibrate
    from gpupred.calibration.replay import FakeBackend

    return calibrate(path, seconds=1.0, backend=FakeBackend(fixture_recording(**kw), "FIXTURE"), progress=False)
