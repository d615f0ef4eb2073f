"""The co-location study of notebook 06: every slowdown predictor scored held out by model group on each slice.

A *slice* is one set of measured pairs on one GPU kind with the inputs its predictors read:

- ``lucid_nonrl``: Lucid's RTX 3090 pairs whose members were both rebuilt as graphs (every job but the
  reinforcement-learning ones); ``lucid_rl``: all of Lucid's pairs. Reinforcement-learning jobs have no graph, so
  no prediction: in ``lucid_rl`` their predicted inputs are their measured solo ones (what a short solo profile
  gives), and the slice says how many rows that touches.
- ``gavel_k80``, ``gavel_p100``, ``gavel_v100``: Gavel's matrix per GPU kind; no utilization, so the prior is the
  step share of the solo step times (``step_share``), beside the time-sharing estimate from a busy share fitted to
  each job's solo steps on P100 and V100 (``timeshare_xgpu``; not on the K80, which the hardware table lacks), and
  the correction reads the step times on every GPU kind.
- ``own_<gpu>``: this project's own co-located pairs (``data/raw``), once they exist.

Predictors (:mod:`gpupred.slowdown.estimator`), by name: ``sum_util_pred`` (summed predicted utilization),
``timeshare_phys`` (time-sharing from the step model's busy and host time), ``timeshare_pred`` (time-sharing from
predicted utilization), ``sum_util_meas`` and ``timeshare_meas`` (the same from *measured* solo utilization: oracles),
``step_share`` (Gavel's prior), ``corrected`` (the adaptation prior times a correction kept where inner CV beats
it) and ``adapted_k<k>`` (:class:`~gpupred.slowdown.estimator.SlowdownModel` on the adaptation prior, each
held-out job adapted on ``k`` co-runs with the fixed reference jobs). Every figure of one slice is on the same
rows: the pairs held out by model group that hold no reference job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from gpupred.slowdown import evaluate as scoring
from gpupred.slowdown.estimator import (
    CorrectedSlowdown,
    SlowdownEstimator,
    SlowdownModel,
    StepShare,
    SummedUtilization,
    TimeSharing,
    pair_frame,
)
from gpupred.colocation.members import align, usable_groups, with_busy
from gpupred.errors import GpupredError

LABELS: dict[str, str] = {
    "sum_util_pred": "Σ predicted util / 100", "timeshare_phys": "time-sharing, step model",
    "timeshare_pred": "time-sharing, predicted util", "sum_util_meas": "Σ measured util / 100 (oracle)",
    "timeshare_meas": "time-sharing, measured util (oracle)", "step_share": "step share of solo step times",
    "timeshare_xgpu": "time-sharing, busy share from solo steps on P100 and V100",
    "corrected": "prior x correction (kept where inner CV beats it)",
}
LUCID_INPUTS: tuple[str, ...] = ("util_pred", "busy_pred", "busy_phys", "util_meas", "busy_meas", "mem_pred",
                                 "sm_active_pred", "flops_train", "arithmetic_intensity")
LUCID_CORRECTION: tuple[str, ...] = ("util_pred", "mem_pred", "sm_active_pred", "flops_train", "arithmetic_intensity",
                                     "busy_phys")
GAVEL_GPUS: tuple[str, ...] = ("k80", "p100", "v100")
GAVEL_INPUTS: tuple[str, ...] = ("step_s", "busy_xgpu", *(f"step_s_{g}" for g in GAVEL_GPUS))
MIN_COVERAGE = 0.9  # a reference job must have been co-run with at least this share of the slice's jobs


@dataclass
class Slice:
    """One slice: its usable pairs (pair frame), predictors, adaptation prior, solo features for references, noise."""

    name: str
    label: str
    X: pd.DataFrame
    predictors: dict[str, SlowdownEstimator]
    prior: str  # the predictor (a zero-parameter prior) that adaptation and the correction start from
    ref_features: pd.DataFrame  # per job_key: solo features (references are chosen from these only)
    noise_sd: float  # self-pair noise of one log slowdown; NaN when the slice has no noise estimate
    notes: list[str] = field(default_factory=list)
    failed_pairs: int = 0


def _lucid_inputs(table: pd.DataFrame, features: pd.DataFrame, fill_measured: bool) -> tuple[pd.DataFrame, int]:
    """Per row of ``table``: :data:`LUCID_INPUTS` (predicted, measured); rows filled from measured inputs counted."""
    m = align(table, features if "busy_phys" in features.columns else with_busy(features))
    util_meas = table["solo_util"].to_numpy(float)
    out = pd.DataFrame({"util_pred": m["gpu_util"].to_numpy(float), "busy_phys": m["busy_phys"].to_numpy(float),
                        "mem_pred": m["mem_mib"].to_numpy(float), "util_meas": util_meas, "busy_meas": util_meas / 100.0,
                        "sm_active_pred": m.get("sm_active", pd.Series(np.nan, index=m.index)).to_numpy(float),
                        "flops_train": m.get("flops_train", pd.Series(np.nan, index=m.index)).to_numpy(float),
                        "arithmetic_intensity": m.get("arithmetic_intensity",
                                                      pd.Series(np.nan, index=m.index)).to_numpy(float)})
    missing = ~np.isfinite(out["util_pred"].to_numpy())
    if fill_measured:
        out.loc[missing, "util_pred"] = util_meas[missing]
        out.loc[missing, "mem_pred"] = table["solo_mem_mib"].to_numpy(float)[missing]
        out.loc[~np.isfinite(out["busy_phys"]), "busy_phys"] = out["util_pred"] / 100.0
    out["busy_pred"] = out["util_pred"] / 100.0
    return out, int(missing.sum()) if fill_measured else 0


def _noise(table: pd.DataFrame) -> tuple[float, str]:
    """The self-pair noise of one log slowdown on usable pairs, and a note when there is none."""
    from gpupred.colocation.effects import self_pair_noise

    t = table[usable_groups(table)]
    try:
        return self_pair_noise(t[t.groupby("group_id")["group_id"].transform("size") == 2].reset_index(drop=True))["noise_sd"], ""
    except GpupredError as err:
        return float("nan"), f"no self-pair noise estimate ({err})"


def _measured_predictors(prior: str) -> dict[str, SlowdownEstimator]:
    """The predictors of a slice with utilization: priors from predicted and measured inputs, and the correction."""
    priors: dict[str, SlowdownEstimator] = {
        "sum_util_pred": SummedUtilization("util_pred"), "timeshare_phys": TimeSharing("busy_phys"),
        "timeshare_pred": TimeSharing("busy_pred"), "sum_util_meas": SummedUtilization("util_meas"),
        "timeshare_meas": TimeSharing("busy_meas"),
    }
    return {**priors, "corrected": CorrectedSlowdown(clone(priors[prior]), LUCID_CORRECTION)}


def utilization_slice(name: str, label: str, table: pd.DataFrame, features: pd.DataFrame, ref_features: pd.DataFrame,
                      fill_measured: bool = False) -> Slice:
    """A slice of pairs with measured solo utilization (Lucid's or this project's) and out-of-fold ``features``."""
    inputs, filled = _lucid_inputs(table, features, fill_measured)
    keep = usable_groups(table, inputs, "util_pred")
    X = pair_frame(table[keep], inputs[keep], LUCID_INPUTS)
    noise, why = _noise(table)
    notes = [why] if why else []
    if filled:
        notes.append(f"{filled} member rows without a graph (no prediction) take their measured solo utilization and "
                     "memory as predicted inputs")
    dropped = int((~keep & ~table["group_failed"].astype(bool).to_numpy()).sum())
    if dropped:
        notes.append(f"{dropped} member rows left out (no slowdown or no predicted utilization)")
    failed = int(table.loc[table["group_failed"].astype(bool), "group_id"].nunique())
    return Slice(name, label, X, _measured_predictors("timeshare_pred"), "timeshare_pred", ref_features, noise, notes,
                 failed)


def solo_reference_features(solo: pd.DataFrame) -> pd.DataFrame:
    """Per job (index ``job_key``): the measured solo features references are chosen from -- utilization, memory-
    controller utilization, SM activity, log memory -- (columns with no value are dropped by the chooser)."""
    s = solo.drop_duplicates("job_key").set_index("job_key")
    return pd.DataFrame({"util": s["gpu_util"], "gmem_util": s["gmem_util"], "sm_active": s["sm_active"],
                         "log_mem": np.log(s["mem_mib"].astype(float))})


def lucid_slices(table: pd.DataFrame, solo: pd.DataFrame, features: pd.DataFrame) -> list[Slice]:
    """``lucid_nonrl`` and ``lucid_rl`` from Lucid's co-location table, solo truth and out-of-fold features."""
    lucid = table[table["source"] == "lucid"].reset_index(drop=True)
    if lucid.empty:
        return []
    refs = solo_reference_features(solo[solo["source"] == "lucid"])
    graph = lucid["workload_id"].notna().groupby(lucid["group_id"]).transform("all").to_numpy()
    return [utilization_slice("lucid_nonrl", "Lucid RTX 3090, non-RL", lucid[graph].reset_index(drop=True), features, refs),
            utilization_slice("lucid_rl", "Lucid RTX 3090, with RL", lucid, features, refs, fill_measured=True)]


