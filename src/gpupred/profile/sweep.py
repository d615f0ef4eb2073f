"""Sweeps: run a plan's units one after another (or over a Ray cluster), resumably, within a time budget.

Each finished unit is written atomically before the next starts; a unit cut short by the sweep's own
time limit (or Ctrl-C) is not written and runs again on resume. Units already on disk are skipped.
"""

from __future__ import annotations

import math
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.files import project_path
from gpupred.profile import store
from gpupred.profile.harness import (
    ContextMeasurement,
    HarnessConfig,
    Launcher,
    UnitInterrupted,
    UnitResult,
    estimate_unit_s,
    measure_cuda_context,
    run_unit,
)
from gpupred.profile.nvml import open_backend, require_gpu
from gpupred.profile.units import Unit, check_sync, load_plan, setup_options_json
from gpupred.setups import pipeline_json

# settings that must match when a sweep folder is resumed (they change what is measured)
_PINNED = ("window_s", "min_iters", "max_window_s", "warmup_min_s", "warmup_min_iters", "warmup_max_s",
           "host_batches", "device", "interval_ms", "margin_s", "sync")


@dataclass
class SweepSummary:
    """What a sweep call did."""

    out: Path
    planned: int
    already_done: int
    done_now: int = 0
    statuses: Counter = field(default_factory=Counter)
    stopped: str = ""  # why it stopped before the plan's end ("" when the plan is complete)
    remaining: int = 0

    def line(self) -> str:
        """One line for the terminal."""
        st = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())) or "none"
        tail = f"; stopped: {self.stopped}; {self.remaining} units left (run the same command to resume)" if self.stopped else ""
        return (f"{self.out}: {self.done_now} units run now ({st}), {self.already_done + self.done_now}/{self.planned} "
                f"finished{tail}")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def software() -> dict[str, str]:
    """Versions that shape a measurement (read without importing torch)."""
    from gpupred.version import __version__

    return {"python": platform.python_version(), "gpupred": __version__, "torch": _version("torch"),
            "torchvision": _version("torchvision"), "nvidia-ml-py": _version("nvidia-ml-py"), "host": platform.node()}


def _under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def check_out(out: Path, dry_run: bool) -> None:
    """Refuse a dry run into data/raw (simulated output must never sit with measurements) and vice versa."""
    parts = out.resolve().parts
    in_raw = _under(out, config.RAW) or any(parts[i:i + 2] == ("data", "raw") for i in range(len(parts) - 1))
    if dry_run and in_raw:
        raise GpupredError(f"--dry-run output cannot go under data/raw ({out}); use {config.DRYRUN}/... (simulated data is never data)")
    if not dry_run and (_under(out, config.DRYRUN) or any(parts[i:i + 2] == ("data", "dryrun") for i in range(len(parts) - 1))):
        raise GpupredError(f"{out} is a dry-run folder; real measurements go under {config.RAW}/<gpu>/<sweep-id>")


def harness_config(dry_run: bool, window_s: float | None = None, host_batches: bool = False, sync: str = "step",
                   **overrides: Any) -> HarnessConfig:
    """The harness settings of a sweep (a dry run uses the CPU and short windows)."""
    cfg = HarnessConfig(host_batches=host_batches, sync=check_sync(sync, "--sync"), **overrides)
    if dry_run:
        cfg.device = "cpu"
        cfg.window_s, cfg.min_iters, cfg.warmup_min_s, cfg.warmup_min_iters = 0.5, 5, 0.2, 2
        # a dry run validates a plan (ids build, steps run) on the CPU; it measures nothing
        cfg.max_batch, cfg.cpu_fp32, cfg.warmup_max_s, cfg.max_window_s = 2, True, 2.0, 3.0
    if window_s is not None:
        cfg.window_s = float(window_s)
    return cfg


