"""The time-sharing estimate of co-located slowdowns: what a pair's GPU-busy fractions imply without MPS.

Model (two processes on one GPU, no MPS; each member's numbers are its *solo* ones):

- A training step of member ``a`` alternates GPU phases (kernels queued or running: its GPU-busy time
  ``G_a``) and host phases (Python, data loading, launch overhead, syncs: ``H_a``); solo step
  ``T_a = G_a + H_a`` and busy fraction ``b_a = G_a / T_a`` (≈ NVML utilization / 100).
- Without MPS the GPU time-slices between contexts: kernels of two processes never overlap. When both
  want the GPU, each gets it half of the time (equal time slices), so a GPU phase that overlaps its
  partner's GPU phase runs at half speed. Host phases are not slowed (the host has cores to spare).
- The phases of the two members are independent: the share of ``a``'s GPU time during which ``b``
  also wants the GPU is ``b``'s *co-located* busy fraction ``q_b = G_b (1 + q_a) / T'_b``.

So ``a``'s step stretches to ``T'_a = H_a + G_a (1 + q_b)``: the slowdown is ``s_a = 1 + b_a q_b``, with
``q_b = b_b (1 + q_a) / s_b``. The fixed point is found by iteration (it contracts); ``s`` lies in
``[1, 1 + b_a]``, so two fully busy jobs each run at half speed (``s = 2``), and a job that never waits
for the GPU is never slowed. What it leaves out -- the learned correction's job: memory-bandwidth and
cache interference between kernels, context-switch cost, time slices longer than short kernels, and
CPU contention.

Inputs are arrays, so the same function serves the stand-in (out-of-fold predicted utilization / 100)
and the step model's ``phys_gpu_busy_s`` / ``phys_step_s`` (:func:`busy_fraction`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError

# Per-row columns of the step model (gpupred.step.physics) that give a busy fraction, when the dataset has them.
PHYS_BUSY, PHYS_STEP, PHYS_UTIL = "phys_gpu_busy_s", "phys_step_s", "phys_util"


def pair_timeshare(busy_a: np.ndarray, busy_b: np.ndarray, iterations: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Time-sharing slowdowns ``(s_a, s_b)`` of two co-located jobs from their solo GPU-busy fractions (0..1)."""
    a = np.clip(np.asarray(busy_a, dtype=float), 0.0, 1.0)
    b = np.clip(np.asarray(busy_b, dtype=float), 0.0, 1.0)
    if a.shape != b.shape:
        raise GpupredError(f"busy fractions of the two members differ in shape: {a.shape} vs {b.shape}")
    qa, qb = a.copy(), b.copy()
    for _ in range(iterations):
        sa, sb = 1.0 + a * qb, 1.0 + b * qa
        qa, qb = np.minimum(1.0, a * (1.0 + qb) / sa), np.minimum(1.0, b * (1.0 + qa) / sb)
    return 1.0 + a * qb, 1.0 + b * qa


def timeshare_slowdown(own_busy: np.ndarray, partner_busy: np.ndarray) -> np.ndarray:
    """Time-sharing slowdown of each job sharing a GPU with its partner (busy fractions 0..1, NaN passes)."""
    s, _ = pair_timeshare(own_busy, partner_busy)
    return np.where(np.isfinite(own_busy) & np.isfinite(partner_busy), s, np.nan)


def phys_busy(frame: pd.DataFrame) -> pd.Series:
    """The step model's busy fraction per row: ``phys_gpu_busy_s / phys_step_s``, else ``phys_util / 100``, else NaN."""
    if PHYS_BUSY in frame.columns and PHYS_STEP in frame.columns:
        step = frame[PHYS_STEP].astype(float)
        return (frame[PHYS_BUSY].astype(float) / step.where(step > 0)).clip(0.0, 1.0)
    if PHYS_UTIL in frame.columns:
        return (frame[PHYS_UTIL].astype(float) / 100.0).clip(0.0, 1.0)
    return pd.Series(np.nan, index=frame.index)


def busy_fraction(frame: pd.DataFrame, source: str = "auto", util_column: str = "gpu_util") -> pd.Series:
    """Each row's GPU-busy fraction from ``source``: "util" (``util_column`` / 100), "phys" (step model), "auto" (phys, else util)."""
    if source not in ("auto", "util", "phys"):
        raise GpupredError(f"busy fraction source {source!r}: use auto, util or phys")
    util = (frame[util_column].astype(float) / 100.0).clip(0.0, 1.0) if util_column in frame.columns else None
    if source == "util":
        if util is None:
            raise GpupredError(f"no {util_column} column to take a busy fraction from")
        return util
    phys = phys_busy(frame)
    return phys if source == "phys" or util is None else phys.fillna(util)


def group_timeshare(table: pd.DataFrame, busy: np.ndarray) -> np.ndarray:
    """Time-sharing slowdown of each row of a co-location table (pairs: the partner is the group's other row).

    Larger groups use the partners' summed busy fraction (capped at 1) as one partner; NaN where unknown.
    """
    busy = np.asarray(busy, dtype=float)
    if len(busy) != len(table):
        raise GpupredError(f"{len(busy)} busy fractions for a co-location table of {len(table)} rows")
    total = pd.Series(busy).groupby(table["group_id"].to_numpy()).transform(lambda s: s.sum(min_count=len(s)))
    partner = np.minimum(1.0, total.to_numpy(float) - busy)
    return timeshare_slowdown(busy, partner)
