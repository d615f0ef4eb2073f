"""Running the four policies on the same traces, seeds and rules, and collecting one row per (seed, policy)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from gpupred.sim.cluster import Cluster, SimResult, simulate
from gpupred.sim.metrics import METRIC_KEYS
from gpupred.sim.policies import HorusClasses, HorusPolicy, OursPolicy, Policy, ReactivePolicy, SlotPolicy
from gpupred.sim.traces import synthetic_trace
from gpupred.sim.world import World

POLICY_ORDER: tuple[str, ...] = ("slot", "reactive", "horus", "ours")
HISTORY_SEED = 1_000_003  # the Horus history's trace seed: never one of the scheduled seeds


@dataclass
class Settings:
    """The policies' settings, the same for every trace and seed."""

    lookahead: int = 8  # every policy's queue look-ahead
    profile_s: float = 60.0  # reactive: profiling window per job
    util_cap: float = 100.0  # reactive: packs when measured utilizations sum to at most this
    max_slowdown: float = 1.5  # ours: packs when the upper-bound pair slowdown is at most this
    prefer_empty: bool = True  # ours: an empty GPU first
    horus_classes: HorusClasses | None = None  # horus: classes from a separate history (None: shared FIFO)


def history_classes(world: World, n_gpus: int, n_jobs: int = 2000, k: int = 3, load: float = 1.0) -> HorusClasses:
    """Horus's job classes fitted on a separate synthetic history (seed :data:`HISTORY_SEED`) of the same workloads."""
    history = synthetic_trace(world.workloads, n_jobs, n_gpus, load=load, seed=HISTORY_SEED)
    return HorusClasses.fit(history["pred_util"].to_numpy(), history["pred_mem_mib"].to_numpy(), k=k)


def make_policies(world: World, trace: pd.DataFrame, settings: Settings) -> list[Policy]:
    """Fresh slot, reactive, horus and ours policies for one trace."""
    return [
        SlotPolicy(settings.lookahead),
        ReactivePolicy(profile_s=settings.profile_s, util_cap=settings.util_cap, lookahead=settings.lookahead),
        HorusPolicy(settings.horus_classes, lookahead=settings.lookahead),
        OursPolicy(world.knowledge(trace["kind"].to_numpy()), max_slowdown=settings.max_slowdown,
                   prefer_empty=settings.prefer_empty, lookahead=settings.lookahead),
    ]


def run_policies(world: World, trace: pd.DataFrame, cluster: Cluster, settings: Settings) -> list[SimResult]:
    """Every policy on one trace against the world's measured truth."""
    truth = world.truth(trace["kind"].to_numpy())
    return [simulate(trace, cluster, p, truth) for p in make_policies(world, trace, settings)]


def run_seeds(world: World, cluster: Cluster, make_trace: Callable[[int], pd.DataFrame], seeds: list[int],
              settings: Settings) -> tuple[pd.DataFrame, dict[int, list[SimResult]]]:
    """Every policy on the trace of each seed: one row per (seed, policy) with every metric; and the results."""
    from gpupred.reports import progress_bar

    rows, results = [], {}
    for seed in progress_bar(iterable=list(seeds), desc="seeds", leave=False):
        res = run_policies(world, make_trace(seed), cluster, settings)
        results[seed] = res
        rows.extend({"seed": seed, "policy": r.policy, **{k: r.metrics[k] for k in METRIC_KEYS}} for r in res)
    return pd.DataFrame(rows), results


def measured_share(runs: pd.DataFrame) -> float:
    """Share of co-locations over all runs whose slowdown was a measurement."""
    total = float(runs["pairs_measured"].sum() + runs["pairs_modelled"].sum())
    return float(runs["pairs_measured"].sum() / total) if total else float("nan")


def loads_sweep(world: World, cluster: Cluster, loads: list[float], seeds: list[int], n_jobs: int,
                median_duration_s: float, settings: Settings) -> pd.DataFrame:
    """The synthetic trace at each offered load: one row per (load, seed, policy)."""
    frames = []
    for load in loads:
        runs, _ = run_seeds(world, cluster, lambda s, at=load: synthetic_trace(
            world.workloads, n_jobs, cluster.n_gpus, load=at, seed=s, median_duration_s=median_duration_s), seeds, settings)
        frames.append(runs.assign(load=load))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

