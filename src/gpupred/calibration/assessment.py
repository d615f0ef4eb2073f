"""How much a calibration helps, and how wide a calibrated GPU's intervals must be: measured on the project's own GPUs.

For each measured GPU kind that has a committed calibration (``data/calibrations/``, recorded by ``gpupred
calibrate`` on that GPU) and at least ``HELDOUT_MIN_ROWS`` labelled runs: its training runs are held out (its fit
removed from the constants table, its rows from the footprint's fit), and its runs are predicted, by physics alone as
:func:`gpupred.step.rowphysics.extrapolation_width` does, three ways:

- ``borrowed``: as an unmeasured GPU is today (:meth:`gpupred.step.physics.constants.ConstantsTable.get`, the
  footprint's borrowing);
- ``calibrated``: the borrowed constants scaled by its calibration relative to the other measured GPUs' calibrations
  (:mod:`gpupred.calibration.use`: what a prediction on a calibrated GPU does);
- ``raw``: its micro-benchmark readings pasted in (kept to show why predictions do not do that).

Utilization (log1p), iteration time (log) and memory (log; the footprint alone) are scored per GPU. A calibrated
GPU's interval width is the conformal quantile of the ``calibrated`` |log error| with every held-out GPU weighing the
same, and only from held-out GPUs scored against the kind of reference predictions use
(:func:`calibrated_widths`): with a single measured GPU calibrated, it is held out against the published defaults
while predictions compare with its own readings, so no width is taken. Until widths are measured a calibrated GPU
gets the extrapolated width (the predictor card says so).

What the first GPU-recorded calibration (an H200, 2026-11-27) showed: the published defaults are not micro-benchmark
readings of a datacenter GPU. The H200's readings differ from them by up to 12x (a per-step sync 140 us against 15,
the optimizer's per-tensor host cost 2.5 us against 0.2), so scaling by them (``calibrated`` against the stand-in)
made its held-out errors several times the borrowed constants' (the card's table). Readings are only comparable
with readings: the measured GPUs' calibrations are the reference from then on.

What the second (an H100, 2026-11-27) showed, each GPU held out against the other's readings: calibrated is still
worse than borrowed on both (utilization median |log error| 0.108 against 0.075 on the H100, 0.120 against 0.069 on
the H200). Two Hoppers' readings differ by about the benchmarks' own spread, and the fitted constants they scale
absorb more than a benchmark isolates: scaling the minimum kernel time alone by 1.19 takes the H100's error from
0.075 to 0.104. The widths are measured from these errors all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.calibration.file import Calibration
from gpupred.calibration.use import STANDIN, Reference, applied, reference_of, standin_reference
from gpupred.learn.conformal import conformal_quantile

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

METHODS: tuple[str, ...] = ("borrowed", "calibrated", "raw")
SCORED_TARGETS: dict[str, bool] = {"gpu_util": False, "iter_time_mean_s": True}  # target -> in log (else log1p)
HELDOUT_MIN_ROWS = 20  # as gpupred.step.rowphysics.HELDOUT_MIN_ROWS: a GPU held out needs this many labelled runs
MEMORY_PROTOCOL = "gpupred"  # the footprint's protocol of this project's runs


def committed_calibrations(folder: Any = None) -> list[Calibration]:
    """The calibrations committed under ``data/calibrations/`` (each checked; a bad one is refused)."""
    from pathlib import Path

    from gpupred import config
    from gpupred.calibration.file import read_calibration

    root = Path(folder) if folder is not None else config.CALIBRATIONS
    return [read_calibration(p) for p in sorted(root.glob("*.json"))] if root.is_dir() else []


def _step_errors(pdata: Any, table: Any, gpu: str, cal: Calibration, y: dict[str, np.ndarray], protocol: str,
                 calibrations: list[Calibration]) -> list[dict[str, Any]]:
    """Per target and method, the log errors of physics alone on ``gpu``'s runs with its fit removed."""
    from gpupred.step.rowphysics import physics_log_error
    from gpupred.step.physics.constants import ConstantsTable
    from gpupred.step.physics.fit import predict_rows

    idx = np.array([i for i, k in enumerate(pdata.keys) if k == (gpu, protocol)])
    others = ConstantsTable({k: c for k, c in table.fitted.items() if k != (gpu, protocol)})
    borrowed = others.get(gpu, protocol)
    ref = reference_of([c for c in calibrations if c is not cal], {g for g, p in others.fitted if p == protocol})
    use = applied(cal)
    constants = {"borrowed": borrowed, "calibrated": use.step_constants(borrowed, ref),
                 "raw": replace(borrowed, **use.derived.step)}
    out = []
    for method, c in constants.items():
        util, step = predict_rows(pdata.rows, c, idx)
        for target, in_log in SCORED_TARGETS.items():
            err = physics_log_error(y[target][idx], step if in_log else util, in_log)
            out.append({"gpu": gpu, "target": target, "method": method, "errors": err[np.isfinite(err)],
                        "reference": ref.basis})
    return out


