"""A backend that replays recorded micro-benchmark outputs (a calibration file's ``results``), for tests and for
re-deriving an old recording with today's derivation (``gpupred calibrate --replay FILE``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from gpupred.calibration.benchbackend import ReplayedFailure
from gpupred.calibration.bench import case_key
from gpupred.errors import GpupredError


class FakeBackend:
    """Replays a recording: ``{"gpu", "software", "host", "results": [{"bench", "params", "values"}, ...]}``."""

    def __init__(self, recording: dict[str, Any], label: str = "recording") -> None:
        self.name = f"replay:{label}"
        self.replayed_from = label
        self.recording = copy.deepcopy(recording)
        self._values: dict[Any, dict[str, float]] = {}
        self._errors: dict[Any, str] = {}
        self._wall_s: dict[Any, float] = {}
        for item in self.recording.get("results", []):
            key = case_key(item["bench"], item["params"])
            self._values[key] = dict(item["values"])
            if "wall_s" in item:
                self._wall_s[key] = float(item["wall_s"])
            if item.get("error"):
                self._errors[key] = str(item["error"])
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @classmethod
    def from_file(cls, path: str | Path) -> "FakeBackend":
        """Replay a calibration file (checked like any other: schema and checksum)."""
        from gpupred.calibration.file import read_calibration

        return cls(read_calibration(path).data, str(path))

    def cases(self) -> list[Any]:
        """The recorded cases, in the order they were measured (what a replay runs)."""
        from gpupred.calibration.bench import Case

        return [Case(item["bench"], dict(item["params"])) for item in self.recording.get("results", [])]

    def identity(self) -> dict[str, dict[str, Any]]:
        """The recording's GPU, software and host."""
        return {k: dict(self.recording[k]) for k in ("gpu", "software", "host")}

    def measure(self, bench: str, params: dict[str, Any], seconds: float) -> dict[str, float]:
        """The recorded values of this case; an error naming the case when the recording lacks it."""
        self.calls.append((bench, dict(params)))
        key = case_key(bench, params)
        if key not in self._values:
            raise GpupredError(f"{self.replayed_from}: no recorded result for {bench} {params}; record it again with "
                               "`gpupred calibrate` on the GPU, or replay with the cases it has")
        if key in self._errors:  # replayed as it happened
            raise ReplayedFailure(self._errors[key])
        return dict(self._values[key])

    def recorded_wall_s(self, bench: str, params: dict[str, Any]) -> float | None:
        """How long the case took when it was recorded (None where the recording does not say)."""
        return self._wall_s.get(case_key(bench, params))

    def close(self) -> None:
        """Nothing to release."""
