"""Running the four policies on the same traces, seeds and rules, and collecting one row per (seed, policy)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpupred.sim.cluster import Cluster, PredictedSlowdown, SimResult, simulate
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
    max_oom_risk: float | None = 0.05  # ours: packs when the pair's predicted OOM probability is at most this
    bound: str = "upper"  # ours: compares the upper bound ("upper") or the point ("point") pair slowdown with max_slowdown
    rule: str = "slowdown"  # ours: pack by "slowdown" (at most max_slowdown) or "throughput" (pair gain above min_gain)
    min_gain: float = 0.0  # ours, rule "throughput": the smallest predicted throughput gain it packs at
    horus_classes: HorusClasses | None = None  # horus: classes from a separate history (None: shared FIFO)


def history_classes(world: World, n_gpus: int, n_jobs: int = 2000, k: int = 3, load: float = 1.0) -> HorusClasses:
    """Horus's job classes fitted on a separate synthetic history (seed :data:`HISTORY_SEED`) of the same workloads."""
    history = synthetic_trace(world.workloads, n_jobs, n_gpus, load=load, seed=HISTORY_SEED)
    return HorusClasses.fit(history["pred_util"].to_numpy(), history["pred_mem_mib"].to_numpy(), k=k)


def make_ours(world: World, trace: pd.DataFrame, settings: Settings,
              knowledge: PredictedSlowdown | None = None) -> OursPolicy:
    """A fresh ours policy for one trace, on ``knowledge`` (default: the world's predictions for the trace)."""
    return OursPolicy(knowledge if knowledge is not None else world.knowledge(trace["kind"].to_numpy()),
                      max_slowdown=settings.max_slowdown, prefer_empty=settings.prefer_empty,
                      lookahead=settings.lookahead, max_oom_risk=settings.max_oom_risk, bound=settings.bound,
                      rule=settings.rule, min_gain=settings.min_gain)


def make_policies(world: World, trace: pd.DataFrame, settings: Settings,
                  knowledge: PredictedSlowdown | None = None) -> list[Policy]:
    """Fresh slot, reactive, horus and ours policies for one trace (ours: :func:`make_ours`)."""
    return [
        SlotPolicy(settings.lookahead),
        ReactivePolicy(profile_s=settings.profile_s, util_cap=settings.util_cap, lookahead=settings.lookahead),
        HorusPolicy(settings.horus_classes, lookahead=settings.lookahead),
        make_ours(world, trace, settings, knowledge),
    ]


def run_policies(world: World, trace: pd.DataFrame, cluster: Cluster, settings: Settings) -> list[SimResult]:
    """Every policy on one trace against the world's measured truth."""
    truth = world.truth(trace["kind"].to_numpy())
    return [simulate(trace, cluster, p, truth) for p in make_policies(world, trace, settings)]


QUALITIES: tuple[str, ...] = ("ours", "perfect", "degraded")
PRED_COLUMNS: tuple[str, ...] = ("pred_util", "pred_util_high", "pred_mem_mib", "pred_mem_mib_high")


def with_quality(world: World, jobs: pd.DataFrame, quality: str, seed: int,
                 noise: float = 0.3) -> tuple[pd.DataFrame, PredictedSlowdown, bool]:
    """(jobs, ours' slowdown knowledge, oracle?) for predictions of one quality.

    ``ours``: the out-of-fold predictions and cross-fitted slowdowns. ``perfect``: the truth itself (an upper
    bound; an explicit oracle run). ``degraded``: ours times per-workload lognormal noise of log-sd ``noise``
    (seeded), intervals widened by the same factor.
    """
    kind = jobs["kind"].to_numpy()
    if quality == "ours":
        return jobs, world.knowledge(kind), False
    if quality == "perfect":
        truth = world.truth(kind)
        out = jobs.assign(pred_util=jobs["true_util"], pred_util_high=jobs["true_util"], pred_mem_mib=jobs["true_mem_mib"],
                          pred_mem_mib_high=jobs["true_mem_mib"])
        return out, PredictedSlowdown(truth.matrix.copy(), truth.matrix.copy(), kind), True
    if quality != "degraded":
        raise ValueError(f"unknown prediction quality {quality!r}; known: {', '.join(QUALITIES)}")
    rng = np.random.default_rng([seed, 7])
    w = len(world.workloads)
    out = jobs.copy()
    for value, high in (("pred_util", "pred_util_high"), ("pred_mem_mib", "pred_mem_mib_high")):
        f = np.exp(rng.normal(0.0, noise, w))[kind]
        out[value] = jobs[value].to_numpy(float) * f
        out[high] = np.fmax(jobs[high].to_numpy(float) * f * np.exp(noise), out[value])
    point = np.maximum(1.0, world.predicted * np.exp(rng.normal(0.0, noise, (w, w))))
    return out, PredictedSlowdown(point, np.fmax(world.predicted_high * np.exp(noise), point), kind), False


def run_qualities(world: World, make: Callable[[int], tuple[pd.DataFrame, Cluster]], seeds: list[int],
                  settings: Settings, qualities: tuple[str, ...] = QUALITIES) -> pd.DataFrame:
    """Every policy per seed and prediction quality: one row per (quality, seed, policy).

    Slot and reactive use no predictions: they run once per seed and their row repeats under each quality.
    """
    from gpupred.reports import progress_bar

    rows = []
    for seed in progress_bar(iterable=list(seeds), desc="seeds", leave=False):
        jobs, cluster = make(seed)
        truth = world.truth(jobs["kind"].to_numpy())
        plain = [simulate(jobs, cluster, p, truth) for p in make_policies(world, jobs, settings)[:2]]
        for quality in qualities:
            q_jobs, knowledge, oracle = with_quality(world, jobs, quality, seed)
            informed = [simulate(q_jobs, cluster, p, truth, oracle=oracle)
                        for p in make_policies(world, q_jobs, settings, knowledge)[2:]]
            rows.extend({"quality": quality, "seed": seed, "policy": r.policy, "gpus": cluster.n_gpus,
                         **{k: r.metrics[k] for k in METRIC_KEYS}} for r in plain + informed)
    return pd.DataFrame(rows)


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



