"""The kernels of a fused training step: F copies of a model trained as one job with torch.func.vmap (torch-free).

:mod:`gpupred.workloads.fused` stacks the F copies' parameters on a new leading axis, vmaps the forward and loss
over it, runs one backward and one stacked optimizer. vmap's batching rules run each op ONCE on F-times wider
tensors (a convolution with batched weights becomes one grouped convolution, a linear one batched matmul), so the
step launches about the kernels of one copy, each doing F times the work. The exported graph of a fused spec (the
graph store's, ``FusedExport``) holds the F copies side by side: right for what the graph features and the memory
footprint count (F copies of weights, gradients, optimizer state and activations), not for how the step launches
kernels. :func:`fused_kernels` turns one copy's kernels (:func:`gpupred.step.physics.model.kernels_for` of the F = 1
graph) into the fused step's:

- every forward and backward kernel: FLOPs and bytes x F, the same launches;
- recurrent layers: vmap has no batching rule for cuDNN's LSTM/GRU, so the fused step runs
  :class:`gpupred.workloads.fused.LoopRNN` instead (primitive ops in a Python loop over time steps). Each time step's
  cuDNN pair (recurrent GEMM, gate kernel; launched from C++) becomes a cuBLAS GEMM and :data:`LOOP_CELL_KERNELS`
  pointwise kernels forward, a data- and a weight-gradient GEMM and the cell's pointwise kernels backward, all
  launched from Python; the gate kernel's work is spread evenly over them;
- the optimizer: ``StackedOptimizer`` runs :data:`STACKED_OPTIMIZER_OPS` foreach ops (torch's stock optimizer
  :data:`gpupred.step.physics.kernels.OPTIMIZER_OPS`) over the stacked tensors, each launching as many kernels as one copy's
  op did, or one per ``FOREACH_CHUNK`` elements of the F copies when that is more.

Not modelled (unmeasured until fused runs are committed): vmap's own host cost per op, the extra reshapes some
batching rules add, and LoopRNN's input projections running as cuBLAS rather than cuDNN GEMMs. F = 1 is the plain job
(no vmap): its kernels are returned unchanged.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from gpupred.errors import GpupredError
from gpupred.step.physics.kernels import BWD, FOREACH_CHUNK, FWD, MATMUL, OPT, OPTIMIZER_OPS, OTHER, PHASES, KernelList

# pointwise kernels of one LoopRNN time step (forward, backward), counted from its code: LSTM forward adds the two
# projections, 3 sigmoids, 2 tanh, 3 products and a sum (10); backward: 3 sigmoid and 2 tanh gradients, 2 kernels
# per product (6), the gate gradients joined (1), the recurrent bias gradient (1) and 3 accumulations (h, c and
# the recurrent weight gradient): 16. GRU forward: 3 sums, 2 sigmoids, a tanh, 1 - z and 3 products (11);
# backward: 2 sigmoid and 1 tanh gradients, 2 per product (6), 1 - z (1), the two gate chunks joined (2), the bias
# gradient (1) and 3 accumulations: 16
LOOP_CELL_KERNELS: dict[str, tuple[int, int]] = {"lstm": (10, 16), "gru": (11, 16)}
# foreach ops of gpupred.workloads.fused.StackedOptimizer's step
STACKED_OPTIMIZER_OPS: dict[str, int] = {"sgd": 4, "adam": 10}  # sgd: mul_, add_, mul, sub_; adam: lerp_ ... sub_


Row = tuple[float, float, int, int, bool, bool]  # FLOPs, bytes, tensor core, phase, library, on tensor cores


def _rows(kl: KernelList) -> list[Row]:
    """(FLOPs, bytes, tensor core, phase, library, on tensor cores) per kernel (the last as the setup decided it, False
    for kernels built without one: the fused list keeps ``on_tc`` None then)."""
    lib = kl.library if kl.library is not None else np.zeros(len(kl), bool)
    on_tc = kl.on_tc if kl.on_tc is not None else np.zeros(len(kl), bool)
    return [(float(f), float(b), int(t), int(p), bool(x), bool(o)) for f, b, t, p, x, o in
            zip(kl.flops, kl.bytes, kl.tensor_core, kl.phase, lib, on_tc)]


def _loop_rnn(rows: list[Row], copies: int, cell: tuple[int, int]) -> list[Row]:
    """Forward and backward kernels with each cuDNN time step replaced by LoopRNN's (work x ``copies``)."""
    out = []
    for f, b, tc, phase, lib, on in rows:
        f, b = f * copies, b * copies
        if phase not in (FWD, BWD) or not lib:
            out.append((f, b, tc, phase, lib, on))
        elif tc:  # the step's recurrent GEMM: cuBLAS from Python (twice backward: data and weight gradients)
            out += [(f, b, MATMUL, phase, False, on)] * (1 if phase == FWD else 2)
        else:  # the step's gate kernel: the cell's pointwise kernels
            n = cell[0] if phase == FWD else cell[1]
            out += [(f / n, b / n, 0, phase, False, False)] * n
    return out


