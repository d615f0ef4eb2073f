"""Jobs for a scheduler: many predictions at once, a pair's slowdowns and memory on one GPU, and the n x n matrix.

- :class:`Job`: a job as the predictor takes it (an ONNX file, a workload id, a model by name) with its options;
- :func:`predict_many`: one row per job, each distinct job predicted once (a graph is loaded and featurized once per
  process: :func:`gpupred.predictor.jobgraph.job_graph`), columns ``job``, ``job_key``, ``model``, ``batch_size``,
  ``precision``, ``optimizer``, ``gpu`` and the prediction's;
- :func:`pair_slowdown`: each member's slowdown beside the other with its interval, and whether the pair fits in
  the GPU's memory (:mod:`gpupred.colocation.memfit`: log-normal members, Fenton-Wilkinson sum), from jobs or from
  rows of :func:`predict_many` (a scheduler predicts each job once and pairs the rows);
- :func:`slowdown_matrix`: every job's slowdown beside every other, with its bounds and the pair's OOM probability.

The slowdown is the predictor's served estimator (:mod:`gpupred.predictor.slowdowns`), optionally adapted by a
file of reference co-runs (:mod:`gpupred.predictor.coruns`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.columnar import is_series
from gpupred.errors import GpupredError
from gpupred.files import is_file, one_look
from gpupred.gcpause import collector_paused
from gpupred.setups import InputPipeline, TrainingSetup

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

MAX_OOM_RISK = 0.05  # a pair "fits" when its predicted out-of-memory probability is at most this
ANSWER_SCHEMA = "gpupred.colocate/2"  # 2: the co-run file adapts (was "calibrates") a pair's effects
ROW_COLUMNS: tuple[str, ...] = ("job", "job_key", "gpu", "gpu_util", "memory_mib", "memory_mib_low", "memory_mib_high",
                                "iter_time_mean_s")


@dataclass(frozen=True)
class Job:
    """A job as the predictor takes it, with the options it is predicted under (each as ``Predictor.predict``)."""

    model: Any  # an ONNX path, a workload id or a gpupred.NamedModel
    batch_size: int | None = None
    precision: str | None = None
    optimizer: str | None = None
    setup: TrainingSetup | None = None
    pipeline: InputPipeline | None = None
    name: str | None = None  # what answers call it (default: the model's label)

    @property
    def label(self) -> str:
        """What answers call the job."""
        if self.name:
            return self.name
        return str(getattr(self.model, "name", None) or self.model) if not isinstance(self.model, (str, Path)) else str(self.model)

    def resolved(self, defaults: tuple[int | None, str, str] | None = None) -> tuple[int | None, str, str]:
        """The batch size, precision and optimizer it is predicted at (a workload id's own where not given;
        ``defaults``: :func:`job_defaults` of its model, where already known)."""
        batch, precision, optimizer = job_defaults(self.model) if defaults is None else defaults
        if self.setup is not None:
            precision, optimizer = self.setup.precision, self.setup.optimizer
        return (self.batch_size or batch, self.precision or precision, self.optimizer or optimizer)

    @property
    def key(self) -> str:
        """The job's identity: its model (a file by absolute path) and every option."""
        return self.key_at(self.resolved())

    def key_at(self, resolved: tuple[int | None, str, str], model: str | None = None,
               options: tuple[str, str] | None = None) -> str:
        """:attr:`key` with the job's :meth:`resolved` options already known (and its :func:`model_text` and
        :func:`options_text`, where known: a queue's jobs share them)."""
        model = model_text(self.model) if model is None else model
        extra, piped = options_text(self.setup, self.pipeline) if options is None else options
        batch, precision, optimizer = resolved
        return f"{model}|bs={batch}|{precision}|{optimizer}|{extra}|{piped}"


def model_text(m: Any) -> str:
    """A job's model as its key names it: a file by absolute path, a workload id as given, else its repr."""
    if isinstance(m, (str, Path)):
        return str(Path(m).resolve()) if is_file(m) else str(m)
    return repr(m)


