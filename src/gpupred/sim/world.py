"""The simulated world of one GPU kind: jobs, the measured truth, and what the policies may know.

Two worlds:

- :func:`build_world` -- jobs with measured solo runs and measured pairs on one GPU kind (Lucid's RTX 3090 jobs, or
  this project's own once measured). **Truth**: a pair's measured slowdown where both members were measured together;
  else (pairs never measured) the job-effects model (:class:`gpupred.slowdown.estimator.SlowdownModel` on the
  time-sharing estimate from *measured* solo utilization) fitted on every measured pair of that GPU kind -- the same
  additive form as ours' knowledge, so the share of co-locations that ran at a measured slowdown is counted in every
  run. True utilization and memory are the measured solo ones; the policies see out-of-fold predictions with intervals.
- :func:`gavel_world` -- Gavel's 26 job types on one GPU kind. **Truth**: the measured matrix, complete; a pair
  whose co-run failed never runs (:meth:`gpupred.sim.cluster.PairSlowdown.fails`). Gavel records no utilization or
  memory: every policy (and the utilization timeline) takes a job's utilization from its solo step times on P100 and
  V100 (:func:`gpupred.colocation.gavelpairs.cross_gpu_busy`, the same number as truth and as prediction, so no policy
  is misled by it), and memory is unknown (0 for every policy).

**Ours' knowledge** in both (:func:`gpupred.colocation.matrix.heldout_matrices`): pair slowdowns from the job-effects
model on the slice's zero-parameter prior, held out by whole model group, each held-out job adapted on ``k``
co-runs with the slice's fixed reference jobs (chosen from solo features only); in Gavel's world also the failure
probability of each pair from the same co-runs. The co-runs' GPU time is not charged to the simulated cluster (they
run on a calibration GPU, as Gavel profiles its jobs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.base import clone

from gpupred.slowdown.estimator import SlowdownModel, TimeSharing, pair_frame
from gpupred.colocation.matrix import heldout_matrices, ordered_pairs
from gpupred.colocation.pairtable import pair_slowdown_matrix
from gpupred.errors import GpupredError
from gpupred.sim.cluster import PairSlowdown, PredictedSlowdown
from gpupred.sim.arrivals import check_workload_table


@dataclass
class World:
    """One GPU kind's simulation inputs (see the module doc)."""

    gpu_name: str
    gpu_memory_mib: float
    workloads: pd.DataFrame  # traces.WORKLOAD_COLUMNS plus job_key, model_group
    measured: np.ndarray  # measured pair slowdowns, NaN where the pair was never measured (or failed)
    fallback: np.ndarray  # the truth's model slowdowns for every pair
    predicted: np.ndarray  # ours: held-out point predictions
    predicted_high: np.ndarray  # ours: their upper bounds
    failed: np.ndarray | None = None  # truth: pairs whose measured co-run failed
    predicted_fail: np.ndarray | None = None  # ours: predicted probability that a pair fails
    refs: list[str] = field(default_factory=list)  # the reference jobs ours' adaptation co-ran each job with
    notes: list[str] = field(default_factory=list)

    def truth(self, kind: np.ndarray) -> PairSlowdown:
        """The simulator's truth for jobs of the given workload indices."""
        return PairSlowdown(self.measured, self.fallback, kind, self.failed)

    def knowledge(self, kind: np.ndarray) -> PredictedSlowdown:
        """Ours' predicted pair slowdowns (and failures) for jobs of the given workload indices."""
        return PredictedSlowdown(self.predicted, self.predicted_high, kind, self.predicted_fail)

    @property
    def measured_fraction(self) -> float:
        """Share of ordered workload pairs whose truth is a measurement (a failed co-run counts as measured)."""
        both = np.isfinite(self.measured) & np.isfinite(self.measured.T)
        if self.failed is not None:
            both |= self.failed
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


def _truth_fallback(X: pd.DataFrame, jobs: pd.DataFrame) -> np.ndarray:
    """Slowdowns of every ordered pair of ``jobs`` from the job-effects model on measured utilization (all pairs)."""
    model = SlowdownModel(TimeSharing("busy_meas")).fit(X, X["slowdown"].to_numpy(float))
    w = len(jobs)
    return np.maximum(1.0, model.predict(ordered_pairs(jobs, ["busy_meas"])).reshape(w, w))


