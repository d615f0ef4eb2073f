"""One run unit: each workload's training loop in its own child process, the NVML sampler in the parent.

The child (forked from a fork server that has imported torch once, :func:`child_context`, so it works
from the CLI, a notebook or a Ray worker alike, and initializes CUDA itself) says ``ready``, receives
its job, builds the workload and says ``built``; the parent then sends ``go`` to every member at once
(the synchronized start of a co-located group), each warms up and says ``warm``; once all are warm the
parent sends ``measure``, each times its measured window (iteration times from synchronized timestamps)
and says ``window``, then keeps training, unmeasured, until the parent sends ``stop`` when every
member's window is done, so that each member's whole window runs co-located. A hard timeout kills the
children.

Fault injection for tests only: ``GPUPRED_FAULT=oom|crash|hang|error[:substring-of-workload-id]`` in
the child's environment raises torch.cuda.OutOfMemoryError / exits with code 3 / sleeps / raises after
the build. It does nothing when the variable is unset.
"""

from __future__ import annotations

import dataclasses

import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from gpupred.errors import GpupredError
from gpupred.profile.schema import SYNC_MODES

if TYPE_CHECKING:  # the child process imports this module: keep its top level to the standard library
    import pyarrow as pa

    from gpupred.profile.backend import Backend

FAULT_ENV = "GPUPRED_FAULT"
DEFAULT_INTERVAL_MS = 50.0  # = gpupred.profile.nvml.DEFAULT_INTERVAL_MS


@dataclass
class HarnessConfig:
    """How one unit is run: warm-up and window bounds, timeouts, device, sampler interval."""

    window_s: float = 4.0  # measured window, at least this long ...
    min_iters: int = 20  # ... and at least this many iterations ...
    max_window_s: float = 30.0  # ... but never longer than this
    warmup_min_s: float = 1.5  # warm-up: at least this long ...
    warmup_min_iters: int = 5  # ... and this many iterations (cuDNN autotuning, allocator growth) ...
    warmup_max_s: float = 10.0  # ... but never longer than this
    startup_timeout_s: float = 120.0  # allowance for process start, torch import, CUDA init, build
    host_batches: bool = False  # copy a pinned host batch to the device every step
    device: str = "cuda"  # "cpu" for dry runs
    interval_ms: float = DEFAULT_INTERVAL_MS
    margin_s: float = 0.5  # samples kept either side of the measured windows
    cpu_threads: int = 1  # torch threads in a CPU (dry-run) child
    max_batch: int = 0  # dry runs: run each spec at no more than this batch size (0 = as specified)
    cpu_fp32: bool = False  # dry runs: bf16 specs run in fp32 (CPU bf16 autocast is slow emulation here)
    slack_s: float = 30.0  # added to the hard timeout (co-located fill, teardown)
    sync: str = "step"  # "step": synchronize every step; "window": CUDA-event timing, one sync per window
    idle_wait_s: float = 10.0  # before a unit: wait up to this long for the device to be idle (0: read at once)

    @property
    def unit_timeout_s(self) -> float:
        """The hard timeout of one unit: startup allowance + warm-up and window bounds + slack."""
        return self.startup_timeout_s + self.warmup_max_s + self.max_window_s + self.slack_s

    def to_dict(self) -> dict[str, Any]:
        """Plain settings for the manifest."""
        return asdict(self)


def estimate_unit_s(walls: list[float], cfg: HarnessConfig) -> float:
    """Time to reserve for the next unit: 1.25x the longest seen so far + 5 s, or the hard timeout before any."""
    return max(walls) * 1.25 + 5.0 if walls else cfg.unit_timeout_s


class UnitInterrupted(Exception):
    """The sweep's own deadline stopped a unit: it is not written and runs again on resume."""


@dataclass
class UnitResult:
    """One finished unit: its rows, its samples and what happened."""

    group_id: str
    runs: "pa.Table"
    samples: "pa.Table"
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    timings: list[dict[str, float]] = field(default_factory=list)  # per member: import_s, cuda_init_s, build_s, ...

    @property
    def statuses(self) -> list[str]:
        """Each member's status."""
        return self.runs.column("status").to_pylist()


# ------------------------------------------------------------------------------------------- parent


# what a child needs before its job, imported once by the fork server that every child is forked from
PRELOAD = ("torch", "torch._dynamo", "gpupred.workloads.builders")


def child_context() -> Any:
    """The multiprocessing context that starts harness children: a fork server that has imported :data:`PRELOAD`.

    A child forked from it starts in milliseconds with torch imported, where a fresh interpreter spent 3-8 s of CPU
    importing torch and torch._dynamo (the optimizer's constructor imports it). The server never initializes CUDA,
    so each child initializes its own, as a fresh process does. The server is one per parent process, started by the
    first child, and exits with the parent."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


class InheritedFd:
    """A file descriptor that travels to a forked child as multiprocessing sends a Connection's; the child receives
    its own descriptor (an int)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        import operator
        from multiprocessing import reduction

        return operator.methodcaller("detach"), (reduction.DupFd(self.fd),)