def own_slices(table: pd.DataFrame, solo: pd.DataFrame, features: pd.DataFrame) -> list[Slice]:
    """One slice per GPU kind of this project's own co-located pairs (none until they are measured)."""
    from gpupred.dataset import SOURCE_OWN

    own = table[table["source"] == SOURCE_OWN]
    out = []
    for gpu, t in own.groupby("gpu_name", sort=True):
        refs = solo_reference_features(solo[(solo["source"] == SOURCE_OWN) & (solo["gpu_name"] == gpu)])
        key = "own_" + "".join(ch if ch.isalnum() else "_" for ch in str(gpu).lower()).strip("_")
        out.append(utilization_slice(key, f"this project, {gpu}", t.reset_index(drop=True), features, refs))
    return out


def gavel_slice(solo: pd.DataFrame, pairs: pd.DataFrame, gpu: str) -> Slice:
    """The slice of Gavel's pairs on one GPU kind (``k80``, ``p100``, ``v100``)."""
    from gpupred.colocation.gavelpairs import cross_gpu_busy, gavel_job_features, gavel_table

    table = gavel_table(pairs, gpu)
    steps = gavel_job_features(solo)
    busy = cross_gpu_busy(steps).set_index("job_key")
    busy = busy[f"busy_{gpu}"] if f"busy_{gpu}" in busy else pd.Series(np.nan, index=busy.index)
    steps = steps.set_index("job_key")
    inputs = pd.DataFrame({"step_s": table["iter_time_solo_s"].to_numpy(float),
                           "busy_xgpu": table["job_key"].map(busy).to_numpy(float)})
    for g in GAVEL_GPUS:
        inputs[f"step_s_{g}"] = table["job_key"].map(steps[f"step_s_{g}"]).to_numpy(float)
    keep = usable_groups(table)
    X = pair_frame(table[keep], inputs[keep], GAVEL_INPUTS)
    prior = StepShare("step_s")
    predictors: dict[str, SlowdownEstimator] = {"step_share": prior}
    if busy.notna().all():  # the busy share needs the kind's datasheet (gpupred.hardware has no K80)
        predictors["timeshare_xgpu"] = TimeSharing("busy_xgpu")
    features = tuple(c for c in GAVEL_INPUTS if X[f"own_{c}"].notna().all())
    predictors["corrected"] = CorrectedSlowdown(clone(prior), features)
    failed = int(table.loc[table["group_failed"], "group_id"].nunique())
    notes = [f"{failed} of {table['group_id'].nunique()} co-runs failed (no slowdown)",
             "self-pairs average their two members upstream: no noise estimate, so no job can be flagged"]
    return Slice(f"gavel_{gpu}", f"Gavel {gpu.upper()}", X, predictors, "step_share", np.log(steps).add_prefix("log_"),
                 float("nan"), notes, failed)


