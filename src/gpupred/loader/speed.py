"""A host's single-core speed: a fixed pure-Python and numpy workload, scored against this project's reference host.

Host costs (decoding, augmenting, collating) move between machines by the ratio of these scores: a cost measured at
score 2.0 takes about half as long on a host that scores 1.0 per core. The workload is fixed forever (changing it
changes ``WORKLOAD_VERSION`` and the reference): a Python part (integer arithmetic, dict and string work, the
interpreter-bound share of a data pipeline) and a numpy part (sort, cumulative sum, exp and a strided gather over
two million doubles, single-threaded in numpy), each timed as the best of a few repeats (the best, because other
work sharing the CPU only ever slows a run down).

Reference (score 1.0): the 2-core AMD EPYC KVM guest this project's development machine runs on (``lscpu``: "AMD EPYC",
family 26 model 2, AVX-512), Python 3.11.7, numpy 2.4.6, measured with this module on 2026-11-27 as the best of 45 runs
of :func:`workload_times`: ``REFERENCE_S`` below. Its own profile is ``data/hosts/`` (``gpupred.config.HOSTS``).

A job that names no host is taken to run on a GPU server like the ones this project measured (``GPU_HOST_SCORE``), not
on the reference host: the development machine is a fast desktop-class core, the servers GPUs sit in are not. Its
intervals span ``HOST_SCORE_BAND``, the hosts it may run on.
"""

from __future__ import annotations

import math
import time
from typing import Any

WORKLOAD_VERSION = 1
# the reference host's best-of-45 seconds (three runs of workload_times(15)): python 0.05634 s, numpy 0.04340 s
REFERENCE_S: dict[str, float] = {"python": 0.05634, "numpy": 0.04340}
REFERENCE_HOST = "2-core AMD EPYC (family 26, model 2) KVM guest, Python 3.11.7, numpy 2.4.6, 2026-11-27"
# The score of a GPU server this project measured: what a job that names no host of its own runs on. The geometric mean,
# over the GPU kinds measured, of the host profiles recorded beside their sweeps (data/raw/<gpu>/*/host-profile-*.json;
# gpupred.loader.hostprofile.measured_gpu_host_score recomputes it, and a test holds the two equal): the H100 SXM's
# host scored 0.5543 and the H200's 0.3965 (both 16-core Xeon guests, 2026-11-27), so sqrt(0.5543 x 0.3965). The
# reference host, a 2024 EPYC core, is about twice as fast per core as either; their profiles' costs per sample bear it
# out kind by kind: 1.3-1.4x the reference's for log-mel audio, 1.8-2.9x for JPEG v1, 2.5-2.6x for host tensors.
GPU_HOST_SCORE = 0.469
# The hosts a job that names none may run on, as scores: from the slowest GPU server this project measured (the H200's
# host, 0.3965; gpupred.loader.hostprofile.measured_gpu_host_scores finds it, and a test holds the two equal) to the
# reference host itself (1.0: a 2024 EPYC server core, as fast per core as the servers GPUs sit in come). Such a job is
# priced at GPU_HOST_SCORE, and its step-model intervals reach what either end gives
# (gpupred.step.rowphysics.host_band_physics): where the loader binds, a host twice as fast halves the step.
HOST_SCORE_BAND: tuple[float, float] = (0.3965, 1.0)


def python_part(n: int = 400_000) -> int:
    """The interpreter-bound part: integer arithmetic, a dict and string formatting (returns a checksum)."""
    table: dict[int, str] = {}
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003
        if i % 3 == 0:
            table[acc] = f"k{i}"
        elif acc in table:
            acc += len(table[acc])
    return acc + len(table)


def numpy_part(n: int = 2_000_000) -> float:
    """The array part: sort, cumulative sum, exp and a strided gather over ``n`` doubles (returns a checksum)."""
    import numpy as np

    x = np.random.default_rng(0).standard_normal(n)
    y = np.sort(x)
    z = np.cumsum(y) / n
    w = np.exp(-np.abs(z))[::7]
    return float(w.sum() + y[n // 2])


def workload_times(repeats: int = 3) -> dict[str, float]:
    """Best-of-``repeats`` seconds of each part of the workload on one core."""
    best = {"python": math.inf, "numpy": math.inf}
    for _ in range(max(1, repeats)):
        for name, part in (("python", python_part), ("numpy", numpy_part)):
            t0 = time.perf_counter()
            part()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def single_core_score(repeats: int = 5, earlier: dict[str, float] | None = None) -> dict[str, Any]:
    """This host's single-core score (geometric mean of the two parts' speed over the reference's) and its readings;
    ``earlier`` times of the same workload (taken before a long measurement) count towards the best."""
    times = workload_times(repeats)
    if earlier is not None:
        times = {k: min(v, earlier.get(k, v)) for k, v in times.items()}
    ratios = {k: REFERENCE_S[k] / times[k] for k in times}
    score = math.sqrt(ratios["python"] * ratios["numpy"])
    return {"score": round(score, 4), "python_s": times["python"], "numpy_s": times["numpy"],
            "workload_version": WORKLOAD_VERSION, "reference": REFERENCE_HOST}
