"""Benchmark: how many cores' worth of work this host gives processes that run at once (issue 77).

The input-pipeline timeline (:func:`gpupred.step.physics.timeline.with_loader`) shares a job's CPU work over its
cores as if each core ran as fast with every other core busy as alone. This prints what the host really gives: the
single-core speed workload of :mod:`gpupred.loader.speed` (its python and numpy parts) timed in one process, then in
as many processes at once as this process may use (``os.sched_getaffinity``), round after round; the efficiency is
one process's time alone over the mean time of the processes running together, and the effective cores are the
cores times that. A KVM guest whose vCPUs are hyperthreads of one physical core, or whose host is busy, gives less
than one; nothing here is fed to a model yet.
Run: ``python benchmarks/bench_host_parallel.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from gpupred.loader.speed import workload_times


def one_workload(_: int) -> float:
    """Seconds of one pass of the speed workload (both parts) in this process."""
    times = workload_times(1)
    return times["python"] + times["numpy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of alone-then-together")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    t0 = time.perf_counter()
    efficiencies = []
    with ProcessPoolExecutor(cores) as pool:
        list(pool.map(one_workload, range(cores)))  # start the processes and import numpy in each
        for r in range(args.rounds):
            alone = min(pool.submit(one_workload, 0).result() for _ in range(2))
            together = list(pool.map(one_workload, range(cores)))
            efficiencies.append(alone / statistics.mean(together))
            print(f"round {r + 1}: alone {alone * 1e3:.1f} ms; {cores} at once "
                  f"{', '.join(f'{t * 1e3:.1f}' for t in together)} ms; efficiency {efficiencies[-1]:.2f}")
    median = statistics.median(efficiencies)
    print(f"{cores} cores: per-core efficiency with all busy median {median:.2f} (min {min(efficiencies):.2f}, "
          f"max {max(efficiencies):.2f}); effective cores {cores * median:.2f}; {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
