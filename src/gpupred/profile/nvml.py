"""The NVML sampler: a background thread recording every metric of the raw-data contract.

The NVML layer sits behind :class:`gpupred.profile.backend.Backend` (a small protocol): :class:`PynvmlBackend`
talks to the driver through nvidia-ml-py (``pynvml``, imported lazily), :class:`gpupred.profile.fake.FakeBackend`
makes up values for tests and ``--dry-run``. Every call that can fail is guarded on its own: a metric
whose call fails is dropped for the run with a note (at once for NotSupported/NoPermission/missing
functions, after three failures in a row otherwise), never fatal.

Cadence (default ``interval_ms=50``): NVML's utilization counters update every 1/6 s to 1 s depending
on the GPU, so polling at 20 Hz sees every update at least three times and gives power, clocks and
memory a 50 ms timeline; the sampler lives in the parent process, so its cost never competes with
the profiled training loop for the GIL. PCIe throughput (each call blocks about 20 ms inside NVML)
and the NVML sample buffer (which holds the driver's own finer utilization samples) are read every
10th tick; GPM metrics (Hopper) every 2nd tick, as the difference of two GPM snapshots.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gpupred.errors import GpupredError
from gpupred.profile.backend import Backend, DeviceInfo, MetricUnsupported  # re-exported: the sampler's types

DEFAULT_INTERVAL_MS = 50.0
SLOW_EVERY = 10  # pcie + buffered samples every 10th tick (0.5 s at 50 ms)
GPM_EVERY = 2  # GPM every 2nd tick (0.1 s at 50 ms)
_FATAL_NAMES = ("NotSupported", "NoPermission", "FunctionNotFound", "ArgumentVersionMismatch", "Deprecated",
                "LibraryMismatch")
# errors of a versioned NVML call that mean "use the older call instead" (missing in this driver or binding)
_FALLBACK_NAMES = ("NotSupported", "FunctionNotFound", "ArgumentVersionMismatch", "Deprecated", "LibraryMismatch")


class NvmlUnavailable(GpupredError):
    """No NVIDIA GPU or driver: profiling cannot start."""

    def __init__(self, nvml_message: str) -> None:
        super().__init__(f"no NVIDIA GPU/driver found ({nvml_message})")


def _err_text(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return f"{type(err).__name__}: {text}" if type(err).__name__ not in text else text


def _is_permanent(err: BaseException) -> bool:
    return isinstance(err, MetricUnsupported) or any(n in type(err).__name__ for n in _FATAL_NAMES)


def _try_older(err: BaseException) -> bool:
    """Whether a newer NVML call's failure means the older call should be tried (the call is missing or refused)."""
    return isinstance(err, (AttributeError, TypeError)) or any(n in type(err).__name__ for n in _FALLBACK_NAMES)


# ---------------------------------------------------------------------------------------------- pynvml


def _pynvml() -> Any:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as err:  # pragma: no cover - installed with the torch extra
        raise NvmlUnavailable(f"nvidia-ml-py is not installed: {err}") from None
    return pynvml


def probe() -> str | None:
    """None when NVML finds at least one GPU, else NVML's own message."""
    try:
        nv = _pynvml()
        nv.nvmlInit()
    except NvmlUnavailable as err:
        return str(err)
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return _err_text(err)
    try:
        count = nv.nvmlDeviceGetCount()
        return None if count > 0 else "NVML found 0 devices"
    except Exception as err:
        return _err_text(err)
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def require_gpu() -> None:
    """Raise :class:`NvmlUnavailable` at once if NVML finds no GPU."""
    msg = probe()
    if msg is not None:
        raise NvmlUnavailable(msg)


def visible_device() -> int | str:
    """The NVML device this process's CUDA device 0 is: a UUID or a PCI-order index from CUDA_VISIBLE_DEVICES."""
    import os

    cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not cvd:
        return 0
    first = cvd.split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return first
    try:
        return int(first)
    except ValueError:
        return 0


