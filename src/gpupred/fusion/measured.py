"""The fused and co-located runs of ``data/raw``, per model: the measured curve over F and what it says (issue 41).

- **Fused runs**: real solo runs (``sync=step``, device-resident batches) of a model whose fused specs (F > 1) have
  runs: per (model, GPU kind, F) the status (``ok`` when any run is ok, else the first failure), mean iteration time,
  trials/s = F / iteration time, samples/s, window ``gpu_util`` and the memory label
  (:func:`gpupred.profile.labels.memory_label`).
- **Co-located copies** (``plans/fusion-coloc.txt``): groups whose members all run the model's F = 1 spec: per
  (model, GPU kind, F = group size) the group's outcome, trials/s = the members' summed 1 / iteration time, samples/s
  summed, the device's window ``gpu_util`` and the group's device memory.
- :func:`measured_knee`: the advisor's rule (:func:`gpupred.fusion.advisor.choose_f`) on measured trials/s: the
  smallest ok F within ``tolerance`` of the best ok F; beside it the largest ok F and the smallest F that ran out of
  memory.

Model ids are the F = 1 workload ids, GPU kinds the hardware table's names (``H100 SXM``), as the advisor names them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpupred.fusion.rules import TOLERANCE
from gpupred.workloads.spec import spec_or_none

MEASURED_COLUMNS: tuple[str, ...] = ("model", "gpu", "kind", "F", "status", "n_runs", "iter_time_s", "trials_per_s",
                                     "samples_per_s", "gpu_util", "memory_mib")
FAILURE_ORDER: tuple[str, ...] = ("oom", "error", "timeout", "partner_failed")


def _status(statuses: pd.Series) -> str:
    found = set(statuses)
    return "ok" if "ok" in found else next((s for s in FAILURE_ORDER if s in found), sorted(found)[0])


def fusion_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` (``read_runs``) that belong to fused models: their fused runs (any F, F = 1 included) and
    the co-located groups of F = 1 copies, with ``model`` (the F = 1 id), ``F`` and ``kind``."""
    real = runs[~runs["simulated"].astype(bool) & (runs["sync"] == "step") & ~runs["host_batches"].astype(bool)]
    specs = {w: spec_or_none(w) for w in set(real["workload_id"])}  # None: an imported job, not a fused run
    base = {w: replace(s, fused=1).id for w, s in specs.items() if s is not None}
    fused_models = {base[w] for w, s in specs.items() if s is not None and s.fused > 1}
    r = real[real["workload_id"].map(lambda w: base.get(w) in fused_models)].copy()
    r["model"] = r["workload_id"].map(base)
    copies = r.groupby("group_id")["workload_id"].transform(lambda s: s.nunique() == 1 and len(s) > 1)
    solo = r["group_size"] == 1
    r = r[solo | copies.astype(bool)]
    r["kind"] = np.where(r["group_size"] == 1, "fused", "co-located")
    r["F"] = np.where(r["kind"] == "fused", r["workload_id"].map(lambda w: specs[w].fused), r["group_size"]).astype(int)
    return r[~((r["kind"] == "co-located") & r["workload_id"].map(lambda w: specs[w].fused > 1))]


def _window(r: pd.DataFrame) -> pd.DataFrame:
    """``r`` with each run's window ``gpu_util`` and memory label (solo) or group device memory (groups)."""
    from gpupred.profile.labels import group_device_memory_mib, memory_label
    from gpupred.profile.schema import read_samples
    from gpupred.profile.store import window_means

    frames = []
    for sweep, g in r.groupby("sweep_dir"):
        s = read_samples(Path(sweep), sorted(set(g["group_id"])))
        means = window_means(Path(sweep), g)
        g = g.merge(means[["run_id", "gpu_util"]] if "gpu_util" in means else means[["run_id"]], on="run_id", how="left")
        solo = [memory_label(run, s)[0] if run["status"] == "ok" else np.nan for _, run in g.iterrows()]
        groups = group_device_memory_mib(g[g["group_size"] > 1], s)
        g["memory_mib"] = np.where(g["group_size"] == 1, solo, g["group_id"].map(groups).to_numpy(float))
        frames.append(g)
    out = pd.concat(frames, ignore_index=True) if frames else r.assign(gpu_util=np.nan, memory_mib=np.nan)
    return out if "gpu_util" in out else out.assign(gpu_util=np.nan)


def _unit_rows(w: pd.DataFrame) -> pd.DataFrame:
    """One row per run unit: its model, GPU kind, kind, F, outcome and figures (groups: summed throughput)."""
    from gpupred.hardware import gpu_spec

    kinds = {n: gpu_spec(n).name for n in set(w["gpu_name"])}
    rows = []
    for gid, g in w.groupby("group_id"):
        ok = bool((g["status"] == "ok").all())
        it = g["iter_time_mean_s"].astype(float)
        f = int(g["F"].iloc[0])
        first = g.iloc[0]
        rows.append({"model": first["model"], "gpu": kinds[first["gpu_name"]], "kind": first["kind"], "F": f,
                     "status": "ok" if ok else _status(g["status"][g["status"] != "ok"]),
                     "iter_time_s": float(it.mean()) if ok else np.nan,
                     "trials_per_s": (f / float(it.iloc[0]) if first["kind"] == "fused" else float((1.0 / it).sum()))
                     if ok else np.nan,
                     "samples_per_s": float(g["samples_per_s"].astype(float).sum()) if ok else np.nan,
                     "gpu_util": float(first["gpu_util"]) if ok else np.nan,
                     "memory_mib": float(first["memory_mib"]) if ok else np.nan})
    return pd.DataFrame(rows)


