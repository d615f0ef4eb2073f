"""The step model's columns (``STEP_COLUMNS``) for workload specs on GPUs: what the dataset joins to each run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupred.step.physics.constants import DEFAULT, StepConstants
from gpupred.step.physics.kernels import KernelList
from gpupred.step.physics.model import kernels_for
from gpupred.step.physics.timeline import LoaderTimes, simulate

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.setups import InputPipeline
    from gpupred.workloads.spec import WorkloadSpec


GAN_FAMILIES: frozenset[str] = frozenset({"dcgan"})  # families whose training step alternates D and G steps


def recipe_of(family: str) -> str:
    """How a workload family's training step runs over its exported graph (``gpupred.workloads.builders``: a
    DCGAN exports G(z), D(real), D(G(z)) and trains a discriminator step, then a generator step)."""
    return "gan" if family in GAN_FAMILIES else "standard"


def spec_kernels(spec: "WorkloadSpec") -> KernelList:
    """The step's kernels of a workload spec, from its graph (the store's, or built for imported networks)."""
    from gpupred.graph.graphstore import graph_for

    return kernels_for(graph_for(spec), spec.batch_size, spec.precision, spec.optimizer, key=spec.arch_key,
                       recipe=recipe_of(spec.family))


def spec_step_columns(spec: "WorkloadSpec", gpu: str, sync: str = "step", host_batches: bool = False,
                      constants: StepConstants | None = None, loader: LoaderTimes | None = None) -> dict[str, float]:
    """``STEP_COLUMNS`` of one spec on one GPU under a protocol (default constants unless given), fed by ``loader``
    (None: resident or only copied batches)."""
    from gpupred.hardware import gpu_spec

    est = simulate(spec_kernels(spec), gpu_spec(gpu), spec.precision, constants or DEFAULT, sync, host_batches, loader)
    return est.columns()


def spec_loader(spec: "WorkloadSpec", pipeline: "InputPipeline") -> LoaderTimes | None:
    """The per-batch times of the host pipeline that feeds a spec's steps (None for resident batches), from the
    pipeline's host profile (:func:`gpupred.step.physics.inputfeed.host_costs`)."""
    from gpupred.step.physics.inputfeed import host_costs, loader_times

    if pipeline.resident:
        return None
    return loader_times(pipeline, spec.batch_size, float(spec_kernels(spec).input_bytes), host_costs(pipeline))
