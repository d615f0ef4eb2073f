"""``gpupred campaign next``: the smoke test on a machine's first call, then the queue's next units within the time
budget, each written atomically by the machinery that owns it, then one tarball of everything written and one
summary line per stage."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gpupred.campaign.executors import Executor, PartRun
from gpupred.campaign.pack import RETURN_LIMIT_MIB, pack, snapshot
from gpupred.campaign.planner import Estimates, build_queue, estimates, plan_next, planned_seconds
from gpupred.campaign.stages import MARGIN_MINUTES, Layout, Part, StageQueue, Work
from gpupred.errors import GpupredError
from gpupred.files import atomic_write_bytes
from gpupred.profile.store import atomic_write_json, now_utc

@dataclass
class StageRun:
    """What one call did in one stage."""

    units: int = 0
    statuses: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    stopped: str = ""


@dataclass
class Outcome:
    """One call's result: the summary lines, the tarball and the summary file (None when nothing was written)."""

    lines: list[str]
    tarball: Path | None
    summary: Path
    files: int


def marker_path(layout: Layout, uuid: str, kind: str = "smoke") -> Path:
    """The file that says the smoke test passed on the GPU ``uuid`` of this machine (``kind`` smoke), or the list of
    files its calls have packed (``kind`` packed)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", uuid) or "gpu"
    return layout.markers / (f"smoke-{name}.json" if kind == "smoke" else f"packed-{name}.txt")


def _relative(paths: set[Path], layout: Layout) -> list[str]:
    root = Path(layout.root).resolve()
    return sorted(str(Path(p).resolve().relative_to(root)) for p in paths)


def smoke_first(executor: Executor, layout: Layout, deadline: float) -> tuple[str, set[Path]]:
    """Run the smoke test unless this machine's marker says it passed (a one-line GpupredError if it fails); return
    its line and the files this machine held before its first call or packed since (never packed again)."""
    name, uuid = executor.identity()
    marker, ledger = marker_path(layout, uuid), marker_path(layout, uuid, "packed")
    packed = set(ledger.read_text().split()) if ledger.is_file() else set()
    if marker.is_file():
        known = set(json.loads(marker.read_text()).get("baseline", [])) | packed
        line = f"smoke test: passed earlier on this machine ({marker.name})"
        return line, {(layout.root / p).resolve() for p in known}
    baseline = snapshot([layout.raw, layout.calibrations])
    t0 = time.monotonic()
    why = executor.smoke(deadline)
    if why:
        raise GpupredError(f"smoke test failed on {name} ({why}); nothing else ran: give the machine back")
    atomic_write_json({"gpu": name, "uuid": uuid, "passed": now_utc(), "baseline": _relative(baseline, layout)}, marker)
    line = f"smoke test: two units and the NVML reader ok on {name} in {time.monotonic() - t0:.0f} s"
    return line, baseline | {(layout.root / p).resolve() for p in packed}


def record_packed(executor: Executor, layout: Layout, written: list[Path]) -> None:
    """Add what this call packed to the machine's ledger (a later call packs what a killed call left, not this)."""
    ledger = marker_path(layout, executor.identity()[1], "packed")
    old = ledger.read_text() if ledger.is_file() else ""
    atomic_write_bytes(ledger, (old + "".join(f"{p}\n" for p in _relative(set(written), layout))).encode())


def _run_part(executor: Executor, part: Part, works: list[Work], deadline: float) -> PartRun:
    limit = max(w.index for w in works) + 1
    if part.kind == "calibrate":
        return executor.calibrate(part.folder, deadline)
    if part.kind == "loader-bench":
        return executor.loader_bench(part.folder, deadline)
    if part.kind == "traces":
        return executor.traces(part.plan, part.folder, limit, deadline)
    return executor.sweep(part.plan, part.folder, limit, deadline)


def run_planned(executor: Executor, planned: list[Work], deadline: float, runs: dict[int, StageRun],
                failed: set[Part]) -> int:
    """Run the planned units part by part, in order; count them into ``runs``; return how many were written."""
    by_part: dict[Part, list[Work]] = {}
    for work in planned:
        by_part.setdefault(work.part, []).append(work)
    written = 0
    for part, works in by_part.items():
        if time.monotonic() >= deadline:
            break
        t0 = time.monotonic()
        print(f"campaign: stage {works[0].stage} {part.kind} {Path(part.plan).name or part.folder.name}: "
              f"{len(works)} units planned", flush=True)
        try:
            result = _run_part(executor, part, works, deadline)
        except Exception as err:  # one part's failure ends that part, not the call: what was written is still packed
            result = PartRun(0, Counter(), f"{type(err).__name__}: {' '.join(str(err).split())}"[:300])
        run = runs.setdefault(works[0].stage, StageRun())
        run.units += result.units
        run.statuses.update(result.statuses)
        run.seconds += time.monotonic() - t0
        if result.stopped:
            run.stopped = result.stopped
            failed.add(part)
        written += result.units
    return written


