"""``gpupred loader bench``: measure the standard kinds' host cost per sample on this machine and write its profile.

Every case writes its own synthetic files (:mod:`gpupred.loader.synth`) into a temporary folder, builds the kind's
standard loader (:func:`gpupred.loader.standard.make_loader`, ``num_workers=0``, one torch thread as in a DataLoader
worker), drops the first batch and times whole batches until the case's share of the budget is spent, in two passes
over all the cases: a point's ``per_sample_s`` is the better pass's median batch seconds over its batch size
(reading, decoding, augmenting and collating; the better pass, because other work on the CPUs only ever slows one).
Then the main process's cost of receiving a batch from one worker (``ipc``), a host copy's bandwidth (``copy``) and
the single-core score (:mod:`gpupred.loader.speed`).
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SECONDS = 25.0
IPC_SIZES = (4096, 1 << 20, 8 << 20, 32 << 20)  # bytes of one batch received from a worker
COPY_BYTES = 64 << 20
PASSES = 2  # each case is timed once per pass over all cases; its cost is the best pass's


@dataclass(frozen=True)
class Case:
    """One scale point of one standard kind: what to write, how to load it, what scale it is."""

    kind: str
    variant: str
    scale: float
    write: dict[str, Any]
    load: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 8
    files: int = 16
    weight: float = 1.0


def cases() -> list[Case]:
    """The bench's cases: two scale points per kind and variant (one for host tensors, whose scale is always 1)."""
    out = [Case("host-tensors", "default", 1.0, {}, batch_size=128, files=256, weight=0.5)]
    for fmt in ("jpeg", "png"):
        for tv in ("v1", "v2"):
            for w, h in ((500, 375), (1024, 768)):
                out.append(Case("image-files", f"{fmt}-{tv}", float(w * h), {"size": (w, h), "fmt": fmt},
                                {"transforms": tv, "image_size": 224}, batch_size=4, files=6))
    for seq_len in (128, 2048):
        out.append(Case("text-tokens", "default", float(seq_len), {"seq_len": seq_len}, {"seq_len": seq_len},
                        batch_size=32, files=1024, weight=0.5))
    for seconds in (10.0, 30.0):
        out.append(Case("audio-logmel", "default", seconds, {"seconds": seconds}, batch_size=4, files=4))
    for points in (2500, 100_000):
        out.append(Case("array-files", "default", float(points * 3 * 4), {"shape": (points, 3)}, batch_size=16,
                        files=32, weight=0.5))
    for points in (2500, 10_000):  # text files parsed by np.loadtxt (ShapeNet's .pts): scale = the values' float32 bytes
        out.append(Case("array-files", "txt", float(points * 3 * 4), {"shape": (points, 3), "fmt": "txt"},
                        batch_size=4, files=8, weight=0.5))
    for points in (2500, 10_000):  # the same files parsed as numpy before 1.23 parsed them (gpupred.loader.legacytext)
        out.append(Case("array-files", "txt-legacy", float(points * 3 * 4), {"shape": (points, 3), "fmt": "txt"},
                        {"text_parser": "legacy"}, batch_size=2, files=8, weight=0.5))
    return out


def time_batches(loader: Any, seconds: float, min_batches: int = 2) -> list[float]:
    """Seconds of each batch after the first, until ``seconds`` have passed (at least ``min_batches``)."""
    it = iter(loader)
    next(it)
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < min_batches or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - t0)
    return times


def case_files(case: Case, root: Path) -> Path:
    """The folder of a case's synthetic files, written on first use (v1 and v2 read the same images)."""
    from gpupred.loader.synth import write_kind

    name = "-".join([case.kind, str(case.files), *(f"{k}={v}" for k, v in sorted(case.write.items()))])
    folder = root / re.sub(r"[^A-Za-z0-9.=-]+", "_", name)
    if not folder.is_dir():
        write_kind(case.kind, folder, case.files, **case.write)
    return folder