def _memory_errors(frame: pd.DataFrame, gpu: str, cal: Calibration, calibrations: list[Calibration]) -> list[dict[str, Any]]:
    """Per method, the log errors of the footprint alone on ``gpu``'s own runs, fitted without them."""
    from gpupred.memory.physics import WORKSPACE_MIB, Footprint

    own = frame["source"].astype(str) == MEMORY_PROTOCOL
    held = own & (frame["gpu"].astype(str) == gpu) & frame["memory_mib"].notna()
    fitted = Footprint().fit(frame[~(frame["gpu"].astype(str) == gpu) & frame["memory_mib"].notna()])
    key = f"{gpu}|{MEMORY_PROTOCOL}"
    use = applied(cal)
    ref = reference_of([c for c in calibrations if c is not cal], {k.split("|")[0] for k in fitted.context_mib})
    mem = use.derived.memory
    alloc = mem.get("allocator", fitted.constant(key, fitted.allocator, 1.0))
    raw = replace(fitted, context_mib={**fitted.context_mib, key: mem.get("fixed_mib", 0.0) - alloc * WORKSPACE_MIB},
                  allocator={**fitted.allocator, key: alloc})
    y = np.log(frame.loc[held, "memory_mib"].to_numpy(float))
    return [{"gpu": gpu, "target": "memory_mib", "method": method, "reference": ref.basis,
             "errors": y - np.log(np.maximum(fp.predict(frame[held]), 1.0))}
            for method, fp in (("borrowed", fitted), ("calibrated", use.footprint(fitted, key, ref)), ("raw", raw))]


def heldout_errors(df: pd.DataFrame, pdata: Any, table: Any, calibrations: list[Calibration],
                   memory_frame: pd.DataFrame | None = None, protocol: str = "nvml-poll") -> list[dict[str, Any]]:
    """Per held-out GPU, target and method, the log errors of its runs (see the module docstring); [] when no
    measured GPU has a calibration and enough runs."""
    from gpupred.hardware import gpu_spec

    y = {t: df[t].to_numpy(float) for t in SCORED_TARGETS if t in df.columns}
    out: list[dict[str, Any]] = []
    for cal in calibrations:
        if not cal.in_table():
            continue
        gpu = gpu_spec(cal.gpu_name).name
        n = sum(1 for i, k in enumerate(pdata.keys) if k == (gpu, protocol) and np.isfinite(y["gpu_util"][i]))
        if (gpu, protocol) not in table.fitted or n < HELDOUT_MIN_ROWS:
            continue
        out += _step_errors(pdata, table, gpu, cal, y, protocol, calibrations)
        if memory_frame is not None:
            out += _memory_errors(memory_frame, gpu, cal, calibrations)
    return out


def equal_weight_quantile(errors: list[np.ndarray], alpha: float) -> float:
    """The conformal 1 - alpha quantile of |errors| pooled with every group weighing the same (each enters as as many
    evenly spaced quantiles as the smallest group has rows); NaN without errors."""
    groups = [np.abs(e) for e in errors if len(e)]
    if not groups:
        return float("nan")
    m = min(len(e) for e in groups)
    levels = (np.arange(m) + 0.5) / m
    return conformal_quantile(np.concatenate([np.quantile(e, levels, method="inverted_cdf") for e in groups]), alpha)


