"""Importers for published GPU measurements of other groups (Lucid, GPUMemNet; Gavel's co-location throughputs) and a
public scheduling trace (Alibaba openb): fetched at a pinned commit, sha256-checked, kept under data/external/ (never
data/raw, never committed) with their provenance.

``gpupred import lucid|gpumemnet|gavel|alibaba-openb [--from DIR]`` on the command line; in Python::

    from gpupred import importers
    importers.import_source("lucid")            # download, or fall back to config.EXTERNAL_LOCAL
    importers.import_source("gpumemnet", from_dir="../shared/external")
    importers.lucid.read_solo(), importers.lucid.read_pairs(), importers.gpumemnet.read_runs()
    importers.import_source("alibaba-openb"); importers.alibaba.read_tasks(), importers.alibaba.read_nodes()
    importers.import_source("gavel"); importers.gavel.read_solo(), importers.gavel.read_pairs()
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from gpupred.errors import GpupredError
from gpupred.importers import alibaba, gavel, gpumemnet, lucid
from gpupred.importers import source as _source_module
from gpupred.importers.source import Source, ensure_imported, is_imported, read_provenance

MODULES: dict[str, ModuleType] = {m.SOURCE.name: m for m in (lucid, gpumemnet)}  # each source's importer module
SOURCES: dict[str, Source] = {name: m.SOURCE for name, m in MODULES.items()}
# Scheduling traces: imported the same way, never part of the learning dataset (not in SOURCES).
TRACES: dict[str, Source] = {alibaba.SOURCE.name: alibaba.SOURCE}
# Co-location measurements without solo utilization or memory: read by gpupred.colocation, not in the dataset.
COLOCATION: dict[str, Source] = {gavel.SOURCE.name: gavel.SOURCE}

__all__ = ["COLOCATION", "MODULES", "SOURCES", "TRACES", "alibaba", "gavel", "Source", "ensure_imported", "get_source", "gpumemnet", "import_source",
           "imported_sources", "is_imported", "lucid", "module", "read_provenance"]


def get_source(name: str) -> Source:
    """The source called ``name`` (lucid, gpumemnet, gavel, or the scheduling trace alibaba-openb)."""
    known = {**SOURCES, **COLOCATION, **TRACES}
    if name not in known:
        raise GpupredError(f"unknown source {name!r}; known: {', '.join(known)}")
    return known[name]


def module(name: str) -> ModuleType:
    """The importer module of the source called ``name`` (specs(), dataset_rows()...)."""
    get_source(name)
    if name not in MODULES:
        kind = "a scheduling trace" if name in TRACES else "a co-location matrix"
        raise GpupredError(f"{name} is {kind}, not a source of learning rows (read it with "
                           f"gpupred.importers.{name.split('-')[0]})")
    return MODULES[name]


def import_source(name: str, from_dir: str | os.PathLike[str] | None = None, **kwargs: object) -> Path:
    """Import one source by name (see :func:`gpupred.importers.source.import_source`); return its folder."""
    return _source_module.import_source(get_source(name), from_dir, **kwargs)  # type: ignore[arg-type]


def imported_sources() -> list[str]:
    """The sources imported at their pinned commits."""
    return [name for name, src in SOURCES.items() if is_imported(src)]
