"""The step model's input-pipeline timeline against a real torch DataLoader on this CPU (issue 77, item 4).

Fixture: the test writes its own sample files, builds a DataLoader over them, and feeds a fake training step of known
duration: a busy main-thread spin standing in for the device step (it holds a core, as a step's host work does).
From one measured number, the per-batch cost of making a batch in the main process with no step, and the receive
cost of a batch from a worker, :func:`gpupred.perf.timeline.with_loader` predicts the steady period and the step's
busy fraction for 0, 1 and 2 workers and steps from loader-bound to step-bound; both must come within 10% of the
measured ones. This tests the timeline, not only its formula: the same loop runs for real.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpupred.perf.timeline import LoaderTimes, loader_arrays, with_loader  # noqa: E402

SAMPLES = 256
SHAPE = (3, 64, 64)
BATCH = 8
WORK_ROUNDS = 12  # numpy passes per sample: the sample's "decode and augment" cost (about 3 ms)
WARMUP = 6  # batches before the measured window (workers starting, queues filling)
MEASURED = 20


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


def spin(seconds: float) -> None:
    """Hold this thread busy for ``seconds`` (the fake device step)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def run_loop(root: Path, workers: int, step_s: float, rounds: int = WORK_ROUNDS) -> tuple[float, float]:
    """(period s per batch, busy fraction of the step) of a loop that spins ``step_s`` per batch."""
    loader = torch.utils.data.DataLoader(FileSamples(root, rounds), batch_size=BATCH, shuffle=True, num_workers=workers,
                                         generator=torch.Generator().manual_seed(0))
    it = iter(loader)
    for _ in range(WARMUP):
        spin(step_s) if next(it) is not None else None
    t0, busy = time.perf_counter(), 0.0
    for _ in range(MEASURED):
        next(it)
        s = time.perf_counter()
        spin(step_s)
        busy += time.perf_counter() - s
    wall = time.perf_counter() - t0
    del it
    return wall / MEASURED, busy / wall


@pytest.fixture(scope="module")
def sample_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fixture-samples")
    rng = np.random.default_rng(0)
    for i in range(SAMPLES):
        np.save(root / f"{i:04d}.npy", rng.standard_normal(SHAPE))
    return root


@pytest.fixture(scope="module")
def costs(sample_root: Path) -> tuple[float, float]:
    """(one process's seconds to make a batch, the main process's seconds to receive one from a worker), measured."""
    produce = min(run_loop(sample_root, 0, 0.0)[0] for _ in range(2))
    receive = min(run_loop(sample_root, 1, 0.0, rounds=0)[0] for _ in range(2))  # nearly free samples: the IPC
    return produce, receive


def predicted(produce: float, receive: float, workers: int, step_s: float) -> tuple[float, float]:
    """(period, busy fraction) the timeline predicts for the loop (the spin is host time and "device" time alike)."""
    cores = float(len(os.sched_getaffinity(0)))
    loader = LoaderTimes(produce, receive if workers else 0.0, workers, cores)
    s = np.array([step_s])
    step, _ = with_loader(s, s, s, np.array(["step"], dtype=object), loader_arrays([loader], 1))
    return float(step[0]), step_s / float(step[0])


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("step_ratio", [0.3, 1.0, 2.5])
def test_the_timeline_predicts_a_real_loaders_period(sample_root: Path, costs: tuple[float, float], workers: int,
                                                    step_ratio: float) -> None:
    produce, receive = costs
    step_s = step_ratio * produce
    period, busy = run_loop(sample_root, workers, step_s)
    want_period, want_busy = predicted(produce, receive, workers, step_s)
    print(f"workers {workers} step {step_s * 1e3:.1f} ms (produce {produce * 1e3:.1f} ms, receive {receive * 1e3:.2f} "
          f"ms): period {period * 1e3:.1f} ms, predicted {want_period * 1e3:.1f}; busy {busy:.3f}, predicted {want_busy:.3f}")
    assert want_period == pytest.approx(period, rel=0.10)
    assert want_busy == pytest.approx(busy, rel=0.10)