def _stacked_optimizer(rows: list[Row], copies: int, optimizer: str, params: float) -> list[Row]:
    """The stacked optimizer's kernels from one copy's optimizer kernels (``rows``, phase OPT)."""
    if optimizer not in STACKED_OPTIMIZER_OPS:
        raise GpupredError(f"unknown optimizer {optimizer!r} for a fused step; known: {', '.join(STACKED_OPTIMIZER_OPS)}")
    stock = len(OPTIMIZER_OPS[optimizer])
    if not rows:
        return []
    per_op = max(1, round(len(rows) / stock))
    flops = sum(r[0] for r in rows) / stock * copies
    nbytes = sum(r[1] for r in rows) / stock * copies
    launches = max(per_op, math.ceil(copies * params / FOREACH_CHUNK))
    out = []
    for _ in range(STACKED_OPTIMIZER_OPS[optimizer]):
        out += [(flops / launches, nbytes / launches, 0, OPT, k > 0, False) for k in range(launches)]
    return out


def fused_kernels(kl: KernelList, copies: int, optimizer: str, params: float, rnn: str | None = None) -> KernelList:
    """The kernels of a step of ``copies`` fused copies from one copy's kernels ``kl`` (see the module docstring);
    ``params``: one copy's trainable elements; ``rnn``: ``lstm`` or ``gru`` when the model's recurrent layers are."""
    if copies < 1:
        raise GpupredError(f"fused copies must be at least 1, got {copies}")
    if copies == 1:
        return kl
    if rnn is not None and rnn not in LOOP_CELL_KERNELS:
        raise GpupredError(f"unknown recurrent cell {rnn!r}; known: {', '.join(LOOP_CELL_KERNELS)}")
    rows = _rows(kl)
    steps = [r for r in rows if r[3] != OPT]
    steps = _loop_rnn(steps, copies, LOOP_CELL_KERNELS[rnn]) if rnn else \
        [(f * copies, b * copies, tc, p, lib, on) for f, b, tc, p, lib, on in steps]
    opt = _stacked_optimizer([r for r in rows if r[3] == OPT], copies, optimizer, params)
    seq = [r for r in steps if r[3] != OTHER] + opt + [r for r in steps if r[3] == OTHER]  # launch order
    n = len(seq)
    phase = np.fromiter((r[3] for r in seq), np.int8, n)
    counts = type(kl.counts)({name: int((phase == p).sum()) for p, name in enumerate(PHASES)})
    return replace(kl, flops=np.fromiter((r[0] for r in seq), float, n), bytes=np.fromiter((r[1] for r in seq), float, n),
                   tensor_core=np.fromiter((r[2] for r in seq), np.int8, n), phase=phase,
                   sync_after=np.zeros(n, bool), library=np.fromiter((r[4] for r in seq), bool, n), counts=counts,
                   on_tc=None if kl.on_tc is None else np.fromiter((r[5] for r in seq), bool, n))