def stage_line(stage: StageQueue, run: StageRun | None, est: Estimates) -> str:
    """One summary line: ran (units, statuses, minutes, what is left), skipped and why, done, or not reached."""
    head = f"stage {stage.number} {stage.name}:"
    if stage.skipped:
        return f"{head} skipped: {stage.skipped}"
    left = f", {len(stage.todo)} left (~{sum(w.seconds for w in stage.todo) / 60:.0f} min)" if stage.todo else ""
    if run is not None and (run.units or run.stopped):
        got = ", ".join(f"{k} {v}" for k, v in sorted(run.statuses.items())) or "none"
        stop = f"; stopped: {' '.join(run.stopped.split())}" if run.stopped else ""
        return (f"{head} ran {run.units} units ({got}) in {run.seconds / 60:.1f} min; {stage.done}/{stage.total} done"
                f"{left}{stop}")
    if not stage.todo:
        return f"{head} done ({stage.done}/{stage.total})"
    return f"{head} not reached: {left[2:]}"


def run_next(executor: Executor, gpu: str, layout: Layout, minutes: float, out: Path,
             margin_minutes: float = MARGIN_MINUTES, est: Estimates | None = None) -> Outcome:
    """One call: the smoke test if this machine has no marker, then the queue's units that fit ``minutes`` less the
    margin (re-planned while time is left), then one tarball in ``out`` of every file this machine wrote that no
    earlier call packed (a killed call's too), and the summary beside it. ``est``: per-unit seconds (default:
    :func:`gpupred.campaign.planner.estimates`)."""
    if not minutes > margin_minutes >= 0:
        raise GpupredError(f"--minutes {minutes:g}: must be more than the margin ({margin_minutes:g} minutes)")
    t0 = time.monotonic()
    deadline = t0 + 60 * (minutes - margin_minutes)
    folders = [layout.raw, layout.calibrations]
    line, known = smoke_first(executor, layout, deadline)
    lines = [line]
    est = est or estimates(gpu, layout)
    runs: dict[int, StageRun] = {}
    failed: set[Part] = set()
    while True:
        queue = build_queue(gpu, layout, est)
        planned = [w for w in plan_next(queue, deadline - time.monotonic(), est) if w.part not in failed]
        if not planned or not run_planned(executor, planned, deadline, runs, failed):
            break
    lines += [stage_line(s, runs.get(s.number), est) for s in build_queue(gpu, layout, est)]
    lines.append(f"call: {(time.monotonic() - t0) / 60:.1f} of {minutes:g} minutes; sweep units estimated at "
                 f"{est.sweep_s:.1f} s ({est.basis})")
    written = sorted(snapshot(folders) - known)
    outcome = _finish(written, layout, gpu, out, lines, executor.simulated)
    record_packed(executor, layout, written)
    return outcome


def _finish(written: list[Path], layout: Layout, gpu: str, out: Path, lines: list[str], simulated: bool) -> Outcome:
    """Pack what was written into ``out`` and write the summary beside it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = f"campaign-{gpu}-{stamp}{'-simulated' if simulated else ''}"
    tarball = pack(written, layout.root, out / f"{name}.tgz") if written else None
    if tarball is None:
        lines.append("tarball: none (nothing was written)")
    else:
        mib = tarball.stat().st_size / 2**20
        over = f"; over the {RETURN_LIMIT_MIB} MiB the device tool brings back" if mib > RETURN_LIMIT_MIB else ""
        lines.append(f"tarball: {tarball.name} ({len(written)} files, {mib:.1f} MiB){over}; here: "
                     f"gpupred campaign unpack <files_at>/{tarball.name}")
    summary = out / f"{name}.txt"
    summary.write_text("\n".join(lines) + "\n")
    return Outcome(lines, tarball, summary, len(written))


def queue_report(gpu: str, layout: Layout, minutes: float, margin_minutes: float = MARGIN_MINUTES,
                 smoke: bool = True, est: Estimates | None = None) -> tuple[list[str], list[Work]]:
    """``gpupred campaign plan``: one line per stage (units left, estimated minutes, how many the next call of
    ``minutes`` would run), and the planned units; nothing runs."""
    est = est or estimates(gpu, layout)
    queue = build_queue(gpu, layout, est)
    smoke_s = 2 * est.sweep_s + est.start_s if smoke else 0.0  # two units and a CUDA-context child
    planned = plan_next(queue, 60 * (minutes - margin_minutes) - smoke_s, est)
    count = Counter(w.stage for w in planned)
    lines = [f"queue for {gpu}: sweep units ~{est.sweep_s:.1f} s ({est.basis}), a calibration ~{est.calibrate_s:.0f} s,"
             f" a trace ~{est.trace_s:.0f} s; a {minutes:g}-minute call keeps {margin_minutes:g} free"
             + (" and starts with the smoke test on a fresh machine" if smoke else "")]
    for s in queue:
        line = stage_line(s, None, est).replace(" not reached:", "")
        lines.append(line if s.skipped or not s.todo else f"{line}; next call: {count.get(s.number, 0)}")
    total = sum(w.seconds for s in queue for w in s.todo)
    lines.append(f"next call: {len(planned)} units, ~{planned_seconds(planned, est) / 60:.1f} min; everything "
                 f"left: ~{total / 60:.0f} min")
    return lines, planned

