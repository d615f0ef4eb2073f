"""Running every policy on the same traces, seeds and rules, and collecting one row per (seed, policy).

Policies per seed (:data:`POLICY_ORDER`): slot and reactive (no predictions), random pairing and Horus (predicted
utilization and memory), ours (Horus plus its predictions of pairs: :class:`gpupred.sim.policies.OursPolicy`) and the
oracle pairing (ours handed the measured matrix, true failures and true memory as its predictions: an explicit oracle
run, the upper bound of partner choice).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.sim.cluster import Cluster, PredictedSlowdown, simulate
from gpupred.sim.metrics import METRIC_KEYS
from gpupred.sim.policies import (
    HorusClasses,
    HorusPolicy,
    OraclePolicy,
    OursPolicy,
    Policy,
    RandomPairPolicy,
    ReactivePolicy,
    SlotPolicy,
)
from gpupred.sim.arrivals import synthetic_trace
from gpupred.sim.world import World

POLICY_ORDER: tuple[str, ...] = ("slot", "reactive", "random", "horus", "ours", "oracle")
HISTORY_SEED = 1_000_003  # the Horus history's trace seed: never one of the scheduled seeds


@dataclass
class Settings:
    """The policies' settings, the same for every trace and seed."""

    lookahead: int = 8  # every policy's queue look-ahead
    profile_s: float = 60.0  # reactive: profiling window per job
    util_cap: float = 100.0  # reactive: packs when measured utilizations sum to at most this
    weight: float = 1.0  # ours: weight of the predicted pair gain against Horus's cost (complementarity)
    min_gain: float = 0.0  # ours: the predicted throughput gain a pair must exceed (0: refuse losing pairs)
    max_oom_risk: float = 0.05  # ours: the largest predicted out-of-memory probability of a pair it places
    max_fail: float = 0.05  # ours: the largest predicted failure probability of a pair it places
    horus_classes: HorusClasses | None = None  # horus, random, ours: classes from a separate history (None: FIFO)


def history_classes(world: World, n_gpus: int, n_jobs: int = 2000, k: int = 3, load: float = 1.0) -> HorusClasses:
    """Horus's job classes fitted on a separate synthetic history (seed :data:`HISTORY_SEED`) of the same workloads."""
    history = synthetic_trace(world.workloads, n_jobs, n_gpus, load=load, seed=HISTORY_SEED)
    return HorusClasses.fit(history["pred_util"].to_numpy(), history["pred_mem_mib"].to_numpy(), k=k)


def make_ours(world: World, jobs: pd.DataFrame, settings: Settings, knowledge: PredictedSlowdown | None = None,
              oracle: bool = False) -> OursPolicy:
    """A fresh ours policy for one job table, on ``knowledge`` (default: the world's predictions for those jobs)."""
    cls = OraclePolicy if oracle else OursPolicy
    return cls(knowledge if knowledge is not None else world.knowledge(jobs["kind"].to_numpy()), settings.horus_classes,
               weight=settings.weight, min_gain=settings.min_gain, max_oom_risk=settings.max_oom_risk,
               max_fail=settings.max_fail, lookahead=settings.lookahead)


def perfect(world: World, jobs: pd.DataFrame) -> tuple[pd.DataFrame, PredictedSlowdown]:
    """(jobs with true utilization and memory as predictions, the measured truth as slowdown knowledge)."""
    kind = jobs["kind"].to_numpy()
    truth = world.truth(kind)
    out = jobs.assign(pred_util=jobs["true_util"], pred_util_high=jobs["true_util"], pred_mem_mib=jobs["true_mem_mib"],
                      pred_mem_mib_high=jobs["true_mem_mib"])
    return out, PredictedSlowdown(truth.matrix.copy(), truth.matrix.copy(), kind, truth.failed.astype(float))


