"""The kernels one training step launches, in launch order, from a canonical graph (torch-free).

A :class:`KernelList` holds one entry per CUDA kernel: FLOPs, bytes moved, whether it runs on tensor cores
(contractions) and in which phase it is launched (forward, backward, optimizer, other). The rules follow
how eager PyTorch runs a training step on a GPU:

- **forward**: one kernel per op that does work (views and shape metadata launch none; Slice, Split, Expand and
  Transpose are views in torch); a Conv with a bias adds a bias kernel; the loss adds two (log-softmax, NLL);
- **training-mode layers an eval export drops**: every BatchNorm the canonical form folded into a
  contraction (the contraction carries ``FOLDED_BATCHNORM``, or its bias is named ``...::folded_batchnorm_bias``) runs
  as one forward and one backward kernel on the contraction's output, and its scale and shift are stepped by the
  optimizer; every Dropout or stochastic-depth node it dropped runs one kernel each way (on an activation of the
  graph's median size);
- **attention cores** (:mod:`gpupred.perf.attention`: MatMul -> scale/mask -> Softmax -> MatMul) run as one fused
  kernel forward and two backward, as torch's ``scaled_dot_product_attention`` does;
- **depthwise convolutions** (weight ``[C, 1, k, k]``) are ``DEPTHWISE`` kernels: CUDA cores at ``depthwise_eff``;
- **backward**: a contraction launches a data-gradient kernel (none when its input is a graph input) and a
  weight-gradient kernel, plus a bias-gradient reduction; a product of two activations launches two; Add/Sub
  launch none (the gradient passes through); other ops launch one; a tensor read by k ops accumulates k-1
  gradients (one add kernel each); the backward starts with one fill kernel and the loss's two;
- **autocast** (bf16/fp16): each weight a contraction reads is cast to 16 bits once per step (forward) and its
  gradient cast back (backward); an fp32 activation entering a contraction is cast each way too;
- **recurrent layers** (LSTM/GRU/RNN): per layer and direction, one input-projection GEMM, then two kernels per
  time step (recurrent GEMM, gate update) forward and backward, plus two weight-gradient GEMMs; the per-step
  kernels are launched by cuDNN from C++ (``library``: a bare launch, no dispatcher or Python on the host);
- **optimizer** as torch runs it by default on CUDA (``foreach``): SGD with momentum 3 multi-tensor ops, Adam 7;
  each op launches one kernel per ``FOREACH_TENSORS[depth]`` tensors (and per 320 x 64 Ki elements); fp16's
  GradScaler adds an unscale op, three small kernels and one host synchronization (its inf check);
- **recipe** ``gan`` (a DCGAN's step, :func:`gpupred.perf.table.recipe_of`): the discriminator's second pass over
  shared weights runs once more each way, three BCE losses, one optimizer per network, two overhead cycles.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpupred.graph.canonical import FOLDED_BATCHNORM, CanonicalGraph
from gpupred.graph.costs import MAC_CATEGORIES, NON_TRAINABLE_INPUTS, MissingShape, NodeInfo, TensorInfo, view_rule
from gpupred.graph.features import autocast_sizes
from gpupred.perf.attention import BACKWARD_FLOPS, TORCH_VIEWS, AttentionCore, attention_cores

FWD, BWD, OPT, OTHER = 0, 1, 2, 3  # launch phases (host launch cost per phase)
MATMUL, CONV, DEPTHWISE = 1, 2, 3  # contraction kinds: torch runs fp32 matmuls at the FP32 peak, cuDNN convolutions
# and RNNs in TF32, depthwise convolutions (one group per input channel) on CUDA cores at their own efficiency
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "other")
FOLDED_BN_SUFFIX = "::folded_batchnorm_bias"
RECURRENT: frozenset[str] = frozenset({"LSTM", "GRU", "RNN"})
PRODUCTS: frozenset[str] = frozenset({"Mul", "Div"})
PASS_GRADIENT: frozenset[str] = frozenset({"Add", "Sub"})
FOREACH_TENSORS: dict[int, int] = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}  # torch multi_tensor_apply depth_to_max_tensors
FOREACH_CHUNK = 320 * 65536  # elements one multi-tensor launch covers (max blocks x chunk size)
# the foreach ops of one optimizer step: (tensor lists read, lists written) per op
OPTIMIZER_OPS: dict[str, tuple[tuple[int, int], ...]] = {
    "sgd": ((1, 1), (2, 1), (2, 1)),  # buf *= momentum; buf += grad; param -= lr * buf
    "adam": ((2, 1), (1, 1), (3, 1), (1, 1), (1, 1), (1, 1), (3, 1)),  # lerp m, v*=b2, addcmul v, sqrt, div, add eps, addcdiv
}
HALF = frozenset({"bf16", "fp16"})


@dataclass
class KernelList:
    """The kernels of one training step in launch order, as parallel arrays, and what the host does besides."""

    flops: np.ndarray  # per kernel
    bytes: np.ndarray  # per kernel, read + written
    tensor_core: np.ndarray  # int: 0 CUDA cores, MATMUL (cuBLAS: fp32 at FP32), CONV (cuDNN: fp32 in TF32), DEPTHWISE
    phase: np.ndarray  # int: FWD, BWD, OPT, OTHER
    sync_after: np.ndarray  # bool: the host waits for the GPU after launching this kernel (GradScaler's inf check)
    library: np.ndarray | None = None  # bool: launched from inside a library or C++ loop (cuDNN RNN steps, foreach chunks)
    input_bytes: int = 0  # bytes of the graph inputs (what a host-memory batch copies to the GPU each step)
    param_tensors: int = 0  # trainable parameter tensors (the optimizer's Python loop runs over them)
    cycles: int = 1  # zero_grad / loss / backward / optimizer cycles of a step (a GAN's: 2), each paying the overhead
    counts: Counter[str] = field(default_factory=Counter)  # kernels per phase name

    def __len__(self) -> int:
        return int(self.flops.shape[0])


class _Builder:
    """Accumulates kernels phase by phase (backward collected in forward order, then reversed)."""

    def __init__(self) -> None:
        # (FLOPs, bytes, tensor core[, launched by a library]) per kernel
        self.fwd: list[tuple[Any, ...]] = []
        self.bwd: list[tuple[Any, ...]] = []  # forward order; launched in reverse
        self.opt: list[tuple[Any, ...]] = []
        self.other: list[tuple[Any, ...]] = []
        self.sync_after_opt_prefix = -1  # index into opt after which the host syncs (-1: none)

    def arrays(self) -> KernelList:
        """The kernels in launch order."""
        seq = [(k, FWD) for k in self.fwd] + [(k, BWD) for k in reversed(self.bwd)] + [(k, OPT) for k in self.opt]
        seq += [(k, OTHER) for k in self.other]
        n = len(seq)
        flops = np.fromiter((k[0] for k, _ in seq), float, n)
        nbytes = np.fromiter((k[1] for k, _ in seq), float, n)
        tc = np.fromiter((int(k[2]) for k, _ in seq), np.int8, n)
        library = np.fromiter((len(k) > 3 and k[3] for k, _ in seq), bool, n)
        phase = np.fromiter((p for _, p in seq), np.int8, n)
        sync = np.zeros(n, bool)
        if self.sync_after_opt_prefix >= 0:
            sync[len(self.fwd) + len(self.bwd) + self.sync_after_opt_prefix] = True
        counts = Counter({PHASES[p]: int((phase == p).sum()) for p in range(len(PHASES))})
        return KernelList(flops, nbytes, tc, phase, sync, library, counts=counts)


def _tensor(graph: CanonicalGraph, name: str, size: int | None = None) -> TensorInfo | None:
    """A tensor's shape and item size (``size`` overrides the graph's, for autocast); None when unknown."""
    shp = graph.shapes.get(name) if name else None
    if shp is None or shp[0] is None:
        return None
    return TensorInfo(shp[0], size or shp[2], name in graph.params)


def _nbytes(t: TensorInfo | None) -> int:
    return t.nbytes if t is not None else 0


def _node_info(graph: CanonicalGraph, op: str, attrs: dict, ins: tuple[str, ...], outs: tuple[str, ...], mac: bool,
               half: bool, size_of: dict[str, int]) -> NodeInfo:
    """What a cost rule of :mod:`gpupred.graph.costs` reads about a node, with autocast item sizes."""
    def size(name: str, is_in: bool) -> int | None:
        shp = graph.shapes.get(name)
        if not half or shp is None or shp[2] != 4:
            return None
        if mac:
            return 2
        return None if (is_in and name in graph.params) else size_of.get(name)

    return NodeInfo(op, attrs, [_tensor(graph, n, size(n, True)) for n in ins],
                    [_tensor(graph, n, size(n, False)) for n in outs])


def _forward_cost(entry: object, info: NodeInfo) -> tuple[float, float, float, float]:
    """(FLOPs, bytes read, bytes written, output bytes) of a node's forward kernel; unknown ops move their outputs."""
    out = float(sum(_nbytes(t) for t in info.outputs))
    if entry is None:
        return 0.0, out, out, out
    try:
        cost = entry.rule(info)  # type: ignore[attr-defined]
    except (MissingShape, IndexError, ValueError, KeyError, ZeroDivisionError, TypeError):
        return 0.0, out, out, out
    return float(cost.flops), float(cost.bytes_read), float(cost.bytes_written), out


