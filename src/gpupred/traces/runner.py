"""Profile a few training steps of catalog specs with torch.profiler and keep their per-step summaries (issue 38).

For each spec (sequentially, in this process): build it as the sweeps do (``gpupred.workloads.builders``), warm it up
(cuDNN autotuning, the caching allocator's growth), then profile ``steps`` steps, each synchronized as the sweeps'
``sync=step`` runs are, and write :func:`gpupred.traces.tracetable.summarize_trace`'s rows to
``<sweep>/traces/<workload_id>.parquet``. The raw trace is a temporary file, deleted once summarized. A spec already
summarized is skipped (the run resumes); one that runs out of memory or fails is written as one row with its status.
"""

from __future__ import annotations

import gc
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupred.errors import GpupredError

DEFAULT_STEPS = 5
DEFAULT_WARMUP = 10


@dataclass
class TraceSummary:
    """What a trace run did."""

    out: Path
    planned: int = 0
    done: int = 0
    skipped: int = 0  # already summarized
    statuses: dict[str, int] = field(default_factory=dict)
    stopped: str = ""

    def line(self) -> str:
        """One line for the terminal."""
        left = self.planned - self.done - self.skipped
        return (f"{self.out}: {self.done} traced now, {self.skipped} already there, {left} left of {self.planned} "
                f"({', '.join(f'{k} {v}' for k, v in sorted(self.statuses.items())) or 'nothing run'})"
                + (f"; stopped: {self.stopped}" if self.stopped else ""))


def identity(torch: Any, device: str) -> dict[str, str]:
    """The GPU, driver and software every trace row records."""
    from gpupred.loader.hostinfo import cpu_model
    from gpupred.version import __version__

    out = {"gpu_name": "cpu", "gpu_uuid": "", "driver_version": "", "cuda_version": str(torch.version.cuda or ""),
           "torch_version": torch.__version__, "gpupred_version": __version__, "host_cpu": cpu_model()}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        out.update(gpu_name=props.name, gpu_uuid=str(getattr(props, "uuid", "")))
        try:
            from gpupred.profile.nvml import PynvmlBackend, visible_device

            nvml = PynvmlBackend(visible_device())
            info = nvml.device_info()
            nvml.close()
            out.update(gpu_name=info.name or props.name, gpu_uuid=info.uuid or out["gpu_uuid"],
                       driver_version=info.driver_version)
        except GpupredError:
            pass
    return out


def profile_steps(torch: Any, step: Any, device: str, steps: int, warmup: int, trace_file: Path) -> None:
    """Warm ``step`` up, then profile ``steps`` synchronized steps into a Chrome trace at ``trace_file``."""
    from torch.profiler import ProfilerActivity, profile, schedule

    cuda = device.startswith("cuda")

    def one() -> None:
        step()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(warmup):
        one()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps), acc_events=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(trace_file))) as prof:
        for _ in range(steps + 1):
            one()
            prof.step()


def trace_spec(spec: Any, device: str, steps: int, warmup: int) -> tuple[str, str, list[dict[str, Any]]]:
    """(status, message, step rows) of one spec: ``ok`` with one row per profiled step, else ``oom``/``error``."""
    import torch

    from gpupred.profile.harness import failure_status
    from gpupred.traces.tracetable import summarize_trace
    from gpupred.workloads.builders import build

    try:
        if device.startswith("cuda"):
            torch.backends.cudnn.benchmark = True  # as the sweeps' children run
        step = build(spec, device).make_train_step(device, host_batches=False)
        with tempfile.TemporaryDirectory(prefix="gpupred-trace-") as tmp:
            trace_file = Path(tmp) / "trace.json"
            profile_steps(torch, step, device, steps, warmup, trace_file)
            rows = summarize_trace(trace_file)
        return "ok", "", rows
    except Exception as err:  # a spec's failure is its row, not the run's end
        text = " ".join(str(err).split())
        return failure_status(type(err).__name__, text), f"{type(err).__name__}: {text}"[:500], []
    finally:
        step = None
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def run_traces(specs: list[Any], out: Path, steps: int = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP,
               device: str = "cuda", max_minutes: float | None = None, progress: bool = True) -> TraceSummary:
    """Trace every spec not yet summarized under ``out`` (a sweep folder); stop cleanly before ``max_minutes``."""
    import torch

    from gpupred.reports import progress_bar
    from gpupred.traces.tracetable import trace_path, write_traces

    if steps < 1 or warmup < 0:
        raise GpupredError(f"--steps must be at least 1 and --warmup at least 0 (got {steps}, {warmup})")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GpupredError(f"torch {torch.__version__} sees no CUDA device: kernel traces need an NVIDIA GPU")
    summary = TraceSummary(Path(out), planned=len(specs))
    todo = [s for s in specs if not trace_path(out, s.id).exists()]
    summary.skipped = len(specs) - len(todo)
    who = identity(torch, device)
    deadline = time.monotonic() + 60 * max_minutes if max_minutes else None
    for spec in progress_bar(iterable=todo, desc="traces", unit="spec", disable=not progress):
        if deadline is not None and time.monotonic() > deadline:
            summary.stopped = f"--max-minutes {max_minutes:g} reached"
            break
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status, message, rows = trace_spec(spec, device, steps, warmup)
        base = {"workload_id": spec.id, "family": spec.family, "spec_json": spec.to_json(), "sweep_id": Path(out).name,
                "status": status, "message": message, "warmup_steps": warmup, "started_at": started, **who}
        write_traces(out, spec.id, [{**base, **r} for r in rows] if rows else [{**base, **failed_row()}])
        summary.done += 1
        summary.statuses[status] = summary.statuses.get(status, 0) + 1
    return summary


def failed_row() -> dict[str, Any]:
    """The step columns of a spec that could not be traced: step -1, NaN times, no kernels."""
    from gpupred.traces.tracetable import STEP_COLUMNS

    nan = float("nan")
    return {"step": -1, **{name: (0 if str(t) == "int32" else nan) for name, t in STEP_COLUMNS}}
