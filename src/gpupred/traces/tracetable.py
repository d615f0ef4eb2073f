"""Kernel-trace summaries (issue 38): a torch.profiler trace of a few training steps -> one row per step; the
table's schema, its writer and its reader.

A sweep folder ``data/raw/<gpu>/<sweep-id>/`` keeps, beside ``runs/`` and ``samples/``, ``traces/<workload_id>.parquet``
(``TRACE_SCHEMA``): per profiled step, the kernel count, the GPU-busy time (the union of kernel intervals), the host
time, and per op class (``OP_CLASSES``, from the kernel's name) the kernels and their summed time. The raw traces
(megabytes each) are not kept. A file is written whole or not at all (temp file, rename); one that exists is never
rewritten, so a trace run resumes where it stopped.

How a Chrome trace (``torch.profiler``'s ``export_chrome_trace``) is read: steps are the host's ``ProfilerStep#N``
annotations; a kernel belongs to the step whose host interval holds the runtime call that launched it (matched by
``correlation`` id; a kernel without one, by its own start); kernels launched from a thread other than the step's
(the autograd engine's) are counted as ``kernels_autograd``. Host time is the step's wall time less the time its
thread spent in ``cuda*Synchronize`` calls (waiting for the GPU is not launching); both are kept.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupred.errors import GpupredError

SCHEMA_VERSION = 1
TRACES = "traces"  # the sub-folder of a sweep folder
# op class -> pattern on the lower-cased kernel name; the first match wins: fused optimizers and attention before the
# GEMMs inside them, normalizations and RNN steps before cuDNN's other kernels, cuDNN's implicit-GEMM convolutions
# (fprop, dgrad, wgrad) before GEMMs, copies and casts before the elementwise kernels that run them
OP_CLASS_PATTERNS: tuple[tuple[str, str], ...] = (
    ("optimizer", r"multi_tensor_apply|foreach|fused_adam|fusedadam|fused_sgd|_fused_"),
    ("attention", r"flash|fmha|attention|sdpa|mem_eff"),
    ("norm", r"norm|welford|bn_fw|bn_bw"),
    ("rnn", r"lstm|\bgru|rnn"),
    ("conv", r"conv|fprop|dgrad|wgrad|winograd|implicit_convolve|cudnn::|precomputed|fft"),
    ("gemm", r"gemm|gemv|cutlass|cublas|xmma|nvjet|matmul|splitkreduce"),
    ("softmax", r"softmax"),
    ("pool", r"pool"),
    ("reduce", r"reduce|sum_|_sum|mean|argmax|nll_loss|cross_entropy"),
    ("copy", r"copy|cast|convert|catarray|cat_|transpose|permute|index|gather|scatter|embedding|pad"),
    ("fill", r"fill|zero"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|activation|relu|gelu|sigmoid|tanh|dropout|mul|add"),
)
OP_CLASSES: tuple[str, ...] = (*(c for c, _ in OP_CLASS_PATTERNS), "other")
_COMPILED = tuple((c, re.compile(p)) for c, p in OP_CLASS_PATTERNS)
SYNC_CALL = re.compile(r"^cuda\w*Synchronize$")
IDENTITY_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("schema_version", pa.int32()), ("workload_id", pa.string()), ("family", pa.string()), ("spec_json", pa.string()),
    ("sweep_id", pa.string()), ("status", pa.string()),  # ok, oom, error (a failed spec: one row, step -1)
    ("message", pa.string()), ("step", pa.int32()), ("warmup_steps", pa.int32()), ("gpu_name", pa.string()),
    ("gpu_uuid", pa.string()), ("driver_version", pa.string()), ("cuda_version", pa.string()),
    ("torch_version", pa.string()), ("gpupred_version", pa.string()), ("host_cpu", pa.string()),
    ("started_at", pa.string()),
)
STEP_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("step_wall_s", pa.float64()),  # the ProfilerStep's host interval (a sync per step, as the sweeps run)
    ("sync_wait_s", pa.float64()),  # of which in cuda*Synchronize calls on the step's thread
    ("host_busy_s", pa.float64()),  # step_wall_s - sync_wait_s: the host's own time
    ("gpu_busy_s", pa.float64()),  # union of the step's kernel intervals
    ("kernel_sum_s", pa.float64()),  # sum of its kernel durations (> busy when streams overlap)
    ("kernels", pa.int32()), ("kernels_autograd", pa.int32()),  # launched from another thread (autograd's engine)
    ("memcpy", pa.int32()), ("memset", pa.int32()),
)
TRACE_SCHEMA = pa.schema([*IDENTITY_COLUMNS, *STEP_COLUMNS,
                          *[(f"kernels_{c}", pa.int32()) for c in OP_CLASSES],
                          *[(f"kernel_s_{c}", pa.float64()) for c in OP_CLASSES]])


def op_class(kernel_name: str) -> str:
    """The op class (``OP_CLASSES``) of a CUDA kernel, from its name."""
    name = kernel_name.lower()
    return next((c for c, pattern in _COMPILED if pattern.search(name)), "other")


def load_trace(trace: str | Path | dict[str, Any]) -> list[dict[str, Any]]:
    """The ``traceEvents`` of a Chrome trace (a dict, a .json or a .json.gz file)."""
    if isinstance(trace, dict):
        data = trace
    else:
        path = Path(trace)
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            data = json.loads(raw)
        except (OSError, ValueError) as err:
            raise GpupredError(f"{path}: not a readable Chrome trace ({type(err).__name__}: {err})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise GpupredError(f"{trace if not isinstance(trace, dict) else 'trace'}: no traceEvents list; export it with "
                           "torch.profiler's export_chrome_trace")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals, in their unit."""
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return float(total)


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The host's ProfilerStep intervals, in time order."""
    steps = [e for e in events if re.fullmatch(r"ProfilerStep#\d+", str(e.get("name", "")))
             and not str(e.get("cat", "")).startswith("gpu")]
    return sorted(steps, key=lambda e: float(e["ts"]))