class ForkedProcess:
    """A child forked by :func:`child_context`'s server, with the part of ``subprocess.Popen``'s interface that
    :class:`Child` uses (``pid``, ``returncode``, ``poll``, ``kill``, ``wait``)."""

    def __init__(self, process: Any) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        """The process id."""
        return int(self.process.pid)

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: the signal that ended it); None while it runs."""
        return self.process.exitcode

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return None if self.process.is_alive() else self.process.exitcode

    def kill(self) -> None:
        """SIGKILL."""
        self.process.kill()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end (``subprocess.TimeoutExpired`` after ``timeout`` seconds); the exit code."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired("gpupred harness child", timeout or 0.0)
        return int(self.process.exitcode)


def start_forked(target: Any, args: tuple[Any, ...]) -> ForkedProcess:
    """``target(*args)`` in a child forked from the server (the Connections and :class:`InheritedFd` among ``args``
    travel with their descriptors)."""
    process = child_context().Process(target=target, args=args, name="gpupred-harness-child")
    # multiprocessing would have the child run this process's main module again (spawn's semantics: a script without
    # a main guard would start its sweep again, a CLI or a kernel would import itself again); the child is a copy of
    # the fork server and needs nothing of it, so the main module is hidden while the child is asked for
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        process.start()
    finally:
        sys.modules["__main__"] = main
    return ForkedProcess(process)


class Child:
    """A started harness child process (forked from :func:`child_context`'s server) and its two pipes."""

    def __init__(self) -> None:
        ctx = child_context()
        c_rx, p_tx = ctx.Pipe(duplex=False)
        p_rx, c_tx = ctx.Pipe(duplex=False)
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", PYTHONUNBUFFERED="1")
        self.log = tempfile.TemporaryFile(prefix="gpupred-child-")
        self.proc: Any = start_forked(forked_child, (c_rx, c_tx, InheritedFd(self.log.fileno()), env))
        c_rx.close()
        c_tx.close()
        self.rx, self.tx = p_rx, p_tx
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def send(self, msg: tuple[Any, ...]) -> None:
        """Send a command; a dead child is noticed by the caller's loop."""
        try:
            self.tx.send(msg)
        except (BrokenPipeError, OSError):
            pass

    def log_tail(self, lines: int = 3) -> str:
        """The last lines the child printed (tracebacks)."""
        try:
            self.log.seek(0)
            text = self.log.read().decode(errors="replace").strip().splitlines()
        except Exception:
            return ""
        return " | ".join(line.strip() for line in text[-lines:])

    def kill(self, wait: bool = True) -> None:
        """Kill the process (SIGKILL) and, unless ``wait`` is False, wait for it."""
        if self.alive():
            try:
                self.proc.kill()
            except OSError:  # pragma: no cover - already gone
                pass
        if not wait:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def close(self) -> None:
        """Kill if needed and release pipes and log."""
        self.kill()
        for c in (self.rx, self.tx):
            try:
                c.close()
            except OSError:
                pass
        self.log.close()


class Launcher:
    """Starts harness children; keeps spares importing torch while the current unit measures."""

    def __init__(self, spares: int = 0) -> None:
        self.spares_wanted = spares
        self._spares: list[Child] = []

    def take(self, n: int) -> list[Child]:
        """``n`` started children (spares first)."""
        out: list[Child] = []
        while self._spares and len(out) < n:
            c = self._spares.pop(0)
            if c.alive():
                out.append(c)
            else:
                c.close()
        out += [Child() for _ in range(n - len(out))]
        return out

    def prefill(self, n: int | None = None) -> None:
        """Start spares up to ``n`` (default: the launcher's setting)."""
        n = self.spares_wanted if n is None else n
        while len(self._spares) < n:
            self._spares.append(Child())

    def close(self) -> None:
        """Stop the spares."""
        for c in self._spares:
            c.close()
        self._spares = []


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def uuid_hex(uuid: str) -> str:
    """A device UUID as 32 lower-case hex digits: NVML's 'GPU-…'/'MIG-…' and torch's bare form compare equal."""
    text = uuid.strip().lower()
    for prefix in ("mig-", "gpu-"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return "".join(ch for ch in text if ch in "0123456789abcdef")


def _fault_for(workload_id: str) -> str:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return ""
    kind, _, match = spec.partition(":")
    return kind if (not match or match in workload_id) else ""


# the texts of allocation failures as CUDA, cuBLAS, cuDNN and torch word them (matched case-insensitively)
OOM_MARKERS: tuple[str, ...] = (
    "out of memory",  # torch.OutOfMemoryError "CUDA out of memory.", "CUDA error: out of memory", driver errors
    "out_of_memory",  # CUDA_ERROR_OUT_OF_MEMORY (driver API: Triton, NVRTC, cuda-python)
    "alloc_failed",  # CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_ALLOC_FAILED, CUSPARSE/CUFFT ..._ALLOC_FAILED
    "cudaerrormemoryallocation",  # the runtime API's name for it
    "failed to allocate",  # cuDNN v9 frontend / workspace allocation
    "unable to find a valid cudnn algorithm",  # cuDNN benchmark: no algorithm fits in the memory left
)


def failure_status(error_type: str, message: str) -> str:
    """``oom`` when an exception's type or text is a GPU allocation failure, else ``error``."""
    if error_type in ("OutOfMemoryError", "torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError"):
        return "oom"
    text = message.lower()
    return "oom" if any(m in text for m in OOM_MARKERS) else "error"


def _memory_info(backend: "Backend") -> dict[str, float]:
    """Device memory now, {"used", "reserved"} in MiB (NaN where unknown); never raises."""
    read = getattr(backend, "memory_info_mib", None)
    try:
        if read is not None:
            info = read()
            return {"used": float(info.get("used", math.nan)), "reserved": float(info.get("reserved", math.nan))}
        _, fn = backend.poll_groups()["memory"]
        return {"used": float(fn()["mem_used_mib"]), "reserved": math.nan}
    except Exception:
        return {"used": math.nan, "reserved": math.nan}


def _compute_processes(backend: "Backend") -> int | None:
    """How many compute processes NVML lists on the device (None if it cannot tell)."""
    try:
        return len(backend.process_memory_mib([]))
    except Exception:
        return None


@dataclass
class Baseline:
    """Device memory before a unit's children touch the GPU."""

    used_mib: float
    reserved_mib: float
    note: str = ""


def idle_baseline(backend: "Backend", wait_s: float = 10.0, step_s: float = 0.1) -> Baseline:
    """Wait (up to ``wait_s``) until no compute process is on the device and memory is steady, then read it.

    The previous unit's processes release their memory as they exit; reading before that would
    shrink this unit's memory label, so a device that never settles is noted.
    """
    end = time.monotonic() + wait_s
    prev = _memory_info(backend)
    while True:
        time.sleep(step_s)
        now = _memory_info(backend)
        procs = _compute_processes(backend)
        steady = abs(now["used"] - prev["used"]) <= 1.0 if math.isfinite(now["used"]) else True
        if steady and not procs:
            return Baseline(now["used"], now["reserved"])
        if time.monotonic() >= end:
            return Baseline(now["used"], now["reserved"],
                            f"device not idle before launch after {wait_s:.0f} s ({procs} compute processes, "
                            f"{now['used']:.0f} MiB used): memory baseline may be high")
        prev = now


@dataclass
class ContextMeasurement:
    """The GPU memory a bare CUDA context takes, measured with a child that only initializes CUDA."""

    context_mib: float  # device delta minus torch's reserved bytes (NaN when not measured)
    device_delta_mib: float = math.nan
    process_mib: float = math.nan  # NVML's per-process figure for the child, when it attributes it
    torch_reserved_mib: float = math.nan
    baseline_mib: float = math.nan
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain values for the manifest (NaN as None)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def measure_cuda_context(backend: "Backend", config: HarnessConfig | None = None, settle_s: float = 1.0) -> ContextMeasurement:
    """Start a child that only initializes CUDA (one tiny tensor) and measure the device memory it adds."""
    cfg = config or HarnessConfig()
    if not cfg.device.startswith("cuda"):
        return ContextMeasurement(math.nan, note="not measured: no CUDA device (dry run)")
    base = idle_baseline(backend, cfg.idle_wait_s)
    child = Child()
    try:
        child.send(("context", {"device": cfg.device}))
        deadline = time.monotonic() + cfg.startup_timeout_s
        reply: dict[str, Any] | None = None
        while reply is None and time.monotonic() < deadline and child.alive():
            if child.rx.poll(0.1):
                kind, payload = child.rx.recv()
                if kind == "context":
                    reply = payload
        if reply is None or "error" in reply:
            why = (reply or {}).get("error") or child.log_tail() or "no reply"
            return ContextMeasurement(math.nan, baseline_mib=base.used_mib, note=f"context child failed: {why}")
        time.sleep(settle_s)  # let NVML's memory figure catch up with the new context
        used = max(_memory_info(backend)["used"] for _ in range(3))
        try:
            proc = backend.process_memory_mib([child.pid])
        except Exception:
            proc = {}
        delta = used - base.used_mib
        reserved = float(reply.get("reserved_mib", 0.0))
        child.send(("stop",))
        return ContextMeasurement(delta - reserved, delta, float(proc.get(child.pid, math.nan)), reserved,
                                  base.used_mib, base.note)
    finally:
        child.close()


def _job(spec: Any, member: int, cfg: HarnessConfig, sync: str, pipeline: str = "", setup: str = "") -> dict[str, Any]:
    """The job message of one member (``pipeline``: the JSON of its input pipeline, '' for a resident batch;
    ``setup``: the JSON of the unit's setup options, '' for the id's own)."""
    from gpupred import config

    feed = {"pipeline": pipeline, "loader_cache": str(config.LOADER_CACHE)} if pipeline else {}
    return {**feed, "setup": setup,
        "spec_json": spec.to_json(), "member": member, "device": cfg.device, "host_batches": cfg.host_batches,
        "window_s": cfg.window_s, "min_iters": cfg.min_iters, "max_window_s": cfg.max_window_s,
        "warmup_min_s": cfg.warmup_min_s, "warmup_min_iters": cfg.warmup_min_iters,
        "warmup_max_s": cfg.warmup_max_s, "cpu_threads": cfg.cpu_threads, "fault": _fault_for(spec.id),
        "max_batch": cfg.max_batch, "cpu_fp32": cfg.cpu_fp32, "sync": sync,
    }


class _Members:
    """The parent's view of a unit's children while it runs: phase, reported info and final result of each."""

    PHASES = (("built", "go"), ("warm", "measure"), ("window", "stop"))

    def __init__(self, children: list[Child], specs: list[Any], t0: float) -> None:
        self.children, self.specs, self.t0 = children, specs, t0
        k = len(children)
        self.state = ["starting"] * k
        self.info: list[dict[str, Any]] = [{} for _ in range(k)]
        self.final: list[dict[str, Any] | None] = [None] * k
        self.sent: set[str] = set()

    def live(self) -> list[int]:
        """Members without a final result."""
        return [i for i, f in enumerate(self.final) if f is None]

    def receive(self, i: int) -> None:
        """Read what member ``i`` said; note its death if it exited without a result."""
        c = self.children[i]
        try:
            while c.rx.poll():
                kind, payload = c.rx.recv()
                if kind == "result":
                    self.info[i].update(payload)
                    self.final[i] = payload
                    return
                if kind == "ready":
                    payload = {"import_s": payload["import_s"], "python_start_s": payload["boot"] - c.started,
                               "idle_before_job_s": max(0.0, self.t0 - payload["boot"] - payload["import_s"])}
                else:
                    self.state[i] = kind
                self.info[i].update(payload)
        except (EOFError, OSError):
            pass
        if self.final[i] is None and not c.alive():
            code = c.proc.returncode
            why = f"signal {-code}" if code is not None and code < 0 else f"code {code}"
            tail = c.log_tail()
            self.final[i] = {"status": "error", "message": f"child process exited with {why} before reporting" + (f": {tail}" if tail else "")}

    def advance(self) -> None:
        """Send the next phase's command once every live member has reached it."""
        live = self.live()
        for want, command in self.PHASES:
            if command not in self.sent and live and all(self.state[i] == want for i in live):
                for i in live:
                    self.children[i].send((command,))
                self.sent.add(command)

    def failed(self) -> list[int]:
        """Members whose own run failed (oom, error, timeout)."""
        return [i for i, f in enumerate(self.final) if f is not None and f.get("status", "error") != "ok"]

    def stop_group(self) -> None:
        """A member failed: kill the others at once and mark every member that did not fail ``partner_failed``."""
        bad = self.failed()
        if not bad or len(self.children) == 1:
            return
        why = "; ".join(f"member {j} ({self.specs[j].id}) {self.final[j]['status']}" for j in bad)  # type: ignore[index]
        for i in self.live():
            self.children[i].kill(wait=False)
        for i in range(len(self.children)):
            if i not in bad:
                own = self.final[i] or {}
                self.final[i] = {**own, "status": "partner_failed", "message": f"group stopped: {why}"}

    def time_out(self, now: float) -> None:
        """The hard timeout: kill every live member (all at once) and record it as timed out."""
        for i in self.live():
            self.children[i].kill(wait=False)  # each dying CUDA process may take seconds to exit
            self.final[i] = {"status": "timeout",
                             "message": f"hard timeout after {now - self.t0:.0f} s (last phase: {self.state[i]})"}


def _drive(members: _Members, hard_at: float) -> bool:
    """Run the unit's protocol until every member has a final result; True if the hard limit was hit."""
    while members.live():
        now = time.monotonic()
        if now >= hard_at:
            members.time_out(now)
            return True
        live = members.live()
        ready = wait([members.children[i].rx for i in live], timeout=0.05)
        for i in live:
            if members.children[i].rx in ready or not members.children[i].alive():
                members.receive(i)
        if members.failed():
            members.stop_group()  # a co-located group never runs on without a member
        members.advance()
    return False


def run_unit(
    specs: list[Any],
    backend: "Backend",
    config: HarnessConfig | None = None,
    group_id: str | None = None,
    sweep_id: str = "",
    deadline: float | None = None,
    launcher: Launcher | None = None,
    sync: str | None = None,
    context_mib: float = math.nan,
    pipeline: str = "",
    setup: str = "",
) -> UnitResult:
    """Run one unit (1 workload solo, or 2-4 co-located) and return its rows and samples.

    ``deadline`` (time.monotonic) is the sweep's own limit: reaching it raises :class:`UnitInterrupted`.
    ``sync`` overrides the config's synchronization mode; ``context_mib`` is the sweep's measured bare
    CUDA context size, recorded with every row. ``pipeline``: the JSON of the input pipeline that feeds every member
    (:func:`gpupred.profile.units.pipeline_json`; '' for resident batches). ``setup``: the JSON of the unit's setup
    options (:func:`gpupred.profile.units.setup_options_json`; '' for none). If one member of a group fails, the group
    stops.
    """
    from gpupred.profile.nvml import Sampler

    cfg = config or HarnessConfig()
    sync = sync or cfg.sync
    k = len(specs)
    if not 1 <= k <= 4:
        raise GpupredError(f"a run unit holds 1 to 4 workloads, got {k}")
    if sync not in SYNC_MODES:
        raise GpupredError(f"unknown sync mode {sync!r}; use one of {', '.join(SYNC_MODES)}")
    group_id = group_id or (specs[0].id if k == 1 else "+".join(s.id for s in specs))
    own_launcher = launcher is None
    launcher = launcher or Launcher()
    baseline = idle_baseline(backend, cfg.idle_wait_s) if cfg.idle_wait_s > 0 else Baseline(*_memory_info(backend).values())
    t0 = time.monotonic()
    started_at = _utc_now()
    device = backend.device_info()
    sampler = Sampler(backend, cfg.interval_ms, t0=t0).start()
    members, samples, t_end = _run_members(specs, cfg, (sync, pipeline, setup), group_id, launcher, own_launcher, sampler, t0,
                                           deadline)
    notes = _dry_run_notes(specs, cfg) + ([baseline.note] if baseline.note else []) + sampler.notes
    context = {"mem_baseline_mib": baseline.used_mib, "memory_reserved_mib": baseline.reserved_mib,
               "cuda_context_mib": float(context_mib), "sync": sync}
    unit = UnitRecord(group_id, sweep_id, started_at, t_end, device, sampler,
                      bool(backend.simulated or cfg.device == "cpu"), context, notes, pipeline, setup)
    rows, timings, windows = _member_rows(specs, members, cfg, unit)
    from gpupred.profile.schema import RUN_SCHEMA

    runs = pa_table(rows, RUN_SCHEMA)
    return UnitResult(group_id, runs, _kept_samples(samples, windows, cfg.margin_s, group_id), notes,
                      time.monotonic() - t0, timings)


def _run_members(specs: list[Any], cfg: HarnessConfig, feed: tuple[str, str, str], group_id: str, launcher: Launcher,
                 own_launcher: bool, sampler: Any, t0: float, deadline: float | None) -> tuple[_Members, Any, float]:
    """Drive the unit's members to their end, timeout or deadline: (members, samples, end time). ``feed``: the
    members' (sync mode, input pipeline JSON, setup options JSON).

    The sampler stops and every child is reaped (killed first on an exception) whatever happens.
    """
    timeout_at = t0 + cfg.unit_timeout_s
    hard_at = min(timeout_at, deadline) if deadline is not None else timeout_at
    children: list[Child] = []
    completed = False
    try:
        children = launcher.take(len(specs))
        sampler.set_members({c.pid: i for i, c in enumerate(children)})
        if not own_launcher:
            launcher.prefill()  # the next unit's children import torch while this one runs
        for i, (c, spec) in enumerate(zip(children, specs)):
            c.send(("job", _job(spec, i, cfg, *feed)))
        members = _Members(children, specs, t0)
        hit = _drive(members, hard_at)
        members.stop_group()  # after a timeout too: members that had finished are partner_failed
        completed = True
        if hit and deadline is not None and hard_at == deadline and deadline < timeout_at:
            raise UnitInterrupted(group_id)
    finally:
        t_end = time.monotonic()
        if not completed:  # an exception (Ctrl-C, SIGTERM, a bug): no child may outlive the parent's unit
            for c in children:
                c.kill(wait=False)
        samples = sampler.stop()
        for c in children:
            if c.alive():
                try:
                    c.proc.wait(timeout=15)  # members that reported exit by themselves
                except subprocess.TimeoutExpired:
                    c.kill()
            c.close()
        if own_launcher:
            launcher.close()
    return members, samples, t_end


def pa_table(rows: list[dict[str, Any]], schema: "pa.Schema") -> "pa.Table":
    """A pyarrow table of ``rows`` under ``schema``."""
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=schema)


def _dry_run_notes(specs: list[Any], cfg: HarnessConfig) -> list[str]:
    return [
        f"member {i}: dry run at batch {min(sp.batch_size, cfg.max_batch)}"
        f"{' in fp32' if cfg.cpu_fp32 and sp.precision != 'fp32' else ''}, not as specified"
        for i, sp in enumerate(specs)
        if (cfg.max_batch and sp.batch_size > cfg.max_batch) or (cfg.cpu_fp32 and sp.precision != "fp32")
    ]


@dataclass
class UnitRecord:
    """What every row of a finished unit shares: ids, start time, the sampled device, extra columns, notes."""

    group_id: str
    sweep_id: str
    started_at: str  # UTC, ISO 8601
    t_end: float  # time.monotonic() when the members ended
    device: Any  # the backend's device_info()
    sampler: Any  # the NVML sampler that ran (buffered / GPM support)
    simulated: bool  # a fake backend or the CPU: never data
    context: dict[str, Any]  # extra RUN_SCHEMA columns (memory baseline, CUDA context, sync)
    notes: list[str]  # the unit's notes; member problems found here are appended
    pipeline: str = ""  # the JSON of the input pipeline feeding every member ('' for resident batches)
    setup: str = ""  # the JSON of the unit's setup options ('' for each id's own)


def _member_rows(specs: list[Any], members: _Members, cfg: HarnessConfig,
                 unit: UnitRecord) -> tuple[list[dict[str, Any]], list[dict[str, float]], list[tuple[float, float]]]:
    """One RUN_SCHEMA row per member, each member's timings, and the measured windows (unit clock)."""
    from gpupred.version import __version__
    from gpupred.profile.schema import SCHEMA_VERSION

    group_id, device, sampler, notes, t_end = unit.group_id, unit.device, unit.sampler, unit.notes, unit.t_end

    k, t0 = len(specs), members.t0
    rows: list[dict[str, Any]] = []
    timings: list[dict[str, float]] = []
    windows: list[tuple[float, float]] = []
    teardown_s = time.monotonic() - t_end
    for i, spec in enumerate(specs):
        r = {**members.info[i], **(members.final[i] or {})}
        props = r.get("device_props", {})
        child_uuid = str(props.get("uuid", "") or "")
        if uuid_hex(child_uuid) and uuid_hex(device.uuid) and uuid_hex(child_uuid) != uuid_hex(device.uuid):
            notes.append(f"member {i}: CUDA device {child_uuid} is not the sampled NVML device {device.uuid}")
        times = [float(x) for x in r.get("iter_times", [])]
        ws = r.get("window_start", math.nan) - t0 if "window_start" in r else math.nan
        we = r.get("window_end", math.nan) - t0 if "window_end" in r else math.nan
        if times and math.isfinite(ws):
            windows.append((ws, we))
        mean = statistics.fmean(times) if times else math.nan
        timings.append({k2: float(v) for k2, v in r.items() if k2.endswith("_s") and isinstance(v, (int, float))})
        timings[-1]["teardown_s"] = teardown_s
        if "window_end" in r:
            timings[-1]["after_window_s"] = t_end - r["window_end"]
        rows.append({
            "schema_version": SCHEMA_VERSION,
            "run_id": group_id if k == 1 else f"{group_id}.m{i}",
            "group_id": group_id, "group_size": k, "member": i, "sweep_id": unit.sweep_id,
            "workload_id": spec.id, "family": spec.family, "spec_json": spec.to_json(),
            "status": r.get("status", "error"), "message": r.get("message", ""),
            "simulated": unit.simulated, "host_batches": cfg.host_batches,
            "gpu_name": device.name, "gpu_uuid": device.uuid, "gpu_sm_count": int(props.get("sm_count", 0)),
            "gpu_memory_total_mib": device.memory_total_mib, "driver_version": device.driver_version,
            "cuda_version": r.get("cuda_version") or device.cuda_version, "torch_version": r.get("torch_version", ""),
            "gpupred_version": __version__, "host": socket.gethostname(), "started_at": unit.started_at,
            "warmup_s": float(r.get("warmup_s", math.nan)), "warmup_iters": int(r.get("warmup_iters", 0)),
            "window_start_s": ws, "window_end_s": we, "n_iters": len(times), "iter_times_s": times,
            "iter_time_mean_s": mean, "iter_time_median_s": statistics.median(times) if times else math.nan,
            "samples_per_s": spec.batch_size * spec.fused / mean if times and mean > 0 else math.nan,
            "torch_peak_allocated_mib": float(r.get("peak_allocated_mib", math.nan)),
            "torch_peak_reserved_mib": float(r.get("peak_reserved_mib", math.nan)),
            "torch_window_reserved_mib": float(r.get("window_reserved_mib", math.nan)),
            "sampler_interval_ms": cfg.interval_ms, "buffered_supported": sampler.buffered_supported,
            "gpm_supported": bool(sampler.gpm_supported), "notes": "; ".join(notes), **unit.context,
            "pipeline": _row_pipeline(unit.pipeline, r), "setup": _row_setup(unit.setup, spec.id),
        })
    return rows, timings, windows


def _row_setup(options: str, workload_id: str) -> str:
    """A member's ``setup`` column from the unit's setup-options JSON ('' for none)."""
    from gpupred.profile.units import member_setup_json, setup_options_from_json

    return member_setup_json(setup_options_from_json(options), workload_id)


def _row_pipeline(pipeline: str, reported: dict[str, Any]) -> str:
    """A member's ``pipeline`` column: the unit's pipeline JSON with the CPU cores its process could use (the host the
    job was given) unless the plan set them; '' for a resident batch."""
    if not pipeline:
        return ""
    options = json.loads(pipeline)
    if options.get("host_cores") is None and reported.get("host_cores"):
        options["host_cores"] = float(reported["host_cores"])
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


def _kept_samples(samples: Any, windows: list[tuple[float, float]], margin_s: float, group_id: str) -> "pa.Table":
    """The samples within ``margin_s`` of the measured windows (all of them when no window was measured)."""
    import pyarrow as pa

    from gpupred.profile.schema import SAMPLE_SCHEMA

    if windows:
        lo = min(w[0] for w in windows) - margin_s
        hi = max(w[1] for w in windows) + margin_s
        keep = [j for j, t in enumerate(samples.t_s) if lo <= t <= hi]
    else:  # a failed unit keeps everything it saw (memory at an OOM, say)
        keep = list(range(len(samples)))
    return pa.Table.from_pydict(
        {
            "group_id": [group_id] * len(keep),
            "t_s": [samples.t_s[j] for j in keep],
            "metric": [samples.metric[j] for j in keep],
            "value": [samples.value[j] for j in keep],
            "member": [samples.member[j] for j in keep],
            "source": [samples.source[j] for j in keep],
        },
        schema=SAMPLE_SCHEMA,
    )


# -------------------------------------------------------------------------------------------- child


def _watch_parent() -> None:
    """Exit if the parent dies (an orphan would hold GPU memory and spoil later measurements)."""
    parent = os.getppid()

    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(4)

    threading.Thread(target=loop, daemon=True).start()


class _Stop(Exception):
    pass


class TrainLoop:
    """A child's training loop: one step function, synchronized every step (``sync`` step or kernel) or once per
    window (window)."""

    def __init__(self, torch: Any, step: Any, cuda: bool, sync: str, rx: Connection) -> None:
        self.torch, self.step, self.cuda, self.rx = torch, step, cuda, rx
        self.per_step = sync != "window" or not cuda  # the CPU has nothing to synchronize

    def command(self, block: bool = False) -> str | None:
        """The next command from the parent, if any (EOF means the parent is gone)."""
        if block or self.rx.poll():
            return self.rx.recv()[0]
        return None

    def sync(self) -> None:
        """Wait for the device to finish everything queued."""
        if self.cuda:
            self.torch.cuda.synchronize()

    def one(self) -> None:
        """One training step (synchronized after it in ``step`` mode)."""
        self.step()
        if self.per_step:
            self.sync()

    def warm_up(self, job: dict[str, Any]) -> tuple[float, int]:
        """Train until the warm-up bounds are met; the queue is drained at the end. Returns (seconds, iterations)."""
        t_start, n = time.monotonic(), 0
        while True:
            self.one()
            n += 1
            el = time.monotonic() - t_start
            if (n >= job["warmup_min_iters"] and el >= job["warmup_min_s"]) or el >= job["warmup_max_s"]:
                break
        self.sync()
        return time.monotonic() - t_start, n

    def busy_until(self, wanted: str) -> None:
        """Keep training until the parent sends ``wanted``; raise _Stop on ``stop`` (or anything else)."""
        while (c := self.command()) != wanted:
            if c is not None:
                raise _Stop()
            self.one()

    def window(self, job: dict[str, Any]) -> tuple[float, float, list[float]]:
        """The measured window: (start, end, iteration times). ``step`` mode times each synchronized step on the
        host clock; ``window`` mode records a CUDA event after each step and synchronizes once at the end."""
        self.sync()
        w0 = prev = time.monotonic()
        times: list[float] = []
        events = [self._event()] if not self.per_step else []
        n = 0
        while True:
            self.one()
            n += 1
            now = time.monotonic()
            if self.per_step:
                times.append(now - prev)
                prev = now
            else:
                events.append(self._event())
            el = now - w0
            if (n >= job["min_iters"] and el >= job["window_s"]) or el >= job["max_window_s"]:
                break
        if not self.per_step:
            self.sync()
            prev = time.monotonic()  # the window ends when the device has done its last step
            times = [a.elapsed_time(b) / 1000.0 for a, b in zip(events, events[1:])]
        return w0, prev, times

    def _event(self) -> Any:
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev


def _init_device(torch: Any, job: dict[str, Any], result: dict[str, Any]) -> bool:
    """Initialize the job's device and record its properties; True for CUDA."""
    t = time.monotonic()
    cuda = job["device"].startswith("cuda")
    if cuda:
        if job.get("sync") == "kernel":
            os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # read when the CUDA context is created, just below
        torch.cuda.init()
        torch.cuda.set_device(0)
        if job.get("sync") == "kernel":
            check_launch_blocking(torch)
        props = torch.cuda.get_device_properties(0)
        result["device_props"] = {
            "name": props.name, "sm_count": int(props.multi_processor_count),
            "total_mib": props.total_memory / 2**20, "uuid": str(getattr(props, "uuid", "")),
        }
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(int(job.get("cpu_threads", 1)))
        result["device_props"] = {"name": "cpu", "sm_count": 0}
    result["cuda_init_s"] = time.monotonic() - t
    result["torch_version"] = torch.__version__
    result["cuda_version"] = torch.version.cuda or ""
    return cuda


PROBE_CYCLES = 50_000_000  # the probe kernel's spin: 20-50 ms at 1-2.5 GHz, far above any launch cost


def check_launch_blocking(torch: Any, cycles: int = PROBE_CYCLES) -> dict[str, float]:
    """Check that every kernel launch waits for its kernel (``CUDA_LAUNCH_BLOCKING=1`` took effect): launch one
    kernel that spins ``cycles`` clock cycles on the device and time the launch alone and then the launch and a
    synchronize. A blocking launch returns after the kernel, so the first is most of the second; raise a one-line
    GpupredError if it is under half. Returns both times (seconds)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    launch, total = t1 - t0, t2 - t0
    if launch < 0.5 * total:
        raise GpupredError(f"CUDA_LAUNCH_BLOCKING=1 did not take effect: a {1e3 * total:.1f} ms kernel's launch "
                           f"returned after {1e3 * launch:.2f} ms (sync=kernel needs it set before CUDA starts)")
    return {"launch_s": launch, "kernel_s": total}


def _build_step(job: dict[str, Any], result: dict[str, Any]) -> Any:
    """Build the job's workload (dry runs: at a small batch, in fp32 if asked) and return its train step."""
    from gpupred.workloads.builders import build
    from gpupred.workloads.spec import WorkloadSpec

    t = time.monotonic()
    spec = WorkloadSpec.from_json(job["spec_json"])
    if job.get("max_batch") and spec.batch_size > job["max_batch"]:  # dry run: validate, don't measure
        spec = dataclasses.replace(spec, batch_size=int(job["max_batch"]))
    if job.get("setup"):  # a fine-tune: the setup's own precision (QLoRA computes in 16 bits, on the CPU too)
        step = _setup_step(spec, job)
        result["build_s"] = time.monotonic() - t
        return step
    if job.get("cpu_fp32") and spec.precision != "fp32":
        spec = dataclasses.replace(spec, precision="fp32")
    built = build(spec, job["device"])
    batches = None
    if job.get("pipeline"):  # a real DataLoader over synthetic files feeds every step
        from pathlib import Path

        from gpupred.profile.feed import loader_feed
        from gpupred.setups import pipeline_from_json

        batches = loader_feed(built, pipeline_from_json(job["pipeline"]), job["device"], Path(job["loader_cache"]),
                              result)
    step = built.make_train_step(job["device"], host_batches=bool(job["host_batches"]), batches=batches)
    result["build_s"] = time.monotonic() - t
    return step


def _setup_step(spec: Any, job: dict[str, Any]) -> Any:
    """The train step of a member under its unit's setup options (:mod:`gpupred.workloads.finetuning`)."""
    from gpupred.profile.units import member_setup, setup_options_from_json
    from gpupred.workloads.finetuning import make_setup_step

    setup = member_setup(setup_options_from_json(job["setup"]), spec)
    return make_setup_step(spec, setup, job["device"], host_batches=bool(job["host_batches"]))


def _inject_fault(torch: Any, fault: str) -> None:
    """Tests only: the failure GPUPRED_FAULT asked for."""
    if fault == "oom":
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. (injected by GPUPRED_FAULT=oom)")
    if fault == "crash":
        os._exit(3)
    if fault == "hang":
        time.sleep(3600)
    if fault == "error":
        raise RuntimeError("injected by GPUPRED_FAULT=error")


def _run_job(torch: Any, job: dict[str, Any], rx: Connection, tx: Connection, result: dict[str, Any]) -> None:
    """Build, warm up, measure and keep company, following the parent's commands; failures raise."""
    cuda = _init_device(torch, job, result)
    step = _build_step(job, result)
    tx.send(("built", {"pid": os.getpid(), **{k: result[k] for k in ("device_props", "cuda_init_s", "build_s")},
                       **{k: result[k] for k in ("files_s", "host_cores") if k in result}}))
    loop = TrainLoop(torch, step, cuda, job.get("sync", "step"), rx)
    if loop.command(block=True) != "go":
        raise _Stop()
    _inject_fault(torch, job.get("fault", ""))
    result["warmup_s"], result["warmup_iters"] = loop.warm_up(job)
    tx.send(("warm", {"warmup_s": result["warmup_s"], "warmup_iters": result["warmup_iters"]}))
    loop.busy_until("measure")  # keep the GPU busy until every member is warm
    w0, w1, times = loop.window(job)
    result.update(window_start=w0, window_end=w1, iter_times=times)
    if cuda:  # what the allocator holds in the window; the lifetime peaks also count warm-up's autotuning workspace
        result["window_reserved_mib"] = torch.cuda.memory_reserved() / 2**20
    tx.send(("window", {"window_start": w0, "window_end": w1, "iter_times": times}))
    loop.busy_until("stop")  # keep co-located members company until every window is done


def _context_only(torch: Any, job: dict[str, Any], rx: Connection, tx: Connection) -> None:
    """Initialize CUDA and hold one tiny tensor until told to stop (the bare-context measurement)."""
    try:
        torch.cuda.init()
        torch.cuda.set_device(0)
        x = torch.ones(1, device=job.get("device", "cuda"))
        torch.cuda.synchronize()
        tx.send(("context", {"pid": os.getpid(), "reserved_mib": torch.cuda.memory_reserved() / 2**20}))
    except Exception as err:
        tx.send(("context", {"error": f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]}))
        return
    try:
        rx.recv()
    except EOFError:
        pass
    del x


