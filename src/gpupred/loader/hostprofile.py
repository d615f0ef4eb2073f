"""The host profile: what an input pipeline costs on one host's CPU, its schema, writer and reader (json, numpy and
jsonschema only: no torch).

Written by ``gpupred loader bench`` (the standard kinds, ``kinds``) or ``gpupred loader measure`` (a user's own
loader, ``measured``). One JSON object::

    schema, schema_version      "gpupred-host-profile", SCHEMA_VERSION
    created_at, source, wall_s  ISO 8601 UTC; "bench" or "measure"; what the whole run took
    seconds_budget              the measuring budget asked for (bench), else null
    host                        CPU model, logical and physical cores, this process's affinity cores, platform, and
                                the load average as the run ended (other work sharing the CPUs)
    software                    python, numpy, torch, torchvision, PIL, transformers, gpupred versions
    single_core                 gpupred.loader.speed's score (1.0 = the reference host) and its readings
    torch_threads               torch's intra-op threads while measuring (1, as in a DataLoader worker)
    kinds                       {kind: {variant: {scale_unit, params, points: [{scale, per_sample_s, ...}]}}}
    ipc                         the main process's cost of receiving a batch from one worker: per_batch_s + per_byte_s
                                x bytes, and the points fitted; null where not measured
    copy                        host memcpy into a fresh tensor: gbs, kind ("pinned" where CUDA pinned it, else
                                "pageable"); null where not measured
    measured                    a user's loader at each worker count (gpupred.loader.measure); null for a bench
    sha256                      hex sha256 of the canonical JSON (sorted keys, compact) of everything else

Scale of a point, by kind (``SCALE_UNITS``): source pixels (width x height) for ``image-files``; seconds of audio for
``audio-logmel``; tokens per sample (the padded ``seq_len``) for ``text-tokens``; bytes per sample file for
``array-files``; 1 for ``host-tensors``. ``HostProfile.per_sample_s`` interpolates log-log between a variant's points
and extends the end segments' slope, kept within [0, 1], outside them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupred.errors import GpupredError
from gpupred.files import FileCache, canonical_sha256, check_sealed, read_sealed

SCHEMA_NAME = "gpupred-host-profile"
SCHEMA_VERSION = 1
KINDS = ("host-tensors", "image-files", "text-tokens", "audio-logmel", "array-files")
SCALE_UNITS = {"host-tensors": "sample (always 1)", "image-files": "source pixels (width x height)",
               "text-tokens": "tokens per sample (seq_len)", "audio-logmel": "seconds of audio per sample",
               "array-files": "bytes per sample file"}
DEFAULT_VARIANT = {"image-files": "jpeg-v1"}  # format-transforms; every other kind has the one variant "default"
REMEDY = "run `gpupred loader bench` (or `loader measure`) again (a host profile is never edited by hand)"
_NUM = {"type": "number"}
_OPT_NUM = {"type": ["number", "null"]}
_POINT = {"type": "object", "required": ["scale", "per_sample_s"],
          "properties": {"scale": {"type": "number", "exclusiveMinimum": 0},
                         "per_sample_s": {"type": "number", "exclusiveMinimum": 0}}}
_VARIANT = {"type": "object", "required": ["scale_unit", "params", "points"],
            "properties": {"scale_unit": {"type": "string"}, "params": {"type": "object"},
                           "points": {"type": "array", "minItems": 1, "items": _POINT}}}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema", "schema_version", "created_at", "source", "wall_s", "seconds_budget", "host", "software",
                 "single_core", "torch_threads", "kinds", "ipc", "copy", "measured", "sha256"],
    "properties": {
        "schema": {"const": SCHEMA_NAME}, "schema_version": {"const": SCHEMA_VERSION},
        "created_at": {"type": "string"}, "source": {"enum": ["bench", "measure"]},
        "wall_s": {"type": "number", "minimum": 0}, "seconds_budget": _OPT_NUM,
        "host": {"type": "object", "required": ["cpu", "logical_cores", "physical_cores", "affinity_cores", "platform"],
                 "properties": {"cpu": {"type": "string"}, "logical_cores": {"type": "integer", "minimum": 1},
                                "physical_cores": {"type": ["integer", "null"]},
                                "affinity_cores": {"type": "integer", "minimum": 1}, "platform": {"type": "string"}}},
        "software": {"type": "object", "additionalProperties": {"type": "string"}},
        "single_core": {"type": "object", "required": ["score", "python_s", "numpy_s", "workload_version"],
                        "properties": {"score": {"type": "number", "exclusiveMinimum": 0}, "python_s": _NUM,
                                       "numpy_s": _NUM, "workload_version": {"type": "integer"}}},
        "torch_threads": {"type": "integer", "minimum": 1},
        "kinds": {"type": "object", "propertyNames": {"enum": list(KINDS)},
                  "additionalProperties": {"type": "object", "minProperties": 1, "additionalProperties": _VARIANT}},
        "ipc": {"type": ["object", "null"], "required": ["per_batch_s", "per_byte_s", "points"],
                "properties": {"per_batch_s": {"type": "number", "minimum": 0},
                               "per_byte_s": {"type": "number", "minimum": 0}, "points": {"type": "array"}}},
        "copy": {"type": ["object", "null"], "required": ["gbs", "kind", "bytes"],
                 "properties": {"gbs": {"type": "number", "exclusiveMinimum": 0},
                                "kind": {"enum": ["pinned", "pageable"]}, "bytes": {"type": "integer"}}},
        "measured": {"type": ["object", "null"],
                     "required": ["factory", "batch_size", "batch_bytes", "workers", "single_worker_per_sample_s"],
                     "properties": {"workers": {"type": "object", "minProperties": 1,
                                                "additionalProperties": {
                                                    "type": "object", "required": ["per_batch_s", "per_sample_s"]}},
                                    "single_worker_per_sample_s": {"type": "number", "exclusiveMinimum": 0}}},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
}


def validate(data: Any, shown: str) -> None:
    """Raise a one-line GpupredError naming ``shown`` unless ``data`` follows ``SCHEMA`` and its checksum matches."""
    check_sealed(data, shown, SCHEMA, "host profile", REMEDY)


def seal(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``sha256`` set (the last step before writing)."""
    data = {k: v for k, v in data.items() if k != "sha256"}
    data["sha256"] = canonical_sha256(data)
    return data


