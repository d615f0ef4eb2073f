"""Plan files for the GPU sweeps: co-located pairs and cross-GPU subsets chosen from solo runs, fusion groups.

Plans that need earlier measurements (issue 5) are chosen from the ok solo runs of one sweep (or tree of
sweeps) of ONE GPU kind, never from simulated rows:

- :func:`pairs_plan`: 2-job pairs whose summed solo utilization spans the low (<100), medium (100-150)
  and high (>150) bins about evenly, precisions mixed, mostly different families with some same-family
  pairs, memory-heavy pairs (summed peak memory above 70% of the card, some above 100% so they fail
  together), plus a few 3- and 4-job groups;
- :func:`subset_plan`: solo specs spread round-robin over every family (to rerun on another GPU kind).

Plans that need none: :func:`solo_plan` (a catalog prefix), :func:`fused_plan` (the fused catalog) and
:func:`fusion_colocation_plan` (F plain copies of each fused model co-located, F = 2..4). Everything is
deterministic given the seed. Lines may end in a ``# ...`` annotation, which plan files ignore.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.profile.units import MAX_GROUP

UTIL_BINS: tuple[str, ...] = ("low", "medium", "high")  # summed solo util <100, 100-150, >150 (%)
MEM_HEAVY = 0.70  # summed peak memory / card memory above which a pair is memory-heavy
MEM_OVER = 1.00  # above which the pair is expected to fail together
GROUP_MEM_MAX = 0.90  # 3-4 job groups are chosen to fit (they measure interference, not OOM)
T = TypeVar("T")


@dataclass
class PlanBuild:
    """A generated plan: its lines (ids / groups, annotated) and a one-line summary."""

    lines: list[str]
    summary: str
    details: dict[str, object] = field(default_factory=dict)


# solo window means a plan may choose on: metric -> the sample source it is read from (device-wide, member -1)
SOLO_METRICS: dict[str, str] = {"gpu_util": "poll", "mem_util": "poll", "sm_active": "gpm", "tensor_active": "gpm",
                                "dram_bw_util": "gpm"}


def solo_table(root: Path) -> pd.DataFrame:
    """One row per workload with an ok solo run under ``root``: family, precision, peak memory, mean iteration time and
    the window means of :data:`SOLO_METRICS` (``gpu_util`` always there; the GPM ones NaN where not recorded)."""
    from gpupred.workloads.spec import WorkloadSpec

    solo = _ok_solo_runs(Path(root))
    solo = solo[solo["sync"] == "step"]  # the default setting; sync=window runs are a separate study
    frames = [_solo_window_means(Path(sweep), g) for sweep, g in solo.groupby("sweep_dir")]
    t = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=[*solo.columns, *SOLO_METRICS, "label_mib"])
    t["mem_mib"] = t["label_mib"].fillna(t["torch_peak_reserved_mib"])
    t = t[t["gpu_util"].notna() & t["mem_mib"].notna()]
    if t.empty:
        raise GpupredError(f"{root}: no ok solo run has gpu_util samples in its measured window")
    out = t.groupby("workload_id", as_index=False, sort=True).agg(
        family=("family", "first"), gpu_util=("gpu_util", "mean"), mem_mib=("mem_mib", "max"),
        card_mib=("gpu_memory_total_mib", "max"), n_runs=("run_id", "count"),
        iter_time_s=("iter_time_mean_s", "mean"), context_mib=("cuda_context_mib", "median"),
        **{m: (m, "mean") for m in SOLO_METRICS if m != "gpu_util"})
    out["precision"] = [WorkloadSpec.from_id(w).precision for w in out["workload_id"]]
    out.attrs["gpu_name"] = str(solo["gpu_name"].iloc[0])
    out.attrs["root"] = str(root)
    return out


def _ok_solo_runs(root: Path) -> pd.DataFrame:
    """The ok, real solo runs under ``root``, all of one GPU kind (else a one-line GpupredError)."""
    from gpupred.profile.schema import read_runs

    if not root.exists():
        raise GpupredError(f"{root}: no such folder; pass a sweep folder such as data/raw/h100/<sweep-id>")
    runs = read_runs(root)
    solo = runs[(runs["group_size"] == 1) & (runs["status"] == "ok")] if len(runs) else runs
    if solo.empty:
        raise GpupredError(f"{root}: no ok solo runs found; pass a sweep folder holding measured solo runs (runs/*.parquet)")
    sim = solo["simulated"].astype(bool)
    if sim.any():
        raise GpupredError(f"{solo.loc[sim, 'sweep_dir'].iloc[0]}: holds simulated (--dry-run) runs; plans come from real "
                           "measurements only (dry runs belong in data/dryrun)")
    gpus = sorted(set(solo["gpu_name"]))
    if len(gpus) != 1:
        raise GpupredError(f"{root}: ok solo runs from {len(gpus)} GPU kinds ({', '.join(gpus)}); pass the folder of one GPU kind")
    return solo


def _solo_window_means(sweep: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (of one sweep folder) with their memory label and the window mean of each of :data:`SOLO_METRICS`."""
    from gpupred.profile.labels import memory_labels_of
    from gpupred.profile.schema import read_samples
    from gpupred.profile.store import window_samples

    s = read_samples(sweep, sorted(set(runs["group_id"])))
    w = window_samples(runs, s)
    w = w[w["member"] == -1]
    means = {m: w[(w["metric"] == m) & (w["source"] == src)].groupby("group_id")["value"].mean().rename(m)
             for m, src in SOLO_METRICS.items()}
    runs = runs.assign(label_mib=[m if not why else np.nan for m, _, why in memory_labels_of(runs, s)])
    return runs.set_index("group_id").join(pd.DataFrame(means)).reset_index()


