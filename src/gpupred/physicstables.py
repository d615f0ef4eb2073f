"""What notebook 02 derives once per dataset workload for the stages after it: each workload's step kernels (the step
model's :class:`gpupred.step.physics.kernels.KernelList`) and its footprint graph terms (:func:`gpupred.memory.physics.graph_terms`).

Notebooks 03, 04, 05 and 08 each needed them for every run and rebuilt them from the graph store (about 16 s a time
on this project's 2-core machine); notebook 02 now writes them once:

- ``data/processed/job_kernels.parquet`` (``config.JOB_KERNELS``): one row per kernel, in launch order, keyed by
  ``workload_id`` (``KERNEL_COLUMNS``), and per workload its scalars (``JOB_COLUMNS``, repeated on its rows);
- ``data/processed/job_terms.parquet`` (``config.JOB_TERMS``): one row per workload, ``FOOTPRINT_COLUMNS``.

Both carry, in their parquet metadata, the fingerprint of the code that made them (:func:`code_fingerprint`: the
step model's, the graph reader's and the footprint's sources). A reader given a stale or incomplete table computes
what it needs from the graphs instead, as before, so a table is only ever a cache of that computation: it never
changes a figure.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from gpupred import config
from gpupred.workloads.spec import WorkloadSpec

FINGERPRINT_KEY = b"gpupred.code_fingerprint"
KERNEL_COLUMNS: tuple[str, ...] = ("flops", "bytes", "tensor_core", "phase", "sync_after", "library", "on_tc")
JOB_COLUMNS: tuple[str, ...] = ("input_bytes", "param_tensors", "cycles", "precision", "micro_batches", "counts",
                                "traits", "has_library", "has_on_tc")
CODE_PARTS: tuple[str, ...] = ("step/physics", "graph", "setups.py", "memory/physics.py", "finetune.py",
                               "workloads/spec.py", "workloads/fcnet.py", "importers/gpumemnet.py", "importers/lucid.py")


def code_fingerprint() -> str:
    """sha256 over the sources that decide a workload's kernels and graph terms (a table made by other code is stale)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for part in CODE_PARTS:
        path = root / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(root).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


KERNEL_DTYPES: dict[str, Any] = {"flops": float, "bytes": float, "tensor_core": np.int8, "phase": np.int8,
                                 "sync_after": bool, "library": bool, "on_tc": bool}  # KERNEL_COLUMNS' table types


def _kernel_columns(kl: Any) -> dict[str, Any]:
    """One workload's kernels as table columns (``KERNEL_COLUMNS``; a list without library or tensor-core flags gets
    False), and its scalars (``JOB_COLUMNS``) once."""
    n = len(kl)
    kernels = {name: np.zeros(n, dtype=bool) if getattr(kl, name) is None else getattr(kl, name).astype(dtype)
               for name, dtype in KERNEL_DTYPES.items()}
    return {**kernels,
            "input_bytes": float(kl.input_bytes), "param_tensors": int(kl.param_tensors), "cycles": int(kl.cycles),
            "precision": kl.precision, "micro_batches": int(kl.micro_batches), "counts": json.dumps(dict(kl.counts)),
            "traits": json.dumps(kl.traits), "has_library": kl.library is not None, "has_on_tc": kl.on_tc is not None}


def kernel_table(workloads: Sequence[tuple[str, Any]]) -> pd.DataFrame:
    """The kernels of each ``(workload_id, KernelList)`` as one table: a row per kernel in launch order, the
    workload's scalars repeated on its rows. Built column by column over every workload at once (a frame per
    workload, concatenated, took 21 s of pandas for notebook 02's 3,243 workloads)."""
    per = [_kernel_columns(kl) for _, kl in workloads]
    sizes = np.array([len(kl) for _, kl in workloads], dtype=np.intp)
    data: dict[str, Any] = {"workload_id": np.repeat(np.array([w for w, _ in workloads], dtype=object), sizes)}
    for name, dtype in KERNEL_DTYPES.items():
        data[name] = np.concatenate([c[name] for c in per]) if per else np.empty(0, dtype=dtype)
    for name in JOB_COLUMNS:
        data[name] = np.repeat(np.array([c[name] for c in per], dtype=object), sizes).tolist()
    return pd.DataFrame(data, columns=["workload_id", *KERNEL_COLUMNS, *JOB_COLUMNS])


