"""Will it fit? The probability that a training job's memory stays within a GPU's, from the predictor's interval.

**The rule.** The memory estimator's interval ``[low, high]`` at the predictor's ``alpha`` is read as the
``alpha/2`` and ``1 - alpha/2`` quantiles of a log-normal memory: ``ln M ~ N(mu, sigma)`` with
``mu = (ln low + ln high) / 2`` and ``sigma = (ln high - ln low) / (2 z)``, ``z`` the standard normal's
``1 - alpha/2`` quantile (1.645 for the 90% interval). The job fits with probability
``P(M <= capacity) = Phi((ln capacity - mu) / sigma)``; a zero-width interval gives 1 or 0. The memory's intervals are
symmetric in log around the point, so ``fits`` (probability at least one half) is ``memory_mib <= capacity``.

**Capacity** is the hardware table's memory (:func:`gpupred.hardware.gpu_spec`), read as GiB: the vendors' "80 GB"
boards report 81,920 MiB (A100 80GB) or 81,559 MiB (H100 80GB) through NVML, within 0.5% of 80 x 1024 MiB, which
the decimal reading (76,294 MiB) misses by 7%. The prediction is what NVML shows of the process (the CUDA context
included), so the comparison is like for like; other processes on the GPU are not counted.

**Largest batch** (:func:`largest_batch`): the footprint grows with the batch size (activations, inputs and loss
buffers scale with it, the rest is fixed), so the largest batch whose fit probability reaches the threshold is found
by doubling and then bisection over the batch sizes the graph's symbolic (or re-batched) batch axis takes.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Callable

from gpupred.hardware import gpu_spec
from gpupred.setups import TrainingSetup

FIT_COLUMNS: tuple[str, ...] = ("fits", "fit_probability", "capacity_mib", "headroom_mib")
FIT_THRESHOLD = 0.95  # `gpupred fits`: the largest batch that fits with at least this probability
MAX_BATCH = 65536  # the largest batch `gpupred fits` tries


def capacity_mib(gpu: str) -> float:
    """A GPU's memory in MiB: the hardware table's figure read as GiB (see the module notes)."""
    return float(gpu_spec(gpu).memory_gb) * 1024.0


def fit_probability(point: float, low: float, high: float, capacity: float, alpha: float) -> float:
    """P(memory <= capacity) with the interval ``[low, high]`` read as a log-normal's central ``1 - alpha`` quantiles."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    if not (low > 0 and high >= low and capacity > 0):
        return float(point <= capacity)
    sigma = (math.log(high) - math.log(low)) / (2.0 * NormalDist().inv_cdf(1.0 - alpha / 2.0))
    mu = (math.log(high) + math.log(low)) / 2.0
    if sigma <= 0.0:
        return float(math.exp(mu) <= capacity)
    return float(NormalDist(mu, sigma).cdf(math.log(capacity)))


def fit_columns(point: float, low: float, high: float, gpu: str, alpha: float) -> dict[str, Any]:
    """``fits``, ``fit_probability``, ``capacity_mib`` and ``headroom_mib`` (capacity less the point) on a GPU."""
    cap = capacity_mib(gpu)
    prob = fit_probability(point, low, high, cap, alpha)
    return {"fits": bool(prob >= 0.5), "fit_probability": prob, "capacity_mib": cap, "headroom_mib": cap - point}


def largest_batch(probability: Callable[[int], float], threshold: float = FIT_THRESHOLD,
                  max_batch: int = MAX_BATCH) -> int:
    """The largest batch size from 1 to ``max_batch`` whose fit probability reaches ``threshold`` (0 when batch 1
    does not), assuming the probability falls as the batch grows: doubling, then bisection."""
    if probability(1) < threshold:
        return 0
    good, bad = 1, None
    while bad is None:
        nxt = min(good * 2, max_batch)
        if nxt == good:
            return good
        if probability(nxt) >= threshold:
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if probability(mid) >= threshold else (good, mid)
    return good


def memory_at(predictor: Any, job: Any, gpu: str) -> tuple[float, float, float]:
    """(point, low, high) memory in MiB of a :class:`gpupred.predictor.jobgraph.JobGraph` on a GPU, from the
    predictor's memory estimator alone (no step model, no calibration)."""
    import pandas as pd

    from gpupred.predictor.core import memory_row

    if predictor.core is None:
        from gpupred.errors import GpupredError

        raise GpupredError("this predictor has no physics core: `gpupred fits` needs one (notebook 08 exports it)")
    mem = predictor.core.memory_.predict(pd.DataFrame([memory_row(job, gpu)])).iloc[0]
    return float(mem["footprint*correction"]), float(mem["low"]), float(mem["high"])


def gpus_for(setup: TrainingSetup, gpus: list[str] | None = None) -> list[str]:
    """The GPUs a fits table lists for a setup: ``gpus`` (each once; one the setup cannot run on, as bf16 on a T4, is
    refused in one line: :func:`gpupred.predictor.jobs.check_setup_on_gpu`), else every GPU of the hardware table it
    runs on."""
    from gpupred.hardware import known_gpus
    from gpupred.predictor.jobs import check_setup_on_gpu, setup_runs_on

    if gpus:
        named = list(dict.fromkeys(gpu_spec(g).name for g in gpus))
        for gpu in named:
            check_setup_on_gpu(setup, gpu)
        return named
    return [g for g in known_gpus()["name"] if setup_runs_on(setup, g)]


def fits_table(predictor: Any, graph: Any, label: str, setup: TrainingSetup, gpus: list[str] | None = None,
               threshold: float = FIT_THRESHOLD, max_batch: int = MAX_BATCH, key: Any = None,
               recipe: str = "standard") -> Any:
    """For one job (a graph under a setup), every GPU of the hardware table (or ``gpus``) with the largest batch that
    fits with at least ``threshold`` probability, its memory and probability there, and batch 1's memory; ``measured``
    says whether the predictor's training data holds runs on that GPU (where not, the memory interval is the wider
    extrapolated one)."""
    import pandas as pd

    from gpupred.predictor.jobgraph import job_graph

    jobs: dict[int, Any] = {}

    def memory(batch: int, gpu: str) -> tuple[float, float, float]:
        if batch not in jobs:
            jobs[batch] = job_graph(graph, label, batch, setup, key=key, recipe=recipe)
        return memory_at(predictor, jobs[batch], gpu)

    measured = set(getattr(predictor.core, "measured_", ()))  # GPU kinds with runs in its training data
    rows = []
    for gpu in gpus_for(setup, gpus):
        cap = capacity_mib(gpu)
        best = largest_batch(lambda b: fit_probability(*memory(b, gpu), cap, predictor.alpha), threshold, max_batch)
        point = memory(max(best, 1), gpu)
        rows.append({"gpu": gpu_spec(gpu).name, "measured": gpu_spec(gpu).name in measured, "capacity_mib": cap,
                     "max_batch": best,
                     "memory_mib": point[0] if best else float("nan"),
                     "fit_probability": fit_probability(*point, cap, predictor.alpha) if best else float("nan"),
                     "memory_mib_batch1": memory(1, gpu)[0]})
    return pd.DataFrame(rows)