def measured_curves(root: Path | None = None) -> pd.DataFrame:
    """Per (model, GPU kind, kind, F): the measured fused and co-located runs under ``root`` (default data/raw),
    averaged over repeated runs (columns :data:`MEASURED_COLUMNS`); empty when there are none."""
    from gpupred import config
    from gpupred.profile.schema import read_runs

    runs = read_runs(Path(root) if root is not None else config.RAW)
    r = fusion_runs(runs) if len(runs) else runs
    if r.empty:
        return pd.DataFrame(columns=list(MEASURED_COLUMNS))
    units = _unit_rows(_window(r))
    keys = ["model", "gpu", "kind", "F"]
    agg = units.groupby(keys, as_index=False).agg(
        status=("status", _status), n_runs=("status", "size"), iter_time_s=("iter_time_s", "mean"),
        trials_per_s=("trials_per_s", "mean"), samples_per_s=("samples_per_s", "mean"), gpu_util=("gpu_util", "mean"),
        memory_mib=("memory_mib", "mean"))
    return agg[list(MEASURED_COLUMNS)].sort_values(keys).reset_index(drop=True)


def measured_knee(curve: pd.DataFrame, tolerance: float = TOLERANCE) -> dict[str, Any]:
    """On one model's fused curve (one GPU kind): the measured knee, the largest ok F and the first F out of memory."""
    from gpupred.fusion.advisor import choose_f

    fused = curve[curve["kind"] == "fused"].sort_values("F")
    ok = fused[fused["status"] == "ok"]
    oom = fused.loc[fused["status"] == "oom", "F"]
    knee = None
    if len(ok):
        t = ok.assign(fits=True, trials_per_s_low=ok["trials_per_s"], trials_per_s_high=ok["trials_per_s"])
        knee = choose_f(t, tolerance)[0]
    best = float(ok["trials_per_s"].max()) if len(ok) else np.nan
    return {"knee_f": knee, "largest_ok_f": int(ok["F"].max()) if len(ok) else None,
            "first_oom_f": int(oom.min()) if len(oom) else None, "best_trials_per_s": best,
            "ok_runs": int(len(ok)), "measured_f": [int(f) for f in fused["F"]]}


def compare_with_advice(advice: pd.DataFrame, measured: pd.DataFrame, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """Per advised (model, GPU kind) with measured fused runs: the advisor's F and interval, Hydro's F, the measured
    knee, and the measured trials/s at each rule's F as a share of the best measured (NaN where that F was not
    measured ok)."""
    rows = []
    for _, a in advice.iterrows():
        curve = measured[(measured["model"] == a["model"]) & (measured["gpu"] == a["gpu"])]
        if curve[curve["kind"] == "fused"].empty:
            continue
        k = measured_knee(curve, tolerance)
        ok = curve[(curve["kind"] == "fused") & (curve["status"] == "ok")].set_index("F")["trials_per_s"]

        def share(f: Any) -> float:
            return float(ok[int(f)] / k["best_trials_per_s"]) if f is not None and pd.notna(f) and int(f) in ok else np.nan

        rows.append({"model": a["model"], "gpu": a["gpu"], "step": a.get("step", ""), "advised_f": a["f"],
                     "advised_low": a["f_low"], "advised_high": a["f_high"], "hydro_f": a["hydro_f"], **k,
                     "knee_in_interval": k["knee_f"] is not None and pd.notna(a["f_low"])
                     and a["f_low"] <= k["knee_f"] <= a["f_high"],
                     "advised_share_of_best": share(a["f"]), "hydro_share_of_best": share(a["hydro_f"])})
    return pd.DataFrame(rows)


def fusion_vs_colocation(measured: pd.DataFrame, counts: tuple[int, ...] = (2, 4)) -> pd.DataFrame:
    """Per (model, GPU kind, F in ``counts``): fused against F co-located processes on samples/s, utilization and
    memory, where both were measured."""
    keys = ["model", "gpu", "F"]
    cols = ["status", "samples_per_s", "gpu_util", "memory_mib"]
    fused = measured[(measured["kind"] == "fused") & measured["F"].isin(counts)].set_index(keys)[cols]
    coloc = measured[(measured["kind"] == "co-located") & measured["F"].isin(counts)].set_index(keys)[cols]
    both = fused.add_suffix("_fused").join(coloc.add_suffix("_coloc"), how="inner")
    both["throughput_ratio"] = both["samples_per_s_fused"] / both["samples_per_s_coloc"]
    return both.reset_index()