def _write(frame: pd.DataFrame, path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpupred.files import atomic_write

    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    meta = {**(table.schema.metadata or {}), FINGERPRINT_KEY: code_fingerprint().encode()}
    atomic_write(path, lambda fh: pq.write_table(table.replace_schema_metadata(meta), fh))
    return path


def write_job_tables(workload_ids: Iterable[str], progress: bool = True) -> tuple[Path, Path]:
    """Compute every workload's kernels and graph terms (one graph load per architecture) and write both tables."""
    from gpupred.memory.physics import FOOTPRINT_COLUMNS, footprint_columns
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.reports import progress_bar

    ids = sorted(set(map(str, workload_ids)))
    kernels = kernel_table([(w, spec_kernels(WorkloadSpec.from_id(w))) for w in progress_bar(
        iterable=ids, desc="step kernels", unit="workload", disable=not progress)])
    terms = footprint_columns(pd.DataFrame({"workload_id": ids}), progress=progress)
    return (_write(kernels, config.JOB_KERNELS),
            _write(terms[["workload_id", *FOOTPRINT_COLUMNS]], config.JOB_TERMS))


def _fresh(path: Path) -> pd.DataFrame | None:
    """The table at ``path`` if it was made by this code, else None."""
    import pyarrow.parquet as pq

    if not path.is_file():
        return None
    table = pq.read_table(path)
    if (table.schema.metadata or {}).get(FINGERPRINT_KEY, b"").decode() != code_fingerprint():
        return None
    return table.to_pandas()


def kernel_lists(table: pd.DataFrame) -> dict[str, Any]:
    """Each workload's ``KernelList`` from a kernel table's rows (:func:`kernel_table`; its rows in launch order
    within each workload), by workload id in the order the ids first appear. Built column by column: the table's
    columns are converted once and cut at each workload's rows (a pandas group per workload took 4.3 s a call for
    the dataset's 3,243 workloads, and notebooks 03, 04 and 08 read them five times)."""
    from collections import Counter

    from gpupred.step.physics.kernels import KernelList

    codes, ids = pd.factorize(table["workload_id"], sort=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(ids) + 1))
    cols = {name: table[name].to_numpy(dtype)[order] for name, dtype in
            (("flops", float), ("bytes", float), ("tensor_core", int), ("phase", int), ("sync_after", bool),
             ("library", bool), ("on_tc", bool))}
    first = table.iloc[order[bounds[:-1]]][list(JOB_COLUMNS)].to_dict("list")
    lists: dict[str, Any] = {}
    for i, w in enumerate(ids):
        part = {name: col[bounds[i]:bounds[i + 1]].copy() for name, col in cols.items()}
        lists[str(w)] = KernelList(
            part["flops"], part["bytes"], part["tensor_core"], part["phase"], part["sync_after"],
            part["library"] if first["has_library"][i] else None, int(first["input_bytes"][i]),
            int(first["param_tensors"][i]), int(first["cycles"][i]), Counter(json.loads(first["counts"][i])),
            part["on_tc"] if first["has_on_tc"][i] else None, str(first["precision"][i]),
            int(first["micro_batches"][i]), json.loads(first["traits"][i]))
    return lists


def stored_kernels(workload_ids: Sequence[str]) -> list[Any] | None:
    """Each workload's kernels from notebook 02's table, in the order given; None when the table is missing, stale or
    lacks one of them (the caller then computes them from the graphs)."""
    table = _fresh(config.JOB_KERNELS)
    if table is None:
        return None
    wanted = set(map(str, workload_ids))
    groups = kernel_lists(table[table["workload_id"].isin(wanted)])
    if wanted - set(groups):
        return None
    return [groups[str(w)] for w in workload_ids]


def stored_terms(workload_ids: Sequence[str]) -> pd.DataFrame | None:
    """Each workload's footprint graph terms from notebook 02's table, one row per id given (its index that order);
    None when the table is missing, stale, lacks one of them or one of ``FOOTPRINT_COLUMNS`` (written before it)."""
    from gpupred.memory.physics import FOOTPRINT_COLUMNS

    table = _fresh(config.JOB_TERMS)
    if table is None or not set(FOOTPRINT_COLUMNS) <= set(table.columns):
        return None
    table = table.drop_duplicates("workload_id").set_index("workload_id")
    ids = [str(w) for w in workload_ids]
    if set(ids) - set(table.index):
        return None
    return table.loc[ids].reset_index(drop=True)


def kernels_of(df: pd.DataFrame) -> list[Any]:
    """Each row's step kernels (by ``workload_id``): notebook 02's table when it is current, else from the graphs."""
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.reports import progress_bar

    ids = df["workload_id"].astype(str).tolist()
    stored = stored_kernels(ids)
    if stored is not None:
        return stored
    return [spec_kernels(WorkloadSpec.from_id(w))
            for w in progress_bar(iterable=ids, desc="step kernels", unit="run", leave=False)]


def with_terms(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the footprint's graph terms (``FOOTPRINT_COLUMNS``): notebook 02's table when it is current, else
    :func:`gpupred.memory.physics.footprint_columns` from the graphs."""
    from gpupred.memory.physics import FOOTPRINT_COLUMNS, footprint_columns

    terms = stored_terms(df["workload_id"].astype(str).tolist())
    if terms is None:
        return footprint_columns(df)
    out = df.copy()
    for col in FOOTPRINT_COLUMNS:
        out[col] = terms[col].to_numpy(float)
    return out
