"""A file of measured reference co-runs that adapts a served slowdown, as notebook 06's "k = 3 adaptation" does.

Format (JSON object, ``"format": "gpupred-coruns/1"``)::

    {"format": "gpupred-coruns/1",
     "gpu": "H100",                                    # the GPU every co-run was measured on
     "jobs": {"mine": {"model": "my.onnx", "batch_size": 32, "precision": "bf16", "optimizer": "adam"},
              "ref1": {"model": "resnet.resnet50-bs64-img224-bf16-sgd"}},
     "coruns": [{"a": "mine", "b": "ref1", "slowdown_a": 1.41, "slowdown_b": 1.22}]}

``jobs`` names each job as the predictor takes it (``model``: an ONNX file, relative paths from the file's folder,
or a workload id; ``batch_size``, ``precision``, ``optimizer`` optional as for a prediction). Each co-run is two jobs
sharing the GPU and each one's measured slowdown (co-located over solo step time). A job asked about that is one of
the file's jobs (same model and options) is adapted as :meth:`gpupred.slowdown.estimator.SlowdownModel.adapt`
does it: its sensitivity is the mean of its co-runs' ``log(measured / prior)``, its aggressiveness the same of its
partners' slowdowns beside it, each shrunk to 0 (the prior) by ``noise variance / effect variance`` from notebook 06's
fit; the other jobs of the file are its references, whose own effects the served model does not know (0, the prior's).
A malformed file is refused in one line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpupred.errors import GpupredError

FORMAT = "gpupred-coruns/1"
JOB_KEYS: frozenset[str] = frozenset({"model", "batch_size", "precision", "optimizer"})


@dataclass(frozen=True)
class CoRunFile:
    """A checked co-run file: the GPU, the jobs by name, and the co-runs (a, b, slowdown of a, slowdown of b)."""

    path: str
    gpu: str
    jobs: dict[str, dict[str, Any]]
    coruns: tuple[tuple[str, str, float, float], ...]


def _model_path(model: str, folder: Path) -> str:
    """A job's model: an existing file relative to the co-run file's folder becomes its path, else as written."""
    if model.endswith(".onnx") or "/" in model:
        candidate = Path(model) if Path(model).is_absolute() else folder / model
        return str(candidate.resolve())
    return model


def _check_job(shown: str, name: str, job: Any, folder: Path) -> dict[str, Any]:
    """One job entry, checked; its model path resolved from the file's folder."""
    if not isinstance(job, dict) or not isinstance(job.get("model"), str) or not job["model"]:
        raise GpupredError(f"{shown}: job {name!r} needs a \"model\" (an ONNX file or a workload id)")
    odd = sorted(set(job) - JOB_KEYS)
    if odd:
        raise GpupredError(f"{shown}: job {name!r} has unknown keys {odd}; known: {', '.join(sorted(JOB_KEYS))}")
    batch = job.get("batch_size")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise GpupredError(f"{shown}: job {name!r} batch_size {batch!r} is not a positive whole number")
    return {**job, "model": _model_path(job["model"], folder)}


def _check_corun(shown: str, i: int, run: Any, jobs: dict[str, Any]) -> tuple[str, str, float, float]:
    """One co-run entry, checked."""
    if not isinstance(run, dict) or not {"a", "b", "slowdown_a", "slowdown_b"} <= set(run):
        raise GpupredError(f"{shown}: co-run {i} needs \"a\", \"b\", \"slowdown_a\" and \"slowdown_b\"")
    a, b = run["a"], run["b"]
    for side in (a, b):
        if side not in jobs:
            raise GpupredError(f"{shown}: co-run {i} names job {side!r}, not one of \"jobs\" ({', '.join(jobs)})")
    if a == b:
        raise GpupredError(f"{shown}: co-run {i} pairs {a!r} with itself; a reference co-run is with another job")
    values = []
    for key in ("slowdown_a", "slowdown_b"):
        v = run[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
            raise GpupredError(f"{shown}: co-run {i} {key} {v!r} is not a positive number (co-located / solo step time)")
        values.append(float(v))
    return str(a), str(b), values[0], values[1]


def read_coruns(path: str | Path) -> CoRunFile:
    """The co-run file at ``path``, checked (see the module doc); one line naming the file and the problem if not."""
    from gpupred.files import read_json_object
    from gpupred.hardware import gpu_spec

    shown = str(path)
    p = Path(path)
    if not p.is_file():
        raise GpupredError(f"{shown}: no co-run file there (no such file)")
    data = read_json_object(p, f"write it as {FORMAT} (gpupred.predictor.coruns)", shown)
    if data.get("format") != FORMAT:
        raise GpupredError(f"{shown}: \"format\" is {data.get('format')!r}, expected {FORMAT!r}")
    if not isinstance(data.get("gpu"), str):
        raise GpupredError(f"{shown}: \"gpu\" must name the GPU the co-runs were measured on")
    try:
        gpu = gpu_spec(data["gpu"]).name
    except GpupredError as err:
        raise GpupredError(f"{shown}: {err}") from None
    jobs, runs = data.get("jobs"), data.get("coruns")
    if not isinstance(jobs, dict) or len(jobs) < 2:
        raise GpupredError(f"{shown}: \"jobs\" must map at least two names to jobs")
    if not isinstance(runs, list) or not runs:
        raise GpupredError(f"{shown}: \"coruns\" must list at least one co-run")
    checked = {str(k): _check_job(shown, str(k), v, p.parent) for k, v in jobs.items()}
    return CoRunFile(shown, gpu, checked, tuple(_check_corun(shown, i, r, checked) for i, r in enumerate(runs)))


def adapted_effects(served: Any, coruns: CoRunFile, util: dict[str, float],
                       targets: list[str]) -> dict[str, tuple[float, float, int]]:
    """Per target job of the file: (sensitivity, aggressiveness, co-runs used), each target adapted alone on its
    co-runs with the file's other jobs (references with effects 0). ``util``: each file job's predicted utilization."""
    from gpupred.slowdown.estimator import SlowdownModel

    own = [r[0] for r in coruns.coruns] + [r[1] for r in coruns.coruns]
    partner = [r[1] for r in coruns.coruns] + [r[0] for r in coruns.coruns]
    frame = served.pair_frame(np.array([util[j] for j in own]), np.array([util[j] for j in partner]), own, partner)
    frame["slowdown"] = [r[2] for r in coruns.coruns] + [r[3] for r in coruns.coruns]
    variances = served.adaptation_variances() or (1e-9, 1.0, 1.0)  # none known: the mean, all but unshrunk
    out = {}
    for job in targets:
        model = SlowdownModel(served.estimator())
        model.sens_ = {j: 0.0 for j in coruns.jobs}
        model.aggr_ = {j: 0.0 for j in coruns.jobs}
        model.noise_var_, model.sens_var_, model.aggr_var_ = variances
        model.adapted_ = {}
        model.adapt(job, frame)
        out[job] = (model.sens_[job], model.aggr_[job], model.adapted_[job])
    return out
