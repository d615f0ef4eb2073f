"""The simulated world of one GPU kind: measured jobs, the measured truth, and what the policies may know.

- **Workloads** are jobs with measured solo runs on that GPU kind (Lucid's solo jobs on the RTX 3090, or
  this project's own solo runs): measured solo utilization and memory are the truth; out-of-fold
  predictions (point and upper bound) are the knowledge. Jobs without predictions are left out (counted).
- **Truth slowdowns** (:class:`gpupred.sim.PairSlowdown`): the measured slowdown of a pair where both
  members were measured together; else a model fitted on *measured* solo features over all measured
  pairs (separate data from ours: the scheduler never sees measured solo features).
- **Ours' knowledge** (:class:`gpupred.sim.PredictedSlowdown`): cross-fitted predictions from
  *predicted* (out-of-fold) solo features: the model behind entry ``(i, j)`` trained on no pair holding
  workload ``i`` or ``j`` (:func:`gpupred.colocation.crossfit`), with interval upper bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpupred.colocation import (
    MEASURED_BASE,
    PREDICTED_BASE,
    SlowdownModel,
    align,
    crossfit,
    measured_features,
    usable_groups,
)
from gpupred.colocation.table import pair_slowdown_matrix
from gpupred.errors import GpupredError
from gpupred.sim.cluster import PairSlowdown, PredictedSlowdown
from gpupred.sim.traces import check_workload_table


@dataclass
class World:
    """One GPU kind's simulation inputs (see the module doc)."""

    gpu_name: str
    gpu_memory_mib: float
    workloads: pd.DataFrame  # traces.WORKLOAD_COLUMNS plus job_key, model_group
    measured: np.ndarray  # measured pair slowdowns, NaN where the pair was never measured
    fallback: np.ndarray  # the measured-feature model's slowdowns for every pair
    predicted: np.ndarray  # ours: cross-fitted point predictions
    predicted_high: np.ndarray  # ours: their upper bounds
    notes: list[str] = field(default_factory=list)

    def truth(self, kind: np.ndarray) -> PairSlowdown:
        """The simulator's truth for jobs of the given workload indices."""
        return PairSlowdown(self.measured, self.fallback, kind)

    def knowledge(self, kind: np.ndarray) -> PredictedSlowdown:
        """Ours' predicted pair slowdowns for jobs of the given workload indices."""
        return PredictedSlowdown(self.predicted, self.predicted_high, kind)

    @property
    def measured_fraction(self) -> float:
        """Share of ordered workload pairs whose truth is a measurement."""
        both = np.isfinite(self.measured) & np.isfinite(self.measured.T)
        return float(both.mean()) if both.size else 0.0


def _gpu_memory_mib(gpu_name: str) -> float:
    from gpupred.hardware import gpu_spec

    return float(gpu_spec(gpu_name).memory_gb) * 1024.0


def _workloads(solo: pd.DataFrame, features: pd.DataFrame, gpu: str, memory: float, notes: list[str]) -> pd.DataFrame:
    """Measured solo jobs of ``gpu`` with out-of-fold predictions, as a workload table."""
    every = solo[solo["gpu_name"] == gpu].drop_duplicates("job_key")
    s = every[every["workload_id"].notna()]
    f = features[features["gpu_name"] == gpu]
    w = s.merge(f, on=["workload_id", "gpu_name"], how="inner", suffixes=("_true", ""))
    if len(w) < len(every):
        notes.append(f"{len(every) - len(w)} of {len(every)} solo jobs on {gpu} have no workload id or no "
                     "out-of-fold prediction; left out")
    w = w[w["mem_mib_true"] <= memory]
    table = pd.DataFrame({
        "workload_id": w["workload_id"], "job_key": w["job_key"], "model_group": w["model_group"],
        "true_util": w["gpu_util_true"], "true_mem_mib": w["mem_mib_true"],
        "pred_util": w["gpu_util"], "pred_util_high": np.fmax(w.get("gpu_util_high", w["gpu_util"]), w["gpu_util"]),
        "pred_mem_mib": w["mem_mib"], "pred_mem_mib_high": np.fmax(w.get("mem_mib_high", w["mem_mib"]), w["mem_mib"]),
    })
    if "iter_time_s" in w.columns and w["iter_time_s"].notna().all():
        table["iter_time_s"] = w["iter_time_s"].to_numpy()
    if table.empty:
        raise GpupredError(f"no solo job on {gpu} has both a measurement and an out-of-fold prediction")
    return check_workload_table(table.reset_index(drop=True), f"workloads on {gpu}")