def _contraction_kind(info: NodeInfo) -> int:
    """MATMUL, CONV, or DEPTHWISE for a convolution with one group per input channel (its weight reads one input
    channel per output channel: ``[C_out, 1, k, k]``) over more than one channel."""
    if not info.op_type.startswith("Conv"):
        return MATMUL
    x, w = (info.inputs + [None, None])[:2]
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) < 3 or info.op_type != "Conv":
        return CONV
    return DEPTHWISE if w.shape[1] == 1 and x.shape[1] > 1 else CONV


def _contraction(b: _Builder, graph: CanonicalGraph, ins: tuple[str, ...], info: NodeInfo,
                 cost: tuple[float, float, float, float]) -> None:
    """A Conv/Gemm/MatMul: forward (+ bias, + a folded BatchNorm), data and weight gradients, bias gradient."""
    flops, read, written, out = cost
    op = info.op_type
    bias = len(ins) > 2 and bool(ins[2])
    folded_bn = bias and (ins[2].endswith(FOLDED_BN_SUFFIX) or bool(info.attrs.get(FOLDED_BATCHNORM)))
    unit = _contraction_kind(info)
    b.fwd.append((flops, read + written, unit))
    if op.startswith("Conv") and bias and not folded_bn:
        b.fwd.append((out / 4, 2 * out, False))  # cuDNN's separate bias add
    if folded_bn:  # training-mode BatchNorm on the output: one kernel each way
        b.fwd.append((7 * out / 4, 2 * out, False))
        b.bwd.append((7 * out / 4, 3 * out, False))
    x, w = (info.inputs + [None, None])[:2]
    weight_bytes = _nbytes(w)
    if ins and ins[0] not in graph.graph_inputs:
        b.bwd.append((flops, out + weight_bytes + _nbytes(x), unit))  # d input
    b.bwd.append((flops, out + _nbytes(x) + weight_bytes, unit))  # d weight (or d of the second operand)
    if bias:
        b.bwd.append((out / 4, out, False))  # bias gradient: a reduction over the output gradient


