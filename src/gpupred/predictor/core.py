"""The predictor's physics-first core: the step estimator and the memory estimator, fitted on every labelled row.

For a job given as a graph (an ONNX file, or a workload id whose graph is in the store), the exported predictor
answers from physics (:mod:`gpupred.step.physics`, :mod:`gpupred.memory.physics`) with learned corrections on top, so its answers
scale with the model and the GPU instead of stopping at the largest training label:

- ``gpu_util``, ``sm_active`` and ``iter_time_mean_s`` (seconds per step), with ``samples_per_s`` (batch size / step
  time): :class:`gpupred.step.estimator.StepEstimator`, the very estimator notebook 03 scores on its splits;
- ``memory_mib``: the analytic footprint x a bounded correction (:class:`gpupred.memory.estimator.MemoryEstimator`),
  intervals calibrated on leave-one-family-out residuals of the training rows.

A new job is predicted as this project's sweeps measure it (a sync per step, device-resident batches, NVML polling:
``PROTOCOL``). On a GPU kind whose constants were not fitted under that protocol the step model borrows what the
fitted keys can lend (:meth:`gpupred.step.physics.constants.ConstantsTable.get`); the prediction is marked extrapolated
and its step-model intervals reach at least the extrapolation width the step estimator measured on its training rows;
the footprint's intervals widen by its own rule. On such a GPU with a calibration (``gpupred calibrate``), the measured
constants replace the borrowed ones as :mod:`gpupred.calibration.use` scales them, the prediction is not marked
extrapolated, and its intervals take the calibrated width :mod:`gpupred.calibration.assessment` measured (the
extrapolated width until a GPU-recorded calibration of a measured GPU is committed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.columnar import Columns
from gpupred.dataset import SOURCE_OWN
from gpupred.hardware import gpu_spec
from gpupred.learn.conformal import widen
from gpupred.step.physics.caveats import CAVEATS, widest
from gpupred.setups import FRAMEWORK_DEFAULTS, RESIDENT, InputPipeline
from gpupred.step.estimator import STEP_TARGETS, StepEstimator

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from gpupred.calibration.assessment import CalibratedCore
    from gpupred.memory.estimator import MemoryEstimator
    from gpupred.predictor.jobgraph import JobGraph

CORE_TARGETS: tuple[str, ...] = (*STEP_TARGETS, "samples_per_s", "memory_mib")
PROTOCOL = "nvml-poll"  # how this project's sweeps measure: what a new job is predicted as
BATCH_JOBS = 256  # jobs whose estimators run at once (PhysicsCore.predict_many): bounds the memory of laid-out kernels
EXPLAINED_MEMORY = "memory_explained"  # an explained answer's key: its memory estimate's parts (not a column)


def job_frame(job: JobGraph, gpu: str, pipeline: InputPipeline = RESIDENT) -> tuple[Columns, Any]:
    """One job on one GPU as the estimators read it: its row under ``PROTOCOL`` (:class:`gpupred.columnar.Columns`,
    what ``pd.DataFrame`` of the row would read) and its step-model inputs; a host ``pipeline`` feeds each batch from
    the host (its per-batch times from its host profile)."""
    return jobs_frame([job], gpu, [pipeline])


def jobs_frame(jobs: list[JobGraph], gpu: str, pipelines: list[InputPipeline]) -> tuple[Columns, Any]:
    """Jobs on one GPU as the estimators read them: one row each under ``PROTOCOL`` and their step-model inputs;
    ``pipelines`` (one per job) as :func:`job_frame` takes one."""
    records, physics = job_records(jobs, gpu, pipelines)
    return Columns.from_records(records), physics


def job_records(jobs: list[JobGraph], gpu: str, pipelines: list[InputPipeline]) -> tuple[list[dict[str, Any]], Any]:
    """:func:`jobs_frame`'s rows as records (one dict a job), and their step-model inputs."""
    from gpupred.step.physics.fit import FitRows
    from gpupred.step.physics.inputfeed import loader_columns
    from gpupred.step.rowphysics import PhysicsData, default_rows_columns

    spec = gpu_spec(gpu)
    n = len(jobs)
    memory = [memory_row(job, spec.name) for job in jobs]  # first: their setup errors name the job
    loaders = [job_loader(job, pipeline) for job, pipeline in zip(jobs, pipelines)]
    rows = FitRows([job.kernels for job in jobs], [spec] * n, [job.setup.precision for job in jobs], ["step"] * n,
                   [loader is not None for loader in loaders], np.full(n, np.nan), np.full(n, np.nan),
                   None if all(loader is None for loader in loaders) else loaders)
    records = [{**memory[i], **step,
                **({} if loaders[i] is None else {**loader_columns(loaders[i]), "host_batches": 1.0})}
               for i, step in enumerate(default_rows_columns(rows))]
    return records, PhysicsData(rows, [(spec.name, PROTOCOL)] * n)


