"""The raw-data contract: what a sweep folder holds, written by the profiler, read by the dataset.

A sweep folder ``data/raw/<gpu>/<sweep-id>/`` holds::

    manifest.json               sweep settings and progress, as of the first sweep session (written by the sweep)
    manifest-NNN.json           the same, as of session NNN: a resumed sweep never rewrites an earlier file
    README.md, README-NNN.md    the data card of that manifest (``gpupred datacard --write``, notes by a person)
    runs/<group_id>.parquet     one row per job of one run unit (RUN_SCHEMA); present = finished
    samples/<group_id>.parquet  the unit's NVML samples, long format (SAMPLE_SCHEMA)

A run unit is a solo run (one row, ``group_id == run_id``) or a co-located group (one row per member,
``run_id == f"{group_id}.m{member}"``). The samples file is written first and the runs file last, each
atomically (temp file, fsync, rename): a unit whose runs file exists is whole. ``t_s`` is seconds since
the unit started; a row's measured window is ``[window_start_s, window_end_s]`` on that clock.
This module only describes and checks; the profiler writes, the dataset builder reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpupred.errors import GpupredError

SCHEMA_VERSION = 5
# a co-located member's own failure is oom/error/timeout; the members it took down are partner_failed
STATUSES: tuple[str, ...] = ("ok", "oom", "error", "timeout", "partner_failed")
FAILED_STATUSES: tuple[str, ...] = ("oom", "error", "timeout")
SYNC_MODES: tuple[str, ...] = ("step", "window", "kernel")  # see RUN_SCHEMA's ``sync``

RUN_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("run_id", pa.string()),
        ("group_id", pa.string()),
        ("group_size", pa.int32()),  # 1 for a solo run
        ("member", pa.int32()),  # 0..group_size-1
        ("sweep_id", pa.string()),
        ("workload_id", pa.string()),
        ("family", pa.string()),
        ("spec_json", pa.string()),  # WorkloadSpec.to_json()
        ("status", pa.string()),  # one of STATUSES
        ("message", pa.string()),  # error / OOM text, "" when ok
        ("simulated", pa.bool_()),  # True for --dry-run output (CPU, fake NVML): never data
        ("host_batches", pa.bool_()),  # batches copied from host every step instead of resident
        # "step": synchronize after every step (like a script reading the loss each step), iteration times
        # from host timestamps; "window": no per-step sync, iteration times from CUDA events, one
        # synchronize at the end of the window; "kernel": as "step", under CUDA_LAUNCH_BLOCKING=1 (every launch
        # waits for its kernel: the protocol of Lucid's published runs), checked in the child before it builds
        ("sync", pa.string()),
        # how the batches reached the GPU: '' for a resident batch (and every file before schema 4), else the JSON
        # of gpupred.setups.InputPipeline's options that differ from resident (gpupred.setups.pipeline_from_json
        # reads it); a real torch DataLoader over synthetic files fed each step (gpupred.profile.feed)
        ("pipeline", pa.string()),
        # how every member trained: '' for its workload id's own setup (and every file before schema 5), else the
        # JSON of gpupred.setups.TrainingSetup's options that differ from the defaults (gpupred.setups.setup_from_json
        # reads it): a fine-tune unit (plan-line setup options, gpupred.workloads.finetuning)
        ("setup", pa.string()),
        ("gpu_name", pa.string()),
        ("gpu_uuid", pa.string()),
        ("gpu_sm_count", pa.int32()),
        ("gpu_memory_total_mib", pa.float64()),
        ("driver_version", pa.string()),
        ("cuda_version", pa.string()),
        ("torch_version", pa.string()),
        ("gpupred_version", pa.string()),
        ("host", pa.string()),
        ("started_at", pa.string()),  # ISO 8601, UTC
        ("warmup_s", pa.float64()),
        ("warmup_iters", pa.int32()),
        ("window_start_s", pa.float64()),
        ("window_end_s", pa.float64()),
        ("n_iters", pa.int32()),  # iterations in the measured window
        ("iter_times_s", pa.list_(pa.float64())),
        ("iter_time_mean_s", pa.float64()),
        ("iter_time_median_s", pa.float64()),
        ("samples_per_s", pa.float64()),  # training examples per second (x fused copies)
        # torch's peaks over the job's whole life, warm-up included: cuDNN autotuning (cudnn.benchmark) borrows a
        # large workspace in the first iterations and hands it back before the window, so these can exceed
        # what the process holds in the window several times over (a conv net's memory label is not these)
        ("torch_peak_allocated_mib", pa.float64()),
        ("torch_peak_reserved_mib", pa.float64()),
        # torch's reserved memory at the end of the measured window: the caching allocator only grows between
        # cache releases, so this is what the job's allocator held in the window (schema 3; NaN before)
        ("torch_window_reserved_mib", pa.float64()),
        # device memory used (NVML) just before the unit's children touched the GPU, with no compute process
        # on it if NVML could tell; NaN when unknown. Solo memory label = device peak in window - this.
        ("mem_baseline_mib", pa.float64()),
        # memory a bare CUDA context takes on this GPU (device delta of a child that only initializes CUDA,
        # minus torch's reserved bytes), measured once per sweep session; NaN when not measured (dry runs)
        ("cuda_context_mib", pa.float64()),
        # driver-reserved device memory (NVML v2 memory query); NaN where only the v1 query works, in
        # which case mem_used_mib includes it
        ("memory_reserved_mib", pa.float64()),
        ("sampler_interval_ms", pa.float64()),
        ("buffered_supported", pa.bool_()),
        ("gpm_supported", pa.bool_()),
        ("notes", pa.string()),  # profiler notes: metrics dropped as unsupported, device mismatches; "" if none
    ]
)

# columns added after the first real sweeps -> the schema version that added them; files written before
# lack them and read as missing values (every other column of RUN_SCHEMA is required)
ADDED_RUN_COLUMNS: dict[str, int] = {"torch_window_reserved_mib": 3, "pipeline": 4, "setup": 5}

SAMPLE_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("t_s", pa.float64()),
        ("metric", pa.string()),  # one of METRICS
        ("value", pa.float64()),
        ("member", pa.int32()),  # -1 device-wide; else the member whose process this is (proc_mem_mib)
        ("source", pa.string()),  # "poll", "buffered" (NVML sample buffer) or "gpm"
    ]
)

# metric name -> unit. Device-wide unless noted.
METRICS: dict[str, str] = {
    "gpu_util": "%",  # nvmlDeviceGetUtilizationRates().gpu: time a kernel was running
    "mem_util": "%",  # memory-controller busy
    "mem_used_mib": "MiB",  # NVML v2: excludes driver-reserved memory; v1: includes it
    "mem_reserved_mib": "MiB",  # NVML v2 only
    "power_w": "W",
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "temp_c": "C",
    "pcie_tx_kib_s": "KiB/s",
    "pcie_rx_kib_s": "KiB/s",
    "throttle_reasons": "bitmask",
    "sm_active": "%",  # GPM (Hopper)
    "sm_occupancy": "%",  # GPM
    "tensor_active": "%",  # GPM, any tensor pipe
    "dram_bw_util": "%",  # GPM
    "proc_mem_mib": "MiB",  # per member process
}


def unit_paths(sweep_dir: Path, group_id: str) -> tuple[Path, Path]:
    """Where one run unit's runs and samples files live."""
    return sweep_dir / "runs" / f"{group_id}.parquet", sweep_dir / "samples" / f"{group_id}.parquet"