def write_host_profile(data: dict[str, Any], path: str | Path) -> Path:
    """Seal and write a host profile atomically (checked first: a file this writes is one the reader accepts)."""
    from gpupred.files import atomic_write_bytes

    data = seal(data)
    validate(data, str(path))
    atomic_write_bytes(Path(path), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
    return Path(path)


def loglog(points: list[tuple[float, float]], scale: float) -> float:
    """``y`` at ``scale`` on the log-log polyline through ``points`` (scale, y); outside them the end segment's slope,
    kept within [0, 1] (a cost neither falls with its scale nor outgrows it), extends it; one point: a constant."""
    import numpy as np

    pts = sorted(points)
    xs, ys = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    x = math.log(scale)
    if len(pts) == 1:
        return float(math.exp(ys[0]))
    if xs[0] <= x <= xs[-1]:
        return float(math.exp(np.interp(x, xs, ys)))
    i = 0 if x < xs[0] else len(xs) - 2
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] > xs[i] else 0.0
    slope = min(1.0, max(0.0, slope))  # outside the points a cost neither falls nor grows faster than the scale
    end = 0 if x < xs[0] else len(xs) - 1
    return float(math.exp(ys[end] + slope * (x - xs[end])))


@dataclass(frozen=True)
class HostProfile:
    """A checked host profile, and where it was read from."""

    data: dict[str, Any]
    path: Path | None = None

    @property
    def shown(self) -> str:
        """How messages name this profile."""
        return str(self.path) if self.path is not None else f"host profile of {self.cpu}"

    @property
    def cpu(self) -> str:
        """The CPU model."""
        return str(self.data["host"]["cpu"])

    @property
    def cores(self) -> int:
        """The CPUs this host gave the measuring process (``os.sched_getaffinity``)."""
        return int(self.data["host"]["affinity_cores"])

    @property
    def logical_cores(self) -> int:
        """The host's logical CPUs."""
        return int(self.data["host"]["logical_cores"])

    @property
    def physical_cores(self) -> int | None:
        """The host's physical cores (None where unknown)."""
        value = self.data["host"]["physical_cores"]
        return None if value is None else int(value)

    @property
    def single_core_score(self) -> float:
        """The host's single-core speed, 1.0 = the reference host (:mod:`gpupred.loader.speed`)."""
        return float(self.data["single_core"]["score"])

    @property
    def ipc_per_batch_s(self) -> float | None:
        """The main process's fixed cost of receiving one batch from a worker (None where not measured)."""
        return None if self.data["ipc"] is None else float(self.data["ipc"]["per_batch_s"])

    @property
    def ipc_per_byte_s(self) -> float | None:
        """The main process's cost per byte of a batch received from a worker (None where not measured)."""
        return None if self.data["ipc"] is None else float(self.data["ipc"]["per_byte_s"])

    @property
    def copy_gbs(self) -> float | None:
        """Host memcpy bandwidth into a fresh tensor, GB/s (pinned where ``copy_kind`` says so)."""
        return None if self.data["copy"] is None else float(self.data["copy"]["gbs"])

    @property
    def copy_kind(self) -> str | None:
        """``"pinned"`` (measured with CUDA's pinned memory) or ``"pageable"`` (a plain copy)."""
        return None if self.data["copy"] is None else str(self.data["copy"]["kind"])

    @property
    def measured(self) -> dict[str, Any] | None:
        """A user's loader as ``gpupred loader measure`` timed it (None for a bench)."""
        return self.data["measured"]

    def variants(self, kind: str) -> list[str]:
        """The variants measured of a standard kind (``image-files``: format-transforms, e.g. ``jpeg-v2``)."""
        return sorted(self.data["kinds"].get(kind, {}))

    def points(self, kind: str, variant: str | None = None) -> list[tuple[float, float]]:
        """The measured (scale, per-sample seconds) points of a kind's variant (its default variant if None)."""
        variant = variant or DEFAULT_VARIANT.get(kind, "default")
        entry = self.data["kinds"].get(kind, {}).get(variant)
        if entry is None:
            have = ", ".join(f"{k}/{v}" for k in self.data["kinds"] for v in self.data["kinds"][k]) or "none"
            raise GpupredError(f"{self.shown}: no measurement of loader kind {kind!r} variant {variant!r} (it has "
                               f"{have}); {REMEDY}")
        return [(float(p["scale"]), float(p["per_sample_s"])) for p in entry["points"]]

    def per_sample_s(self, kind: str, scale: float = 1.0, variant: str | None = None,
                     single_core_score: float | None = None) -> float:
        """Seconds one worker core spends per sample of ``kind`` at ``scale`` (``SCALE_UNITS``), on this host or, given
        a target host's ``single_core_score``, moved there by the speed ratio; ``kind="measured"``: a user's loader."""
        if scale <= 0 or not math.isfinite(scale):
            raise GpupredError(f"{self.shown}: scale must be a positive number for loader kind {kind!r} (got {scale})")
        if kind == "measured":
            if self.measured is None:
                raise GpupredError(f"{self.shown}: holds no measured loader; `gpupred loader measure` writes one")
            seconds = float(self.measured["single_worker_per_sample_s"])
        else:
            seconds = loglog(self.points(kind, variant), scale)
        if single_core_score is not None:
            seconds *= self.single_core_score / float(single_core_score)
        return seconds


