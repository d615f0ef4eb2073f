"""What a micro-benchmark backend provides: the machine's identity and one measurement per (benchmark, parameters).

Two backends implement :class:`Backend`: :class:`gpupred.calibration.torch_backend.TorchBackend` (torch CUDA events
and pynvml on the local GPU) and :class:`gpupred.calibration.replay.FakeBackend` (replays a recorded calibration
file's measurements). The benchmarks (:mod:`gpupred.calibration.bench`) say what to measure; a backend only measures.
"""

from __future__ import annotations

import os
import platform
from typing import Any, Protocol

from gpupred.loader.hostinfo import cpu_model


class ReplayedFailure(Exception):
    """A recorded case that failed when it was measured, failing again on replay with the recorded message."""


class Backend(Protocol):
    """One GPU's measurements, by benchmark name and parameters (see ``gpupred.calibration.bench.BENCHES``)."""

    name: str  # "torch-cuda", or "replay:<file>" for a recording
    replayed_from: str  # the recording a fake replays ('' for a real backend)

    def identity(self) -> dict[str, dict[str, Any]]:
        """``{"gpu": {...}, "software": {...}, "host": {...}}`` (the fields of ``gpupred.calibration.file.SCHEMA``)."""
        ...

    def measure(self, bench: str, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """The values of one benchmark case, spending about ``seconds`` on it."""
        ...

    def cases(self) -> list[Any] | None:
        """The cases a recording holds, in the order they were measured (a replaying backend runs those); None where
        any case can be measured now (the default set, :func:`gpupred.calibration.bench.default_cases`, is run)."""
        ...

    def recorded_wall_s(self, bench: str, params: dict[str, Any]) -> float | None:
        """How long the case took when it was recorded (a replaying backend); None where the case is measured now."""
        ...

    def close(self) -> None:
        """Release the device and NVML."""
        ...


def host_identity() -> dict[str, Any]:
    """The host fields of a calibration file: CPU model, logical cores, OS."""
    return {"cpu": cpu_model(), "cores": int(os.cpu_count() or 0), "platform": platform.platform(terse=True)}
