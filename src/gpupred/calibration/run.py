"""``gpupred.calibrate()``: run the micro-benchmarks on the local GPU (or replay a recording) and write the file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpupred.calibration.bench import DEFAULT_SECONDS, Case, run_benchmarks


def calibrate(out: str | Path | None = None, seconds: float = DEFAULT_SECONDS, backend: Any = None,
              cases: list[Case] | None = None, progress: bool = True) -> Path:
    """Measure this machine's GPU (``backend`` default: torch on CUDA device 0) and write its calibration file to
    ``out`` (default: the per-user calibration folder, :func:`gpupred.config.calibration_dir`); return its path.

    Raises a one-line :class:`gpupred.errors.GpupredError` where there is no GPU, before measuring anything.
    """
    from gpupred.calibration.file import build_calibration, file_name, write_calibration
    from gpupred.errors import GpupredError

    if seconds <= 0:
        raise GpupredError(f"--seconds must be positive (got {seconds})")
    if backend is None:
        from gpupred.calibration.torch_backend import TorchBackend

        backend = TorchBackend()
    t0 = time.monotonic()
    try:
        if cases is None:  # a replay runs the cases it recorded; a real backend answers None (the default set)
            cases = backend.cases()
        results = run_benchmarks(backend, seconds, cases, progress)
        identity = backend.identity()  # after the memory benchmark: reading device properties starts CUDA
    finally:
        backend.close()
    if not backend.replayed_from:  # the GPU host's single-core speed (a replay keeps its recording's host)
        from gpupred.loader.speed import single_core_score

        identity["host"] = {**identity["host"], "single_core_score": single_core_score()["score"]}
    data = build_calibration(identity, results, backend.name, backend.replayed_from, seconds, time.monotonic() - t0)
    if out is None:
        from gpupred import config

        out = config.calibration_dir() / file_name(data)
    return write_calibration(data, Path(out))
