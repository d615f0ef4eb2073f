"""Job traces for the simulator: Poisson arrivals over a per-workload table, or a Philly/Helios-style CSV.

A per-workload table (:data:`WORKLOAD_COLUMNS`) says, for each workload a job may be, its *measured*
solo utilization and memory (the truth the simulator runs on) and the predictor's out-of-fold point
predictions and interval upper bounds (what policies know). :func:`gpupred.sim.world.build_world`
makes it from measured solo jobs; tests pass fixtures. ``iter_time_s`` (solo iteration time) is optional:
where known, synthetic durations are whole iterations.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.sim.cluster import JOB_COLUMNS

WORKLOAD_COLUMNS: tuple[str, ...] = (
    "workload_id",
    "true_util",  # measured solo GPU utilization, %
    "true_mem_mib",  # measured solo GPU memory
    "pred_util",  # out-of-fold point prediction
    "pred_util_high",  # its interval's upper bound
    "pred_mem_mib",
    "pred_mem_mib_high",
)

# Accepted CSV column names (lower-case) for each field of a job-trace CSV (Philly / Helios exports).
CSV_ALIASES: dict[str, tuple[str, ...]] = {
    "job_id": ("job_id", "jobid", "id", "job"),
    "submit": ("submit_time", "submitted_time", "submit", "submit_s", "arrival_s", "timestamp"),
    "duration": ("duration", "duration_s", "run_time", "runtime", "elapsed"),
    "gpus": ("gpu_num", "num_gpus", "gpus", "gpu_count", "gpu"),
}


def check_workload_table(table: pd.DataFrame, source: str = "workload table") -> pd.DataFrame:
    """The table, reset and checked: every column present, no NaN, positive iteration times where given."""
    missing = [c for c in WORKLOAD_COLUMNS if c not in table.columns]
    if missing:
        raise GpupredError(f"{source}: missing columns {missing} (expected {list(WORKLOAD_COLUMNS)})")
    if table.empty:
        raise GpupredError(f"{source}: no workloads")
    num = table[list(WORKLOAD_COLUMNS[1:])]
    if num.isna().any().any():
        raise GpupredError(f"{source}: NaN in {[c for c in num if num[c].isna().any()]}")
    if "iter_time_s" in table.columns and (table["iter_time_s"] <= 0).any():
        raise GpupredError(f"{source}: iteration times must be positive")
    return table.reset_index(drop=True)


def jobs_from(table: pd.DataFrame, kind: np.ndarray, arrival_s: np.ndarray, work_s: np.ndarray,
              job_id: np.ndarray | None = None) -> pd.DataFrame:
    """A simulator job table: each job takes its workload's (``kind``) attributes from ``table``."""
    kind = np.asarray(kind, dtype=np.int64)
    w = table.iloc[kind]
    jobs = pd.DataFrame(
        {
            "job_id": np.asarray(job_id) if job_id is not None else np.arange(len(kind)).astype(str),
            "arrival_s": np.asarray(arrival_s, dtype=float),
            "work_s": np.asarray(work_s, dtype=float),
            "kind": kind,
            "workload_id": w["workload_id"].to_numpy(),
            **{c: w[c].to_numpy(dtype=float) for c in JOB_COLUMNS[4:]},
        }
    )
    return jobs


def synthetic_trace(table: pd.DataFrame, n_jobs: int, n_gpus: int, load: float = 0.8, seed: int = 0,
                    median_duration_s: float = 1800.0, duration_sigma: float = 1.0) -> pd.DataFrame:
    """``n_jobs`` jobs over the table's workloads with Poisson arrivals at ``load`` x ``n_gpus`` GPUs' worth."""
    table = check_workload_table(table)
    if load <= 0 or n_jobs < 1 or n_gpus < 1:
        raise GpupredError(f"synthetic trace needs load > 0, n_jobs >= 1, n_gpus >= 1 (got {load}, {n_jobs}, {n_gpus})")
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, len(table), size=n_jobs)
    work = rng.lognormal(np.log(median_duration_s), duration_sigma, size=n_jobs)
    if "iter_time_s" in table.columns:  # whole iterations where the solo iteration time is known
        it = table["iter_time_s"].to_numpy(float)[kind]
        known = np.isfinite(it)
        work[known] = np.maximum(1, np.round(work[known] / it[known])) * it[known]
    rate = load * n_gpus / float(work.mean())  # jobs per second keeping `load` GPUs' worth of solo work arriving
    arrival = np.cumsum(rng.exponential(1.0 / rate, size=n_jobs))
    arrival -= arrival[0]
    return jobs_from(table, kind, arrival, work)


