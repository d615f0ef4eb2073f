"""The step model's entry points: a canonical graph (or an ONNX file, or a workload spec) on a GPU -> a step estimate."""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

from onnx import ModelProto

from gpupred.errors import GpupredError
from gpupred.graph.canonical import CanonicalGraph
from gpupred.graph.loader import cached_graph
from gpupred.hardware import gpu_spec
from gpupred.perf.constants import DEFAULT, StepConstants
from gpupred.perf.kernels import RECIPES, KernelList, step_kernels
from gpupred.perf.timeline import SYNC_MODES, StepEstimate, simulate

PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
_CACHE_SIZE = 256
_KERNELS: "OrderedDict[tuple[Any, ...], KernelList]" = OrderedDict()


def _check(precision: str, optimizer: str, sync: str) -> None:
    if precision not in PRECISIONS:
        raise GpupredError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise GpupredError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if sync not in SYNC_MODES:
        raise GpupredError(f"unknown synchronization mode {sync!r}; known: {', '.join(SYNC_MODES)}")


def estimate_step(graph: CanonicalGraph, batch_size: int, precision: str, optimizer: str, gpu: str,
                  sync: str = "step", host_batches: bool = False, constants: StepConstants | None = None) -> StepEstimate:
    """Step time, GPU-busy and host time, analytic utilization and kernel count of one training step.

    ``graph`` is a canonical graph whose shapes are at ``batch_size`` (what :func:`canonical_graph` returns);
    ``gpu`` any name :func:`gpupred.hardware.gpu_spec` knows; ``constants`` default to the published figures.
    """
    _check(precision, optimizer, sync)
    if int(batch_size) < 1:
        raise GpupredError(f"batch size must be positive, got {batch_size}")
    kl = step_kernels(graph, precision, optimizer)
    return simulate(kl, gpu_spec(gpu), precision, constants or DEFAULT, sync, host_batches)


def canonical_graph(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None) -> tuple[CanonicalGraph, int]:
    """The canonical graph of an ONNX file or proto at a batch size, and that batch size."""
    plain, bs = cached_graph(path_or_proto, batch_size)
    return plain.form(True), bs


def kernels_for(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None, precision: str,
                optimizer: str, key: Any = None, recipe: str = "standard") -> KernelList:
    """The step's kernels for a graph at a batch size, kept in-process under ``key`` (default: the path);
    ``recipe`` as :func:`gpupred.perf.kernels.step_kernels` takes it."""
    if recipe not in RECIPES:
        raise GpupredError(f"unknown step recipe {recipe!r}; known: {', '.join(RECIPES)}")
    if key is None and not isinstance(path_or_proto, ModelProto):
        key = os.path.abspath(path_or_proto)
    full = None if key is None else (key, batch_size, precision, optimizer, recipe)
    hit = _KERNELS.get(full) if full is not None else None
    if hit is not None:
        _KERNELS.move_to_end(full)
        return hit
    graph, _ = canonical_graph(path_or_proto, batch_size)
    kl = step_kernels(graph, precision, optimizer, recipe)
    if full is not None:
        _KERNELS[full] = kl
        if len(_KERNELS) > _CACHE_SIZE:
            _KERNELS.popitem(last=False)
    return kl


def estimate_onnx(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None, precision: str = "fp32",
                  optimizer: str = "sgd", gpu: str = "H200", sync: str = "step", host_batches: bool = False,
                  constants: StepConstants | None = None) -> StepEstimate:
    """:func:`estimate_step` for an ONNX file or proto (no weights read, no torch)."""
    _check(precision, optimizer, sync)
    kl = kernels_for(path_or_proto, batch_size, precision, optimizer)
    return simulate(kl, gpu_spec(gpu), precision, constants or DEFAULT, sync, host_batches)
