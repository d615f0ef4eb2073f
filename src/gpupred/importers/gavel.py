"""Gavel (Narayanan et al., OSDI 2020): solo and space-shared throughputs of 26 training job types on K80, P100, V100.

Upstream ``stanford-futuredata/gavel`` at a pinned commit, ``scheduler/simulation_throughputs.json``: per GPU kind
(``k80``, ``p100``, ``v100``; the ``*_unconsolidated`` kinds hold multi-server placements of scaled-out jobs and are
not read), per job ``"('<job type>', <scale factor>)"``: ``"null"`` is its solo throughput (steps per second) and
each partner key maps to ``[own, partner]`` throughputs while the two share one GPU. Read here (documented once):

- **Scale factor 1 only.** Pairs are measured for single-GPU jobs; under scale factors 2, 4 and 8 every pair is 0
  (not measured), so those jobs are left out.
- **A pair is one measurement.** The entry of (a, b) mirrors that of (b, a) exactly, so each unordered pair gives
  one co-run with two members; self-pairs average their two members upstream, so they carry no noise estimate.
- **Failed co-runs.** A pair whose throughputs are 0 did not run together (``failed``; no slowdown). Upstream
  does not say why; out of memory is the likely cause for the heavy jobs that fail most.
- **Slowdown** of a member = its solo throughput / its co-located throughput. Upstream co-located throughputs
  never exceed the solo ones (a ratio below 1 is never recorded), so no job can show a faster-than-alone co-run.
- **No utilization, no memory** is recorded: a predictor on these rows works from solo throughputs (and from
  reference co-runs) only.

Licence: MIT (copy imported beside the data).
"""

from __future__ import annotations

import ast
import json
import re

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.importers.source import Source, UpstreamFile, verified_path

SOURCE = Source(
    name="gavel",
    repo="stanford-futuredata/gavel",
    commit="c4fa40097339e9608ab71fd64c8bdea96a5e4a4c",
    files=(
        UpstreamFile("simulation_throughputs.json", "scheduler/simulation_throughputs.json",
                     "17111f7295f03265fd9e5118d7eba31e3dd9d6e50a2e215c13ad3d3f91f74381"),
        UpstreamFile("LICENSE", "LICENSE", "436e0eaa343c3d2c0be22bb1ecb2fd4c8b3add8cae8679c780385f7d3b0f41ef"),
    ),
    licence="MIT (stanford-futuredata/gavel): use like the code, keeping the notice",
    gpu_name="Tesla K80, Tesla P100, Tesla V100",
    measured="training throughput (steps/s) of each job type alone and of every pair sharing one GPU, one "
             "measurement per pair, as Gavel's simulator reads it; no utilization or memory recorded",
    citation="Narayanan, Santhanam, Kazhamiaka, Phanishayee, Zaharia. Heterogeneity-Aware Cluster Scheduling "
             "Policies for Deep Learning Workloads. OSDI 2020",
)
THROUGHPUT_FILE = "simulation_throughputs.json"
GPU_KINDS: dict[str, str] = {"k80": "Tesla K80", "p100": "Tesla P100", "v100": "Tesla V100"}  # upstream key -> gpu_name
SOLO_COLUMNS: tuple[str, ...] = ("gpu", "gpu_name", "job_key", "model", "batch_size", "solo_tput")
PAIR_COLUMNS: tuple[str, ...] = ("gpu", "gpu_name", "pair_id", "member", "job_key", "partner_key", "solo_tput",
                                 "coloc_tput", "failed", "slowdown")
_JOB = re.compile(r"^(?P<model>.+?)(?: \(batch size (?P<bs>\d+)\))?$")


def parse_job(key: str, origin: str = THROUGHPUT_FILE) -> tuple[str, int]:
    """``(job type, scale factor)`` of an upstream key ``"('ResNet-18 (batch size 16)', 1)"``."""
    try:
        job, scale = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        raise GpupredError(f"{origin}: job key {key!r} is not \"('<job type>', <scale factor>)\"; not Gavel's file") from None
    return str(job), int(scale)


def job_fields(job: str) -> tuple[str, float]:
    """(model, batch size or NaN) of a Gavel job type, e.g. ``('ResNet-18', 16.0)`` or ``('A3C', nan)``."""
    m = _JOB.match(job)
    if m is None:  # the pattern matches any non-empty name
        raise GpupredError(f"Gavel job type {job!r}: empty name")
    return m.group("model"), float(m.group("bs")) if m.group("bs") else float("nan")


def _single_gpu_jobs(kind: dict, origin: str) -> dict[str, dict]:
    """The scale-factor-1 jobs of one GPU kind: job type -> its upstream entry."""
    out = {}
    for key, entry in kind.items():
        job, scale = parse_job(key, origin)
        if scale == 1:
            if "null" not in entry:
                raise GpupredError(f"{origin}: job {job!r} has no solo throughput ('null'); not Gavel's file")
            out[job] = entry
    return out


def tables_from_json(data: dict, origin: str = THROUGHPUT_FILE) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(solo, pairs) tables (:data:`SOLO_COLUMNS`, :data:`PAIR_COLUMNS`) of a throughput file in the upstream format."""
    missing = [g for g in GPU_KINDS if g not in data]
    if missing:
        raise GpupredError(f"{origin}: no GPU kinds {missing}; not Gavel's simulation_throughputs.json")
    solo_rows, pair_rows = [], []
    for gpu, gpu_name in GPU_KINDS.items():
        jobs = _single_gpu_jobs(data[gpu], origin)
        names = sorted(jobs)
        for job in names:
            model, bs = job_fields(job)
            solo_rows.append({"gpu": gpu, "gpu_name": gpu_name, "job_key": job, "model": model, "batch_size": bs,
                              "solo_tput": float(jobs[job]["null"])})
        for i, a in enumerate(names):
            for b in names[i:]:
                key = f"('{b}', 1)"
                if key not in jobs[a]:
                    raise GpupredError(f"{origin}: {gpu} has no co-run of {a!r} with {b!r}; not Gavel's file")
                own, other = (float(x) for x in jobs[a][key])
                failed = own <= 0 or other <= 0
                pid = f"gavel-{gpu}-{i:02d}-{names.index(b):02d}"
                for m, (job, partner, tput) in enumerate(((a, b, own), (b, a, other))):
                    solo = float(jobs[job]["null"])
                    pair_rows.append({"gpu": gpu, "gpu_name": gpu_name, "pair_id": pid, "member": m, "job_key": job,
                                      "partner_key": partner, "solo_tput": solo, "coloc_tput": tput, "failed": failed,
                                      "slowdown": np.nan if failed else solo / tput})
    return pd.DataFrame(solo_rows, columns=list(SOLO_COLUMNS)), pd.DataFrame(pair_rows, columns=list(PAIR_COLUMNS))


def read_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(solo, pairs) of the imported file (sha256 checked again); MissingInput when Gavel was never imported."""
    path = verified_path(SOURCE, THROUGHPUT_FILE)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise GpupredError(f"{path}: not JSON ({err.msg} at line {err.lineno}); re-run `gpupred import gavel`") from None
    return tables_from_json(data, str(path))


def read_solo() -> pd.DataFrame:
    """One row per (GPU kind, job type): solo throughput (steps/s)."""
    return read_tables()[0]


def read_pairs() -> pd.DataFrame:
    """Two rows per co-run (GPU kind, unordered pair of job types), one per member: throughputs, failed, slowdown."""
    return read_tables()[1]