def _recurrent(b: _Builder, info: NodeInfo, cost: tuple[float, float, float, float]) -> None:
    """LSTM/GRU/RNN: per direction one input GEMM, then a GEMM and a gate kernel per time step, each way."""
    flops, read, written, _ = cost
    x = info.inputs[0] if info.inputs else None
    w = info.inputs[1] if len(info.inputs) > 1 else None
    if x is None or w is None:
        b.fwd.append((flops, read + written, CONV))
        b.bwd.append((2 * flops, 2 * (read + written), CONV))
        return
    layout = int(info.attrs.get("layout", 0))
    steps = int(x.shape[1] if layout else x.shape[0])
    dirs = int(w.shape[0])
    per = max(1, steps * dirs)
    step_kernel = (flops / (2 * per), (read + written) / per)
    for _ in range(dirs):
        b.fwd.append((flops / 2 / dirs, (read + written) / dirs, CONV))  # input projection of every step (cuDNN)
        b.bwd.append((flops / dirs, (read + written) / dirs, CONV))  # weight gradients (input and recurrent)
        for _ in range(steps):
            b.fwd.append((step_kernel[0], step_kernel[1], CONV, True))  # launched by cuDNN, not the dispatcher
            b.fwd.append((step_kernel[0] / 8, step_kernel[1], False, True))
            b.bwd.append((step_kernel[0], step_kernel[1], CONV, True))
            b.bwd.append((step_kernel[0] / 8, step_kernel[1], False, True))


