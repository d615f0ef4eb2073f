"""Reading a sweep plan into run units (solo or co-located): each with a deterministic id so a resume finds it.

PLAN is ``catalog`` (every spec), ``catalog:N`` (the first N), ``catalog:family=resnet,vgg``,
``fused`` / ``fused:N`` (the fused catalog), or a text file with one workload id per line, or a
group ``id1 + id2 [+ id3 [+ id4]]`` per line for a co-located unit; ``#`` starts a comment. A line may
end with ``sync=step`` or ``sync=window`` (how the training loop synchronizes, see RUN_SCHEMA's ``sync``);
without it the unit takes the sweep's ``--sync`` (default ``step``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from gpupred.errors import GpupredError
from gpupred.profile.schema import SYNC_MODES
from gpupred.workloads.spec import WorkloadSpec

MAX_GROUP = 4
DEFAULT_SYNC = "step"


def check_sync(sync: str, where: str = "sync") -> str:
    """``sync`` if it is a known mode, else a one-line GpupredError."""
    if sync not in SYNC_MODES:
        raise GpupredError(f"{where}: unknown sync mode {sync!r}; use one of {', '.join(SYNC_MODES)}")
    return sync


@dataclass(frozen=True)
class Unit:
    """One run unit: a solo workload or a co-located group of 2-4, and how its training loops synchronize."""

    workload_ids: tuple[str, ...]
    sync: str = DEFAULT_SYNC

    @property
    def group_id(self) -> str:
        """Deterministic id: the workload id for a solo run, ``co<k>-<hash>`` for a group (file-name safe).

        A unit run with ``sync=window`` ends in ``~sync-window`` so both settings of one spec live in one sweep.
        """
        if len(self.workload_ids) == 1:
            base = self.workload_ids[0]
        else:
            digest = hashlib.sha1(" + ".join(self.workload_ids).encode()).hexdigest()[:12]
            base = f"co{len(self.workload_ids)}-{digest}"
        return base if self.sync == DEFAULT_SYNC else f"{base}~sync-{self.sync}"

    @property
    def specs(self) -> list[WorkloadSpec]:
        """The members' specs."""
        return [WorkloadSpec.from_id(w) for w in self.workload_ids]

    @property
    def label(self) -> str:
        """Readable: the ids joined by ' + '."""
        return " + ".join(self.workload_ids)


def _catalog_units(kind: str, arg: str) -> list[Unit]:
    from gpupred.workloads.catalog import catalog, fused_catalog

    specs = catalog() if kind == "catalog" else fused_catalog()
    if arg.startswith("family="):
        fams = {f.strip() for f in arg[len("family="):].split(",") if f.strip()}
        known = {s.family for s in specs}
        unknown = sorted(fams - known)
        if unknown:
            raise GpupredError(f"plan {kind}:{arg}: unknown families {unknown}; known: {', '.join(sorted(known))}")
        specs = [s for s in specs if s.family in fams]
    elif arg:
        try:
            n = int(arg)
        except ValueError:
            raise GpupredError(f"plan {kind}:{arg}: expected {kind}:N or {kind}:family=a,b") from None
        if n < 1:
            raise GpupredError(f"plan {kind}:{arg}: N must be at least 1 (plain {kind} runs every spec)")
        specs = specs[:n]
    return [Unit((s.id,)) for s in specs]


def _line_sync(line: str, default: str, where: str) -> tuple[str, str]:
    """(the line without its trailing ``sync=MODE``, the unit's sync mode)."""
    head, _, last = line.rpartition(" ")
    if last.startswith("sync="):
        return head.strip(), check_sync(last[len("sync="):], where)
    return line, default


def parse_plan_text(text: str, source: str = "<plan>", sync: str = DEFAULT_SYNC) -> list[Unit]:
    """Units from plan-file text (one id, or ``id + id ...``, per line, optionally ending in ``sync=MODE``)."""
    units: list[Unit] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        line, unit_sync = _line_sync(line, sync, f"{source}:{lineno}")
        ids = tuple(p.strip() for p in line.split("+"))
        if not 1 <= len(ids) <= MAX_GROUP or any(not i for i in ids):
            raise GpupredError(f"{source}:{lineno}: expected a workload id or 2-{MAX_GROUP} ids joined by '+', got {line!r}")
        for i in ids:
            try:
                WorkloadSpec.from_id(i)
            except GpupredError as err:
                raise GpupredError(f"{source}:{lineno}: {err}") from None
        units.append(Unit(ids, unit_sync))
    return units


def load_plan(plan: str, limit: int | None = None, sync: str = DEFAULT_SYNC) -> list[Unit]:
    """The plan's units in order, duplicates dropped, the first ``limit`` if given; ``sync`` is the default mode."""
    check_sync(sync)
    if limit is not None and limit < 1:
        raise GpupredError(f"limit {limit}: must be at least 1 unit (None for every unit)")
    head, _, arg = plan.partition(":")
    if head in ("catalog", "fused") and not Path(plan).is_file():
        units = [Unit(u.workload_ids, sync) for u in _catalog_units(head, arg)]
    else:
        path = Path(plan)
        if not path.is_file():
            raise GpupredError(f"plan {plan!r}: not a file and not catalog[:N|:family=..] or fused[:N]")
        units = parse_plan_text(path.read_text(), str(path), sync)
    seen: set[str] = set()
    out = []
    for u in units:
        if u.group_id not in seen:
            seen.add(u.group_id)
            out.append(u)
    if not out:
        raise GpupredError(f"plan {plan!r} holds no run units")
    return out if limit is None else out[:limit]