def forked_child(rx: Connection, tx: Connection, log_fd: int, env: dict[str, str]) -> None:
    """A child's start in the fork server's copy: the parent's environment as it was when the child was asked for,
    the log file as stdout and stderr, then its life."""
    os.environ.clear()
    os.environ.update(env)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    try:
        _child_main(rx, tx)
    except EOFError:
        pass


def _child_main(rx: Connection, tx: Connection) -> None:
    """The child's whole life: import (done by the fork server already), wait for a job, run it, report, exit."""
    boot = time.monotonic()
    _watch_parent()
    t = time.monotonic()
    import torch

    import gpupred.workloads.builders  # noqa: F401 - imported here so the parent's wait hides it

    import_s = time.monotonic() - t
    tx.send(("ready", {"import_s": import_s, "boot": boot}))
    try:
        kind, job = rx.recv()
    except EOFError:
        return
    if kind == "context":
        _context_only(torch, job, rx, tx)
        return
    result: dict[str, Any] = {"status": "ok", "message": "", "import_s": import_s}
    try:
        _run_job(torch, job, rx, tx, result)
    except _Stop:
        pass
    except Exception as err:
        text = " ".join(str(err).split())
        result.update(status=failure_status(type(err).__name__, text), message=f"{type(err).__name__}: {text}"[:500])
    if job["device"].startswith("cuda"):
        try:
            result["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
            result["peak_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
        except Exception:
            pass
    try:
        tx.send(("result", result))
    except (BrokenPipeError, OSError):
        pass