def sharing_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per quality (when present) and policy: co-locations per job, mean queueing delay and OOMs, means over seeds."""
    keys = [k for k in ("quality", "policy") if k in runs.columns]
    r = runs.assign(shared_per_job=(runs["pairs_measured"] + runs["pairs_modelled"]) / runs["n_jobs"])
    return r.groupby(keys, sort=False)[["shared_per_job", "mean_wait_s", "mean_jct_s", "ooms"]].mean().reset_index()


def candidate_share(world: World, max_slowdown: float) -> dict[str, float]:
    """Share of workload pairs ours may pack at ``max_slowdown``: by upper bound, by point, and by the truth."""
    def share(m: np.ndarray) -> float:
        both = np.fmax(m, m.T)
        ok = np.isfinite(both)
        return float((both[ok] <= max_slowdown).mean()) if ok.any() else float("nan")

    truth = world.truth(np.arange(len(world.workloads))).matrix
    return {"upper_bound": share(world.predicted_high), "point": share(world.predicted), "truth": share(truth),
            "truth_median": float(np.nanmedian(np.fmax(truth, truth.T))),
            "upper_bound_median": float(np.nanmedian(np.fmax(world.predicted_high, world.predicted_high.T)))}


def gain_spread(world: World) -> dict[str, float]:
    """How much partner choice can matter: the true throughput gain of sharing over workload pairs, and how well
    ours' point predictions rank it.

    ``truth_gain_positive``: share of pairs whose true gain :func:`gpupred.sim.policies.pair_gain` is above 0;
    ``truth_gain_median`` and ``truth_gain_p10`` / ``_p90``; ``best_minus_mean_partner``: per workload, the best
    partner's true gain minus the mean partner's, averaged (the most a perfect choice of partner adds);
    ``spearman_point_vs_truth``: rank correlation of ours' predicted and the true gain over pairs.
    """
    from scipy.stats import spearmanr

    from gpupred.sim.policies import pair_gain

    truth = world.truth(np.arange(len(world.workloads))).matrix
    true_gain = pair_gain(truth, truth.T)
    pred_gain = pair_gain(world.predicted, world.predicted.T)
    upper = np.triu(np.ones_like(true_gain, dtype=bool))
    ok = upper & np.isfinite(true_gain) & np.isfinite(pred_gain)
    g = true_gain[upper & np.isfinite(true_gain)]
    finite = np.where(np.isfinite(true_gain), true_gain, np.nan)
    return {"truth_gain_positive": float((g > 0).mean()), "truth_gain_median": float(np.median(g)),
            "truth_gain_p10": float(np.quantile(g, 0.1)), "truth_gain_p90": float(np.quantile(g, 0.9)),
            "best_minus_mean_partner": float(np.nanmean(np.nanmax(finite, axis=1) - np.nanmean(finite, axis=1))),
            "spearman_point_vs_truth": float(spearmanr(pred_gain[ok], true_gain[ok]).statistic) if ok.sum() > 2 else float("nan")}


def trace_settings(base: Settings, history: pd.DataFrame, **change: object) -> Settings:
    """``base`` with Horus classes fitted on ``history`` (jobs of a slice never evaluated; None when base has none)."""
    from dataclasses import replace

    classes = None
    if base.horus_classes is not None:
        classes = HorusClasses.fit(history["pred_util"].to_numpy(), history["pred_mem_mib"].to_numpy())
    return replace(base, horus_classes=classes, **change)  # type: ignore[arg-type]


def ours_jct(world: World, make: Callable[[int], tuple[pd.DataFrame, Cluster]], seeds: list[int],
             settings: Settings) -> float:
    """Ours' mean JCT over ``seeds`` of one scenario (ours' own predictions; no other policy is run)."""
    jct = []
    for seed in seeds:
        jobs, cluster = make(seed)
        q_jobs, knowledge, oracle = with_quality(world, jobs, "ours", seed)
        ours = make_ours(world, q_jobs, settings, knowledge)
        jct.append(simulate(q_jobs, cluster, ours, world.truth(jobs["kind"].to_numpy()), oracle=oracle).metrics["mean_jct_s"])
    return float(np.mean(jct))


def tune_settings(world: World, makes: list[Callable[[int], tuple[pd.DataFrame, Cluster]]], seeds: list[int],
                  settings: Settings, grid: list[dict[str, float]]) -> tuple[pd.DataFrame, dict[str, float]]:
    """Ours' mean JCT (mean over ``makes`` and seeds) for each setting change in ``grid``; and the best change.

    Every maker in ``makes`` must build jobs of a slice never evaluated (e.g. the tuning slice at each load):
    the chosen values are then fitted on that slice only.
    """
    from dataclasses import fields, replace

    names = {f.name for f in fields(Settings)}
    rows = []
    for change in grid:
        unknown = set(change) - names
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")
        jct = [ours_jct(world, make, seeds, replace(settings, **change)) for make in makes]
        rows.append({**change, "mean_jct_s": float(np.mean(jct))})
    table = pd.DataFrame(rows)
    best = table.loc[table["mean_jct_s"].idxmin()]
    return table, {k: float(best[k]) for k in grid[0]}