def _step_of(t: float, starts: np.ndarray, ends: np.ndarray) -> int:
    """The index of the step whose host interval holds time ``t`` (-1: none)."""
    i = int(np.searchsorted(starts, t, side="right")) - 1
    return i if i >= 0 and t <= ends[i] else -1


def _device_events(events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[int, list[tuple[dict, bool]]]:
    """Per step index, its kernels, copies and fills, each with whether another thread than the step's launched it."""
    launches = {e.get("args", {}).get("correlation"): e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    starts = np.array([float(s["ts"]) for s in steps])
    ends = starts + np.array([float(s.get("dur", 0.0)) for s in steps])
    out: dict[int, list[tuple[dict, bool]]] = {i: [] for i in range(len(steps))}
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = launches.get(e.get("args", {}).get("correlation"))
        i = _step_of(float(launch["ts"]) if launch is not None else float(e["ts"]), starts, ends)
        if i >= 0:
            other = launch is not None and launch.get("tid") != steps[i].get("tid")
            out[i].append((e, other))
    return out


def _sync_wait_us(events: list[dict[str, Any]], step: dict[str, Any]) -> float:
    """Microseconds the step's thread spent in cuda*Synchronize calls inside the step."""
    a, b, tid = float(step["ts"]), float(step["ts"]) + float(step.get("dur", 0.0)), step.get("tid")
    return float(sum(float(e.get("dur", 0.0)) for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                     and e.get("tid") == tid and SYNC_CALL.match(str(e.get("name", ""))) and a <= float(e["ts"]) <= b))


def step_row(step: dict[str, Any], device: list[tuple[dict, bool]], sync_us: float) -> dict[str, Any]:
    """One step's ``STEP_COLUMNS`` and per-class columns (seconds)."""
    kernels = [(e, other) for e, other in device if e.get("cat") == "kernel"]
    wall = float(step.get("dur", 0.0)) / 1e6
    row: dict[str, Any] = {
        "step_wall_s": wall, "sync_wait_s": sync_us / 1e6, "host_busy_s": max(0.0, wall - sync_us / 1e6),
        "gpu_busy_s": busy_seconds([(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e, _ in kernels]) / 1e6,
        "kernel_sum_s": sum(float(e.get("dur", 0.0)) for e, _ in kernels) / 1e6, "kernels": len(kernels),
        "kernels_autograd": sum(1 for _, other in kernels if other),
        "memcpy": sum(1 for e, _ in device if e.get("cat") == "gpu_memcpy"),
        "memset": sum(1 for e, _ in device if e.get("cat") == "gpu_memset")}
    for c in OP_CLASSES:
        row[f"kernels_{c}"], row[f"kernel_s_{c}"] = 0, 0.0
    for e, _ in kernels:
        c = op_class(str(e.get("name", "")))
        row[f"kernels_{c}"] += 1
        row[f"kernel_s_{c}"] += float(e.get("dur", 0.0)) / 1e6
    return row


def summarize_trace(trace: str | Path | dict[str, Any]) -> list[dict[str, Any]]:
    """One record per ``ProfilerStep`` of a Chrome trace: ``step`` (0, 1, ... in time order) and the step columns."""
    events = load_trace(trace)
    steps = _steps(events)
    if not steps:
        raise GpupredError("trace has no ProfilerStep#N annotations; profile with a schedule and call prof.step() "
                           "after every training step")
    device = _device_events(events, steps)
    return [{"step": i, **step_row(s, device[i], _sync_wait_us(events, s))} for i, s in enumerate(steps)]


def trace_path(sweep_dir: Path, workload_id: str) -> Path:
    """Where one workload's trace summary lives in a sweep folder."""
    return Path(sweep_dir) / TRACES / f"{workload_id}.parquet"


def trace_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (identity and step columns; class columns default to 0) as a ``TRACE_SCHEMA`` table."""
    defaults = {f"kernels_{c}": 0 for c in OP_CLASSES} | {f"kernel_s_{c}": 0.0 for c in OP_CLASSES}
    full = [{**defaults, **r, "schema_version": SCHEMA_VERSION} for r in rows]
    missing = [n for n in TRACE_SCHEMA.names if any(n not in r for r in full)]
    if missing:
        raise GpupredError(f"trace rows lack columns {missing[:5]} of gpupred.traces.tracetable.TRACE_SCHEMA")
    return pa.Table.from_pylist([{n: r[n] for n in TRACE_SCHEMA.names} for r in full], schema=TRACE_SCHEMA)


def write_traces(sweep_dir: Path, workload_id: str, rows: list[dict[str, Any]]) -> Path:
    """Write one workload's trace summary atomically; an existing one is never rewritten."""
    from gpupred.profile.store import atomic_write_parquet

    path = trace_path(sweep_dir, workload_id)
    if path.exists():
        raise GpupredError(f"{path}: already written; measurements are never rewritten")
    atomic_write_parquet(trace_table(rows), path)
    return path


def read_traces(root: Path) -> pd.DataFrame:
    """Every trace summary under ``root`` (a sweep folder or a tree of them), checked against ``TRACE_SCHEMA``."""
    import pyarrow.parquet as pq

    from gpupred.files import TMP_PREFIX

    frames = []
    for path in sorted(Path(root).rglob(f"{TRACES}/*.parquet")):
        if path.name.startswith(TMP_PREFIX):
            continue
        try:
            table = pq.read_table(path)
        except Exception as err:  # pyarrow raises several types for a damaged file
            raise GpupredError(f"{path}: not a readable parquet file ({type(err).__name__})") from None
        missing = [n for n in TRACE_SCHEMA.names if n not in table.column_names]
        if missing:
            raise GpupredError(f"{path}: missing columns {missing[:5]} of gpupred.traces.tracetable.TRACE_SCHEMA")
        frames.append(table.select(TRACE_SCHEMA.names).to_pandas().assign(sweep_dir=str(path.parent.parent)))
    if not frames:
        return pd.DataFrame(columns=[*TRACE_SCHEMA.names, "sweep_dir"])
    return pd.concat(frames, ignore_index=True)
