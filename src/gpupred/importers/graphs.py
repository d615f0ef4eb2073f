"""Graph features of the imported workloads: GPUMemNet networks built with onnx.helper, Lucid jobs from the
graph store (``config.GRAPHS``, committed) or, where one is missing, exported with torch
(:func:`gpupred.graph.graphstore.graph_for`).

The rows have the columns of ``data/processed/graph_features.parquet`` (:data:`gpupred.graph.table.COLUMNS`).
"""

from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from gpupred.workloads.spec import WorkloadSpec


def feature_rows(specs: Iterable[WorkloadSpec], progress: bool = True) -> pd.DataFrame:
    """One graph-feature row per spec (columns of gpupred.graph.table.COLUMNS), one graph per architecture."""
    from gpupred.reports import progress_bar

    from gpupred.graph.features import featurize
    from gpupred.graph.graphstore import graph_for
    from gpupred.graph.table import COLUMNS

    specs = list(specs)
    graphs: dict[str, Any] = {}
    rows = []
    for spec in progress_bar(iterable=specs, desc="imported graph features", unit="spec", disable=not progress):
        if spec.arch_key not in graphs:
            graphs[spec.arch_key] = graph_for(spec)
        row = featurize(graphs[spec.arch_key], batch_size=spec.batch_size, precision=spec.precision, optimizer=spec.optimizer)
        rows.append({"workload_id": spec.id, "arch_key": spec.arch_key, "family": spec.family, "arch": spec.arch,
                     "precision": spec.precision, "optimizer": spec.optimizer, "fused": spec.fused, **row})
        if spec.family == "fcnet":
            graphs.pop(spec.arch_key)  # one spec per network: keep memory flat
    df = pd.DataFrame(rows)
    return df.reindex(columns=COLUMNS) if len(df) else pd.DataFrame(columns=COLUMNS)


def imported_specs(sources: Iterable[str] | None = None) -> list[WorkloadSpec]:
    """Every rebuilt workload of the imported sources (default: those imported)."""
    from gpupred import importers

    names = importers.imported_sources() if sources is None else list(sources)
    out: list[WorkloadSpec] = []
    for name in names:
        out += importers.module(name).specs()
    return out
