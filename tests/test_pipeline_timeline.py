"""The step model's input-pipeline timeline against a real torch DataLoader on this CPU (issue 77, item 4).

Fixture: the test writes its own sample files, builds a DataLoader over them, and feeds a fake training step of known
duration: the main thread launches (a fixed amount of Python work, ``HOST_SHARE`` of the step: the host's share)
and then waits for the "device" as CUDA waits by default, spinning on its core until the device's time has passed
(``cudaDeviceScheduleAuto`` spins while the process's CUDA contexts are fewer than the logical CPUs). From measured
numbers, the per-batch cost of making a batch in the main process with no step, the receive cost of a batch of
resident samples from a worker (and the worker's handing it over, taken as costly:
:func:`gpupred.step.physics.inputfeed.loader_times`) and the seconds the step's launches took in the case,
:func:`gpupred.step.physics.timeline.with_loader` predicts the steady period and the device's busy fraction for
0, 1 and 2 workers and steps from loader-bound to step-bound; both must come within 10% of the measured ones. This
tests the timeline, not only its formula: the same loop runs for real, on however many cores this machine has. A case
passes when one of five attempts (each measuring the batch's making afresh) comes within 10%.

What the spinning wait changed (this 2-core machine, 6 attempts a case). Two workers and the main thread outnumber
the cores, and a main thread that spins through its step takes a core the workers would otherwise use:
- loader-bound (step_ratio 0.3): the period is 0.76-0.89 of a batch's making with a spinning wait, 0.61-0.69 with a
  sleeping one. The timeline that counted only the main thread's launches and receiving predicted 0.57, 27-34% short
  (3 of 3 attempts); counting its whole step as CPU time, as it now does, it misses by 1-13% (2 of 6 beyond 10%).
- at the knee (step_ratio 1.0), with a sleeping wait the timeline came out 4-11% short alone (median 8.6%) and 10-17%
  short late in a serial run of the whole suite. Traced per batch: the workers were on time, but the main thread's
  ``next()`` took 1.4-7.1 ms (1.1-1.3 step-bound), waiting on torch's file-descriptor handover, a round trip with
  the sending worker's process that waits for a core when every core is taken. A spinning main thread keeps its
  core, and the knee now comes within 1.3-6.2% (6 of 6 attempts); it is held to 10% like every other case.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpupred.step.physics.timeline import LoaderTimes, loader_arrays, with_loader  # noqa: E402

# The loops fork DataLoader workers in this process, which carries every earlier test's threads: a fork that hangs in
# C is out of a signal's reach, so pytest-timeout's thread method ends the run with every thread's stack in 5 minutes
# (a case takes seconds), where the signal method would wait for the CI's own limit.
pytestmark = [pytest.mark.timeout(300, method="thread"), pytest.mark.timing]  # timing: alone, after the parallel run

SAMPLES = 512  # more than (WARMUP + MEASURED) batches: one epoch, no restart of the workers
SHAPE = (3, 64, 64)
BATCH = 8
WORK_ROUNDS = 12  # numpy passes per sample: the sample's "decode and augment" cost (about 3 ms)
WARMUP = 8  # batches before the measured window (workers starting, queues filling)
MEASURED = 40


class FileSamples(torch.utils.data.Dataset):
    """Fixture dataset: one .npy file per sample, read and worked on in __getitem__ (a decode stand-in)."""

    def __init__(self, root: Path, rounds: int) -> None:
        self.files = sorted(root.glob("*.npy"))
        self.rounds = rounds

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        x = np.load(self.files[i])
        for _ in range(self.rounds):
            x = np.sqrt(np.abs(np.sin(x) * 1.0001 + 0.5))
        return torch.from_numpy(x.astype(np.float32))


class ResidentSamples(torch.utils.data.Dataset):
    """Fixture dataset: the same samples' shape as float32 tensors already in memory, so that a worker's batch costs
    only its collating and handing over (what ``gpupred loader bench`` times as the IPC, with in-memory tensors too)."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full(SHAPE, float(i))


