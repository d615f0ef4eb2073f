"""What an NVML backend provides (real or fake): the :class:`Backend` protocol, device identity, unsupported metrics.

Below :mod:`gpupred.profile.nvml` (the real backend and the sampler) and :mod:`gpupred.profile.fake`
(simulated values for tests and ``--dry-run``), which both implement it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol


class MetricUnsupported(Exception):
    """A backend's way to say a metric is not available on this device."""


@dataclass
class DeviceInfo:
    """What NVML says about the device."""

    name: str
    uuid: str
    memory_total_mib: float
    driver_version: str
    cuda_version: str  # the driver's CUDA version (NVML); the child records torch's CUDA too
    index: int = 0


class Backend(Protocol):
    """The NVML layer the sampler needs."""

    name: str
    simulated: bool

    def device_info(self) -> DeviceInfo:
        """The device's identity (never raises; unknown fields are '')."""
        ...

    def poll_groups(self) -> dict[str, tuple[tuple[str, ...], Callable[[], dict[str, float]]]]:
        """Reader groups: group name -> (metric names, function returning {metric: value})."""
        ...

    def slow_groups(self) -> dict[str, tuple[tuple[str, ...], Callable[[], dict[str, float]]]]:
        """Like :meth:`poll_groups`, read every ``SLOW_EVERY`` ticks (slow calls such as PCIe)."""
        ...

    def buffered_samples(self, since_us: int) -> list[tuple[int, str, float]]:
        """NVML's buffered samples newer than ``since_us``: (epoch µs, metric, value); raises if unsupported."""
        ...

    def gpm_support(self) -> tuple[bool, str]:
        """Whether GPM metrics can be read, and why not."""
        ...

    def gpm_read(self) -> dict[str, float]:
        """GPM metrics since the previous call ({} on the first call); raises if unavailable."""
        ...

    def process_memory_mib(self, pids: list[int]) -> dict[int, float]:
        """GPU memory used per process id on this device (the pids are a hint for fakes)."""
        ...

    def close(self) -> None:
        """Release NVML resources."""
        ...