def build_world(table: pd.DataFrame, solo: pd.DataFrame, features: pd.DataFrame, gpu_name: str | None = None,
                gpu_memory_mib: float | None = None, k: int = 3, n_folds: int = 5, seed: int = 0) -> World:
    """The world of one GPU kind from measured pairs (``table``), measured solo jobs and out-of-fold ``features``.

    ``table`` and ``solo`` come from :func:`gpupred.colocation.pairtable.load_pair_sources`; ``features`` from
    :func:`gpupred.colocation.members.predicted_features`. ``gpu_name`` defaults to the kind with most measured pairs.
    """
    from gpupred.colocation.study import reference_choice, solo_reference_features, utilization_slice

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
    graph = t["workload_id"].notna().groupby(t["group_id"]).transform("all").to_numpy()
    refs_from = solo_reference_features(solo[solo["gpu_name"] == gpu])
    sl = utilization_slice(f"world_{gpu}", gpu, t[graph].reset_index(drop=True), features, refs_from)
    jobs = workloads[["job_key", "model_group"]].copy()
    jobs["busy_pred"] = workloads["pred_util"].to_numpy(float) / 100.0
    jobs["busy_meas"] = workloads["true_util"].to_numpy(float) / 100.0
    refs = reference_choice(sl, 5)
    known = heldout_matrices(sl.X, jobs, ["busy_pred"], lambda: SlowdownModel(clone(sl.predictors[sl.prior])), refs,
                             k, n_folds, seed)
    measured = pair_slowdown_matrix(t, workloads["job_key"].tolist())
    fallback = _truth_fallback(sl.X, jobs)
    notes.append(f"ours' pair slowdowns: {sl.prior} x job effects, held out by model group, each job adapted on "
                 f"{k} co-runs with {', '.join(refs[:k])}; upper bound x{np.exp(known.width):.2f}")
    return World(gpu, memory, workloads, measured, fallback, known.point, known.high, None, None, refs[:k], notes)


GAVEL_MEMORY_MIB = 16384.0  # Gavel's V100s had 16 GB; memory is unknown per job (0), so it never binds


def _gavel_workloads(sl_busy: pd.Series, steps: pd.Series, groups: pd.Series) -> pd.DataFrame:
    """The workload table of Gavel's job types: utilization from solo steps (truth = prediction), memory unknown (0)."""
    util = 100.0 * sl_busy.to_numpy(float)
    table = pd.DataFrame({"workload_id": sl_busy.index.astype(str), "job_key": sl_busy.index.astype(str),
                          "model_group": groups.reindex(sl_busy.index).to_numpy(), "true_util": util, "true_mem_mib": 0.0,
                          "pred_util": util, "pred_util_high": util, "pred_mem_mib": 0.0, "pred_mem_mib_high": 0.0,
                          "iter_time_s": steps.reindex(sl_busy.index).to_numpy(float)})
    return check_workload_table(table, "Gavel job types")


def gavel_world(solo: pd.DataFrame, pairs: pd.DataFrame, gpu: str = "v100", k: int = 3, n_folds: int = 5,
                seed: int = 0) -> World:
    """The world of Gavel's job types on one GPU kind (``solo``, ``pairs``: :func:`gpupred.importers.gavel.read_tables`)."""
    from gpupred.colocation.gavelpairs import gavel_table
    from gpupred.colocation.study import GAVEL_INPUTS, gavel_slice, reference_choice

    sl = gavel_slice(solo, pairs, gpu)
    if "timeshare_xgpu" not in sl.predictors:
        raise GpupredError(f"Gavel world on {gpu!r}: no utilization estimate (gpupred.hardware lacks it); use p100 or v100")
    table = gavel_table(pairs, gpu)
    inputs = sl.X.drop_duplicates("job_key").set_index("job_key")
    jobs = pd.DataFrame({"job_key": sorted(set(table["job_key"]))})
    jobs["model_group"] = jobs["job_key"].map(table.drop_duplicates("job_key").set_index("job_key")["model_group"])
    for c in GAVEL_INPUTS:
        jobs[c] = jobs["job_key"].map(inputs[f"own_{c}"]).to_numpy(float)
    workloads = _gavel_workloads(jobs.set_index("job_key")["busy_xgpu"], jobs.set_index("job_key")["step_s"],
                                 jobs.set_index("job_key")["model_group"])
    every = pair_frame(table, pd.DataFrame({c: table["job_key"].map(jobs.set_index("job_key")[c]) for c in GAVEL_INPUTS}),
                       GAVEL_INPUTS)
    refs = reference_choice(sl, 5)
    known = heldout_matrices(sl.X, jobs, GAVEL_INPUTS, lambda: SlowdownModel(clone(sl.predictors[sl.prior])), refs, k,
                             n_folds, seed, F=every)
    keys = workloads["job_key"].tolist()
    measured = pair_slowdown_matrix(table, keys)
    failed = _failed_matrix(table, keys)
    notes = [f"ours' pair slowdowns: {sl.prior} x job effects and pair failures, held out by model group, each job "
             f"adapted on {k} co-runs with {', '.join(refs[:k])}; upper bound x{np.exp(known.width):.2f}",
             "utilization from solo step times on P100 and V100 (no measurement); memory unknown (0)"]
    return World(str(table["gpu_name"].iloc[0]), GAVEL_MEMORY_MIB, workloads, measured, np.where(failed, 1.0, measured),
                 known.point, known.high, failed, known.fail, refs[:k], notes)


def _failed_matrix(table: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Whether the co-run of ``keys[i]`` with ``keys[j]`` failed (pairs of a co-location table)."""
    index = {k: i for i, k in enumerate(keys)}
    f = table[table["group_failed"].astype(bool) & (table["group_size"] == 2)].sort_values(["group_id", "member"])
    own = f["job_key"].to_numpy()
    partner = own.reshape(-1, 2)[:, ::-1].ravel()
    out = np.zeros((len(keys), len(keys)), dtype=bool)
    for a, b in zip(own, partner):
        if a in index and b in index:
            out[index[a], index[b]] = out[index[b], index[a]] = True
    return out