def _column(cols: dict[str, str], field: str, path: Path) -> str:
    for alias in CSV_ALIASES[field]:
        if alias in cols:
            return cols[alias]
    raise GpupredError(f"{path}: no {field} column (one of {', '.join(CSV_ALIASES[field])})")


def load_trace_csv(path: str | Path, table: pd.DataFrame, multi_gpu: str = "drop", seed: int = 0) -> pd.DataFrame:
    """Jobs of a Philly/Helios-style CSV (job id, submit time, duration, GPU count) mapped onto the table's workloads.

    Each job becomes the workload ``crc32("<seed>:<job id>") mod len(table)`` (deterministic for a seed; the
    seeds give the spread); its work is its duration.
    Jobs using several GPUs are dropped (``multi_gpu="drop"``) or split into single-GPU jobs (``"split"``);
    zero-GPU (CPU) jobs are dropped.
    """
    path = Path(path)
    table = check_workload_table(table)
    if multi_gpu not in ("drop", "split"):
        raise GpupredError(f"multi_gpu={multi_gpu!r}: use 'drop' or 'split'")
    if not path.is_file():
        raise GpupredError(f"{path}: trace CSV not found")
    try:
        df = pd.read_csv(path)
    except Exception as err:  # pandas raises several types for a bad file
        raise GpupredError(f"{path}: not a readable CSV ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
    if df.empty:
        raise GpupredError(f"{path}: no jobs")
    cols = {str(c).strip().lower(): c for c in df.columns}
    c_id, c_sub, c_dur, c_gpu = (_column(cols, f, path) for f in ("job_id", "submit", "duration", "gpus"))
    sub = pd.to_numeric(df[c_sub], errors="coerce")
    if sub.isna().any():  # timestamps as dates
        try:
            dt = pd.to_datetime(df[c_sub], utc=True)
            sub = (dt - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
        except (ValueError, TypeError):
            row = int(np.flatnonzero(sub.isna())[0])
            raise GpupredError(f"{path}: {c_sub!r} row {row + 2}: {df[c_sub].iloc[row]!r} is neither seconds nor a date") from None
    dur = pd.to_numeric(df[c_dur], errors="coerce")
    gpus = pd.to_numeric(df[c_gpu], errors="coerce")
    for name, series in ((c_dur, dur), (c_gpu, gpus)):
        bad = series.isna() | (series < 0)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise GpupredError(f"{path}: {name!r} row {row + 2}: {df[name].iloc[row]!r} is not a non-negative number")
    keep = (gpus >= 1) & (dur > 0)
    if multi_gpu == "drop":
        keep &= gpus == 1
    ids = df[c_id].astype(str).to_numpy()[keep.to_numpy()]
    sub_s = sub.to_numpy(float)[keep.to_numpy()]
    dur_s = dur.to_numpy(float)[keep.to_numpy()]
    reps = gpus.to_numpy(np.int64)[keep.to_numpy()] if multi_gpu == "split" else np.ones(len(ids), dtype=np.int64)
    if len(ids) == 0:
        raise GpupredError(f"{path}: no single-GPU jobs with a positive duration")
    kind = np.repeat(np.array([zlib.crc32(f"{seed}:{i}".encode()) % len(table) for i in ids], dtype=np.int64), reps)
    ids = np.array([f"{i}" if r == 1 else f"{i}.g{k}" for i, r in zip(ids, reps) for k in range(r)], dtype=object)
    sub_s, dur_s = np.repeat(sub_s, reps), np.repeat(dur_s, reps)
    order = np.argsort(sub_s, kind="stable")
    arrival = sub_s[order] - sub_s[order][0]
    return jobs_from(table, kind[order], arrival, dur_s[order], ids[order])
