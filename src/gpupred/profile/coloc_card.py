"""What a co-location sweep's data card adds (issue 59 item 2): outcomes per unit, the noise floor, solo drift.

- :func:`unit_outcomes`: run units counted by kind (solo, pair, group of 3 or 4) and outcome: ``ok`` when every
  member finished ok, else the own status of the member that failed (``oom``, ``error``, ``timeout``; the members
  it took down are ``partner_failed`` and do not count as a cause).
- :func:`repeat_spread`: every unit measured more than once in the sweep (the plan's ``repeat=K`` lines, see
  :mod:`gpupred.profile.units`): per member, how far its measurements of mean iteration time lie apart (max / min
  - 1) and of the unit's window utilization (max - min, points). Their median and maximum are the noise floor: two
  measurements of the same thing differ by that much without anything changing.
- :func:`solo_drift`: each solo run of the sweep (its first measurement) against the ok solo runs of the same
  workload, GPU kind, synchronization and batch placement in the OTHER sweep folders beside it
  (``data/raw/<gpu>/*``): iteration time ratio (this sweep / earlier) and utilization difference (points). A
  slowdown computed against an earlier solo run carries this drift; compare it with the noise floor.

Only ok runs of units whose every member finished ok count for the spreads and the drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpupred.profile.schema import read_runs, sweep_dirs
from gpupred.profile.store import window_means
from gpupred.profile.units import parse_group_id

KINDS: dict[int, str] = {1: "solo", 2: "pair", 3: "group of 3", 4: "group of 4"}
FAILURE_ORDER: tuple[str, ...] = ("oom", "error", "timeout", "partner_failed")  # a unit's outcome: its first cause


def _outcome(statuses: pd.Series) -> str:
    """A unit's outcome from its members' statuses."""
    found = set(statuses)
    if found == {"ok"}:
        return "ok"
    return next(s for s in FAILURE_ORDER if s in found)


def unit_outcomes(table: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Run units counted by kind and outcome (``table``: one row per job with ``group_id``, ``group_size``,
    ``status``)."""
    units = table.groupby("group_id").agg(size=("group_size", "first"), outcome=("status", _outcome))
    out: dict[str, dict[str, int]] = {}
    for size, g in units.groupby("size"):
        out[KINDS.get(int(size), f"group of {int(size)}")] = {str(k): int(v) for k, v in g["outcome"].value_counts().items()}
    return out