def _pointwise(b: _Builder, graph: CanonicalGraph, op: str, category: str, ins: tuple[str, ...],
               cost: tuple[float, float, float, float]) -> None:
    """Any other op: one forward kernel (none for torch views) and its backward kernels."""
    flops, read, written, out = cost
    if op not in TORCH_VIEWS:
        b.fwd.append((flops, read + written, False))
    data_ins = [n for n in ins if n and n not in graph.params and n in graph.shapes]
    if op in PASS_GRADIENT:
        n_bwd = 0
    elif op in PRODUCTS:
        n_bwd = max(1, len(data_ins))
    elif category == "norm":
        n_bwd = 2  # input gradient, affine-parameter gradients
    else:
        n_bwd = 1 if data_ins else 0
    for _ in range(n_bwd):
        b.bwd.append((flops, read + written + out, False))


def _casts(b: _Builder, graph: CanonicalGraph, ins: tuple[str, ...], size_of: dict[str, int],
           cast_weights: set[str]) -> None:
    """Autocast before a contraction: a weight's 16-bit copy (once per step) and fp32 activations, each way."""
    for n in ins[:2]:
        shp = graph.shapes.get(n) if n else None
        if shp is None or shp[0] is None or shp[2] != 4:
            continue
        numel = float(math.prod(shp[0]))
        if n in graph.params:
            key = graph.params[n]
            if key in cast_weights:
                continue
            cast_weights.add(key)
        elif size_of.get(n, 4) != 4:
            continue  # already 16-bit
        b.fwd.append((0.0, 6 * numel, False))
        b.bwd.append((0.0, 6 * numel, False))


def _trainable(graph: CanonicalGraph, op: str, ins: tuple[str, ...], out: dict[str, int], folded: bool = False) -> None:
    """Record the trainable parameter tensors a node reads (key -> elements); a folded BatchNorm's bias counts two
    (its shift and its scale)."""
    skip = NON_TRAINABLE_INPUTS.get(op, ())
    for pos, name in enumerate(ins):
        if pos in skip or name not in graph.params:
            continue
        key = graph.params[name]
        numel = graph.param_sizes.get(key, (0, 4))[0]
        out[key] = numel
        if key.endswith(FOLDED_BN_SUFFIX) or (folded and pos == 2):
            out[key + "::gamma"] = numel


def _fused_attention(b: _Builder, graph: CanonicalGraph, core: AttentionCore, flops: float, half: bool) -> None:
    """One fused attention kernel forward; a preprocessing and a main kernel backward (see :mod:`.attention`)."""
    item = 2 if half else None
    qkvo = [float(_nbytes(_tensor(graph, n, item))) for n in (core.q, core.k, core.v, core.out)]
    mask = float(_nbytes(_tensor(graph, core.mask))) if core.mask else 0.0
    b.fwd.append((flops, sum(qkvo) + mask, MATMUL))
    b.bwd.append((2 * qkvo[3], 2 * qkvo[3], False))  # rowwise dot(dO, O)
    b.bwd.append((BACKWARD_FLOPS * flops, 2 * sum(qkvo) + mask, MATMUL))  # reads Q, K, V, O, dO; writes dQ, dK, dV


