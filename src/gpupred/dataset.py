"""The learning dataset: one row per ok solo run, labels from its measured window + graph + GPU features.

Contract of ``data/processed/dataset.parquet`` (checked by :func:`validate_dataset`):

- ``ID_COLUMNS``: run and workload identity (``family`` is the leave-one-family-out group,
  ``gpu`` the short GPU model name of :mod:`gpupred.hardware`);
- ``LABEL_COLUMNS``: steady-state labels (``gpu_util`` and ``memory_mib`` never missing; ``sm_active``
  and ``gpu_util_buffered`` NaN where not recorded);
- features: the graph features (``gpupred.graph.FEATURE_KEYS``), ``HARDWARE_COLUMNS`` and
  ``ENCODED_COLUMNS``; :func:`feature_columns` lists them in order.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.hardware import HARDWARE_COLUMNS, gpu_spec, hardware_features
from gpupred.pipeline import MissingInput

DATASET_VERSION = 1

ID_COLUMNS: tuple[str, ...] = (
    "run_id", "sweep_id", "workload_id", "arch_key", "family", "arch", "precision", "optimizer", "fused",
    "gpu_name", "gpu", "sync",
)
LABEL_COLUMNS: tuple[str, ...] = (
    "gpu_util",  # % NVML utilization, mean of polled samples in the window
    "gpu_util_buffered",  # % mean of NVML's own sample buffer in the window (NaN if unsupported)
    "sm_active",  # % GPM SM activity mean (NaN where not recorded)
    "memory_mib",  # the run's GPU memory, MiB (gpupred.profile.labels: memory_source says from what)
    "torch_peak_reserved_mib",
    "torch_peak_allocated_mib",
    "iter_time_mean_s",
    "samples_per_s",
)
META_COLUMNS: tuple[str, ...] = ("memory_source", "gpu_memory_total_mib", "n_samples", "cuda_context_mib")
ENCODED_COLUMNS: tuple[str, ...] = ("is_bf16", "is_adam")
REQUIRED_LABELS: tuple[str, ...] = ("gpu_util", "memory_mib")
FEATURE_ID_COLUMNS: tuple[str, ...] = (
    "workload_id", "arch_key", "family", "arch", "precision", "optimizer", "fused", "unknown_op_types",
)


def _graph_keys(features: pd.DataFrame) -> list[str]:
    """The graph feature columns: ``gpupred.graph.FEATURE_KEYS`` when importable, else the numeric columns."""
    try:
        from gpupred.graph import FEATURE_KEYS  # light: no torch

        keys = list(FEATURE_KEYS)
    except ImportError:
        keys = [c for c in features.columns if c not in FEATURE_ID_COLUMNS and pd.api.types.is_numeric_dtype(features[c])]
    missing = [k for k in keys if k not in features.columns]
    if missing:
        raise GpupredError(f"graph features lack columns {missing}: rebuild {config.GRAPH_FEATURES} (notebook 02)")
    return keys


def encode(precision: str, optimizer: str) -> dict[str, float]:
    """The ``ENCODED_COLUMNS`` for a precision and optimizer."""
    return {"is_bf16": float(precision == "bf16"), "is_adam": float(optimizer == "adam")}


def feature_columns(df: pd.DataFrame) -> list[str]:
    """The model input columns of a dataset frame, in order: graph features, hardware, encodings."""
    skip = set(ID_COLUMNS) | set(LABEL_COLUMNS) | set(META_COLUMNS) | set(FEATURE_ID_COLUMNS) | {"batch_size_spec"}
    tail = [*HARDWARE_COLUMNS, *ENCODED_COLUMNS]
    graph = [c for c in df.columns if c not in skip and c not in tail and pd.api.types.is_numeric_dtype(df[c])]
    return graph + [c for c in tail if c in df.columns]


def _window_labels(row: pd.Series, samples: pd.DataFrame) -> tuple[dict[str, float], str]:
    """Labels of one solo run from its samples; returns (labels, exclusion reason or '')."""
    from gpupred.profile.labels import memory_label

    s = samples[samples["group_id"] == row["group_id"]]
    win = s[(s["t_s"] >= row["window_start_s"]) & (s["t_s"] <= row["window_end_s"])]
    util = win[(win["metric"] == "gpu_util") & (win["source"] == "poll")]["value"]
    if util.empty:
        return {}, "no gpu_util samples in window"
    buffered = win[(win["metric"] == "gpu_util") & (win["source"] == "buffered")]["value"]
    sm = win[win["metric"] == "sm_active"]["value"]
    memory, source, reason = memory_label(row, s)
    if reason:
        return {}, reason
    labels = {
        "gpu_util": float(util.mean()),
        "gpu_util_buffered": float(buffered.mean()) if not buffered.empty else np.nan,
        "sm_active": float(sm.mean()) if not sm.empty else np.nan,
        "memory_mib": memory,
        "memory_source": source,
        "n_samples": float(len(util)),
    }
    return labels, ""


def _read_features(features: pd.DataFrame | Path | None) -> pd.DataFrame:
    if isinstance(features, pd.DataFrame):
        return features
    path = Path(features) if features is not None else config.GRAPH_FEATURES
    if not path.exists():
        raise MissingInput(f"no graph features at {path}: run notebook 02-build-features first")
    return pd.read_parquet(path)


def build_dataset(
    raw_root: Path | None = None,
    features: pd.DataFrame | Path | None = None,
    out: Path | None = None,
    write: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build the dataset from raw runs + graph features; return (dataset, exclusions) and write it."""
    from gpupred.profile.schema import read_runs, read_samples

    raw_root = Path(raw_root) if raw_root is not None else config.RAW
    if raw_root.resolve().is_relative_to(config.DRYRUN.resolve()):
        raise GpupredError(f"{raw_root}: dry-run (simulated) output is never data; point at data/raw")
    runs = read_runs(raw_root)
    excluded: list[dict[str, str]] = []

    def exclude(rows: pd.DataFrame, reason: str) -> None:
        excluded.extend({"run_id": r, "workload_id": w, "reason": reason} for r, w in zip(rows["run_id"], rows["workload_id"]))

    keep = runs
    for column, reason in (("simulated", "simulated (dry-run output, never data)"), ("group_size", "co-located member")):
        mask = keep[column].astype(bool) if column == "simulated" else keep[column] > 1
        exclude(keep[mask], reason)
        keep = keep[~mask]
    for status in sorted(set(keep["status"]) - {"ok"}):
        exclude(keep[keep["status"] == status], f"status {status}")
    keep = keep[keep["status"] == "ok"]
    if excluded and any(e["reason"].startswith("simulated") for e in excluded):
        warnings.warn(f"{raw_root}: simulated (dry-run) runs found and refused; they belong in data/dryrun", stacklevel=2)
    if keep.empty:
        raise MissingInput(f"no ok solo runs measured on a GPU under {raw_root}: collect data first (notebook 01)")

    feats = _read_features(features)
    keys = _graph_keys(feats)
    id_cols = [c for c in ("workload_id", "arch_key", "arch") if c in feats.columns]
    feats = feats.drop_duplicates("workload_id").set_index("workload_id")

    rows = []
    for sweep_dir, group in keep.groupby("sweep_dir", sort=True):
        samples = read_samples(Path(sweep_dir), sorted(set(group["group_id"])))
        for _, run in group.iterrows():
            if run["workload_id"] not in feats.index:
                exclude(run.to_frame().T, "no graph features for workload")
                continue
            labels, reason = _window_labels(run, samples)
            if reason:
                exclude(run.to_frame().T, reason)
                continue
            spec = _spec(run)
            f = feats.loc[run["workload_id"]]
            row: dict[str, object] = {
                "run_id": run["run_id"], "sweep_id": run["sweep_id"], "workload_id": run["workload_id"],
                "arch_key": f["arch_key"] if "arch_key" in id_cols else spec.arch_key,
                "family": run["family"], "arch": spec.arch, "precision": spec.precision,
                "optimizer": spec.optimizer, "fused": int(spec.fused), "gpu_name": run["gpu_name"],
                "gpu": gpu_spec(run["gpu_name"]).name, "sync": run["sync"],
            }
            row.update(labels)
            for col in ("torch_peak_reserved_mib", "torch_peak_allocated_mib", "iter_time_mean_s", "samples_per_s",
                        "gpu_memory_total_mib", "cuda_context_mib"):
                row[col] = float(run[col]) if pd.notna(run[col]) else np.nan
            row.update({k: float(f[k]) for k in keys})
            row.update(hardware_features(run["gpu_name"], spec.precision))
            row.update(encode(spec.precision, spec.optimizer))
            rows.append(row)
    exclusions = pd.DataFrame(excluded, columns=["run_id", "workload_id", "reason"])
    if not rows:
        raise MissingInput(f"no usable ok solo runs under {raw_root} ({len(exclusions)} excluded): see the exclusions")
    df = pd.DataFrame(rows)
    label_order = [c for c in LABEL_COLUMNS if c in df.columns]
    df = df[[*ID_COLUMNS, *label_order, *META_COLUMNS, *keys, *HARDWARE_COLUMNS, *(c for c in ENCODED_COLUMNS if c not in keys)]]
    df = df.sort_values("run_id").reset_index(drop=True)
    validate_dataset(df)
    if write:
        out = out or config.DATASET
        out.parent.mkdir(parents=True, exist_ok=True)
        df.to_parquet(out, index=False)
    return df, exclusions


