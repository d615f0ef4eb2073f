"""One training job given as a graph: the one job class the predictor answers.

A :class:`JobGraph` is a graph (an ONNX file, a proto or the store's graph of a workload id) at a batch size under a
training setup. What the estimators read of it, its feature row, the step's kernels and the footprint's graph terms,
is computed on first use and kept, so one prediction loads and canonicalizes the graph once (the loader's
``cached_graph`` shares it among the three) and nothing is computed to be thrown away: a job answered by the physics
core never builds the regressors' inputs beyond the feature row they share.

:func:`job_graph` keeps the jobs of this process by the file's identity (absolute path, modification time, size,
inode), label, batch size and setup, so a scheduler that asks about the same file twice pays once; a changed file is a new
key. Proto inputs are not kept (they have no cheap identity).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gpupred.setups import TrainingSetup

JOB_CACHE_SIZE = 64  # jobs kept per process (each holds its kernels and terms, not the graph)
_JOBS: OrderedDict[tuple[Any, ...], "JobGraph"] = OrderedDict()


@dataclass(eq=False)
class JobGraph:
    """A graph at a batch size under a training setup, with its feature row, kernels and footprint terms computed
    once, on first use."""

    graph: Any  # an ONNX path or ModelProto
    label: str  # what errors call it (the path as typed, or the workload id)
    batch_size: int
    setup: TrainingSetup
    key: Any = None  # the step model's kernel-cache key (a workload's architecture); default the file's path
    recipe: str = "standard"  # how the step runs over the graph (gpupred.step.physics.columns.recipe_of a workload's family)

    @property
    def precision(self) -> str:
        return self.setup.precision

    @property
    def optimizer(self) -> str:
        return self.setup.optimizer

    @cached_property
    def features(self) -> dict[str, Any]:
        """The graph's feature row with the job's precision and optimizer (what a regressor reads); refuses a graph it
        could not see whole (over 1% missing)."""
        from gpupred.graph.coverage import check_complete
        from gpupred.graph.features import featurize

        s = self.setup
        row = featurize(self.graph, batch_size=self.batch_size, precision=s.job_precision, optimizer=s.job_optimizer,
                        warn=False)
        check_complete(row, self.label)
        return {**row, "precision": s.job_precision, "optimizer": s.job_optimizer}

    @cached_property
    def row(self) -> dict[str, Any]:
        """The feature row with the precision and optimizer encoded (what the estimators read)."""
        from gpupred.dataset import encode

        return {**self.features, **encode(self.setup.job_precision, self.setup.job_optimizer)}

    @cached_property
    def kernels(self) -> Any:
        """The step's kernels (:func:`gpupred.step.physics.model.kernels_for`)."""
        from gpupred.step.physics.model import kernels_for

        s = self.setup
        return kernels_for(self.graph, self.batch_size, s.precision, s.optimizer, key=self.key, recipe=self.recipe,
                           setup=s)

    @cached_property
    def terms(self) -> dict[str, float]:
        """The footprint's graph terms (:func:`gpupred.memory.physics.graph_terms`) and, for LoRA, QLoRA and the optimizers
        whose state is not parameter-sized, its parameter terms (:func:`gpupred.finetune.parameter_terms`)."""
        from gpupred.memory.physics import graph_terms

        quantized = self.placement.quantized if self.setup.qlora else ()
        return {**graph_terms(self.graph, self.batch_size, self.setup, self.gradient_elements(), quantized),
                **self.parameter_terms()}

    @cached_property
    def inputs(self) -> tuple[tuple[str, int, tuple[int, ...]], ...]:
        """The graph's inputs at the job's batch size: (name, ONNX element type, dims), those of known shape."""
        from gpupred.graph.loader import cached_graph

        if self.graph is None:
            return ()
        plain = cached_graph(self.graph, int(self.batch_size))[0]
        shapes = (plain.shapes.get(name) for name in plain.graph_inputs)
        return tuple((name, int(shape[1]), tuple(int(d) for d in shape[0]))
                     for name, shape in zip(plain.graph_inputs, shapes) if shape is not None and shape[0] is not None)

    @cached_property
    def placement(self) -> Any:
        """Which parameters train, are frozen or 4-bit (:func:`gpupred.finetune.placement`), found once for the
        parameter terms and the gradient walk."""
        from gpupred.finetune import model_type_of, placement
        from gpupred.graph.loader import cached_graph

        cg = cached_graph(self.graph, int(self.batch_size))[0].form(True)
        return placement(cg, self.setup, self.label, model_type_of(self.graph))

    def gradient_elements(self) -> dict[str, int] | None:
        """Each parameter key's gradient elements under LoRA (:func:`gpupred.finetune.gradient_elements`: frozen
        weights have none); None where every parameter trains."""
        if not self.setup.lora:
            return None
        from gpupred.finetune import gradient_elements

        return gradient_elements(self.placement)

    def parameter_terms(self) -> dict[str, float]:
        """:func:`gpupred.finetune.parameter_terms` of the graph at the batch size (empty for the sweeps' setups)."""
        if not self.setup.counted_parameters:
            return {}
        from gpupred.finetune import parameter_terms
        from gpupred.graph.loader import cached_graph
        from gpupred.step.physics.attention import fused_cores
        from gpupred.step.physics.blocks import checkpoint_blocks

        cg = cached_graph(self.graph, int(self.batch_size))[0].form(True)
        blocks = [b.nodes for b in checkpoint_blocks(cg)] if self.setup.checkpointing else []
        outputs = [c.out for c in fused_cores(cg, self.setup.attention)]  # a fused kernel keeps its output
        return parameter_terms(cg, self.setup, blocks=blocks, kernel_outputs=outputs, place=self.placement)

    @classmethod
    def of_parts(cls, row: dict[str, Any], kernels: Any, terms: dict[str, float], setup: TrainingSetup,
                 label: str = "job") -> "JobGraph":
        """A job whose row, kernels and terms were computed elsewhere (a fused variant, a test's FIXTURE)."""
        job = cls(None, label, int(row.get("batch_size", 0) or 0), setup)
        job.__dict__.update(row=row, kernels=kernels, terms=terms)
        return job


def job_graph(graph: Any, label: str, batch_size: int, setup: TrainingSetup, key: Any = None,
              recipe: str = "standard") -> JobGraph:
    """The :class:`JobGraph` of these inputs, kept in-process for a file (see the module docstring)."""
    from gpupred.graph.loader import file_identity

    identity = file_identity(graph)
    if identity is None:
        return JobGraph(graph, label, batch_size, setup, key, recipe)
    cache_key = (identity, label, int(batch_size), setup, key, recipe)
    hit = _JOBS.get(cache_key)
    if hit is not None:
        _JOBS.move_to_end(cache_key)
        return hit
    job = _JOBS[cache_key] = JobGraph(graph, label, batch_size, setup, key, recipe)
    if len(_JOBS) > JOB_CACHE_SIZE:
        _JOBS.popitem(last=False)
    return job


def clear_jobs() -> None:
    """Forget every job :func:`job_graph` keeps in this process."""
    _JOBS.clear()