HOST_SHARE = 0.15  # of the fake step: the main thread's launch work (CPU), the rest the device's (a spinning wait)


def spin_rate() -> float:
    """Iterations per second of :func:`spin`'s loop on an idle core (measured once)."""
    n, t0 = 200_000, time.perf_counter()
    spin(n)
    return n / (time.perf_counter() - t0)


def spin(iterations: int) -> None:
    """A fixed amount of Python work on this thread (the host's launches)."""
    x = 0
    for i in range(iterations):
        x += i


def fake_step(host_iterations: int, device_s: float) -> float:
    """Launch (host work), then wait for the device as CUDA waits by default, spinning on this core until the device
    is done (the device runs by the clock; the thread notices when it next runs); returns the launches' seconds."""
    start = time.perf_counter()
    spin(host_iterations)
    launched = time.perf_counter()
    done = launched + device_s
    while time.perf_counter() < done:
        pass
    return launched - start


def run_loop(root: Path | None, workers: int, step_s: float, rate: float) -> tuple[float, float, float]:
    """(period s per batch, the device's busy fraction, the launches' mean seconds) of a loop whose fake step lasts
    ``step_s`` on an idle core, over the sample files under ``root`` (None: resident samples)."""
    dataset = ResidentSamples() if root is None else FileSamples(root, WORK_ROUNDS)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers,
                                         generator=torch.Generator().manual_seed(0))
    host_iterations, device_s = int(HOST_SHARE * step_s * rate), (1 - HOST_SHARE) * step_s
    it = iter(loader)
    for _ in range(WARMUP):
        next(it)
        fake_step(host_iterations, device_s)
    t0, host = time.perf_counter(), 0.0
    for _ in range(MEASURED):
        next(it)
        host += fake_step(host_iterations, device_s)
    wall = time.perf_counter() - t0
    del it
    return wall / MEASURED, device_s * MEASURED / wall, host / MEASURED


def idle_cores(window_s: float = 1.0) -> float | None:
    """Cores idle over the next ``window_s`` seconds, from /proc/stat's idle and iowait times (None off Linux)."""
    def idle_ticks() -> tuple[int, int] | None:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        return fields[3] + fields[4], sum(fields)

    first = idle_ticks()
    time.sleep(window_s)
    last = idle_ticks()
    if first is None or last is None or last[1] == first[1]:
        return None
    return (last[0] - first[0]) / (last[1] - first[1]) * (os.cpu_count() or 1)


QUIET_CORES = 0.25  # busy cores allowed before the loops start: what another process may take without skewing them
QUIET_WAIT_S = 120


@pytest.fixture(scope="module", autouse=True)
def quiet_machine() -> None:
    """Wait (up to ``QUIET_WAIT_S``) until the machine is idle, to within ``QUIET_CORES``, for two seconds in a row.

    The loops measure one process's making of a batch alone, then two or three processes at once: a process still
    busy from an earlier run (a parallel session's last workers and their children, or the kernel reclaiming their
    memory) takes a core from the second measurement only. In a CI run where these tests followed the slow checks and
    three cases missed in all five attempts, every measured period was 2.7-8.1 ms longer than predicted.
    """
    cores, waited, calm = float(os.cpu_count() or 1), 0.0, 0
    while waited < QUIET_WAIT_S and calm < 2:
        idle = idle_cores()
        if idle is None:
            return
        waited += 1.0
        calm = calm + 1 if idle >= cores - QUIET_CORES else 0
    print(f"machine quiet after {waited:.0f} s" if calm >= 2 else f"machine still busy after {waited:.0f} s")


@pytest.fixture(scope="module")
def sample_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fixture-samples")
    rng = np.random.default_rng(0)
    for i in range(SAMPLES):
        np.save(root / f"{i:04d}.npy", rng.standard_normal(SHAPE))
    return root


