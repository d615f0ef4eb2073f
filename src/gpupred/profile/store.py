"""Writing a sweep folder: each unit atomically (samples, then runs), the manifest, and reading it back.

A unit is finished when its runs file exists. Files are written to a temporary name in the same
folder, flushed, fsync'd and renamed, then the folder is fsync'd: a SIGKILL at any instant leaves a
unit whole or absent (a samples file without its runs file is from an unfinished unit and is
overwritten by the rerun; stray temporary files are removed on the next start).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpupred.errors import GpupredError
from gpupred.files import TMP_PREFIX, atomic_write, read_json_object
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA, read_runs, read_samples, unit_paths

MANIFEST = "manifest.json"
MANIFEST_NUMBERED = re.compile(r"manifest-(\d{3,})\.json")


def atomic_write_parquet(table: pa.Table, path: Path) -> None:
    """Write a parquet file (zstd) atomically: temp file, fsync, rename, fsync the folder."""
    atomic_write(path, lambda fh: pq.write_table(table, fh, compression="zstd", compression_level=9))


def atomic_write_json(obj: Any, path: Path) -> None:
    """Write a JSON file atomically."""
    atomic_write(path, lambda fh: fh.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()))


def finished_units(sweep_dir: Path) -> set[str]:
    """Group ids whose runs file exists."""
    folder = sweep_dir / "runs"
    if not folder.is_dir():
        return set()
    return {p.name[: -len(".parquet")] for p in folder.glob("*.parquet") if not p.name.startswith(TMP_PREFIX)}


def clean_temporaries(sweep_dir: Path) -> int:
    """Remove temporary files left by a killed writer; return how many."""
    n = 0
    for sub in ("runs", "samples", "."):
        folder = sweep_dir / sub
        if folder.is_dir():
            for p in folder.glob(TMP_PREFIX + "*"):
                p.unlink(missing_ok=True)
                n += 1
    return n


def write_unit(sweep_dir: Path, group_id: str, runs: pa.Table, samples: pa.Table) -> None:
    """Write one finished unit: samples first, runs last; an existing runs file is never rewritten."""
    runs_path, samples_path = unit_paths(sweep_dir, group_id)
    if runs_path.exists():
        raise GpupredError(f"{runs_path}: unit already finished; measurements are never rewritten")
    if runs.schema != RUN_SCHEMA or samples.schema != SAMPLE_SCHEMA:
        raise GpupredError(f"unit {group_id}: tables do not follow gpupred.profile.schema")
    atomic_write_parquet(samples, samples_path)
    atomic_write_parquet(runs, runs_path)


def now_utc() -> str:
    """ISO 8601 UTC timestamp."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def manifest_path(sweep_dir: Path, session: int) -> Path:
    """The file sweep session ``session`` (1-based) writes: the first ``manifest.json``, each later one its own
    ``manifest-NNN.json``. A resumed sweep never rewrites a file an earlier session wrote (raw data is never
    edited); each file is the whole manifest as of its session, so the newest one says everything."""
    return sweep_dir / (MANIFEST if session <= 1 else f"manifest-{session:03d}.json")


def manifest_session(path: Path) -> int | None:
    """The session that wrote a manifest file (:func:`manifest_path` reversed); None if it is not one."""
    numbered = MANIFEST_NUMBERED.fullmatch(path.name)
    return int(numbered.group(1)) if numbered else 1 if path.name == MANIFEST else None


def manifest_paths(sweep_dir: Path) -> list[Path]:
    """The sweep's manifest files (:func:`manifest_path`), oldest session first."""
    paths = [p for p in sweep_dir.glob("manifest*.json") if manifest_session(p) is not None]
    return sorted(paths, key=lambda p: manifest_session(p) or 0)


def latest_manifest_path(sweep_dir: Path) -> Path | None:
    """The newest manifest file of the sweep, or None if there is none yet."""
    paths = manifest_paths(sweep_dir)
    return paths[-1] if paths else None


def read_manifest(sweep_dir: Path) -> dict[str, Any] | None:
    """The sweep's newest manifest, or None if there is none yet."""
    path = latest_manifest_path(sweep_dir)
    if path is None:
        return None
    return read_json_object(path, "move it away to restart the manifest")


def write_manifest(sweep_dir: Path, manifest: dict[str, Any]) -> None:
    """Write this session's manifest file atomically (:func:`manifest_path`), stamping ``updated``."""
    manifest["updated"] = now_utc()
    atomic_write_json(manifest, manifest_path(sweep_dir, len(manifest.get("sessions", []))))


def window_samples(runs: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """The samples inside each run's measured window, device-wide or its own member's, keyed by ``run_id``."""
    win = runs[["run_id", "group_id", "member", "window_start_s", "window_end_s"]]
    s = samples.merge(win, on="group_id", suffixes=("", "_run"))
    keep = s["t_s"].between(s["window_start_s"], s["window_end_s"]) & ((s["member"] == -1) | (s["member"] == s["member_run"]))
    return s[keep]


def window_means(sweep_dir: Path, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run: the mean of each device-wide metric (poll and gpm sources) over its measured window."""
    runs = read_runs(sweep_dir) if runs is None else runs
    if runs.empty:
        return pd.DataFrame(columns=["run_id"])
    s = window_samples(runs, read_samples(sweep_dir, sorted(set(runs["group_id"]))))
    s = s[s["source"].isin(["poll", "gpm"])]
    means = s.pivot_table(index="run_id", columns="metric", values="value", aggfunc="mean")
    means.columns.name = None
    return means.reindex(runs["run_id"]).reset_index()


def window_means_all(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (from read_runs, any number of sweeps) joined with their window means per metric."""
    frames = []
    for sweep_dir in sorted({str(d) for d in runs["sweep_dir"]}):
        frames.append(window_means(Path(sweep_dir), runs[runs["sweep_dir"].astype(str) == sweep_dir]))
    means = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_id"])
    return runs.merge(means, on="run_id", how="left")


def host_profile_path(sweep_dir: Path, host: str) -> Path:
    """Where the host profile of the machine ``host`` (its name, as the run rows' ``host`` column has it) lies beside
    a sweep's runs: ``host-profile-<host>.json`` (``gpupred loader bench --out``, once per machine, by the campaign's
    input-pipeline stage)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(host)).strip("-.") or "host"
    return Path(sweep_dir) / f"host-profile-{name}.json"
