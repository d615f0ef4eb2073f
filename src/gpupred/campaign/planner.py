"""The queue as this machine sees it (:func:`build_queue`: what is left of each stage, each unit's estimated seconds)
and the units of one call (:func:`plan_next`: those that fit the time budget, in priority order)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from gpupred.campaign.stages import STAGES, Layout, Part, StageQueue, StageSkipped, Work, calibrated_kinds
from gpupred.errors import GpupredError

CALIBRATE_S = 120.0  # a calibration with no recorded one to go by (docs: about 2 device-minutes)
START_S = 30.0  # a child interpreter's start: python, torch import, CUDA initialization
TRACE_S = 15.0  # one kernel-trace spec: the upper end of the 5-15 s estimate (traces are not yet timed on a GPU)
BENCH_S = 40.0  # `gpupred loader bench` (25 s of timing): 32 s on the reference 2-core host (data/hosts), and a margin


@dataclass(frozen=True)
class Estimates:
    """Seconds per unit: a sweep unit (recorded per-unit walls, or the harness's hard timeout), a calibration, a
    trace; and what a sweep session reserves before its first unit (the harness's hard timeout, as the sweep does).
    A co-located group counts as one unit of ``sweep_s`` (its members run side by side; no group is recorded yet).
    ``folder_s``: per sweep folder, the seconds per unit its own recorded sessions took (else the most that a folder
    of the same sweep id took on another GPU kind), which its units take in place of ``sweep_s`` (a 1.1B fine-tune is
    not a catalog unit: 36.8 s against 14.6 s on the first lent H200)."""

    sweep_s: float
    basis: str  # where sweep_s comes from
    calibrate_s: float
    trace_s: float = TRACE_S
    start_s: float = START_S
    reserve_s: float = 0.0
    bench_s: float = BENCH_S
    folder_s: dict[str, float] = field(default_factory=dict, hash=False)

    def first(self, part: Part) -> float:
        """Seconds a part costs once, before its first unit, in each call (a child's start)."""
        return self.start_s if part.kind in ("calibrate", "traces", "loader-bench") else 0.0

    def unit_s(self, part: Part) -> float:
        """Seconds one unit of ``part`` is estimated to take (a sweep's: its folder's own record, else ``sweep_s``)."""
        if part.kind == "sweep":
            return self.folder_s.get(str(part.folder), self.sweep_s)
        return {"calibrate": self.calibrate_s, "traces": self.trace_s, "loader-bench": self.bench_s}[part.kind]


def recorded_sessions(raw_gpu: Path) -> dict[str, list[dict[str, object]]]:
    """Per sweep folder under ``raw_gpu`` (its path), the sessions its newest manifest records (folders without one,
    or whose manifest does not load, left out)."""
    from gpupred.profile.store import read_manifest

    out: dict[str, list[dict[str, object]]] = {}
    for folder in sorted(p for p in Path(raw_gpu).glob("*") if p.is_dir()) if Path(raw_gpu).is_dir() else []:
        try:
            sessions = (read_manifest(folder) or {}).get("sessions", [])
        except GpupredError:
            continue
        if sessions:
            out[str(folder)] = sessions
    return out


def recorded_unit_s(raw_gpu: Path) -> float:
    """Session wall time over units run, in the newest manifest of every sweep folder under ``raw_gpu``; NaN if none."""
    from gpupred.profile.datacard import gpu_seconds_per_unit

    return gpu_seconds_per_unit({"sessions": [s for v in recorded_sessions(raw_gpu).values() for s in v]})


def folder_unit_s(raw: Path, gpu: str) -> dict[str, float]:
    """Per sweep folder of ``gpu`` (``raw/<gpu>/<sweep id>``), its seconds per unit: its own sessions' where they ran
    units, else the most that the same sweep id's folder took on another GPU kind under ``raw``."""
    from gpupred.profile.datacard import gpu_seconds_per_unit

    own, others = {}, {}
    for kind in sorted(p.name for p in Path(raw).glob("*") if p.is_dir()) if Path(raw).is_dir() else []:
        for folder, sessions in recorded_sessions(Path(raw) / kind).items():
            seconds = gpu_seconds_per_unit({"sessions": sessions})
            if seconds == seconds:
                name = Path(folder).name
                if kind == gpu:
                    own[name] = seconds
                else:
                    others[name] = max(seconds, others.get(name, 0.0))
    return {str(Path(raw) / gpu / name): s for name, s in {**others, **own}.items()}


def estimates(gpu: str, layout: Layout) -> Estimates:
    """Per-unit seconds on ``gpu``: its own recorded sweeps, else any GPU's, else the harness's hard timeout."""
    from gpupred.profile.harness import HarnessConfig

    hard = HarnessConfig().unit_timeout_s
    per_unit, basis = recorded_unit_s(layout.raw / gpu), f"recorded {gpu} sweeps"
    if per_unit != per_unit:
        kinds = sorted(p.name for p in layout.raw.glob("*") if p.is_dir()) if layout.raw.is_dir() else []
        recorded = [(recorded_unit_s(layout.raw / k), k) for k in kinds]
        recorded = [(s, k) for s, k in recorded if s == s]
        per_unit, basis = max(recorded) if recorded else (hard, "the harness's hard timeout (nothing recorded)")
        basis = basis if not recorded else f"recorded {basis} sweeps (none of {gpu} yet)"
    walls = []
    for path in sorted(layout.calibrations.glob("*.json")) if layout.calibrations.is_dir() else []:
        try:
            walls.append(float(json.loads(path.read_text())["wall_s"]))
        except (ValueError, KeyError, TypeError):
            continue
    return Estimates(float(per_unit), basis, max(walls) if walls else CALIBRATE_S, reserve_s=hard,
                     folder_s=folder_unit_s(layout.raw, gpu))


def part_units(part: Part, gpu: str, layout: Layout) -> list[tuple[str, bool]]:
    """Each unit of a part in plan order: (its id, whether it is already on disk)."""
    if part.kind == "calibrate":
        return [(f"calibration:{gpu}", gpu in calibrated_kinds(layout.calibrations))]
    if part.kind == "loader-bench":
        return [(f"loader-bench:{part.folder.name}", part.folder.is_file())]
    from gpupred.profile.units import load_plan

    units = load_plan(part.plan)
    if part.kind == "traces":
        from gpupred.traces.tracetable import trace_path

        return [(u.group_id, trace_path(part.folder, u.group_id).exists()) for u in units if len(u.workload_ids) == 1]
    from gpupred.profile.store import finished_units

    done = finished_units(part.folder)
    return [(u.group_id, u.group_id in done) for u in units]


def build_queue(gpu: str, layout: Layout, est: Estimates) -> list[StageQueue]:
    """Every stage, in priority order: skipped with its reason, or its units left (in plan order) and done."""
    queue = []
    for number, (name, title, parts_of) in enumerate(STAGES, 1):
        stage = StageQueue(number, name, title)
        try:
            parts = parts_of(gpu, layout)
            for part in parts:
                for index, (key, done) in enumerate(part_units(part, gpu, layout)):
                    if done:
                        stage.done += 1
                    else:
                        stage.todo.append(Work(number, part, key, index, est.unit_s(part)))
        except StageSkipped as why:
            stage.skipped = str(why)
        except GpupredError as err:  # a plan that no longer loads: say so and go on with the others
            stage.skipped = f"its plan does not load: {err}"
        queue.append(stage)
    return queue


def plan_next(queue: list[StageQueue], budget_s: float, est: Estimates) -> list[Work]:
    """The units of one call: in priority order, each stage's units in plan order while they fit ``budget_s``.

    A stage stops at its first unit that does not fit; a later stage may still use the time left. A sweep part's
    first unit needs the harness's hard timeout left (the sweep refuses to start one with less), a calibration or
    trace part's first unit also pays a child's start. The planned units' estimates sum to at most ``budget_s``.
    """
    used, planned, started = 0.0, [], set()
    for stage in queue:
        if stage.skipped:
            continue
        for work in stage.todo:
            new = work.part not in started
            cost = work.seconds + (est.first(work.part) if new else 0.0)
            room = max(cost, est.reserve_s) if new and work.part.kind == "sweep" else cost
            if used + room > budget_s:
                break
            planned.append(work)
            used += cost
            started.add(work.part)
    return planned


def planned_seconds(planned: list[Work], est: Estimates) -> float:
    """The estimated seconds of planned units (each part's one-off start included)."""
    parts = {w.part for w in planned}
    return sum(w.seconds for w in planned) + sum(est.first(p) for p in parts)
