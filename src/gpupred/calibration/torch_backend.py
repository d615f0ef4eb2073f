"""The real micro-benchmark backend: torch on the local GPU, device time from CUDA events, memory from NVML.

torch and pynvml are imported when a backend is made, never at import. ``device="cpu"`` runs the same code with
host-clock timing and no NVML: the tests exercise every benchmark's code path that way (its figures are the CPU's,
and never a calibration: :func:`gpupred.calibration.run.calibrate` refuses a machine without a GPU).
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from typing import Any, Callable

from gpupred.calibration.benchbackend import host_identity
from gpupred.errors import GpupredError

MIB = float(2**20)
DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")
MAX_BATCHES = 20  # timed batches of one case at most (the median batch is kept)
SLEEP_CYCLES = 50_000_000  # the long kernel min_kernel queues tiny ones behind (~25 ms at 2 GHz)


def _safe(fn: Callable[[], Any], default: Any = "") -> Any:
    """``fn()`` (bytes decoded), or ``default`` when it raises."""
    try:
        value = fn()
        return value.decode() if isinstance(value, bytes) else value
    except Exception:
        return default


def no_gpu_message() -> str | None:
    """Why this machine cannot be calibrated (no NVML device, or torch sees no CUDA device), else None."""
    from gpupred.profile.nvml import probe

    why = probe()
    if why is not None:
        return f"no NVIDIA GPU/driver found ({why})"
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install -c constraints.txt \"gpupred[torch]\")"

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (a CPU-only build, or CUDA_VISIBLE_DEVICES hides it)"
    return None


class TorchBackend:
    """Measures each benchmark case of :mod:`gpupred.calibration.bench` with torch on ``device``."""

    name = "torch-cuda"
    replayed_from = ""

    def __init__(self, device: str = "cuda") -> None:
        self.cuda = device.startswith("cuda")
        self.nvml: Any = None
        if self.cuda:
            why = no_gpu_message()
            if why is not None:
                raise GpupredError(f"nothing to calibrate here: {why}; run `gpupred calibrate` on the machine whose "
                                   "NVIDIA GPU you want to calibrate")
            from gpupred.profile.nvml import PynvmlBackend, visible_device

            self.nvml = PynvmlBackend(visible_device())
        import torch

        self.torch = torch
        self.device = device
        self.measures: dict[str, Callable[[dict[str, Any], float], dict[str, float]]] = {
            "memory": self.memory, "allocator": self.allocator, "launch": self.launch, "backward": self.backward,
            "min_kernel": self.min_kernel, "matmul": self.matmul, "conv": self.conv, "elementwise": self.elementwise,
            "optimizer": self.optimizer}

    # -- plumbing
    def measure(self, bench: str, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """One case's values (see :mod:`gpupred.calibration.bench`)."""
        if bench not in self.measures:
            raise GpupredError(f"unknown micro-benchmark {bench!r}; known: {', '.join(self.measures)}")
        return self.measures[bench](params, seconds)

    def cases(self) -> list[Any] | None:
        """None: any case is measured now, so the default set is run."""
        return None

    def recorded_wall_s(self, bench: str, params: dict[str, Any]) -> float | None:
        """None: every case is measured now, and timed as it runs."""
        return None

    def close(self) -> None:
        """Release NVML."""
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None

    def sync(self) -> None:
        """Wait for the device (nothing on the CPU)."""
        if self.cuda:
            self.torch.cuda.synchronize()

    def dtype(self, name: str) -> Any:
        """The torch dtype of a precision name."""
        return {"fp32": self.torch.float32, "bf16": self.torch.bfloat16, "fp16": self.torch.float16}[name]

    def time_batch(self, fn: Callable[[], Any], reps: int) -> float:
        """Seconds ``reps`` back-to-back calls of ``fn`` take: on the device (CUDA events), else on the host."""
        if not self.cuda:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            return time.perf_counter() - t
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def device_seconds(self, fn: Callable[[], Any], seconds: float, min_batches: int = 3) -> tuple[float, int]:
        """(median seconds per call over timed batches, calls timed), after two warm-up calls (autotuning)."""
        fn()
        fn()
        self.sync()
        once = max(self.time_batch(fn, 1), 1e-7)
        reps = int(min(max(seconds / (4 * once), 1), 10_000))
        per_call: list[float] = []
        deadline = time.monotonic() + seconds
        while len(per_call) < min_batches or (time.monotonic() < deadline and len(per_call) < MAX_BATCHES):
            per_call.append(self.time_batch(fn, reps) / reps)
        return statistics.median(per_call), reps * len(per_call)

    # -- identity
    def identity(self) -> dict[str, dict[str, Any]]:
        """The GPU (NVML and torch's device properties), the software and the host."""
        from gpupred.version import __version__

        torch = self.torch
        software = {"torch": torch.__version__, "cuda_runtime": str(torch.version.cuda or ""),
                    "cudnn": str(_safe(lambda: torch.backends.cudnn.version(), "")), "python": platform.python_version(),
                    "gpupred": __version__, "driver": "", "cuda_driver": ""}
        if not self.cuda:
            return {"gpu": {"name": "cpu", "uuid": "", "sm_count": 0, "memory_total_mib": 0.0, "sm_clock_max_mhz": 0.0,
                            "mem_clock_max_mhz": 0.0, "power_limit_w": 0.0, "compute_capability": ""},
                    "software": software, "host": host_identity()}
        nv, h = self.nvml.nv, self.nvml.handle
        info = self.nvml.device_info()
        props = torch.cuda.get_device_properties(0)
        software.update(driver=info.driver_version, cuda_driver=info.cuda_version)
        gpu = {"name": info.name or props.name, "uuid": info.uuid, "sm_count": int(props.multi_processor_count),
               "memory_total_mib": float(props.total_memory / MIB),
               "sm_clock_max_mhz": float(_safe(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM), 0.0)),
               "mem_clock_max_mhz": float(_safe(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM), 0.0)),
               "power_limit_w": float(_safe(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), 0.0)) / 1000.0,
               "compute_capability": f"{props.major}.{props.minor}"}
        return {"gpu": gpu, "software": software, "host": host_identity()}

    # -- memory
    def nvml_used_mib(self, settle_s: float) -> tuple[float, float]:
        """(device memory used, this process's memory; NaN where NVML cannot say) in MiB, after ``settle_s``."""
        if self.nvml is None:
            return math.nan, math.nan
        time.sleep(settle_s)  # NVML's figure lags the allocation
        used = max(float(_safe(lambda: self.nvml.memory_info_mib()["used"], math.nan)) for _ in range(3))
        proc = _safe(lambda: self.nvml.process_memory_mib([os.getpid()]), {})
        return used, float(proc.get(os.getpid(), math.nan)) if isinstance(proc, dict) else math.nan

    def stage(self, out: dict[str, float], name: str, settle_s: float) -> None:
        """Record NVML's and the caching allocator's figures after stage ``name``."""
        out[f"device_used_{name}_mib"], out[f"process_{name}_mib"] = self.nvml_used_mib(settle_s)
        cuda = self.torch.cuda if self.cuda else None
        out[f"reserved_{name}_mib"] = cuda.memory_reserved() / MIB if cuda else math.nan
        out[f"allocated_{name}_mib"] = cuda.memory_allocated() / MIB if cuda else math.nan

    def allocated(self) -> float:
        """Bytes the caching allocator has handed out (NaN on the CPU)."""
        return float(self.torch.cuda.memory_allocated()) if self.cuda else math.nan

    def memory(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """NVML memory before and after the first CUDA call, cuBLAS matmul and cuDNN convolution; workspaces."""
        torch = self.torch
        settle = min(max(seconds / 4, 0.5), 1.0)  # as the profiler's context measurement lets NVML catch up
        out: dict[str, float] = {}
        out["device_used_base_mib"], _ = self.nvml_used_mib(settle)
        if self.cuda:
            torch.cuda.init()
        x = torch.zeros(1, device=self.device)
        self.sync()
        self.stage(out, "context", settle)
        a, b = (torch.randn(1024, 1024, device=self.device) for _ in range(2))
        self.sync()
        before = self.allocated()
        c = torch.mm(a, b)
        self.sync()
        out["cublas_workspace_mib"] = (self.allocated() - before - c.numel() * c.element_size()) / MIB
        self.stage(out, "cublas", settle)
        xc, w = torch.randn(32, 64, 56, 56, device=self.device), torch.randn(64, 64, 3, 3, device=self.device)
        self.sync()
        before = self.allocated()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        y = torch.nn.functional.conv2d(xc, w, padding=1)
        self.sync()
        peak = float(torch.cuda.max_memory_allocated()) if self.cuda else math.nan
        out["cudnn_workspace_mib"] = (peak - before - y.numel() * y.element_size()) / MIB
        self.stage(out, "cudnn", settle)
        del x, a, b, c, xc, w, y
        return out

    def allocator(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Peak requested, allocated and reserved bytes of a seeded activation/gradient allocation pattern."""
        import numpy as np

        torch = self.torch
        rng = np.random.default_rng(int(params.get("seed", 0)))
        n = int(params["tensors"])
        acts = np.clip(rng.lognormal(np.log(MIB), 1.5, n), 512, 64 * MIB).astype(np.int64)
        grads = np.clip(rng.lognormal(np.log(MIB / 2), 1.5, n // 2), 512, 64 * MIB).astype(np.int64)
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        base_alloc, base_res = (float(torch.cuda.memory_allocated()), float(torch.cuda.memory_reserved())) \
            if self.cuda else (math.nan, math.nan)
        live: list[Any] = [torch.empty(int(s), dtype=torch.uint8, device=self.device) for s in acts]
        requested = peak = float(acts.sum())
        kept: list[Any] = []
        for i, g in zip(range(n - 1, -1, -2), grads):  # backward: free activations, allocate gradients
            live[i] = None
            requested += float(g) - float(acts[i])
            kept.append(torch.empty(int(g), dtype=torch.uint8, device=self.device))
            peak = max(peak, requested)
        self.sync()
        out = {"requested_peak_bytes": peak, "allocated_peak_bytes": math.nan, "reserved_peak_bytes": math.nan}
        if self.cuda:
            out["allocated_peak_bytes"] = float(torch.cuda.max_memory_allocated()) - base_alloc
            out["reserved_peak_bytes"] = float(torch.cuda.max_memory_reserved()) - base_res
        del live, kept
        return out

    # -- host
    def chain(self, x: Any, ops: int) -> Any:
        """``ops`` tiny out-of-place multiplications in a row (one kernel each, autograd recording)."""
        y = x
        for _ in range(ops):
            y = y * 1.0001
        return y

    def launch(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Host seconds per eager kernel launch (forward, autograd recording); wall seconds per chain, synchronized
        after it (``sync=step``) or after each of its kernels (``sync=op``, the launches alone on the host clock)."""
        ops, sync = int(params["ops"]), params.get("sync")
        x = self.torch.ones(1024, device=self.device, requires_grad=True)
        self.chain(x, ops)
        self.sync()
        host, steps = 0.0, 0
        t0 = time.perf_counter()
        while steps < 3 or time.perf_counter() - t0 < seconds:
            if sync == "op":
                y = x
                for _ in range(ops):
                    t = time.perf_counter()
                    y = y * 1.0001
                    host += time.perf_counter() - t
                    self.sync()
            else:
                t = time.perf_counter()
                y = self.chain(x, ops)
                host += time.perf_counter() - t
                if sync == "step":
                    self.sync()
            del y
            steps += 1
        wall = time.perf_counter() - t0
        self.sync()
        return {"host_s_per_op": host / (steps * ops), "wall_s_per_step": wall / steps, "steps": float(steps)}

    def backward(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Host seconds per kernel of a chain's forward and of its ``backward()`` (autograd's C++ launches)."""
        ops = int(params["ops"])
        x = self.torch.ones(1024, device=self.device, requires_grad=True)
        fwd = bwd = 0.0
        steps = 0
        t0 = time.perf_counter()
        while steps < 4 or time.perf_counter() - t0 < seconds:
            t = time.perf_counter()
            loss = self.chain(x, ops).sum()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            self.sync()
            x.grad = None
            if steps > 0:  # the first backward builds the engine's threads
                fwd, bwd = fwd + t1 - t, bwd + t2 - t1
            steps += 1
        n = (steps - 1) * ops
        return {"forward_host_s_per_op": fwd / n, "backward_host_s_per_op": bwd / n, "steps": float(steps - 1)}

    def min_kernel(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Device seconds per tiny kernel run back to back (queued behind a long kernel, so never starved)."""
        ops = int(params["ops"])
        a = self.torch.zeros(1, device=self.device)
        best, reps = math.inf, 0
        t0 = time.monotonic()
        while reps < 3 or (time.monotonic() - t0 < seconds and reps < MAX_BATCHES):
            if self.cuda:
                self.torch.cuda._sleep(SLEEP_CYCLES)
            per = self.time_batch(lambda: a.add_(1.0), ops) / ops
            best = min(best, per)
            reps += 1
        return {"device_s_per_op": best, "batches": float(reps)}

    # -- device rates
    def matmul(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Device seconds of one ``torch.mm`` (TF32 for fp32 as ``tf32`` says)."""
        torch = self.torch
        m, n, k = int(params["m"]), int(params["n"]), int(params["k"])
        dt = self.dtype(params["dtype"])
        a, b = torch.randn(m, k, device=self.device, dtype=dt), torch.randn(k, n, device=self.device, dtype=dt)
        c = torch.empty(m, n, device=self.device, dtype=dt)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = bool(params["tf32"])
        try:
            t, reps = self.device_seconds(lambda: torch.mm(a, b, out=c), seconds)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        return {"device_s": t, "reps": float(reps), "tflops": 2.0 * m * n * k / t / 1e12}

    def conv(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Device seconds of one convolution, forward or forward + both gradients (``direction="train"``)."""
        torch = self.torch
        b, c, s, o, k, g = (int(params[p]) for p in ("batch", "channels", "size", "out_channels", "kernel", "groups"))
        dt, train = self.dtype(params["dtype"]), params["direction"] == "train"
        x = torch.randn(b, c, s, s, device=self.device, dtype=dt, requires_grad=train)
        w = torch.randn(o, c // g, k, k, device=self.device, dtype=dt, requires_grad=train)
        conv = torch.nn.functional.conv2d
        if train:
            grad = torch.randn_like(conv(x, w, padding=k // 2, groups=g))

            def fn() -> Any:
                return torch.autograd.grad(conv(x, w, padding=k // 2, groups=g), (x, w), grad)
        else:
            def fn() -> Any:
                return conv(x, w, padding=k // 2, groups=g)
        prev = (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = bool(params["tf32"]), True
        try:
            t, reps = self.device_seconds(fn, seconds)
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = prev
        flops = 2.0 * b * o * s * s * (c // g) * k * k * (3.0 if train else 1.0)
        return {"device_s": t, "reps": float(reps), "tflops": flops / t / 1e12}

    def elementwise(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Device seconds of one copy, add or scale of ``numel`` elements."""
        torch = self.torch
        n, dt, op = int(params["numel"]), self.dtype(params["dtype"]), params["op"]
        a, b = torch.randn(n, device=self.device, dtype=dt), torch.randn(n, device=self.device, dtype=dt)
        c = torch.empty(n, device=self.device, dtype=dt)
        fns = {"copy": lambda: c.copy_(a), "add": lambda: torch.add(a, b, out=c), "scale": lambda: torch.mul(a, 2.0, out=c)}
        t, reps = self.device_seconds(fns[op], seconds)
        moved = n * a.element_size() * (3 if op == "add" else 2)
        return {"device_s": t, "reps": float(reps), "gbs": moved / t / 1e9}

    def optimizer(self, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """Host and device seconds of one optimizer ``step()`` over ``tensors`` tensors of ``params`` elements in all."""
        torch = self.torch
        n, each = int(params["tensors"]), max(1, int(params["params"]) // int(params["tensors"]))
        ps = [torch.zeros(each, device=self.device, requires_grad=True) for _ in range(n)]
        for p in ps:
            p.grad = torch.randn_like(p) * 1e-3
        impl = {"foreach": True} if params["impl"] == "foreach" else {"fused": True}
        opt = (torch.optim.SGD(ps, lr=0.01, momentum=0.9, **impl) if params["kind"] == "sgd"
               else torch.optim.Adam(ps, lr=1e-3, **impl))
        for _ in range(3):
            opt.step()
        self.sync()
        host = self.host_seconds(opt.step, seconds / 2)
        device, reps = self.device_seconds(opt.step, seconds / 2)
        return {"host_s": host, "device_s": device, "reps": float(reps)}

    def host_seconds(self, fn: Callable[[], Any], seconds: float, min_reps: int = 3) -> float:
        """Median host seconds of one call of ``fn``, the device synchronized after each (never a full queue)."""
        times: list[float] = []
        t0 = time.monotonic()
        while len(times) < min_reps or (time.monotonic() - t0 < seconds and len(times) < 1000):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
            self.sync()
        return statistics.median(times)