def _forward_pass(b: _Builder, graph: CanonicalGraph, half: bool,
                  only: set[int] | None = None) -> tuple[dict[str, int], list[float]]:
    """Forward and backward kernels of every node (of the nodes ``only``, when given); returns the trainable
    tensors and each op's output bytes."""
    size_of: dict[str, int] = {}
    cast_weights: set[str] = set()
    trainable: dict[str, int] = {}
    out_bytes: list[float] = []
    fused = {i: core for core in attention_cores(graph) for i in core.nodes}
    core_flops: dict[int, float] = {}
    for i, (op, _domain, ins, outs, _name, attrs, entry) in enumerate(graph.nodes):
        if entry is not None and entry.rule is view_rule:
            if ins and ins[0] in size_of:
                size_of.update((o, size_of[ins[0]]) for o in outs)
            continue
        category = entry.category if entry is not None else "other"
        mac = category in MAC_CATEGORIES
        if only is not None and i not in only:
            if half:
                autocast_sizes(op, ins, outs, graph.params, mac, graph.shapes, size_of)
            continue
        if half and mac and op not in RECURRENT and i not in fused:
            _casts(b, graph, ins, size_of, cast_weights)
        if half:
            autocast_sizes(op, ins, outs, graph.params, mac, graph.shapes, size_of)
        info = _node_info(graph, op, attrs, ins, outs, mac, half, size_of)
        cost = _forward_cost(entry, info)
        out_bytes.append(cost[3])
        if i in fused:
            core = fused[i]
            if op == "MatMul" and i in (core.first, core.last):
                core_flops[core.last] = core_flops.get(core.last, 0.0) + cost[0]
            if i == core.last:
                _fused_attention(b, graph, core, core_flops[i], half)
        elif op in RECURRENT:
            _recurrent(b, info, cost)
        elif mac:
            _contraction(b, graph, ins, info, cost)
        else:
            _pointwise(b, graph, op, category, ins, cost)
        _trainable(graph, op, ins, trainable, bool(attrs.get(FOLDED_BATCHNORM)))
    return trainable, out_bytes


def _accumulations(b: _Builder, graph: CanonicalGraph) -> None:
    """Backward: a tensor read by k ops sums k gradients (k-1 add kernels); graph inputs need no gradient."""
    readers: Counter[str] = Counter()
    inputs = set(graph.graph_inputs)
    for op, _d, ins, _o, _n, _a, entry in graph.nodes:
        if entry is not None and entry.rule is view_rule:
            continue
        readers.update(n for n in set(ins) if n and n not in graph.params and n not in inputs)
    for name, k in readers.items():
        t = _tensor(graph, name)
        if k > 1 and t is not None:
            b.bwd.extend([(float(t.numel), 3.0 * t.nbytes, False)] * (k - 1))


def _loss_and_dropout(b: _Builder, graph: CanonicalGraph, out_bytes: list[float]) -> None:
    """The loss (log-softmax + NLL, two backward kernels and the gradient's fill) and dropped Dropout kernels."""
    outs = [t for t in (_tensor(graph, n) for n in graph.nodes[-1][3]) if t is not None] if graph.nodes else []
    logits = float(sum(t.nbytes for t in outs)) or 4.0
    b.fwd.extend([(logits, 2 * logits, False), (0.0, logits, False)])
    b.bwd.extend([(logits, 2 * logits, False), (0.0, logits, False), (0.0, 4.0, False)])  # fill first (reversed)
    n_drop = int(graph.dropped.get("dropout", 0) + graph.dropped.get("stochastic depth", 0))
    typical = float(np.median(out_bytes)) if out_bytes else 4.0
    for _ in range(n_drop):
        b.fwd.append((typical / 4, 2.25 * typical, False))
        b.bwd.append((typical / 4, 2.25 * typical, False))


def foreach_launches(n_tensors: int, numel: int, reads: int, writes: int) -> int:
    """Kernels one multi-tensor op launches: one per ``FOREACH_TENSORS[depth]`` tensors and per ``FOREACH_CHUNK``
    elements (0 for no tensors)."""
    if n_tensors <= 0:
        return 0
    depth = min(5, reads + (writes if writes and reads < 2 else 0))
    return max(math.ceil(n_tensors / FOREACH_TENSORS[max(1, depth)]), math.ceil(numel / FOREACH_CHUNK))


def _foreach(b: _Builder, n_tensors: int, numel: int, reads: int, writes: int, flops_per: float = 1.0) -> None:
    """One multi-tensor op: one launch per ``FOREACH_TENSORS[depth]`` tensors and per ``FOREACH_CHUNK`` elements."""
    if n_tensors <= 0:
        return
    launches = foreach_launches(n_tensors, numel, reads, writes)
    for k in range(launches):  # one dispatched op; its further launches come from torch's C++ loop
        b.opt.append((flops_per * numel / launches, 4.0 * (reads + writes) * numel / launches, False, k > 0))


