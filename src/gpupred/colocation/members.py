"""Each co-located member's solo inputs: predicted (out-of-fold, what a scheduler has at submission) or measured.

- A member's *predicted* solo inputs are the out-of-fold predictions of its own dataset rows
  (:mod:`gpupred.learn.oof`: its workload was in none of the folds that predicted it) plus its graph features and
  the step model's columns (computed from the graph and the GPU, never measured).
- Its *measured* solo inputs are what its solo run recorded (utilization, memory...): an oracle for a predictor,
  or what a short solo profile gives a scheduler.
- A busy fraction (0..1) feeds the time-sharing estimate: ``busy_util`` (predicted utilization / 100) and
  ``busy_phys`` (the step model's GPU-busy time over its step time).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from gpupred.slowdown.physics import busy_fraction
from gpupred.errors import GpupredError

GRAPH_COLUMNS: tuple[str, ...] = ("flops_train", "arithmetic_intensity")
# The step model's per-row columns (gpupred.step.physics): computed from the graph and the GPU, never measured.
PHYS_COLUMNS: tuple[str, ...] = ("phys_step_s", "phys_gpu_busy_s", "phys_host_s", "phys_util", "phys_kernels")
FEATURE_KEYS: tuple[str, ...] = ("workload_id", "gpu_name")
MEASURED_COLUMNS: tuple[str, ...] = ("gpu_util", "sm_active", "gmem_util", "mem_mib")


def baseline_slowdown(sum_util: np.ndarray | pd.Series | list[float]) -> np.ndarray:
    """The additive baseline: ``max(1, summed solo utilization / 100)``."""
    return np.maximum(1.0, np.asarray(sum_util, dtype=float) / 100.0)


def with_busy(features: pd.DataFrame) -> pd.DataFrame:
    """``features`` with ``busy_util`` (predicted util / 100) and ``busy_phys`` (step model, NaN without)."""
    out = features.copy()
    out["busy_util"] = busy_fraction(out, "util")
    out["busy_phys"] = busy_fraction(out, "phys")
    return out


def predicted_features(dataset: pd.DataFrame, oof: pd.DataFrame) -> pd.DataFrame:
    """Per (workload_id, gpu_name): out-of-fold predicted util / SM activity / memory (with bounds), graph and step-model
    columns, and the busy fractions of :func:`with_busy`."""
    targets = [c for t in ("gpu_util", "sm_active", "memory_mib") if t in oof.columns
               for c in (t, f"{t}_low", f"{t}_high") if c in oof.columns]
    if "gpu_util" not in targets or "memory_mib" not in targets:
        raise GpupredError("out-of-fold predictions need gpu_util and memory_mib (gpupred.learn.oof contract)")
    graph = [c for c in (*GRAPH_COLUMNS, *PHYS_COLUMNS) if c in dataset.columns]
    d = dataset[["run_id", "workload_id", "gpu_name", *graph]]
    p = oof[["run_id", *targets]].merge(d, on="run_id", how="inner")
    if len(p) < len(oof):
        raise GpupredError(f"{len(oof) - len(p)} out-of-fold predictions name runs not in the dataset (stale file?)")
    out = p.groupby(list(FEATURE_KEYS), as_index=False)[[*targets, *graph]].mean()
    out = out.rename(columns={c: c.replace("memory_mib", "mem_mib") for c in targets})
    return with_busy(out)


def with_utilization(oof: pd.DataFrame, heldout: pd.DataFrame) -> pd.DataFrame:
    """``oof`` with the utilization of the runs ``heldout`` answers (its ``run_id``, ``pred_gpu_util`` and bounds:
    :func:`gpupred.step.evaluate.heldout_rows`' frame, a predictor that never trained on them) in place of the
    out-of-fold ones; the other runs and columns as they were."""
    out = oof.copy()
    held = heldout.set_index("run_id")
    rows = out["run_id"].isin(held.index).to_numpy()
    for column in ("gpu_util", "gpu_util_low", "gpu_util_high"):
        if column in out.columns:
            out.loc[rows, column] = out.loc[rows, "run_id"].map(held[f"pred_{column}"]).to_numpy(float)
    return out


def measured_features(solo: pd.DataFrame) -> pd.DataFrame:
    """Per (job_key, gpu_name): the measured solo features (colocation.pairtable.SOLO_COLUMNS) and ``busy_util``."""
    cols = [c for c in MEASURED_COLUMNS if c in solo.columns]
    out = solo[["job_key", "gpu_name", *cols]].groupby(["job_key", "gpu_name"], as_index=False).mean()
    return out.assign(busy_util=busy_fraction(out, "util"))


def align(table: pd.DataFrame, features: pd.DataFrame, keys: Iterable[str] = FEATURE_KEYS) -> pd.DataFrame:
    """The rows of ``features`` matching each row of ``table`` on ``keys`` (same order and length; NaN where none)."""
    keys = list(keys)
    left = table[keys].reset_index(drop=True)
    if features.duplicated(keys).any():
        raise GpupredError(f"feature frame has duplicate {keys}; one row per key")
    out = left.merge(features, on=keys, how="left")
    if len(out) != len(table):
        raise GpupredError("feature join changed the row count")
    return out


def usable_groups(table: pd.DataFrame, member: pd.DataFrame | None = None, need: str = "gpu_util") -> np.ndarray:
    """Rows of whole groups where every member has a measured slowdown, the group did not fail, and (with ``member``)
    ``need`` is known."""
    ok = np.isfinite(table["slowdown"].to_numpy(float)) & ~table["group_failed"].astype(bool).to_numpy()
    if member is not None:
        ok &= member[need].notna().to_numpy()
    return pd.Series(ok).groupby(table["group_id"].to_numpy()).transform("all").to_numpy()
