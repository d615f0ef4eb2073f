"""The profiler: NVML sampling, solo and co-located training runs, resumable sweeps.

Importing this package is light (no torch, no pandas); torch is imported only by the child processes
that run the training loops. The raw-data contract lives in :mod:`gpupred.profile.schema`.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "METRICS": "gpupred.profile.schema", "RUN_SCHEMA": "gpupred.profile.schema", "SAMPLE_SCHEMA": "gpupred.profile.schema",
    "read_runs": "gpupred.profile.schema", "read_samples": "gpupred.profile.schema",
    "run_sweep": "gpupred.profile.sweep", "profile_one": "gpupred.profile.sweep",
    "run_unit": "gpupred.profile.harness", "HarnessConfig": "gpupred.profile.harness",
    "probe": "gpupred.profile.nvml", "Sampler": "gpupred.profile.nvml",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """Import public names on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpupred.profile' has no attribute {name!r}")
