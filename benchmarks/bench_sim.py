"""Benchmark: simulate a 100,000-job synthetic trace under each policy; print seconds and peak memory.

The job attributes here come from a random LOAD GENERATOR (uniform/lognormal draws), NOT from
measurements: the figures measure the simulator's speed, nothing about real workloads. The truth is a
load-generator "measured" matrix with a third of the pairs unmeasured (so both truth paths run); ours
decides with a perturbed copy; Horus, random pairing and ours share classes fitted on a separate load-generator
history.
Run: ``python benchmarks/bench_sim.py [--jobs 100000] [--nodes 32] [--gpus-per-node 8] [--load 0.9]``.
``--openb`` replaces the synthetic arrivals by the Alibaba openb trace (imported with ``gpupred import alibaba-openb``):
every GPU task after its prehistory, on a load-sized subset of its heterogeneous nodes, workloads still from the
load generator (memory capped at 20 GiB so every job fits some node).
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import pandas as pd

from gpupred.sim.cluster import Cluster, PairSlowdown, PredictedSlowdown, simulate
from gpupred.sim.policies import (
    HorusClasses, HorusPolicy, OursPolicy, Policy, RandomPairPolicy, ReactivePolicy, SlotPolicy,
)
from gpupred.sim.arrivals import synthetic_trace


def load_generator_table(n_workloads: int = 300, seed: int = 0) -> pd.DataFrame:
    """Random per-workload attributes for benchmarking only (synthetic load generator, not measurements)."""
    rng = np.random.default_rng(seed)
    util = rng.uniform(10, 100, n_workloads)
    mem = rng.uniform(1_000, 40_000, n_workloads)
    return pd.DataFrame(
        {
            "workload_id": [f"loadgen-{i}" for i in range(n_workloads)],
            "iter_time_s": rng.lognormal(np.log(0.1), 0.8, n_workloads),
            "true_util": util,
            "true_mem_mib": mem,
            "pred_util": np.clip(util + rng.normal(0, 8, n_workloads), 0, 100),
            "pred_util_high": np.clip(util + 15, 0, 100),
            "pred_mem_mib": mem * rng.uniform(0.85, 1.15, n_workloads),
            "pred_mem_mib_high": mem * 1.25,
        }
    )


def openb_jobs(table: pd.DataFrame, load: float) -> tuple[pd.DataFrame, tuple[pd.DataFrame, Cluster]]:
    """(table with memory capped at 20 GiB, (jobs, cluster)) from the whole dense openb trace at ``load``."""
    from gpupred.importers import alibaba
    from gpupred.sim.openb import scenario, slice_trace

    capped = table.assign(true_mem_mib=table["true_mem_mib"].clip(upper=20_000.0),
                          pred_mem_mib=table["pred_mem_mib"].clip(upper=20_000.0),
                          pred_mem_mib_high=table["pred_mem_mib_high"].clip(upper=25_000.0))
    whole = slice_trace(alibaba.read_tasks(), tune_frac=0.5)  # both slices together: the whole dense trace
    tasks = pd.concat([whole.tune, whole.evaluate], ignore_index=True)
    return capped, scenario(tasks, capped, alibaba.read_nodes(), load)(1)


def main() -> None:
    """Run the benchmark and print one line per policy."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--policies", default="slot,reactive,random,horus,ours")
    ap.add_argument("--tracemalloc", action="store_true", help="peak Python allocations per policy (slows the run ~3x)")
    ap.add_argument("--openb", action="store_true", help="arrivals, durations and nodes of the Alibaba openb trace")
    args = ap.parse_args()
    table = load_generator_table()
    if args.openb:
        table, (jobs, cluster) = openb_jobs(table, args.load)
    else:
        cluster = Cluster(args.nodes, args.gpus_per_node, gpu_memory_mib=81_559.0)
        jobs = synthetic_trace(table, args.jobs, cluster.n_gpus, load=args.load, seed=1)
    u = table["true_util"].to_numpy()
    rng = np.random.default_rng(2)
    # load-generator slowdowns (not a learned model): additive rule plus a pair term; a third "unmeasured"
    mat = np.maximum(1.0, (u[:, None] + u[None, :]) / 100.0) * (1.0 + 0.1 * (u[:, None] * u[None, :]) / 1e4)
    measured = np.where(rng.random(mat.shape) < 0.67, mat, np.nan)
    kind = jobs["kind"].to_numpy()
    truth = PairSlowdown(measured, mat * 1.02, kind)
    guess = mat * np.exp(rng.normal(0, 0.1, mat.shape))
    knowledge = PredictedSlowdown(guess, guess * 1.15, kind)
    history = synthetic_trace(table, 5000, max(1, cluster.n_gpus), load=args.load, seed=99)
    classes = HorusClasses.fit(history["pred_util"].to_numpy(), history["pred_mem_mib"].to_numpy())
    policies: dict[str, Callable[[], Policy]] = {
        "slot": SlotPolicy, "reactive": ReactivePolicy, "horus": lambda: HorusPolicy(classes),
        "random": lambda: RandomPairPolicy(classes), "ours": lambda: OursPolicy(knowledge, classes),
    }
    where = "openb trace arrivals/durations/nodes" if args.openb else "synthetic arrivals"
    print(f"# {where}, load-generator workloads (NOT measurements): {len(jobs)} jobs, {cluster.n_gpus} GPUs, load {args.load}")
    print(f"{'policy':10s} {'seconds':>8s} {'peak_MiB':>9s} {'avg_util':>8s} {'makespan_s':>11s} {'mean_jct_s':>10s} "
          f"{'mean_wait_s':>11s} {'ooms':>5s} {'migr':>5s} {'measured':>8s}")
    total = 0.0
    for name in args.policies.split(","):
        policy = policies[name]()
        if args.tracemalloc:
            tracemalloc.start()
        t0 = time.perf_counter()
        res = simulate(jobs, cluster, policy, truth)
        dt = time.perf_counter() - t0
        if args.tracemalloc:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        else:  # the process's peak resident set so far (Linux reports KiB)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        total += dt
        m = res.metrics
        print(f"{name:10s} {dt:8.1f} {peak / 2**20:9.1f} {m['avg_util']:8.1f} {m['makespan_s']:11.0f} {m['mean_jct_s']:10.0f} "
              f"{m['mean_wait_s']:11.0f} {m['ooms']:5d} {m['migrations']:5d} "
              f"{m['pairs_measured'] / max(1, m['pairs_measured'] + m['pairs_modelled']):8.0%}", flush=True)
    print(f"# total {total:.1f} s; peak_MiB is {'tracemalloc peak per policy' if args.tracemalloc else 'process peak RSS so far'}; "
          "seconds are wall time on a possibly shared CPU")


if __name__ == "__main__":
    main()
