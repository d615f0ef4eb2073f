"""The step model against kernel traces (issue 38 item 3): kernel count, GPU-busy and host time per step, per family
and per op-class group (torch-free).

Each traced workload's measured figures are the medians over its profiled steps; the step model predicts the same
spec on the trace's GPU under the same protocol (a sync per step, device-resident batches) with given constants (the
published defaults, or a calibration's of that GPU: :mod:`gpupred.calibration`). Errors are ``log(predicted /
measured)``; a family's median and 90th percentile of their absolute values are reported, with the signed median
(the bias). Op classes are compared in ``GROUPS``, the finest split both sides know: the step model labels its
kernels by contraction kind and launch phase, a trace by kernel name (:data:`gpupred.traces.tracetable.OP_CLASSES`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.traces.tracetable import OP_CLASSES

GROUPS: tuple[str, ...] = ("contraction", "optimizer", "other")
TRACE_GROUP: dict[str, str] = {c: ("contraction" if c in ("conv", "gemm", "attention") else
                                   "optimizer" if c == "optimizer" else "other") for c in OP_CLASSES}
QUANTITIES: tuple[str, ...] = ("kernels", "gpu_busy_s", "host_s")


def model_groups(kl: Any) -> np.ndarray:
    """The ``GROUPS`` label of each of a step's kernels (:class:`gpupred.step.physics.kernels.KernelList`)."""
    from gpupred.step.physics.kernels import OPT

    contraction = kl.tensor_core != 0
    return np.where(contraction, "contraction", np.where(kl.phase == OPT, "optimizer", "other"))


def measured(traces: pd.DataFrame) -> pd.DataFrame:
    """Per traced workload (ok rows only): the medians over its steps, with group counts and times."""
    ok = traces[(traces["status"] == "ok") & (traces["step"] >= 0)].copy()
    for c in OP_CLASSES:  # a frame built by hand may leave out classes it has none of
        for col in (f"kernels_{c}", f"kernel_s_{c}"):
            ok[col] = ok[col].fillna(0) if col in ok.columns else 0
    for group in GROUPS:
        classes = [c for c in OP_CLASSES if TRACE_GROUP[c] == group]
        ok[f"kernels_{group}"] = ok[[f"kernels_{c}" for c in classes]].sum(axis=1)
        ok[f"kernel_s_{group}"] = ok[[f"kernel_s_{c}" for c in classes]].sum(axis=1)
    cols = ["kernels", "gpu_busy_s", "host_busy_s", *[f"kernels_{g}" for g in GROUPS], *[f"kernel_s_{g}" for g in GROUPS]]
    out = ok.groupby(["workload_id", "family", "gpu_name"], as_index=False)[cols].median()
    return out.rename(columns={"host_busy_s": "host_s"})


def predicted(workload_id: str, gpu: str, constants: Any) -> dict[str, float]:
    """The step model's kernels, GPU-busy and host seconds, and per group kernels and seconds, of one spec on a GPU."""
    from gpupred.hardware import gpu_spec
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.step.physics.timeline import kernel_times, simulate
    from gpupred.workloads.spec import WorkloadSpec

    spec = WorkloadSpec.from_id(workload_id)
    kl = spec_kernels(spec)
    est = simulate(kl, gpu_spec(gpu), spec.precision, constants, "step", False)
    times = kernel_times(kl, gpu_spec(gpu), spec.precision, constants)
    groups = model_groups(kl)
    out = {"kernels": float(est.kernels), "gpu_busy_s": est.gpu_busy_s, "host_s": est.host_s}
    for group in GROUPS:
        out[f"kernels_{group}"] = float((groups == group).sum())
        out[f"kernel_s_{group}"] = float(times[groups == group].sum())
    return out


def compare_traces(traces: pd.DataFrame, constants: Any = None) -> pd.DataFrame:
    """One row per traced workload: measured (``m_*``) and predicted (``p_*``) figures and their log ratios
    (``err_*`` = log(predicted / measured)) for ``QUANTITIES`` and each group's kernels and seconds."""
    from gpupred.step.physics.constants import DEFAULT

    meas = measured(traces)
    names = [*QUANTITIES, *[f"kernels_{g}" for g in GROUPS], *[f"kernel_s_{g}" for g in GROUPS]]
    rows = []
    for _, m in meas.iterrows():
        p = predicted(m["workload_id"], m["gpu_name"], constants or DEFAULT)
        row = {"workload_id": m["workload_id"], "family": m["family"], "gpu": m["gpu_name"]}
        for n in names:
            row[f"m_{n}"], row[f"p_{n}"] = float(m[n]), float(p[n])
            row[f"err_{n}"] = float(np.log(p[n] / m[n])) if p[n] > 0 and m[n] > 0 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def _stats(errors: pd.Series) -> dict[str, float]:
    e = errors.dropna().to_numpy(float)
    if not len(e):
        return {"n": 0, "median_abs": float("nan"), "p90_abs": float("nan"), "median": float("nan")}
    return {"n": int(len(e)), "median_abs": float(np.median(np.abs(e))), "p90_abs": float(np.quantile(np.abs(e), 0.9)),
            "median": float(np.median(e))}


def error_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per family (and ``all``) and quantity: workloads, median and p90 |log(predicted / measured)|, signed median."""
    rows = []
    for family, g in [*comparison.groupby("family"), ("all", comparison)]:
        for q in QUANTITIES:
            rows.append({"family": family, "quantity": q, **_stats(g[f"err_{q}"])})
    return pd.DataFrame(rows, columns=["family", "quantity", "n", "median_abs", "p90_abs", "median"])


def group_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per op-class group: how the expansion's kernel counts and seconds compare with the traces' (log ratios)."""
    rows = []
    for group in GROUPS:
        for what in ("kernels", "kernel_s"):
            rows.append({"group": group, "quantity": what, **_stats(comparison[f"err_{what}_{group}"])})
    return pd.DataFrame(rows, columns=["group", "quantity", "n", "median_abs", "p90_abs", "median"])


def class_shares(traces: pd.DataFrame) -> pd.DataFrame:
    """Per family, each trace op class's share of the kernels and of the kernel time (what the groups are made of)."""
    ok = traces[(traces["status"] == "ok") & (traces["step"] >= 0)]
    rows = []
    for family, g in ok.groupby("family"):
        n, t = g[[f"kernels_{c}" for c in OP_CLASSES]].sum(), g[[f"kernel_s_{c}" for c in OP_CLASSES]].sum()
        for c in OP_CLASSES:
            rows.append({"family": family, "op_class": c, "kernel_share": float(n[f"kernels_{c}"] / max(n.sum(), 1)),
                         "time_share": float(t[f"kernel_s_{c}"] / t.sum()) if t.sum() > 0 else 0.0})
    return pd.DataFrame(rows, columns=["family", "op_class", "kernel_share", "time_share"])
