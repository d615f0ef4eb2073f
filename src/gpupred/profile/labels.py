"""Memory labels of measured runs, from the raw-data contract (one rule, used by the dataset, the
co-location join and the data card).

A run's GPU memory comes from the first of these sources that it has (``memory_source``):

1. ``nvml-process``: NVML's per-process figure for the run's own process, peak over its window;
2. ``device-minus-baseline`` (solo runs): device memory used, peak over the window, minus the device
   memory recorded just before the unit's child touched the GPU (``mem_baseline_mib``);
3. ``torch-reserved-plus-context``: torch's reserved memory at the end of the window
   (``torch_window_reserved_mib``; runs written before schema 3 lack it and use torch's lifetime peak
   reserved, which also counts warm-up's cuDNN autotuning workspace) plus the sweep's measured bare CUDA
   context (``cuda_context_mib``) — the only per-member figure in a co-located group, whose device
   total is shared.

Every source is what the job holds in its measured window, after warm-up. Convolutional jobs borrow a
workspace for cuDNN autotuning in their first iterations and PyTorch hands it back before the window, so
torch's lifetime peak can exceed the window's figure several times over. That transient is opportunistic
(the search settles for smaller workspaces when memory is short), so it is not the label;
:func:`transient_excess` measures it per run and the data card counts it.

A label below the measured context size cannot be a training job's memory: such a run gets a reason,
never a label.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd

MEMORY_SOURCES: tuple[str, ...] = ("nvml-process", "device-minus-baseline", "torch-reserved-plus-context")
FALLBACK_SOURCES: tuple[str, ...] = MEMORY_SOURCES[1:]


def _num(run: Mapping[str, Any], key: str) -> float:
    value = run.get(key, math.nan)
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _in_window(samples: pd.DataFrame, run: Mapping[str, Any]) -> pd.DataFrame:
    s = samples[samples["group_id"] == run["group_id"]] if "group_id" in samples else samples
    return s[(s["t_s"] >= run["window_start_s"]) & (s["t_s"] <= run["window_end_s"])]


def memory_label(run: Mapping[str, Any], samples: pd.DataFrame) -> tuple[float, str, str]:
    """(memory MiB, memory_source, reason) of one run; ``reason`` is '' for a usable label, else why not."""
    win = _in_window(samples, run)
    proc = win[(win["metric"] == "proc_mem_mib") & (win["member"] == run["member"])]["value"]
    device = win[(win["metric"] == "mem_used_mib") & (win["member"] == -1)]["value"]
    baseline, context = _num(run, "mem_baseline_mib"), _num(run, "cuda_context_mib")
    reserved = _num(run, "torch_window_reserved_mib")
    reserved = reserved if math.isfinite(reserved) else _num(run, "torch_peak_reserved_mib")
    if not proc.empty:
        memory, source = float(proc.max()), "nvml-process"
    elif int(run.get("group_size", 1)) == 1 and math.isfinite(baseline) and not device.empty:
        memory, source = float(device.max()) - baseline, "device-minus-baseline"
    elif math.isfinite(reserved) and math.isfinite(context):
        memory, source = reserved + context, "torch-reserved-plus-context"
    else:
        return math.nan, "", "no memory source (no per-process NVML, no pre-launch baseline, no measured context)"
    if math.isfinite(context) and memory < context:
        return memory, source, (f"memory label {memory:.0f} MiB ({source}) is below the measured CUDA context "
                                f"{context:.0f} MiB")
    if not memory > 0:
        return memory, source, f"memory label {memory:.0f} MiB ({source}) is not positive"
    return memory, source, ""


def memory_labels_of(runs: pd.DataFrame, samples: pd.DataFrame) -> list[tuple[float, str, str]]:
    """:func:`memory_label` of each run, in order, with the samples split by ``group_id`` once (filtering all the
    samples per run took 18 ms a run, 6 s of notebooks 06 and 07 each)."""
    if "group_id" not in samples:
        return [memory_label(run, samples) for _, run in runs.iterrows()]
    by_group = dict(tuple(samples.groupby("group_id")))
    empty = samples.iloc[:0]
    return [memory_label(run, by_group.get(run["group_id"], empty)) for _, run in runs.iterrows()]


def transient_excess(run: Mapping[str, Any], memory_mib: float) -> float:
    """How far torch's lifetime peak reserved plus the CUDA context exceeds a run's memory label, as a ratio
    minus one (0.0 when it does not; NaN when a figure is missing): memory held only outside the window."""
    peak = _num(run, "torch_peak_reserved_mib") + _num(run, "cuda_context_mib")
    if not (math.isfinite(peak) and math.isfinite(memory_mib) and memory_mib > 0):
        return math.nan
    return max(0.0, peak / memory_mib - 1.0)


def group_device_memory_mib(runs: pd.DataFrame, samples: pd.DataFrame) -> pd.Series:
    """Per co-located group (index ``group_id``): device memory peak over its members' windows minus its baseline."""
    out: dict[str, float] = {}
    for gid, rows in runs.groupby("group_id"):
        lo, hi = rows["window_start_s"].min(), rows["window_end_s"].max()
        s = samples[(samples["group_id"] == gid) & (samples["metric"] == "mem_used_mib") & (samples["member"] == -1)]
        s = s[(s["t_s"] >= lo) & (s["t_s"] <= hi)] if pd.notna(lo) and pd.notna(hi) else s
        base = float(rows["mem_baseline_mib"].iloc[0]) if "mem_baseline_mib" in rows else math.nan
        out[str(gid)] = float(s["value"].max()) - base if len(s) and math.isfinite(base) else math.nan
    return pd.Series(out, name="group_memory_mib", dtype=float)