def spread_merge(lists: list[list[T]]) -> list[T]:
    """Merge lists so each is spread evenly through the result (item j of a list of n at (j + 0.5) / n)."""
    keyed = [((j + 0.5) / len(lst), i, x) for i, lst in enumerate(lists) for j, x in enumerate(lst)]
    return [x for _, _, x in sorted(keyed, key=lambda k: (k[0], k[1]))]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def build_pairs(solo_runs_root: Path, n_pairs: int = 110, n_groups34: int = 6, seed: int = 0,
                mem_heavy_share: float = 0.15, same_family_share: float = 0.15) -> PlanBuild:
    """Pairs (and 3-4 job groups) chosen from the ok solo runs under ``solo_runs_root``, with a summary."""
    w = solo_table(Path(solo_runs_root))
    if len(w) < 2:
        raise GpupredError(f"{solo_runs_root}: only {len(w)} workload with an ok solo run; pairs need at least 2")
    rng = np.random.default_rng(seed)
    card = float(w["card_mib"].median())
    util = w["gpu_util"].to_numpy(float)
    mem = w["mem_mib"].to_numpy(float)
    fam_codes, fam_names = pd.factorize(w["family"])
    ids = w["workload_id"].tolist()
    c = _pair_candidates(util, mem, fam_codes, len(fam_names), (w["precision"] == "bf16").to_numpy(), card, rng)
    picker = _PairPicker(c, len(w), len(fam_names), same_family_share)
    heavy = _pick_heavy(picker, n_pairs, mem_heavy_share)
    _pick_by_util_bin(picker, n_pairs, heavy)
    pairs_lines = _pairs_lines(c, picker.order, set(heavy), ids)
    groups = _groups34(util, mem, fam_codes, card, n_groups34, rng)
    group_lines = [_plan_line(ids, list(g), float(util[list(g)].sum()), float(mem[list(g)].sum() / card)) for g in groups]
    lines = spread_merge([x for x in (pairs_lines, group_lines) if x])
    sel = np.array(picker.order, int)
    bins = [int((c.pbin[sel] == k).sum()) for k in range(3)]
    fams = {fam_names[fam_codes[m]] for i in picker.order for m in (c.a[i], c.b[i])}
    summary = _pairs_summary(c, sel, bins, len(fams), groups, len(w), w.attrs["gpu_name"])
    details = {"bins": dict(zip(UTIL_BINS, bins)), "gpu_name": w.attrs["gpu_name"], "n_solo": len(w),
               "card_mib": card, "groups": len(groups)}
    return PlanBuild(lines, summary, details)