def _whole_ok(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of units whose every member finished ok, with the unit's base id and repeat number."""
    bad = table.loc[table["status"] != "ok", "group_id"].unique()
    ok = table[~table["group_id"].isin(bad)].copy()
    parsed = [parse_group_id(g) for g in ok["group_id"]]
    ok["base_id"] = [f"{b}|{s}" for b, s, _ in parsed]
    ok["repeat"] = [r for _, _, r in parsed]
    return ok


def repeat_spread(table: pd.DataFrame) -> pd.DataFrame:
    """Per member of every unit measured more than once: measurements, iteration time spread (max / min - 1) and
    utilization spread (points); ``table`` as :func:`gpupred.profile.datacard.run_table` (``util_mean`` per run)."""
    ok = _whole_ok(table)
    cols = ["base_id", "member", "workload_id", "group_size", "n", "iter_time_spread", "util_spread"]
    rows = []
    for (base, member), g in ok.groupby(["base_id", "member"]):
        if g["repeat"].nunique() < 2:
            continue
        it, util = g["iter_time_mean_s"].astype(float), g["util_mean"].astype(float)
        rows.append((base, int(member), g["workload_id"].iloc[0], int(g["group_size"].iloc[0]), len(g),
                     float(it.max() / it.min() - 1.0), float(util.max() - util.min())))
    return pd.DataFrame(rows, columns=cols)


def _earlier_solo(sweep_dir: Path, workloads: set[str], gpu: str) -> pd.DataFrame:
    """Ok, real solo runs of ``workloads`` on ``gpu`` in the other sweep folders beside ``sweep_dir``, with their
    window ``gpu_util``."""
    frames = []
    for other in sweep_dirs(sweep_dir.parent):
        if other.resolve() == sweep_dir.resolve():
            continue
        runs = read_runs(other)
        runs = runs[(runs["group_size"] == 1) & (runs["status"] == "ok") & runs["workload_id"].isin(workloads)
                    & (runs["gpu_name"] == gpu) & ~runs["simulated"].astype(bool)]
        if runs.empty:
            continue
        means = window_means(other, runs)
        frames.append(runs.merge(means[["run_id", "gpu_util"]], on="run_id", how="left"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["workload_id", "sync", "host_batches", "iter_time_mean_s", "gpu_util"])


def pipeline_of(runs: pd.DataFrame) -> pd.Series:
    """Each run's input pipeline as recorded ('' for a resident batch and for runs written before the column)."""
    if "pipeline" not in runs.columns:
        return pd.Series("", index=runs.index)
    return runs["pipeline"].fillna("").astype(str)


def solo_drift(sweep_dir: Path, table: pd.DataFrame) -> pd.DataFrame:
    """Per workload solo in this sweep that also ran solo in an earlier sweep of its GPU kind, fed the same way (sync,
    host batches, input pipeline): this sweep's first measurement against the earlier runs' mean (iteration time ratio, utilization difference in points)."""
    cols = ["workload_id", "sync", "iter_time_ratio", "util_diff", "earlier_runs"]
    ok = _whole_ok(table)
    solo = ok[(ok["group_size"] == 1) & (ok["repeat"] == 1)]
    if solo.empty or solo["simulated"].any():
        return pd.DataFrame(columns=cols)
    runs = read_runs(sweep_dir).set_index("run_id")
    solo = solo.assign(host_batches=runs.loc[solo["run_id"], "host_batches"].to_numpy(),
                       pipeline=pipeline_of(runs.reindex(solo["run_id"])).to_numpy())
    rows = []
    for gpu, g in solo.groupby("gpu_name"):
        earlier = _earlier_solo(sweep_dir, set(g["workload_id"]), str(gpu))
        for _, r in g.iterrows():
            e = earlier[(earlier["workload_id"] == r["workload_id"]) & (earlier["sync"] == r["sync"])
                        & (earlier["host_batches"].astype(bool) == bool(r["host_batches"]))
                        & (pipeline_of(earlier) == r["pipeline"])]
            if e.empty:
                continue
            rows.append((r["workload_id"], r["sync"], float(r["iter_time_mean_s"] / e["iter_time_mean_s"].mean()),
                         float(r["util_mean"] - e["gpu_util"].mean()), len(e)))
    return pd.DataFrame(rows, columns=cols)


def _stats(x: pd.Series) -> dict[str, float]:
    x = x.astype(float)
    if not len(x):
        return {"n": 0}
    return {"n": int(len(x)), "min": float(x.min()), "median": float(x.median()), "p90": float(x.quantile(0.9)),
            "max": float(x.max())}


def coloc_checks(sweep_dir: Path, table: pd.DataFrame) -> dict[str, Any]:
    """The figures of this module for one sweep (JSON-able): outcomes, noise floor (solo and co-located members
    apart) and solo drift."""
    spread = repeat_spread(table)
    drift = solo_drift(Path(sweep_dir), table)
    solo = spread["group_size"] == 1
    return {
        "unit_outcomes": unit_outcomes(table),
        "noise_floor": {kind: {"iter_time_spread": _stats(s["iter_time_spread"]), "util_spread": _stats(s["util_spread"]),
                               "units": int(s["base_id"].nunique())}
                        for kind, s in (("solo", spread[solo]), ("co-located members", spread[~solo]))},
        "solo_drift": {"iter_time_ratio": _stats(drift["iter_time_ratio"]),
                       "abs_log_iter_time_ratio": _stats(np.abs(np.log(drift["iter_time_ratio"].astype(float)))),
                       "util_diff": _stats(drift["util_diff"]), "beyond_noise_floor": _beyond(drift, spread)},
    }


def _beyond(drift: pd.DataFrame, spread: pd.DataFrame) -> int | None:
    """How many workloads' solo drift exceeds the largest solo repeat spread (None without solo repeats)."""
    solo = spread[spread["group_size"] == 1]
    if solo.empty or drift.empty:
        return None
    floor = float(solo["iter_time_spread"].max())
    ratio = drift["iter_time_ratio"].astype(float)
    return int((np.maximum(ratio, 1.0 / ratio) - 1.0 > floor).sum())


def _fmt(s: dict[str, float], scale: float = 100.0, unit: str = "%") -> str:
    if not s.get("n"):
        return "none"
    return (f"median {scale * s['median']:.1f}{unit}, p90 {scale * s['p90']:.1f}{unit}, max {scale * s['max']:.1f}{unit} "
            f"(n {s['n']})")


def coloc_lines(checks: dict[str, Any]) -> list[str]:
    """The data card's section of these figures (empty for a sweep of solo runs measured once with no earlier
    sweep beside it)."""
    outcomes, floor, drift = checks["unit_outcomes"], checks["noise_floor"], checks["solo_drift"]
    grouped = any(k != "solo" for k in outcomes)
    if not grouped and not any(v["units"] for v in floor.values()) and not drift["iter_time_ratio"].get("n"):
        return []
    lines = ["## Units by outcome, noise floor and solo drift", ""]
    lines += [f"- {kind}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) for kind, c in outcomes.items()]
    for kind, f in floor.items():
        lines.append(f"- noise floor, {kind} measured more than once ({f['units']} units): iteration time spread "
                     f"(max / min - 1) {_fmt(f['iter_time_spread'])}; utilization spread "
                     f"{_fmt(f['util_spread'], 1.0, ' points')}")
    lines.append(_drift_line(drift))
    return [*lines, ""]


def _drift_line(drift: dict[str, Any]) -> str:
    """The card's line on solo drift."""
    r = drift["iter_time_ratio"]
    if not r.get("n"):
        return "- solo drift: no workload of this sweep ran solo in an earlier sweep of this GPU kind"
    beyond, u = drift["beyond_noise_floor"], drift["util_diff"]
    return (f"- solo drift, this sweep's solo runs against the same workloads' earlier solo runs on this GPU kind "
            f"({r['n']} workloads): iteration time this / earlier median x{r['median']:.3f}, range x{r['min']:.3f} to "
            f"x{r['max']:.3f}; |log ratio| {_fmt(drift['abs_log_iter_time_ratio'])}; utilization this - earlier "
            f"median {u['median']:+.1f}, range {u['min']:+.1f} to {u['max']:+.1f} points"
            + ("" if beyond is None else f"; beyond the largest solo repeat spread: {beyond}"))