def _spec(run: pd.Series):  # -> WorkloadSpec
    from gpupred.workloads.spec import WorkloadSpec

    try:
        return WorkloadSpec.from_json(run["spec_json"])
    except Exception:
        return WorkloadSpec.from_id(run["workload_id"])


def validate_dataset(df: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """Check a dataset frame against the contract; raise GpupredError naming the problem."""
    missing = [c for c in (*ID_COLUMNS, *REQUIRED_LABELS, *HARDWARE_COLUMNS, *ENCODED_COLUMNS) if c not in df.columns]
    if missing:
        raise GpupredError(f"{source}: missing columns {missing} of the dataset contract (gpupred.dataset); rebuild it")
    if df.empty:
        raise GpupredError(f"{source}: no rows")
    for col in REQUIRED_LABELS:
        if df[col].isna().any() or (df[col] < 0).any():
            raise GpupredError(f"{source}: label {col!r} has missing or negative values; rebuild it")
    feats = feature_columns(df)
    if len(feats) <= len(HARDWARE_COLUMNS) + len(ENCODED_COLUMNS):
        raise GpupredError(f"{source}: no graph feature columns; rebuild it with graph features")
    bad = [c for c in feats if df[c].isna().any()]
    if bad:
        raise GpupredError(f"{source}: feature columns with missing values {bad}; rebuild it")
    if df["run_id"].duplicated().any():
        raise GpupredError(f"{source}: duplicate run_id values")
    return df


def load_dataset(path: Path | None = None, sync: str | None = "step") -> pd.DataFrame:
    """The dataset (default data/processed/dataset.parquet), checked; MissingInput if not built yet.

    ``sync`` keeps the runs of one synchronization mode (default ``step``, the setting the predictor is
    trained for: a training loop that reads its loss every step); None keeps every run.
    """
    path = path or config.DATASET
    if not path.exists():
        raise MissingInput(f"no dataset at {path}: collect ok solo runs into data/raw and run notebook 02")
    df = validate_dataset(pd.read_parquet(path), str(path))
    if sync is not None:
        df = df[df["sync"] == sync].reset_index(drop=True)
        if df.empty:
            raise MissingInput(f"{path}: no runs with sync={sync!r}")
    return df


def fingerprint(df: pd.DataFrame, columns: list[str]) -> str:
    """A sha256 of the rows (sorted by run_id) over ``run_id`` and the given columns."""
    data = df.sort_values("run_id")[["run_id", *columns]].reset_index(drop=True)
    return hashlib.sha256(pd.util.hash_pandas_object(data, index=False).to_numpy().tobytes()).hexdigest()


def dataset_fingerprint(df: pd.DataFrame) -> str:
    """The fingerprint of a whole dataset frame: its feature columns and every label it has."""
    return fingerprint(df, [*feature_columns(df), *(c for c in LABEL_COLUMNS if c in df.columns)])


def summarize(df: pd.DataFrame) -> dict[str, object]:
    """Run count, families and GPUs of a dataset, for reports/metrics.json."""
    return {"n_runs": int(len(df)), "n_families": int(df["family"].nunique()), "gpus": sorted(df["gpu"].unique().tolist())}
