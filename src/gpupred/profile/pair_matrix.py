"""The pair-matrix plan (issue 59): reference jobs x other jobs, all pairs among a few, repeats, fresh solo runs.

Built from the ok, real solo runs of ONE GPU kind (:func:`gpupred.profile.plans.solo_table`); every choice
looks at solo measurements only:

- **4 reference jobs**, one per role of :data:`REFERENCE_ROLES`, from 4 different families:

  - ``launch-bound``: among jobs whose memory is at most the median, the lowest mean ``gpu_util`` (a small job
    whose GPU waits on the host's kernel launches);
  - ``mid-cnn``: among the CNN families, the job nearest the CNN jobs' median of log memory and of ``gpu_util``
    (each distance in units of that column's interquartile range);
  - ``bandwidth``: the highest GPM DRAM bandwidth utilization (``dram_bw_util``; NVML's memory-controller
    ``mem_util`` for a job whose run has no GPM bandwidth samples);
  - ``compute-transformer``: among the transformer families' jobs with ``gpu_util`` >= 95 %, the highest GPM
    ``sm_active`` (all transformer jobs when none reaches 95 %).

- **Jobs** (``n_jobs``, default 30): every heavy job (``gpu_util`` > 95 % and memory > 20 GB) and at least
  ``min_heavy`` of the largest-memory jobs above 95 % utilization, then round-robin over the families (each family's
  jobs in an order spread over its utilization range), the two precisions alternating.
- **The reference matrix**: each job with each reference, and the references among themselves.
- **All pairs among ``n_all`` jobs** (default 8: 28 pairs), chosen to span utilization, from distinct families, the
  heaviest job among them; in round-robin tournament order (every round pairs each job once).
- **Repeats**: ``repeats - 1`` more measurements (``repeat=K`` lines: their own units) of ``n_repeated`` reference
  pairs spread over summed solo utilization.
- **Fresh solo runs**: each job's solo run just before its first pair, and the all-pairs jobs' again (``repeat=2``)
  just before the all-pairs block, so a pair's slowdown has a same-sweep baseline and the sweep its own solo noise.
- **Memory probes** (``memory_probes``, default 2): no two measured jobs together come near a Hopper card's memory
  (the largest solo job took 25 GB of the H200's 141), so no pair would fail for memory. A probe is the heaviest job
  of a family at a batch scaled so that its memory, extrapolated linearly in the batch from its solo run (an upper
  estimate: weights do not grow with the batch), is :data:`PROBE_TARGET` of the card; its solo run, the probe
  twice, and the two probes together follow the reference matrix. Those pairs are expected to fail for memory.

Order, so that any prefix of the plan (a sweep cut short) is useful: the reference solo runs; per job its solo run
and its reference pairs (the reference matrix, jobs in choice order: families and utilization spread); the memory
probes; the all-pairs jobs' repeated solo runs; then the all-pairs block with the reference-reference pairs and the
repeats spread through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.profile.plans import PlanBuild, solo_table, spread_merge, spread_order

REFERENCE_ROLES: tuple[str, ...] = ("launch-bound", "mid-cnn", "bandwidth", "compute-transformer")
HEAVY_UTIL = 95.0  # % mean solo gpu_util above which a job saturates the GPU
HEAVY_MIB = 20_000.0 * 1e6 / 2**20  # 20 GB: memory above which a job is heavy (issue 59)
PROBE_TARGET = 0.7  # a memory probe's extrapolated memory, as a share of the card
MIN_PROBE_SCALE = 2  # a probe at least doubles its job's batch (else the job itself is a probe)


@dataclass(frozen=True)
class MatrixSettings:
    """The sizes of a pair-matrix plan (issue 59's minimums are the defaults)."""

    n_jobs: int = 30  # jobs besides the references
    n_all: int = 8  # jobs whose every pair is measured
    n_repeated: int = 10  # reference pairs measured again
    repeats: int = 3  # measurements of each repeated pair in all (the first and repeat=2..repeats)
    memory_probes: int = 2  # memory probes (0: none)
    min_heavy: int = 3  # at least this many of the largest-memory jobs above HEAVY_UTIL among the jobs
    seed: int = 0


@dataclass
class Matrix:
    """The chosen members of a pair-matrix plan (indices into its solo table)."""

    table: pd.DataFrame
    refs: dict[str, int]  # role -> row
    jobs: list[int]
    all_pairs: list[int]
    repeated: list[tuple[int, int]]  # (job, reference) pairs measured ``repeats`` times
    probes: list[tuple[str, float]] = field(default_factory=list)  # (probe workload id, extrapolated MiB)


def _iqr(x: pd.Series) -> float:
    q = x.quantile([0.25, 0.75])
    return float(q.iloc[1] - q.iloc[0]) or 1.0


def _kinds(t: pd.DataFrame) -> pd.Series:
    from gpupred.workloads.spec import FAMILIES

    return t["family"].map(lambda f: FAMILIES[f].kind)


def choose_references(t: pd.DataFrame) -> dict[str, int]:
    """Row of the solo table chosen for each role of :data:`REFERENCE_ROLES` (see the module docstring)."""
    kind = _kinds(t)
    chosen: dict[str, int] = {}

    def take(role: str, pool: pd.Series, key: pd.Series, ascending: bool) -> None:
        used = {t.at[i, "family"] for i in chosen.values()}
        pool = pool & ~t["family"].isin(used)
        if not pool.any():
            raise GpupredError(f"{t.attrs.get('root', 'solo table')}: no job fits the {role} reference "
                               "(the solo sweep lacks such workloads); measure a wider solo sweep first")
        order = key[pool].sort_values(ascending=ascending, kind="stable")
        chosen[role] = int(order.index[0])

    small = t["mem_mib"] <= t["mem_mib"].median()
    take("launch-bound", small, t["gpu_util"], True)
    cnn = kind == "cnn"
    logm = np.log(t["mem_mib"])
    dist = ((logm - logm[cnn].median()) / _iqr(logm[cnn])) ** 2 + \
        ((t["gpu_util"] - t.loc[cnn, "gpu_util"].median()) / _iqr(t.loc[cnn, "gpu_util"])) ** 2
    take("mid-cnn", cnn, dist, True)
    take("bandwidth", pd.Series(True, index=t.index), t["dram_bw_util"].fillna(t["mem_util"]), False)
    tr = kind == "transformer"
    busy = tr & (t["gpu_util"] >= HEAVY_UTIL)
    take("compute-transformer", busy if busy.any() else tr, t["sm_active"] + 1e-3 * t["tensor_active"].fillna(0), False)
    return chosen


def _spread(values: np.ndarray, k: int) -> list[int]:
    """Positions of ``k`` items at evenly spaced quantiles of ``values`` (each taken once)."""
    order = list(np.argsort(values, kind="stable"))
    out: list[int] = []
    for j in range(min(k, len(order))):
        target = int((j + 0.5) * len(order) / k)
        free = [i for i in order if i not in out]
        out.append(min(free, key=lambda i: abs(order.index(i) - target)))
    return out


def choose_jobs(t: pd.DataFrame, refs: dict[str, int], s: MatrixSettings) -> list[int]:
    """The jobs besides the references: the heavy ones, then round-robin over families, precisions alternating."""
    from gpupred.workloads.spec import FAMILIES

    rng = np.random.default_rng(s.seed)
    free = t.index.difference(list(refs.values()))
    busy = t.loc[free][t.loc[free, "gpu_util"] > HEAVY_UTIL].sort_values("mem_mib", ascending=False)
    heavy = [int(i) for i in busy.index if busy.at[i, "mem_mib"] > HEAVY_MIB]
    heavy += [int(i) for i in busy.index[: s.min_heavy] if int(i) not in heavy]
    per_family: list[list[int]] = []
    for fam in [f for f in FAMILIES if f in set(t.loc[free, "family"])]:
        g = t.loc[free][t.loc[free, "family"] == fam].sort_values(["gpu_util", "workload_id"])
        idx = [int(i) for i in g.index if int(i) not in heavy]
        per_family.append([idx[j] for j in spread_order(len(idx), float(rng.random()))])
    chosen = list(heavy[: s.n_jobs])
    counts = {p: int((t.loc[chosen, "precision"] == p).sum()) for p in ("fp32", "bf16")}
    while len(chosen) < s.n_jobs and any(per_family):
        for lst in per_family:
            if not lst or len(chosen) >= s.n_jobs:
                continue
            want = min(counts, key=lambda p: (counts[p], p))
            pick = next((i for i in lst if t.at[i, "precision"] == want), lst[0])
            lst.remove(pick)
            chosen.append(pick)
            counts[str(t.at[pick, "precision"])] = counts.get(str(t.at[pick, "precision"]), 0) + 1
    rest = [i for i in chosen if i not in heavy]
    return spread_merge([x for x in (rest, heavy[: s.n_jobs]) if x])


def choose_all_pairs(t: pd.DataFrame, jobs: list[int], n: int) -> list[int]:
    """``n`` of the jobs spanning utilization, from distinct families where possible, the heaviest among them."""
    if n <= 1:
        return []
    heaviest = max(jobs, key=lambda i: (t.at[i, "mem_mib"], -i))
    pool = [i for i in jobs if i != heaviest]
    util = t.loc[pool, "gpu_util"].to_numpy()
    order = [pool[k] for k in np.argsort(util, kind="stable")]
    out = [heaviest]
    for j in range(n - 1):
        target = (j + 0.5) * len(order) / (n - 1)
        fams = {t.at[i, "family"] for i in out}
        cands = [i for i in order if i not in out]
        if not cands:
            break
        distinct = [i for i in cands if t.at[i, "family"] not in fams] or cands
        out.append(min(distinct, key=lambda i: (abs(order.index(i) - target), i)))
    return sorted(out, key=lambda i: (t.at[i, "gpu_util"], i))


def choose_repeated(t: pd.DataFrame, jobs: list[int], refs: list[int], n: int) -> list[tuple[int, int]]:
    """``n`` (job, reference) pairs spread over summed solo utilization, references in turn, each job once."""
    pairs = [(j, r) for j in jobs for r in refs]
    su = np.array([t.at[j, "gpu_util"] + t.at[r, "gpu_util"] for j, r in pairs])
    order = [pairs[k] for k in np.argsort(su, kind="stable")]
    out: list[tuple[int, int]] = []
    for k in range(min(n, len(jobs))):
        target = (k + 0.5) * len(order) / n
        ref = refs[k % len(refs)]
        cands = [p for p in order if p[1] == ref and p[0] not in {q[0] for q in out}]
        if cands:
            out.append(min(cands, key=lambda p: abs(order.index(p) - target)))
    return out


def tournament(members: list[int]) -> list[tuple[int, int]]:
    """Every pair of ``members`` in round-robin order: each round (circle method) pairs every member once."""
    m = list(members) + ([-1] if len(members) % 2 else [])
    out = []
    for _ in range(len(m) - 1):
        out += [(m[i], m[-1 - i]) for i in range(len(m) // 2) if -1 not in (m[i], m[-1 - i])]
        m = [m[0], m[-1], *m[1:-1]]
    return out


def memory_probes(t: pd.DataFrame, jobs: list[int], n: int) -> list[tuple[str, float]]:
    """``n`` probe workloads (the heaviest job of as many families, batch scaled) and their extrapolated memory."""
    from gpupred.workloads.spec import WorkloadSpec

    card = float(t["card_mib"].median())
    out: list[tuple[str, float]] = []
    used: set[str] = set()
    for i in sorted(jobs, key=lambda i: (-t.at[i, "mem_mib"], i)):
        if len(out) >= n:
            break
        if t.at[i, "family"] in used:
            continue
        used.add(str(t.at[i, "family"]))
        ctx = float(t.at[i, "context_mib"]) if pd.notna(t.at[i, "context_mib"]) else 0.0
        per_batch = (float(t.at[i, "mem_mib"]) - ctx)
        scale = max(1, math.floor((PROBE_TARGET * card - ctx) / per_batch)) if per_batch > 0 else 1
        scale = scale if scale >= MIN_PROBE_SCALE else 1
        spec = WorkloadSpec.from_id(str(t.at[i, "workload_id"]))
        probe = replace(spec, batch_size=spec.batch_size * scale)
        out.append((probe.id, ctx + per_batch * scale))
    return out


def choose_matrix(root: Path, settings: MatrixSettings | None = None) -> Matrix:
    """The members of the pair-matrix plan chosen from the ok solo runs under ``root`` (one GPU kind)."""
    s = settings or MatrixSettings()
    t = solo_table(Path(root)).reset_index(drop=True)
    need = len(REFERENCE_ROLES) + max(s.n_jobs, s.n_all)
    if len(t) < need:
        raise GpupredError(f"{root}: {len(t)} workloads with an ok solo run; a pair matrix of {s.n_jobs} jobs and "
                           f"{len(REFERENCE_ROLES)} references needs at least {need}")
    if not 0 <= s.n_all <= s.n_jobs or s.n_repeated > s.n_jobs or s.repeats < 1:
        raise GpupredError(f"pair matrix: --all {s.n_all} and --repeated {s.n_repeated} must be at most --jobs "
                           f"{s.n_jobs}, --repeats {s.repeats} at least 1")
    refs = choose_references(t)
    jobs = choose_jobs(t, refs, s)
    all_pairs = choose_all_pairs(t, jobs, s.n_all)
    repeated = choose_repeated(t, jobs, list(refs.values()), s.n_repeated) if s.repeats > 1 else []
    return Matrix(t, refs, jobs, all_pairs, repeated, memory_probes(t, jobs, s.memory_probes))


class _Lines:
    """Plan lines of one matrix, annotated with the solo figures they were chosen on."""

    def __init__(self, m: Matrix) -> None:
        self.t = m.table
        self.card = float(m.table["card_mib"].median())
        self.role = {i: r for r, i in m.refs.items()}

    def wid(self, i: int) -> str:
        """The workload id of row ``i``."""
        return str(self.t.at[i, "workload_id"])

    def solo(self, i: int, note: str, repeat: int = 1) -> str:
        """A solo line."""
        opt = f" repeat={repeat}" if repeat > 1 else ""
        return (f"{self.wid(i)}{opt}  # {note}: solo gpu_util {self.t.at[i, 'gpu_util']:.0f}, "
                f"mem {self.t.at[i, 'mem_mib']:.0f} MiB")

    def pair(self, a: int, b: int, note: str, repeat: int = 1) -> str:
        """A pair line with summed solo utilization and memory (share of the card)."""
        su = float(self.t.at[a, "gpu_util"] + self.t.at[b, "gpu_util"])
        mf = float(self.t.at[a, "mem_mib"] + self.t.at[b, "mem_mib"]) / self.card
        opt = f" repeat={repeat}" if repeat > 1 else ""
        return f"{self.wid(a)} + {self.wid(b)}{opt}  # {note}; sum_util {su:.0f}, mem {100 * mf:.0f}%"

    def probe_lines(self, probes: list[tuple[str, float]], measured: set[str]) -> list[str]:
        """Each probe's solo line (unless the probe is in ``measured``: a job at its own batch) and the probe twice;
        then the first two probes together."""
        out: list[str] = []
        for wid, mib in probes:
            share = mib / self.card
            if wid not in measured:
                out.append(f"{wid}  # memory probe: extrapolated {mib:.0f} MiB, {100 * share:.0f}% of the card")
            out.append(f"{wid} + {wid}  # memory probe twice: extrapolated {200 * share:.0f}% of the card"
                       + (" (expected to fail for memory)" if 2 * share > 1 else ""))
        if len(probes) >= 2:
            (a, ma), (b, mb) = probes[:2]
            share = (ma + mb) / self.card
            out.append(f"{a} + {b}  # two memory probes: extrapolated {100 * share:.0f}% of the card"
                       + (" (expected to fail for memory)" if share > 1 else ""))
        return out


def matrix_blocks(m: Matrix, repeats: int) -> dict[str, list[str]]:
    """The plan's blocks in order (see the module docstring): name -> lines."""
    w = _Lines(m)
    refs = list(m.refs.values())
    blocks: dict[str, list[str]] = {"references": [w.solo(i, f"reference ({w.role[i]})") for i in refs], "matrix": []}
    for k, j in enumerate(m.jobs):
        blocks["matrix"].append(w.solo(j, f"job {k + 1}/{len(m.jobs)}"))
        rotated = refs[k % len(refs):] + refs[: k % len(refs)]
        blocks["matrix"] += [w.pair(j, r, f"job {k + 1} x reference ({w.role[r]})") for r in rotated]
    blocks["probes"] = w.probe_lines(m.probes, {w.wid(i) for i in [*refs, *m.jobs]})
    blocks["all-pairs solo"] = [w.solo(i, "all-pairs job, again before its pairs", 2) for i in m.all_pairs]
    games = [w.pair(a, b, "all-pairs") for a, b in tournament(m.all_pairs)]
    ref_pairs = [w.pair(a, b, f"reference x reference ({w.role[a]}, {w.role[b]})")
                 for x, a in enumerate(refs) for b in refs[x + 1:]]
    reps = [w.pair(j, r, f"repeat {k} of job x reference ({w.role[r]})", k)
            for k in range(2, repeats + 1) for j, r in m.repeated]
    blocks["all-pairs"] = spread_merge([x for x in (games, ref_pairs, reps) if x])
    return blocks


def build_matrix(root: Path, settings: MatrixSettings | None = None) -> PlanBuild:
    """The pair-matrix plan's lines, a one-line summary and details (members, block sizes) from the solo runs under
    ``root``."""
    s = settings or MatrixSettings()
    m = choose_matrix(Path(root), s)
    blocks = matrix_blocks(m, s.repeats)
    lines = [x for b in blocks.values() for x in b]
    t = m.table
    jobs = t.loc[m.jobs]
    heavy = jobs[(jobs["gpu_util"] > HEAVY_UTIL) & (jobs["mem_mib"] > HEAVY_MIB)]
    fail = sum("expected to fail" in x for x in blocks["probes"])
    n_matrix = len(blocks["references"]) + len(blocks["matrix"])
    summary = (f"{len(lines)} units on {t.attrs['gpu_name']}: 4 references, {len(m.jobs)} jobs over "
               f"{jobs['family'].nunique()} families (fp32 {int((jobs['precision'] == 'fp32').sum())}, bf16 "
               f"{int((jobs['precision'] == 'bf16').sum())}; {len(heavy)} above {HEAVY_UTIL:.0f}% and 20 GB, largest "
               f"{jobs['mem_mib'].max():.0f} MiB), {len(m.jobs) * 4} job x reference + 6 reference pairs, "
               f"{len(tournament(m.all_pairs))} all-pairs among {len(m.all_pairs)}, {len(m.repeated)} pairs x "
               f"{s.repeats - 1} repeats, {len(m.probes)} memory probes ({fail} lines expected to fail for memory), "
               f"{len(m.jobs) + 4 + len(m.all_pairs) + len(m.probes)} solo runs; the reference matrix is the first "
               f"{n_matrix} units")
    details = {"gpu_name": t.attrs["gpu_name"], "references": {r: str(t.at[i, "workload_id"]) for r, i in m.refs.items()},
               "jobs": [str(t.at[i, "workload_id"]) for i in m.jobs],
               "all_pairs": [str(t.at[i, "workload_id"]) for i in m.all_pairs],
               "repeated": [(str(t.at[j, "workload_id"]), str(t.at[r, "workload_id"])) for j, r in m.repeated],
               "probes": [p for p, _ in m.probes], "blocks": {k: len(v) for k, v in blocks.items()},
               "matrix_units": n_matrix, "families": int(jobs["family"].nunique())}
    return PlanBuild(lines, summary, details)


def reference_notes(root: Path, settings: MatrixSettings | None = None) -> list[str]:
    """One header line per reference: its role, workload and the solo figures it was chosen on."""
    m = choose_matrix(Path(root), settings or MatrixSettings())
    t = m.table
    out = []
    for role, i in m.refs.items():
        bw = t.at[i, "dram_bw_util"]
        out.append(f"reference {role}: {t.at[i, 'workload_id']} (gpu_util {t.at[i, 'gpu_util']:.0f}%, sm_active "
                   f"{t.at[i, 'sm_active']:.0f}%, dram_bw_util {'n/a' if pd.isna(bw) else f'{bw:.0f}%'}, "
                   f"mem {t.at[i, 'mem_mib']:.0f} MiB)")
    return out