def run_case(case: Case, root: Path, seconds: float) -> dict[str, Any]:
    """One pass of a case: its loader timed for ``seconds``; the median batch's seconds per sample, and its files."""
    from gpupred.loader.standard import make_loader

    folder = case_files(case, root)
    sizes = [p.stat().st_size for p in folder.iterdir() if p.is_file()]
    loader = make_loader(case.kind, folder, case.batch_size, length=case.batch_size * 100_000, **case.load)
    times = time_batches(loader, seconds)
    return {"scale": case.scale, "per_sample_s": statistics.median(times) / case.batch_size,
            "batch_size": case.batch_size, "batches": len(times), "files": case.files,
            "file_bytes_mean": sum(sizes) / max(1, len(sizes))}


class SizedTensors:
    """A worker-side dataset of fresh uint8 tensors: item ``i`` has ``sizes[i // per_size]`` bytes."""

    def __init__(self, sizes: tuple[int, ...], per_size: int) -> None:
        self.sizes, self.per_size = sizes, per_size

    def __len__(self) -> int:
        return len(self.sizes) * self.per_size

    def __getitem__(self, index: int) -> Any:
        import torch

        return torch.empty(self.sizes[index // self.per_size], dtype=torch.uint8)


def measure_ipc(seconds: float) -> dict[str, Any]:
    """The main thread's CPU seconds to receive a batch from one worker and map its pages: fixed + per byte."""
    import numpy as np
    from torch.utils.data import DataLoader

    per_size = max(6, min(40, int(seconds * 20)))
    loader = DataLoader(SizedTensors(IPC_SIZES, per_size), batch_size=None, num_workers=1)
    cpu: dict[int, list[float]] = {s: [] for s in IPC_SIZES}
    wall: dict[int, list[float]] = {s: [] for s in IPC_SIZES}
    it = iter(loader)
    for i in range(len(loader.dataset)):
        w0, c0 = time.perf_counter(), time.thread_time()
        batch = next(it)
        int(batch[::4096].sum())  # touch one byte per page: the mapping a consumer of the batch pays for
        size = IPC_SIZES[i // per_size]
        if i % per_size:  # the first of each size warms up
            cpu[size].append(time.thread_time() - c0)
            wall[size].append(time.perf_counter() - w0)
    del it
    points = [{"bytes": s, "main_cpu_s": statistics.median(cpu[s]), "wall_s": statistics.median(wall[s]),
               "batches": len(cpu[s])} for s in IPC_SIZES]
    fixed = points[0]["main_cpu_s"]  # the smallest batch: its bytes cost next to nothing
    x = np.array([p["bytes"] for p in points[1:]], dtype=float)
    y = np.array([p["main_cpu_s"] for p in points[1:]]) - fixed
    per_byte = float((x * y).sum() / (x * x).sum())
    return {"per_batch_s": max(0.0, fixed), "per_byte_s": max(0.0, per_byte), "points": points,
            "how": "main thread CPU time (time.thread_time) of next() on a 1-worker DataLoader plus touching one byte "
                   "per page of the received uint8 tensor, median per size; fixed = the 4 KiB batch's, per byte = "
                   "least squares through the larger sizes' excess over it"}


def measure_copy(seconds: float) -> dict[str, Any]:
    """Bandwidth of copying a batch into a fresh tensor: ``pin_memory()`` with CUDA, else a plain clone."""
    import torch

    pinned = torch.cuda.is_available()
    src = torch.ones(COPY_BYTES, dtype=torch.uint8)
    warm = torch.empty_like(src)
    fresh: list[float] = []
    reused: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(fresh) < 3 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        dst = src.pin_memory() if pinned else src.clone()
        t1 = time.perf_counter()
        warm.copy_(src)
        reused.append(time.perf_counter() - t1)
        fresh.append(t1 - t0)
        del dst
    return {"gbs": COPY_BYTES / statistics.median(fresh) / 1e9, "kind": "pinned" if pinned else "pageable",
            "warm_gbs": COPY_BYTES / statistics.median(reused) / 1e9, "bytes": COPY_BYTES, "copies": len(fresh),
            "threads": torch.get_num_threads(),
            "how": "gbs: src.pin_memory() with CUDA, else src.clone() (a fresh allocation, its page faults included); "
                   "warm_gbs: copy_ into one reused pageable tensor"}


def measure_kinds(root: Path, seconds: float, bar: Any, passes: int = PASSES) -> dict[str, Any]:
    """Every case's point, grouped by kind and variant: each case timed in ``passes`` passes over all cases, its cost
    the best pass's median (other work sharing the CPUs only ever slows a pass down)."""
    from gpupred.loader.hostprofile import SCALE_UNITS

    todo = cases()
    total = sum(c.weight for c in todo) * passes
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(todo))}
    for p in range(passes):
        for i, case in enumerate(todo):
            bar.set_description(f"pass {p + 1}/{passes} {case.kind} {case.variant} {case.scale:g}")
            runs[i].append(run_case(case, root, seconds * case.weight / total))
            bar.update(1)
    kinds: dict[str, Any] = {}
    for i, case in enumerate(todo):
        best = min(runs[i], key=lambda r: r["per_sample_s"])
        point = {**best, "batches": sum(r["batches"] for r in runs[i]),
                 "pass_per_sample_s": [r["per_sample_s"] for r in runs[i]]}
        params = {**case.load, **{k: v for k, v in case.write.items() if k not in ("size", "shape", "seconds")}}
        entry = kinds.setdefault(case.kind, {}).setdefault(case.variant, {
            "scale_unit": SCALE_UNITS[case.kind], "params": params, "points": []})
        entry["points"].append(point)
    return kinds


def bench(out: str | Path | None = None, seconds: float = DEFAULT_SECONDS, progress: bool = True) -> Path:
    """Measure this host's standard input pipelines (about ``seconds`` of timing plus file writing) and write its host
    profile to ``out`` (default: this user's host folder, :func:`gpupred.config.host_profile_dir`); return the path."""
    import torch

    from gpupred.errors import GpupredError
    from gpupred.loader import hostinfo, speed
    from gpupred.loader.hostprofile import SCHEMA_NAME, SCHEMA_VERSION, write_host_profile
    from gpupred.reports import progress_bar

    if not seconds > 0:
        raise GpupredError(f"--seconds must be positive (got {seconds})")
    t0, threads = time.monotonic(), torch.get_num_threads()
    torch.set_num_threads(1)
    bar = progress_bar(total=len(cases()) * PASSES + 3, desc="loader bench", unit="case", disable=not progress)
    try:
        before = speed.workload_times(5)  # the score is the best of these and the ones after the cases
        with tempfile.TemporaryDirectory(prefix="gpupred-loader-bench-") as tmp:
            kinds = measure_kinds(Path(tmp), seconds * 0.85, bar)
        bar.set_description("ipc")
        ipc = measure_ipc(seconds * 0.08)
        bar.update(1)
        bar.set_description("copy")
        copy = measure_copy(seconds * 0.04)
        bar.update(1)
        bar.set_description("single-core speed")
        single = speed.single_core_score(5, before)
        bar.update(1)
    finally:
        bar.close()
        torch.set_num_threads(threads)
    data = {"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "created_at": hostinfo.now_utc(),
            "source": "bench", "wall_s": round(time.monotonic() - t0, 2), "seconds_budget": float(seconds),
            "host": hostinfo.host_identity(), "software": hostinfo.software_versions(), "single_core": single,
            "torch_threads": 1, "kinds": kinds, "ipc": ipc, "copy": copy, "measured": None}
    return write_host_profile(data, Path(out) if out is not None else default_path(data["host"]))


def default_path(host: dict[str, Any]) -> Path:
    """Where a bench is written by default: this user's host folder, named for the CPU and its cores."""
    from gpupred import config

    slug = re.sub(r"[^a-z0-9]+", "-", str(host["cpu"]).lower()).strip("-") or "cpu"
    return config.host_profile_dir() / f"{slug}-{host['affinity_cores']}cpu.json"