def make_policies(world: World, jobs: pd.DataFrame, settings: Settings, seed: int) -> list[Policy]:
    """Fresh slot, reactive, random, Horus and ours policies for one job table."""
    return [
        SlotPolicy(settings.lookahead),
        ReactivePolicy(profile_s=settings.profile_s, util_cap=settings.util_cap, lookahead=settings.lookahead),
        RandomPairPolicy(settings.horus_classes, lookahead=settings.lookahead, seed=seed),
        HorusPolicy(settings.horus_classes, lookahead=settings.lookahead),
        make_ours(world, jobs, settings),
    ]


def run_trace(world: World, make: Callable[[int], tuple[pd.DataFrame, Cluster]], seeds: list[int],
              settings: Settings) -> pd.DataFrame:
    """Every policy of :data:`POLICY_ORDER` per seed on ``make(seed)``: one row per (seed, policy) with every metric."""
    from gpupred.reports import progress_bar

    rows = []
    for seed in progress_bar(iterable=list(seeds), desc="seeds", leave=False):
        jobs, cluster = make(seed)
        truth = world.truth(jobs["kind"].to_numpy())
        results = [simulate(jobs, cluster, p, truth) for p in make_policies(world, jobs, settings, seed)]
        o_jobs, o_knowledge = perfect(world, jobs)
        results.append(simulate(o_jobs, cluster, make_ours(world, o_jobs, settings, o_knowledge, oracle=True), truth,
                                oracle=True))
        rows.extend({"seed": seed, "policy": r.policy, "gpus": cluster.n_gpus, **{k: r.metrics[k] for k in METRIC_KEYS}}
                    for r in results)
    return pd.DataFrame(rows)


def measured_share(runs: pd.DataFrame) -> float:
    """Share of co-locations over all runs whose slowdown was a measurement."""
    total = float(runs["pairs_measured"].sum() + runs["pairs_modelled"].sum())
    return float(runs["pairs_measured"].sum() / total) if total else float("nan")


