"""The :class:`Predictor` an exported artifact holds: a job (an ONNX file, a workload id, a model by name, feature rows)
in, each target with its interval out; and the array helpers its predictions run on.

Nothing here imports torch; only predicting from a workload id does, through ``gpupred.graph.export``. Nor does a job
answered by the physics core import pandas: its row stays a dict until a frame is asked for (:meth:`Predictor.predict`),
so a cold ``gpupred predict`` loads neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.columnar import is_frame, is_series
from gpupred.dataset import PERCENT_LABELS
from gpupred.errors import GpupredError
from gpupred.hardware import HARDWARE_COLUMNS, gpu_spec, hardware_features
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.conformal import widen
from gpupred.learn.params import pack_payload, unpack_payload
from gpupred.predictor.extrapolate import UnseenGpuWidth
from gpupred.predictor.jobs import (JobOptions, PredictedJob, check_graph_options, check_row_options,
                                    check_setup_on_gpu, regressor_setup_error, resolve_graph)
from gpupred.predictor.pairing import job_defaults
from gpupred.setups import RESIDENT, InputPipeline, TrainingSetup, as_setup

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from gpupred.predictor.core import PhysicsCore
    from gpupred.predictor.jobgraph import JobGraph


TARGETS_PAYLOAD = "targets_payload_"  # where a pickled predictor keeps its baseline regressors until first used


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
        if isinstance(x, dict) or is_frame(x):
            if isinstance(x, dict):
                from gpupred.graph.coverage import check_complete

                check_complete(x, "feature row")  # a featurize row carries its coverage columns
            check_row_options(x, job)
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
        import pandas as pd

        matrix, index, _ = self._matrix(x, JobOptions(batch_size, precision, optimizer, gpu, setup))
        return pd.DataFrame(matrix, index=index, columns=self.feature_names)

    def _matrix(self, x: Any, job: JobOptions) -> tuple[np.ndarray, pd.Index, np.ndarray]:
        """The model inputs as one float array (rows x ``feature_names``), the rows' index, and each row's GPU kind
        ('' where the rows carry hardware columns but no GPU name)."""
        from gpupred.dataset import ENCODED_COLUMNS, encode

        data = self._frame(x, job)
        if isinstance(data, dict):  # one row: no DataFrame on the way (it costs more than the prediction)
            import pandas as pd

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
        """Pickle without the combined forest (rebuilt from the targets' on first use), the baseline regressors
        packed as one payload: a job given as a graph, answered by the core, never unpacks them (0.12 s of a cold
        ``gpupred predict FILE`` was decompressing them)."""
        state = {k: v for k, v in self.__dict__.items() if k != "_forest"}
        if "targets" in state:
            state[TARGETS_PAYLOAD] = pack_payload(state.pop("targets"))
        return state

    def __getattr__(self, name: str) -> Any:
        """``targets``, unpacked on first use."""
        if name == "targets" and TARGETS_PAYLOAD in self.__dict__:
            self.__dict__["targets"] = unpack_payload(self.__dict__.pop(TARGETS_PAYLOAD))
            return self.__dict__["targets"]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _check_setup(self, job: JobOptions, graph: "JobGraph | None") -> None:
        """Refuse setup options the answer could not see: the regressors know the catalog's precisions and
        optimizers only (the physics core, answering for graphs, models every option), and options that name what
        the graph has none of (an attention kernel without attention, channels_last without convolutions)."""
        from gpupred.setups import setup_of

        training = graph.setup if graph is not None else job.training()
        if graph is not None and self.core is not None:
            check_graph_options(graph)
        if training == setup_of(training.job_precision, training.job_optimizer):
            return
        if graph is None:
            raise regressor_setup_error(training, "these rows are feature rows (answered by the regressors)")
        if self.core is None:
            raise regressor_setup_error(training, "this predictor has no physics core")

    def _gpu_names(self, present: set[str], column: Any, gpu: str | None, n: int) -> np.ndarray:
        if gpu is not None:
            return np.full(n, gpu, dtype=object)
        if "gpu_name" in present:
            return column("gpu_name")
        return np.full(n, self.default_gpu(), dtype=object)

    def default_gpu(self) -> str:
        """The GPU a job that names none is predicted on: the one GPU kind this predictor was trained on. Trained on
        several (the shipped predictors are), it refuses, naming them as the hardware table does."""
        if len(self.gpus) == 1:
            return self.gpus[0]
        from gpupred.hardware import shown_gpu_name

        names = ", ".join(dict.fromkeys(shown_gpu_name(g) for g in self.gpus))
        raise GpupredError(f"this predictor was trained on several GPUs ({names}): name the one the job runs on "
                           "(--gpu NAME / gpu=...; `gpupred gpus` lists every GPU it answers for)")

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
        if len(done) != 1:
            raise GpupredError(f"an answer is for one job, and these feature rows are {len(done)}: use predict "
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
        if piped and cal is not None:
            pipeline = cal.feeding(pipeline)  # on the GPU host's cores, as calibrate measured them
        with cal.hardware() if cal is not None else nullcontext():
            graph = resolve_graph(x, job)  # a job given as a graph: featurized once
            self._check_setup(job, graph)
            if piped and (graph is None or self.core is None):
                raise GpupredError(f"input pipeline {pipeline.kind!r}: only the physics core models it; give an ONNX "
                                   "file, a workload id or a model by name to a predictor with its physics core")
            memory = None
            if graph is not None and self.core is not None:
                row, kinds, memory = self._predict_graph(graph, job, cal, pipeline if piped else None)
                result: pd.DataFrame | dict[str, Any] = self._mark_records([row], cal, kinds)[0]
            else:
                if graph is not None:  # its feature row already says the batch, precision and optimizer
                    out, kinds = self._predict_rows(graph.features, JobOptions(gpu=job.gpu))
                else:
                    out, kinds = self._predict_rows(x, job)
                result = self._mark_calibration(out, cal, kinds)
        return PredictedJob(result, x, job, graph, cal, pipeline if piped else RESIDENT, kinds, memory)

    def _predict_graph(self, graph: "JobGraph", job: JobOptions, cal: Any = None,
                       pipeline: InputPipeline | None = None) -> tuple[dict[str, Any], np.ndarray, Any]:
        """The physics-first core's answer (a row) for one job given as a graph (the regressors are not run), its GPU
        kind, and its memory estimate's parts (:class:`gpupred.memory.estimator.MemoryParts`)."""
        from gpupred.predictor.core import EXPLAINED_MEMORY

        gpu_name = str(self._gpu_names(set(), None, job.gpu, 1)[0])  # the named GPU, or the only trained one
        row = self._physics_rows([graph], gpu_name, cal, [pipeline or RESIDENT], explain=True)[0]
        memory = row.pop(EXPLAINED_MEMORY)
        return row, gpu_kinds(np.asarray([gpu_name], dtype=object)), memory

    def _physics_rows(self, graphs: list["JobGraph"], gpu_name: str, cal: Any, pipelines: list[InputPipeline],
                      explain: bool = False) -> list[dict[str, Any]]:
        """The physics-first core's row (its answer, the fit on the GPU, ``core``, ``extrapolated``) for each job
        given as a graph, on one GPU kind, the estimators run once over them all (``explain``: with its memory
        estimate's parts, :meth:`gpupred.predictor.core.PhysicsCore.predict_many`)."""
        from gpupred.predictor.fits import fit_columns

        for setup in {graph.setup for graph in graphs}:  # a queue's few setups (a refusal is named one by one)
            check_setup_on_gpu(setup, gpu_name)
        rows = []
        for out in self.core.predict_many(graphs, gpu_name, cal, pipelines, explain):
            out.update(fit_columns(out["memory_mib"], out["memory_mib_low"], out["memory_mib_high"], gpu_name,
                                   self.alpha))
            extrapolated = bool(out.pop("extrapolated"))
            rows.append({**out, "core": "physics", "extrapolated": extrapolated})
        return rows

    def predict_records(self, jobs: list[tuple[Any, JobOptions, InputPipeline | None]],
                        labels: list[str]) -> list[dict[str, Any]]:
        """:meth:`predict`'s row for each job (its input, options and pipeline) as a record: what
        :meth:`predict_many` lists. Jobs given as graphs (ONNX files, workload ids) to a predictor with a physics core
        are answered together, the core's estimators run once per GPU kind and calibration over all of them; the
        rest one by one. A job's error names it by its label. :func:`gpupred.predictor.pairing.predict_many`, its caller,
        answers them from one look at the files with the garbage collector paused."""
        from contextlib import nullcontext

        from gpupred.calibration.use import resolve_calibration

        records: dict[int, dict[str, Any]] = {}
        groups: dict[tuple[str, int], tuple[Any, list[int], list[Any], list[InputPipeline]]] = {}
        calibrations: dict[Any, Any] = {}
        for i, ((x, job, pipeline), label) in enumerate(zip(jobs, labels)):
            try:
                if self.core is None or not isinstance(x, (str, Path)):
                    records[i] = self._predict_job(x, job, None, pipeline).first_row()
                    continue
                if job.gpu not in calibrations:
                    calibrations[job.gpu] = resolve_calibration(None, job.gpu)
                cal = calibrations[job.gpu]
                if job.gpu is None and cal is not None:
                    job = JobOptions(job.batch_size, job.precision, job.optimizer, cal.calibration.gpu_name, job.setup)
                with cal.hardware() if cal is not None else nullcontext():
                    graph = resolve_graph(x, job)
                    self._check_setup(job, graph)
                    gpu_name = str(self._gpu_names(set(), None, job.gpu, 1)[0])
                    _ = (graph.kernels, graph.terms, graph.row)  # computed while its graph is loaded; an error names it
            except GpupredError as err:
                raise GpupredError(f"job {label}: {err}") from None
            piped = pipeline if pipeline is not None and not pipeline.resident else RESIDENT
            if cal is not None:
                piped = cal.feeding(piped)  # as :meth:`_predict_job` does
            _, idx, graphs, pipelines = groups.setdefault((gpu_name, id(cal)), (cal, [], [], []))
            idx.append(i)
            graphs.append(graph)
            pipelines.append(piped)
        for (gpu_name, _), (cal, idx, graphs, pipelines) in groups.items():
            with cal.hardware() if cal is not None else nullcontext():
                try:
                    rows = self._physics_rows(graphs, gpu_name, cal, pipelines)
                except GpupredError:  # one by one, to name the job
                    rows = [self._named_row(graph, gpu_name, cal, pipeline, labels[i])
                            for i, graph, pipeline in zip(idx, graphs, pipelines)]
                rows = self._mark_records(rows, cal, gpu_kinds(np.full(len(rows), gpu_name, dtype=object)))
            records.update(zip(idx, rows))
        return [records[i] for i in range(len(jobs))]

    def _named_row(self, graph: "JobGraph", gpu_name: str, cal: Any, pipeline: InputPipeline,
                   label: str) -> dict[str, Any]:
        """One job's :meth:`_physics_rows` row, its error naming it by ``label``."""
        try:
            return self._physics_rows([graph], gpu_name, cal, [pipeline])[0]
        except GpupredError as err:
            raise GpupredError(f"job {label}: {err}") from None

    def _predict_rows(self, x: Any, job: JobOptions) -> tuple[pd.DataFrame, np.ndarray]:
        """The baseline regressors' answer for feature rows (a dict is one row), and each row's GPU kind."""
        import pandas as pd

        arr, index, kinds = self._matrix(x, job)
        extrapolated = np.asarray([k != "" and k not in self.measured_gpus for k in kinds], dtype=bool)
        strata = x["source"].to_numpy().astype(str) if is_frame(x) and "source" in x.columns else None
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
        if cal is None:
            return out
        used, notes = self._calibration_status(cal, out["core"], kinds)
        out["calibrated"] = np.where(used, cal.shown, "")
        out["calibration_note"] = notes
        out["extrapolated"] = out["extrapolated"].to_numpy(bool) & ~used
        return out

    def _mark_records(self, rows: list[dict[str, Any]], cal: Any, kinds: np.ndarray) -> list[dict[str, Any]]:
        """:meth:`_mark_calibration` of rows kept as dicts (marked in place, and returned)."""
        if cal is None:
            return rows
        used, notes = self._calibration_status(cal, [row["core"] for row in rows], kinds)
        for row, use, note in zip(rows, used, notes):
            row.update(calibrated=cal.shown if use else "", calibration_note=note,
                       extrapolated=bool(row["extrapolated"]) and not use)
        return rows

    def _calibration_status(self, cal: Any, cores: Any, kinds: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Whether a calibration answered each row (by what answered it and its GPU kind), and each row's note."""
        from gpupred.calibration.use import calibration_status

        software = self.core.calibration_.software if self.core is not None else {}
        keys = [(str(core), str(kind)) for core, kind in zip(cores, kinds)]
        status = {k: calibration_status(cal, k[0] == "physics", int(self.measured_gpus.get(k[1], 0)), software)
                  for k in set(keys)}
        return np.array([status[k][0] for k in keys], dtype=bool), [status[k][1] for k in keys]

    def predict_many(self, jobs: list[Any], gpu: str | None = None) -> pd.DataFrame:
        """One row per job (a :class:`gpupred.predictor.pairing.Job`, an ONNX path, a workload id, a model by name):
        ``job``, ``job_key``, ``model``, ``batch_size``, ``precision``, ``optimizer``, ``gpu`` and :meth:`predict`'s
        columns; each distinct job (model and options) is predicted once, each graph loaded once."""
        from gpupred.predictor.pairing import predict_many

        return predict_many(self, jobs, gpu)

    def slowdown(self, job_a: Any, job_b: Any, gpu: str | None = None, batch_size_a: int | None = None,
                 batch_size_b: int | None = None, precision_a: str | None = None, precision_b: str | None = None,
                 optimizer_a: str | None = None, optimizer_b: str | None = None, coruns: Any = None) -> Any:
        """Each job's slowdown beside the other on ``gpu`` with its interval, and whether the pair fits in memory
        (:class:`gpupred.predictor.pairing.PairSlowdown`). Jobs as :meth:`predict` takes them (or
        :class:`gpupred.predictor.pairing.Job`s), or two rows of :meth:`predict_many` (predicted once, paired often).
        ``coruns``: a file of reference co-runs (:mod:`gpupred.predictor.coruns`). The served estimator is the
        artifact's (:mod:`gpupred.predictor.slowdowns`); an artifact exported without one answers with the
        zero-parameter time-sharing prior and says so."""
        from dataclasses import replace

        from gpupred.predictor.pairing import as_job, pair_slowdown

        if is_series(job_a) or is_series(job_b):
            if any(v is not None for v in (batch_size_a, batch_size_b, precision_a, precision_b, optimizer_a, optimizer_b)):
                raise GpupredError("rows of predict_many carry their own options: predict them with the options wanted")
            return pair_slowdown(self, job_a, job_b, gpu, coruns)
        members = []
        for job, batch, precision, optimizer in ((job_a, batch_size_a, precision_a, optimizer_a),
                                                 (job_b, batch_size_b, precision_b, optimizer_b)):
            j = as_job(job)
            members.append(replace(j, batch_size=batch or j.batch_size, precision=precision or j.precision,
                                   optimizer=optimizer or j.optimizer))
        return pair_slowdown(self, members[0], members[1], gpu, coruns)

    def slowdown_matrix(self, jobs: list[Any], gpu: str, coruns: Any = None) -> Any:
        """Every job's slowdown (rows) beside every other (columns) on ``gpu``, with bounds, the pairs' OOM
        probabilities and fits (:class:`gpupred.predictor.pairing.SlowdownMatrix`); jobs, or rows of
        :meth:`predict_many`."""
        from gpupred.predictor.pairing import matrix_from_rows, predict_many

        frame = jobs if is_frame(jobs) else predict_many(self, jobs, gpu)
        if is_frame(jobs) and set(frame["gpu"].astype(str)) != {gpu_spec(gpu).name}:
            raise GpupredError(f"rows predicted on {sorted(set(frame['gpu'].astype(str)))}, asked about {gpu}")
        return matrix_from_rows(self, frame, coruns)


def gpu_kinds(names: np.ndarray) -> np.ndarray:
    """The hardware-table name of each GPU name (looked up once per distinct name; an unknown one fails)."""
    listed = np.asarray(names, dtype=object).tolist()
    table = {name: gpu_spec(str(name)).name for name in dict.fromkeys(listed)}
    return np.asarray([table[name] for name in listed], dtype=object) if listed else np.empty(0, dtype=object)


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
    import pandas as pd

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
    import pandas as pd

    codes_a, uniq_a = pd.factorize(a)
    codes_b, uniq_b = pd.factorize(b)
    key = codes_a * max(len(uniq_b), 1) + codes_b
    distinct, inverse = np.unique(key, return_inverse=True)
    table = np.array([[float(lookup(uniq_a[k // max(len(uniq_b), 1)], uniq_b[k % max(len(uniq_b), 1)])[c]) for c in names]
                      for k in distinct]).reshape(len(distinct), len(names))
    rows = table[inverse.reshape(-1)]
    return {c: rows[:, i] for i, c in enumerate(names)}