def options_text(setup: TrainingSetup | None, pipeline: InputPipeline | None) -> tuple[str, str]:
    """A job's setup and input pipeline as its key names them: their changes from the defaults ('' for none, and for
    resident batches)."""
    extra = "" if setup is None else repr(sorted(setup.changes().items()))
    piped = "" if pipeline is None or pipeline.resident else repr(sorted(pipeline.changes().items()))
    return extra, piped


def job_keys(jobs: list[Job]) -> tuple[list[tuple[int | None, str, str]], list[str]]:
    """Each job's :meth:`Job.resolved` options and :attr:`Job.key`, what jobs share worked out once: a model's
    :func:`job_defaults` and :func:`model_text` per model, :func:`options_text` per setup and pipeline object (a
    queue holds thousands of jobs of a few of each)."""
    models: dict[Any, tuple[tuple[int | None, str, str], str]] = {}
    options: dict[tuple[int, int], tuple[str, str]] = {}  # by identity: the jobs hold each object meanwhile
    resolved, keys = [], []
    for job in jobs:
        m = job.model
        shared = m if isinstance(m, (str, Path)) else id(m)
        if shared not in models:
            models[shared] = (job_defaults(m), model_text(m))
        defaults, model = models[shared]
        ids = (id(job.setup), id(job.pipeline))
        if ids not in options:
            options[ids] = options_text(job.setup, job.pipeline)
        resolved.append(job.resolved(defaults))
        keys.append(job.key_at(resolved[-1], model, options[ids]))
    return resolved, keys


def job_defaults(x: Any) -> tuple[int | None, str, str]:
    """The batch size, precision and optimizer a job is predicted at where the options do not say: a workload id's
    own, else (None, fp32, sgd) (an ONNX file, a model by name, feature rows)."""
    if isinstance(x, (str, Path)) and not str(x).endswith(".onnx") and not is_file(x):
        from gpupred.workloads.spec import spec_or_none

        spec = spec_or_none(str(x))
        if spec is not None:
            return spec.batch_size, spec.precision, spec.optimizer
    return None, "fp32", "sgd"


def as_job(x: Any) -> Job:
    """A :class:`Job` of ``x`` (a Job, an ONNX path, a workload id, a model by name)."""
    import pandas as pd

    if isinstance(x, Job):
        return x
    if isinstance(x, (pd.Series, pd.DataFrame, dict)):
        raise GpupredError("a job is an ONNX file, a workload id, a model by name or a gpupred Job, not a "
                           f"{type(x).__name__}; pass predict_many's rows to slowdown() instead")
    return Job(x)


def _names(jobs: list[Job]) -> list[str]:
    """Unique names of the jobs, in order (a repeated label gets ``#2``, ``#3``...)."""
    seen: dict[str, int] = {}
    out = []
    for j in jobs:
        seen[j.label] = seen.get(j.label, 0) + 1
        out.append(j.label if seen[j.label] == 1 else f"{j.label}#{seen[j.label]}")
    return out


def predict_many(predictor: Any, jobs: list[Any], gpu: str | None = None) -> pd.DataFrame:
    """One row per job (see the module doc); each distinct job (model and options) predicted once, from one look at
    the files (:func:`gpupred.files.one_look`), the cyclic garbage collector paused (:mod:`gpupred.gcpause`)."""
    with one_look(), collector_paused():
        return _predict_many(predictor, jobs, gpu)


def _predict_many(predictor: Any, jobs: list[Any], gpu: str | None) -> pd.DataFrame:
    """:func:`predict_many` inside its look at the files."""
    import pandas as pd

    from gpupred.hardware import gpu_spec
    from gpupred.predictor.jobs import JobOptions

    js = [as_job(j) for j in jobs]
    names = _names(js)
    resolved, keys = job_keys(js)
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    distinct = list(first.values())
    asked = []
    for i in distinct:
        try:
            asked.append((js[i].model, JobOptions(js[i].batch_size, js[i].precision, js[i].optimizer, gpu, js[i].setup),
                          js[i].pipeline))
        except GpupredError as err:
            raise GpupredError(f"job {names[i]}: {err}") from None
    records = predictor.predict_records(asked, [names[i] for i in distinct])
    answers = {keys[i]: record for i, record in zip(distinct, records)}
    shown = gpu_spec(gpu).name if gpu else ""
    rows = []
    for job, name, key, (batch, precision, optimizer) in zip(js, names, keys, resolved):
        rows.append({"job": name, "job_key": key, "model": str(getattr(job.model, "name", job.model)),
                     "batch_size": batch, "precision": precision, "optimizer": optimizer, "gpu": shown,
                     **answers[key]})
    return pd.DataFrame(rows)


