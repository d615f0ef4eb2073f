"""The calibration file: its schema, writer and reader (the reader checks schema and checksum before anything is used).

One JSON object per calibration run (``gpupred calibrate``)::

    schema, schema_version      "gpupred-calibration", SCHEMA_VERSION
    created_at                  ISO 8601 UTC
    backend, replayed_from      "torch-cuda", or "replay:<file>" and the recording it replayed
    seconds_budget, wall_s      the measuring budget asked for, and what the whole run took
    gpu                         NVML name and UUID, SM count, memory, max SM and memory clocks, power limit, compute capability
    software                    driver, the driver's CUDA, torch's CUDA runtime, cuDNN, torch, Python, gpupred
    host                        CPU model, logical cores, OS, and the single-core speed score of
                                gpupred.loader.speed (``single_core_score``; files written before it lack it)
    results                     every micro-benchmark case: bench, params, values, wall_s, and error where it failed
                                (gpupred.calibration.bench)
    derived                     the constants as the writing gpupred derived them (gpupred.calibration.derive), the
                                peaks they are fractions of, what each constant's measurement is, notes
    sha256                      hex sha256 of the canonical JSON (sorted keys, compact) of everything else

A file that is not JSON, does not follow ``SCHEMA``, or whose checksum does not match its content (hand-edited,
truncated) is refused in one line naming it. Predictions re-derive the constants from ``results`` with the installed
gpupred, so an old recording benefits from a better derivation; ``derived`` records what its writer computed.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupred.errors import GpupredError
from gpupred.files import canonical_sha256, check_sealed, read_sealed

SCHEMA_NAME = "gpupred-calibration"
SCHEMA_VERSION = 1
_NUMBER = {"type": ["number", "null"]}
_TEXT = {"type": "string"}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema", "schema_version", "created_at", "backend", "replayed_from", "seconds_budget", "wall_s",
                 "gpu", "software", "host", "results", "derived", "sha256"],
    "properties": {
        "schema": {"const": SCHEMA_NAME},
        "schema_version": {"const": SCHEMA_VERSION},
        "created_at": _TEXT, "backend": _TEXT, "replayed_from": _TEXT,
        "seconds_budget": {"type": "number", "exclusiveMinimum": 0}, "wall_s": {"type": "number", "minimum": 0},
        "gpu": {"type": "object", "required": ["name", "uuid", "sm_count", "memory_total_mib", "sm_clock_max_mhz",
                                               "mem_clock_max_mhz", "power_limit_w", "compute_capability"],
                "properties": {"name": {"type": "string", "minLength": 1}, "uuid": _TEXT, "sm_count": {"type": "integer"},
                               "memory_total_mib": _NUMBER, "sm_clock_max_mhz": _NUMBER, "mem_clock_max_mhz": _NUMBER,
                               "power_limit_w": _NUMBER, "compute_capability": _TEXT}},
        "software": {"type": "object", "required": ["driver", "cuda_driver", "cuda_runtime", "cudnn", "torch", "python",
                                                    "gpupred"],
                     "additionalProperties": _TEXT},
        "host": {"type": "object", "required": ["cpu", "cores", "platform"],
                 "properties": {"cpu": _TEXT, "cores": {"type": "integer"}, "platform": _TEXT,
                                "single_core_score": {"type": "number", "exclusiveMinimum": 0}}},
        "results": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["bench", "params", "values"],
            "properties": {"bench": _TEXT, "params": {"type": "object"},
                           "values": {"type": "object", "additionalProperties": _NUMBER}, "wall_s": {"type": "number"},
                           "error": _TEXT}}},
        "derived": {"type": "object", "required": ["step", "memory", "peaks", "measured_by", "notes"],
                    "properties": {"step": {"type": "object", "additionalProperties": {"type": "number"}},
                                   "memory": {"type": "object", "additionalProperties": {"type": "number"}},
                                   "peaks": {"type": "object"}, "measured_by": {"type": "object"},
                                   "notes": {"type": "array", "items": _TEXT}}},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
}
_DERIVED: dict[str, Any] = {}  # checksum -> Derived (a checked file's content never changes under its checksum)
REMEDY = "run `gpupred calibrate` again on that GPU (a calibration file is never edited by hand)"


def _json_safe(value: Any) -> Any:
    """NaN and infinities as null (JSON has neither), recursively."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def build_calibration(identity: dict[str, dict[str, Any]], results: list[dict[str, Any]], backend: str,
                      replayed_from: str, seconds: float, wall_s: float) -> dict[str, Any]:
    """The whole file's content (checksummed) from a run's identity and results."""
    from dataclasses import asdict

    from gpupred.calibration.derive import MEASURED_BY, derive

    derived = derive(identity["gpu"], results)
    data = _json_safe({
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "backend": backend,
        "replayed_from": replayed_from, "seconds_budget": float(seconds), "wall_s": round(float(wall_s), 2),
        **{k: identity[k] for k in ("gpu", "software", "host")}, "results": results,
        "derived": {**asdict(derived), "measured_by": MEASURED_BY},
    })
    data["sha256"] = canonical_sha256(data)
    return data