def _fallback(table: pd.DataFrame, solo: pd.DataFrame, workloads: pd.DataFrame, seed: int) -> np.ndarray:
    """Pair slowdowns from a model on measured solo features, fitted on every measured pair of the GPU kind."""
    feats = measured_features(solo)
    member = align(table, feats, ["job_key", "gpu_name"])
    keep = usable_groups(table, member)
    model = SlowdownModel.fit(table[keep].reset_index(drop=True), member[keep].reset_index(drop=True), MEASURED_BASE,
                              seed=seed)
    rows = workloads[["job_key"]].assign(gpu_name=table["gpu_name"].iloc[0]).merge(feats, on=["job_key", "gpu_name"], how="left")
    return np.maximum(1.0, model.pair_matrix(rows))


def _predicted(table: pd.DataFrame, features: pd.DataFrame, workloads: pd.DataFrame, unit: str, n_folds: int,
               seed: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Cross-fitted (point, upper bound) pair slowdowns from predicted solo features."""
    member = align(table, features)
    keep = usable_groups(table, member)
    cf, _ = crossfit(table[keep].reset_index(drop=True), member[keep].reset_index(drop=True), PREDICTED_BASE,
                     unit=unit, n_folds=n_folds, seed=seed, alpha=alpha)
    rows = workloads[["workload_id", "model_group"]].assign(gpu_name=table["gpu_name"].iloc[0])
    rows = rows.merge(features, on=["workload_id", "gpu_name"], how="left")
    return cf.pair_matrices(rows)


def build_world(table: pd.DataFrame, solo: pd.DataFrame, features: pd.DataFrame, gpu_name: str | None = None,
                gpu_memory_mib: float | None = None, unit: str = "workload_id", n_folds: int = 5, seed: int = 0,
                alpha: float = 0.1) -> World:
    """The world of one GPU kind from measured pairs (``table``), measured solo jobs and out-of-fold ``features``.

    ``table`` and ``solo`` come from :func:`gpupred.colocation.load_pair_sources`; ``features`` from
    :func:`gpupred.colocation.predicted_features`. ``gpu_name`` defaults to the kind with most measured pairs.
    """
    measured_rows = table[np.isfinite(table["slowdown"].astype(float))]
    if measured_rows.empty:
        raise GpupredError("no measured co-located pair to build a simulated world from")
    gpu = gpu_name or str(measured_rows["gpu_name"].value_counts().index[0])
    t = table[table["gpu_name"] == gpu].reset_index(drop=True)
    if not np.isfinite(t["slowdown"].astype(float)).any():
        raise GpupredError(f"no measured co-located pair on {gpu!r}; kinds with pairs: {sorted(measured_rows['gpu_name'].unique())}")
    memory = float(gpu_memory_mib) if gpu_memory_mib else _gpu_memory_mib(gpu)
    notes: list[str] = []
    workloads = _workloads(solo, features, gpu, memory, notes)
    measured = pair_slowdown_matrix(t, workloads["job_key"].tolist())
    fallback = _fallback(t, solo[solo["gpu_name"] == gpu], workloads, seed)
    point, high = _predicted(t, features, workloads, unit, n_folds, seed, alpha)
    return World(gpu, memory, workloads, measured, fallback, point, high, notes)
