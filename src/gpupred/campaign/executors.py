"""What runs a part of the queue: :class:`DeviceExecutor` on a GPU machine (the existing sweep, ``gpupred calibrate``
and ``gpupred trace run``), :class:`SimulatedExecutor` for dry runs on the CPU (simulated units, never data).

Every unit is written atomically by the machinery that owns it, so a call killed at any instant leaves each unit
whole or absent; the next call runs the absent ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpupred.campaign.stages import SMOKE_IDS

UNIT_S_ENV = "GPUPRED_CAMPAIGN_UNIT_S"  # dry runs: seconds a simulated unit takes (default 0.05)
FAULT_ENV = "GPUPRED_CAMPAIGN_FAULT"  # dry runs, tests only: "smoke" makes the smoke test fail


@dataclass
class PartRun:
    """What running one part did: units written, their statuses, and why it stopped early ('' if it did not)."""

    units: int = 0
    statuses: Counter = field(default_factory=Counter)
    stopped: str = ""


class Executor(Protocol):
    """Runs the queue's parts on one machine."""

    simulated: bool

    def identity(self) -> tuple[str, str]:
        """(the GPU's name, its UUID)."""
        ...

    def smoke(self, deadline: float) -> str:
        """Two short units and the NVML reader: '' when they work, else why not (one line)."""
        ...

    def calibrate(self, out: Path, deadline: float) -> PartRun:
        """Calibrate the GPU into the file ``out``."""
        ...

    def sweep(self, plan: str, out: Path, limit: int, deadline: float) -> PartRun:
        """Run the unfinished units among the plan's first ``limit`` into the sweep folder ``out``."""
        ...

    def loader_bench(self, out: Path, deadline: float) -> PartRun:
        """Measure this host's standard input pipelines into the host-profile file ``out``."""
        ...

    def traces(self, plan: str, out: Path, limit: int, deadline: float) -> PartRun:
        """Trace the untraced specs among the plan's first ``limit`` into ``out``/traces."""
        ...


