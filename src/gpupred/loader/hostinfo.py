"""Who measured: the host's CPU and cores, and the versions of the software that ran the pipeline."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

SOFTWARE = {"numpy": "numpy", "torch": "torch", "torchvision": "torchvision", "PIL": "pillow",
            "transformers": "transformers"}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what :mod:`platform` says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def physical_cores() -> int | None:
    """Distinct (package, core) pairs in ``/proc/cpuinfo``; None where it does not say."""
    pairs: set[tuple[str, str]] = set()
    package = core = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key == "physical id":
                    package = value.strip()
                elif key == "core id":
                    core = value.strip()
                    pairs.add((package, core))
    except OSError:
        return None
    return len(pairs) or None


def affinity_cores() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; all logical CPUs where it is missing)."""
    getter = getattr(os, "sched_getaffinity", None)
    return len(getter(0)) if getter is not None else int(os.cpu_count() or 1)


def host_identity() -> dict[str, Any]:
    """The host fields of a host profile: CPU model, logical, physical and affinity cores, platform, load average."""
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu_model(), "logical_cores": int(os.cpu_count() or 1), "physical_cores": physical_cores(),
            "affinity_cores": affinity_cores(), "platform": platform.platform(terse=True),
            "load_average": load}  # 1, 5 and 15 min as the run ended: other work sharing the CPUs


def software_versions(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Python's, gpupred's and the pipeline libraries' versions, and those of ``extra`` (name: distribution) ("" where
    one is not installed)."""
    from importlib import metadata  # here, not at the top: 20 ms that every command's start would pay

    from gpupred.version import __version__

    found = {"python": platform.python_version(), "gpupred": __version__}
    for name, dist in {**SOFTWARE, **(extra or {})}.items():
        try:
            found[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[name] = ""
    return found


def now_utc() -> str:
    """The time now, ISO 8601 UTC to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