def sweep_dirs(root: Path) -> list[Path]:
    """Every sweep folder (one holding ``runs/``) under ``root``, sorted."""
    if not root.exists():
        return []
    return sorted(p.parent for p in root.rglob("runs") if p.is_dir())


def _read_table(path: Path, schema: pa.Schema, added: Mapping[str, int] | None = None) -> pd.DataFrame:
    """The file's columns of ``schema``; a column of ``added`` (name -> schema version) that it lacks reads as nulls."""
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise GpupredError(f"{path}: not a readable parquet file ({type(err).__name__}: {err})") from None
    missing = [n for n in schema.names if n not in table.column_names]
    required = [n for n in missing if n not in (added or {})]
    if required:
        raise GpupredError(f"{path}: missing columns {required} of the raw-data contract (gpupred.profile.schema)")
    for name in missing:
        table = table.append_column(schema.field(name), pa.nulls(len(table), schema.field(name).type))
    return table.select(schema.names).to_pandas()


def read_runs(root: Path) -> pd.DataFrame:
    """All run rows of every sweep under ``root`` (a sweep folder or a tree of them), checked."""
    frames = []
    for sweep in sweep_dirs(root):
        for path in sorted((sweep / "runs").glob("*.parquet")):
            df = _read_table(path, RUN_SCHEMA, ADDED_RUN_COLUMNS)
            bad = set(df["status"]) - set(STATUSES)
            if bad:
                raise GpupredError(f"{path}: unknown status {sorted(bad)}; expected one of {STATUSES}")
            df["sweep_dir"] = str(sweep)
            frames.append(df)
    if not frames:
        return pd.DataFrame(columns=[*RUN_SCHEMA.names, "sweep_dir"])
    return pd.concat(frames, ignore_index=True)


def run_setups(runs: pd.DataFrame) -> pd.Series:
    """Each run's ``setup`` as text: '' for its workload id's own setup, and for every run of a file written before
    schema 5 (a frame without the column)."""
    if "setup" not in runs.columns:
        return pd.Series("", index=runs.index, dtype=object)
    return runs["setup"].fillna("").astype(str)


def read_samples(sweep_dir: Path, group_ids: list[str] | None = None) -> pd.DataFrame:
    """The samples of the given run units of one sweep folder (all units if None), checked."""
    folder = sweep_dir / "samples"
    paths = sorted(folder.glob("*.parquet")) if group_ids is None else [folder / f"{g}.parquet" for g in group_ids]
    frames = []
    for path in paths:
        if not path.exists():
            raise GpupredError(f"{path}: samples file missing for a finished run")
        frames.append(_read_table(path, SAMPLE_SCHEMA))
    if not frames:
        return pd.DataFrame(columns=SAMPLE_SCHEMA.names)
    return pd.concat(frames, ignore_index=True)
