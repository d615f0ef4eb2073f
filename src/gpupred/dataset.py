"""The learning dataset: one row per measured solo run, from every source, labels + graph + GPU features.

Sources (column ``source``): ``gpupred`` (this project's NVML sweeps in data/raw), and published
measurements imported by :mod:`gpupred.importers` (``lucid``: RTX 3090; ``gpumemnet``: A100 40 GB).

Contract of ``data/processed/dataset.parquet`` (checked by :func:`validate_dataset`):

- ``ID_COLUMNS``: run and workload identity (``run_id`` unique over every source: ``<gpu>/<sweep-id>/<run id>`` for
  this project's runs, ``lucid:...`` and ``gpumemnet:...`` for imported ones; ``family`` is the leave-one-family-out
  group, ``gpu`` the short GPU model name of :mod:`gpupred.hardware`), ``source``, and how the source measured:
  ``sampler`` (``nvml-poll-<ms>ms``, ``nvidia-smi-0.2s``, ``dcgm-1s-nonzero``) and ``sync`` (``step``: the loop reads
  its loss every step; ``window``: one synchronize per window; ``kernel``: ``CUDA_LAUNCH_BLOCKING=1``);
- ``LABEL_COLUMNS``: steady-state labels (``gpu_util`` and ``memory_mib`` never missing; the others NaN
  where a source did not record them);
- features: the graph features (``gpupred.graph.features.FEATURE_KEYS``), the step model's ``STEP_COLUMNS``
  (``phys_step_s``, ``phys_gpu_busy_s``, ``phys_host_s``, ``phys_util`` in percent, ``phys_kernels``: one training
  step of the run's graph on its GPU under its protocol, with the default constants of :mod:`gpupred.step.physics`),
  ``HARDWARE_COLUMNS`` and ``ENCODED_COLUMNS``; :func:`feature_columns` lists the regressors' inputs in order
  (every feature but the step model's, which :class:`gpupred.step.estimator.StepEstimator` uses).

Labels across sources (decided here, repeated in notebook 03):

- ``gpu_util`` is pooled. Every source reads the same NVML counter (percent of the sample period in which
  a kernel ran: gpupred polls NVML, Lucid polls nvidia-smi, GPUMemNet's DCGM GPUTL is that field), but
  the protocols differ in ways that move it: Lucid ran with ``CUDA_LAUNCH_BLOCKING=1`` (the host waits for
  each kernel, so gaps between kernels grow) and GPUMemNet averaged only non-zero 1 s samples (idle
  seconds dropped). Those are features a model sees (``sync_kernel``, ``sync_window``,
  ``util_nonzero_only``, ``host_batches``), so it can learn the protocol's offset instead of blaming the
  GPU; a prediction for a new job uses this project's protocol (``step``, NVML poll, all samples).
  Within the imported data protocol and GPU kind coincide (one GPU per source), so the split between the
  two is not identified until gpupred's own sweeps on those GPUs exist: the figures are per source too.
- ``memory_mib`` is pooled: the job's GPU memory with its CUDA context (gpupred: the process's NVML
  figure; Lucid: mean of device memory used over the window; GPUMemNet: maximum of device memory used,
  each on an otherwise idle GPU). Mean vs maximum differ little for a training loop whose caching
  allocator holds steady; ``memory_source`` says which.
- ``sm_active`` (%) is pooled where recorded (gpupred's GPM SM activity, GPUMemNet's DCGM SMACT x 100;
  Lucid has none); GPUMemNet's non-zero-only average is marked by ``util_nonzero_only``.
- Lucid's memory-controller utilization (``gmem_util``) and GPUMemNet's GRACT/SMOCC/FP32A stay in the
  importers' own tables (no other source records them).
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from gpupred import config
from gpupred.columnar import is_frame
from gpupred.errors import GpupredError
from gpupred.hardware import HARDWARE_COLUMNS, gpu_spec, hardware_features
from gpupred.errors import MissingInput
from gpupred.step.physics.columns import spec_loader, spec_step_columns
from gpupred.step.physics.inputfeed import LOADER_COLUMNS, loader_columns
from gpupred.step.physics.timeline import STEP_COLUMNS
from gpupred.setups import pipeline_from_json
from gpupred.workloads.spec import WorkloadSpec

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

DATASET_VERSION = 3  # 3: the step model's phys_* columns

SOURCE_OWN = "gpupred"  # the ``source`` of this project's own runs (imported sources are named by importers)
ID_COLUMNS: tuple[str, ...] = (
    "run_id", "sweep_id", "workload_id", "arch_key", "family", "arch", "precision", "optimizer", "fused",
    "gpu_name", "gpu", "sync", "source", "sampler",
)
LABEL_COLUMNS: tuple[str, ...] = (
    "gpu_util",  # % NVML utilization, mean of polled samples in the window
    "gpu_util_buffered",  # % mean of NVML's own sample buffer in the window (NaN if unsupported)
    "sm_active",  # % SM activity mean (GPM or DCGM SMACT; NaN where not recorded)
    "memory_mib",  # the run's GPU memory, MiB (memory_source says from what)
    "torch_peak_reserved_mib",
    "torch_peak_allocated_mib",
    "iter_time_mean_s",
    "samples_per_s",
)
META_COLUMNS: tuple[str, ...] = (
    "memory_source", "gpu_memory_total_mib", "n_samples", "cuda_context_mib",
    "host_score",  # the run's host single-core score (gpupred.loader.speed; 1.0 = the reference host; NaN: unknown)
)
ENCODED_COLUMNS: tuple[str, ...] = (
    "is_bf16", "is_fp16", "is_adam",
    "host_batches",  # batches copied from host memory every step (a DataLoader) rather than resident on the GPU
    "sync_kernel",  # CUDA_LAUNCH_BLOCKING=1: the host waits for every kernel (Lucid)
    "sync_window",  # one synchronize per measured window (gpupred sync=window)
    "util_nonzero_only",  # utilization averaged over non-zero samples only (GPUMemNet's DCGM cleaning)
)
REQUIRED_LABELS: tuple[str, ...] = ("gpu_util", "memory_mib")
PERCENT_LABELS: tuple[str, ...] = ("gpu_util", "gpu_util_buffered", "sm_active")  # bounded by 100
FEATURE_ID_COLUMNS: tuple[str, ...] = (
    "workload_id", "arch_key", "family", "arch", "precision", "optimizer", "fused", "unknown_op_types",
)
OWN_SAMPLER = "nvml-poll"  # gpupred's sampler; the dataset column adds the interval, e.g. nvml-poll-50ms


def _graph_keys(features: pd.DataFrame) -> list[str]:
    """The graph feature columns (``gpupred.graph.features.FEATURE_KEYS``), each checked to be in ``features``."""
    from gpupred.graph.features import FEATURE_KEYS  # light: no torch

    keys = list(FEATURE_KEYS)
    missing = [k for k in keys if k not in features.columns]
    if missing:
        raise GpupredError(f"graph features lack columns {missing}: rebuild {config.GRAPH_FEATURES} (notebook 02)")
    return keys


def encode(precision: str, optimizer: str, host_batches: bool | float = False, sync: str = "step",
           sampler: str = OWN_SAMPLER) -> dict[str, float]:
    """The ``ENCODED_COLUMNS`` of a run: precision, optimizer, input feeding and how it was measured.

    The defaults describe this project's protocol (device-resident batches, a sync every step, all NVML
    samples): what a prediction for a new job assumes.
    """
    return {
        "is_bf16": float(precision == "bf16"), "is_fp16": float(precision == "fp16"), "is_adam": float(optimizer == "adam"),
        "host_batches": float(bool(host_batches)), "sync_kernel": float(sync == "kernel"),
        "sync_window": float(sync == "window"), "util_nonzero_only": float(str(sampler).endswith("-nonzero")),
    }


def feature_columns(df: pd.DataFrame) -> list[str]:
    """The model input columns of a dataset frame, in order: graph features, hardware, encodings."""
    import pandas as pd

    # the step model's columns are not regressor inputs: a featurize row has no GPU or protocol to compute them for;
    # the step estimator (gpupred.step) uses them (physics x correction) and the predictor does not need them
    skip = set(ID_COLUMNS) | set(LABEL_COLUMNS) | set(META_COLUMNS) | set(FEATURE_ID_COLUMNS) | {"batch_size_spec"}
    skip |= set(STEP_COLUMNS) | set(LOADER_COLUMNS)  # the host pipeline's per-batch times: the step model's inputs
    tail = [*HARDWARE_COLUMNS, *ENCODED_COLUMNS]
    graph = [c for c in df.columns if c not in skip and c not in tail and pd.api.types.is_numeric_dtype(df[c])]
    return graph + [c for c in tail if c in df.columns]


def window_labels(row: pd.Series, samples: pd.DataFrame) -> tuple[dict[str, float], str]:
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
    if is_frame(features):
        return features
    from gpupred.graph.table import read_feature_table

    path = Path(features) if features is not None else config.GRAPH_FEATURES
    if not path.exists():
        raise MissingInput(f"no graph features at {path}: run notebook 02-build-features first")
    return read_feature_table(path)  # the table's column contract, checked


def own_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` that this project measured itself (``source`` is :data:`SOURCE_OWN`)."""
    return df[df["source"] == SOURCE_OWN]


