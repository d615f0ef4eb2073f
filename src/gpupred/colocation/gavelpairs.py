"""Gavel's space-shared pairs (:mod:`gpupred.importers.gavel`) as co-location tables, one per GPU kind.

A Gavel job type is one job (``job_key`` = the upstream job type, e.g. ``ResNet-18 (batch size 16)``), its model
group the model (``ResNet-18``). Slowdowns are the importer's (solo / co-located throughput); a failed co-run (zero
throughput upstream) is a failed group with status ``error`` and no slowdown. Gavel records no utilization and no
memory, so ``solo_util``, ``solo_mem_mib`` and their sums are NaN; a job's solo features are its solo step times
(1 / throughput) on each GPU kind (:func:`gavel_job_features`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.colocation.pairtable import SOLO_COLUMNS, TABLE_COLUMNS
from gpupred.errors import GpupredError, MissingInput

SOURCE_GAVEL = "gavel"


def gavel_table(pairs: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """The co-location table (:data:`~gpupred.colocation.pairtable.TABLE_COLUMNS`) of Gavel's pairs on GPU kind ``gpu``."""
    p = pairs[pairs["gpu"] == gpu].sort_values(["pair_id", "member"]).reset_index(drop=True)
    if p.empty:
        raise GpupredError(f"Gavel has no pairs on {gpu!r}; kinds: {sorted(pairs['gpu'].unique())}")
    from gpupred.importers.gavel import job_fields

    failed = p["failed"].astype(bool).to_numpy()
    out = pd.DataFrame({
        "group_id": p["pair_id"], "group_size": 2, "member": p["member"].astype(int), "source": SOURCE_GAVEL,
        "workload_id": None, "job_key": p["job_key"], "model_group": [job_fields(j)[0] for j in p["job_key"]],
        "gpu_name": p["gpu_name"], "precision": "fp32", "status": np.where(failed, "error", "ok"),
        "partners": p["partner_key"], "iter_time_coloc_s": np.where(failed, np.nan, 1.0 / np.where(failed, 1.0, p["coloc_tput"])),
        "iter_time_solo_s": 1.0 / p["solo_tput"].to_numpy(float), "slowdown": p["slowdown"].astype(float),
        "solo_util": np.nan, "solo_mem_mib": np.nan, "sum_util": np.nan, "sum_mem_mib": np.nan, "has_solo": True,
        "group_failed": failed, "group_memory_mib": np.nan,
    })
    return out[list(TABLE_COLUMNS)]


def gavel_solo_truth(solo: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """The solo truth table (:data:`~gpupred.colocation.pairtable.SOLO_COLUMNS`) of Gavel's job types on ``gpu``."""
    from gpupred.importers.gavel import job_fields

    s = solo[solo["gpu"] == gpu].reset_index(drop=True)
    out = pd.DataFrame({
        "job_key": s["job_key"], "workload_id": None, "source": SOURCE_GAVEL,
        "model_group": [job_fields(j)[0] for j in s["job_key"]], "gpu_name": s["gpu_name"], "gpu_util": np.nan,
        "mem_mib": np.nan, "sm_active": np.nan, "gmem_util": np.nan, "iter_time_s": 1.0 / s["solo_tput"].to_numpy(float),
        "speed": s["solo_tput"].astype(float),
    })
    return out[list(SOLO_COLUMNS)]


def gavel_job_features(solo: pd.DataFrame) -> pd.DataFrame:
    """Per job type: its solo step time (s/step) on each GPU kind, ``step_s_<gpu>`` (solo features only)."""
    wide = solo.pivot(index="job_key", columns="gpu", values="solo_tput")
    return (1.0 / wide).add_prefix("step_s_").rename_axis(columns=None).reset_index()


def load_gavel(fixture_file: str = "", allow_import: bool = True) -> tuple[pd.DataFrame, pd.DataFrame] | str:
    """(solo, pairs) of Gavel's matrix, imported at the pinned commit (or from its local copy); or one line saying why not.

    ``fixture_file`` (tests only) reads a FIXTURE file in Gavel's layout without the sha256 pin.
    """
    import json
    from pathlib import Path

    from gpupred.importers import gavel
    from gpupred.importers.source import ensure_imported

    if fixture_file:
        return gavel.tables_from_json(json.loads(Path(fixture_file).read_text()), fixture_file)
    if not allow_import:
        return "the Gavel section is switched off"
    ok, why = ensure_imported(gavel.SOURCE)
    if not ok:
        return why
    try:
        return gavel.read_tables()
    except MissingInput as err:
        return str(err)


# Gavel's GPU kinds as gpupred.hardware names them (Gavel ran V100s with 16 GB); the K80 is not in that table.
HARDWARE_NAMES: dict[str, str] = {"p100": "P100", "v100": "V100 SXM2 16GB"}


def time_factor(kind: str, reference: str = "v100") -> float:
    """How many times longer GPU work takes on ``kind`` than on ``reference``: the inverse of the geometric mean of the
    FP32-peak and memory-bandwidth ratios (:mod:`gpupred.hardware`; a step is part compute-, part bandwidth-bound)."""
    from gpupred.hardware import gpu_spec

    if kind not in HARDWARE_NAMES or reference not in HARDWARE_NAMES:
        raise GpupredError(f"GPU kind {kind!r} or {reference!r} is not in gpupred.hardware; known: {sorted(HARDWARE_NAMES)}")
    g, r = gpu_spec(HARDWARE_NAMES[kind]), gpu_spec(HARDWARE_NAMES[reference])
    return float(np.sqrt(r.tflops_fp32 / g.tflops_fp32 * r.mem_bw_gbs / g.mem_bw_gbs))


def cross_gpu_busy(steps: pd.DataFrame, reference: str = "v100") -> pd.DataFrame:
    """Per job: the share of its solo step that speeds up with the GPU (``busy_<kind>``), from solo step times alone.

    ``steps`` is :func:`gavel_job_features`. A job's step on GPU kind ``g`` is taken as ``H + W u_g``: a part ``H``
    that does not depend on the GPU (host work, data loading, launches) and GPU work ``W`` that takes ``u_g`` times
    longer than on ``reference`` (:func:`time_factor`, from the datasheets). Solved per job, non-negative, from its
    step times on the kinds the hardware table knows (P100 and V100: two equations, two unknowns); no pair is read.
    The busy fraction on kind ``g`` is ``W u_g / (H + W u_g)``: a zero-parameter stand-in for utilization where none
    was recorded, as noisy as two solo throughputs per job make it.
    """
    from scipy.optimize import nnls

    kinds = [k for k in HARDWARE_NAMES if f"step_s_{k}" in steps.columns]
    if reference not in kinds or len(kinds) < 2:
        raise GpupredError(f"cross-GPU busy fraction: needs step times on {reference!r} and another of {sorted(HARDWARE_NAMES)}")
    u = np.array([time_factor(k, reference) for k in kinds])
    t = steps[[f"step_s_{k}" for k in kinds]].to_numpy(float)
    design = np.column_stack([np.ones(len(u)), u])
    hw = np.array([nnls(design / row[:, None], np.ones(len(u)))[0] for row in t])  # relative errors: each step weighs the same
    out = pd.DataFrame({"job_key": steps["job_key"].to_numpy()})
    for g, kind in enumerate(kinds):
        gpu_part = hw[:, 1] * u[g]
        total = hw[:, 0] + gpu_part
        out[f"busy_{kind}"] = np.where(total > 0, gpu_part / np.where(total > 0, total, 1.0), 0.0)
    return out