def _prepare_manifest(out: Path, plan: str, units: list[Unit], cfg: HarnessConfig, dry_run: bool, executor: str) -> dict[str, Any]:
    old = store.read_manifest(out)
    settings = cfg.to_dict()
    if old is not None:
        if bool(old.get("dry_run")) != dry_run:
            raise GpupredError(f"{out}: sweep was started with dry_run={old.get('dry_run')}; use a new --out")
        old_settings = old.get("settings", {})
        diff = [k for k in _PINNED if k in old_settings and old_settings[k] != settings[k]]
        if diff:
            was = ", ".join(f"{k}={old_settings[k]!r}" for k in diff)
            raise GpupredError(f"{out}: sweep was started with {was}; resume with the same settings or use a new --out")
        manifest = old
        if plan not in manifest.setdefault("plans", [manifest.get("plan", plan)]):
            manifest["plans"].append(plan)
    else:
        manifest = {"sweep_id": out.name, "plan": plan, "plans": [plan], "dry_run": dry_run, "simulated": dry_run,
                    "settings": settings, "started": store.now_utc(), "sessions": []}
    manifest["software"] = software()
    manifest["sessions"].append({"started": store.now_utc(), "executor": executor, "host": platform.node()})
    manifest["planned_units"] = sorted(set(manifest.get("planned_units", [])) | {u.group_id for u in units})
    return manifest


def _count(manifest: dict[str, Any], out: Path) -> None:
    done = store.finished_units(out)
    manifest["counts"] = {"planned": len(manifest["planned_units"]), "finished": len(done & set(manifest["planned_units"]))}
    manifest["status_counts"] = dict(manifest.get("status_counts", {}))


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs (what each unit measures is the :class:`HarnessConfig`)."""

    dry_run: bool = False  # CPU and fake NVML: output is simulated, never data
    max_minutes: float | None = None  # stop cleanly before this many minutes
    limit: int | None = None  # only the plan's first N units
    executor: str = "local"  # local or ray
    address: str | None = None  # Ray cluster address (ray executor)
    ray_num_gpus: float | None = None  # GPUs a Ray task asks for (0 on a CPU-only test cluster)
    progress: bool = True  # a progress bar on stderr


def run_sweep(plan: str, out: Path | None = None, options: SweepOptions | None = None,
              harness: HarnessConfig | None = None) -> SweepSummary:
    """Run (or resume) a sweep of ``plan`` into ``out``; stop before ``options.max_minutes`` would be exceeded.

    ``harness`` defaults to :func:`harness_config` for the options' ``dry_run``; its ``sync`` is the mode of units
    whose plan line does not set one.
    """
    o = options or SweepOptions()
    executor, dry_run, max_minutes = o.executor, o.dry_run, o.max_minutes
    if executor not in ("local", "ray"):
        raise GpupredError(f"unknown executor {executor!r}; use local or ray")
    if not dry_run and executor == "local":
        require_gpu()  # one line at once: no NVIDIA GPU/driver found (...)
    out = _sweep_folder(out, dry_run)
    cfg = harness or harness_config(dry_run)
    units = load_plan(plan, o.limit, cfg.sync)
    start = time.monotonic()
    deadline = start + max_minutes * 60 if max_minutes else None
    out.mkdir(parents=True, exist_ok=True)
    store.clean_temporaries(out)
    manifest = _prepare_manifest(out, project_path(plan, config.ROOT), units, cfg, dry_run, executor)
    done = store.finished_units(out)
    todo = [u for u in units if u.group_id not in done]
    summary = SweepSummary(out, len(units), len(units) - len(todo))
    _count(manifest, out)
    store.write_manifest(out, manifest)
    sweep_id = out.name
    record = _Recorder(out, summary, manifest, len(units), o.progress)
    try:
        with SigtermAsInterrupt():
            if executor == "ray":
                from gpupred.profile.ray_executor import run_on_ray

                summary.stopped = run_on_ray(todo, cfg, dry_run, sweep_id, deadline, o.address, record, o.ray_num_gpus)
            else:
                summary.stopped = _run_local(todo, cfg, dry_run, sweep_id, deadline, record, manifest)
    except KeyboardInterrupt:
        summary.stopped = "interrupted (the unit in flight was not written)"
    finally:
        record.close()
        _end_session(out, units, summary, manifest)
    return summary


def _sweep_folder(out: Path | None, dry_run: bool) -> Path:
    """The sweep's folder: ``out``, or a new dry-run folder; refused where its kind of output does not belong."""
    if out is None:
        if not dry_run:
            raise GpupredError("--out is required: data/raw/<gpu>/<sweep-id>")
        out = config.DRYRUN / "cpu" / f"dry-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(out)
    check_out(out, dry_run)
    return out