@dataclass
class SliceResult:
    """What :func:`run_slice` computed for one slice."""

    name: str
    label: str
    refs: list[str]
    scores: pd.DataFrame  # one row per (predictor, rows): the metrics of scoring.METRICS and counts
    heldout: pd.DataFrame  # the scored rows: keys, slowdown, cell, one column per predictor
    flags: pd.DataFrame  # the solo-baseline check per job
    per_cell: pd.DataFrame  # Spearman per cell and predictor
    chosen: pd.Series  # per cell: what the correction kept ("prior" or a candidate)
    coruns: pd.DataFrame  # per (cell, job, k): co-runs the adaptation used
    notes: list[str] = field(default_factory=list)


def reference_choice(sl: Slice, k: int) -> list[str]:
    """The slice's ``k`` reference jobs: chosen from solo features among jobs co-run with most of the others."""
    jobs = sorted(set(sl.X["job_key"]))
    cover = scoring.corun_coverage(sl.X)
    feats = sl.ref_features.reindex(jobs)
    return scoring.reference_jobs(feats, k, candidates=cover[cover >= MIN_COVERAGE].index)


def _predict_all(sl: Slice, cells: list[scoring.Cell], refs: list[str], ks: list[int]) -> tuple[dict, list, pd.DataFrame]:
    """Held-out predictions of every predictor and of adaptation at each ``k``; the correction's models; co-runs used."""
    preds: dict[str, np.ndarray] = {}
    corrected: list[Any] = []
    for name, template in sl.predictors.items():
        preds[name], models = scoring.crossfit_predict(lambda t=template: clone(t), sl.X, cells)
        if name == "corrected":
            corrected = models
    prior = sl.predictors[sl.prior]
    cal, coruns = scoring.adaptation_predictions(lambda: SlowdownModel(clone(prior)), sl.X, cells, refs, ks)
    preds.update({f"adapted_k{k}": v for k, v in cal.items()})
    return preds, corrected, coruns