def write_calibration(data: dict[str, Any], path: Path) -> Path:
    """Write a calibration atomically (checked first: a file this writes is one the reader accepts)."""
    from gpupred.files import atomic_write_bytes

    validate(data, str(path))
    atomic_write_bytes(Path(path), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
    return Path(path)


def validate(data: Any, shown: str) -> None:
    """Raise a one-line GpupredError naming ``shown`` unless ``data`` follows ``SCHEMA`` and its checksum matches."""
    check_sealed(data, shown, SCHEMA, "calibration", REMEDY)


@dataclass(frozen=True)
class Calibration:
    """A checked calibration file's content, and where it was read from."""

    data: dict[str, Any]
    path: Path | None = None

    @property
    def gpu_name(self) -> str:
        """The GPU as NVML names it."""
        return str(self.data["gpu"]["name"])

    @property
    def single_core_score(self) -> float | None:
        """The GPU host's single-core speed (:mod:`gpupred.loader.speed`; None in files from before it was recorded)."""
        value = self.data["host"].get("single_core_score")
        return None if value is None else float(value)

    @property
    def shown(self) -> str:
        """How messages name this calibration."""
        return str(self.path) if self.path is not None else f"calibration of {self.gpu_name}"

    def derived(self) -> Any:
        """The constants, re-derived from the raw results by this gpupred (:func:`gpupred.calibration.derive.derive`;
        once per content, by its checksum)."""
        from gpupred.calibration.derive import derive

        key = str(self.data["sha256"])
        if key not in _DERIVED:
            _DERIVED[key] = derive(self.data["gpu"], self.data["results"])
        return _DERIVED[key]

    def gpu_spec(self) -> Any:
        """The GPU's specs: the hardware table's, or (a GPU outside it) its measured peaks."""
        from gpupred.calibration.derive import gpu_of

        return gpu_of(self.data["gpu"], self.data["results"])[0]

    def in_table(self) -> bool:
        """Whether the GPU is in gpupred's hardware table (else its measured peaks stand in)."""
        from gpupred.hardware import gpu_spec

        try:
            gpu_spec(self.gpu_name)
        except GpupredError:
            return False
        return True


def read_calibration(path: str | Path) -> Calibration:
    """A calibration file, checked (JSON, schema, checksum); a one-line GpupredError naming it otherwise."""
    path = Path(path)
    missing = f"no calibration file there; `gpupred calibrate --out {path}` writes one on the GPU"
    return Calibration(read_sealed(path, SCHEMA, "calibration", REMEDY, missing), path)


def file_name(data: dict[str, Any]) -> str:
    """The cache file name of a calibration: the GPU's name and the start of its UUID, e.g. ``h100-sxm-1a2b3c4d.json``."""
    from gpupred.hardware import gpu_spec

    try:
        name = gpu_spec(data["gpu"]["name"]).name
    except GpupredError:
        name = data["gpu"]["name"]
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
    uuid = re.sub(r"[^0-9a-f]", "", str(data["gpu"].get("uuid", "")).lower().removeprefix("gpu-"))[:8]
    return f"{slug}-{uuid or 'nouuid'}.json"