class _Recorder:
    """Writes each finished unit atomically, counts it in the summary and the manifest, and moves the progress bar."""

    def __init__(self, out: Path, summary: SweepSummary, manifest: dict[str, Any], total: int, progress: bool) -> None:
        from tqdm.auto import tqdm

        self.out, self.summary, self.manifest = out, summary, manifest
        self.bar = tqdm(total=total, initial=summary.already_done, desc=f"sweep {out.name}", unit="unit",
                        disable=not progress, dynamic_ncols=True, file=sys.stderr)

    def __call__(self, result: UnitResult) -> None:
        """Record one finished unit."""
        out, summary, manifest = self.out, self.summary, self.manifest
        store.write_unit(out, result.group_id, result.runs, result.samples)
        summary.done_now += 1
        for s in result.statuses:
            summary.statuses[s] += 1
            manifest["status_counts"][s] = manifest.get("status_counts", {}).get(s, 0) + 1
        _count(manifest, out)
        store.write_manifest(out, manifest)
        self.bar.set_postfix_str(f"{result.group_id[:40]} {'/'.join(result.statuses)}")
        self.bar.update(1)

    def close(self) -> None:
        """Close the progress bar."""
        self.bar.close()


def _end_session(out: Path, units: list[Unit], summary: SweepSummary, manifest: dict[str, Any]) -> None:
    """Count the units left and close this session in the manifest (written whatever stopped the sweep)."""
    summary.remaining = len([u for u in units if u.group_id not in store.finished_units(out)])
    manifest["sessions"][-1].update(ended=store.now_utc(), units_run=summary.done_now, stopped=summary.stopped)
    _count(manifest, out)
    store.write_manifest(out, manifest)


class SigtermAsInterrupt:
    """In the main thread, turn SIGTERM into KeyboardInterrupt so children are killed and the manifest is written."""

    def __enter__(self) -> "SigtermAsInterrupt":
        import signal
        import threading

        self._old: Any = None
        if threading.current_thread() is threading.main_thread():
            def handler(signum: int, frame: Any) -> None:
                raise KeyboardInterrupt(f"signal {signum}")

            try:
                self._old = signal.signal(signal.SIGTERM, handler)
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                self._old = None
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal

        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def record_context(manifest: dict[str, Any], ctx: ContextMeasurement) -> None:
    """Keep this session's bare CUDA context measurement in the manifest (latest on top, every session's in it)."""
    manifest["cuda_context"] = ctx.to_dict()
    if manifest.get("sessions"):
        manifest["sessions"][-1]["cuda_context"] = ctx.to_dict()