def sharing_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per policy: co-locations per job, mean queueing delay, failed placements and throughput, means over seeds."""
    keys = [k for k in ("load", "policy") if k in runs.columns]
    r = runs.assign(shared_per_job=(runs["pairs_measured"] + runs["pairs_modelled"]) / runs["n_jobs"])
    cols = ["shared_per_job", "mean_wait_s", "mean_jct_s", "failed_placements", "throughput"]
    return r.groupby(keys, sort=False)[cols].mean().reset_index()


def gain_spread(world: World) -> dict[str, float]:
    """How much partner choice can matter: the true throughput gain of sharing over workload pairs, and how well
    ours' point predictions rank it.

    ``truth_gain_positive``: share of pairs that ran whose true gain :func:`gpupred.sim.policies.pair_gain` is above
    0; ``truth_gain_median``, ``truth_gain_p10`` / ``_p90``; ``failed_share``: share of pairs that failed;
    ``best_minus_mean_partner``: per workload, the best partner's true gain minus the mean partner's, averaged (the
    most a perfect choice of partner adds); ``spearman_point_vs_truth``: rank correlation of ours' predicted and the
    true gain over pairs that ran.
    """
    from scipy.stats import spearmanr

    from gpupred.sim.policies import pair_gain

    truth = world.truth(np.arange(len(world.workloads)))
    true_gain = pair_gain(truth.matrix, truth.matrix.T)
    pred_gain = pair_gain(world.predicted, world.predicted.T)
    upper = np.triu(np.ones_like(true_gain, dtype=bool))
    ran = upper & np.isfinite(true_gain)
    ok = ran & np.isfinite(pred_gain)
    g = true_gain[ran]
    finite = np.where(np.isfinite(true_gain), true_gain, np.nan)
    return {"truth_gain_positive": float((g > 0).mean()), "truth_gain_median": float(np.median(g)),
            "truth_gain_p10": float(np.quantile(g, 0.1)), "truth_gain_p90": float(np.quantile(g, 0.9)),
            "failed_share": float(truth.failed[upper].mean()),
            "best_minus_mean_partner": float(np.nanmean(np.nanmax(finite, axis=1) - np.nanmean(finite, axis=1))),
            "spearman_point_vs_truth": float(spearmanr(pred_gain[ok], true_gain[ok]).statistic) if ok.sum() > 2 else float("nan")}


def trace_settings(base: Settings, history: pd.DataFrame, wfq: bool = True, **change: object) -> Settings:
    """``base`` with Horus's job classes fitted on ``history`` (jobs of a slice never evaluated) for its weighted fair
    queue, or none (``wfq=False``: the shared FIFO queue); ``change`` sets other fields."""
    from dataclasses import replace

    classes = HorusClasses.fit(history["pred_util"].to_numpy(), history["pred_mem_mib"].to_numpy()) if wfq else None
    return replace(base, horus_classes=classes, **change)  # type: ignore[arg-type]


def policy_metrics(world: World, make: Callable[[int], tuple[pd.DataFrame, Cluster]], seeds: list[int],
                   settings: Settings, policy: str = "ours", metrics: tuple[str, ...] = ("mean_jct_s",)) -> dict[str, float]:
    """``metrics`` of ours or Horus (``policy``) averaged over ``seeds`` of one scenario, on their own predictions."""
    if policy not in ("ours", "horus"):
        raise GpupredError(f"policy_metrics runs ours or horus, not {policy!r}")
    values: dict[str, list[float]] = {m: [] for m in metrics}
    for seed in seeds:
        jobs, cluster = make(seed)
        chosen = make_ours(world, jobs, settings) if policy == "ours" else HorusPolicy(settings.horus_classes,
                                                                                        lookahead=settings.lookahead)
        result = simulate(jobs, cluster, chosen, world.truth(jobs["kind"].to_numpy())).metrics
        for m in metrics:
            values[m].append(float(result[m]))
    return {m: float(np.mean(v)) for m, v in values.items()}


def tune_settings(world: World, makes: list[Callable[[int], tuple[pd.DataFrame, Cluster]]], seeds: list[int],
                  settings: Settings, grid: list[dict[str, float]], metric: str = "mean_jct_s",
                  at_most_horus: tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict[str, float]]:
    """Ours' ``metric`` (mean over ``makes`` and seeds; lower is better) for each setting change in ``grid``; and the
    best among the changes whose ``at_most_horus`` metrics (e.g. ``ooms``) are no higher than Horus's on the same
    scenarios (the best of all when none is).

    Every maker in ``makes`` must build jobs of a slice never evaluated (e.g. the tuning slice at each load):
    the chosen values are then fitted on that slice only. The table has a row per change with ``metric``, the
    ``at_most_horus`` metrics and ``eligible`` (and, with ``at_most_horus``, a last row of Horus's own figures).
    """
    from dataclasses import fields, replace

    names = {f.name for f in fields(Settings)}
    wanted = (metric, *[m for m in at_most_horus if m != metric])
    rows = []
    for change in grid:
        unknown = set(change) - names
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")
        per = [policy_metrics(world, make, seeds, replace(settings, **change), "ours", wanted) for make in makes]
        rows.append({"policy": "ours", **change, **{m: float(np.mean([p[m] for p in per])) for m in wanted}})
    table = pd.DataFrame(rows).assign(eligible=True)
    if at_most_horus:
        per = [policy_metrics(world, make, seeds, settings, "horus", wanted) for make in makes]
        horus = {m: float(np.mean([p[m] for p in per])) for m in wanted}
        for m in at_most_horus:
            table["eligible"] &= table[m] <= horus[m] + 1e-9
        table = pd.concat([table, pd.DataFrame([{"policy": "horus", **horus, "eligible": False}])], ignore_index=True)
    ours = table[table["policy"] == "ours"]
    pool = ours[ours["eligible"]] if ours["eligible"].any() else ours
    best = pool.loc[pool[metric].idxmin()]
    return table, {k: float(best[k]) for k in grid[0]}