def summarize(errors: list[dict[str, Any]], alpha: float = 0.1) -> pd.DataFrame:
    """One row per (GPU, target, method): runs, median |log error|, its conformal 1 - alpha quantile."""
    import pandas as pd

    rows = [{"gpu": e["gpu"], "target": e["target"], "method": e["method"], "n": int(len(e["errors"])),
             "median_abs_log_error": float(np.median(np.abs(e["errors"]))) if len(e["errors"]) else float("nan"),
             "q_abs_log_error": conformal_quantile(np.abs(e["errors"]), alpha), "reference": e["reference"]}
            for e in errors]
    return pd.DataFrame(rows, columns=["gpu", "target", "method", "n", "median_abs_log_error", "q_abs_log_error",
                                       "reference"])


@dataclass
class CalibratedCore:
    """What a predictor keeps about calibrations: the reference readings, measured widths, the held-out table."""

    reference: Reference = field(default_factory=standin_reference)
    widths: dict[str, float] = field(default_factory=dict)  # target -> log width (measured; {} = not yet)
    heldout: list[dict[str, Any]] = field(default_factory=list)  # summarize() records
    software: dict[str, list[str]] = field(default_factory=dict)  # the training runs' torch and CUDA versions

    def describe(self) -> dict[str, Any]:
        """The card's account of calibrated GPUs."""
        if self.widths:
            width: Any = {t: round(w, 4) for t, w in self.widths.items()}
        elif self.heldout:
            width = ("not measured yet: the one measured GPU with a calibration could be held out only against the "
                     "published defaults (the held-out table), while predictions compare with its readings; that "
                     "needs a second measured GPU's calibration, so a calibrated GPU's intervals are as wide as an "
                     "extrapolated GPU's")
        else:
            width = ("not measured yet (no GPU-recorded calibration of a measured GPU is committed): a calibrated GPU's "
                     "intervals are as wide as an extrapolated GPU's")
        return {"reference_readings": self.reference.basis, "interval_log_width": width, "heldout": self.heldout,
                "training_software": self.software,
                "rule": "a GPU without fits but with a calibration: measured constants = borrowed x (its reading / "
                        "the reference reading), unmeasured ones borrowed; a GPU with fits keeps them"}


def calibrated_core(df: pd.DataFrame, pdata: Any, table: Any, memory_frame: pd.DataFrame | None, alpha: float,
                    calibrations: list[Calibration] | None = None, protocol: str = "nvml-poll") -> CalibratedCore:
    """The :class:`CalibratedCore` of a predictor fitted on ``df`` (default calibrations: the committed ones)."""
    from gpupred.calibration.use import training_software

    cals = committed_calibrations() if calibrations is None else calibrations
    measured = {g for g, p in table.fitted if p == protocol}
    errors = heldout_errors(df, pdata, table, cals, memory_frame, protocol)
    reference = reference_of(cals, measured)
    return CalibratedCore(reference, calibrated_widths(errors, reference, alpha),
                          summarize(errors, alpha).to_dict("records"), training_software(df))


def calibrated_widths(errors: list[dict[str, Any]], reference: Reference, alpha: float) -> dict[str, float]:
    """Per target, a calibrated GPU's interval log width: the equal-weight conformal quantile of the ``calibrated``
    held-out errors scored against the kind of reference the predictions use. A GPU held out can only be compared
    with the *other* measured GPUs' calibrations: with one measured GPU calibrated, that is the published defaults,
    while predictions compare with that GPU's readings, so its errors measure another rule and no width is taken
    ({}: a calibrated GPU keeps the extrapolated width; the held-out table still says what the stand-in costs)."""
    usable = [e for e in errors if e["method"] == "calibrated" and (e["reference"] == STANDIN) == (not reference.gpus)]
    return {target: equal_weight_quantile([e["errors"] for e in usable if e["target"] == target], alpha)
            for target in sorted({e["target"] for e in usable})}