@dataclass
class _PairCandidates:
    """Every 2-job pair ``a[i] < b[i]`` of the solo table and what the choice looks at."""

    a: np.ndarray
    b: np.ndarray
    su: np.ndarray  # summed solo utilization (%)
    mf: np.ndarray  # summed peak memory / card memory
    same: np.ndarray  # both of one family
    combo: np.ndarray  # 0 fp32+fp32, 1 mixed, 2 bf16+bf16
    fpair: np.ndarray  # the (unordered) family pair as one code
    pbin: np.ndarray  # utilization bin: 0 low, 1 medium, 2 high
    jitter: np.ndarray  # seeded tie-breaker


def _pair_candidates(util: np.ndarray, mem: np.ndarray, fam_codes: np.ndarray, nf: int, bf16: np.ndarray, card: float,
                     rng: np.random.Generator) -> _PairCandidates:
    """Every pair of workloads with its summed utilization and memory, family and precision mix."""
    a, b = np.triu_indices(len(util), k=1)
    su = util[a] + util[b]
    return _PairCandidates(
        a=a, b=b, su=su, mf=(mem[a] + mem[b]) / card, same=fam_codes[a] == fam_codes[b],
        combo=bf16[a].astype(int) + bf16[b].astype(int),
        fpair=np.minimum(fam_codes[a], fam_codes[b]) * nf + np.maximum(fam_codes[a], fam_codes[b]),
        pbin=np.where(su < 100, 0, np.where(su <= 150, 1, 2)), jitter=rng.random(len(a)),
    )


class _PairPicker:
    """Greedy choice among the candidates: family mix, precision mix, workloads spread; keeps the picks in order."""

    def __init__(self, c: _PairCandidates, n_workloads: int, nf: int, same_family_share: float) -> None:
        self.c = c
        self.same_family_share = same_family_share
        self.picked = np.zeros(len(c.a), bool)
        self.usage = np.zeros(n_workloads)
        self.fp_used = np.zeros(nf * nf)
        self.combo_used = np.zeros(3)
        self.n_same = 0
        self.order: list[int] = []

    def pick(self, mask: np.ndarray) -> int | None:
        """Take the best candidate in ``mask`` not picked yet (None when there is none)."""
        c = self.c
        cand = mask & ~self.picked
        if not cand.any():
            return None
        want_same = self.n_same < round(self.same_family_share * (len(self.order) + 1))
        sub = cand & (c.same == want_same)
        cand = sub if sub.any() else cand
        for k in np.argsort(self.combo_used, kind="stable"):
            sub = cand & (c.combo == k)
            if sub.any():
                cand = sub
                break
        score = self.usage[c.a] + self.usage[c.b] + 2.0 * self.fp_used[c.fpair] + 0.5 * c.jitter
        i = int(np.flatnonzero(cand)[np.argmin(score[cand])])
        self.picked[i] = True
        self.usage[c.a[i]] += 1
        self.usage[c.b[i]] += 1
        self.fp_used[c.fpair[i]] += 1
        self.combo_used[c.combo[i]] += 1
        self.n_same += bool(c.same[i])
        self.order.append(i)
        return i


def _pick_heavy(picker: _PairPicker, n_pairs: int, mem_heavy_share: float) -> list[int]:
    """The memory-heavy pairs: half expected to fail together (over the card), half heavy but fitting."""
    mf = picker.c.mf
    n_heavy = min(n_pairs, round(mem_heavy_share * n_pairs))
    n_over = n_heavy // 2
    heavy: list[int] = []
    for mask, k in (((mf > MEM_OVER), n_over), ((mf > MEM_HEAVY) & (mf <= MEM_OVER), n_heavy - n_over)):
        for _ in range(k):
            i = picker.pick(mask)
            if i is None:
                break
            heavy.append(i)
    for _ in range(n_heavy - len(heavy)):  # too few of one kind: any memory-heavy pair
        i = picker.pick(mf > MEM_HEAVY)
        if i is None:
            break
        heavy.append(i)
    return heavy