def _left_s(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _child(args: list[str], deadline: float) -> tuple[int | None, str]:
    """Run ``python -m gpupred.cli ARGS`` (its output passes through); (exit code, '') or (None, why) if killed."""
    try:
        done = subprocess.run([sys.executable, "-m", "gpupred.cli", *args], timeout=_left_s(deadline),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "time budget reached during it (killed; what it had not written runs again next call)"
    return done.returncode, ""


class DeviceExecutor:
    """The lent GPU: sweeps in this process (their children import torch), calibration and traces in a child each,
    so that this process never holds a CUDA context of its own."""

    simulated = False

    def __init__(self) -> None:
        self.preflight: str | None = None  # the fine-tune preflight's answer this call ('' passed; None: not run)

    def identity(self) -> tuple[str, str]:
        """NVML's name and UUID of the visible GPU."""
        from gpupred.profile.nvml import open_backend

        backend = open_backend()
        try:
            info = backend.device_info()
        finally:
            backend.close()
        return info.name, info.uuid

    def smoke(self, deadline: float) -> str:
        """The modules the campaign writes its files with import (:data:`gpupred.campaign.carry.NEEDED`); the NVML reader
        answers utilization and memory; two tiny units run ok (kept nowhere: not data)."""
        from gpupred.campaign.carry import missing_needed, needed_line
        from gpupred.profile.nvml import open_backend
        from gpupred.profile.sweep import SweepOptions, harness_config, run_sweep

        missing = missing_needed()
        if missing:  # every calibration and host profile would fail at its writing, minutes in
            return needed_line(missing)
        try:
            backend = open_backend()
            try:
                values = {k: v for _, read in backend.poll_groups().values() for k, v in _read(read).items()}
            finally:
                backend.close()
        except Exception as err:  # any failure of the reader is the answer
            return f"NVML reader: {type(err).__name__}: {' '.join(str(err).split())}"
        missing = [m for m in ("gpu_util", "mem_used_mib") if m not in values]
        if missing:
            return f"NVML reader: no {', '.join(missing)} reading"
        with tempfile.TemporaryDirectory(prefix="gpupred-smoke-") as tmp:
            plan = Path(tmp) / "smoke.txt"
            plan.write_text("\n".join(SMOKE_IDS) + "\n")
            s = run_sweep(str(plan), Path(tmp) / "smoke", SweepOptions(max_minutes=_left_s(deadline) / 60,
                                                                       progress=False), harness_config(False, 1.0))
        if s.done_now != len(SMOKE_IDS) or set(s.statuses) != {"ok"}:
            got = ", ".join(f"{k} {v}" for k, v in sorted(s.statuses.items())) or "none"
            return f"smoke units: {s.done_now}/{len(SMOKE_IDS)} ran ({got}){'; ' + s.stopped if s.stopped else ''}"
        return ""

    def calibrate(self, out: Path, deadline: float) -> PartRun:
        """``gpupred calibrate --out OUT`` in a child (about 2 minutes)."""
        code, why = _child(["calibrate", "--out", str(out)], deadline)
        if code == 0 and Path(out).is_file():
            return PartRun(1, Counter(ok=1))
        return PartRun(0, Counter(), why or f"gpupred calibrate exited {code}")

    def loader_bench(self, out: Path, deadline: float) -> PartRun:
        """``gpupred loader bench --out OUT`` in a child (the host profile is written atomically, once per machine)."""
        code, why = _child(["loader", "bench", "--out", str(out)], deadline)  # its default budget (25 s of timing)
        if code == 0 and Path(out).is_file():
            return PartRun(1, Counter(ok=1))
        return PartRun(0, Counter(), why or f"gpupred loader bench exited {code}")

    def sweep(self, plan: str, out: Path, limit: int, deadline: float) -> PartRun:
        """The existing sweep (its units written atomically; it stops cleanly before the deadline). A plan with setup
        units (fine-tunes) first passes :func:`finetune_preflight`, once per call: a broken peft or bitsandbytes would
        otherwise write an error row for every unit, and error rows count as done."""
        from gpupred.profile.sweep import SweepOptions, run_sweep
        from gpupred.profile.units import load_plan

        if any(u.setup for u in load_plan(plan, limit)):
            if self.preflight is None:
                self.preflight = finetune_preflight(deadline, out=out)
            if self.preflight:
                return PartRun(0, Counter(), self.preflight)
        s = run_sweep(plan, out, SweepOptions(max_minutes=max(_left_s(deadline), 1.0) / 60, limit=limit,
                                              progress=False))
        return PartRun(s.done_now, Counter(s.statuses), s.stopped)

    def traces(self, plan: str, out: Path, limit: int, deadline: float) -> PartRun:
        """``gpupred trace run`` in a child, killed at the deadline (each spec's summary is written atomically)."""
        before = _traced(out)
        code, why = _child(["trace", "run", "--plan", plan, "--out", str(out), "--limit", str(limit),
                            "--max-minutes", f"{_left_s(deadline) / 60:.3f}"], deadline)
        written = len(_traced(out) - before)
        stopped = why or ("" if code in (0, 3) else f"gpupred trace run exited {code}")
        return PartRun(written, Counter(written=written), stopped)


PREFLIGHT_S = 120.0  # at most, for the fine-tune preflight's child (it imports torch, peft and bitsandbytes)


def finetune_preflight(deadline: float, device: str = "cuda", out: Path | None = None) -> str:
    """:func:`gpupred.workloads.finetuning.preflight` in a child: '' when it passes, else why not (one line). With
    ``out`` (the sweep's folder) the child also writes its layers' host-overhead measurement there."""
    code = f"from gpupred.workloads.finetuning import preflight; preflight({device!r})"
    if out is not None:  # after the checks pass: a failed measurement says so on stderr and never fails them
        code += f"; from gpupred.profile.hostoverhead import record_host_overhead; record_host_overhead({device!r}, " \
                f"{str(out)!r})"
    try:
        done = subprocess.run([sys.executable, "-c", code], timeout=min(PREFLIGHT_S, _left_s(deadline)),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return "fine-tune preflight: timed out (nothing of this part ran)"
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return f"fine-tune preflight failed, so no fine-tune unit ran: {lines[-1].strip() if lines else done.returncode}"


def _read(read: object) -> dict[str, float]:
    try:
        return read()  # type: ignore[operator,no-any-return]
    except Exception:  # one unsupported group is not the reader failing
        return {}


def _traced(out: Path) -> set[str]:
    folder = Path(out) / "traces"
    return {p.name for p in folder.glob("*.parquet") if not p.name.startswith(".")} if folder.is_dir() else set()


class SimulatedExecutor:
    """Dry runs on the CPU: each unit sleeps ``unit_s`` then writes made-up rows (``simulated``) atomically through
    the same writers as real units. Its output lives under data/dryrun: simulated, never data."""

    simulated = True

    def __init__(self, gpu: str, unit_s: float = 0.05, smoke_fails: bool = False) -> None:
        self.gpu, self.unit_s, self.smoke_fails = gpu, unit_s, smoke_fails
        self.calls: list[tuple[str, str, int]] = []  # (kind, plan or file, limit): the order parts ran in

    @classmethod
    def from_env(cls, gpu: str) -> "SimulatedExecutor":
        """Settings from :data:`UNIT_S_ENV` and :data:`FAULT_ENV` (for tests that run the CLI in a child)."""
        return cls(gpu, float(os.environ.get(UNIT_S_ENV, "0.05")), os.environ.get(FAULT_ENV, "") == "smoke")

    def identity(self) -> tuple[str, str]:
        """A made-up device, named so it cannot be mistaken for a real one."""
        return f"SIMULATED {self.gpu}", f"GPU-simulated-{self.gpu}"

    def smoke(self, deadline: float) -> str:
        """Passes, unless told to fail."""
        time.sleep(self.unit_s)
        return "smoke units: 0/2 ran (simulated fault)" if self.smoke_fails else ""

    def calibrate(self, out: Path, deadline: float) -> PartRun:
        """A simulated calibration file naming the GPU kind."""
        from gpupred.profile.store import atomic_write_json

        self.calls.append(("calibrate", str(out), 1))
        time.sleep(self.unit_s)
        atomic_write_json({"simulated": True, "gpu": {"name": f"NVIDIA {self.gpu.upper()}"}, "wall_s": self.unit_s},
                          out)
        return PartRun(1, Counter(ok=1))

    def loader_bench(self, out: Path, deadline: float) -> PartRun:
        """A simulated host-profile file (not a host profile: its ``simulated`` says so)."""
        from gpupred.profile.store import atomic_write_json

        self.calls.append(("loader-bench", str(out), 1))
        time.sleep(self.unit_s)
        atomic_write_json({"simulated": True, "source": "campaign dry run", "note": "never data"}, out)
        return PartRun(1, Counter(ok=1))

    def sweep(self, plan: str, out: Path, limit: int, deadline: float) -> PartRun:
        """Simulated units through :func:`gpupred.profile.store.write_unit`, and a manifest of this session."""
        from gpupred.campaign.simulated import simulated_unit, write_session
        from gpupred.profile import store
        from gpupred.profile.units import load_plan

        self.calls.append(("sweep", plan, limit))
        if Path(out).is_dir():
            store.clean_temporaries(out)  # what a killed call left half-written
        done, run, started = store.finished_units(out), PartRun(), store.now_utc()
        for unit in [u for u in load_plan(plan, limit) if u.group_id not in store.finished_units(out)]:
            if _left_s(deadline) < self.unit_s:
                run.stopped = "time budget"
                break
            time.sleep(self.unit_s)  # a kill here leaves the unit absent: it runs again next call
            store.write_unit(out, unit.group_id, *simulated_unit(unit, out.name))
            run.units += 1
            run.statuses["ok"] += 1
        write_session(out, plan, started, run.units, len(done))
        return run

    def traces(self, plan: str, out: Path, limit: int, deadline: float) -> PartRun:
        """Simulated trace summaries through :func:`gpupred.traces.tracetable.write_traces`."""
        from gpupred.campaign.simulated import simulated_trace_rows
        from gpupred.profile.units import load_plan
        from gpupred.traces.tracetable import trace_path, write_traces

        self.calls.append(("traces", plan, limit))
        run = PartRun()
        for unit in load_plan(plan, limit):
            if trace_path(out, unit.group_id).exists():
                continue
            if _left_s(deadline) < self.unit_s:
                run.stopped = "time budget"
                break
            time.sleep(self.unit_s)
            write_traces(out, unit.group_id, simulated_trace_rows(unit.specs[0], out.name))
            run.units += 1
            run.statuses["written"] += 1
        return run