class PynvmlBackend:
    """The real NVML backend (nvidia-ml-py)."""

    name = "pynvml"
    simulated = False

    def __init__(self, device: int | str = 0) -> None:
        nv = self.nv = _pynvml()
        try:
            nv.nvmlInit()
        except Exception as err:
            raise NvmlUnavailable(_err_text(err)) from None
        try:
            if isinstance(device, str):
                self.handle = self._handle_by_uuid(device)
                self.index = -1
            else:
                self.handle = nv.nvmlDeviceGetHandleByIndex(device)
                self.index = device
        except Exception as err:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass
            raise NvmlUnavailable(f"device {device!r}: {_err_text(err)}") from None
        self._gpm: tuple[Any, Any] | None = None
        self._gpm_primed = False  # the baseline snapshot _gpm[0] holds a sample
        self._gpm_checked: tuple[bool, str] | None = None
        self._buffered_off: set[str] = set()
        self._temp_versioned: bool | None = None  # nvmlDeviceGetTemperatureV works (None: not known yet)
        self._mem_v2: bool | None = None  # nvmlDeviceGetMemoryInfo v2 works (None: not known yet)

    def _handle_by_uuid(self, uuid: str) -> Any:
        """A handle from a full UUID, or from a unique prefix as CUDA_VISIBLE_DEVICES allows."""
        nv = self.nv
        try:
            return nv.nvmlDeviceGetHandleByUUID(uuid)
        except Exception:
            matches = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                if str(self._safe(lambda: nv.nvmlDeviceGetUUID(h))).startswith(uuid):
                    matches.append(h)
            if len(matches) != 1:
                raise
            return matches[0]

    # -- identity
    def _safe(self, fn: Callable[[], Any], default: Any = "") -> Any:
        try:
            value = fn()
            return value.decode() if isinstance(value, bytes) else value
        except Exception:
            return default

    def device_info(self) -> DeviceInfo:
        """The device's identity (never raises; unknown fields are '')."""
        nv, h = self.nv, self.handle
        cuda = self._safe(lambda: nv.nvmlSystemGetCudaDriverVersion_v2(), 0) or self._safe(
            lambda: nv.nvmlSystemGetCudaDriverVersion(), 0)
        cuda_s = f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else ""
        mem = self._safe(lambda: self._memory().total / 2**20, float("nan"))
        index = self.index if self.index >= 0 else self._safe(lambda: nv.nvmlDeviceGetIndex(h), -1)
        return DeviceInfo(
            name=str(self._safe(lambda: nv.nvmlDeviceGetName(h))),
            uuid=str(self._safe(lambda: nv.nvmlDeviceGetUUID(h))),
            memory_total_mib=float(mem),
            driver_version=str(self._safe(lambda: nv.nvmlSystemGetDriverVersion())),
            cuda_version=cuda_s,
            index=int(index),
        )

    # -- versioned calls with a fallback to the older one (CUDA 14 drivers retire the older ones)
    def _temperature(self) -> float:
        """GPU temperature (°C): nvmlDeviceGetTemperatureV, else the legacy call; the one that works is remembered."""
        nv, h = self.nv, self.handle
        if self._temp_versioned is not False:
            try:
                value = nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU, nv.nvmlTemperature_v1)
            except Exception as err:
                if self._temp_versioned or not _try_older(err):
                    raise
            else:
                self._temp_versioned = True
                return float(value)
        value = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        self._temp_versioned = False
        return float(value)

    def _memory(self) -> Any:
        """Device memory: the v2 struct (``reserved`` apart from ``used``) where it works, else v1; remembered."""
        nv, h = self.nv, self.handle
        if self._mem_v2 is not False:
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            except Exception as err:
                if self._mem_v2 or not _try_older(err):
                    raise
            else:
                self._mem_v2 = True
                return mem
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        self._mem_v2 = False
        return mem

    def memory_info_mib(self) -> dict[str, float]:
        """Device memory in MiB: used, total and reserved (NaN where only the v1 query works); raises if NVML fails."""
        mem = self._memory()
        reserved = mem.reserved / 2**20 if self._mem_v2 else float("nan")
        return {"used": mem.used / 2**20, "total": mem.total / 2**20, "reserved": float(reserved)}

    # -- polled metrics
    def poll_groups(self) -> dict[str, tuple[tuple[str, ...], Callable[[], dict[str, float]]]]:
        """Reader groups read every tick."""
        nv, h = self.nv, self.handle

        def util() -> dict[str, float]:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            return {"gpu_util": float(u.gpu), "mem_util": float(u.memory)}

        def throttle() -> dict[str, float]:
            fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            try:
                value = fn(h) if fn else nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            except Exception as err:
                if fn is None or "FunctionNotFound" not in type(err).__name__:
                    raise
                value = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            return {"throttle_reasons": float(value)}

        def memory() -> dict[str, float]:
            info = self.memory_info_mib()
            out = {"mem_used_mib": info["used"]}
            if info["reserved"] == info["reserved"]:  # v2 only: v1's used includes the reserved memory
                out["mem_reserved_mib"] = info["reserved"]
            return out

        return {
            "utilization": (("gpu_util", "mem_util"), util),
            "memory": (("mem_used_mib", "mem_reserved_mib"), memory),
            "power": (("power_w",), lambda: {"power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0}),
            "sm_clock": (("sm_clock_mhz",), lambda: {"sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))}),
            "mem_clock": (("mem_clock_mhz",), lambda: {"mem_clock_mhz": float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))}),
            "temperature": (("temp_c",), lambda: {"temp_c": self._temperature()}),
            "throttle": (("throttle_reasons",), throttle),
        }

    def slow_groups(self) -> dict[str, tuple[tuple[str, ...], Callable[[], dict[str, float]]]]:
        """PCIe throughput (each call blocks ~20 ms in NVML)."""
        nv, h = self.nv, self.handle
        return {
            "pcie_tx": (("pcie_tx_kib_s",), lambda: {"pcie_tx_kib_s": float(nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES))}),
            "pcie_rx": (("pcie_rx_kib_s",), lambda: {"pcie_rx_kib_s": float(nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES))}),
        }

    # -- buffered samples
    def buffered_samples(self, since_us: int) -> list[tuple[int, str, float]]:
        """NVML's sample buffer for GPU and memory-controller utilization, newer than ``since_us``."""
        nv, h = self.nv, self.handle
        out: list[tuple[int, str, float]] = []
        fields = {
            nv.NVML_VALUE_TYPE_DOUBLE: "dVal", nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", nv.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        }
        if hasattr(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT"):
            fields[nv.NVML_VALUE_TYPE_UNSIGNED_SHORT] = "usVal"
        kinds = [(k, m) for k, m in ((nv.NVML_GPU_UTILIZATION_SAMPLES, "gpu_util"),
                                     (nv.NVML_MEMORY_UTILIZATION_SAMPLES, "mem_util")) if m not in self._buffered_off]
        if not kinds:
            raise MetricUnsupported("no NVML sample buffer is supported")
        failure: BaseException | None = None
        for kind, metric in kinds:
            try:
                vtype, samples = nv.nvmlDeviceGetSamples(h, kind, int(since_us))
            except Exception as err:
                if getattr(err, "value", None) == nv.NVML_ERROR_NOT_FOUND:
                    continue  # no new samples since the timestamp: not a failure
                if _is_permanent(err):
                    self._buffered_off.add(metric)  # this buffer is missing; keep reading the other one
                failure = err
                continue
            attr = fields.get(vtype, "uiVal")
            for s in samples:
                if s.timeStamp > since_us:
                    out.append((int(s.timeStamp), metric, float(getattr(s.sampleValue, attr))))
        if failure is not None and not out and (len(self._buffered_off) == 2 or not _is_permanent(failure)):
            raise failure  # both buffers missing, or a transient failure the sampler counts
        return out

    # -- GPM (Hopper and later)
    _GPM_IDS = {"sm_active": "NVML_GPM_METRIC_SM_UTIL", "sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",
                "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "dram_bw_util": "NVML_GPM_METRIC_DRAM_BW_UTIL"}

    def gpm_support(self) -> tuple[bool, str]:
        """Ask the driver once whether GPM works on this device."""
        if self._gpm_checked is None:
            nv = self.nv
            try:
                if not hasattr(nv, "nvmlGpmQueryDeviceSupport"):
                    self._gpm_checked = (False, "gpm: this nvidia-ml-py has no GPM API")
                elif not nv.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                    self._gpm_checked = (False, "gpm: device does not support GPM (Hopper or later needed)")
                else:
                    self._gpm_checked = (True, "")
            except Exception as err:
                self._gpm_checked = (False, f"gpm: {_err_text(err)}")
        return self._gpm_checked

    def gpm_reset(self) -> None:
        """Forget the baseline snapshot, so the next :meth:`gpm_read` starts afresh (a new sampler)."""
        self._gpm_primed = False

    def gpm_read(self) -> dict[str, float]:
        """GPM metrics between the previous snapshot and now ({} on the first call)."""
        nv = self.nv
        if self._gpm is None:
            s1 = nv.nvmlGpmSampleAlloc()
            try:
                s2 = nv.nvmlGpmSampleAlloc()
            except Exception:
                nv.nvmlGpmSampleFree(s1)
                raise
            self._gpm = (s1, s2)
        if not self._gpm_primed:
            nv.nvmlGpmSampleGet(self.handle, self._gpm[0])
            self._gpm_primed = True
            return {}
        s1, s2 = self._gpm
        nv.nvmlGpmSampleGet(self.handle, s2)
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(self._GPM_IDS)
        mg.sample1, mg.sample2 = s1, s2
        names = list(self._GPM_IDS)
        for i, name in enumerate(names):
            mg.metrics[i].metricId = getattr(nv, self._GPM_IDS[name])
        nv.nvmlGpmMetricsGet(mg)
        self._gpm = (s2, s1)  # the newer snapshot is the next baseline
        out: dict[str, float] = {}
        for i, name in enumerate(names):
            if mg.metrics[i].nvmlReturn == 0:
                out[name] = float(mg.metrics[i].value)
            else:
                out[name] = float("nan")  # the sampler turns a NaN into a per-metric failure
        return out

    # -- processes
    def process_memory_mib(self, pids: list[int]) -> dict[int, float]:
        """GPU memory per compute process on this device."""
        nv, h = self.nv, self.handle
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
        except Exception as err:  # an older driver: the unversioned call raises NVMLLibraryMismatchError
            if not any(n in type(err).__name__ for n in ("FunctionNotFound", "ArgumentVersionMismatch", "LibraryMismatch")):
                raise
            procs = nv.nvmlDeviceGetComputeRunningProcesses_v2(h)
        return {int(p.pid): (p.usedGpuMemory or 0) / 2**20 for p in procs if p.usedGpuMemory is not None}

    def close(self) -> None:
        """Free GPM snapshots and shut NVML down."""
        if self._gpm is not None:
            for s in self._gpm:
                try:
                    self.nv.nvmlGpmSampleFree(s)
                except Exception:
                    pass
            self._gpm = None
            self._gpm_primed = False
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


def open_backend(dry_run: bool = False, device: int | str | None = None) -> Backend:
    """The fake backend for dry runs, else the real one on ``device`` (default: this process's visible GPU)."""
    if dry_run:
        from gpupred.profile.fake import FakeBackend

        return FakeBackend()
    return PynvmlBackend(visible_device() if device is None else device)


# ---------------------------------------------------------------------------------------------- sampler


@dataclass
class SampleBuffer:
    """Samples in long format, columnar (what the samples table is made of)."""

    t_s: list[float] = field(default_factory=list)
    metric: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    member: list[int] = field(default_factory=list)
    source: list[str] = field(default_factory=list)

    def add(self, t: float, metric: str, value: float, member: int, source: str) -> None:
        """Append one sample."""
        self.t_s.append(t)
        self.metric.append(metric)
        self.value.append(value)
        self.member.append(member)
        self.source.append(source)

    def __len__(self) -> int:
        return len(self.t_s)


class Sampler:
    """Polls a :class:`Backend` in a background thread; times are seconds since ``t0`` (time.monotonic)."""

    def __init__(self, backend: Backend, interval_ms: float = DEFAULT_INTERVAL_MS, t0: float | None = None) -> None:
        self.backend = backend
        self.interval_s = max(interval_ms, 1.0) / 1000.0
        self.t0 = time.monotonic() if t0 is None else t0
        self._wall_minus_mono = time.time() - time.monotonic()
        self.samples = SampleBuffer()
        self.notes: list[str] = []
        self.dropped: set[str] = set()
        self._failures: dict[str, int] = {}
        self._members: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpu_time_s = 0.0
        self.wall_time_s = 0.0
        self.ticks = 0
        self.buffered_supported = False
        self._buffered_ok = True
        self._buffered_since_us = int(time.time() * 1e6)
        self._proc_ok = True
        self._proc_seen = False
        self._groups = self._guard_call("poll_groups", backend.poll_groups, {})
        self._slow = self._guard_call("slow_groups", backend.slow_groups, {})
        self.gpm_supported, why = self._guard_call("gpm_support", backend.gpm_support, (False, "gpm: support query failed"))
        if not self.gpm_supported and why:
            self.notes.append(why)
        reset = getattr(backend, "gpm_reset", None)  # a backend shared by several samplers: no stale baseline
        if self.gpm_supported and reset is not None:
            self._guard_call("gpm_reset", reset, None)
        self._gpm_rows = 0
        self._buffered_rows = 0

    # -- bookkeeping
    def set_members(self, pids: dict[int, int]) -> None:
        """Tell the sampler which process id is which member (for proc_mem_mib)."""
        with self._lock:
            self._members = dict(pids)

    def _note_failure(self, key: str, err: BaseException) -> bool:
        """Count a failure; return True if ``key`` is now dropped."""
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        if _is_permanent(err) or n >= 3:
            self.dropped.add(key)
            self.notes.append(f"{key}: dropped ({_err_text(err)})")
            return True
        return False

    def _guard_call(self, key: str, fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except Exception as err:
            self.notes.append(f"{key}: {_err_text(err)}")
            return default

    def _read_group(self, key: str, fn: Callable[[], dict[str, float]], t: float, source: str) -> None:
        if key in self.dropped:
            return
        try:
            values = [(metric, float(value)) for metric, value in fn().items()]
        except Exception as err:
            self._note_failure(key, err)
            return
        self._failures[key] = 0
        for metric, value in values:
            self.samples.add(t, metric, value, -1, source)

    def _read_gpm(self, t: float) -> None:
        if not self.gpm_supported or "gpm" in self.dropped:
            return
        try:
            values = self.backend.gpm_read()
        except Exception as err:
            self._note_failure("gpm", err)
            return
        self._failures["gpm"] = 0
        for metric, value in values.items():
            key = f"gpm.{metric}"
            if key in self.dropped:
                continue
            if value != value:  # NaN: the driver refused this metric
                self._note_failure(key, MetricUnsupported("per-metric GPM return code not success"))
                continue
            self.samples.add(t, metric, value, -1, "gpm")
            self._gpm_rows += 1

    def _read_buffered(self) -> None:
        if not self._buffered_ok:
            return
        try:
            rows = self.backend.buffered_samples(self._buffered_since_us)
        except Exception as err:
            if self._note_failure("buffered", err):
                self._buffered_ok = False
            return
        now_us = time.time() * 1e6
        if rows and abs(max(r[0] for r in rows) - now_us) > 600e6:  # not µs on the wall clock: unusable
            self._note_failure("buffered", MetricUnsupported(f"sample timestamps {rows[-1][0]} are not epoch microseconds"))
            self._buffered_ok = False
            return
        self.buffered_supported = True
        for ts_us, metric, value in rows:
            self._buffered_since_us = max(self._buffered_since_us, ts_us)
            t = ts_us / 1e6 - self._wall_minus_mono - self.t0
            self.samples.add(t, metric, value, -1, "buffered")
            self._buffered_rows += 1

    def _read_procs(self, t: float) -> None:
        if not self._proc_ok:
            return
        with self._lock:
            members = dict(self._members)
        if not members:
            return
        try:
            mem = self.backend.process_memory_mib(list(members))
        except Exception as err:
            if self._note_failure("proc_mem", err):
                self._proc_ok = False
            return
        matched = {pid: member for pid, member in members.items() if pid in mem}
        if not matched and len(members) == 1 and len(mem) == 1:
            # In a container NVML lists host PIDs: a lone process on the device during a solo run is ours.
            matched = {next(iter(mem)): next(iter(members.values()))}
            if not self._proc_seen:
                self.notes.append("proc_mem: member PID not listed by NVML; attributed the device's only process")
        for pid, member in matched.items():
            self._proc_seen = True
            self.samples.add(t, "proc_mem_mib", mem[pid], member, "poll")

    def tick(self) -> None:
        """Take one round of samples (the thread calls this every interval)."""
        t = time.monotonic() - self.t0
        for key, (_, fn) in self._groups.items():
            self._read_group(key, fn, t, "poll")
        if self.ticks % GPM_EVERY == 0:
            self._read_gpm(t)
        if self.ticks % SLOW_EVERY == 0:
            for key, (_, fn) in self._slow.items():
                self._read_group(key, fn, time.monotonic() - self.t0, "poll")
            self._read_buffered()
        self._read_procs(t)
        self.ticks += 1

    def _run(self) -> None:
        cpu0, wall0 = time.thread_time(), time.monotonic()
        next_t = time.monotonic()
        errors = 0
        try:
            while not self._stop.is_set():
                try:
                    self.tick()
                    errors = 0
                except Exception as err:  # one bad tick (a backend returning junk) must not end the sampling
                    errors += 1
                    self.ticks += 1
                    if errors == 1:
                        self.notes.append(f"sampler tick failed: {_err_text(err)}")
                    if errors >= 20:
                        raise
                next_t += self.interval_s
                delay = next_t - time.monotonic()
                if delay < 0:  # fell behind (slow NVML call): skip, do not burst
                    next_t = time.monotonic()
                    delay = 0.0
                self._stop.wait(delay)
            self._read_buffered()  # whatever the buffer gathered since the last slow tick
        except Exception as err:  # never let the sampler take the run down
            self.notes.append(f"sampler stopped early: {_err_text(err)}")
        finally:
            self.cpu_time_s = time.thread_time() - cpu0
            self.wall_time_s = time.monotonic() - wall0

    def start(self) -> "Sampler":
        """Start the background thread."""
        self._thread = threading.Thread(target=self._run, name="gpupred-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> SampleBuffer:
        """Stop the thread and return the samples; notes say which metrics were dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            if self._thread.is_alive():  # stuck in an NVML call: hand back a consistent snapshot
                self.notes.append("sampler thread did not stop within 10 s (NVML call hung?)")
                b, n = self.samples, min(len(self.samples.t_s), len(self.samples.metric), len(self.samples.value),
                                         len(self.samples.member), len(self.samples.source))
                self.samples = SampleBuffer(b.t_s[:n], b.metric[:n], b.value[:n], b.member[:n], b.source[:n])
        if self.gpm_supported and self._gpm_rows == 0 and "gpm" in self.dropped:
            self.gpm_supported = False  # the device says yes but every read failed (NoPermission, say)
        if self._members and self._proc_ok and not self._proc_seen:
            self.notes.append("proc_mem: NVML listed none of the member processes (PID namespace?)")
        if not self.buffered_supported and "buffered" not in " ".join(self.notes):
            self.notes.append("buffered: no buffered samples")
        elif self.buffered_supported and self._buffered_rows == 0:
            self.notes.append("buffered: the NVML sample buffer returned no samples")
        return self.samples
