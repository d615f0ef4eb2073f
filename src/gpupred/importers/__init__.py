"""Importers for published GPU measurements of other groups (Lucid, GPUMemNet, Gavel) and a public scheduling trace
(Alibaba openb): fetched at a pinned commit, sha256-checked, kept under data/external/ (never data/raw, never
committed) with their provenance.

``gpupred import lucid|gpumemnet|gavel|alibaba-openb [--from DIR]`` on the command line; in Python::

    from gpupred import importers
    importers.import_source("lucid")            # download, or fall back to config.EXTERNAL_LOCAL
    importers.import_source("gpumemnet", from_dir="../shared/external")
    importers.lucid.read_solo(), importers.lucid.read_pairs(), importers.gpumemnet.read_runs()
    importers.import_source("alibaba-openb"); importers.alibaba.read_tasks(), importers.alibaba.read_nodes()
    importers.import_source("gavel"); importers.gavel.read_solo(), importers.gavel.read_pairs()

Importing this package is light (the CLI imports it to register ``gpupred import``): the importer modules, with
pandas behind them, and the tables of sources are built on first use.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpupred.errors import GpupredError

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.importers.source import Source

MEASUREMENT_MODULES: tuple[str, ...] = ("lucid", "gpumemnet")  # importers of measurements (the learning dataset's)
TRACE_MODULES: tuple[str, ...] = ("alibaba",)  # scheduling traces: imported the same way, never in the dataset
# co-location measurements without solo utilization or memory: read by gpupred.colocation, not in the dataset
COLOCATION_MODULES: tuple[str, ...] = ("gavel",)

__all__ = ["COLOCATION", "MODULES", "SOURCES", "TRACES", "alibaba", "gavel", "Source", "ensure_imported", "get_source",
           "gpumemnet", "import_source", "imported_sources", "is_imported", "load_all", "lucid", "module",
           "read_provenance"]
_FROM_SOURCE = ("Source", "ensure_imported", "is_imported", "read_provenance")


def _modules(names: tuple[str, ...]) -> dict[str, ModuleType]:
    loaded = [importlib.import_module(f"gpupred.importers.{n}") for n in names]
    return {m.SOURCE.name: m for m in loaded}


def __getattr__(name: str) -> Any:
    """The importer modules and the tables of sources, built on first use (and kept: tests patch them)."""
    if name in globals():
        return globals()[name]
    if name in (*MEASUREMENT_MODULES, *TRACE_MODULES, *COLOCATION_MODULES):
        return importlib.import_module(f"gpupred.importers.{name}")
    if name in _FROM_SOURCE:
        return getattr(importlib.import_module("gpupred.importers.source"), name)
    tables = {"MODULES": MEASUREMENT_MODULES, "SOURCES": MEASUREMENT_MODULES, "TRACES": TRACE_MODULES,
              "COLOCATION": COLOCATION_MODULES}
    if name not in tables:
        raise AttributeError(f"module 'gpupred.importers' has no attribute {name!r}")
    modules = _modules(tables[name])
    value: Any = modules if name == "MODULES" else {n: m.SOURCE for n, m in modules.items()}
    globals()[name] = value
    return value


def load_all() -> dict[str, ModuleType]:
    """Import every measurement importer (each registers what it adds, e.g. Lucid's jobs in the graph store's specs)
    and return them by source name."""
    return __getattr__("MODULES")


def get_source(name: str) -> "Source":
    """The source called ``name`` (lucid, gpumemnet, gavel, or the scheduling trace alibaba-openb)."""
    known = {**__getattr__("SOURCES"), **__getattr__("COLOCATION"), **__getattr__("TRACES")}
    if name not in known:
        raise GpupredError(f"unknown source {name!r}; known: {', '.join(known)}")
    return known[name]


def module(name: str) -> ModuleType:
    """The importer module of the source called ``name`` (specs(), dataset_rows()...)."""
    get_source(name)
    modules = __getattr__("MODULES")
    if name not in modules:
        kind = "a scheduling trace" if name in __getattr__("TRACES") else "a co-location matrix"
        raise GpupredError(f"{name} is {kind}, not a source of learning rows (read it with "
                           f"gpupred.importers.{name.split('-')[0]})")
    return modules[name]


def import_source(name: str, from_dir: str | os.PathLike[str] | None = None, **kwargs: object) -> Path:
    """Import one source by name (see :func:`gpupred.importers.source.import_source`); return its folder."""
    from gpupred.importers import source

    return source.import_source(get_source(name), from_dir, **kwargs)  # type: ignore[arg-type]


def imported_sources() -> list[str]:
    """The sources imported at their pinned commits."""
    from gpupred.importers.source import is_imported

    return [name for name, src in __getattr__("SOURCES").items() if is_imported(src)]
