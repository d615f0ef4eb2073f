"""The step model's entry points: a canonical graph (or an ONNX file, or a workload spec) on a GPU -> a step estimate."""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

from onnx import ModelProto

from gpupred.errors import GpupredError
from gpupred.graph.canonical import CanonicalGraph
from gpupred.graph.loader import cached_graph, file_identity
from gpupred.hardware import gpu_spec
from gpupred.step.physics.constants import DEFAULT, StepConstants
from gpupred.step.physics.kernels import RECIPES, KernelList, step_kernels
from gpupred.step.physics.timeline import SYNC_MODES, StepEstimate, simulate
from gpupred.setups import TrainingSetup, as_setup

KERNELS_KEPT = 500_000  # kernels (not kernel lists) kept per process: about 10 MB of arrays
_KERNELS: "OrderedDict[tuple[Any, ...], KernelList]" = OrderedDict()
_kept = 0  # kernels held by _KERNELS


def _check(precision: str, optimizer: str, sync: str, setup: TrainingSetup | None = None) -> TrainingSetup:
    """The job's setup (``setup``, else the sweeps' setup of the precision and optimizer), the protocol checked."""
    if sync not in SYNC_MODES:
        raise GpupredError(f"unknown synchronization mode {sync!r}; known: {', '.join(SYNC_MODES)}")
    return as_setup(setup, precision, optimizer)


def estimate_step(graph: CanonicalGraph, batch_size: int, precision: str, optimizer: str, gpu: str,
                  sync: str = "step", host_batches: bool = False, constants: StepConstants | None = None,
                  setup: TrainingSetup | None = None) -> StepEstimate:
    """Step time, GPU-busy and host time, analytic utilization and kernel count of one training step (one optimizer
    step: ``setup.accumulation`` micro-batches of ``batch_size``).

    ``graph`` is a canonical graph whose shapes are at ``batch_size`` (what :func:`canonical_graph` returns);
    ``gpu`` any name :func:`gpupred.hardware.gpu_spec` knows; ``constants`` default to the published figures;
    ``setup`` (:class:`gpupred.setups.TrainingSetup`) replaces ``precision`` and ``optimizer`` when given.
    """
    job = _check(precision, optimizer, sync, setup)
    if int(batch_size) < 1:
        raise GpupredError(f"batch size must be positive, got {batch_size}")
    kl = step_kernels(graph, setup=job)
    return simulate(kl, gpu_spec(gpu), job.precision, constants or DEFAULT, sync, host_batches)


def canonical_graph(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None) -> tuple[CanonicalGraph, int]:
    """The canonical graph of an ONNX file or proto at a batch size, and that batch size."""
    plain, bs = cached_graph(path_or_proto, batch_size)
    return plain.form(True), bs


def kernels_for(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None, precision: str,
                optimizer: str, key: Any = None, recipe: str = "standard",
                setup: TrainingSetup | None = None) -> KernelList:
    """The step's kernels for a graph at a batch size, kept in-process under ``key`` (default: the path) and the
    file's version (a changed file is read again); ``recipe`` and ``setup`` as
    :func:`gpupred.step.physics.kernels.step_kernels` takes them.

    The least recently used lists go once more than :data:`KERNELS_KEPT` kernels are kept: every workload of
    notebook 02's dataset (3,243 lists, 322,850 kernels, 6.5 MB of arrays) stays between its step columns and its
    kernel table, and a scheduler's large graphs (thousands of kernels each) do not hold memory by the hundred."""
    if recipe not in RECIPES:
        raise GpupredError(f"unknown step recipe {recipe!r}; known: {', '.join(RECIPES)}")
    job = as_setup(setup, precision, optimizer)
    if key is None and not isinstance(path_or_proto, ModelProto):
        key = os.path.abspath(path_or_proto)
    full = None if key is None else (key, file_identity(path_or_proto), batch_size, recipe, job.key())
    hit = _KERNELS.get(full) if full is not None else None
    if hit is not None:
        _KERNELS.move_to_end(full)
        return hit
    graph, _ = canonical_graph(path_or_proto, batch_size)
    kl = step_kernels(graph, recipe=recipe, setup=job)
    if full is not None:
        _keep(full, kl)
    return kl


def _keep(key: tuple[Any, ...], kl: KernelList) -> None:
    """Keep ``kl`` under ``key``, dropping the least recently used lists beyond :data:`KERNELS_KEPT` kernels (the
    newest always stays)."""
    global _kept
    old = _KERNELS.pop(key, None)
    _kept += len(kl) - (len(old) if old is not None else 0)
    _KERNELS[key] = kl
    while _kept > KERNELS_KEPT and len(_KERNELS) > 1:
        _, dropped = _KERNELS.popitem(last=False)
        _kept -= len(dropped)


def estimate_onnx(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None, precision: str = "fp32",
                  optimizer: str = "sgd", gpu: str = "H200", sync: str = "step", host_batches: bool = False,
                  constants: StepConstants | None = None, setup: TrainingSetup | None = None) -> StepEstimate:
    """:func:`estimate_step` for an ONNX file or proto (no weights read, no torch)."""
    job = _check(precision, optimizer, sync, setup)
    kl = kernels_for(path_or_proto, batch_size, job.precision, job.optimizer, setup=job)
    return simulate(kl, gpu_spec(gpu), job.precision, constants or DEFAULT, sync, host_batches)
