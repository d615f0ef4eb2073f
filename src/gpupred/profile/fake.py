"""A made-up NVML backend for tests and ``--dry-run``: its values are simulated, never measurements."""

from __future__ import annotations

import math
import os
import time
from typing import Callable

from gpupred.profile.backend import DeviceInfo, MetricUnsupported


class FakeNotSupported(MetricUnsupported):
    """What the fake raises for a metric configured as unsupported (named like NVMLError_NotSupported)."""


class FakeFlaky(Exception):
    """A transient failure the fake raises for metrics configured as flaky."""


class FakeBackend:
    """Simulated NVML: smooth synthetic values; features can be switched off to exercise the fallbacks."""

    name = "fake"
    simulated = True

    def __init__(
        self,
        gpm: bool = True,
        buffered: bool = True,
        processes: bool = True,
        unsupported: tuple[str, ...] = (),
        flaky: tuple[str, ...] = (),
        buffered_period_s: float = 1 / 6,
    ) -> None:
        self.gpm, self.buffered, self.processes = gpm, buffered, processes
        self.unsupported, self.flaky = set(unsupported), set(flaky)
        self.buffered_period_s = buffered_period_s
        self._gpm_started = False
        self.calls = 0
        self.idle_mib = 1024.0  # device memory with no process on it
        self.per_process_mib = 512.0  # what each live process the sampler asked about holds
        self._pids: set[int] = set()

    def device_info(self) -> DeviceInfo:
        """A fake device, named so it cannot be mistaken for a real one."""
        return DeviceInfo("SIMULATED (fake NVML)", "GPU-00000000-fake-0000-0000-000000000000", 81559.0, "0.0-fake", "0.0", 0)

    def _wrap(self, group: str, fn: Callable[[], dict[str, float]]) -> Callable[[], dict[str, float]]:
        def read() -> dict[str, float]:
            self.calls += 1
            if group in self.unsupported:
                raise FakeNotSupported(f"fake: {group} not supported")
            if group in self.flaky:
                raise FakeFlaky(f"fake: {group} failed")
            return fn()

        return read

    @staticmethod
    def _wave(period: float = 2.0) -> float:
        return 0.5 + 0.5 * math.sin(2 * math.pi * time.time() / period)

    def poll_groups(self) -> dict[str, tuple[tuple[str, ...], Callable[[], dict[str, float]]]]:
        """Synthetic readers named like the real backend's groups."""
        w = self._wave
        groups = {
            "utilization": (("gpu_util", "mem_util"), lambda: {"gpu_util": round(60 + 30 * w()), "mem_util": round(20 + 10 * w())}),
            "memory": (("mem_used_mib", "mem_reserved_mib"),
                       lambda: {"mem_used_mib": self.memory_info_mib()["used"], "mem_reserved_mib": 400.0}),
            "power": (("power_w",), lambda: {"power_w": 150.0 + 200 * w()}),
            "sm_clock": (("sm_clock_mhz",), lambda: {"sm_clock_mhz": 1755.0}),
            "mem_clock": (("mem_clock_mhz",), lambda: {"mem_clock_mhz": 2619.0}),
            "temperature": (("temp_c",), lambda: {"temp_c": 45.0}),
            "throttle": (("throttle_reasons",), lambda: {"throttle_reasons": 0.0}),
        }
        return {k: (names, self._wrap(k, fn)) for k, (names, fn) in groups.items()}

    def slow_groups(self) -> dict[str, tuple[tuple[str, ...], Callable[[], dict[str, float]]]]:
        """Synthetic PCIe throughput."""
        groups = {
            "pcie_tx": (("pcie_tx_kib_s",), lambda: {"pcie_tx_kib_s": 1000.0 * self._wave()}),
            "pcie_rx": (("pcie_rx_kib_s",), lambda: {"pcie_rx_kib_s": 5000.0 * self._wave()}),
        }
        return {k: (names, self._wrap(k, fn)) for k, (names, fn) in groups.items()}

    def buffered_samples(self, since_us: int) -> list[tuple[int, str, float]]:
        """Synthetic buffered utilization samples every ``buffered_period_s`` since ``since_us``."""
        if not self.buffered:
            raise FakeNotSupported("fake: buffered samples not supported")
        now_us = int(time.time() * 1e6)
        step = int(self.buffered_period_s * 1e6)
        first = (since_us // step + 1) * step
        return [(ts, "gpu_util", 75.0) for ts in range(first, now_us + 1, step)]

    def gpm_support(self) -> tuple[bool, str]:
        """Configured GPM support."""
        return (True, "") if self.gpm else (False, "gpm: device does not support GPM (fake)")

    def gpm_reset(self) -> None:
        """Forget the baseline snapshot (like the real backend when a new sampler starts)."""
        self._gpm_started = False

    def gpm_read(self) -> dict[str, float]:
        """Synthetic GPM metrics ({} on the first call, like a first snapshot)."""
        if not self._gpm_started:
            self._gpm_started = True
            return {}
        w = self._wave()
        return {"sm_active": 50 + 40 * w, "sm_occupancy": 30 + 20 * w, "tensor_active": 10 * w, "dram_bw_util": 25 + 5 * w}

    def _live(self) -> set[int]:
        alive = set()
        for pid in self._pids:
            try:
                os.kill(pid, 0)
                alive.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        self._pids = alive
        return alive

    def memory_info_mib(self) -> dict[str, float]:
        """Idle memory plus ``per_process_mib`` for each live process the sampler has asked about."""
        return {"used": self.idle_mib + self.per_process_mib * len(self._live()), "total": 81559.0, "reserved": 400.0}

    def process_memory_mib(self, pids: list[int]) -> dict[int, float]:
        """Every asked-for live process uses a made-up ``per_process_mib`` (on the device even when the
        fake cannot attribute it, like NVML in a container)."""
        self._pids |= set(pids)
        if not self.processes:
            raise FakeNotSupported("fake: process list not supported")
        live = self._live()
        return {pid: self.per_process_mib for pid in pids if pid in live}

    def close(self) -> None:
        """Nothing to release."""