def job_loader(job: JobGraph, pipeline: InputPipeline = RESIDENT) -> Any:
    """The per-batch host times (:class:`gpupred.step.physics.timeline.LoaderTimes`) of the pipeline that feeds one job's
    optimizer step, every micro-batch of it (None: resident batches)."""
    if pipeline.resident:
        return None
    from gpupred.predictor.jobs import check_pipeline_inputs
    from gpupred.step.physics.inputfeed import host_costs, loader_times

    check_pipeline_inputs(job, pipeline)

    samples = int(job.row.get("batch_size") or 1) * job.setup.accumulation  # every micro-batch of a step is fed
    return loader_times(pipeline, samples, float(job.kernels.input_bytes), host_costs(pipeline))


def memory_row(job: JobGraph, gpu: str) -> dict[str, Any]:
    """What the memory estimator reads of one job on one GPU under ``PROTOCOL`` (no step kernels needed)."""
    from gpupred.memory.physics import setup_columns

    return {**job.row, **job.terms, **setup_columns(job.setup), "gpu": gpu_spec(gpu).name, "sampler": PROTOCOL,
            "sync": "step", "source": SOURCE_OWN}


class PhysicsCore:
    """The step and memory estimators fitted on a dataset frame (see the module docstring)."""

    step_: StepEstimator  # fitted: the step estimator and the memory estimator, and what calibrations would change
    memory_: MemoryEstimator
    calibration_: CalibratedCore

    def __init__(self, alpha: float = 0.1, seed: int = 0, step: StepEstimator | None = None,
                 calibrations: list[Any] | None = None) -> None:
        self.alpha = alpha
        self.seed = seed
        self.step = step  # an unfitted StepEstimator (notebook 03's choice), default its defaults
        self.calibrations = calibrations  # of measured GPUs (gpupred.calibration.assessment); None: data/calibrations/

    def fit(self, df: pd.DataFrame) -> "PhysicsCore":
        """Fit the step estimator and the memory footprint model on every labelled row; measure what calibrations of
        the measured GPUs would have changed (:func:`gpupred.calibration.assessment.calibrated_core`)."""
        from sklearn.base import clone

        from gpupred.calibration.assessment import calibrated_core
        from gpupred.physicstables import with_terms
        from gpupred.memory.estimator import MemoryEstimator
        from gpupred.step.rowphysics import physics_data

        step = clone(self.step) if self.step is not None else StepEstimator(alpha=self.alpha, seed=self.seed)
        targets = tuple(t for t in step.targets if t in df.columns and df[t].notna().sum() >= 10)
        pdata = physics_data(df)
        self.step_ = step.set_params(targets=targets).fit(df, pdata)
        memory_frame = with_terms(df)
        self.memory_ = MemoryEstimator(seed=self.seed).fit(memory_frame)
        self.measured_ = sorted({str(g) for g in df["gpu"]})
        self.calibration_ = calibrated_core(df, pdata, self.step_.constants_, memory_frame, self.alpha,
                                            self.calibrations, PROTOCOL)
        return self

    def predict(self, job: JobGraph, gpu: str, calibration: Any = None, pipeline: InputPipeline = RESIDENT) -> dict[str, Any]:
        """Each core target's point and ``_low``/``_high`` bounds for one job on one GPU, ``extrapolated`` and
        ``caveats``; a calibration (:class:`gpupred.calibration.use.AppliedCalibration`) of a GPU without fits replaces
        its borrowed constants; ``pipeline`` the host input pipeline that feeds it (:mod:`gpupred.step.physics.inputfeed`).
        Throughput is the samples of one optimizer step (batch x accumulation) over its time."""
        return self.predict_many([job], gpu, calibration, [pipeline])[0]

    def predict_many(self, jobs: list[JobGraph], gpu: str, calibration: Any = None,
                     pipelines: list[InputPipeline] | None = None, explain: bool = False) -> list[dict[str, Any]]:
        """:meth:`predict` of each job on one GPU, the estimators run once per ``BATCH_JOBS`` of them (a scheduler's
        queue). The step model's timeline of a batch sums its kernels in one pass, so an answer agrees with
        :meth:`predict`'s of the job alone to about 1e-11 (relative), not to the last bit. ``explain``: each answer
        also holds ``EXPLAINED_MEMORY``, its row of the memory estimate's parts (what an answer's breakdown reads)."""
        pipelines = pipelines if pipelines is not None else [RESIDENT] * len(jobs)
        out: list[dict[str, Any]] = []
        for at in range(0, len(jobs), BATCH_JOBS):
            out += self._predict_batch(jobs[at:at + BATCH_JOBS], gpu, calibration, pipelines[at:at + BATCH_JOBS],
                                       explain)
        return out

    def _predict_batch(self, jobs: list[JobGraph], gpu: str, calibration: Any, pipelines: list[InputPipeline],
                       explain: bool = False) -> list[dict[str, Any]]:
        """:meth:`predict_many` of at most ``BATCH_JOBS`` jobs."""
        frame, physics = jobs_frame(jobs, gpu, pipelines)
        name = gpu_spec(gpu).name
        use = self.calibration_used(name, calibration)
        constants, memory = self._calibrated(name, use)
        measured = {} if use is None else self.calibration_.widths  # a calibrated GPU's widths, once measured
        step = self.step_.predict_columns(frame, physics, constants=constants, widths=measured or None)
        explained = memory.explain(frame)
        columns = {c: v.tolist() for c, v in step.items()}  # plain values, as a frame's to_dict("records") gives
        outs = [{c: v[i] for c, v in columns.items()} for i in range(len(frame))]
        figures = {k: explained.figures[k] for k in ("footprint*correction", "low", "high", "reserved", "allocated")}
        fitted = self.fitted_architecture(name)
        for i, (job, out) in enumerate(zip(jobs, outs)):
            caveats = self.caveats(job, name, fitted)
            self._widen(out, widest(caveats))
            samples = float(job.row.get("batch_size") or 0.0) * job.setup.accumulation
            if samples and "iter_time_mean_s" in out:
                out.update(samples_per_s=samples / out["iter_time_mean_s"], samples_per_s_low=samples / out[
                    "iter_time_mean_s_high"], samples_per_s_high=samples / out["iter_time_mean_s_low"])
            out.update({"memory_mib": float(figures["footprint*correction"][i]),
                        "memory_mib_low": float(figures["low"][i]), "memory_mib_high": float(figures["high"][i]),
                        "memory_reserved_mib": float(figures["reserved"][i]),
                        "memory_allocated_mib": float(figures["allocated"][i])})
            if "memory_mib" in measured:  # a measured width replaces the extrapolated rule's
                out["memory_mib_low"], out["memory_mib_high"] = (
                    out["memory_mib"] * float(np.exp(s * measured["memory_mib"])) for s in (-1, 1))
            out["extrapolated"] = bool(out.get("extrapolated", False))
            out["caveats"] = ",".join(caveats)
            if explain:
                out[EXPLAINED_MEMORY] = explained.row(i)
        return outs

    def calibration_used(self, gpu: str, calibration: Any) -> Any:
        """The calibration a prediction on a GPU kind uses: the one given, unless the GPU was measured (None)."""
        return calibration if calibration is not None and gpu_spec(gpu).name not in self.measured_ else None

    def models_for(self, gpu: str, calibration: Any = None) -> tuple[Any, Any]:
        """(step constants, memory estimator) a prediction on a GPU kind uses: the fitted (or borrowed) constants
        and the fitted memory model, or what a calibration it uses makes of them (:meth:`predict`'s own)."""
        name = gpu_spec(gpu).name
        constants, memory = self._calibrated(name, self.calibration_used(name, calibration))
        return (self.step_.constants_.get(name, PROTOCOL) if constants is None else constants), memory

    def _widen(self, out: dict[str, Any], width: float) -> None:
        """Widen the step-model targets' bounds in ``out`` to at least ``width`` (a failure class's:
        :mod:`gpupred.step.physics.caveats`; log of the step time, log1p of utilization, capped at 100 %)."""
        if width <= 0:
            return
        for target in STEP_TARGETS:
            if target not in out:
                continue
            step = target == "iter_time_mean_s"
            lo, hi = (float(v[0]) for v in widen(np.array([out[target]]), np.array([out[f"{target}_low"]]),
                                                 np.array([out[f"{target}_high"]]), width, np.array([True]),
                                                 log1p=not step))
            out[f"{target}_low"], out[f"{target}_high"] = lo, hi if step else min(100.0, hi)

    def caveats(self, job: JobGraph, gpu: str, fitted: bool | None = None) -> list[str]:
        """The failure classes the job shows on a GPU kind (:func:`gpupred.step.physics.caveats.job_caveats`), its kernels timed
        with the constants its prediction uses where the classes read their times (an architecture without fits);
        ``fitted``: :meth:`fitted_architecture` of the GPU, where known."""
        from gpupred.step.physics.caveats import job_caveats, time_shares
        from gpupred.step.physics.kernels import DEPTHWISE, MATMUL
        from gpupred.step.physics.timeline import kernel_times, on_tensor_cores

        kl, table = job.kernels, self.step_.constants_
        fitted = self.fitted_architecture(gpu) if fitted is None else fitted
        shares: dict[str, float] = {}  # a fitted architecture's classes read no time shares
        if not fitted:
            times = kernel_times(kl, gpu_spec(gpu), kl.precision, table.get(gpu, PROTOCOL))
            shares = time_shares(times, kl.tensor_core == DEPTHWISE,
                                 (kl.tensor_core == MATMUL) & ~on_tensor_cores(kl, kl.precision))
        return job_caveats(getattr(kl, "traits", {}), shares, fitted)

    def fitted_architecture(self, gpu: str) -> bool:
        """Whether the step constants were fitted on a GPU of this GPU kind's architecture."""
        from gpupred.hardware import architecture

        return any(architecture(g) == architecture(gpu) for g, _ in self.step_.constants_.fitted)

    def _calibrated(self, gpu: str, use: Any) -> tuple[Any, Any]:
        """(step constants, memory model) for a GPU: (None, the fitted model) without a calibration to use."""
        if use is None:
            return None, self.memory_
        import copy

        ref = self.calibration_.reference
        constants = use.step_constants(self.step_.constants_.get(gpu, PROTOCOL), ref)
        memory = copy.copy(self.memory_)
        memory.footprint_ = use.footprint(self.memory_.footprint_, f"{gpu}|{SOURCE_OWN}", ref)
        return constants, memory

    def describe(self) -> dict[str, Any]:
        """What the card says of the core: the step estimator, the memory model, the GPU kinds measured and calibrated,
        the failure classes and the training setups it models."""
        return {
            "step": self.step_.describe(), "memory": self.memory_.describe(), "measured_gpus": self.measured_,
            "calibrated_gpus": self.calibration_.describe(),
            "failure_classes": {"rule": "a job showing one of these classes gets step-model intervals at least "
                                        "log_width wide (log of the step time, log1p of utilization) and names it in "
                                        "its prediction's 'caveats' (gpupred.step.physics.caveats)",
                                **{n: c.describe() for n, c in CAVEATS.items()}},
            "training_setup": {"modelled": "precision (fp32 with TF32 flags, bf16/fp16 autocast, pure bf16), SGD/Adam/"
                                           "AdamW foreach/fused/forloop, bitsandbytes' 8-bit and paged AdamW, "
                                           "Adafactor, LoRA and QLoRA (gpupred.finetune), activation checkpointing, "
                                           "gradient accumulation, attention auto/eager/sdpa/flash, channels_last: in "
                                           "the step model and the footprint (gpupred.setups); the corrections were "
                                           "trained on the sweeps' setup only: the other setups go through the "
                                           "physics with the sweeps' correction, unretrained",
                               "defaults": FRAMEWORK_DEFAULTS,
                               "models_by_name": "--hf models are built with transformers' default attention (SDPA "
                                                 "where the model has it) since named recipe 4, eager with --attention "
                                                 "eager; graphs exported before keep the eager attention they were "
                                                 "exported with"},

        }