_READ: FileCache[HostProfile] = FileCache()  # the profiles as read and checked, per unchanged version of a file


def read_host_profile(path: str | Path) -> HostProfile:
    """A host profile, checked (JSON, schema, checksum); a one-line GpupredError naming it otherwise. A file read
    before and unchanged since (same path, modification time and size) is not read and checked again: every job fed by
    a pipeline asks for its profile."""
    path = Path(path)
    missing = f"no host profile there; `gpupred loader bench --out {path}` writes one"

    def parse(file: Path) -> HostProfile:
        return HostProfile(read_sealed(file, SCHEMA, "host profile", REMEDY, missing), path)

    return _READ.read(path, parse) if path.is_file() else parse(path)  # no file: read_sealed's one-line refusal


def default_host_profile() -> HostProfile:
    """The reference host profile committed with gpupred (``gpupred.config.HOST_PROFILE``)."""
    from gpupred import config

    return read_host_profile(config.HOST_PROFILE)


def measured_gpu_host_scores(raw_root: str | Path) -> dict[str, float]:
    """Per GPU kind measured under ``raw_root`` (data/raw: one folder per kind), the geometric mean of the single-core
    scores of the host profiles recorded beside its sweeps (``<kind>/<sweep>/host-profile-*.json``)."""
    per_kind: dict[str, list[float]] = {}
    for path in sorted(Path(raw_root).glob("*/*/host-profile-*.json")):
        per_kind.setdefault(path.parent.parent.name, []).append(math.log(read_host_profile(path).single_core_score))
    return {kind: math.exp(sum(v) / len(v)) for kind, v in per_kind.items()}


def measured_gpu_host_score(raw_root: str | Path) -> float:
    """The geometric mean over GPU kinds of :func:`measured_gpu_host_scores` (each kind's own hosts averaged first):
    what :data:`gpupred.loader.speed.GPU_HOST_SCORE` holds. NaN where none is."""
    scores = measured_gpu_host_scores(raw_root)
    if not scores:
        return float("nan")
    return math.exp(sum(math.log(v) for v in scores.values()) / len(scores))
