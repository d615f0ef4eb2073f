"""One run unit: each workload's training loop in its own child process, the NVML sampler in the parent.

The child (``python -m gpupred.profile.harness``, a fresh interpreter, so it works from the CLI, a
notebook or a Ray worker alike) imports torch, says ``ready``, receives its job, builds the workload
and says ``built``; the parent then sends ``go`` to every member at once (the synchronized start of a
co-located group), each warms up and says ``warm``; once all are warm the parent sends ``measure``,
each times its measured window (iteration times from synchronized timestamps) and says ``window``,
then keeps training, unmeasured, until the parent sends ``stop`` when every member's window is done,
so that each member's whole window runs co-located. A hard timeout kills the children.

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
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from gpupred.errors import GpupredError

if TYPE_CHECKING:  # the child process imports this module: keep its top level to the standard library
    import pyarrow as pa

    from gpupred.profile.nvml import Backend

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

    @property
    def unit_timeout_s(self) -> float:
        """The hard timeout of one unit: startup allowance + warm-up and window bounds + slack."""
        return self.startup_timeout_s + self.warmup_max_s + self.max_window_s + self.slack_s

    def to_dict(self) -> dict[str, Any]:
        """Plain settings for the manifest."""
        return asdict(self)


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


class Child:
    """A started harness child process and its two pipes."""

    def __init__(self) -> None:
        c_rx, p_tx = os.pipe()
        p_rx, c_tx = os.pipe()
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", PYTHONUNBUFFERED="1")
        self.log = tempfile.TemporaryFile(prefix="gpupred-child-")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpupred.profile.harness", str(c_rx), str(c_tx)],
            pass_fds=(c_rx, c_tx), stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )
        os.close(c_rx)
        os.close(c_tx)
        self.rx = Connection(p_rx, writable=False)
        self.tx = Connection(p_tx, readable=False)
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


def run_unit(
    specs: list[Any],
    backend: "Backend",
    config: HarnessConfig | None = None,
    group_id: str | None = None,
    sweep_id: str = "",
    deadline: float | None = None,
    launcher: Launcher | None = None,
) -> UnitResult:
    """Run one unit (1 workload solo, or 2-4 co-located) and return its rows and samples.

    ``deadline`` (time.monotonic) is the sweep's own limit: reaching it raises :class:`UnitInterrupted`.
    """
    import pyarrow as pa

    from gpupred import __version__
    from gpupred.profile.nvml import Sampler
    from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA, SCHEMA_VERSION

    cfg = config or HarnessConfig()
    k = len(specs)
    if not 1 <= k <= 4:
        raise GpupredError(f"a run unit holds 1 to 4 workloads, got {k}")
    group_id = group_id or (specs[0].id if k == 1 else "+".join(s.id for s in specs))
    own_launcher = launcher is None
    launcher = launcher or Launcher()
    t0 = time.monotonic()
    started_at = _utc_now()
    timeout_at = t0 + cfg.unit_timeout_s
    hard_at = min(timeout_at, deadline) if deadline is not None else timeout_at
    device = backend.device_info()
    sampler = Sampler(backend, cfg.interval_ms, t0=t0).start()
    children: list[Child] = []
    notes: list[str] = [
        f"member {i}: dry run at batch {min(sp.batch_size, cfg.max_batch)}"
        f"{' in fp32' if cfg.cpu_fp32 and sp.precision != 'fp32' else ''}, not as specified"
        for i, sp in enumerate(specs)
        if (cfg.max_batch and sp.batch_size > cfg.max_batch) or (cfg.cpu_fp32 and sp.precision != "fp32")
    ]
    state = ["starting"] * k
    info: list[dict[str, Any]] = [{} for _ in range(k)]
    final: list[dict[str, Any] | None] = [None] * k
    sent: set[str] = set()
    interrupted = completed = False
    try:
        children = launcher.take(k)
        sampler.set_members({c.pid: i for i, c in enumerate(children)})
        if not own_launcher:
            launcher.prefill()  # the next unit's children import torch while this one runs
        for i, (c, spec) in enumerate(zip(children, specs)):
            job = {
                "spec_json": spec.to_json(), "member": i, "device": cfg.device, "host_batches": cfg.host_batches,
                "window_s": cfg.window_s, "min_iters": cfg.min_iters, "max_window_s": cfg.max_window_s,
                "warmup_min_s": cfg.warmup_min_s, "warmup_min_iters": cfg.warmup_min_iters,
                "warmup_max_s": cfg.warmup_max_s, "cpu_threads": cfg.cpu_threads, "fault": _fault_for(spec.id),
                "max_batch": cfg.max_batch, "cpu_fp32": cfg.cpu_fp32,
            }
            c.send(("job", job))
        phases = [("built", "go"), ("warm", "measure"), ("window", "stop")]
        while any(f is None for f in final):
            now = time.monotonic()
            if now >= hard_at:
                interrupted = deadline is not None and hard_at == deadline and deadline < timeout_at
                for i, c in enumerate(children):
                    if final[i] is None:
                        c.kill(wait=False)  # all at once: each dying CUDA process may take seconds to exit
                        final[i] = {"status": "timeout", "message": f"hard timeout after {now - t0:.0f} s (last phase: {state[i]})"}
                break
            ready = wait([c.rx for i, c in enumerate(children) if final[i] is None], timeout=0.05)
            for i, c in enumerate(children):
                if final[i] is not None:
                    continue
                if c.rx in ready:
                    try:
                        while c.rx.poll():
                            kind, payload = c.rx.recv()
                            if kind == "result":
                                info[i].update(payload)
                                final[i] = payload
                                break
                            if kind == "ready":
                                payload = {"import_s": payload["import_s"],
                                           "python_start_s": payload["boot"] - c.started,
                                           "idle_before_job_s": max(0.0, t0 - payload["boot"] - payload["import_s"])}
                            else:
                                state[i] = kind
                            info[i].update(payload)
                    except (EOFError, OSError):
                        pass
                if final[i] is None and not c.alive():
                    code = c.proc.returncode
                    why = f"signal {-code}" if code is not None and code < 0 else f"code {code}"
                    tail = c.log_tail()
                    final[i] = {"status": "error", "message": f"child process exited with {why} before reporting" + (f": {tail}" if tail else "")}
            live = [i for i in range(k) if final[i] is None]
            for want, command in phases:
                if command not in sent and live and all(state[i] == want for i in live):
                    for i in live:
                        children[i].send((command,))
                    sent.add(command)
        completed = True
        if interrupted:
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
    notes += sampler.notes
    wall = time.monotonic() - t0
    teardown_s = time.monotonic() - t_end

    rows: list[dict[str, Any]] = []
    timings: list[dict[str, float]] = []
    windows: list[tuple[float, float]] = []
    for i, spec in enumerate(specs):
        r = {**info[i], **(final[i] or {})}
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
            "group_id": group_id, "group_size": k, "member": i, "sweep_id": sweep_id,
            "workload_id": spec.id, "family": spec.family, "spec_json": spec.to_json(),
            "status": r.get("status", "error"), "message": r.get("message", ""),
            "simulated": bool(backend.simulated or cfg.device == "cpu"), "host_batches": cfg.host_batches,
            "gpu_name": device.name, "gpu_uuid": device.uuid, "gpu_sm_count": int(props.get("sm_count", 0)),
            "gpu_memory_total_mib": device.memory_total_mib, "driver_version": device.driver_version,
            "cuda_version": r.get("cuda_version") or device.cuda_version, "torch_version": r.get("torch_version", ""),
            "gpupred_version": __version__, "host": socket.gethostname(), "started_at": started_at,
            "warmup_s": float(r.get("warmup_s", math.nan)), "warmup_iters": int(r.get("warmup_iters", 0)),
            "window_start_s": ws, "window_end_s": we, "n_iters": len(times), "iter_times_s": times,
            "iter_time_mean_s": mean, "iter_time_median_s": statistics.median(times) if times else math.nan,
            "samples_per_s": spec.batch_size * spec.fused / mean if times and mean > 0 else math.nan,
            "torch_peak_allocated_mib": float(r.get("peak_allocated_mib", math.nan)),
            "torch_peak_reserved_mib": float(r.get("peak_reserved_mib", math.nan)),
            "sampler_interval_ms": cfg.interval_ms, "buffered_supported": sampler.buffered_supported,
            "gpm_supported": bool(sampler.gpm_supported), "notes": "; ".join(notes),
        })
    runs = pa.Table.from_pylist(rows, schema=RUN_SCHEMA)
    if windows:
        lo = min(w[0] for w in windows) - cfg.margin_s
        hi = max(w[1] for w in windows) + cfg.margin_s
        keep = [j for j, t in enumerate(samples.t_s) if lo <= t <= hi]
    else:  # a failed unit keeps everything it saw (memory at an OOM, say)
        keep = list(range(len(samples)))
    samples_table = pa.Table.from_pydict(
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
    return UnitResult(group_id, runs, samples_table, notes, wall, timings)


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


def _child_main(fd_in: int, fd_out: int) -> None:
    """The child's whole life: import, wait for a job, run it, report, exit."""
    rx = Connection(fd_in, writable=False)
    tx = Connection(fd_out, readable=False)
    boot = time.monotonic()
    _watch_parent()
    t = time.monotonic()
    import torch

    from gpupred.workloads.builders import build
    from gpupred.workloads.spec import WorkloadSpec

    import_s = time.monotonic() - t
    tx.send(("ready", {"import_s": import_s, "boot": boot}))
    try:
        kind, job = rx.recv()
    except EOFError:
        return
    result: dict[str, Any] = {"status": "ok", "message": "", "import_s": import_s}
    cuda = job["device"].startswith("cuda")
    pending: list[str] = []

    def command(block: bool = False) -> str | None:
        """The next command from the parent, if any (EOF means the parent is gone)."""
        if pending:
            return pending.pop(0)
        if block or rx.poll():
            msg = rx.recv()
            return msg[0]
        return None

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    try:
        t = time.monotonic()
        if cuda:
            torch.cuda.init()
            torch.cuda.set_device(0)
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
        t = time.monotonic()
        spec = WorkloadSpec.from_json(job["spec_json"])
        if job.get("max_batch") and spec.batch_size > job["max_batch"]:  # dry run: validate, don't measure
            spec = dataclasses.replace(spec, batch_size=int(job["max_batch"]))
        if job.get("cpu_fp32") and spec.precision != "fp32":
            spec = dataclasses.replace(spec, precision="fp32")
        built = build(spec, job["device"])
        step = built.make_train_step(job["device"], host_batches=bool(job["host_batches"]))
        result["build_s"] = time.monotonic() - t
        tx.send(("built", {"pid": os.getpid(), **{k: result[k] for k in ("device_props", "cuda_init_s", "build_s")}}))
        if command(block=True) != "go":
            raise _Stop()
        fault = job.get("fault", "")
        if fault == "oom":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. (injected by GPUPRED_FAULT=oom)")
        if fault == "crash":
            os._exit(3)
        if fault == "hang":
            time.sleep(3600)
        if fault == "error":
            raise RuntimeError("injected by GPUPRED_FAULT=error")
        # warm-up
        t_start = time.monotonic()
        n = 0
        while True:
            step()
            sync()
            n += 1
            el = time.monotonic() - t_start
            if (n >= job["warmup_min_iters"] and el >= job["warmup_min_s"]) or el >= job["warmup_max_s"]:
                break
        result["warmup_s"], result["warmup_iters"] = time.monotonic() - t_start, n
        tx.send(("warm", {"warmup_s": result["warmup_s"], "warmup_iters": n}))
        while (c := command()) != "measure":  # keep the GPU busy until every member is warm
            if c == "stop":
                raise _Stop()
            step()
            sync()
        # measured window
        times: list[float] = []
        w0 = prev = time.monotonic()
        while True:
            step()
            sync()
            now = time.monotonic()
            times.append(now - prev)
            prev = now
            el = now - w0
            if (len(times) >= job["min_iters"] and el >= job["window_s"]) or el >= job["max_window_s"]:
                break
        result.update(window_start=w0, window_end=prev, iter_times=times)
        tx.send(("window", {"window_start": w0, "window_end": prev, "iter_times": times}))
        while command() != "stop":  # keep co-located members company until every window is done
            step()
            sync()
    except _Stop:
        pass
    except torch.cuda.OutOfMemoryError as err:
        result.update(status="oom", message=" ".join(str(err).split())[:500])
    except Exception as err:
        text = " ".join(str(err).split())
        oom = "out of memory" in text.lower() or "ALLOC_FAILED" in text
        result.update(status="oom" if oom else "error", message=f"{type(err).__name__}: {text}"[:500])
    if cuda:
        try:
            result["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
            result["peak_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
        except Exception:
            pass
    try:
        tx.send(("result", result))
    except (BrokenPipeError, OSError):
        pass


if __name__ == "__main__":
    if len(sys.argv) == 3:
        try:
            _child_main(int(sys.argv[1]), int(sys.argv[2]))
        except EOFError:
            pass
    else:
        print(json.dumps({"usage": "python -m gpupred.profile.harness FD_IN FD_OUT (started by gpupred)"}))