def own_run_id(sweep_dir: str | Path, run_id: str) -> str:
    """A raw run's id in the dataset: ``<gpu>/<sweep-id>/<run_id>`` (data/raw's layout).

    The profiler's run id is unique within its sweep folder only: the twins of one spec on two GPU kinds share it.
    """
    sweep = Path(sweep_dir)
    return f"{sweep.parent.name}/{sweep.name}/{run_id}"


def own_label_rows(raw_root: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(label rows, exclusions) of this project's ok solo runs in data/raw (label rows without features)."""
    import pandas as pd

    from gpupred.profile.schema import read_runs, read_samples, run_setups

    raw_root = Path(raw_root) if raw_root is not None else config.RAW
    if raw_root.resolve().is_relative_to(config.DRYRUN.resolve()):
        raise GpupredError(f"{raw_root}: dry-run (simulated) output is never data; point at data/raw")
    runs = read_runs(raw_root)
    excluded: list[dict[str, str]] = []

    def exclude(rows: pd.DataFrame, reason: str) -> None:
        excluded.extend({"run_id": own_run_id(d, r), "workload_id": w, "reason": reason}
                        for d, r, w in zip(rows["sweep_dir"], rows["run_id"], rows["workload_id"]))

    keep = runs
    for column, reason in (("simulated", "simulated (dry-run output, never data)"), ("group_size", "co-located member")):
        if column not in keep.columns:
            continue
        mask = keep[column].astype(bool) if column == "simulated" else keep[column] > 1
        exclude(keep[mask], reason)
        keep = keep[~mask]
    trained = run_setups(keep) != ""  # fine-tune units: labels of a setup the dataset's columns do not carry
    exclude(keep[trained], "trained under setup options (a fine-tune unit): not a label of its workload id's own setup")
    keep = keep[~trained]
    if "status" in keep.columns:
        for status in sorted(set(keep["status"]) - {"ok"}):
            exclude(keep[keep["status"] == status], f"status {status}")
        keep = keep[keep["status"] == "ok"]
    if excluded and any(e["reason"].startswith("simulated") for e in excluded):
        warnings.warn(f"{raw_root}: simulated (dry-run) runs found and refused; they belong in data/dryrun", stacklevel=3)
    scores = own_host_scores(keep)
    rows = []
    for sweep_dir, group in keep.groupby("sweep_dir", sort=True):
        samples = read_samples(Path(sweep_dir), sorted(set(group["group_id"])))
        for _, run in group.iterrows():
            labels, reason = window_labels(run, samples)
            if reason:
                exclude(run.to_frame().T, reason)
                continue
            interval = run.get("sampler_interval_ms")
            row: dict[str, object] = {
                "run_id": own_run_id(sweep_dir, run["run_id"]), "sweep_id": run["sweep_id"], "workload_id": run["workload_id"],
                "spec_json": run.get("spec_json"), "gpu_name": run["gpu_name"], "source": SOURCE_OWN,
                "sampler": f"{OWN_SAMPLER}-{int(interval)}ms" if pd.notna(interval) else OWN_SAMPLER,
                "sync": run["sync"], "host_batches": int(bool(run.get("host_batches", False))),
                "pipeline": _own_pipeline(run, Path(sweep_dir)),
                "host_score": scores.get(gpu_spec(str(run["gpu_name"])).name, np.nan),
            }
            row.update(labels)
            for col in ("torch_peak_reserved_mib", "torch_peak_allocated_mib", "iter_time_mean_s", "samples_per_s",
                        "gpu_memory_total_mib", "cuda_context_mib"):
                row[col] = float(run[col]) if col in run and pd.notna(run[col]) else np.nan
            rows.append(row)
    return pd.DataFrame(rows), pd.DataFrame(excluded, columns=["run_id", "workload_id", "reason"])


def own_host_scores(runs: pd.DataFrame) -> dict[str, float]:
    """Per GPU kind (``gpu_spec(...).name``) of ``runs``, the geometric mean of the single-core scores of the host
    profiles beside its sweeps' runs (``host-profile-*.json``, :mod:`gpupred.loader.speed`). A GPU kind's runs all get
    it, those of sweeps that recorded no host too: the lent machines of a kind report one CPU model and core count,
    and the step model's fit is one per (GPU kind, protocol)."""
    from gpupred.loader.hostprofile import read_host_profile
    from gpupred.step.physics.constants import geometric_mean

    found: dict[str, list[float]] = {}
    for sweep_dir, group in runs.groupby("sweep_dir", sort=True):
        kinds = {gpu_spec(str(g)).name for g in group["gpu_name"]}
        for path in sorted(Path(sweep_dir).glob("host-profile-*.json")):
            for kind in kinds:
                found.setdefault(kind, []).append(read_host_profile(path).single_core_score)
    return {kind: geometric_mean(v) for kind, v in found.items() if v}


def _own_pipeline(run: pd.Series, sweep_dir: Path) -> str:
    """A run's ``pipeline`` column ('' for a resident batch and for files written before the column), naming the host
    profile recorded beside the runs for its machine when there is one and the row names none."""
    import json

    from gpupred.profile.store import host_profile_path

    text = run.get("pipeline")
    if not isinstance(text, str) or not text:
        return ""
    options = json.loads(text)
    profile = host_profile_path(sweep_dir, str(run.get("host", "")))
    if options.get("profile") is None and profile.is_file():
        options["profile"] = str(profile)
    return json.dumps(options, sort_keys=True)


def assemble(labels: pd.DataFrame, features: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Join label rows (any source) with graph features, GPU hardware features and encodings.

    ``labels`` has per run at least ``run_id, sweep_id, workload_id, gpu_name, source, sampler, sync`` and
    the labels it has; returns (dataset rows in contract order, exclusions of runs without graph features).
    """
    import pandas as pd

    keys = _graph_keys(features)
    feats = features.drop_duplicates("workload_id").set_index("workload_id")
    hw_cache: dict[tuple[str, str], dict[str, float]] = {}
    rows, excluded = [], []
    for rec in labels.to_dict("records"):
        wid = rec["workload_id"]
        if wid not in feats.index:
            excluded.append({"run_id": rec["run_id"], "workload_id": wid, "reason": "no graph features for workload"})
            continue
        spec = WorkloadSpec.from_record(wid, rec.get("spec_json"))
        f = feats.loc[wid]
        hw_key = (str(rec["gpu_name"]), spec.precision)
        if hw_key not in hw_cache:
            hw_cache[hw_key] = hardware_features(*hw_key)
        row = {c: rec.get(c, np.nan) for c in (*LABEL_COLUMNS, *META_COLUMNS)}
        row.update({
            "run_id": rec["run_id"], "sweep_id": rec["sweep_id"], "workload_id": wid,
            "arch_key": f["arch_key"] if "arch_key" in feats.columns else spec.arch_key, "family": spec.family,
            "arch": spec.arch, "precision": spec.precision, "optimizer": spec.optimizer, "fused": int(spec.fused),
            "gpu_name": rec["gpu_name"], "gpu": gpu_spec(str(rec["gpu_name"])).name, "sync": rec["sync"],
            "source": rec["source"], "sampler": rec["sampler"],
        })
        row.update({k: float(f[k]) for k in keys})
        row.update(hw_cache[hw_key])
        hb = rec.get("host_batches")
        host_batches = bool(hb) if hb is not None and pd.notna(hb) else False
        loader = spec_loader(spec, pipeline_from_json(rec.get("pipeline")))  # None: resident (or copied) batches
        row.update(spec_step_columns(spec, str(rec["gpu_name"]), str(rec["sync"]), host_batches, loader=loader))
        row.update(loader_columns(loader))
        row.update(encode(spec.precision, spec.optimizer, host_batches, rec["sync"], rec["sampler"]))
        rows.append(row)
    exclusions = pd.DataFrame(excluded, columns=["run_id", "workload_id", "reason"])
    if not rows:
        return pd.DataFrame(columns=[*ID_COLUMNS, *LABEL_COLUMNS, *META_COLUMNS, *keys, *STEP_COLUMNS,
                                     *LOADER_COLUMNS]), exclusions
    df = pd.DataFrame(rows)
    df["memory_source"] = df["memory_source"].fillna("").astype(str)
    df = df[[*ID_COLUMNS, *LABEL_COLUMNS, *META_COLUMNS, *keys, *STEP_COLUMNS, *LOADER_COLUMNS, *HARDWARE_COLUMNS,
             *(c for c in ENCODED_COLUMNS if c not in keys)]]
    return df, exclusions


def source_label_rows(sources: Iterable[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(label rows, exclusions) of the imported published sources (default: every one imported)."""
    import pandas as pd

    from gpupred import importers

    names = importers.imported_sources() if sources is None else list(sources)
    parts, excluded = [], []
    for name in names:
        runs, excl = importers.module(name).dataset_rows()
        parts.append(runs)
        excluded.append(excl)
    labels = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    exclusions = pd.concat(excluded, ignore_index=True) if excluded else pd.DataFrame(columns=["run_id", "workload_id", "reason"])
    return labels, exclusions


def build_dataset(
    raw_root: Path | None = None,
    features: pd.DataFrame | Path | None = None,
    out: Path | None = None,
    write: bool = True,
    sources: Iterable[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build the dataset from this project's raw runs and imported sources (default: those imported) + features.

    Returns (dataset, exclusions) and writes the dataset; MissingInput when no source has a usable run.
    """
    import pandas as pd

    own, own_excl = own_label_rows(raw_root)
    imported, imp_excl = source_label_rows(sources)
    labels = pd.concat([p for p in (own, imported) if len(p)], ignore_index=True) if len(own) or len(imported) else own
    exclusions = pd.concat([own_excl, imp_excl], ignore_index=True)
    if labels.empty:
        raise MissingInput(f"no ok solo runs measured on a GPU under {raw_root or config.RAW} and no imported published "
                           f"data ({len(exclusions)} runs excluded): collect data (notebook 01) or run "
                           "`gpupred import lucid` / `gpupred import gpumemnet`")
    df, feat_excl = assemble(labels, _read_features(features))
    exclusions = pd.concat([exclusions, feat_excl], ignore_index=True)
    if df.empty:
        raise MissingInput(f"no usable runs ({len(exclusions)} excluded, e.g. {exclusions['reason'].iloc[0]!r}): see the exclusions")
    df = df.sort_values("run_id").reset_index(drop=True)
    validate_dataset(df)
    if write:
        out = out or config.DATASET
        out.parent.mkdir(parents=True, exist_ok=True)
        df.to_parquet(out, index=False)
    return df, exclusions


def validate_dataset(df: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """Check a dataset frame against the contract; raise GpupredError naming the problem."""
    missing = [c for c in (*ID_COLUMNS, *REQUIRED_LABELS, *STEP_COLUMNS, *HARDWARE_COLUMNS, *ENCODED_COLUMNS)
               if c not in df.columns]
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
    if df["source"].isna().any() or (df["source"] == "").any():
        raise GpupredError(f"{source}: rows without a source")
    return df


def load_dataset(path: Path | None = None, sync: str | None = None, sources: Iterable[str] | None = None) -> pd.DataFrame:
    """The dataset (default data/processed/dataset.parquet), checked; MissingInput if not built yet.

    Every source and synchronization mode by default (the protocol is a feature: see the module notes);
    ``sync`` / ``sources`` keep a subset. Stages that exchange per-row files (out-of-fold predictions) must
    load the same rows: use the defaults.
    """
    import pandas as pd

    path = path or config.DATASET
    if not path.exists():
        raise MissingInput(f"no dataset at {path}: import published data (`gpupred import lucid|gpumemnet`) or "
                           "collect solo runs into data/raw, then run notebook 02")
    df = validate_dataset(pd.read_parquet(path), str(path))
    if sync is not None:
        df = df[df["sync"] == sync].reset_index(drop=True)
    if sources is not None:
        df = df[df["source"].isin(list(sources))].reset_index(drop=True)
    if df.empty:
        raise MissingInput(f"{path}: no runs with sync={sync!r} from sources {sources!r}")
    return df


def fingerprint(df: pd.DataFrame, columns: list[str]) -> str:
    """A sha256 of the rows (sorted by run_id) over ``run_id`` and the given columns."""
    import pandas as pd

    data = df.sort_values("run_id")[["run_id", *columns]].reset_index(drop=True)
    return hashlib.sha256(pd.util.hash_pandas_object(data, index=False).to_numpy().tobytes()).hexdigest()


def dataset_fingerprint(df: pd.DataFrame) -> str:
    """The fingerprint of a whole dataset frame: its feature columns and every label it has."""
    return fingerprint(df, [*feature_columns(df), *(c for c in LABEL_COLUMNS if c in df.columns)])


def summarize(df: pd.DataFrame) -> dict[str, object]:
    """Run, workload and family counts, GPUs and sources of a dataset, for reports/metrics.json."""
    return {"n_runs": int(len(df)), "n_workloads": int(df["workload_id"].nunique()),
            "n_families": int(df["family"].nunique()), "gpus": sorted(df["gpu"].unique().tolist()),
            "sources": sorted(df["source"].unique().tolist())}
