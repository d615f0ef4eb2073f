"""The predictor artifact: models/predictor.joblib plus the models/predictor.json card that vouches for it.

The loader reads the card first and checks the schema version, the joblib file's sha256 and the
library versions before anything is unpickled. Nothing here imports torch; only predicting from a
workload id does, through ``gpupred.graph.export``.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpupred import config
from gpupred.dataset import PERCENT_LABELS, fingerprint
from gpupred.errors import GpupredError
from gpupred.files import read_json_object, sha256
from gpupred.reports import MetricsSchema
from gpupred.hardware import HARDWARE_COLUMNS, gpu_spec, hardware_features
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.conformal import widen
from gpupred.predictor.extrapolate import UnseenGpuWidth, unseen_gpu_width
from gpupred.predictor.pairing import job_defaults
from gpupred.setups import RESIDENT, InputPipeline, TrainingSetup, as_setup

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.predictor.core import PhysicsCore
    from gpupred.predictor.jobgraph import JobGraph
    from gpupred.step.estimator import StepEstimator

SCHEMA_VERSION = 3  # 3: the core (step and memory estimators) and its held-out figures first; the regressors a baseline
# libraries whose pickles must be read by the very version that wrote them
CHECKED_LIBRARIES: tuple[str, ...] = ("scikit-learn", "xgboost", "lightgbm", "numpy")
MISSING_DEFAULT = "no predictor at models/predictor.joblib: `make all` exports one (notebook 08) from the measurements it has"


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries the artifact depends on."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for lib in (*CHECKED_LIBRARIES, "pandas", "joblib", "gpupred"):
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:  # xgboost's CPU-only wheel is the distribution xgboost-cpu (same module)
            out[lib] = version(f"{lib}-cpu")
    return out


def _versions_match(lib: str, built: str, installed: str) -> bool:
    if lib == "numpy":  # pickled arrays are stable within a major version
        return built.split(".")[0] == installed.split(".")[0]
    return built == installed


@dataclass(frozen=True)
class JobOptions:
    """The options a prediction is asked under: batch size, precision, optimizer, GPU, and the rest of the training
    setup (:class:`gpupred.setups.TrainingSetup`).

    Each option given applies; none is dropped. Where one is not given, the job's own stands: a workload id's batch
    size, precision and optimizer (the store's graphs have a symbolic batch, so any batch, precision or optimizer is
    the same graph under another setup), else fp32 and SGD (an ONNX file has no batch size of its own: it must be
    given). A ``setup`` says every option; its precision and optimizer must agree with ``precision`` and
    ``optimizer`` where those are given, and for a workload id with neither given they must be the id's own (so a
    ``TrainingSetup()`` built for its other options never turns a bf16 id into fp32 unasked: refused, in one line).
    """

    batch_size: int | None = None  # needed for an ONNX file; a workload id's own where None
    precision: str | None = None  # None: the setup's, else the workload id's, else fp32
    optimizer: str | None = None  # None: the setup's, else the workload id's, else sgd
    gpu: str | None = None  # an NVML name or a gpupred.hardware name; None = the rows' own, or the only trained one
    setup: TrainingSetup | None = None  # its precision and optimizer must agree with the two above where given

    def __post_init__(self) -> None:
        s = self.setup
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or int(self.batch_size) < 1):
            raise GpupredError(f"batch size must be a positive whole number, got {self.batch_size!r}")
        if s is None:
            return
        for name in ("precision", "optimizer"):
            given = getattr(self, name)
            if given is not None and given != getattr(s, name):
                raise GpupredError(f"{name} {given!r} disagrees with the setup's {getattr(s, name)!r}; give it in the "
                                   "setup only")

    def training(self, precision: str = "fp32", optimizer: str = "sgd") -> TrainingSetup:
        """The job's training setup: ``setup``, else the sweeps' setup of the precision and optimizer given (where not
        given: ``precision`` and ``optimizer``, the job's own)."""
        return as_setup(self.setup, self.precision or precision, self.optimizer or optimizer)

    def for_workload(self, spec: Any) -> tuple[int, TrainingSetup]:
        """The batch size and training setup of a workload id (a :class:`gpupred.workloads.spec.WorkloadSpec`) under
        these options: each option given, the id's own where not."""
        if self.setup is not None:
            for name in ("precision", "optimizer"):
                own, wanted = getattr(spec, name), getattr(self.setup, name)
                if getattr(self, name) is None and wanted != own:
                    raise GpupredError(f"{spec.id}: the setup's {name} {wanted!r} is not the id's {own!r}; pass "
                                       f"{name}={wanted!r} to override the id's, or a setup with {name} {own!r}")
        batch = int(self.batch_size) if self.batch_size is not None else int(spec.batch_size)
        return batch, self.training(spec.precision, spec.optimizer)


@dataclass
class PredictedJob:
    """One :meth:`Predictor.predict` call's frame and what its answer reads besides (:mod:`gpupred.predictor.answer`)."""

    frame: pd.DataFrame
    x: Any  # the job as given: an ONNX path, a workload id, a model by name, feature rows
    job: JobOptions
    graph: "JobGraph | None"  # None: feature rows (answered by the regressors)
    calibration: Any  # gpupred.calibration.use.AppliedCalibration, or None
    pipeline: InputPipeline
    kinds: np.ndarray  # each row's GPU kind ('' where the rows name none)
    own: tuple[int | None, TrainingSetup] | None = None  # the job's own batch size and setup (a workload id's)


class Predictor:
    """Predicts each trained target with CV+ intervals from graph + GPU features."""

    def __init__(self, feature_names: list[str], targets: dict[str, ConformalRegressor], model_names: dict[str, str],
                 gpus: list[str], alpha: float, measured_gpus: dict[str, int] | None = None,
                 unseen_widths: dict[str, UnseenGpuWidth] | None = None, core: PhysicsCore | None = None) -> None:
        self.feature_names = list(feature_names)
        self.targets = targets
        self.model_names = model_names
        self.gpus = gpus  # the NVML names of the training runs' GPUs
        self.alpha = alpha
        # GPU kinds (gpupred.hardware names) with measurements in the training data, and how many runs each
        self.measured_gpus = dict(measured_gpus or {gpu_spec(g).name: 0 for g in gpus})
        self.unseen_widths = dict(unseen_widths or {})  # per target: how far an extrapolated interval is widened
        self.core = core  # physics x correction for jobs given as graphs; None: the regressors answer every job
        self.card: dict[str, Any] = {}

    @property
    def graph_features(self) -> list[str]:
        """The feature names that come from the graph (the rest are GPU and precision/optimizer encodings)."""
        from gpupred.dataset import ENCODED_COLUMNS

        return [f for f in self.feature_names if f not in HARDWARE_COLUMNS and f not in ENCODED_COLUMNS]

    def _frame(self, x: Any, job: JobOptions) -> pd.DataFrame | dict[str, Any]:
        """Turn a DataFrame / dict / ONNX path / workload id into feature rows (a dict is one row)."""
        if isinstance(x, (pd.DataFrame, dict)):
            if isinstance(x, dict):
                from gpupred.graph.coverage import check_complete

                check_complete(x, "feature row")  # a featurize row carries its coverage columns
            _check_row_options(x, job)
            return x
        graph = resolve_graph(x, job)
        if graph is None:
            raise GpupredError(f"cannot predict from a {type(x).__name__}: pass a DataFrame of features, an ONNX path "
                               "or a workload id")
        return graph.features

    def features(self, x: Any, batch_size: int | None = None, precision: str | None = None,
                 optimizer: str | None = None, gpu: str | None = None,
                 setup: TrainingSetup | None = None) -> pd.DataFrame:
        """The model input matrix (columns ``feature_names``) for ``x``."""
        matrix, index, _ = self._matrix(x, JobOptions(batch_size, precision, optimizer, gpu, setup))
        return pd.DataFrame(matrix, index=index, columns=self.feature_names)

    def _matrix(self, x: Any, job: JobOptions) -> tuple[np.ndarray, pd.Index, np.ndarray]:
        """The model inputs as one float array (rows x ``feature_names``), the rows' index, and each row's GPU kind
        ('' where the rows carry hardware columns but no GPU name)."""
        from gpupred.dataset import ENCODED_COLUMNS, encode

        data = self._frame(x, job)
        if isinstance(data, dict):  # one row: no DataFrame on the way (it costs more than the prediction)
            present, n, index = set(data), 1, pd.RangeIndex(1)

            def column(name: str) -> np.ndarray:
                return np.asarray([data[name]])

            def block(names: list[str]) -> np.ndarray:
                return np.asarray([[data[c] for c in names]], dtype=float)
        else:
            present, n, index = set(data.columns), len(data), data.index

            def column(name: str) -> np.ndarray:
                return data[name].to_numpy()

            def block(names: list[str]) -> np.ndarray:
                return data[names].to_numpy(dtype=float)
        graph = self.graph_features
        missing = [f for f in graph if f not in present]
        if missing:
            raise GpupredError(f"input lacks graph features {missing[:5]}{'...' if len(missing) > 5 else ''}: "
                               "use gpupred.featurize output or dataset rows")
        columns: dict[str, np.ndarray] = dict(zip(graph, block(graph).T))
        training = job.training()  # the regressors' encodings know the catalog's precisions and optimizers
        prec = column("precision") if "precision" in present else np.full(n, training.job_precision, dtype=object)
        opt = column("optimizer") if "optimizer" in present else np.full(n, training.job_optimizer, dtype=object)
        hardware = list(HARDWARE_COLUMNS)
        if job.gpu is None and all(c in present for c in hardware):
            columns.update(zip(hardware, block(hardware).T))
            kinds = gpu_kinds(column("gpu_name")) if "gpu_name" in present else np.full(n, "", dtype=object)
        else:
            names = self._gpu_names(present, column, job.gpu, n)
            kinds = gpu_kinds(names)  # an unknown name fails here, in one line naming the known ones
            columns.update(_by_key(names, prec, hardware_features, hardware))  # looked up once per (GPU, precision)
        encoded = list(ENCODED_COLUMNS)
        if all(c in present for c in encoded):  # dataset rows carry their own protocol encodings
            columns.update(zip(encoded, block(encoded).T))
        else:  # a new job: this project's protocol (device-resident batches, a sync per step, every NVML sample)
            columns.update(_by_key(prec, opt, encode, encoded))
        matrix = np.column_stack([columns[f] for f in self.feature_names]) if n else np.empty((0, len(self.feature_names)))
        return matrix, index, kinds

    def _few_rows(self, X: np.ndarray) -> dict[str, np.ndarray] | None:
        """Every target's model predictions from one numpy forest of all their trees, for a few rows (else None)."""
        from gpupred.learn.forest import Forest
        from gpupred.learn.forest import FOREST_MAX_ROWS

        if len(X) > FOREST_MAX_ROWS:
            return None
        if "_forest" not in self.__dict__:
            forests = [m.forest_ for m in self.targets.values()]
            self.__dict__["_forest"] = None if any(f is None for f in forests) else Forest.combine(forests)
        forest = self.__dict__["_forest"]
        return None if forest is None else _split_models(forest.predict(X), self.targets)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the combined forest (rebuilt from the targets' on first use)."""
        return {k: v for k, v in self.__dict__.items() if k != "_forest"}

    def _check_setup(self, job: JobOptions, graph: "JobGraph | None") -> None:
        """Refuse setup options the answer could not see: the regressors know the catalog's precisions and
        optimizers only (the physics core, answering for graphs, models every option), and options that name what
        the graph has none of (an attention kernel without attention, channels_last without convolutions)."""
        from gpupred.setups import setup_of

        training = graph.setup if graph is not None else job.training()
        if graph is not None and self.core is not None:
            _check_graph_options(graph)
        if training == setup_of(training.job_precision, training.job_optimizer):
            return
        if graph is None:
            raise _regressor_setup_error(training, "these rows are feature rows (answered by the regressors)")
        if self.core is None:
            raise _regressor_setup_error(training, "this predictor has no physics core")

    def _gpu_names(self, present: set[str], column: Any, gpu: str | None, n: int) -> np.ndarray:
        if gpu is not None:
            return np.full(n, gpu, dtype=object)
        if "gpu_name" in present:
            return column("gpu_name")
        if len(self.gpus) == 1:
            return np.full(n, self.gpus[0], dtype=object)
        raise GpupredError(f"this predictor was trained on several GPUs ({', '.join(self.gpus)}): name one (gpu=... / --gpu)")

    def predict(self, x: Any, batch_size: int | None = None, precision: str | None = None,
                optimizer: str | None = None, gpu: str | None = None, calibration: Any = None,
                setup: TrainingSetup | None = None, pipeline: InputPipeline | None = None) -> pd.DataFrame:
        """Predict each target and its interval: columns ``<target>``, ``<target>_low``, ``<target>_high``, ``core``
        (what answered), ``extrapolated`` (no measurements of the GPU kind under this project's protocol, and no
        calibration used) and, where a calibration was given or found, ``calibrated`` (the file used for the row, ''
        if not) and ``calibration_note``.

        A job given as a graph (an ONNX file, a workload id) is answered by the physics-first core alone
        (:mod:`gpupred.predictor.core`: the step and memory estimators notebook 03 scores). Feature rows (a featurize
        dict, a DataFrame) carry no kernels for the step model: the baseline regressors answer them, and rows that
        name their ``source`` (dataset rows) get intervals calibrated on that source's residuals. Their extrapolated
        rows' intervals are widened to at least the held-out width of :mod:`gpupred.predictor.extrapolate`.
        ``calibration``: a file written by ``gpupred calibrate`` (or a :class:`gpupred.calibration.file.Calibration`)
        for the GPU (``gpu`` defaults to its GPU); a job given as a graph on a GPU without measurements is then
        predicted with its measured constants in place of borrowed ones (:mod:`gpupred.calibration.use`). ``None`` looks
        for the named GPU's newest calibration in this user's folder (``gpupred.config.calibration_dir``); ``False``
        uses none. A calibration of another GPU than ``gpu`` is refused.

        A job answered by the physics core also gets ``fits``, ``fit_probability``, ``capacity_mib`` and
        ``headroom_mib`` on its GPU (:mod:`gpupred.predictor.fits`: the memory interval read as a log-normal's).

        ``setup`` (:class:`gpupred.setups.TrainingSetup`) is how the job trains: precision and TF32, optimizer and
        its implementation, checkpointing, gradient accumulation (``iter_time_mean_s`` is then one optimizer step of
        ``setup.accumulation`` micro-batches of ``batch_size``), attention kernel, memory format; without one, the
        sweeps' setup of ``precision`` and ``optimizer``. The physics core models every option; the regressors (rows
        given as features, or a predictor without a core) see only the precision and optimizer, and refuse the rest.

        No option is dropped (:class:`JobOptions`): for a workload id, ``batch_size``, ``precision``, ``optimizer``
        and ``setup`` override the id's own (which stand where they are not given); feature rows, which carry their
        own batch size (and precision and optimizer, where they have those columns), refuse the ones they carry.

        ``pipeline`` (:class:`gpupred.setups.InputPipeline`) is how its batches reach the GPU: resident (the default,
        as this project's sweeps ran), or read, decoded and augmented on the host by DataLoader workers; the step
        model's timeline then includes it (:mod:`gpupred.step.physics.inputfeed`), and only the physics core answers it.

        :meth:`answer` gives the same prediction as one versioned answer (:mod:`gpupred.predictor.answer`).
        """
        return self._predict_job(x, JobOptions(batch_size, precision, optimizer, gpu, setup), calibration,
                                 pipeline).frame

    def answer(self, x: Any, batch_size: int | None = None, precision: str | None = None,
               optimizer: str | None = None, gpu: str | None = None, calibration: Any = None,
               setup: TrainingSetup | None = None, pipeline: InputPipeline | None = None) -> dict[str, Any]:
        """One job's prediction as the versioned answer ``gpupred predict --json`` prints
        (:data:`gpupred.predictor.answer.ANSWER_SCHEMA`): the resolved inputs, each figure with its interval, the fit
        on the GPU, the memory and time breakdowns and the caveats; the options as :meth:`predict` takes them."""
        from contextlib import nullcontext

        from gpupred.predictor.answer import build_answer

        done = self._predict_job(x, JobOptions(batch_size, precision, optimizer, gpu, setup), calibration, pipeline)
        if len(done.frame) != 1:
            raise GpupredError(f"an answer is for one job, and these feature rows are {len(done.frame)}: use predict "
                               "for many rows")
        own_batch, own_precision, own_optimizer = job_defaults(x)
        done.own = (own_batch, as_setup(None, own_precision, own_optimizer))
        with done.calibration.hardware() if done.calibration is not None else nullcontext():
            return build_answer(self, done)

    def _predict_job(self, x: Any, job: JobOptions, calibration: Any,
                     pipeline: InputPipeline | None) -> "PredictedJob":
        """:meth:`predict`'s work: the frame, and what an answer reads besides (the job, its GPU kind, the
        calibration used)."""
        from contextlib import nullcontext

        from gpupred.calibration.use import resolve_calibration

        if calibration is None and (self.core is None or not isinstance(x, (str, Path))):
            calibration = False  # only a job given as a graph, answered by physics, looks in the user's folder
        cal = resolve_calibration(calibration, job.gpu)
        if job.gpu is None and cal is not None:
            job = JobOptions(job.batch_size, job.precision, job.optimizer, cal.calibration.gpu_name, job.setup)
        piped = pipeline is not None and not pipeline.resident
        with cal.hardware() if cal is not None else nullcontext():
            graph = resolve_graph(x, job)  # a job given as a graph: featurized once
            self._check_setup(job, graph)
            if piped and (graph is None or self.core is None):
                raise GpupredError(f"input pipeline {pipeline.kind!r}: only the physics core models it; give an ONNX "
                                   "file, a workload id or a model by name to a predictor with its physics core")
            if graph is not None and self.core is not None:
                out, kinds = self._predict_graph(graph, job, cal, pipeline if piped else None)
            elif graph is not None:  # its feature row already says the batch, precision and optimizer
                out, kinds = self._predict_rows(graph.features, JobOptions(gpu=job.gpu))
            else:
                out, kinds = self._predict_rows(x, job)
            frame = self._mark_calibration(out, cal, kinds)
        return PredictedJob(frame, x, job, graph, cal, pipeline if piped else RESIDENT, kinds)

    def _predict_graph(self, graph: "JobGraph", job: JobOptions, cal: Any = None,
                       pipeline: InputPipeline | None = None) -> tuple[pd.DataFrame, np.ndarray]:
        """The physics-first core's answer for one job given as a graph (the regressors are not run), and its GPU kind."""
        gpu_name = str(self._gpu_names(set(), None, job.gpu, 1)[0])  # the named GPU, or the only trained one
        from gpupred.predictor.fits import fit_columns

        out = self.core.predict(graph, gpu_name, cal, pipeline or RESIDENT)
        out.update(fit_columns(out["memory_mib"], out["memory_mib_low"], out["memory_mib_high"], gpu_name, self.alpha))
        row = {k: v for k, v in out.items() if k != "extrapolated"}
        frame = pd.DataFrame([{**row, "core": "physics", "extrapolated": bool(out["extrapolated"])}])  # one frame:
        return frame, gpu_kinds(np.asarray([gpu_name], dtype=object))  # inserting columns costs ~0.3 ms each

    def _predict_rows(self, x: Any, job: JobOptions) -> tuple[pd.DataFrame, np.ndarray]:
        """The baseline regressors' answer for feature rows (a dict is one row), and each row's GPU kind."""
        arr, index, kinds = self._matrix(x, job)
        extrapolated = np.asarray([k != "" and k not in self.measured_gpus for k in kinds], dtype=bool)
        strata = x["source"].to_numpy().astype(str) if isinstance(x, pd.DataFrame) and "source" in x.columns else None
        keyed = arr if strata is None else np.column_stack([arr, pd.factorize(strata)[0]])
        first, inverse = distinct_rows(keyed)  # identical rows (a trace repeats its workloads) are predicted once
        unique, unique_strata = arr[first], None if strata is None else strata[first]
        preds = self._few_rows(unique)
        names, columns = [], []
        for name, model in self.targets.items():
            point, low, high = model.predict(unique, unique_strata, None if preds is None else preds[name])
            columns += [point[inverse], low[inverse], high[inverse]]
            if extrapolated.any() and name in self.unseen_widths:
                columns[-2], columns[-1] = widen(columns[-3], columns[-2], columns[-1], self.unseen_widths[name].width,
                                                 extrapolated)
            if name in PERCENT_LABELS:
                columns[-3:] = [np.clip(a, 0, 100) for a in columns[-3:]]
            names += [name, f"{name}_low", f"{name}_high"]
        out = pd.DataFrame(np.column_stack(columns) if columns else np.empty((len(index), 0)), index=index, columns=names)
        out["core"] = "regressor"
        out["extrapolated"] = extrapolated
        return out, kinds

    def _mark_calibration(self, out: pd.DataFrame, cal: Any, kinds: np.ndarray) -> pd.DataFrame:
        """With a calibration, columns ``calibrated`` and ``calibration_note``; a row it answered is not extrapolated.
        (Without one the frame stays as it was: two more columns cost a one-row prediction about a millisecond.)"""
        from gpupred.calibration.use import calibration_status

        if cal is None:
            return out
        software = self.core.calibration_.software if self.core is not None else {}
        keys = [(str(core), str(kind)) for core, kind in zip(out["core"], kinds)]
        status = {k: calibration_status(cal, k[0] == "physics", int(self.measured_gpus.get(k[1], 0)), software)
                  for k in set(keys)}
        used = np.array([status[k][0] for k in keys], dtype=bool)
        out["calibrated"] = np.where(used, cal.shown, "")
        out["calibration_note"] = [status[k][1] for k in keys]
        out["extrapolated"] = out["extrapolated"].to_numpy(bool) & ~used
        return out

    def predict_many(self, jobs: list[Any], gpu: str | None = None) -> pd.DataFrame:
        """One row per job (a :class:`gpupred.predictor.pairing.Job`, an ONNX path, a workload id, a model by name):
        ``job``, ``job_key``, ``model``, ``batch_size``, ``precision``, ``optimizer``, ``gpu`` and :meth:`predict`'s
        columns; each distinct job (model and options) is predicted once, each graph loaded once."""
        from gpupred.predictor.pairing import predict_many

        return predict_many(self, jobs, gpu)

    def slowdown(self, job_a: Any, job_b: Any, gpu: str | None = None, batch_size_a: int | None = None,
                 batch_size_b: int | None = None, precision_a: str | None = None, precision_b: str | None = None,
                 optimizer_a: str | None = None, optimizer_b: str | None = None, calibration: Any = None) -> Any:
        """Each job's slowdown beside the other on ``gpu`` with its interval, and whether the pair fits in memory
        (:class:`gpupred.predictor.pairing.PairSlowdown`). Jobs as :meth:`predict` takes them (or
        :class:`gpupred.predictor.pairing.Job`s), or two rows of :meth:`predict_many` (predicted once, paired often).
        ``calibration``: a file of reference co-runs (:mod:`gpupred.predictor.coruns`). The served estimator is the
        artifact's (:mod:`gpupred.predictor.slowdowns`); an artifact exported without one answers with the
        zero-parameter time-sharing prior and says so."""
        from dataclasses import replace

        from gpupred.predictor.pairing import as_job, pair_slowdown

        if isinstance(job_a, pd.Series) or isinstance(job_b, pd.Series):
            if any(v is not None for v in (batch_size_a, batch_size_b, precision_a, precision_b, optimizer_a, optimizer_b)):
                raise GpupredError("rows of predict_many carry their own options: predict them with the options wanted")
            return pair_slowdown(self, job_a, job_b, gpu, calibration)
        members = []
        for job, batch, precision, optimizer in ((job_a, batch_size_a, precision_a, optimizer_a),
                                                 (job_b, batch_size_b, precision_b, optimizer_b)):
            j = as_job(job)
            members.append(replace(j, batch_size=batch or j.batch_size, precision=precision or j.precision,
                                   optimizer=optimizer or j.optimizer))
        return pair_slowdown(self, members[0], members[1], gpu, calibration)

    def slowdown_matrix(self, jobs: list[Any], gpu: str, calibration: Any = None) -> Any:
        """Every job's slowdown (rows) beside every other (columns) on ``gpu``, with bounds, the pairs' OOM
        probabilities and fits (:class:`gpupred.predictor.pairing.SlowdownMatrix`); jobs, or rows of
        :meth:`predict_many`."""
        from gpupred.predictor.pairing import matrix_from_rows, predict_many

        frame = jobs if isinstance(jobs, pd.DataFrame) else predict_many(self, jobs, gpu)
        if isinstance(jobs, pd.DataFrame) and set(frame["gpu"].astype(str)) != {gpu_spec(gpu).name}:
            raise GpupredError(f"rows predicted on {sorted(set(frame['gpu'].astype(str)))}, asked about {gpu}")
        return matrix_from_rows(self, frame, calibration)


def _regressor_setup_error(training: TrainingSetup, why: str) -> GpupredError:
    """The error for setup options the regressors cannot see."""
    from gpupred.setups import setup_of

    plain = setup_of(training.job_precision, training.job_optimizer)
    options = ", ".join(f"{k}={v}" for k, v in training.as_dict().items() if v != getattr(plain, k))
    return GpupredError(f"training setup {options}: only the physics core models it, and {why}; give an ONNX file or "
                        "a workload id to a predictor exported with its physics core (notebook 08)")


def _check_graph_options(graph: JobGraph) -> None:
    """Refuse the setup options that would change nothing because the graph has none of what they act on."""
    s = graph.setup
    if s.attention != "auto" and not graph.kernels.traits.get("attention_cores", 0):
        raise GpupredError(f"{graph.label}: attention {s.attention!r} changes nothing here, the graph has no "
                           "attention; drop the option")
    if s.channels_last and not graph.features.get("n_conv", 0):
        raise GpupredError(f"{graph.label}: channels_last changes nothing here, the graph has no convolutions; "
                           "drop the option")


def _check_row_options(rows: pd.DataFrame | dict[str, Any], job: JobOptions) -> None:
    """Refuse options that feature rows carry themselves (rather than drop them): the batch size always, the precision
    and optimizer where the rows have those columns and the option says otherwise."""
    if job.batch_size is not None:
        raise GpupredError(f"batch size {job.batch_size}: feature rows carry their own (featurize at the batch size "
                           "wanted), or give an ONNX file or a workload id")
    present = set(rows) if isinstance(rows, dict) else set(rows.columns)
    training = job.training()
    for name, wanted in (("precision", training.job_precision), ("optimizer", training.job_optimizer)):
        given = job.precision if name == "precision" else job.optimizer
        if (given is None and job.setup is None) or name not in present:
            continue
        values = {rows[name]} if isinstance(rows, dict) else set(rows[name].astype(str))
        if values != {wanted}:
            raise GpupredError(f"{name} {wanted!r}: the feature rows carry their own ({', '.join(sorted(values))}); "
                               "featurize with the one wanted, or give an ONNX file or a workload id")


def resolve_graph(x: Any, job: JobOptions) -> JobGraph | None:
    """The :class:`gpupred.predictor.jobgraph.JobGraph` of an input given as an ONNX file, a workload id or a model
    by name, else None (feature rows). A workload id's batch size, precision and optimizer are defaults that the
    job's options override (:meth:`JobOptions.for_workload`)."""
    from gpupred.graph.named import named_graph
    from gpupred.workloads.hubmodels import NamedModel
    from gpupred.predictor.jobgraph import job_graph

    if isinstance(x, NamedModel):  # gpupred.hf_model(...) / gpupred.timm_model(...): its cached graph
        if x.source == "hf" and x.attention is None and job.training().attention == "eager":
            from dataclasses import replace

            x = replace(x, attention="eager")  # as --attention eager builds it: transformers' eager attention
        x = named_graph(x)
    if not isinstance(x, (str, Path)):
        return None
    text = str(x)
    if text.endswith(".onnx") or Path(text).is_file():
        if not Path(text).is_file():
            raise GpupredError(f"{text}: no such ONNX file")
        if job.batch_size is None:
            raise GpupredError(f"{text}: predicting from an ONNX file needs a batch size (batch_size=N / --batch-size N)")
        return job_graph(text, text, int(job.batch_size), job.training())
    from gpupred.graph.graphstore import graph_for
    from gpupred.workloads.spec import WorkloadSpec

    try:
        spec = WorkloadSpec.from_id(text)
    except GpupredError:
        raise GpupredError(f"{text!r} is neither an ONNX file nor a workload id") from None
    from gpupred.step.physics.columns import recipe_of

    batch, setup = job.for_workload(spec)
    return job_graph(graph_for(spec), text, batch, setup, key=spec.arch_key, recipe=recipe_of(spec.family))


def gpu_kinds(names: np.ndarray) -> np.ndarray:
    """The hardware-table name of each GPU name (looked up once per distinct name)."""
    codes, uniques = pd.factorize(np.asarray(names, dtype=object))
    table = np.asarray([gpu_spec(str(u)).name for u in uniques], dtype=object)
    return table[codes] if len(codes) else np.empty(0, dtype=object)


def _split_models(preds: np.ndarray, targets: dict[str, ConformalRegressor]) -> dict[str, np.ndarray]:
    out, start = {}, 0
    for name, model in targets.items():
        k = 1 + len(model.fold_models_)
        out[name] = preds[start:start + k]
        start += k
    return out


def distinct_rows(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct row of ``arr`` (indices, in order of appearance) and, for every row, the index
    of its distinct row (exact: checked, not hashed only)."""
    if len(arr) <= 1:
        return np.arange(len(arr)), np.arange(len(arr))
    hashes = pd.util.hash_pandas_object(pd.DataFrame(arr), index=False).to_numpy()
    codes, firsts = pd.factorize(hashes)
    first_row = np.full(len(firsts), -1)
    first_row[codes[::-1]] = np.arange(len(arr))[::-1]  # the first row of each hash
    unique = arr[first_row]
    same = (unique[codes] == arr) | (np.isnan(unique[codes]) & np.isnan(arr))
    if not same.all():  # a hash collision (never seen): predict every row
        return np.arange(len(arr)), np.arange(len(arr))
    return first_row, codes


def _by_key(a: np.ndarray, b: np.ndarray, lookup: Any, names: list[str]) -> dict[str, np.ndarray]:
    """Columns ``names`` of ``lookup(a_i, b_i)`` for every row, calling ``lookup`` once per distinct (a, b)."""
    if len(a) == 1:
        row = lookup(a[0], b[0])
        return {c: np.asarray([float(row[c])]) for c in names}
    codes_a, uniq_a = pd.factorize(a)
    codes_b, uniq_b = pd.factorize(b)
    key = codes_a * max(len(uniq_b), 1) + codes_b
    distinct, inverse = np.unique(key, return_inverse=True)
    table = np.array([[float(lookup(uniq_a[k // max(len(uniq_b), 1)], uniq_b[k % max(len(uniq_b), 1)])[c]) for c in names]
                      for k in distinct]).reshape(len(distinct), len(names))
    rows = table[inverse.reshape(-1)]
    return {c: rows[:, i] for i, c in enumerate(names)}


def train_predictor(df: pd.DataFrame, models: str | dict[str, str] = "xgboost", alpha: float = 0.1, n_folds: int = 5,
                    tune: bool = True, seed: int = 0, min_sm_rows: int = 10, physics: bool = False,
                    step: StepEstimator | None = None) -> Predictor:
    """Fit one CV+ conformal regressor per target (gpu_util, memory_mib, sm_active when recorded) on every row.

    CV+ folds are grouped by workload (as the grouped-random coverage notebook 03 measures) and residuals
    are kept per source for source-calibrated intervals on dataset rows. With ``physics`` it also fits the
    physics-first core (:class:`gpupred.predictor.core.PhysicsCore`), which answers jobs given as graphs and adds
    iteration time and throughput; it needs every row's graph and the dataset's step-model columns. ``step`` is the
    unfitted :class:`gpupred.step.estimator.StepEstimator` it fits (notebook 03's choice; default: its defaults).
    """
    from threadpoolctl import threadpool_limits

    from gpupred.dataset import feature_columns, validate_dataset
    from gpupred.learn.regressors import make_regressor

    validate_dataset(df)
    feats = feature_columns(df)
    names = ["gpu_util", "memory_mib"] + (["sm_active"] if df.get("sm_active", pd.Series(dtype=float)).notna().sum() >= min_sm_rows else [])
    chosen = {t: (models if isinstance(models, str) else models.get(t) or "xgboost") for t in names}
    targets, widths = {}, {}
    with threadpool_limits(limits=1):
        for t in names:
            data = df[df[t].notna()]
            X, y = data[feats].to_numpy(float), data[t].to_numpy(float)
            model = make_regressor(chosen[t], tune=tune, seed=seed)
            targets[t] = ConformalRegressor(model, alpha, n_folds, seed).fit(
                X, y, groups=data["workload_id"].astype(str).to_numpy(), strata=data["source"].astype(str).to_numpy())
            widths[t] = unseen_gpu_width(model, X, y, data["gpu"].to_numpy(), data["family"].to_numpy(), alpha)
    measured = {str(k): int(v) for k, v in df["gpu"].value_counts().sort_index().items()}
    core = None
    if physics:  # needs every row's graph (the store's, or an imported network's) and the dataset's phys_* columns
        from gpupred.predictor.core import PhysicsCore

        core = PhysicsCore(alpha, seed, step).fit(df)
    return Predictor(feats, targets, chosen, sorted(df["gpu_name"].unique().tolist()), alpha, measured, widths, core)


def source_cards(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per source in the training data: runs, and for imported sources where and under what licence they came from."""
    from gpupred import importers

    out: dict[str, dict[str, Any]] = {}
    for name, n in df["source"].value_counts().sort_index().items():
        entry: dict[str, Any] = {"n_runs": int(n), "gpus": sorted(df.loc[df["source"] == name, "gpu_name"].unique().tolist())}
        if name in importers.SOURCES:
            src = importers.SOURCES[name]
            entry.update({"upstream_repo": src.repo, "commit": src.commit, "licence": src.licence,
                          "measured": src.measured, "citation": src.citation,
                          "files": {f.path: f.sha256 for f in src.files}})
        else:
            entry.update({"licence": "this project's own measurements (MIT, as the package)", "measured": "gpupred sweeps (NVML)"})
        out[str(name)] = entry
    return out


NON_COMMERCIAL = ("Non-commercial use only: trained on Lucid's measurements (S-Lab License 1.0: redistribution and use for "
                  "non-commercial purposes only, notice retained) and GPUMemNet's (no licence file at the pinned commit; "
                  "later upstream READMEs state CC BY-NC 4.0). The restriction passes to this artifact and its predictions.")


def usage_restriction(df: pd.DataFrame) -> str:
    """The licence restriction a predictor trained on ``df`` inherits ('' when it holds only unrestricted data)."""
    return NON_COMMERCIAL if set(df["source"]) & {"lucid", "gpumemnet"} else ""


LICENCE_CLEAN = "licence-clean: trained on this project's own measurements only (MIT, like the code)"
WITH_IMPORTS = "non-commercial: trained on this project's measurements and the imported published ones"


def licence_clean(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` that this project measured itself (what the default, MIT-licensed predictor trains on)."""
    from gpupred.dataset import own_rows

    return own_rows(df)


def variant(df: pd.DataFrame) -> str:
    """Which artifact a predictor trained on ``df`` is: licence-clean, or non-commercial with imported data."""
    return WITH_IMPORTS if usage_restriction(df) else LICENCE_CLEAN


def own_folds(predictor: Predictor) -> dict[str, dict[str, float]]:
    """Per target, the RMSLE of the artifact's own CV+ folds (workload-grouped, out of fold; the model class was
    chosen beforehand by notebook 03, so this is not a nested estimate)."""
    return {t: {"rmsle": float(np.sqrt(np.mean(m.residuals_ ** 2))), "n_rows": int(len(m.residuals_))}
            for t, m in predictor.targets.items()}


def baseline_card(predictor: Predictor) -> dict[str, Any]:
    """What the card says of the baseline regressors (what answers bare feature rows): inputs, models, intervals,
    their own out-of-fold residuals, and how an unmeasured GPU's intervals widen."""
    return {
        "answers": "feature rows without a graph (a featurize dict, dataset rows)",
        "feature_names": predictor.feature_names,
        "targets": {t: {"transform": "log1p", "model": predictor.model_names[t],
                        "interval": f"CV+ conformal, {1 - predictor.alpha:.0%} nominal, workload-grouped folds; "
                                    "calibrated per source for rows that name their source, pooled otherwise"}
                    for t in predictor.targets},
        "model_names": sorted(set(predictor.model_names.values())),
        "own_folds": own_folds(predictor),
        "extrapolation": {"rule": "a GPU in gpupred.hardware without measurements here is predicted with its hardware "
                                  "features and marked extrapolated: no measurements on this GPU",
                          "interval": {t: w.describe() for t, w in predictor.unseen_widths.items()}},
    }


def export_predictor(predictor: Predictor, df: pd.DataFrame, path: Path | None = None,
                     heldout: dict[str, Any] | None = None) -> Path:
    """Write the joblib artifact and its JSON card beside it; return the joblib path. ``heldout``: the shipped
    estimators' held-out figures for this variant (notebook 03's, :mod:`gpupred.predictor.heldout`).

    Re-exporting the very same predictor (same bytes, same card) leaves the card, and so its ``created_at``,
    as it was: ``make all`` on unchanged data changes nothing that is committed.
    """
    import joblib

    from gpupred.files import atomic_write, atomic_write_bytes
    from gpupred.reports import json_safe
    from gpupred.predictor.slowdowns import served_of

    path = Path(path) if path is not None else config.PREDICTOR
    predictor.card = {}
    atomic_write(path, lambda fh: joblib.dump(predictor, fh, compress=3))
    card = {
        "schema_version": SCHEMA_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "variant": variant(df),
        "answers": {"graphs": "the core: a job given as a graph (ONNX file, workload id) is answered by the step and "
                              "memory estimators below, physics x a learned correction",
                    "feature_rows": "the baseline regressors: a bare feature row has no kernels for the step model"},
        "core": predictor.core.describe() if predictor.core is not None else
        "none: every job gets the baseline regressors (exported without the physics core)",
        "heldout": heldout or {},
        "slowdown": served_of(predictor).describe(),
        "gpus": predictor.gpus,
        "measured_gpus": predictor.measured_gpus,
        "usage_restriction": usage_restriction(df),
        "sources": source_cards(df),
        "protocol_of_predictions": "a new job is predicted as this project's sweeps measure: NVML polled every 50 ms, "
                                   "a sync every step, device-resident batches (encodings at their defaults)",
        "baseline": baseline_card(predictor),
        "training_data": {"n_runs": int(len(df)), "n_workloads": int(df["workload_id"].nunique()),
                          "families": sorted(df["family"].unique().tolist()),
                          "fingerprint_sha256": fingerprint(df, [*predictor.feature_names, *predictor.targets])},
        "library_versions": library_versions(),
        "sha256": sha256(path),
    }
    card_path = path.with_suffix(".json")
    text = json.dumps(json_safe(card), indent=2) + "\n"
    if not _same_card(card_path, json.loads(text)):
        atomic_write_bytes(card_path, text.encode())
    return path


def _same_card(path: Path, new: dict[str, Any]) -> bool:
    """Whether the card at ``path`` says what the card ``new`` (as JSON reads it) says, its creation time aside."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return {k: v for k, v in old.items() if k != "created_at"} == {k: v for k, v in new.items() if k != "created_at"}


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(config.ROOT))
    except ValueError:
        return str(path)


def _card_label(shown: str) -> str:
    return shown[: -len(".joblib")] + ".json" if shown.endswith(".joblib") else f"{shown} card"


def read_card(path: Path, shown: str | None = None) -> dict[str, Any]:
    """The predictor card beside ``path``, checked for schema version and the artifact's sha256.

    ``shown`` is how messages name the artifact (the path as the user typed it); default: relative to the project.
    """
    shown = shown or _display(path)
    card_path = path.with_suffix(".json")
    card_shown = _card_label(shown)
    if not card_path.is_file():
        raise GpupredError(f"{card_shown}: predictor card missing; refusing to load {shown} (re-export with notebook 08)")
    card = read_json_object(card_path, "re-export with notebook 08", card_shown)
    if card.get("schema_version") != SCHEMA_VERSION:
        got = card.get("schema_version")
        raise GpupredError(f"{card_shown}: unknown predictor schema version {got!r} (this gpupred reads {SCHEMA_VERSION}); "
                           "re-export with notebook 08 or install the matching gpupred")
    if sha256(path) != card.get("sha256"):
        raise GpupredError(f"{shown}: sha256 does not match its card (tampered or corrupted); refusing to unpickle it")
    return card


def load_predictor(path: str | Path | None = None) -> Predictor:
    """Load a predictor (default: models/predictor.joblib) after checking its card's schema, hash and versions."""
    import joblib

    default = path is None
    shown = _display(config.PREDICTOR) if default else str(path)  # messages name the path as the user typed it
    path = Path(path) if path is not None else config.PREDICTOR
    if not path.is_file():
        raise GpupredError(MISSING_DEFAULT if default else f"{shown}: no predictor there (no such file)")
    card = read_card(path, shown)
    installed = library_versions()
    for lib in CHECKED_LIBRARIES:
        built = card.get("library_versions", {}).get(lib)
        if built is None or not _versions_match(lib, built, installed[lib]):
            raise GpupredError(f"{shown}: built with {lib} {built}, installed {installed[lib]}; "
                               "install the versions in its card or re-export with notebook 08")
    predictor = joblib.load(path)
    if not isinstance(predictor, Predictor):
        raise GpupredError(f"{shown}: not a gpupred Predictor")
    predictor.card = card
    return predictor


EXPORT_METRICS = MetricsSchema("08-export-predictor", (
    (r"predictor_(sha256|noncommercial_sha256|models|usage_restriction)",
     "the exported artifacts' sha256, baseline regressors and usage restriction"),
))
