"""Inter-trial fusion (Hydro-style): F independent copies of a model trained as one job with torch.func.

The copies' parameters are stacked (``torch.func.stack_module_state``) and the forward+loss is
``vmap``-ed over the copy axis (``functional_call`` on a meta-device skeleton), so every op runs once
on F-times-wider tensors. All copies see the same synthetic batch (a hyper-parameter search's trials
share data). Each copy has its own learning rate.

Optimizer: ONE optimizer over the stacked parameters, with the learning rate as an ``[F, 1, ...]``
tensor broadcast over each stacked parameter. F stock ``torch.optim`` optimizers cannot be used,
because their parameters would have to be separate leaf tensors (views of a stacked leaf cannot be
optimized), and one stock optimizer with a scalar rate cannot give copies different rates (scaling
the gradient is equivalent for SGD but not for Adam, which is scale invariant). The update rules
below match ``torch.optim.SGD(momentum=0.9)`` and ``torch.optim.Adam`` defaults exactly; a test checks
one fused step against F separate stock-optimizer steps.

Recurrent layers: vmap has no batching rule for ``aten::lstm``/``aten::gru``, so inside the fused
step each ``nn.LSTM``/``nn.GRU`` of the skeleton is swapped for :class:`LoopRNN`, the same math and the
same parameter names written with primitive ops (one input projection over the whole sequence, then a
Python loop over time steps). The ONNX export still holds F ``LSTM``/``GRU`` ops.

BatchNorm: running statistics are stacked buffers updated in place inside ``vmap`` (the buffers are
batched along the copy axis, which vmap allows), so every copy keeps its own running mean/var.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from gpupred.workloads.batches import Amp, Batches
from gpupred.workloads.spec import WorkloadSpec

SGD_MOMENTUM = 0.9
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


class StackedOptimizer:
    """SGD (momentum) or Adam over stacked ``[F, ...]`` parameters with a per-copy learning rate."""

    def __init__(self, params: list[Tensor], lrs: Tensor, kind: str) -> None:
        if kind not in ("sgd", "adam"):
            raise ValueError(f"unknown optimizer {kind!r}")
        self.params, self.kind, self.t = params, kind, 0
        self.lrs = [lrs.to(p.device, p.dtype).view(-1, *([1] * (p.dim() - 1))) for p in params]
        self.state: list[list[Tensor]] = []

    def zero_grad(self) -> None:
        """Drop every gradient (set to None)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """Apply one update to every stacked parameter."""
        ps = [p for p in self.params if p.grad is not None]
        gs = [p.grad for p in ps]
        lrs = [lr for p, lr in zip(self.params, self.lrs) if p.grad is not None]
        if not ps:
            return
        self.t += 1
        if self.kind == "sgd":
            if not self.state:
                self.state = [[g.clone() for g in gs]]
            else:
                torch._foreach_mul_(self.state[0], SGD_MOMENTUM)
                torch._foreach_add_(self.state[0], gs)
            upd = torch._foreach_mul(self.state[0], lrs)
            torch._foreach_sub_(ps, upd)
            return
        b1, b2 = ADAM_BETAS
        if not self.state:
            self.state = [[torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps]]
        m, v = self.state
        torch._foreach_lerp_(m, gs, 1 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, gs, gs, 1 - b2)
        bc1, bc2 = 1 - b1**self.t, 1 - b2**self.t
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, math.sqrt(bc2))
        torch._foreach_add_(denom, ADAM_EPS)
        upd = torch._foreach_div(m, denom)
        torch._foreach_mul_(upd, lrs)
        torch._foreach_mul_(upd, 1 / bc1)
        torch._foreach_sub_(ps, upd)