def _run_local(todo: list[Unit], cfg: HarnessConfig, dry_run: bool, sweep_id: str, deadline: float | None,
               record: Callable[[UnitResult], None], manifest: dict[str, Any] | None = None) -> str:
    if not todo:
        return ""
    backend = open_backend(dry_run)
    launcher = Launcher(spares=max(len(u.workload_ids) for u in todo[:2]))
    walls: list[float] = []
    try:
        ctx = measure_cuda_context(backend, cfg)  # once per session, before any unit: the fallback memory label
        if manifest is not None:
            record_context(manifest, ctx)
        for i, unit in enumerate(todo):
            if deadline is not None and deadline - time.monotonic() < estimate_unit_s(walls, cfg):
                return f"time budget (next unit needs ~{estimate_unit_s(walls, cfg):.0f} s)"
            nxt = todo[i + 1] if i + 1 < len(todo) else None
            launcher.spares_wanted = len(nxt.workload_ids) if nxt else 0
            try:
                result = run_unit(unit.specs, backend, cfg, unit.group_id, sweep_id, deadline, launcher,
                                  sync=unit.sync, context_mib=ctx.context_mib, pipeline=pipeline_json(unit.pipeline),
                                  setup=setup_options_json(unit.setup))
            except UnitInterrupted:
                return "time budget reached during a unit (not written; it runs again on resume)"
            walls.append(result.wall_s)
            record(result)
        return ""
    finally:
        launcher.close()
        backend.close()


def profile_one(workload_id: str, window_s: float | None = None, dry_run: bool = False, host_batches: bool = False,
                sync: str = "step") -> dict[str, Any]:
    """Profile one workload (nothing written) and return a summary of its run. ``workload_id`` may end in a plan
    line's pipeline options (``ID pipeline=image-files workers=8 pin=1``): a real DataLoader then feeds it."""
    from gpupred.profile.units import parse_plan_text

    if not dry_run:
        require_gpu()
    units = parse_plan_text(workload_id, "workload", sync)
    if len(units) != 1 or len(units[0].workload_ids) != 1:
        raise GpupredError(f"{workload_id!r}: expected one workload id (and its pipeline options)")
    unit = units[0]
    cfg = harness_config(dry_run, window_s, host_batches, sync)
    backend = open_backend(dry_run)
    try:
        with SigtermAsInterrupt():
            ctx = measure_cuda_context(backend, cfg)
            result = run_unit(unit.specs, backend, cfg, unit.group_id, context_mib=ctx.context_mib,
                              sync=unit.sync, pipeline=pipeline_json(unit.pipeline),
                              setup=setup_options_json(unit.setup))
    finally:
        backend.close()
    return summarize_unit(result)


def summarize_unit(result: UnitResult) -> dict[str, Any]:
    """The headline figures of a solo unit: status, iteration time, throughput, utilization, memory."""
    row = result.runs.to_pylist()[0]
    s = result.samples.to_pandas()
    ws, we = row["window_start_s"], row["window_end_s"]
    win = s[(s["t_s"] >= ws) & (s["t_s"] <= we)] if math.isfinite(ws) else s.iloc[0:0]

    def mean(metric: str, source: str = "poll") -> float | None:
        v = win[(win["metric"] == metric) & (win["source"] == source)]["value"]
        return round(float(v.mean()), 3) if len(v) else None

    def peak(metric: str) -> float | None:
        v = s[s["metric"] == metric]["value"]
        return round(float(v.max()), 1) if len(v) else None

    keys = ("workload_id", "pipeline", "status", "message", "simulated", "gpu_name", "n_iters", "iter_time_mean_s",
            "iter_time_median_s", "samples_per_s", "torch_peak_allocated_mib", "torch_peak_reserved_mib",
            "warmup_s", "gpm_supported", "buffered_supported", "notes")
    out: dict[str, Any] = {k: row[k] for k in keys}
    out.update(gpu_util_mean=mean("gpu_util"), gpu_util_buffered_mean=mean("gpu_util", "buffered"),
               mem_util_mean=mean("mem_util"), sm_active_mean=mean("sm_active", "gpm"),
               tensor_active_mean=mean("tensor_active", "gpm"), power_w_mean=mean("power_w"),
               mem_used_mib_peak=peak("mem_used_mib"), proc_mem_mib_peak=peak("proc_mem_mib"),
               wall_s=round(result.wall_s, 2), timings={k: round(v, 3) for k, v in (result.timings[0] if result.timings else {}).items()})
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}