def _effects(predictor: Any, served: Any, coruns: Any, frame: pd.DataFrame,
             gpu: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Per row of ``frame``: (sensitivity, aggressiveness, co-runs used) from a co-run file, and the file as shown."""
    n = len(frame)
    zeros = (np.zeros(n), np.zeros(n), np.zeros(n, dtype=int))
    if coruns is None or coruns is False:
        return (*zeros, "")
    from gpupred.hardware import gpu_spec
    from gpupred.predictor.coruns import CoRunFile, adapted_effects, read_coruns

    cf = coruns if isinstance(coruns, CoRunFile) else read_coruns(coruns)
    if gpu_spec(gpu).name != cf.gpu:
        raise GpupredError(f"{cf.path}: co-runs measured on {cf.gpu}, asked about {gpu_spec(gpu).name}; give the "
                           "co-runs of the GPU asked about")
    file_jobs = {name: Job(j["model"], j.get("batch_size"), j.get("precision"), j.get("optimizer"), name=name)
                 for name, j in cf.jobs.items()}
    known = predict_many(predictor, list(file_jobs.values()), gpu)
    util = dict(zip(known["job"], known["gpu_util"].astype(float)))
    by_key = {file_jobs[name].key: name for name in file_jobs}
    targets = sorted({by_key[k] for k in frame["job_key"] if k in by_key})
    fx = adapted_effects(served, cf, util, targets)
    sens = np.array([fx[by_key[k]][0] if k in by_key else 0.0 for k in frame["job_key"]])
    aggr = np.array([fx[by_key[k]][1] if k in by_key else 0.0 for k in frame["job_key"]])
    used = np.array([fx[by_key[k]][2] if k in by_key else 0 for k in frame["job_key"]], dtype=int)
    return sens, aggr, used, cf.path


def _rows(predictor: Any, a: Any, b: Any, gpu: str | None) -> tuple[pd.DataFrame, str]:
    """Two rows of :func:`predict_many` for the pair (predicted now for jobs, checked for rows), and the GPU."""
    import pandas as pd

    given = [x for x in (a, b) if is_series(x)]
    if given and len(given) != 2:
        raise GpupredError("give two jobs or two rows of predict_many, not one of each")
    if given:
        frame = pd.DataFrame([a, b]).reset_index(drop=True)
        missing = [c for c in ROW_COLUMNS if c not in frame.columns]
        if missing:
            raise GpupredError(f"rows lack {missing}: pass rows of Predictor.predict_many")
        gpus = set(frame["gpu"].astype(str))
        if len(gpus) != 1 or "" in gpus or (gpu is not None and _gpu_name(gpu) not in gpus):
            raise GpupredError(f"rows predicted on {sorted(gpus)}, asked about {gpu}: predict both on the GPU asked")
        return frame, frame["gpu"].iloc[0]
    if gpu is None:
        raise GpupredError("name the GPU the pair shares (gpu=... / --gpu)")
    frame = predict_many(predictor, [a, b], gpu)
    return frame, frame["gpu"].iloc[0]


def _gpu_name(gpu: str) -> str:
    """The hardware table's name of a GPU."""
    from gpupred.hardware import gpu_spec

    return gpu_spec(gpu).name


@dataclass
class SlowdownMatrix:
    """Every job's slowdown (row) beside every partner (column), its bounds (NaN without an interval), the pair's OOM
    probability and whether it fits, and the predictions they came from."""

    slowdown: pd.DataFrame
    low: pd.DataFrame
    high: pd.DataFrame
    oom_probability: pd.DataFrame
    fits: pd.DataFrame
    predictions: pd.DataFrame
    estimator: dict[str, Any] = field(default_factory=dict)
    coruns: pd.Series = field(default_factory=lambda: no_coruns())  # per job: co-runs its adaptation used


def no_coruns() -> pd.Series:
    """An empty count of co-runs per job (no adaptation)."""
    import pandas as pd

    return pd.Series(dtype=int)


def _bounds(served: Any, s: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval of each slowdown from the held-out width at its co-run count (NaN where none)."""
    low, high = np.full(s.shape, np.nan), np.full(s.shape, np.nan)
    for kk in np.unique(k):
        w = served.width(int(kk))
        if w is not None:
            sel = k == kk
            low[sel], high[sel] = s[sel] * np.exp(w[0]), s[sel] * np.exp(w[1])
    return low, high


def matrix_from_rows(predictor: Any, frame: pd.DataFrame, coruns: Any = None) -> SlowdownMatrix:
    """The :class:`SlowdownMatrix` of rows of :func:`predict_many` on one GPU."""
    import pandas as pd

    from gpupred.colocation.memfit import pair_oom_probability
    from gpupred.predictor.fits import capacity_mib
    from gpupred.predictor.slowdowns import served_of

    served, gpu = served_of(predictor), str(frame["gpu"].iloc[0])
    util = frame["gpu_util"].to_numpy(float)
    n = len(frame)
    own, partner = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    sens, aggr, used, _ = _effects(predictor, served, coruns, frame, gpu)
    s = served.predict(util[own], util[partner]) * np.exp(sens[own] + aggr[partner])
    low, high = _bounds(served, s, np.minimum(used[own], used[partner]))
    mem, hi = frame["memory_mib"].to_numpy(float), frame["memory_mib_high"].to_numpy(float)
    p = pair_oom_probability(mem[own], hi[own], mem[partner], hi[partner], capacity_mib(gpu), 1 - predictor.alpha)
    names = frame["job"].tolist()

    def square(v: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame(np.asarray(v).reshape(n, n), index=pd.Index(names, name="job"),
                            columns=pd.Index(names, name="partner"))

    return SlowdownMatrix(square(s), square(low), square(high), square(p), square(p <= MAX_OOM_RISK), frame,
                          estimator_summary(served, coruns), pd.Series(used, index=names, name="coruns"))


def estimator_summary(served: Any, coruns: Any) -> dict[str, Any]:
    """What answered: the estimator's name and class, shipped or the fallback, and the co-run file."""
    shown = "" if coruns in (None, False) else str(getattr(coruns, "path", coruns))
    return {"name": served.name, "class": served.class_name, "source": served.source, "variant": served.variant,
            "adapted": bool(shown), "coruns_file": shown or None}


@dataclass
class PairSlowdown:
    """The answer for a pair on one GPU (:meth:`to_dict` is ``gpupred colocate --json``'s object)."""

    gpu: str
    members: list[dict[str, Any]]  # per member: the job, its prediction, its slowdown beside the other and bounds
    pair: dict[str, Any]  # memory together against the GPU's capacity, OOM probability, fits, combined throughput
    estimator: dict[str, Any]
    interval: dict[str, Any]
    notes: list[str]

    @property
    def slowdowns(self) -> tuple[float, float]:
        """(slowdown of the first job beside the second, of the second beside the first)."""
        return float(self.members[0]["slowdown"]), float(self.members[1]["slowdown"])

    def to_dict(self) -> dict[str, Any]:
        """The answer as one JSON-safe object; every key always present (null where unknown)."""
        from gpupred.reports import json_safe

        return json_safe({"schema": ANSWER_SCHEMA, "gpu": self.gpu, "members": self.members, "pair": self.pair,
                          "estimator": self.estimator, "interval": self.interval, "notes": self.notes})


def _member(row: pd.Series, s: float, low: float, high: float, k: int) -> dict[str, Any]:
    """One member of a pair answer."""
    import pandas as pd

    step = float(row["iter_time_mean_s"]) * 1000.0
    return {"job": str(row["job"]), "model": str(row.get("model", row["job"])),
            "batch_size": None if pd.isna(row.get("batch_size")) else int(row["batch_size"]),
            "precision": row.get("precision"), "optimizer": row.get("optimizer"),
            "gpu_util": float(row["gpu_util"]), "memory_mib": float(row["memory_mib"]),
            "memory_mib_low": float(row["memory_mib_low"]), "memory_mib_high": float(row["memory_mib_high"]),
            "step_time_ms": step, "slowdown": s, "slowdown_low": None if np.isnan(low) else low,
            "slowdown_high": None if np.isnan(high) else high, "shared_step_time_ms": step * s,
            "adaptation_coruns": int(k)}


def pair_slowdown(predictor: Any, a: Any, b: Any, gpu: str | None = None, coruns: Any = None) -> PairSlowdown:
    """Each member's slowdown beside the other with its interval, and whether the pair fits in the GPU's memory."""
    from gpupred.colocation.memfit import pair_memory_quantile
    from gpupred.predictor.fits import capacity_mib
    from gpupred.predictor.slowdowns import served_of

    frame, gpu_name = _rows(predictor, a, b, gpu)
    m = matrix_from_rows(predictor, frame, coruns)
    served, used = served_of(predictor), m.coruns.to_numpy(int)
    s = (float(m.slowdown.iloc[0, 1]), float(m.slowdown.iloc[1, 0]))
    members = [_member(frame.iloc[i], s[i], float(m.low.iloc[i, 1 - i]), float(m.high.iloc[i, 1 - i]), used[i])
               for i in (0, 1)]
    cap = capacity_mib(gpu_name)
    mem = frame["memory_mib"].to_numpy(float)
    hi = frame["memory_mib_high"].to_numpy(float)
    q95 = float(pair_memory_quantile(mem[0], hi[0], mem[1], hi[1], 0.95, 1 - predictor.alpha))
    p = float(m.oom_probability.iloc[0, 1])
    pair = {"memory_mib": float(mem.sum()), "memory_q95_mib": q95, "capacity_mib": cap,
            "headroom_mib": cap - float(mem.sum()), "oom_probability": p, "max_oom_risk": MAX_OOM_RISK,
            "fits": bool(p <= MAX_OOM_RISK), "combined_throughput": 1.0 / s[0] + 1.0 / s[1]}
    k = int(min(used))
    width = served.width(k)
    interval = {"level": served.level() if width is not None else None, "log_low": None if width is None else width[0],
                "log_high": None if width is None else width[1], "basis": served.basis(k)}
    return PairSlowdown(gpu_name, members, pair, m.estimator, interval, pair_notes(served, frame, members))


def pair_notes(served: Any, frame: pd.DataFrame, members: list[dict[str, Any]]) -> list[str]:
    """What the answer leaves out or assumes, always a list (empty when nothing to say)."""
    from gpupred.predictor.slowdowns import FALLBACK

    notes = []
    if served.source == FALLBACK:
        notes.append("this predictor was exported without a slowdown estimator: the zero-parameter time-sharing prior "
                     "answered (no fitted state), without an interval")
    if "extrapolated" in frame.columns and frame["extrapolated"].astype(bool).any():
        notes.append("a member's prediction is extrapolated (no measurements on this GPU kind)")
    if served.choice and not _same_gpu(str(served.choice.get("gpu", "")), str(frame["gpu"].iloc[0])):
        notes.append(f"the interval was measured on {served.choice['gpu']} pairs ({served.choice['label']}), not on "
                     "this GPU")
    notes.append("time-sharing without MPS: host phases not slowed, memory-bandwidth and CPU contention not modelled")
    return notes


def _same_gpu(a: str, b: str) -> bool:
    """Whether two GPU names are the same kind (False when either is unknown)."""
    try:
        return _gpu_name(a) == _gpu_name(b)
    except GpupredError:
        return False
