"""What every training step shares: the synthetic batch it reads (resident on the device, or copied from pinned
host memory), or batches drawn from a host loader (:class:`FeedBatches`), and its mixed precision (:class:`Amp`).

Shared by the plain training step (:mod:`gpupred.workloads.builders`) and the fused one
(:mod:`gpupred.workloads.fused`). Imports torch at top level, like both of them.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import Tensor

from gpupred.errors import GpupredError
from gpupred.workloads.spec import HALF_PRECISIONS

# a loader's key -> the workload input it feeds, where the names differ (the catalog's transformers take "tokens")
INPUT_ALIASES: dict[str, tuple[str, ...]] = {"tokens": ("input_ids",), "source": ("input_ids",),
                                             "images": ("pixel_values",)}


class Batches:
    """Synthetic batch source: resident on the device, or a pinned host batch copied every call."""

    def __init__(self, tensors: tuple[Tensor, ...], device: str, host: bool) -> None:
        self.host = host
        self.device = torch.device(device)
        if host:
            pin = self.device.type == "cuda" and torch.cuda.is_available()
            self.tensors = tuple(t.pin_memory() if pin else t.clone() for t in tensors)
        else:
            self.tensors = tuple(t.to(self.device) for t in tensors)

    def __call__(self) -> tuple[Tensor, ...]:
        """This iteration's batch on the device."""
        if self.host:
            return tuple(t.to(self.device, non_blocking=True) for t in self.tensors)
        return self.tensors


class FeedBatches:
    """Each call draws the next batch from a host loader (a torch DataLoader), moves it to the device and returns the
    step's inputs then targets; what the loader does not yield stays resident (the synthetic tensor, moved once).

    A loader batch is a dict (its keys name inputs: ``input_ids`` feeds the catalog's ``tokens``; targets stay
    resident) or a sequence ``(inputs, labels)`` (the first input; the labels replace the first target when their
    shape is the target's). A new epoch starts when the loader is exhausted. Every tensor taken from the loader must
    have the shape of the synthetic one it stands for (one-line GpupredError otherwise).
    """

    def __init__(self, loader: Iterable[Any], synthetic: tuple[Tensor, ...], names: list[str], device: str,
                 non_blocking: bool) -> None:
        self.loader, self.names, self.n_in = loader, list(names), len(names)
        self.synthetic = synthetic
        self.shapes = [tuple(t.shape) for t in synthetic]
        self.device, self.non_blocking = torch.device(device), non_blocking
        self.iterator: Any = iter(loader)
        self.resident: dict[int, Tensor] | None = None  # the synthetic tensors the loader does not replace

    def _next(self) -> Any:
        try:
            return next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.loader)
            return next(self.iterator)

    def _taken(self, batch: Any) -> dict[int, Tensor]:
        """Which of the step's tensors (by position) this loader batch supplies."""
        out: dict[int, Tensor] = {}
        if isinstance(batch, dict):
            for i, name in enumerate(self.names):
                key = next((k for k in (name, *INPUT_ALIASES.get(name, ())) if k in batch), None)
                if key is not None:
                    out[i] = batch[key]
        elif isinstance(batch, (list, tuple)) and batch:
            out[0] = batch[0]
            if len(batch) > 1 and len(self.shapes) > self.n_in and tuple(batch[1].shape) == self.shapes[self.n_in]:
                out[self.n_in] = batch[1]
        elif isinstance(batch, Tensor):
            out[0] = batch
        if not out:
            raise GpupredError(f"loader batch of type {type(batch).__name__} feeds none of the workload's inputs "
                               f"({', '.join(self.names)})")
        return out

    def _check(self, taken: dict[int, Tensor]) -> None:
        """Every taken tensor has its synthetic stand-in's shape; keep the rest resident on the device."""
        for i, t in taken.items():
            want = self.shapes[i]
            if tuple(t.shape) != want:
                what = self.names[i] if i < self.n_in else f"target {i - self.n_in}"
                raise GpupredError(f"loader batch {what} has shape {tuple(t.shape)}; the workload takes {want}")
        self.resident = {i: t.to(self.device) for i, t in enumerate(self.synthetic) if i not in taken}
        self.synthetic = ()  # the host copies are no longer needed

    def __call__(self) -> tuple[Tensor, ...]:
        """This iteration's batch on the device: the loader's tensors, the resident ones for the rest."""
        taken = self._taken(self._next())
        if self.resident is None:
            self._check(taken)
        assert self.resident is not None
        moved = {i: t.to(self.device, non_blocking=self.non_blocking) for i, t in taken.items()}
        return tuple(moved[i] if i in moved else self.resident[i] for i in range(len(self.shapes)))


class Amp:
    """Mixed precision of one training step: autocast (bf16 or fp16) and, for fp16, a dynamic loss scaler.

    fp16 follows ``torch.cuda.amp`` as the AMP training scripts of the published workloads use it:
    ``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``. fp32 and bf16 use no scaler.
    """

    def __init__(self, precision: str, device: str) -> None:
        self.dev_type = torch.device(device).type
        self.enabled = precision in HALF_PRECISIONS
        self.dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        self.scaler = torch.amp.GradScaler(self.dev_type, enabled=precision == "fp16")

    def autocast(self) -> Any:
        """The autocast context of the forward pass (a no-op in fp32)."""
        return torch.autocast(self.dev_type, dtype=self.dtype, enabled=self.enabled)

    def backward(self, loss: Tensor) -> None:
        """Backward of the (scaled, under fp16) loss."""
        self.scaler.scale(loss).backward()

    def step(self, opt: torch.optim.Optimizer) -> None:
        """An optimizer step (unscaled and skipped on inf/NaN gradients under fp16)."""
        self.scaler.step(opt)

    def update(self) -> None:
        """Update the loss scale after every optimizer of the iteration has stepped."""
        self.scaler.update()

    def backward_step(self, loss: Tensor, opt: torch.optim.Optimizer) -> None:
        """Backward, step and scale update of a one-optimizer iteration."""
        self.backward(loss)
        self.step(opt)
        self.update()
