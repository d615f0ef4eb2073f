"""What every training step shares: the synthetic batch it reads (resident on the device, or copied from pinned
host memory) and its mixed precision (:class:`Amp`).

Shared by the plain training step (:mod:`gpupred.workloads.builders`) and the fused one
(:mod:`gpupred.workloads.fused`). Imports torch at top level, like both of them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gpupred.workloads.spec import HALF_PRECISIONS


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