@pytest.fixture(scope="module")
def costs(sample_root: Path) -> tuple[float, float, float]:
    """(one process's seconds to make a batch, the main process's seconds to receive one from a worker, the spin
    rate), measured on this machine."""
    rate = max(spin_rate() for _ in range(3))
    produce = min(run_loop(sample_root, 0, 0.0, rate)[0] for _ in range(2))
    # Resident samples: the IPC alone. Files read with no work would count their reading twice (it is in produce),
    # 1.1 ms of 2.2 on the CI's machine, where the period of one worker came out 11% under the prediction.
    receive = min(run_loop(None, 1, 0.0, rate)[0] for _ in range(2))
    return produce, receive, rate


def predicted(produce: float, receive: float, workers: int, step_s: float, host_s: float | None = None
              ) -> tuple[float, float]:
    """(period, the device's busy fraction) the timeline predicts for the loop (``host_s``: its launches' seconds,
    default ``HOST_SHARE`` of the step)."""
    cores = float(len(os.sched_getaffinity(0)))  # a worker's handing a batch over costs it what receiving costs
    loader = LoaderTimes(produce + receive, receive, workers, cores) if workers else LoaderTimes(produce, 0.0, 0, cores)
    device = (1 - HOST_SHARE) * step_s
    host_s = HOST_SHARE * step_s if host_s is None else host_s
    step, busy, host = (np.array([v]) for v in (device + host_s, device, host_s))
    period, _ = with_loader(step, busy, host, np.array(["step"], dtype=object), loader_arrays([loader], 1))
    return float(period[0]), float(busy[0] / period[0])


# A shared virtual machine's timings jump by 10-28% now and then, for seconds at a time: each attempt measures afresh,
# after a pause. Measured here over 12 attempts of each case with a sleeping wait: 0-3 of 12 missed by more than 10%;
# with the spinning wait, 0-2 of 6 (the module docstring); so 5 in a row.
ATTEMPTS = 5
PAUSE_S = 1.0
TOLERANCE = 0.10


def attempt(root: Path, costs: tuple[float, float, float], workers: int, step_ratio: float) -> tuple[float, float]:
    """One measurement of a case against its prediction: (relative error of the period, of the busy fraction)."""
    produce, receive, rate = costs
    produce = run_loop(root, 0, 0.0, rate)[0]  # the batch's making, measured again beside the case
    # the launches are a fixed count of Python iterations, timed by the spin rate measured when the module started: the
    # prediction takes the seconds they took in the case itself, as it takes the batch's making measured beside it
    # (this machine's speed drifts by up to 40% within a minute: launches of 9.9 ms took 13.4-14.7 ms in one run)
    step_s = step_ratio * produce
    period, busy, host_s = run_loop(root, workers, step_s, rate)
    want_period, want_busy = predicted(produce, receive, workers, step_s, host_s)
    print(f"workers {workers} step {step_s * 1e3:.1f} ms (produce {produce * 1e3:.1f} ms, receive {receive * 1e3:.2f} "
          f"ms, launches {host_s * 1e3:.2f} ms, {HOST_SHARE * step_s * 1e3:.2f} at the module's start): period "
          f"{period * 1e3:.1f} ms, predicted {want_period * 1e3:.1f}; busy {busy:.3f}, predicted {want_busy:.3f}")
    return abs(want_period / period - 1), abs(want_busy / busy - 1)


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("step_ratio", [0.3, 1.0, 2.5])
def test_the_timeline_predicts_a_real_loaders_period(sample_root: Path, costs: tuple[float, float, float],
                                                    workers: int, step_ratio: float) -> None:
    """Within 10% on the period and on the busy fraction, in one of ``ATTEMPTS`` measurements (a model that is wrong
    misses them all; the machine's noise rarely spoils five in a row)."""
    errors = []
    for _ in range(ATTEMPTS):
        if errors:
            time.sleep(PAUSE_S)
        errors.append(attempt(sample_root, costs, workers, step_ratio))
        if max(errors[-1]) <= TOLERANCE:
            return
    pytest.fail(f"the timeline missed a real loader by more than {TOLERANCE:.0%} in {ATTEMPTS} attempts: "
                f"{[tuple(round(e, 3) for e in pair) for pair in errors]} (period, busy fraction)")
