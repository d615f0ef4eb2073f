"""The real-GPU code paths against a mocked ``pynvml`` (real nvidia-ml-py structs and errors, fake driver).

No GPU is touched: every NVML function the profiler calls is replaced by a fake that returns the same
types nvidia-ml-py returns (ctypes structs, ints, str) or raises its NVMLError subclasses. Harness
tests use tiny protocol-speaking child scripts instead of torch children. Nothing here is data.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pynvml as real
import pytest

from gpupred.profile import harness, nvml
from gpupred.profile.harness import Child, HarnessConfig, run_unit, uuid_hex
from gpupred.profile.nvml import PynvmlBackend, Sampler
from gpupred.workloads.spec import WorkloadSpec

from profile_faults import TINY, TINY2

UUID = "GPU-1a2b3c4d-5e6f-7a8b-9c0d-112233445566"


def _addr(ptr: Any) -> int:
    return int(ctypes.cast(ptr, ctypes.c_void_p).value or 0)


def _err(code: int) -> real.NVMLError:
    return real.NVMLError(code)


class FakeNvml(types.ModuleType):
    """A stand-in ``pynvml``: the real module's constants, structs and errors; fake driver calls."""

    def __init__(self, **fail: BaseException) -> None:
        super().__init__("pynvml")
        self.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})
        self.fail = fail  # function name -> exception to raise
        self.calls: list[str] = []
        self.gpm_snapshots: dict[int, int] = {}  # id(sample) -> tick when taken
        self.tick = 0
        self.inits = 0
        self.allocated = 0
        self.freed: list[Any] = []
        for name in [n for n in dir(self) if n.startswith("nvml") and callable(getattr(self, n))]:
            impl = getattr(type(self), "_" + name, None)
            setattr(self, name, self._wrap(name, impl.__get__(self) if impl else self._missing(name)))

    def _missing(self, name: str) -> Any:
        def fn(*a: Any) -> Any:
            raise AssertionError(f"unexpected NVML call {name}")

        return fn

    def _wrap(self, name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name in self.fail:
                raise self.fail[name]
            return fn(*args, **kwargs)

        return call

    # -- lifecycle and identity
    def _nvmlInit(self) -> None:
        self.inits += 1

    def _nvmlShutdown(self) -> None:
        self.inits -= 1

    def _nvmlDeviceGetCount(self) -> int:
        return 2

    def _nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return ("handle", i)

    def _nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        if uuid == UUID:
            return ("handle", 0)
        raise _err(real.NVML_ERROR_NOT_FOUND)

    def _nvmlDeviceGetUUID(self, h: Any) -> str:
        return UUID if h == ("handle", 0) else "GPU-ffffffff-0000-0000-0000-000000000000"

    def _nvmlDeviceGetName(self, h: Any) -> str:
        return "NVIDIA H100 80GB HBM3"

    def _nvmlDeviceGetIndex(self, h: Any) -> int:
        return h[1]

    def _nvmlSystemGetDriverVersion(self) -> str:
        return "580.65.06"

    def _nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13000

    def _nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    # -- polled
    def _nvmlDeviceGetMemoryInfo(self, h: Any, version: Any = None) -> Any:
        if not version:  # v1: used = total - free, driver-reserved memory included
            m = real.c_nvmlMemory_t()
            m.total, m.free, m.used = 80 * 2**30, 70 * 2**30, 10 * 2**30
            return m
        self.calls.append("nvmlDeviceGetMemoryInfo_v2")
        if "nvmlDeviceGetMemoryInfo_v2" in self.fail:
            raise self.fail["nvmlDeviceGetMemoryInfo_v2"]
        assert version == real.nvmlMemory_v2
        m2 = real.c_nvmlMemory_v2_t()  # v2: reserved apart, used excludes it
        m2.version, m2.total, m2.reserved = version, 80 * 2**30, 512 * 2**20
        m2.free, m2.used = 70 * 2**30, 10 * 2**30 - 512 * 2**20
        return m2

    def _nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        u = real.c_nvmlUtilization_t()
        u.gpu, u.memory = 97, 41
        return u

    def _nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return 612_345  # mW

    def _nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        return {real.NVML_CLOCK_SM: 1980, real.NVML_CLOCK_MEM: 2619}[kind]

    def _nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return 61

    def _nvmlDeviceGetTemperatureV(self, h: Any, sensor: int, version: int = real.nvmlTemperature_v1) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU and version == real.nvmlTemperature_v1
        return 61

    def _nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return 0x4

    def _nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any) -> int:
        return 0x8

    def _nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        return {real.NVML_PCIE_UTIL_TX_BYTES: 1000, real.NVML_PCIE_UTIL_RX_BYTES: 2000}[counter]

    # -- sample buffer: (value type, list of c_nvmlSample_t), like nvidia-ml-py
    def _nvmlDeviceGetSamples(self, h: Any, kind: int, since_us: int) -> Any:
        now = int(time.time() * 1e6)
        out = []
        for k in range(3):
            s = real.c_nvmlSample_t()
            s.timeStamp = now - 100_000 * (2 - k)
            s.sampleValue.uiVal = 50 + k + (0 if kind == real.NVML_GPU_UTILIZATION_SAMPLES else 100)
            out.append(s)
        out = [s for s in out if s.timeStamp > since_us]
        if not out:
            raise _err(real.NVML_ERROR_NOT_FOUND)
        return real.NVML_VALUE_TYPE_UNSIGNED_INT, out

    # -- GPM
    def _nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        s = real.c_nvmlGpmSupport_t()
        s.version, s.isSupportedDevice = real.NVML_GPM_SUPPORT_VERSION, 1
        return s

    def _nvmlGpmSampleAlloc(self) -> Any:
        self.allocated += 1  # an opaque pointer with a distinct address, never dereferenced
        return ctypes.cast(ctypes.c_void_p(0x1000 * self.allocated), real.c_nvmlGpmSample_t)

    def _nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed.append(sample)

    def _nvmlGpmSampleGet(self, h: Any, sample: Any) -> Any:
        self.tick += 1
        self.gpm_snapshots[_addr(sample)] = self.tick
        return sample

    def _nvmlGpmMetricsGet(self, mg: Any) -> Any:
        assert mg.version == real.NVML_GPM_METRICS_GET_VERSION and mg.numMetrics == 4
        t1 = self.gpm_snapshots[_addr(mg.sample1)]
        t2 = self.gpm_snapshots[_addr(mg.sample2)]
        assert t2 > t1, "sample2 must be the newer snapshot"
        values = {real.NVML_GPM_METRIC_SM_UTIL: 88.0, real.NVML_GPM_METRIC_SM_OCCUPANCY: 33.0,
                  real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 12.5, real.NVML_GPM_METRIC_DRAM_BW_UTIL: 45.0}
        for i in range(mg.numMetrics):
            mid = mg.metrics[i].metricId
            if mid == real.NVML_GPM_METRIC_SM_OCCUPANCY and "occupancy" in self.fail:
                mg.metrics[i].nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
                continue
            mg.metrics[i].nvmlReturn = real.NVML_SUCCESS
            mg.metrics[i].value = values[mid]
        return mg

    # -- processes: like nvidia-ml-py, friendly objects with pid and usedGpuMemory (None when unknown)
    procs: list[tuple[int, int | None]] = [(111, 3 * 2**30), (222, None)]

    def _nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        return [real.nvmlFriendlyObject({"pid": p, "usedGpuMemory": m, "gpuInstanceId": 0, "computeInstanceId": 0})
                for p, m in self.procs]

    def _nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any) -> list[Any]:
        return self._nvmlDeviceGetComputeRunningProcesses(h)


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a factory for FakeNvml modules as what ``nvml._pynvml`` returns."""
    holder: dict[str, FakeNvml] = {}

    def install(**fail: BaseException) -> FakeNvml:
        nv = FakeNvml(**fail)
        holder["nv"] = nv
        monkeypatch.setattr(nvml, "_pynvml", lambda: nv)
        return nv

    return install


def _ticks(s: Sampler, n: int) -> None:
    for _ in range(n):
        s.tick()


# ------------------------------------------------------------------------------------------ backend


def test_device_info_types_and_versions(fake_nvml: Any) -> None:
    nv = fake_nvml()
    del nv.nvmlSystemGetCudaDriverVersion_v2  # an older nvidia-ml-py: no _v2, still no raise
    b = PynvmlBackend(0)
    info = b.device_info()
    assert info.name == "NVIDIA H100 80GB HBM3" and info.uuid == UUID and info.driver_version == "580.65.06"
    assert info.cuda_version == "13.0" and info.memory_total_mib == 80 * 1024 and info.index == 0
    b.close()
    assert nv.inits == 0


def test_device_by_uuid_and_unique_prefix(fake_nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml()
    assert PynvmlBackend(UUID).device_info().index == 0
    assert PynvmlBackend(UUID[:12]).device_info().uuid == UUID  # CUDA_VISIBLE_DEVICES accepts prefixes
    with pytest.raises(nvml.NvmlUnavailable):
        PynvmlBackend("GPU-")  # ambiguous: both devices match
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{UUID},1")
    assert nvml.visible_device() == UUID
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert nvml.visible_device() == 1


def test_poll_groups_return_floats_in_contract_units(fake_nvml: Any) -> None:
    fake_nvml()
    b = PynvmlBackend(0)
    got: dict[str, float] = {}
    for names, fn in list(b.poll_groups().values()) + list(b.slow_groups().values()):
        values = fn()
        assert set(values) == set(names) and all(isinstance(v, float) for v in values.values())
        got.update(values)
    assert got == {"gpu_util": 97.0, "mem_util": 41.0, "mem_used_mib": 9728.0, "mem_reserved_mib": 512.0,
                   "power_w": 612.345, "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0, "temp_c": 61.0,
                   "throttle_reasons": 4.0, "pcie_tx_kib_s": 1000.0, "pcie_rx_kib_s": 2000.0}


def test_throttle_falls_back_to_the_deprecated_name(fake_nvml: Any) -> None:
    fake_nvml(nvmlDeviceGetCurrentClocksEventReasons=_err(real.NVML_ERROR_FUNCTION_NOT_FOUND))
    b = PynvmlBackend(0)
    assert b.poll_groups()["throttle"][1]() == {"throttle_reasons": 8.0}


def test_temperature_uses_the_versioned_call_when_present(fake_nvml: Any) -> None:
    nv = fake_nvml()
    read = PynvmlBackend(0).poll_groups()["temperature"][1]
    assert read() == read() == {"temp_c": 61.0}
    assert nv.calls.count("nvmlDeviceGetTemperatureV") == 2 and "nvmlDeviceGetTemperature" not in nv.calls


@pytest.mark.parametrize("error", [None, _err(real.NVML_ERROR_FUNCTION_NOT_FOUND), _err(real.NVML_ERROR_NOT_SUPPORTED),
                                   _err(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)])
def test_temperature_falls_back_to_the_legacy_call_and_remembers(fake_nvml: Any, error: Any) -> None:
    nv = fake_nvml() if error is None else fake_nvml(nvmlDeviceGetTemperatureV=error)
    if error is None:
        del nv.nvmlDeviceGetTemperatureV  # an nvidia-ml-py older than the versioned call
    read = PynvmlBackend(0).poll_groups()["temperature"][1]
    assert read() == read() == read() == {"temp_c": 61.0}
    assert nv.calls.count("nvmlDeviceGetTemperature") == 3
    assert nv.calls.count("nvmlDeviceGetTemperatureV") == (0 if error is None else 1)  # tried once, then cached


def test_temperature_transient_error_is_raised_not_fallen_back(fake_nvml: Any) -> None:
    nv = fake_nvml(nvmlDeviceGetTemperatureV=_err(real.NVML_ERROR_UNKNOWN))
    read = PynvmlBackend(0).poll_groups()["temperature"][1]
    with pytest.raises(real.NVMLError_Unknown):
        read()
    assert "nvmlDeviceGetTemperature" not in nv.calls
    del nv.fail["nvmlDeviceGetTemperatureV"]
    assert read() == {"temp_c": 61.0} and "nvmlDeviceGetTemperature" not in nv.calls


def test_memory_v2_reports_reserved_apart_from_used(fake_nvml: Any) -> None:
    nv = fake_nvml()
    b = PynvmlBackend(0)
    read = b.poll_groups()["memory"][1]
    assert read() == read() == {"mem_used_mib": 9728.0, "mem_reserved_mib": 512.0}  # used excludes reserved
    assert b.memory_info_mib() == {"used": 9728.0, "total": 81920.0, "reserved": 512.0}
    assert b.device_info().memory_total_mib == 81920.0
    assert nv.calls.count("nvmlDeviceGetMemoryInfo_v2") == nv.calls.count("nvmlDeviceGetMemoryInfo") == 4


@pytest.mark.parametrize("error", [None, _err(real.NVML_ERROR_FUNCTION_NOT_FOUND), _err(real.NVML_ERROR_NOT_SUPPORTED),
                                   _err(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)])
def test_memory_falls_back_to_v1_and_remembers(fake_nvml: Any, error: Any) -> None:
    nv = fake_nvml() if error is None else fake_nvml(nvmlDeviceGetMemoryInfo_v2=error)
    if error is None:
        del nv.nvmlMemory_v2  # an nvidia-ml-py without the v2 struct
    b = PynvmlBackend(0)
    read = b.poll_groups()["memory"][1]
    assert read() == read() == {"mem_used_mib": 10240.0}  # v1: used includes reserved; no reserved metric
    info = b.memory_info_mib()
    assert info["used"] == 10240.0 and info["total"] == 81920.0 and math.isnan(info["reserved"])
    assert b.device_info().memory_total_mib == 81920.0
    assert nv.calls.count("nvmlDeviceGetMemoryInfo_v2") == (0 if error is None else 1)  # tried once, then cached


def test_memory_transient_error_is_raised_not_fallen_back(fake_nvml: Any) -> None:
    nv = fake_nvml(nvmlDeviceGetMemoryInfo_v2=_err(real.NVML_ERROR_GPU_IS_LOST))
    b = PynvmlBackend(0)
    with pytest.raises(real.NVMLError_GpuIsLost):
        b.poll_groups()["memory"][1]()
    assert nv.calls == ["nvmlInit", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMemoryInfo",
                        "nvmlDeviceGetMemoryInfo_v2"]


def test_buffered_samples_use_the_value_union_and_skip_not_found(fake_nvml: Any) -> None:
    nv = fake_nvml()
    b = PynvmlBackend(0)
    since = int(time.time() * 1e6) - 10_000_000
    rows = b.buffered_samples(since)
    assert sorted(v for _, m, v in rows if m == "gpu_util") == [50.0, 51.0, 52.0]
    assert sorted(v for _, m, v in rows if m == "mem_util") == [150.0, 151.0, 152.0]
    assert all(isinstance(ts, int) and ts > since for ts, _, _ in rows)
    assert b.buffered_samples(int(time.time() * 1e6) + 10**6) == []  # NVML_ERROR_NOT_FOUND: nothing new
    assert "nvmlDeviceGetSamples" in nv.calls


def test_buffered_memory_buffer_missing_keeps_gpu_buffer(fake_nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    nv = fake_nvml()
    orig = nv.nvmlDeviceGetSamples

    def samples(h: Any, kind: int, since: int) -> Any:
        if kind == real.NVML_MEMORY_UTILIZATION_SAMPLES:
            raise _err(real.NVML_ERROR_NOT_SUPPORTED)
        return orig(h, kind, since)

    nv.nvmlDeviceGetSamples = samples
    b = PynvmlBackend(0)
    future = int(time.time() * 1e6) + 10**6
    assert b.buffered_samples(future) == []  # GPU buffer: nothing new; memory buffer: unsupported -> skipped
    rows = b.buffered_samples(0)
    assert {m for _, m, _ in rows} == {"gpu_util"}


def test_buffered_unsupported_or_lost_gpu_raises_and_sampler_drops_it(fake_nvml: Any) -> None:
    fake_nvml(nvmlDeviceGetSamples=_err(real.NVML_ERROR_NOT_SUPPORTED))
    s = Sampler(PynvmlBackend(0), interval_ms=50)
    _ticks(s, 11)
    assert "buffered" in s.dropped and not s.buffered_supported
    # 'GpuNotFound'/'FunctionNotFound' contain 'NotFound' but are failures, not "no new samples"
    fake_nvml(nvmlDeviceGetSamples=_err(real.NVML_ERROR_FUNCTION_NOT_FOUND))
    with pytest.raises(real.NVMLError_FunctionNotFound):
        PynvmlBackend(0).buffered_samples(0)
    fake_nvml(nvmlDeviceGetSamples=_err(real.NVML_ERROR_GPU_NOT_FOUND))
    with pytest.raises(real.NVMLError_GpuNotFound):
        PynvmlBackend(0).buffered_samples(0)


def test_gpm_snapshots_metric_ids_and_baseline_reset(fake_nvml: Any) -> None:
    nv = fake_nvml()
    b = PynvmlBackend(0)
    assert b.gpm_support() == (True, "")
    assert b.gpm_read() == {}
    assert b.gpm_read() == {"sm_active": 88.0, "sm_occupancy": 33.0, "tensor_active": 12.5, "dram_bw_util": 45.0}
    assert b.gpm_read()["sm_active"] == 88.0  # the snapshots swap: sample2 is always the newer one
    b.gpm_reset()
    assert b.gpm_read() == {}  # a new sampler never diffs against the previous unit's snapshot
    assert len(b.gpm_read()) == 4
    b.close()
    assert len(nv.freed) == 2


def test_gpm_per_metric_failure_is_dropped_others_kept(fake_nvml: Any) -> None:
    fake_nvml(occupancy=RuntimeError("unused"))
    s = Sampler(PynvmlBackend(0), interval_ms=50)
    _ticks(s, 5)
    metrics = set(s.samples.metric)
    assert {"sm_active", "tensor_active", "dram_bw_util"} <= metrics and "sm_occupancy" not in metrics
    assert "gpm.sm_occupancy" in s.dropped and s.gpm_supported


@pytest.mark.parametrize("where,code", [("nvmlGpmSampleGet", real.NVML_ERROR_NO_PERMISSION),
                                        ("nvmlGpmSampleAlloc", real.NVML_ERROR_NOT_SUPPORTED),
                                        ("nvmlGpmMetricsGet", real.NVML_ERROR_NO_PERMISSION)])
def test_gpm_refused_at_read_time_is_dropped_at_once(fake_nvml: Any, where: str, code: int) -> None:
    fake_nvml(**{where: _err(code)})
    s = Sampler(PynvmlBackend(0), interval_ms=50)
    _ticks(s, 8)
    s.stop()
    assert "gpm" in s.dropped and not any(src == "gpm" for src in s.samples.source)
    assert not s.gpm_supported  # rows must not claim GPM data that never came
    assert "gpu_util" in s.samples.metric


@pytest.mark.parametrize("fail", [{"nvmlGpmQueryDeviceSupport": _err(real.NVML_ERROR_NOT_SUPPORTED)},
                                  {"nvmlGpmQueryDeviceSupport": _err(real.NVML_ERROR_FUNCTION_NOT_FOUND)}])
def test_gpm_unsupported_device_or_old_driver(fake_nvml: Any, fail: dict[str, BaseException]) -> None:
    nv = fake_nvml(**fail)
    s = Sampler(PynvmlBackend(0), interval_ms=50)
    _ticks(s, 4)
    assert not s.gpm_supported and any(n.startswith("gpm:") for n in s.notes)
    assert "nvmlGpmSampleGet" not in nv.calls


def test_gpm_api_missing_from_nvidia_ml_py(fake_nvml: Any) -> None:
    nv = fake_nvml()
    del nv.nvmlGpmQueryDeviceSupport
    ok, why = PynvmlBackend(0).gpm_support()
    assert not ok and "no GPM API" in why


def test_process_memory_and_old_driver_fallback(fake_nvml: Any) -> None:
    fake_nvml()
    assert PynvmlBackend(0).process_memory_mib([111]) == {111: 3072.0}  # None (unknown) is left out
    nv = fake_nvml(nvmlDeviceGetComputeRunningProcesses=real.NVMLLibraryMismatchError("old driver"))
    assert PynvmlBackend(0).process_memory_mib([111]) == {111: 3072.0}
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in nv.calls


def test_container_host_pids_single_process_is_attributed(fake_nvml: Any) -> None:
    nv = fake_nvml()
    nv.procs = [(987654, 2**30)]  # NVML reports the host PID; our child is 4242 in the container
    s = Sampler(PynvmlBackend(0), interval_ms=50)
    s.set_members({4242: 0})
    _ticks(s, 2)
    s.stop()
    rows = [(v, m) for v, m, metric in zip(s.samples.value, s.samples.member, s.samples.metric) if metric == "proc_mem_mib"]
    assert rows and rows[0] == (1024.0, 0)
    nv.procs = [(987654, 2**30), (987655, 2**30)]
    s2 = Sampler(PynvmlBackend(0), interval_ms=50)
    s2.set_members({4242: 0, 4243: 1})
    _ticks(s2, 2)
    s2.stop()
    assert "proc_mem_mib" not in s2.samples.metric and any("PID namespace" in n for n in s2.notes)


def test_sampler_thread_survives_junk_and_raising_backend(fake_nvml: Any) -> None:
    nv = fake_nvml(nvmlDeviceGetPowerUsage=_err(real.NVML_ERROR_UNKNOWN),
                   nvmlDeviceGetTemperatureV=_err(real.NVML_ERROR_NO_PERMISSION))  # no fallback: dropped
    nv.nvmlDeviceGetClockInfo = lambda h, k: "not a number"  # junk from a broken binding
    b = PynvmlBackend(0)
    s = Sampler(b, interval_ms=10).start()
    time.sleep(0.4)
    s.stop()
    b.close()
    assert s.ticks > 5 and "gpu_util" in s.samples.metric
    assert {"power", "temperature", "sm_clock"} <= s.dropped
    assert not any("sampler stopped early" in n for n in s.notes)


def test_sampler_tick_exception_does_not_stop_sampling(fake_nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml()
    s = Sampler(PynvmlBackend(0), interval_ms=10)
    calls = {"n": 0}
    orig = s._read_procs

    def flaky(t: float) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        orig(t)

    monkeypatch.setattr(s, "_read_procs", flaky)
    s.start()
    time.sleep(0.3)
    s.stop()
    assert calls["n"] > 5 and any("sampler tick failed" in n for n in s.notes)


def test_buffered_timestamps_off_the_wall_clock_are_refused(fake_nvml: Any) -> None:
    nv = fake_nvml()

    def samples(h: Any, kind: int, since: int) -> Any:
        s = real.c_nvmlSample_t()
        s.timeStamp, s.sampleValue.uiVal = since + 10**12, 5  # far in the future: not epoch µs
        return real.NVML_VALUE_TYPE_UNSIGNED_INT, [s]

    nv.nvmlDeviceGetSamples = samples
    s = Sampler(PynvmlBackend(0), interval_ms=50)
    _ticks(s, 1)
    assert "buffered" in s.dropped and "buffered" not in s.samples.source


def test_uuid_match_between_torch_and_nvml() -> None:
    bare = "1a2b3c4d-5e6f-7a8b-9c0d-112233445566"  # str(torch.cuda.get_device_properties(0).uuid)
    assert uuid_hex(bare) == uuid_hex(UUID) == uuid_hex(UUID.upper()) and len(uuid_hex(UUID)) == 32
    assert uuid_hex("MIG-" + bare) == uuid_hex(bare)
    assert uuid_hex("GPU-ffffffff-0000-0000-0000-000000000000") != uuid_hex(UUID)


# ------------------------------------------------------------------------------------------ harness

_CHILD = textwrap.dedent('''
    import os, sys, time
    from multiprocessing.connection import Connection
    rx, tx = Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False)
    mode = sys.argv[3]
    tx.send(("ready", {"import_s": 0.0, "boot": time.monotonic()}))
    _, job = rx.recv()
    if mode == "hang":
        time.sleep(600)
    props = {"name": "fake", "sm_count": 132, "uuid": sys.argv[4]}
    tx.send(("built", {"pid": os.getpid(), "device_props": props, "cuda_init_s": 0.0, "build_s": 0.0}))
    assert rx.recv()[0] == "go"
    if mode == "oom":
        tx.send(("result", {"status": "oom", "message": "CUDA out of memory (fixture)", "device_props": props,
                            "peak_allocated_mib": 123.0}))
        sys.exit(0)
    tx.send(("warm", {"warmup_s": 0.01, "warmup_iters": 1}))
    assert rx.recv()[0] == "measure"
    w0 = time.monotonic(); time.sleep(0.05); w1 = time.monotonic()
    tx.send(("window", {"window_start": w0, "window_end": w1, "iter_times": [w1 - w0]}))
    if mode == "die-after-window":
        os._exit(3)
    assert rx.recv()[0] == "stop"
    tx.send(("result", {"status": "ok", "message": "", "window_start": w0, "window_end": w1, "iter_times": [w1 - w0],
                        "device_props": props}))
''')


class ScriptChild(Child):
    """A harness child that speaks the protocol without torch (``mode``: ok, oom or hang)."""

    def __init__(self, script: Path, mode: str, uuid: str = "") -> None:  # noqa: D107 - mirrors Child.__init__
        c_rx, p_tx = os.pipe()
        p_rx, c_tx = os.pipe()
        self.log = tempfile.TemporaryFile(prefix="gpupred-test-child-")
        self.proc = subprocess.Popen([sys.executable, str(script), str(c_rx), str(c_tx), mode, uuid],
                                     pass_fds=(c_rx, c_tx), stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        os.close(c_rx)
        os.close(c_tx)
        self.rx = Connection(p_rx, writable=False)
        self.tx = Connection(p_tx, readable=False)
        self.started = time.monotonic()


class ScriptLauncher:
    """Hands out ScriptChild processes in the given modes."""

    def __init__(self, script: Path, modes: list[str], uuid: str = "") -> None:
        self.script, self.modes, self.uuid = script, modes, uuid
        self.children: list[ScriptChild] = []

    def take(self, n: int) -> list[Child]:
        self.children = [ScriptChild(self.script, m, self.uuid) for m in self.modes[:n]]
        return list(self.children)

    def prefill(self, n: int | None = None) -> None:
        pass

    def close(self) -> None:
        pass


def _cfg(**kw: Any) -> HarnessConfig:
    base: dict[str, Any] = dict(device="cpu", startup_timeout_s=20.0, warmup_max_s=1.0, max_window_s=1.0, slack_s=1.0,
                                interval_ms=50.0, margin_s=0.5)
    base.update(kw)
    return HarnessConfig(**base)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "fake_child.py"
    path.write_text(_CHILD)
    return path


def test_colocated_oom_member_is_recorded_with_the_others(script: Path) -> None:
    from gpupred.profile.fake import FakeBackend

    specs = [WorkloadSpec.from_id(TINY), WorkloadSpec.from_id(TINY2)]
    launcher = ScriptLauncher(script, ["ok", "oom"], uuid="00000000-fake-0000-0000-000000000000")
    r = run_unit(specs, FakeBackend(), _cfg(), launcher=launcher)  # type: ignore[arg-type]
    rows = r.runs.to_pylist()
    # the group stops at once: the survivor never runs on alone (its window would say "slowdown 1.0")
    assert [x["status"] for x in rows] == ["partner_failed", "oom"], [x["message"] for x in rows]
    assert "member 1" in rows[0]["message"] and "oom" in rows[0]["message"]
    assert rows[0]["n_iters"] == 0 and rows[1]["n_iters"] == 0 and "out of memory" in rows[1]["message"]
    assert rows[1]["torch_peak_allocated_mib"] == 123.0
    assert "is not the sampled NVML device" not in rows[0]["notes"]  # torch's bare UUID matches NVML's GPU-...
    assert all(not c.alive() for c in launcher.children)


def test_member_dying_after_its_window_fails_the_whole_group(script: Path) -> None:
    from gpupred.profile.fake import FakeBackend

    specs = [WorkloadSpec.from_id(TINY), WorkloadSpec.from_id(TINY2)]
    launcher = ScriptLauncher(script, ["ok", "die-after-window"])
    r = run_unit(specs, FakeBackend(), _cfg(), launcher=launcher)  # type: ignore[arg-type]
    rows = r.runs.to_pylist()
    assert [x["status"] for x in rows] == ["partner_failed", "error"], [x["message"] for x in rows]
    assert "exited with code 3" in rows[1]["message"]


def test_uuid_mismatch_is_noted(script: Path) -> None:
    from gpupred.profile.fake import FakeBackend

    launcher = ScriptLauncher(script, ["ok"], uuid="deadbeef-0000-0000-0000-000000000000")
    r = run_unit([WorkloadSpec.from_id(TINY)], FakeBackend(), _cfg(), launcher=launcher)  # type: ignore[arg-type]
    assert "is not the sampled NVML device" in r.runs.to_pylist()[0]["notes"]


def test_hard_timeout_kills_every_member_and_records_all(script: Path) -> None:
    from gpupred.profile.fake import FakeBackend

    specs = [WorkloadSpec.from_id(TINY), WorkloadSpec.from_id(TINY2)]
    launcher = ScriptLauncher(script, ["hang", "ok"])
    cfg = _cfg(startup_timeout_s=1.0, warmup_max_s=0.0, max_window_s=0.0, slack_s=0.0)
    t = time.monotonic()
    r = run_unit(specs, FakeBackend(), cfg, launcher=launcher)  # type: ignore[arg-type]
    assert time.monotonic() - t < 8
    assert r.statuses == ["timeout", "timeout"]  # the ok member waited for the hung one at 'built'
    assert all(not c.alive() for c in launcher.children)


def test_deadline_interrupts_the_unit_and_kills_children(script: Path) -> None:
    from gpupred.profile.fake import FakeBackend

    launcher = ScriptLauncher(script, ["hang"])
    with pytest.raises(harness.UnitInterrupted):
        run_unit([WorkloadSpec.from_id(TINY)], FakeBackend(), _cfg(), deadline=time.monotonic() + 0.5,
                 launcher=launcher)  # type: ignore[arg-type]
    assert all(not c.alive() for c in launcher.children)


def test_interrupt_in_the_parent_kills_children_at_once(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpupred.profile.fake import FakeBackend

    launcher = ScriptLauncher(script, ["hang", "hang"])
    calls = {"n": 0}
    real_wait = harness.wait

    def wait(objs: Any, timeout: float | None = None) -> Any:
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt
        return real_wait(objs, timeout=timeout)

    monkeypatch.setattr(harness, "wait", wait)
    specs = [WorkloadSpec.from_id(TINY), WorkloadSpec.from_id(TINY2)]
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_unit(specs, FakeBackend(), _cfg(startup_timeout_s=60.0), launcher=launcher)  # type: ignore[arg-type]
    assert time.monotonic() - t < 5  # killed at once, not after the 15 s grace for members that reported
    assert all(not c.alive() for c in launcher.children)


def test_sigterm_becomes_keyboard_interrupt_in_sweeps() -> None:
    from gpupred.profile.sweep import SigtermAsInterrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with SigtermAsInterrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) == before
    assert math.isfinite(time.monotonic())
