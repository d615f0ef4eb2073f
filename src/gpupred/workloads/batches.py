"""The synthetic batch every training step reads: resident on the device, or copied from pinned host memory.

Shared by the plain training step (:mod:`gpupred.workloads.builders`) and the fused one
(:mod:`gpupred.workloads.fused`). Imports torch at top level, like both of them.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
