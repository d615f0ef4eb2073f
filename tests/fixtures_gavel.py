"""FIXTURE throughput files in the layout of Gavel's simulation_throughputs.json. Every number here is made up.

The fixture's slowdowns follow a planted additive truth, ``log s(a|b) = 0.3 + sens_a + aggr_b`` (plus a little noise),
so calibration from reference co-runs has something to recover; one job type (``FixHuge``) fails beside every partner
whose planted size is above a threshold, as a memory-bound failure would.
"""

from __future__ import annotations

import json

import numpy as np

GPUS: tuple[str, ...] = ("k80", "p100", "v100")


def fixture_jobs(n_models: int = 6, sizes: tuple[int, ...] = (16, 32, 64)) -> list[str]:
    """FIXTURE job types: ``Fix<m> (batch size <b>)`` for each model and batch size, plus ``FixHuge``."""
    return [f"Fix{chr(65 + m)} (batch size {b})" for m in range(n_models) for b in sizes] + ["FixHuge"]


def fixture_truth(jobs: list[str], seed: int = 0) -> dict[str, np.ndarray]:
    """The planted per-job effects, sizes and solo throughputs (steps/s per GPU kind) of the fixture."""
    rng = np.random.default_rng(seed)
    n = len(jobs)
    huge = np.array([j == "FixHuge" for j in jobs])
    return {"sens": rng.normal(0, 0.35, n), "aggr": rng.normal(0, 0.35, n),
            "size": np.where(huge, 0.8, rng.uniform(0.05, 0.45, n)),
            "solo": np.outer(rng.uniform(2, 60, n), [0.2, 0.7, 1.0])}


def fixture_throughputs(jobs: list[str] | None = None, seed: int = 0, noise: float = 0.02) -> dict:
    """A FIXTURE throughput dict in Gavel's layout (scale factor 1 measured; scale factor 2 all zero; a co-located
    throughput never above its solo one; a pair fails when the planted sizes sum above 1)."""
    jobs = jobs or fixture_jobs()
    t = fixture_truth(jobs, seed)
    rng = np.random.default_rng(seed + 1)
    out: dict = {}
    for g, gpu in enumerate(GPUS):
        kind: dict = {}
        for i, a in enumerate(jobs):
            kind[f"('{a}', 1)"] = {"null": float(t["solo"][i, g])}
            kind[f"('{a}', 2)"] = {"null": float(2 * t["solo"][i, g]), f"('{a}', 2)": [0.0, 0.0]}
        for i, a in enumerate(jobs):
            for j in range(i, len(jobs)):
                b = jobs[j]
                if t["size"][i] + t["size"][j] > 1.0:
                    own, other = 0.0, 0.0
                else:
                    s_ab = np.exp(0.3 + t["sens"][i] + t["aggr"][j] + rng.normal(0, noise))
                    s_ba = np.exp(0.3 + t["sens"][j] + t["aggr"][i] + rng.normal(0, noise))
                    own, other = t["solo"][i, g] / max(s_ab, 1.0), t["solo"][j, g] / max(s_ba, 1.0)
                    if i == j:
                        own = other = (own + other) / 2
                kind[f"('{a}', 1)"][f"('{b}', 1)"] = [own, other]
                kind[f"('{b}', 1)"][f"('{a}', 1)"] = [other, own]
        out[gpu] = kind
        out[f"{gpu}_unconsolidated"] = {}
    return out


def fixture_throughput_text(jobs: list[str] | None = None, seed: int = 0) -> str:
    """The fixture as the JSON text of a throughput file."""
    return json.dumps(fixture_throughputs(jobs, seed))