class LoopRNN(nn.Module):
    """An ``nn.LSTM``/``nn.GRU`` (batch-first, unidirectional) re-written with vmap-able primitive ops."""

    def __init__(self, rnn: nn.RNNBase) -> None:
        super().__init__()
        if not rnn.batch_first or rnn.bidirectional or rnn.proj_size or not rnn.bias:
            raise ValueError("LoopRNN supports batch-first, unidirectional RNNs with biases only")
        self.mode, self.layers, self.hidden, self.dropout = rnn.mode, rnn.num_layers, rnn.hidden_size, rnn.dropout
        for name, p in rnn.named_parameters():
            self.register_parameter(name, nn.Parameter(p.detach().clone()))

    def forward(self, x: Tensor) -> tuple[Tensor, None]:
        """Outputs ``[B, S, hidden]`` of the last layer (like ``nn.LSTM``/``nn.GRU``), and no state."""
        for k in range(self.layers):
            if k and self.dropout and self.training:
                x = nn.functional.dropout(x, self.dropout, True)
            w_hh, b_hh = getattr(self, f"weight_hh_l{k}"), getattr(self, f"bias_hh_l{k}")
            xs = nn.functional.linear(x, getattr(self, f"weight_ih_l{k}"), getattr(self, f"bias_ih_l{k}"))
            h = x.new_zeros(x.shape[0], self.hidden)
            c = h
            outs = []
            for t in range(x.shape[1]):
                gh = nn.functional.linear(h, w_hh, b_hh)
                if self.mode == "LSTM":
                    i, f, g, o = (xs[:, t] + gh).chunk(4, dim=-1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = torch.sigmoid(o) * torch.tanh(c)
                else:
                    xr, xz, xn = xs[:, t].chunk(3, dim=-1)
                    hr, hz, hn = gh.chunk(3, dim=-1)
                    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                    h = (1 - z) * torch.tanh(xn + r * hn) + z * h
                outs.append(h)
            x = torch.stack(outs, dim=1)
        return x, None


def _vmappable(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every LSTM/GRU replaced by :class:`LoopRNN`."""
    model = copy.deepcopy(model)
    for name, mod in list(model.named_modules()):
        if isinstance(mod, (nn.LSTM, nn.GRU)):
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            setattr(parent, name.rpartition(".")[2], LoopRNN(mod))
    return model


class FusedTrainStep:
    """One training iteration of F stacked copies: vmapped forward+loss, summed backward, per-copy update."""

    def __init__(
        self,
        copies: list[nn.Module],
        loss_fn: Callable[[Any, tuple[Tensor, ...]], Tensor],
        inputs: tuple[Tensor, ...],
        targets: tuple[Tensor, ...],
        lrs: tuple[float, ...],
        spec: WorkloadSpec,
        device: str,
        host_batches: bool = False,
    ) -> None:
        for m in copies:
            m.train()
        params, buffers = stack_module_state(copies)
        self.params = {k: v.detach().to(device).requires_grad_(True) for k, v in params.items()}
        self.buffers = {k: v.to(device) for k, v in buffers.items()}
        skeleton = _vmappable(copies[0]).to("meta")
        n_in = len(inputs)

        def one_copy(p: dict[str, Tensor], b: dict[str, Tensor], *data: Tensor) -> Tensor:
            return loss_fn(functional_call(skeleton, (p, b), data[:n_in]), data[n_in:])

        in_dims = (0, 0, *([None] * (len(inputs) + len(targets))))
        self._losses = vmap(one_copy, in_dims=in_dims, randomness="different")
        self.opt = StackedOptimizer(list(self.params.values()), torch.tensor(lrs, dtype=torch.float64), spec.optimizer)
        self.batch = Batches(tuple(inputs) + tuple(targets), device, host_batches)
        self.amp = Amp(spec.precision, device)  # fp32 or bf16: fp16 is refused for fused specs

    def __call__(self) -> Tensor:
        """Run one iteration; returns the per-copy losses ``[F]`` (not synced)."""
        data = self.batch()
        self.opt.zero_grad()
        with self.amp.autocast():
            losses = self._losses(self.params, self.buffers, *data)
        losses.sum().backward()
        self.opt.step()
        return losses.detach()
