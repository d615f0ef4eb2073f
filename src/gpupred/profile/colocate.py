"""Co-located runs: 2-4 workloads started together on one GPU, and their slowdown against solo runs."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpupred.errors import GpupredError
from gpupred.profile.harness import HarnessConfig, Launcher, UnitResult, run_unit
from gpupred.profile.backend import Backend
from gpupred.profile.plan import Unit


def run_colocated(specs: list[Any], backend: Backend, config: HarnessConfig | None = None, sweep_id: str = "",
                  deadline: float | None = None, launcher: Launcher | None = None) -> UnitResult:
    """Run 2-4 workloads on one GPU at once with a synchronized start; one row per member."""
    if not 2 <= len(specs) <= 4:
        raise GpupredError(f"co-location needs 2 to 4 workloads, got {len(specs)}")
    unit = Unit(tuple(s.id for s in specs))
    return run_unit(specs, backend, config, unit.group_id, sweep_id, deadline, launcher)


def slowdown(colocated_runs: pd.DataFrame, solo_runs: pd.DataFrame) -> pd.DataFrame:
    """Per co-located member: its mean iteration time over the same workload's solo mean on the same GPU kind.

    Only runs with status ok count; a member without a solo run on that GPU kind gets NaN.
    """
    co = colocated_runs[(colocated_runs["group_size"] > 1) & (colocated_runs["status"] == "ok")]
    solo = solo_runs[(solo_runs["group_size"] == 1) & (solo_runs["status"] == "ok")]
    base = solo.groupby(["workload_id", "gpu_name"], as_index=False)["iter_time_mean_s"].mean()
    base = base.rename(columns={"iter_time_mean_s": "solo_iter_time_s"})
    out = co[["run_id", "group_id", "group_size", "member", "workload_id", "gpu_name", "iter_time_mean_s"]].merge(
        base, on=["workload_id", "gpu_name"], how="left")
    out["slowdown"] = out["iter_time_mean_s"] / out["solo_iter_time_s"]
    return out.reset_index(drop=True)