def _pick_by_util_bin(picker: _PairPicker, n_pairs: int, heavy: list[int]) -> None:
    """Fill up to ``n_pairs`` round-robin over the utilization bins (light pairs first), about evenly."""
    pbin, mf = picker.c.pbin, picker.c.mf
    target = [n_pairs // 3 + (1 if k < n_pairs % 3 else 0) for k in range(3)]
    count = [int((pbin[heavy] == k).sum()) for k in range(3)]
    light = mf <= MEM_HEAVY
    while len(picker.order) < n_pairs:
        progressed = False
        for k in range(3):
            if len(picker.order) >= n_pairs or count[k] >= target[k]:
                continue
            i = picker.pick(light & (pbin == k))
            if i is None:
                i = picker.pick(pbin == k)
            if i is not None:
                count[k] += 1
                progressed = True
        if not progressed:
            open_bins = [k for k in range(3) if (~picker.picked & (pbin == k)).any()]
            if not open_bins:
                break
            for k in open_bins:  # a bin ran short: the others take its share
                target[k] += 1


def _plan_line(ids: list[str], members: list[int], sum_util: float, mem_frac: float) -> str:
    """One plan line: the members joined by ``+``, annotated with their summed utilization and memory."""
    note = f"sum_util {sum_util:.0f}, mem {_pct(mem_frac)}"
    if mem_frac > MEM_OVER:
        note += " (expected to fail together)"
    return " + ".join(ids[m] for m in members) + f"  # {note}"


def _pairs_lines(c: _PairCandidates, order: list[int], heavy: set[int], ids: list[str]) -> list[str]:
    """The picked pairs' lines, each utilization bin and the memory-heavy pairs spread evenly through the plan."""
    by_bin: list[list[str]] = []
    for k in range(3):
        normal = [_plan_line(ids, [c.a[i], c.b[i]], c.su[i], c.mf[i]) for i in order if c.pbin[i] == k and i not in heavy]
        hv = [_plan_line(ids, [c.a[i], c.b[i]], c.su[i], c.mf[i]) for i in order if c.pbin[i] == k and i in heavy]
        by_bin.append(spread_merge([x for x in (normal, hv) if x]))
    return spread_merge([x for x in by_bin if x])


def _pairs_summary(c: _PairCandidates, sel: np.ndarray, bins: list[int], n_families: int,
                   groups: list[tuple[int, ...]], n_solo: int, gpu_name: str) -> str:
    """The one-line summary of a pairs plan."""
    n3 = sum(len(g) == 3 for g in groups)
    return (f"{len(sel)} pairs (sum_util <100: {bins[0]}, 100-150: {bins[1]}, >150: {bins[2]}; "
            f"memory >70%: {int((c.mf[sel] > MEM_HEAVY).sum())}, >100%: {int((c.mf[sel] > MEM_OVER).sum())}; "
            f"same-family {int(c.same[sel].sum())}; fp32+fp32/mixed/bf16+bf16 "
            f"{'/'.join(str(int((c.combo[sel] == k).sum())) for k in range(3))}; {n_families} families) "
            f"+ {len(groups)} groups ({n3} of 3, {len(groups) - n3} of 4) from {n_solo} ok solo workloads on "
            f"{gpu_name}")


def _groups34(util: np.ndarray, mem: np.ndarray, fam: np.ndarray, card: float, n: int,
              rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``n`` groups alternating 3 and 4 jobs, distinct families where possible, fitting in memory, spread in summed util."""
    out: list[tuple[int, ...]] = []
    sizes = [3 + (j % 2) for j in range(n) if 3 + (j % 2) <= min(MAX_GROUP, len(util))]
    for size in (3, 4):
        k = sizes.count(size)
        if not k:
            continue
        cands: dict[tuple[int, ...], float] = {}
        for _ in range(600):
            g = tuple(sorted(int(x) for x in rng.choice(len(util), size, replace=False)))
            cands[g] = float(util[list(g)].sum())
        keys = list(cands)
        ok = [g for g in keys if mem[list(g)].sum() <= GROUP_MEM_MAX * card]
        distinct = [g for g in ok if len(set(fam[list(g)])) == size]
        pool = distinct if len(distinct) >= k else (ok if len(ok) >= k else keys)
        pool = sorted(pool, key=lambda g: (cands[g], g))
        chosen = {pool[min(len(pool) - 1, int((j + 0.5) * len(pool) / k))] for j in range(k)}
        out += sorted(chosen, key=lambda g: cands[g])
    return out


def pairs_plan(solo_runs_root: Path, n_pairs: int = 110, n_groups34: int = 6, seed: int = 0) -> list[str]:
    """Plan lines: co-located pairs spanning summed solo utilization, memory-heavy pairs, and 3-4 job groups."""
    return build_pairs(Path(solo_runs_root), n_pairs, n_groups34, seed).lines


def spread_order(k: int, offset: float) -> list[int]:
    """Indices 0..k-1 in an order whose every prefix spreads over the range (van der Corput, rotated)."""
    def vdc(i: int) -> float:
        x, denom = 0.0, 1.0
        while i:
            denom *= 2
            i, r = divmod(i, 2)
            x += r / denom
        return x

    seen: list[int] = []
    i = 0
    while len(seen) < k:
        j = int(((vdc(i) + offset) % 1.0) * k)
        if j not in seen:
            seen.append(j)
        i += 1
        if i > 64 * k:  # pragma: no cover - vdc covers every slot long before this
            seen += [x for x in range(k) if x not in seen]
    return seen


def build_subset(solo_runs_root: Path, n: int = 90, seed: int = 0) -> PlanBuild:
    """Solo specs with ok runs under ``solo_runs_root``, round-robin over families, spread in utilization."""
    from gpupred.workloads.spec import FAMILIES

    w = solo_table(Path(solo_runs_root))
    rng = np.random.default_rng(seed)
    per_family: list[list[str]] = []
    for fam in [f for f in FAMILIES if f in set(w["family"])]:
        g = w[w["family"] == fam].sort_values(["gpu_util", "workload_id"])
        gids = g["workload_id"].tolist()
        per_family.append([gids[j] for j in spread_order(len(gids), float(rng.random()))])
    chosen: list[str] = []
    for i in range(max(map(len, per_family))):
        chosen += [lst[i] for lst in per_family if i < len(lst)]
    chosen = chosen[:n]
    counts = pd.Series([c.split(".", 1)[0] for c in chosen]).value_counts()
    fams = [f for f in FAMILIES if f in counts]
    summary = (f"{len(chosen)} solo specs over {len(fams)} families ("
               + ", ".join(f"{f} {counts[f]}" for f in fams)
               + f") from {len(w)} ok solo workloads on {w.attrs['gpu_name']}")
    util = w.set_index("workload_id")["gpu_util"]
    lines = [f"{c}  # solo gpu_util {util[c]:.0f}" for c in chosen]
    return PlanBuild(lines, summary, {"families": {f: int(counts[f]) for f in fams}, "gpu_name": w.attrs["gpu_name"]})


def subset_plan(solo_runs_root: Path, n: int = 90, seed: int = 0) -> list[str]:
    """Plan lines: ``n`` solo specs with ok runs, spread evenly over every family, to rerun on another GPU kind."""
    return build_subset(Path(solo_runs_root), n, seed).lines


def fusion_colocation_plan() -> list[str]:
    """Plan lines: each fused model's F=1 spec co-located F times, for every F of the fused catalog in 2..4."""
    from dataclasses import replace

    from gpupred.workloads.catalog import fused_catalog

    lines = []
    for s in fused_catalog():
        if 2 <= s.fused <= MAX_GROUP:
            base = replace(s, fused=1)
            lines.append(" + ".join([base.id] * s.fused) + f"  # plain co-location of {s.id}")
    return lines


def solo_plan(n: int = 180) -> list[str]:
    """Plan lines: the first ``n`` catalog ids, in catalog order (the same units as ``catalog:N``)."""
    from gpupred.workloads.catalog import catalog

    return [s.id for s in catalog()[:n]]


SYNC_FAMILIES: tuple[str, ...] = ("resnet", "mobilenet", "vgg", "vit", "mlp", "lstm", "bert", "gpt", "dcgan", "neumf")


# the families of Lucid's published runs (gpupred.importers.lucid), whose protocol was CUDA_LAUNCH_BLOCKING=1
LAUNCH_BLOCKING_FAMILIES: tuple[str, ...] = ("efficientnet", "mobilenet", "resnet", "vgg", "lstm", "dcgan", "bert",
                                             "neumf")


def sync_plan(n_solo: int = 180, families: tuple[str, ...] = SYNC_FAMILIES, mode: str = "window") -> list[str]:
    """Plan lines: per family (CNNs, ViT, MLP, RNN, transformers, GAN, recommender) the smallest and the
    largest batch of the solo plan's specs, each as ``sync=step`` and ``sync=<mode>`` (interleaved)."""
    from gpupred.workloads.catalog import catalog

    specs = catalog()[:n_solo]  # the solo sweep's specs: their sync=step units are already in that sweep
    lines = []
    for fam in families:
        mine = [s for s in specs if s.family == fam]
        if not mine:
            raise GpupredError(f"family {fam!r} has no spec among the first {n_solo} catalog specs")
        small = min(mine, key=lambda s: (s.batch_size, s.id))
        large = max(mine, key=lambda s: (s.batch_size, s.id))
        for spec in dict.fromkeys([small, large]):
            lines += [f"{spec.id} sync=step", f"{spec.id} sync={mode}"]
    return lines


def launch_blocking_plan(n_solo: int = 180) -> list[str]:
    """Plan lines: :func:`sync_plan` over Lucid's families (``LAUNCH_BLOCKING_FAMILIES``) with ``sync=kernel``: the
    same specs measured with and without ``CUDA_LAUNCH_BLOCKING=1``, what the step model's ``kernel`` protocol is
    fitted on before it predicts Lucid's runs."""
    return sync_plan(n_solo, LAUNCH_BLOCKING_FAMILIES, "kernel")


def realworld_plan() -> list[str]:
    """Plan lines: every real-world spec (gpupred.workloads.realworld), interleaved over architectures."""
    from gpupred.workloads.realworld import realworld_catalog

    return [s.id for s in realworld_catalog()]


def fused_plan() -> list[str]:
    """Plan lines: every fused catalog spec (the same units as ``fused``)."""
    from gpupred.workloads.catalog import fused_catalog

    return [s.id for s in fused_catalog()]


def write_plan(path: Path, lines: list[str], header: list[str]) -> Path:
    """Write a plan file: ``# `` header lines (plus the date), then the lines; check it loads."""
    from gpupred.profile.units import load_plan

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = [*header, f"generated {date.today().isoformat()} by gpupred.profile.plans; {len(lines)} run units"]
    path.write_text("".join(f"# {h}\n" for h in head) + "\n" + "".join(f"{x}\n" for x in lines))
    load_plan(str(path))
    return path


CHUNK_MINUTES = 8.0  # one remote call's time budget (`gpupred sweep --max-minutes 8`, docs/remote-sweeps.md)


@dataclass(frozen=True)
class PlanCost:
    """A plan's estimated GPU time: its units at the per-unit time earlier sweeps of the same GPU kind took."""

    units: int
    seconds_per_unit: float  # session wall time over the units run, start-up of every session included
    basis: str  # the sweep folders the per-unit time comes from

    @property
    def minutes(self) -> float:
        """Estimated GPU minutes of the whole plan."""
        return self.units * self.seconds_per_unit / 60.0

    def chunks(self, chunk_minutes: float = CHUNK_MINUTES) -> int:
        """How many remote chunks of ``chunk_minutes`` the plan takes."""
        return math.ceil(self.minutes / chunk_minutes) if self.units else 0

    def line(self) -> str:
        """One line: units, per-unit time, GPU minutes and 8-minute chunks."""
        n = self.chunks()
        return (f"{self.units} units x {self.seconds_per_unit:.1f} s (per unit in {self.basis}) = "
                f"{self.minutes:.0f} GPU minutes, {n} chunk{'' if n == 1 else 's'} of {CHUNK_MINUTES:g} minutes")


def plan_cost(n_units: int, solo_root: Path) -> PlanCost:
    """The estimated GPU time of ``n_units`` run units: the sweeps under ``solo_root`` (one GPU kind) measured how long
    a unit takes, sessions' start-up included (:func:`gpupred.profile.datacard.gpu_seconds_per_unit`)."""
    from gpupred.profile.datacard import gpu_seconds_per_unit
    from gpupred.profile.schema import sweep_dirs
    from gpupred.profile.store import read_manifest

    sessions: list[dict[str, object]] = []
    dirs = sweep_dirs(Path(solo_root))
    for d in dirs:
        sessions += (read_manifest(d) or {}).get("sessions", [])
    per_unit = gpu_seconds_per_unit({"sessions": sessions})
    if not per_unit == per_unit:  # NaN: no finished session
        raise GpupredError(f"{solo_root}: no sweep session with an end time and units run in its manifests; "
                           "pass a sweep folder that a real sweep wrote")
    return PlanCost(int(n_units), per_unit, ", ".join(str(d) for d in dirs))