def _score_rows(sl: Slice, preds: dict[str, np.ndarray], cell: np.ndarray, unflagged: np.ndarray) -> pd.DataFrame:
    """One row per predictor and row set (all scored rows; rows without a flagged job)."""
    rows = []
    for name, p in preds.items():
        for subset, mask in (("all", None), ("unflagged", unflagged)):
            rows.append({"predictor": name, "rows_kept": subset, **scoring.score(sl.X, p, cell, mask)})
    return pd.DataFrame(rows)


def run_slice(sl: Slice, n_folds: int = 5, seed: int = 0, ks: range | list[int] = range(6)) -> SliceResult:
    """Score every predictor of ``sl`` and adaptation at each ``k`` held out by model group (see the module doc)."""
    ks = list(ks)
    refs = reference_choice(sl, max(ks)) if max(ks) > 0 else []
    cells = scoring.group_cells(sl.X, n_folds, seed, fixed=refs)
    cell = scoring.cell_index(len(sl.X), cells)
    preds, corrected, coruns = _predict_all(sl, cells, refs, ks)
    flags = scoring.solo_baseline_flags(sl.X, sl.noise_sd)
    bad = set(flags.loc[flags["flagged"], "job_key"])
    unflagged = ~(sl.X["job_key"].isin(bad) | sl.X["partner_key"].isin(bad)).to_numpy()
    per_cell = pd.DataFrame({name: scoring.cell_spearman(sl.X, p, cell) for name, p in preds.items()})
    chosen = pd.Series([getattr(m, "chosen_", "") for m in corrected], name="kept", dtype=object)
    held = sl.X[["group_id", "member", "job_key", "partner_key", "model_group", "partner_group", "slowdown"]].assign(
        cell=cell, **preds)
    return SliceResult(sl.name, sl.label, refs, _score_rows(sl, preds, cell, unflagged), held[cell >= 0].reset_index(drop=True),
                       flags, per_cell, chosen, coruns, list(sl.notes))


def slice_metrics(result: SliceResult) -> dict[str, float]:
    """``slowdown_<metric>_<slice>_<predictor>`` (``..._unflagged`` without flagged jobs) and counts, for metrics.json."""
    out: dict[str, float] = {}
    for r in result.scores.itertuples():
        tail = "" if r.rows_kept == "all" else "_unflagged"
        for m in scoring.METRICS:
            out[f"slowdown_{m}_{result.name}_{r.predictor}{tail}"] = float(getattr(r, m))
    out[f"slowdown_rows_{result.name}"] = int(result.scores.loc[result.scores["rows_kept"] == "all", "rows"].max())
    out[f"slowdown_flagged_jobs_{result.name}"] = int(result.flags["flagged"].sum())
    return out


def heldout_metrics(result: SliceResult, predictor: str = "sum_util_pred",
                    name: str = "sum_util_heldout") -> dict[str, float]:
    """``predictor``'s figures of :func:`slice_metrics` (all rows) renamed ``name``: a slice scored again with its
    members' utilization from a predictor that never trained on them (:func:`gpupred.colocation.members.
    with_utilization`), reported beside the out-of-fold ones."""
    suffix = f"_{result.name}_{predictor}"
    return {k[: -len(suffix)] + f"_{result.name}_{name}": v for k, v in slice_metrics(result).items()
            if k.endswith(suffix)}