def _optimizer(b: _Builder, trainable: dict[str, int], optimizer: str, precision: str) -> None:
    """The optimizer step as torch's foreach path runs it, with fp16's GradScaler around it."""
    n, numel = len(trainable), int(sum(trainable.values()))
    if precision == "fp16":
        b.fwd.append((1.0, 8.0, False))  # scale the loss
        _foreach(b, n, numel, 1, 1)  # unscale + inf check
        b.opt.extend([(1.0, 8.0, False)] * 2)
        b.sync_after_opt_prefix = len(b.opt) - 1  # found_inf.item(): the host waits for the GPU
    for reads, writes in OPTIMIZER_OPS.get(optimizer, OPTIMIZER_OPS["sgd"]):
        _foreach(b, n, numel, reads, writes, 2.0)
    if precision == "fp16":
        b.opt.append((1.0, 8.0, False))  # update the scale


def reread_nodes(graph: CanonicalGraph) -> set[int]:
    """The nodes of a second pass over shared weights: each node that reads a parameter an earlier node read, and
    every node downstream of one (a GAN's discriminator on the generated batch, after its pass on the real one)."""
    seen: set[str] = set()
    tainted: set[str] = set()
    out: set[int] = set()
    for i, (_op, _d, ins, outs, _n, _a, _e) in enumerate(graph.nodes):
        keys = {graph.params[n] for n in ins if n in graph.params}
        if keys & seen or any(n in tainted for n in ins):
            out.add(i)
            tainted.update(outs)
        seen |= keys
    return out


def _bce_losses(b: _Builder, graph: CanonicalGraph, n: int) -> None:
    """``n`` binary cross-entropies on logits (log-sigmoid, 1 - target, product, difference, mean: 5 kernels; 3
    backward), on the logits of the graph's last node."""
    outs = [t for t in (_tensor(graph, o) for o in graph.nodes[-1][3]) if t is not None] if graph.nodes else []
    logits = float(sum(t.nbytes for t in outs)) or 4.0
    for _ in range(n):
        b.fwd.extend([(logits / 4, 2 * logits, False)] * 4 + [(logits / 4, logits, False)])
        b.bwd.extend([(0.0, 4.0, False), (logits / 4, 2 * logits, False), (logits / 2, 3 * logits, False)])


def _gan_step(b: _Builder, graph: CanonicalGraph, precision: str, optimizer: str) -> dict[str, int]:
    """A GAN iteration over a graph that exports G(z), D(real), D(G(z)): the discriminator step (D on the real
    and the detached fake batch, two losses, its optimizer), then the generator step (D on the fake batch again,
    one loss, backward through D and G, the generator's optimizer). The second pass over shared weights
    (:func:`reread_nodes`) runs once more each way; each optimizer steps its own parameters."""
    half = precision in HALF
    trainable, _ = _forward_pass(b, graph, half)
    second = reread_nodes(graph)
    disc, _ = _forward_pass(b, graph, half, only=second)  # the generator step's pass through D
    _accumulations(b, graph)
    _bce_losses(b, graph, 3)
    b.fwd.append((1.0, 12.0, False))  # loss_d = real + fake
    _optimizer(b, {k: v for k, v in trainable.items() if k in disc}, optimizer, precision)
    _optimizer(b, {k: v for k, v in trainable.items() if k not in disc}, optimizer, precision)
    return trainable


RECIPES: tuple[str, ...] = ("standard", "gan")  # how a training step runs over its graph


def step_kernels(graph: CanonicalGraph, precision: str = "fp32", optimizer: str = "sgd",
                 recipe: str = "standard") -> KernelList:
    """The kernels of one training step of a canonical graph, in launch order (see the module notes).

    ``recipe`` says how the step runs over the graph: ``standard`` (one forward, loss, backward, optimizer) or
    ``gan`` (the two-player step of :func:`_gan_step`, for a graph exporting G(z), D(real) and D(G(z)))."""
    b = _Builder()
    if recipe == "gan":
        trainable = _gan_step(b, graph, precision, optimizer)
        cycles = 2
    else:
        trainable, out_bytes = _forward_pass(b, graph, precision in HALF)
        _accumulations(b, graph)
        _loss_and_dropout(b, graph, out_bytes)
        _optimizer(b, trainable, optimizer, precision)
        cycles = 1
    kl = b.arrays()
    kl.param_tensors = len(trainable)
    kl.cycles = cycles
    kl.input_bytes = int(sum(_nbytes(_tensor(graph, n)) for n in set(graph.graph_inputs)))
    return kl
