"""Made-up rows for the campaign's dry runs (:class:`gpupred.campaign.executors.SimulatedExecutor`): each marked
simulated and written under data/dryrun through the real writers. None of this is data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from gpupred.profile import store
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA
from gpupred.profile.units import Unit, member_setup_json
from gpupred.setups import pipeline_json

NOTE = "simulated by `gpupred campaign next --dry-run`: never data"


def simulated_unit(unit: Unit, sweep_id: str) -> tuple[pa.Table, pa.Table]:
    """(runs, samples) of one made-up unit: one row per member, status ok, ``simulated`` set, one sample."""
    rows = []
    for member, workload_id in enumerate(unit.workload_ids):
        row: dict[str, Any] = {n: None for n in RUN_SCHEMA.names}
        row.update(run_id=f"{unit.group_id}#{member}" if len(unit.workload_ids) > 1 else unit.group_id,
                   group_id=unit.group_id, group_size=len(unit.workload_ids), member=member, sweep_id=sweep_id,
                   workload_id=workload_id, status="ok", message=NOTE, simulated=True, sync=unit.sync,
                   pipeline=pipeline_json(unit.pipeline), setup=member_setup_json(unit.setup, workload_id),
                   iter_times_s=[0.1, 0.1], schema_version=1)
        rows.append(row)
    samples = pa.Table.from_pydict({"group_id": [unit.group_id], "t_s": [0.0], "metric": ["gpu_util"],
                                    "value": [0.0], "member": [-1], "source": ["poll"]}, schema=SAMPLE_SCHEMA)
    return pa.Table.from_pylist(rows, schema=RUN_SCHEMA), samples


def write_session(out: Path, plan: str, started: str, units_run: int, done_before: int) -> None:
    """This simulated session's manifest, a new file beside the earlier sessions' (as a sweep writes them)."""
    manifest = store.read_manifest(out) or {"sweep_id": out.name, "dry_run": True, "simulated": True, "plans": [],
                                            "sessions": []}
    if plan not in manifest["plans"]:
        manifest["plans"].append(plan)
    manifest["sessions"].append({"started": started, "ended": store.now_utc(), "units_run": units_run,
                                 "executor": "campaign-simulated", "done_before": done_before})
    store.write_manifest(out, manifest)


def simulated_trace_rows(spec: Any, sweep_id: str) -> list[dict[str, Any]]:
    """One made-up trace row of ``spec`` (step -1, no kernels), its status ``simulated``."""
    from gpupred.traces.runner import failed_row

    return [{"workload_id": spec.id, "family": spec.family, "spec_json": spec.to_json(), "sweep_id": sweep_id,
             "status": "simulated", "message": NOTE, "warmup_steps": 0, "started_at": store.now_utc(),
             "gpu_name": "SIMULATED", "gpu_uuid": "", "driver_version": "", "cuda_version": "", "torch_version": "",
             "gpupred_version": "", "host_cpu": "", **failed_row()}]
