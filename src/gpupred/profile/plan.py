"""Sweep plans: which run units a sweep holds, each with a deterministic id so a resume finds it.

PLAN is ``catalog`` (every spec), ``catalog:N`` (the first N), ``catalog:family=resnet,vgg``,
``fused`` / ``fused:N`` (the fused catalog), or a text file with one workload id per line, or a
group ``id1 + id2 [+ id3 [+ id4]]`` per line for a co-located unit; ``#`` starts a comment.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from gpupred.errors import GpupredError
from gpupred.workloads.spec import WorkloadSpec

MAX_GROUP = 4


@dataclass(frozen=True)
class Unit:
    """One run unit: a solo workload or a co-located group of 2-4."""

    workload_ids: tuple[str, ...]

    @property
    def group_id(self) -> str:
        """Deterministic id: the workload id for a solo run, ``co<k>-<hash>`` for a group (file-name safe)."""
        if len(self.workload_ids) == 1:
            return self.workload_ids[0]
        digest = hashlib.sha1(" + ".join(self.workload_ids).encode()).hexdigest()[:12]
        return f"co{len(self.workload_ids)}-{digest}"

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
        specs = specs[:n]
    return [Unit((s.id,)) for s in specs]


def parse_plan_text(text: str, source: str = "<plan>") -> list[Unit]:
    """Units from plan-file text (one id, or ``id + id ...``, per line)."""
    units: list[Unit] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        ids = tuple(p.strip() for p in line.split("+"))
        if not 1 <= len(ids) <= MAX_GROUP or any(not i for i in ids):
            raise GpupredError(f"{source}:{lineno}: expected a workload id or 2-{MAX_GROUP} ids joined by '+', got {line!r}")
        for i in ids:
            try:
                WorkloadSpec.from_id(i)
            except GpupredError as err:
                raise GpupredError(f"{source}:{lineno}: {err}") from None
        units.append(Unit(ids))
    return units


def load_plan(plan: str, limit: int | None = None) -> list[Unit]:
    """The plan's units in order, duplicates dropped, the first ``limit`` if given."""
    head, _, arg = plan.partition(":")
    if head in ("catalog", "fused") and not Path(plan).is_file():
        units = _catalog_units(head, arg)
    else:
        path = Path(plan)
        if not path.is_file():
            raise GpupredError(f"plan {plan!r}: not a file and not catalog[:N|:family=..] or fused[:N]")
        units = parse_plan_text(path.read_text(), str(path))
    seen: set[str] = set()
    out = []
    for u in units:
        if u.group_id not in seen:
            seen.add(u.group_id)
            out.append(u)
    if not out:
        raise GpupredError(f"plan {plan!r} holds no run units")
    return out[:limit] if limit else out
