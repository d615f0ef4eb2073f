"""How a job's options resolve: the options a prediction is asked under (:class:`JobOptions`), the graph an input
names (:func:`resolve_graph`), the checks that refuse options an answer could not see, and what one prediction
carries to its answer (:class:`PredictedJob`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.errors import GpupredError
from gpupred.files import is_file
from gpupred.setups import InputPipeline, TrainingSetup, as_setup

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from gpupred.predictor.jobgraph import JobGraph


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
    """One :meth:`gpupred.predictor.predictor.Predictor.predict` call's rows and what its answer reads besides
    (:mod:`gpupred.predictor.answer`).

    A job answered by the physics core keeps its row as a dict, so that an answer is built without pandas (a cold
    ``gpupred predict`` then never imports it); :attr:`frame` is the row as ``predict`` returns it."""

    result: pd.DataFrame | dict[str, Any]  # the regressors' frame, or the physics core's one row
    x: Any  # the job as given: an ONNX path, a workload id, a model by name, feature rows
    job: JobOptions
    graph: "JobGraph | None"  # None: feature rows (answered by the regressors)
    calibration: Any  # gpupred.calibration.use.AppliedCalibration, or None
    pipeline: InputPipeline
    kinds: np.ndarray  # each row's GPU kind ('' where the rows name none)
    memory: Any = None  # a job answered by the physics core: its memory estimate's parts (gpupred.memory.estimator)
    own: tuple[int | None, TrainingSetup] | None = None  # the job's own batch size and setup (a workload id's)

    @property
    def frame(self) -> pd.DataFrame:
        """The rows as a frame (what :meth:`gpupred.predictor.predictor.Predictor.predict` returns)."""
        if isinstance(self.result, dict):
            import pandas as pd

            return pd.DataFrame([self.result])
        return self.result

    def __len__(self) -> int:
        return 1 if isinstance(self.result, dict) else len(self.result)

    def first_row(self) -> dict[str, Any]:
        """The first row, as plain values (what ``frame.iloc[0].to_dict()`` gives)."""
        return dict(self.result) if isinstance(self.result, dict) else self.result.iloc[0].to_dict()


def regressor_setup_error(training: TrainingSetup, why: str) -> GpupredError:
    """The error for setup options the regressors cannot see."""
    from gpupred.setups import setup_of

    plain = setup_of(training.job_precision, training.job_optimizer)
    options = ", ".join(f"{k}={v}" for k, v in training.as_dict().items() if v != getattr(plain, k))
    return GpupredError(f"training setup {options}: only the physics core models it, and {why}; give an ONNX file or "
                        "a workload id to a predictor exported with its physics core (notebook 08)")


def check_setup_on_gpu(setup: TrainingSetup, gpu: str) -> None:
    """Refuse, in one line, a setup the GPU cannot run as modelled: bfloat16 (autocast or pure, QLoRA's compute) and
    FlashAttention-2 need compute capability 8.0 or later (:func:`gpupred.hardware.bf16_native`). Before it torch
    emulates bf16 on the CUDA cores (matmuls slower than fp32: pytorch/pytorch#148322; no cuDNN bf16 convolutions),
    transformers' Trainer refuses ``bf16=True`` and FlashAttention-2 does not build: an answer would be a guess."""
    from gpupred.hardware import bf16_native, compute_capability, gpu_spec

    if bf16_native(gpu):
        return
    shown = f"{gpu_spec(gpu).name} (compute capability {compute_capability(gpu)})"
    if setup.precision in ("bf16", "bf16-pure"):
        raise GpupredError(f"{shown} has no bfloat16: torch only emulates it there (matmuls slower than fp32, no cuDNN "
                           f"bf16 convolutions) and transformers' Trainer refuses bf16; precision {setup.precision!r} "
                           "is refused rather than guessed: use fp16 (autocast with GradScaler) or fp32")
    if setup.attention == "flash":
        raise GpupredError(f"{shown}: FlashAttention-2 needs compute capability 8.0 or later; use attention sdpa")


def setup_runs_on(setup: TrainingSetup, gpu: str) -> bool:
    """Whether :func:`check_setup_on_gpu` lets the setup run on the GPU."""
    try:
        check_setup_on_gpu(setup, gpu)
    except GpupredError:
        return False
    return True


def check_graph_options(graph: JobGraph) -> None:
    """Refuse the setup options that would change nothing because the graph has none of what they act on."""
    s = graph.setup
    if s.attention != "auto" and not graph.kernels.traits.get("attention_cores", 0):
        raise GpupredError(f"{graph.label}: attention {s.attention!r} changes nothing here, the graph has no "
                           "attention; drop the option")
    if s.channels_last and not graph.features.get("n_conv", 0):
        raise GpupredError(f"{graph.label}: channels_last changes nothing here, the graph has no convolutions; "
                           "drop the option")


TOKEN_INPUTS = (6, 7)  # ONNX INT32, INT64: token ids
FLOAT_INPUTS = (1, 10, 11, 16)  # ONNX FLOAT, FLOAT16, DOUBLE, BFLOAT16
# what each pipeline kind hands the model, as graph inputs: (what it is, ONNX element types). Any rank: a dataset's
# transforms may flatten an image (an MLP on MNIST's pixels) or pad token ids into any layout
PIPELINE_INPUTS: dict[str, tuple[str, tuple[int, ...]]] = {
    "image-files": ("decoded images (floats)", FLOAT_INPUTS),
    "text-tokens": ("token ids (integers)", TOKEN_INPUTS),
    "audio-logmel": ("log-mel frames (floats)", FLOAT_INPUTS),
}


def check_pipeline_inputs(graph: JobGraph, pipeline: InputPipeline) -> None:
    """Refuse a host pipeline whose batches the graph cannot take (image files for a language model, which takes only
    token ids; token ids for an image classifier): the pipeline would be costed for nothing the model reads. Host tensors, array files and a
    measured loader hand over whatever the job's own dataset holds, and a graph whose inputs are unknown is not
    judged."""
    wanted = PIPELINE_INPUTS.get(pipeline.kind)
    if wanted is None or not graph.inputs:
        return
    what, elems = wanted
    if any(elem in elems for _name, elem, _dims in graph.inputs):
        return
    from onnx import TensorProto

    takes = ", ".join(f"{name} {TensorProto.DataType.Name(elem).lower()} {list(dims)}"
                      for name, elem, dims in graph.inputs)
    fits = [kind for kind, (_w, e) in PIPELINE_INPUTS.items() if any(elem in e for _n, elem, _d in graph.inputs)]
    raise GpupredError(f"{graph.label}: --data {pipeline.kind} hands the model {what}, and it takes none (its inputs: "
                       f"{takes}); use {' or '.join([*fits, 'host-tensors', 'array-files', 'measured'])}")


def check_row_options(rows: pd.DataFrame | dict[str, Any], job: JobOptions) -> None:
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
    from gpupred.graph.named import named_graph, named_label
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
    if text.endswith(".onnx") or is_file(text):
        if not is_file(text):
            raise GpupredError(f"{text}: no such ONNX file")
        if job.batch_size is None:
            raise GpupredError(f"{text}: predicting from an ONNX file needs a batch size (batch_size=N / --batch-size N)")
        return job_graph(text, named_label(text) or text, int(job.batch_size), job.training())
    from gpupred.graph.graphstore import graph_for
    from gpupred.workloads.spec import WorkloadSpec

    try:
        spec = WorkloadSpec.from_id(text)
    except GpupredError:
        raise GpupredError(f"{text!r} is neither an ONNX file nor a workload id") from None
    from gpupred.step.physics.columns import recipe_of

    batch, setup = job.for_workload(spec)
    return job_graph(graph_for(spec), text, batch, setup, key=spec.arch_key, recipe=recipe_of(spec.family))
