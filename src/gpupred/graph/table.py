"""The graph feature table: one row per workload spec, written to data/processed/graph_features.parquet.

Columns (the contract): ``ID_COLUMNS`` + ``FEATURE_KEYS`` + ``unknown_op_types`` + ``COVERAGE_KEYS`` (how much of
the graph the featurizer could not see; not model features). Each architecture's graph
comes from the committed graph store (``config.GRAPHS``, no torch needed); an architecture missing from it
is exported once (torch, cached per ``arch_key``) in a worker process, which then featurizes its specs.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.graph.coverage import COVERAGE_KEYS
from gpupred.graph.features import FEATURE_KEYS
from gpupred.reports import MetricsSchema

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from gpupred.workloads.spec import WorkloadSpec

ID_COLUMNS: list[str] = ["workload_id", "arch_key", "family", "arch", "precision", "optimizer", "fused"]
COLUMNS: list[str] = [*ID_COLUMNS, *FEATURE_KEYS, "unknown_op_types", *COVERAGE_KEYS]


def _arch_rows(specs: list["WorkloadSpec"], threads: int = 1) -> list[dict[str, Any]]:
    """Featurize each spec of one architecture from its graph (the store's, else exported once and cached)."""
    from gpupred.graph.export import export_onnx, stored_graph
    from gpupred.graph.features import featurize

    if threads and stored_graph(specs[0]) is None:
        import torch  # exporting: this worker process may use ``threads`` cores

        torch.set_num_threads(threads)
    path = export_onnx(specs[0])
    rows = []
    for spec in specs:
        row = featurize(path, batch_size=spec.batch_size, precision=spec.precision, optimizer=spec.optimizer)
        rows.append({
            "workload_id": spec.id, "arch_key": spec.arch_key, "family": spec.family, "arch": spec.arch,
            "precision": spec.precision, "optimizer": spec.optimizer, "fused": spec.fused, **row,
        })
    return rows


def build_feature_table(specs: Iterable["WorkloadSpec"], workers: int = 2, progress: bool = True) -> "pd.DataFrame":
    """Featurize every spec from the graph store (exporting, with torch, only architectures it lacks); rows in spec order."""
    import pandas as pd

    from gpupred.graph.export import stored_graph
    from gpupred.reports import progress_bar

    specs = list(specs)
    groups: dict[str, list[WorkloadSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.arch_key, []).append(spec)
    stored = {k: g for k, g in groups.items() if stored_graph(g[0]) is not None}
    to_export = {k: g for k, g in groups.items() if k not in stored}
    rows: dict[str, dict[str, Any]] = {}
    bar = progress_bar(total=len(specs), desc="graph features", unit="spec", disable=not progress)
    try:
        for group in stored.values():  # no torch: the committed graphs
            for row in _arch_rows(group, threads=0):
                rows[row["workload_id"]] = row
            bar.update(len(group))
        _export_and_featurize(to_export, workers, rows, bar)
    finally:
        bar.close()
    df = pd.DataFrame([rows[s.id] for s in specs if s.id in rows])
    return df.reindex(columns=COLUMNS) if len(df) else pd.DataFrame(columns=COLUMNS)


def _export_and_featurize(groups: dict[str, list["WorkloadSpec"]], workers: int, rows: dict[str, dict[str, Any]], bar: Any) -> None:
    """Architectures missing from the store: export each once (torch), in worker processes when several."""
    if workers <= 1 or len(groups) <= 1:
        for group in groups.values():
            for row in _arch_rows(group, threads=0):
                rows[row["workload_id"]] = row
            bar.update(len(group))
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # torch and fork do not mix
    threads = max(1, (os.cpu_count() or 1) // workers)
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(_arch_rows, group, threads): key for key, group in groups.items()}
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except GpupredError:
                raise
            except Exception as err:
                raise GpupredError(f"{futures[fut]}: export or featurize failed: {type(err).__name__}: {err}") from None
            for row in result:
                rows[row["workload_id"]] = row
            bar.update(len(result))


def write_feature_table(df: "pd.DataFrame", path: Path | None = None) -> Path:
    """Write the feature table as parquet (atomically) after checking its columns."""
    path = Path(path or config.GRAPH_FEATURES)
    check_columns(df, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def check_columns(df: "pd.DataFrame", label: str) -> None:
    """Raise if the table lacks any contract column."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise GpupredError(f"{label}: graph feature table lacks columns {missing}; rebuild it with notebook 02")


def read_feature_table(path: Path | None = None) -> "pd.DataFrame":
    """Read data/processed/graph_features.parquet, checking the column contract."""
    import pandas as pd

    path = Path(path or config.GRAPH_FEATURES)
    if not path.is_file():
        raise GpupredError(f"{path}: no graph feature table; run notebook 02-build-features (or `gpupred pipeline`)")
    df = pd.read_parquet(path)
    check_columns(df, str(path))
    return df


FEATURES_METRICS = MetricsSchema("02-build-features", (
    (r"graph_features_(rows|unknown_ops)", "rows of the feature table, and ops without a cost rule in it"),
))
