"""Profiler correctness on the CPU (issue 11): OOM texts, the sync knob, the pre-launch baseline and the
measured CUDA context as recorded by a dry run. Every value here is simulated or a FIXTURE."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpupred.errors import GpupredError
from gpupred.profile.fake import FakeBackend
from gpupred.profile.harness import TrainLoop, failure_status, run_unit
from gpupred.profile.labels import memory_label
from gpupred.profile.units import load_plan, parse_plan_text
from gpupred.profile.sweep import SweepOptions, run_sweep
from gpupred.workloads.spec import WorkloadSpec

from profile_faults import TINY, tiny_config

# (exception type name, message) as CUDA, cuBLAS, cuDNN and torch word their allocation failures
OOM_TEXTS: list[tuple[str, str]] = [
    ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB total capacity; "
                         "77.50 GiB already allocated; 1.02 GiB free; 77.80 GiB reserved in total by PyTorch)"),
    ("RuntimeError", "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other "
                     "API call, so the stacktrace below might be incorrect."),
    ("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    ("RuntimeError", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    ("RuntimeError", "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed "
                     "cudnn_status: CUDNN_STATUS_ALLOC_FAILED"),
    ("RuntimeError", "Unable to find a valid cuDNN algorithm to run convolution"),
    ("RuntimeError", "Triton Error [CUDA]: CUDA_ERROR_OUT_OF_MEMORY"),
    ("CudaAPIError", "cudaErrorMemoryAllocation: out of memory"),
]
NOT_OOM_TEXTS: list[tuple[str, str]] = [
    ("RuntimeError", "CUDA error: device-side assert triggered"),
    ("RuntimeError", "CUDA error: an illegal memory access was encountered"),
    ("RuntimeError", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"),
    ("ValueError", "Expected input batch_size (32) to match target batch_size (64)."),
]


@pytest.mark.parametrize("error_type,message", OOM_TEXTS)
def test_allocation_failures_are_oom(error_type: str, message: str) -> None:
    assert failure_status(error_type, message) == "oom"


@pytest.mark.parametrize("error_type,message", NOT_OOM_TEXTS)
def test_other_failures_are_errors(error_type: str, message: str) -> None:
    assert failure_status(error_type, message) == "error"


class _FakeEvent:
    """A FIXTURE CUDA event: its 'device time' is a counter the fake torch advances per step."""

    def __init__(self, clock: list[float]) -> None:
        self.clock, self.t = clock, math.nan

    def record(self) -> None:
        self.t = self.clock[0]

    def elapsed_time(self, other: "_FakeEvent") -> float:
        return (other.t - self.t) * 1000.0  # milliseconds, like torch.cuda.Event


class _FakeTorch:
    """Just enough of ``torch`` for ``TrainLoop``: counts synchronizations; each step takes 0.25 s of device time."""

    def __init__(self) -> None:
        self.syncs, self.clock = 0, [0.0]
        torch = self

        class cuda:  # noqa: N801 - mirrors torch.cuda
            @staticmethod
            def synchronize() -> None:
                torch.syncs += 1

            @staticmethod
            def Event(enable_timing: bool = False) -> _FakeEvent:  # noqa: N802 - mirrors torch.cuda.Event
                return _FakeEvent(torch.clock)

        self.cuda = cuda

    def step(self) -> None:
        self.clock[0] += 0.25


JOB = {"min_iters": 5, "window_s": 0.0, "max_window_s": 10.0}


@pytest.mark.parametrize("sync,syncs,times", [("step", 6, None), ("window", 2, [0.25] * 5), ("kernel", 6, None)])
def test_loop_synchronizes_per_step_or_once_per_window(sync: str, syncs: int, times: list[float] | None) -> None:
    torch = _FakeTorch()
    loop = TrainLoop(torch, torch.step, cuda=True, sync=sync, rx=None)  # type: ignore[arg-type]
    w0, w1, got = loop.window(JOB)
    assert torch.syncs == syncs  # one before the window, then per step (step) or once at its end (window)
    assert len(got) == 5 and w1 >= w0
    if times is not None:
        assert got == pytest.approx(times)  # iteration times from the device's events, not the host clock


def test_plan_lines_carry_sync_and_window_units_get_their_own_group(tmp_path: Path) -> None:
    units = parse_plan_text(f"{TINY}\n{TINY} sync=step\n{TINY} sync=window\n{TINY} sync=kernel\n")
    assert [u.sync for u in units] == ["step", "step", "window", "kernel"]
    assert units[2].group_id != units[1].group_id and units[2].group_id.endswith("window")
    assert units[3].group_id == f"{TINY}~sync-kernel"
    with pytest.raises(GpupredError, match="sync"):
        parse_plan_text(f"{TINY} sync=sometimes\n")
    plan = tmp_path / "plan.txt"
    plan.write_text(f"{TINY}\n")
    assert [u.sync for u in load_plan(str(plan), sync="window")] == ["window"]


def test_committed_sync_plan_covers_families_in_both_settings() -> None:
    units = parse_plan_text((Path(__file__).resolve().parent.parent / "plans" / "sync.txt").read_text())
    specs = {u.workload_ids[0] for u in units}
    assert 16 <= len(specs) <= 24 and len(units) == 2 * len(specs)
    assert {u.sync for u in units} == {"step", "window"}
    assert len({WorkloadSpec.from_id(s).family for s in specs}) >= 8


def test_committed_launch_blocking_plan_pairs_lucids_families_with_and_without_it() -> None:
    """plans/launch-blocking.txt: the families of Lucid's runs, each spec with sync=step and sync=kernel, as
    ``gpupred plan launch-blocking`` writes them."""
    from gpupred.profile.plans import LAUNCH_BLOCKING_FAMILIES, launch_blocking_plan

    text = (Path(__file__).resolve().parent.parent / "plans" / "launch-blocking.txt").read_text()
    units = parse_plan_text(text)
    assert [line for line in text.splitlines() if line and not line.startswith("#")] == launch_blocking_plan()
    specs = {u.workload_ids[0] for u in units}
    assert len(units) == 2 * len(specs) and {u.sync for u in units} == {"step", "kernel"}
    assert {WorkloadSpec.from_id(s).family for s in specs} == set(LAUNCH_BLOCKING_FAMILIES)


class _SleepTorch:
    """Just enough of ``torch.cuda`` for :func:`check_launch_blocking`: ``_sleep`` spins 1 ms per million cycles on
    a FIXTURE device, and its launch waits for it (``blocking``) or returns at once."""

    def __init__(self, blocking: bool) -> None:
        import time

        owner, self.done_at = self, 0.0

        class cuda:  # noqa: N801 - mirrors torch.cuda
            @staticmethod
            def _sleep(cycles: int) -> None:
                owner.done_at = time.perf_counter() + cycles / 1e9
                if blocking:
                    cuda.synchronize()

            @staticmethod
            def synchronize() -> None:
                time.sleep(max(0.0, owner.done_at - time.perf_counter()))

        self.cuda = cuda


def test_launch_blocking_is_checked_before_a_kernel_sync_unit_builds() -> None:
    """A launch that waits for its kernel passes; one that returns at once is a one-line error naming the setting."""
    from gpupred.profile.harness import check_launch_blocking

    times = check_launch_blocking(_SleepTorch(blocking=True), cycles=20_000_000)  # type: ignore[arg-type]
    assert times["launch_s"] >= 0.5 * times["kernel_s"] and times["kernel_s"] >= 0.02
    with pytest.raises(GpupredError, match="CUDA_LAUNCH_BLOCKING=1 did not take effect") as err:
        check_launch_blocking(_SleepTorch(blocking=False), cycles=20_000_000)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_dry_run_records_sync_baseline_and_context() -> None:
    backend = FakeBackend()
    r = run_unit([WorkloadSpec.from_id(TINY)], backend, tiny_config(), sync="window", context_mib=480.0)
    row = r.runs.to_pylist()[0]
    assert row["status"] == "ok", row["message"]
    assert row["sync"] == "window" and row["cuda_context_mib"] == 480.0
    assert row["mem_baseline_mib"] == backend.idle_mib  # read before the child existed, not in its window
    assert row["memory_reserved_mib"] == 400.0
    kernel = run_unit([WorkloadSpec.from_id(TINY)], backend, tiny_config(), sync="kernel").runs.to_pylist()[0]
    assert kernel["status"] == "ok" and kernel["sync"] == "kernel"  # the CPU child has no launches to block


def test_unattributed_solo_memory_comes_from_the_pre_launch_baseline() -> None:
    """NVML without process attribution (containers): the label is device peak minus the pre-launch baseline."""
    backend = FakeBackend(processes=False)
    r = run_unit([WorkloadSpec.from_id(TINY)], backend, tiny_config(), context_mib=100.0)
    run = r.runs.to_pylist()[0]
    memory, source, reason = memory_label(run, r.samples.to_pandas())
    assert reason == "" and source == "device-minus-baseline"
    assert memory == pytest.approx(backend.per_process_mib)  # not ~0: the samples start after the job allocated


def test_dry_sweep_manifest_says_the_context_was_not_measured(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(f"{TINY} sync=window\n")
    out = tmp_path / "sweep"
    run_sweep(str(plan), out, SweepOptions(dry_run=True, progress=False), tiny_config())
    manifest = json.loads((out / "manifest.json").read_text())
    ctx: dict[str, Any] = manifest["cuda_context"]
    assert ctx["context_mib"] is None and "not measured" in ctx["note"]
