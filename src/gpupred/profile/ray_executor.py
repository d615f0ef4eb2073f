"""The Ray executor: one run unit per GPU at a time over a Ray cluster; the driver writes the results.

Each unit runs as a Ray task reserving ``num_gpus=1`` (so Ray sets CUDA_VISIBLE_DEVICES to that GPU);
inside it, the harness still starts a fresh child process per workload and samples that GPU with
NVML. Tasks return the unit's tables to the driver, which writes them atomically, so a resume sees
exactly what the driver wrote. gpupred must be installed on every node.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpupred.profile.harness import HarnessConfig, UnitInterrupted, UnitResult, estimate_unit_s
from gpupred.profile.units import Unit, setup_options_json
from gpupred.setups import pipeline_json


def _unit_task(workload_ids: tuple[str, ...], cfg: dict[str, Any], dry_run: bool, sweep_id: str,
               deadline_wall: float | None, sync: str = "step", repeat: int = 1, pipeline: str = "",
               setup: str = "") -> UnitResult | None:
    """Run one unit on the task's GPU (or the CPU when dry); None if the sweep's deadline cut it."""
    from gpupred.profile.harness import run_unit
    from gpupred.profile.nvml import open_backend
    from gpupred.profile.units import Unit as _Unit
    from gpupred.profile.units import setup_options_from_json
    from gpupred.setups import pipeline_from_json

    unit = _Unit(workload_ids, sync, repeat, pipeline_from_json(pipeline), setup_options_from_json(setup))  # the plan line's options: its group id
    deadline = None if deadline_wall is None else time.monotonic() + (deadline_wall - time.time())
    backend = open_backend(dry_run)
    try:
        return run_unit(unit.specs, backend, HarnessConfig(**cfg), unit.group_id, sweep_id, deadline, sync=unit.sync,
                        pipeline=pipeline_json(unit.pipeline), setup=setup)
    except UnitInterrupted:
        return None
    finally:
        backend.close()


def run_on_ray(todo: list[Unit], cfg: HarnessConfig, dry_run: bool, sweep_id: str, deadline: float | None,
               address: str | None, record: Callable[[UnitResult], None], num_gpus: float | None = None) -> str:
    """Spread ``todo`` over the cluster, calling ``record`` in the driver for each finished unit; return why it stopped."""
    if not todo:
        return ""
    import ray

    from gpupred.errors import GpupredError

    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False) if address else ray.init(
                include_dashboard=False, log_to_driver=False)
        except Exception as err:
            raise GpupredError(f"cannot connect to Ray at {address or 'a new local instance'}: {err}") from None
    gpus = num_gpus if num_gpus is not None else (0.0 if dry_run else 1.0)
    resources = ray.cluster_resources()
    slots = int(resources.get("GPU", 0)) if gpus > 0 else int(resources.get("CPU", 1))
    if gpus > 0 and slots < 1:
        raise GpupredError(f"the Ray cluster at {address or 'local'} has no GPUs (resources: {resources})")
    task = ray.remote(num_gpus=gpus, num_cpus=1, max_retries=0)(_unit_task)
    deadline_wall = None if deadline is None else time.time() + (deadline - time.monotonic())
    in_flight: dict[Any, Unit] = {}
    try:
        return _drive(todo, cfg, dry_run, sweep_id, deadline, deadline_wall, record, task, slots, in_flight)
    except BaseException:  # Ctrl-C/SIGTERM in the driver: stop the cluster's units too (their children follow)
        for ref in in_flight:
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
        raise


def _drive(todo: list[Unit], cfg: HarnessConfig, dry_run: bool, sweep_id: str, deadline: float | None,
           deadline_wall: float | None, record: Callable[[UnitResult], None], task: Any, slots: int,
           in_flight: dict[Any, Unit]) -> str:
    import ray

    pending = list(todo)
    walls: list[float] = []
    stopped = ""
    while pending or in_flight:
        while pending and len(in_flight) < max(slots, 1):
            if deadline is not None and deadline - time.monotonic() < estimate_unit_s(walls, cfg):
                stopped = f"time budget (next unit needs ~{estimate_unit_s(walls, cfg):.0f} s)"
                pending = []
                break
            unit = pending.pop(0)
            in_flight[task.remote(unit.workload_ids, cfg.to_dict(), dry_run, sweep_id, deadline_wall, unit.sync,
                                  unit.repeat, pipeline_json(unit.pipeline), setup_options_json(unit.setup))] = unit
        if not in_flight:
            break
        done, _ = ray.wait(list(in_flight), num_returns=1, timeout=5.0)
        for ref in done:
            unit = in_flight.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as err:  # the task itself failed (worker died, node lost): not written, rerun on resume
                stopped = stopped or f"ray task for {unit.group_id} failed: {type(err).__name__}"
                continue
            if result is None:
                stopped = "time budget reached during a unit (not written; it runs again on resume)"
                continue
            walls.append(result.wall_s)
            record(result)
    return stopped
