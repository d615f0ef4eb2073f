"""The kernels one training step launches, in launch order, from a canonical graph (torch-free).

A :class:`KernelList` holds one entry per CUDA kernel: FLOPs, bytes moved, whether it runs on tensor cores
(contractions) and in which phase it is launched (forward, backward, optimizer, other). The rules follow
how eager PyTorch runs a training step on a GPU:

- **forward**: one kernel per op that does work (views and shape metadata launch none; Slice, Split, Expand and
  Transpose are views in torch, but a permute that a reshape, a convolution or a matmul needs contiguous is copied,
  :func:`copied_transposes`, one kernel each way); a Conv with a bias adds a bias kernel; the loss adds two
  (log-softmax, NLL);
- **training-mode layers an eval export drops**: every BatchNorm the canonical form folded into a
  contraction (the contraction carries ``FOLDED_BATCHNORM``, or its bias is named ``...::folded_batchnorm_bias``) runs
  as one forward and one backward kernel on the contraction's output, and its scale and shift are stepped by the
  optimizer; every Dropout or stochastic-depth node it dropped runs one kernel each way (on an activation of the
  graph's median size);
- **attention cores** (:mod:`gpupred.step.physics.attention`: MatMul -> scale/mask -> Softmax -> MatMul) run as one fused
  kernel forward and two backward, as torch's ``scaled_dot_product_attention`` does;
- **depthwise convolutions** (weight ``[C, 1, k, k]``) are ``DEPTHWISE`` kernels: CUDA cores at ``depthwise_eff``;
- **backward**: a contraction launches a data-gradient kernel (none when its input is a graph input) and a
  weight-gradient kernel, plus a bias-gradient reduction; a product of two activations launches two; Add/Sub
  launch none (the gradient passes through); other ops launch one; a tensor read by k ops accumulates k-1
  gradients (one add kernel each); the backward starts with one fill kernel and the loss's two;
- **autocast** (bf16/fp16): each weight a contraction reads is cast to 16 bits once per step (forward) and its
  gradient cast back (backward); an fp32 activation entering a contraction is cast each way too, and a 16-bit one
  entering an op autocast runs in fp32 (``FP32_CAST_OPS``: softmax, layer norm, ...);
- **recurrent layers** (LSTM/GRU/RNN): per layer and direction, one input-projection GEMM, then two kernels per
  time step (recurrent GEMM, gate update) forward and backward, plus two weight-gradient GEMMs; the per-step
  kernels are launched by cuDNN from C++ (``library``: a bare launch, no dispatcher or Python on the host);
- **optimizer** as torch runs it by default on CUDA (``foreach``): SGD with momentum 3 multi-tensor ops, Adam 7;
  each op launches one kernel per ``FOREACH_TENSORS[depth]`` tensors (and per 320 x 64 Ki elements); fp16's
  GradScaler adds an unscale op, three small kernels and one host synchronization (its inf check);
- **recipe** ``gan`` (a DCGAN's step, :func:`gpupred.step.physics.columns.recipe_of`): the discriminator's second pass over
  shared weights runs once more each way, three BCE losses, one optimizer per network, two overhead cycles.

The training setup (:class:`gpupred.setups.TrainingSetup`; its defaults are the sweeps') changes them:

- **precision**: autocast (bf16, fp16) as above; ``bf16-pure`` runs every tensor in 2 bytes and casts nothing; which
  contractions run on tensor cores: every one in 16 bits, fp32 matmuls only with ``tf32_matmul``, fp32 cuDNN
  convolutions and RNNs only with ``tf32_conv`` (:attr:`KernelList.on_tc`);
- **optimizer**: SGD (3 foreach ops with momentum, 1 without), Adam (7), AdamW (Adam's and a decay multiply when
  its weight decay is not 0); ``fused``: one ``_fused_*`` op over the tensors (Adam adds the device step counters'
  increment), and GradScaler's inf check feeds the fused kernel without a host synchronization; ``forloop``: each
  op once per tensor, launched from Python;
- **checkpointing**: the forward kernels of every checkpointed block (:mod:`gpupred.step.physics.blocks`) run again
  before its backward;
- **accumulation** k: forward and backward k times (the loss divided by k each time), every micro-batch after the
  first adds its gradients into ``.grad`` (one add per parameter tensor), one optimizer step; the per-step overhead
  is paid per micro-batch;
- **attention**: which attention cores run fused (:func:`gpupred.step.physics.attention.fused_cores`); the others run as
  their ops (scores written, softmax, product by V);
- **LoRA and QLoRA** (:mod:`gpupred.finetune`): a frozen weight launches no weight-gradient kernel (its
  contraction's backward is the data gradient alone: a third less work) and its autocast copy is not cast back; each
  adapter adds two small GEMMs and a scaled add forward, four GEMMs and the add into the input gradient backward;
  a 4-bit weight is dequantized once forward and once backward in place of autocast's cast (three kernels each
  way under double quantization: its absmax, the offset, its codes), its output cast back to an fp32 input's dtype,
  and peft clones an adapted 4-bit layer's output; the optimizer steps only the trainable tensors;
- **bitsandbytes' optimizers and Adafactor**: one kernel per tensor from Python (8-bit moments and absmax, or fp32
  moments), and Adafactor's ops per tensor (8 full-size kernels on a matrix, 5 on a vector);
- **memory format**: under the default NCHW, each tensor-core convolution over a 4-D (or 5-D) tensor transposes
  its operands to NHWC and back (``NCHW_TRANSPOSES``: cuDNN's tensor-core kernels are NHWC-native);
  ``channels_last`` removes those.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from functools import cached_property, lru_cache
from operator import itemgetter
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from gpupred.graph.canonical import FOLDED_BATCHNORM, CanonicalGraph
from gpupred.graph.costs import (MAC_CATEGORIES, NON_TRAINABLE_INPUTS, MissingShape, NodeInfo, TensorInfo, output_bytes,
                                 view_rule)
from gpupred.graph.features import NodeCosts, NodeTensors, autocast_sizes, node_costs
from gpupred.step.physics.attention import BACKWARD_FLOPS, TORCH_VIEWS, AttentionCore, attention_cores, fused_cores
from gpupred.step.physics.blocks import checkpoint_blocks
from gpupred.step.physics.caveats import multi_branch_sums
from gpupred.setups import TrainingSetup, as_setup

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
# the foreach (or per-tensor) ops of one optimizer step without weight decay: (tensor lists read, lists written)
OPTIMIZER_OPS: dict[str, tuple[tuple[int, int], ...]] = {
    "sgd": ((1, 1), (2, 1), (2, 1)),  # buf *= momentum; buf += grad; param -= lr * buf
    "sgd_nomomentum": ((2, 1),),  # param -= lr * grad
    "adam": ((2, 1), (1, 1), (3, 1), (1, 1), (1, 1), (1, 1), (3, 1)),  # lerp m, v*=b2, addcmul v, sqrt, div, add eps, addcdiv
}
DECAY_OP = (2, 1)  # weight decay: grad += wd * param (SGD, Adam); AdamW's param *= 1 - lr * wd reads one list (1, 1)
# fused kernels: (tensor lists read, lists written, FLOPs per element); Adam's and AdamW's also step device counters
FUSED_OPS: dict[str, tuple[int, int, float]] = {"sgd": (3, 2, 4.0), "sgd_nomomentum": (2, 1, 2.0), "adam": (4, 3, 12.0),
                                                "adamw": (4, 3, 14.0)}
NCHW_TRANSPOSES: tuple[int, int] = (2, 4)  # NCHW <-> NHWC transposes of a tensor-core convolution: forward (x in, y
# out), backward (dy in and dx out for the data gradient, x and dy in for the weight gradient)
LAYOUT_VIEWS: frozenset[str] = frozenset({"Split", "Squeeze", "Unsqueeze", "Slice", "Gather"})  # keep a permuted layout
NEEDS_CONTIGUOUS: frozenset[str] = frozenset({"Reshape", "Flatten", "MatMul", "Conv", "Gemm", "Einsum"})
# ops autocast runs in fp32 (torch's CUDA autocast fp32 list): a 16-bit activation input is cast up first, each way
FP32_CAST_OPS: frozenset[str] = frozenset({"Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "Exp",
                                           "Log", "Pow", "ReduceSum"})
HALF = frozenset({"bf16", "fp16"})  # autocast precisions (gpupred.setups.AUTOCAST)


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
    on_tc: np.ndarray | None = None  # bool: runs on tensor cores (None: decided by the precision, as before setups)
    precision: str = "fp32"  # the setup's precision: which tensor-core peak (16-bit or TF32) ``on_tc`` kernels reach
    micro_batches: int = 1  # forward/backward passes per optimizer step (gradient accumulation)
    traits: dict[str, float] = field(default_factory=dict)  # graph traits of failure classes (gpupred.step.physics.caveats)

    def __len__(self) -> int:
        return int(self.flops.shape[0])


def kernel_columns(groups: Sequence[tuple[Sequence[tuple[Any, ...]], int]]) -> tuple[np.ndarray, ...]:
    """(FLOPs, bytes, unit, launched by a library, phase) arrays of lists of kernels, each list with its phase (which
    a kernel's own, its fifth field, overrides), in order."""
    kernels = [k for group, _ in groups for k in group]
    n = len(kernels)
    if n <= FEW_KERNELS:
        return _few_columns([(k, p) for group, p in groups for k in group])
    # a column at a time through C-level iterators: a pass holds thousands of kernels, most of them 3 fields long
    lengths = np.fromiter(map(len, kernels), np.intp, n)  # numpy's int8 conversion of each item is the slow one
    library = np.zeros(n, bool)
    longer = np.flatnonzero(lengths > 3)
    if longer.size:
        library[longer] = [bool(kernels[i][3]) for i in longer]
    phase = np.concatenate([np.full(len(group), p, np.int8) for group, p in groups]) if groups else np.zeros(0, np.int8)
    own = np.flatnonzero(lengths > 4)
    if own.size:
        phase[own] = [kernels[i][4] for i in own]
    return (np.fromiter(map(itemgetter(0), kernels), float, n), np.fromiter(map(itemgetter(1), kernels), float, n),
            np.fromiter(map(itemgetter(2), kernels), np.intp, n).astype(np.int8), library, phase)


FEW_KERNELS = 32  # kernel_columns builds the columns of this many kernels or fewer (an optimizer's) from lists


def _few_columns(kernels: Sequence[tuple[tuple[Any, ...], int]]) -> tuple[np.ndarray, ...]:
    """:func:`kernel_columns` of a few kernels, each with its list's phase: a column a list, without the set-up of
    the iterators that pay off over a pass's thousands."""
    return (np.array([k[0] for k, _ in kernels], float), np.array([k[1] for k, _ in kernels], float),
            np.array([k[2] for k, _ in kernels], np.intp).astype(np.int8),
            np.array([len(k) > 3 and bool(k[3]) for k, _ in kernels], bool),
            np.array([k[4] if len(k) > 4 else p for k, p in kernels], np.intp).astype(np.int8))


@dataclass(frozen=True)
class KeptPass:
    """A step's kernels before its optimizer, kept with the graph: the forward, the backward (in forward order) and
    their :func:`kernel_columns` (the backward launched in reverse), worked out once for every job that shares them."""

    fwd: tuple[tuple[Any, ...], ...]
    make_bwd: Callable[[], tuple[tuple[Any, ...], ...]]  # the backward, made when first read (:attr:`bwd`)
    columns: tuple[np.ndarray, ...]
    per_phase: np.ndarray  # kernels per phase (:func:`phase_counts`)

    @cached_property
    def bwd(self) -> tuple[tuple[Any, ...], ...]:
        """The backward's kernels in forward order: read only where a step adds its own before the kept pass's, so a
        checkpointed pass (:func:`checkpointed_pass`) makes them then."""
        return self.make_bwd()


def kept_pass(fwd: Sequence[tuple[Any, ...]], bwd: Sequence[tuple[Any, ...]]) -> KeptPass:
    """The :class:`KeptPass` of a forward and a backward (in forward order)."""
    columns = kernel_columns([(fwd, FWD), (bwd[::-1], BWD)])
    backward = tuple(bwd)
    return KeptPass(tuple(fwd), lambda: backward, columns, phase_counts(columns))


def phase_counts(columns: tuple[np.ndarray, ...]) -> np.ndarray:
    """Kernels per phase (``PHASES``' order) of :func:`kernel_columns`."""
    return np.bincount(columns[4], minlength=len(PHASES))


def tensor_core_mask(unit: np.ndarray, setup: TrainingSetup) -> np.ndarray:
    """Which kernels of contraction kinds ``unit`` run on tensor cores under a setup: every cuDNN convolution and
    matmul in 16 bits, in fp32 those its TF32 options allow; CUDA-core and depthwise kernels never."""
    by_unit = np.zeros(DEPTHWISE + 1, bool)  # looked up per kernel
    by_unit[CONV], by_unit[MATMUL] = setup.half or setup.tf32_conv, setup.half or setup.tf32_matmul
    return by_unit[unit]


class _Builder:
    """Accumulates kernels phase by phase (backward collected in forward order, then reversed).

    A kernel is ``(FLOPs, bytes, unit[, launched by a library[, phase]])``: ``unit`` is 0 (CUDA cores) or a
    contraction kind; a phase given overrides the list's (a checkpointed block's forward, run again in backward).
    A step may start with a pass kept with the graph (:meth:`start_with`): ``fwd`` and ``bwd`` then hold the kernels
    that follow its own, which are never copied.
    """

    def __init__(self, setup: TrainingSetup, place: Any = None) -> None:
        self.setup = setup
        self.place = place  # gpupred.finetune.Placement under LoRA/QLoRA or a shape-counted optimizer, else None
        self.kept: KeptPass | None = None  # launched first: its forward before ``fwd``, its backward after ``bwd``
        self.fwd: list[tuple[Any, ...]] = []
        self.bwd: list[tuple[Any, ...]] = []  # forward order; launched in reverse
        self.opt: list[tuple[Any, ...]] = []
        self.other: list[tuple[Any, ...]] = []
        self.accumulate: list[tuple[Any, ...]] = []  # what each micro-batch after the first adds (gradient adds)
        self.sync_after_opt_prefix = -1  # index into opt after which the host syncs (-1: none)

    def start_with(self, kept: KeptPass) -> None:
        """Add a kept pass's kernels: by reference into an empty builder, else copied after those it holds."""
        if self.kept is None and not self.fwd and not self.bwd:
            self.kept = kept
        else:
            self.fwd.extend(kept.fwd)
            self.bwd.extend(kept.bwd)

    def pass_columns(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """:func:`kernel_columns` of one forward and backward pass (the backward launched in reverse) and its kernels
        per phase: the kept pass's, with the kernels added after it (after its forward, before its reversed
        backward)."""
        if self.kept is not None and not self.fwd and not self.bwd:
            return self.kept.columns, self.kept.per_phase
        own = kernel_columns([(self.fwd, FWD), (self.bwd[::-1], BWD)])
        if self.kept is not None:
            n = len(self.kept.fwd)
            own = tuple(np.concatenate([k[:n], o, k[n:]]) for k, o in zip(self.kept.columns, own))
        return own, phase_counts(own)

    def arrays(self) -> KernelList:
        """The kernels in launch order: a pass, then per further micro-batch a pass and its gradient sums, then the
        optimizer's and the rest."""
        one, per_phase = self.pass_columns()
        parts = [one]
        k = self.setup.accumulation
        if k > 1:
            sums = kernel_columns([(self.accumulate, BWD)])
            parts += [one, sums] * (k - 1)
            per_phase = per_phase * k + phase_counts(sums) * (k - 1)
        parts.append(kernel_columns([(self.opt, OPT), (self.other, OTHER)]))
        per_phase = per_phase + phase_counts(parts[-1])
        flops, nbytes, tc, library, phase = (np.concatenate([p[j] for p in parts]) for j in range(5))
        n = len(flops)
        sync = np.zeros(n, bool)
        if self.sync_after_opt_prefix >= 0:
            sync[n - len(self.other) - len(self.opt) + self.sync_after_opt_prefix] = True
        counts = Counter({PHASES[p]: int(c) for p, c in enumerate(per_phase)})
        s = self.setup
        return KernelList(flops, nbytes, tc, phase, sync, library, counts=counts, on_tc=tensor_core_mask(tc, s),
                          precision=s.precision, micro_batches=s.accumulation)


_new_tuple = tuple.__new__


def _tensor(graph: CanonicalGraph, name: str, size: int | None = None) -> TensorInfo | None:
    """A tensor's shape and item size (``size`` overrides the graph's, for autocast); None when unknown."""
    shp = graph.shapes.get(name) if name else None
    if shp is None or shp[0] is None:
        return None
    return _new_tuple(TensorInfo, (shp[0], size or shp[2], name in graph.params))  # TensorInfo(...), without its
    # Python-level __new__: built for every tensor of every node


def _nbytes(t: TensorInfo | None) -> int:
    return t.nbytes if t is not None else 0


def node_tensors(graph: CanonicalGraph) -> tuple[NodeTensors, ...]:
    """Per node, its inputs' and outputs' :func:`_tensor` at the graph's own item sizes: what every precision's pass
    starts from (kept with the graph). Views, which a pass skips, get none."""
    working = [(ins, outs) for _op, _d, ins, outs, _n, _a, entry in graph.nodes
               if entry is None or entry.rule is not view_rule]
    names = {n for ins, outs in working for n in (*ins, *outs)}
    info = {n: _tensor(graph, n) for n in names}.__getitem__  # each tensor once, however many nodes read it
    pairs = iter([(tuple(map(info, ins)), tuple(map(info, outs))) for ins, outs in working])
    return tuple(((), ()) if entry is not None and entry.rule is view_rule else next(pairs)
                 for _op, _d, _i, _o, _n, _a, entry in graph.nodes)


def _node_info(op: str, attrs: dict, names: tuple[tuple[str, ...], tuple[str, ...]], tensors: NodeTensors, mac: bool,
               setup: TrainingSetup, size_of: dict[str, int]) -> NodeInfo:
    """What a cost rule of :mod:`gpupred.graph.costs` reads about a node (its input and output ``names`` and their
    ``tensors`` at the graph's item sizes), with the precision's item sizes (autocast: 16 bits at contractions, as
    autocast decides elsewhere; pure bf16: every float tensor in 2 bytes)."""
    pure, autocast = setup.precision == "bf16-pure", setup.autocast
    if not (pure or autocast):  # every tensor at the graph's own item size
        return NodeInfo(op, attrs, list(tensors[0]), list(tensors[1]))

    def sized(t: TensorInfo | None, name: str, is_in: bool) -> TensorInfo | None:
        if t is None or t.itemsize != 4:  # unknown, or not a 4-byte tensor
            return t
        if mac or pure:
            size = 2
        elif is_in and t.is_param:
            return t
        else:
            size = size_of.get(name)
        return t if size is None else _new_tuple(TensorInfo, (t.shape, size, t.is_param))

    return NodeInfo(op, attrs, [sized(t, n, True) for t, n in zip(tensors[0], names[0])],
                    [sized(t, n, False) for t, n in zip(tensors[1], names[1])])


def shared_costs(graph: CanonicalGraph, setup: TrainingSetup) -> NodeCosts | None:
    """The featurizer's :func:`gpupred.graph.features.node_costs` where they are what this pass would compute: in fp32
    (every tensor at the graph's item size), and under autocast on a graph whose contractions read and write no
    4-byte tensor but fp32 ones (the featurizer halves only fp32 tensors at a contraction, this pass every 4-byte
    one). None for pure bf16 and for such graphs: the pass sizes its tensors itself (:func:`_node_info`)."""
    if setup.precision == "bf16-pure":
        return None
    if setup.autocast and graph.memo("wide_ints_at_contractions", lambda: wide_ints_at_contractions(graph)):
        return None
    return node_costs(graph, setup.autocast)


def wide_ints_at_contractions(graph: CanonicalGraph) -> bool:
    """Whether a contraction reads or writes a 4-byte tensor that is not fp32 (an int32 index, say)."""
    from onnx import TensorProto

    for _op, _d, ins, outs, _n, _a, entry in graph.nodes:
        if entry is None or entry.category not in MAC_CATEGORIES:
            continue
        for name in (*ins, *outs):
            shp = graph.shapes.get(name) if name else None
            if shp is not None and shp[0] is not None and shp[2] == 4 and shp[1] != TensorProto.FLOAT:
                return True
    return False


def _forward_cost(entry: object, info: NodeInfo) -> tuple[float, float, float, float]:
    """(FLOPs, bytes read, bytes written, output bytes) of a node's forward kernel; unknown ops move their outputs."""
    out = float(output_bytes(info.outputs))
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


def _layout_transposes(b: _Builder, info: NodeInfo, unit: int, x_bytes: float, out: float, data_grad: bool) -> None:
    """NCHW tensor-core convolutions: cuDNN transposes operands to NHWC and results back (``NCHW_TRANSPOSES``);
    none under ``channels_last``, on CUDA cores, or for 1-D convolutions (no memory format)."""
    s = b.setup
    x = info.inputs[0] if info.inputs else None
    if s.channels_last or unit != CONV or not (s.half or s.tf32_conv) or x is None or len(x.shape) < 4:
        return
    b.fwd.extend([(0.0, 2 * x_bytes, False, True), (0.0, 2 * out, False, True)][:NCHW_TRANSPOSES[0]])
    bwd = [(0.0, 2 * out, False, True), (0.0, 2 * x_bytes, False, True)] if data_grad else []
    bwd += [(0.0, 2 * x_bytes, False, True), (0.0, 2 * out, False, True)]
    b.bwd.extend(bwd[:NCHW_TRANSPOSES[1]])


def _contraction(b: _Builder, graph: CanonicalGraph, ins: tuple[str, ...], info: NodeInfo,
                 cost: tuple[float, float, float, float], wide_input: bool = False) -> None:
    """A Conv/Gemm/MatMul: forward (+ bias, + a folded BatchNorm), data and weight gradients, bias gradient.
    ``wide_input``: its activation input is fp32 under autocast (what a 4-bit weight's output is cast back to)."""
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
    data_grad = bool(ins) and ins[0] not in graph.graph_inputs
    frozen = _frozen(b, graph, ins, 1)
    if data_grad:
        b.bwd.append((flops, out + weight_bytes + _nbytes(x), unit))  # d input
    if not frozen:
        b.bwd.append((flops, out + _nbytes(x) + weight_bytes, unit))  # d weight (or d of the second operand)
    if bias and not _frozen(b, graph, ins, 2):
        b.bwd.append((out / 4, out, False))  # bias gradient: a reduction over the output gradient
    _layout_transposes(b, info, unit, float(_nbytes(x)), out, data_grad)
    if frozen and b.place is not None:
        _adapter(b, graph, ins, float(_nbytes(x)), out, wide_input)


def _frozen(b: _Builder, graph: CanonicalGraph, ins: tuple[str, ...], pos: int) -> bool:
    """Whether the parameter a contraction reads at ``pos`` is frozen (LoRA's base: no gradient kernel)."""
    if b.place is None or not b.setup.lora or len(ins) <= pos or ins[pos] not in graph.params:
        return False
    return graph.params[ins[pos]] not in b.place.trainable


def _adapter(b: _Builder, graph: CanonicalGraph, ins: tuple[str, ...], x_bytes: float, out: float,
             wide_input: bool = False) -> None:
    """QLoRA's 4-bit weight and a LoRA adapter's kernels (see :mod:`gpupred.finetune`).

    A 4-bit weight with double quantization is dequantized each way as bitsandbytes' CUDA backend does it at
    training sizes (``_dequant_linear_fallback`` forward, ``MatMul4Bit.backward``'s ``dequantize_4bit``): its uint8
    absmax to fp32 (``dequantize_blockwise``), plus the offset, then the 4-bit codes to 16 bits (memory-bound on its
    4-bit and 16-bit bytes). ``Linear4bit`` casts its output back to an fp32 input's dtype (a kernel each way), and
    peft's 4-bit LoRA layer clones the base output before adding the adapter's. The adapter: forward ``A x``,
    ``B (A x)``, the scaled add (and dropout); backward both weight gradients, both data gradients and the add into
    the base's input gradient."""
    from gpupred.finetune import NF4_BLOCK, nf4_bytes

    key = graph.params[ins[1]]
    numel = graph.param_sizes.get(key, (0, 4))[0]
    w = b.place.adapted.get(key)
    if key in b.place.quantized:
        blocks = float(-(-numel // NF4_BLOCK))
        dequant = [(blocks, 5 * blocks, False), (blocks, 8 * blocks, False),  # the absmax, then its offset
                   (float(numel), float(nf4_bytes(numel) + 2 * numel), False)]
        b.fwd.extend(dequant)
        b.bwd.extend(dequant)
        if wide_input:  # .to(inp_dtype): 16-bit read, fp32 written; its backward casts the gradient down
            b.fwd.append((0.0, 3 * out, False))
            b.bwd.append((0.0, 3 * out, False))
        if w is not None:  # result.clone() of the (fp32 or 16-bit) base output
            b.fwd.append((0.0, (4 if wide_input else 2) * out, False))
    if w is None:
        return
    item = 2 if b.setup.half else 4
    r, rows = float(b.setup.lora_rank), float(w.rows) / max(len(w.nodes), 1)
    ax = rows * r * item
    a_flops, b_flops = 2 * rows * w.in_features * r, 2 * rows * r * w.out_features
    b.fwd += [(a_flops, x_bytes + ax, MATMUL), (b_flops, ax + out, MATMUL), (out / item, 3 * out, False)]
    b.bwd += [(b_flops, out + ax, MATMUL), (b_flops, out + ax, MATMUL), (a_flops, ax + x_bytes, MATMUL),
              (a_flops, ax + x_bytes, MATMUL), (x_bytes / item, 3 * x_bytes, False)]
    if b.setup.lora_dropout > 0:
        b.fwd.append((x_bytes / item, 2.25 * x_bytes, False))
        b.bwd.append((x_bytes / item, 2.25 * x_bytes, False))


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
    # each time step: a recurrent GEMM and a gate kernel, launched by cuDNN, not the dispatcher
    steps_each_way = [(step_kernel[0], step_kernel[1], CONV, True), (step_kernel[0] / 8, step_kernel[1], False, True)]
    steps_each_way *= steps
    for _ in range(dirs):
        b.fwd.append((flops / 2 / dirs, (read + written) / dirs, CONV))  # input projection of every step (cuDNN)
        b.bwd.append((flops / dirs, (read + written) / dirs, CONV))  # weight gradients (input and recurrent)
        b.fwd.extend(steps_each_way)
        b.bwd.extend(steps_each_way)


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
    """Autocast before a contraction: a weight's 16-bit copy (once per step; a frozen weight's gradient is not cast
    back, a 4-bit one is dequantized instead) and fp32 activations, each way."""
    for n in ins[:2]:
        shp = graph.shapes.get(n) if n else None
        if shp is None or shp[0] is None or shp[2] != 4:
            continue
        numel = float(math.prod(shp[0]))
        frozen = False
        if n in graph.params:
            key = graph.params[n]
            if key in cast_weights or (b.place is not None and key in b.place.quantized):
                continue
            cast_weights.add(key)
            frozen = b.place is not None and b.setup.lora and key not in b.place.trainable
        elif size_of.get(n, 4) != 4:
            continue  # already 16-bit
        b.fwd.append((0.0, 6 * numel, False))
        if not frozen:
            b.bwd.append((0.0, 6 * numel, False))


def _upcasts(b: _Builder, graph: CanonicalGraph, ins: tuple[str, ...], size_of: dict[str, int]) -> None:
    """Autocast before an op it runs in fp32 (``FP32_CAST_OPS``): each 16-bit activation input cast up, each way."""
    for n in ins[:1]:
        shp = graph.shapes.get(n) if n else None
        if shp is None or shp[0] is None or n in graph.params or size_of.get(n, 4) != 2:
            continue
        numel = float(math.prod(shp[0]))
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


def copied_transposes(graph: CanonicalGraph, fused: set[int]) -> set[int]:
    """The Transpose nodes torch runs as a copy: a permute is a view, but a reshape that merges permuted axes, a
    convolution, or a matmul folding permuted batch axes (``torch.matmul`` reshapes them) needs it contiguous first
    (``.contiguous()``, or ``reshape``'s own copy). A swap of the last two axes stays a view (matmuls take transposed
    operands), as does a permute read by a fused attention kernel or only by elementwise ops."""
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for t in node[2]:
            readers.setdefault(t, []).append(i)
    out = set()
    for i, (op, _d, _ins, outs, _n, attrs, _e) in enumerate(graph.nodes):
        perm = list(attrs.get("perm", ())) if op == "Transpose" else []
        rank = len(perm)
        if not perm or i in fused or perm == [*range(rank - 2), rank - 1, rank - 2]:
            continue
        frontier, seen = list(outs), 0
        while frontier and seen < 32 and i not in out:
            seen += 1
            for j in readers.get(frontier.pop(), []):
                if j in fused:
                    continue
                if graph.nodes[j][0] in LAYOUT_VIEWS:
                    frontier += list(graph.nodes[j][3])
                elif graph.nodes[j][0] in NEEDS_CONTIGUOUS:
                    out.add(i)
    return out


class _Pass:
    """The state of one forward pass over the graph: autocast sizes, cast weights, fused attention cores."""

    def __init__(self, b: _Builder, graph: CanonicalGraph) -> None:
        self.shared = shared_costs(graph, b.setup)  # the featurizer's infos and costs, where they are this pass's
        self.size_of: dict[str, int] = {} if self.shared is None else self.shared.sizes  # read-only when shared
        self.cast_weights: set[str] = set()
        self.trainable: dict[str, int] = {}
        self.out_bytes: list[float] = []
        self.fused = {i: core for core in fused_cores(graph, b.setup.attention) for i in core.nodes}
        self.core_flops: dict[int, float] = {}
        fused = frozenset(self.fused)  # which transposes are copies reads the nodes alone: kept for every batch size
        self.copies = graph.memo_structure(("copied_transposes", fused), lambda: copied_transposes(graph, set(fused)))
        # per node, what every precision's pass reads the same: its trainable tensors (kept for every batch size: they
        # read the nodes and parameters alone) and, where it sizes its own, its tensors (per batch size)
        self.trainables = graph.memo_structure("node_trainables", lambda: node_trainables(graph))
        self.tensors = graph.memo("node_tensors", lambda: node_tensors(graph)) if self.shared is None else ()


def node_trainables(graph: CanonicalGraph) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Per node, the trainable parameter tensors it reads (key, elements), as :func:`_trainable` records them."""
    out = []
    for op, _d, ins, _o, _n, attrs, _e in graph.nodes:
        read: dict[str, int] = {}
        _trainable(graph, op, ins, read, bool(attrs.get(FOLDED_BATCHNORM)))
        out.append(tuple(read.items()))
    return tuple(out)


Span = tuple[int, int, int, int]  # a node of a pass: (node, first forward kernel, past its last, past its backward's)


def recomputed(fwd: Sequence[tuple[Any, ...]], bwd: Sequence[tuple[Any, ...]], at: int, spans: Sequence[Span],
               blocks: Sequence[Any]) -> list[tuple[Any, ...]]:
    """A pass's backward (``bwd`` from ``at``) under activation checkpointing: after the backward kernels of a
    block's last node, the forward kernels of the block's nodes run again (the list is launched in reverse: the
    block's forward, then its backward). ``spans`` are the pass's nodes in order (:func:`_forward_pass`)."""
    return [bwd[p] if p >= 0 else as_forward(fwd[~p]) for p in recomputed_order(at, len(bwd), spans, blocks)]


def as_forward(kernel: tuple[Any, ...]) -> tuple[Any, ...]:
    """A forward kernel run again in the backward: its phase stays the forward's (its own, where it names one)."""
    return (*kernel, *(() if len(kernel) > 3 else (False,)), FWD)[:5]


def recomputed_order(at: int, end: int, spans: Sequence[Span], blocks: Sequence[Any]) -> list[int]:
    """:func:`recomputed`'s backward from ``at`` to ``end`` as positions: ``p >= 0`` the backward's kernel ``p``,
    ``~j`` (negative) the forward's kernel ``j`` run again."""
    inside = {i for block in blocks for i in block.nodes}
    ends = {max(block.nodes) for block in blocks}
    out: list[int] = []
    recorded: list[int] = []
    done = at
    for i, first, past, bwd_past in spans:
        out.extend(range(done, bwd_past))
        done = bwd_past
        if i not in inside:
            continue
        recorded += [~j for j in range(first, past)]
        if i in ends:
            out.extend(reversed(recorded))
            recorded = []
    out.extend(range(done, end))
    return out


def checkpointed_pass(kept: KeptPass, at: int, end: int, spans: Sequence[Span], blocks: Sequence[Any]) -> KeptPass:
    """A kept pass under activation checkpointing (its backward from ``at`` to ``end`` as :func:`recomputed` runs
    it), its columns gathered from the plain pass's (a kernel's columns are the same wherever it runs)."""
    plain = kept.bwd
    order = [*range(at), *recomputed_order(at, end, spans, blocks), *range(end, len(plain))]
    n_fwd, n_bwd = len(kept.fwd), len(plain)
    launched = np.asarray(order[::-1], dtype=np.intp)  # the backward runs in reverse
    at_column = np.concatenate([np.arange(n_fwd), np.where(launched >= 0, n_fwd + n_bwd - 1 - launched, ~launched)])
    columns = tuple(c[at_column] for c in kept.columns)
    return KeptPass(kept.fwd, lambda: tuple(plain[p] if p >= 0 else as_forward(kept.fwd[~p]) for p in order), columns,
                    phase_counts(columns))


def _node_kernels(b: _Builder, graph: CanonicalGraph, st: _Pass, i: int, mac: bool, category: str) -> None:
    """The forward and backward kernels of node ``i`` (its autocast sizes already recorded)."""
    op, _domain, ins, outs, _name, attrs, entry = graph.nodes[i]
    info: NodeInfo | None = None  # from the shared costs: made only for the ops that read it
    if st.shared is None:
        info = _node_info(op, attrs, (ins, outs), st.tensors[i], mac, b.setup, st.size_of)
        cost = _forward_cost(entry, info)
    else:
        cost = _shared_cost(st.shared, i)
    st.out_bytes.append(cost[3])
    if i in st.fused:
        core = st.fused[i]
        if op == "MatMul" and i in (core.first, core.last):
            st.core_flops[core.last] = st.core_flops.get(core.last, 0.0) + cost[0]
        if i == core.last:
            _fused_attention(b, graph, core, st.core_flops[i], b.setup.half)
    elif op in RECURRENT:
        _recurrent(b, info or st.shared.info(graph, i), cost)  # type: ignore[union-attr]
    elif mac:
        wide = b.place is not None and b.setup.autocast and bool(ins) and st.size_of.get(ins[0], 4) == 4
        _contraction(b, graph, ins, info or st.shared.info(graph, i), cost, wide)  # type: ignore[union-attr]
    else:
        _pointwise(b, graph, op, category, ins, cost)
        if i in st.copies:  # the permuted tensor made contiguous: a copy each way
            b.fwd.append((0.0, 2 * cost[3], False))
            b.bwd.append((0.0, 2 * cost[3], False))
    st.trainable.update(st.trainables[i])


def _shared_cost(shared: NodeCosts, i: int) -> tuple[float, float, float, float]:
    """Node ``i``'s :func:`_forward_cost` from the featurizer's :class:`NodeCosts`."""
    out = shared.written[i]
    cost = shared.costs[i]
    return (0.0, out, out, out) if cost is None else (float(cost[1]), float(cost[2]), float(cost[3]), out)


def _forward_pass(b: _Builder, graph: CanonicalGraph,
                  only: set[int] | None = None) -> tuple[dict[str, int], list[float], list[Span]]:
    """Forward and backward kernels of every node (of the nodes ``only``, when given), the backward as
    checkpointing runs it (:func:`recomputed`); returns the trainable tensors, each op's output bytes and the nodes'
    spans."""
    st = _Pass(b, graph)
    autocast = b.setup.autocast
    at = len(b.bwd)
    spans: list[Span] = []
    sizing = autocast and st.shared is None  # the shared costs' sizes are already the whole graph's
    for i, (op, _domain, ins, outs, _name, _attrs, entry) in enumerate(graph.nodes):
        if entry is not None and entry.rule is view_rule:
            if sizing and ins and ins[0] in st.size_of:
                st.size_of.update((o, st.size_of[ins[0]]) for o in outs)
            continue
        category = entry.category if entry is not None else "other"
        mac = category in MAC_CATEGORIES
        if only is not None and i not in only:
            if sizing:
                autocast_sizes(op, ins, outs, graph.params, mac, graph.shapes, st.size_of)
            continue
        start = len(b.fwd)
        if autocast and mac and op not in RECURRENT and i not in st.fused:
            _casts(b, graph, ins, st.size_of, st.cast_weights)
        if autocast and op in FP32_CAST_OPS and i not in st.fused:
            _upcasts(b, graph, ins, st.size_of)
        if sizing:
            autocast_sizes(op, ins, outs, graph.params, mac, graph.shapes, st.size_of)
        _node_kernels(b, graph, st, i, mac, category)
        spans.append((i, start, len(b.fwd), len(b.bwd)))
    if b.setup.checkpointing:
        b.bwd[at:] = recomputed(b.fwd, b.bwd, at, spans, checkpoint_blocks(graph))
    return st.trainable, st.out_bytes, spans


def _accumulations(b: _Builder, graph: CanonicalGraph) -> None:
    """Backward: a tensor read by k ops sums k gradients (k-1 add kernels); graph inputs need no gradient. Kept with
    the graph per item size (every precision but pure bf16 reads the graph's own)."""
    item = 2 if b.setup.precision == "bf16-pure" else None
    b.bwd.extend(graph.memo(("accumulations", item), lambda: gradient_sums(graph, item)))


def gradient_sums(graph: CanonicalGraph, item: int | None) -> tuple[tuple[Any, ...], ...]:
    """:func:`_accumulations`' kernels, each tensor's item size ``item`` (None: the graph's)."""
    out: list[tuple[Any, ...]] = []
    readers: Counter[str] = Counter()
    inputs = set(graph.graph_inputs)
    for op, _d, ins, _o, _n, _a, entry in graph.nodes:
        if entry is not None and entry.rule is view_rule:
            continue
        readers.update(n for n in dict.fromkeys(ins)  # in input order: a set's follows the process's string hash
                       if n and n not in graph.params and n not in inputs)
    for name, k in readers.items():
        t = _tensor(graph, name, item)
        if k > 1 and t is not None:
            out.extend([(float(t.numel), 3.0 * t.nbytes, False)] * (k - 1))
    return tuple(out)


def _loss_and_dropout(b: _Builder, graph: CanonicalGraph, out_bytes: list[float]) -> None:
    """The loss (log-softmax + NLL, two backward kernels and the gradient's fill), its division by the micro-batches
    under gradient accumulation, and dropped Dropout kernels."""
    outs = [t for t in (_tensor(graph, n) for n in graph.nodes[-1][3]) if t is not None] if graph.nodes else []
    logits = float(sum(t.nbytes for t in outs)) or 4.0
    b.fwd.extend([(logits, 2 * logits, False), (0.0, logits, False)])
    b.bwd.extend([(logits, 2 * logits, False), (0.0, logits, False), (0.0, 4.0, False)])  # fill first (reversed)
    if b.setup.accumulation > 1:  # loss / k, and its backward
        b.fwd.append((1.0, 8.0, False))
        b.bwd.append((1.0, 8.0, False))
    n_drop = int(graph.dropped.get("dropout", 0) + graph.dropped.get("stochastic depth", 0))
    if not n_drop:
        return
    typical = float(np.median(out_bytes)) if out_bytes else 4.0
    for _ in range(n_drop):
        b.fwd.append((typical / 4, 2.25 * typical, False))
        b.bwd.append((typical / 4, 2.25 * typical, False))


def foreach_launches(n_tensors: int, numel: int, reads: int, writes: int, depth: int | None = None) -> int:
    """Kernels one multi-tensor op launches: one per ``FOREACH_TENSORS[depth]`` tensors and per ``FOREACH_CHUNK``
    elements (0 for no tensors); ``depth`` (tensor lists per launch) defaults to the op's reads and writes."""
    if n_tensors <= 0:
        return 0
    if depth is None:
        depth = min(5, reads + (writes if writes and reads < 2 else 0))
    return max(math.ceil(n_tensors / FOREACH_TENSORS[max(1, depth)]), math.ceil(numel / FOREACH_CHUNK))


def _foreach(b: _Builder, n_tensors: int, numel: int, reads: int, writes: int, flops_per: float = 1.0,
             depth: int | None = None) -> None:
    """One multi-tensor op: one launch per ``FOREACH_TENSORS[depth]`` tensors and per ``FOREACH_CHUNK`` elements."""
    if n_tensors <= 0:
        return
    item = b.setup.state_bytes
    launches = foreach_launches(n_tensors, numel, reads, writes, depth)
    for k in range(launches):  # one dispatched op; its further launches come from torch's C++ loop
        b.opt.append((flops_per * numel / launches, item * (reads + writes) * numel / launches, False, k > 0))


def optimizer_ops(setup: TrainingSetup) -> tuple[tuple[int, int], ...]:
    """(lists read, lists written) of each foreach (or per-tensor) op of the setup's optimizer step."""
    ops = OPTIMIZER_OPS["adam" if setup.optimizer == "adamw" else setup.optimizer_key]
    if setup.decay > 0:
        ops = (((1, 1),) if setup.optimizer == "adamw" else (DECAY_OP,)) + ops
    return ops


def _trained(b: _Builder, trainable: dict[str, int]) -> dict[str, int]:
    """The tensors the optimizer steps: under LoRA the adapters and the base parameters still trained."""
    if b.place is None or not b.setup.lora:
        return trainable
    return {k: int(math.prod(shape)) for k, shape in b.place.trainable.items()}


def _per_tensor_optimizer(b: _Builder, trainable: dict[str, int]) -> None:
    """bitsandbytes' optimizers (one kernel per tensor, from Python: 8-bit moments and their absmax, or fp32 moments
    under ``min_8bit_size`` and for the 32-bit paged one) and transformers' Adafactor (its ops per tensor from Python:
    square, row and column means, their moving averages, the factored estimate, the update, its RMS and clipping,
    the step: 8 full-size kernels on a matrix, 5 on a vector)."""
    from gpupred.finetune import EIGHT_BIT, MIN_8BIT_SIZE, OPT8_BLOCK

    s, item = b.setup, b.setup.state_bytes
    shapes = b.place.trainable if b.place is not None else {}
    for key, numel in sorted(trainable.items()):
        width = 4 if "::lora_" in key else item
        if s.optimizer == "adafactor":
            full = 8 if len(shapes.get(key, (numel,))) >= 2 else 5
            b.opt.extend([(2.0 * numel, 2.5 * 4 * numel, False)] * full)
            continue
        states = (2 + 8 / OPT8_BLOCK) if s.optimizer in EIGHT_BIT and numel >= MIN_8BIT_SIZE else 16
        b.opt.append((14.0 * numel, (3 * width + states) * numel, False))


def _optimizer_step(b: _Builder, trainable: dict[str, int]) -> None:
    """The optimizer's kernels as its implementation runs them: foreach ops, one fused op, or each op per tensor."""
    trainable = _trained(b, trainable)
    s, n, numel = b.setup, len(trainable), int(sum(trainable.values()))
    if s.optimizer not in FUSED_OPS:
        _per_tensor_optimizer(b, trainable)
    elif s.optimizer_impl == "fused":
        reads, writes, flops = FUSED_OPS[s.optimizer_key]
        if s.optimizer != "sgd":
            _foreach(b, n, n, 1, 1)  # the device step counters += 1
        _foreach(b, n, numel, reads, writes, flops, depth=reads)
    elif s.optimizer_impl == "forloop":
        item = s.state_bytes
        for _key, size in sorted(trainable.items()):
            b.opt.extend((2.0 * size, item * (r + w) * size, False) for r, w in optimizer_ops(s))
    else:
        for reads, writes in optimizer_ops(s):
            _foreach(b, n, numel, reads, writes, 2.0)


def _optimizer(b: _Builder, trainable: dict[str, int]) -> None:
    """The optimizer step as the setup runs it, with fp16's GradScaler around it: the loss scaled each micro-batch,
    an inf check over the gradients, a host synchronization on its result (none for fused optimizers, which take
    the result on the device), the step, the scale's update."""
    scaler = b.setup.grad_scaler
    if scaler:
        n, numel = len(_trained(b, trainable)), int(sum(_trained(b, trainable).values()))
        b.fwd.append((1.0, 8.0, False))  # scale the loss
        _foreach(b, n, numel, 1, 1)  # unscale + inf check
        if b.setup.optimizer_impl == "fused":
            b.opt.append((1.0, 8.0, False))  # found_inf summed on the device, passed to the fused kernel
        else:
            b.opt.extend([(1.0, 8.0, False)] * 2)
            b.sync_after_opt_prefix = len(b.opt) - 1  # found_inf.item(): the host waits for the GPU
    _optimizer_step(b, trainable)
    if scaler:
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


def _gan_step(b: _Builder, graph: CanonicalGraph) -> dict[str, int]:
    """A GAN iteration over a graph that exports G(z), D(real), D(G(z)): the discriminator step (D on the real
    and the detached fake batch, two losses, its optimizer), then the generator step (D on the fake batch again,
    one loss, backward through D and G, the generator's optimizer). The second pass over shared weights
    (:func:`reread_nodes`) runs once more each way; each optimizer steps its own parameters. Without a parameter
    placement, the kernels before the optimizers are kept with the graph per setup less its optimizer fields."""
    if b.place is not None:
        trainable, disc = _gan_passes(b, graph)
    else:
        kept, (trainable, disc) = _kept(graph, ("gan_passes", forward_key(b.setup)), b.setup, _gan_passes)
        b.start_with(kept)
    _optimizer(b, {k: v for k, v in trainable.items() if k in disc})
    _optimizer(b, {k: v for k, v in trainable.items() if k not in disc})
    return trainable


def _gan_passes(b: _Builder, graph: CanonicalGraph) -> tuple[dict[str, int], dict[str, int]]:
    """:func:`_gan_step`'s kernels before its optimizers; returns the trainable tensors and the discriminator's."""
    trainable, _, _ = _forward_pass(b, graph)
    second = reread_nodes(graph)
    disc, _, _ = _forward_pass(b, graph, only=second)  # the generator step's pass through D
    _accumulations(b, graph)
    _bce_losses(b, graph, 3)
    b.fwd.append((1.0, 12.0, False))  # loss_d = real + fake
    return trainable, disc


RECIPES: tuple[str, ...] = ("standard", "gan")  # how a training step runs over its graph
T = TypeVar("T")
OPTIMIZER_FIELDS: frozenset[str] = frozenset({  # the TrainingSetup fields only the optimizer's kernels read
    "optimizer", "optimizer_impl", "sgd_momentum", "weight_decay"})


def forward_key(setup: TrainingSetup) -> tuple[tuple[str, Any], ...]:
    """A setup's fields less ``OPTIMIZER_FIELDS``: what a step's kernels before its optimizer depend on."""
    return tuple((f.name, getattr(setup, f.name)) for f in fields(setup) if f.name not in OPTIMIZER_FIELDS)


@lru_cache(maxsize=256)
def pass_keys(setup: TrainingSetup) -> tuple[tuple[tuple[str, Any], ...], TrainingSetup, tuple[tuple[str, Any], ...]]:
    """(the setup's :func:`forward_key`, the setup without checkpointing, its forward key): checkpointing only
    reorders the backward, so a checkpointed setup's pass comes from the plain one's. Kept per setup (a frozen,
    hashable value): a queue asks the same few setups of every graph."""
    plain = replace(setup, checkpointing=False)
    return forward_key(setup), plain, forward_key(plain)


def _kept(graph: CanonicalGraph, key: Any, setup: TrainingSetup,
          record: Callable[[_Builder, CanonicalGraph], T]) -> tuple[KeptPass, T]:
    """(the kernels, as a :class:`KeptPass`, and what ``record`` returned) of ``record`` run into a new builder of
    ``setup`` (no parameter placement), kept with the graph under ``key``."""
    def make() -> tuple[KeptPass, T]:
        own = _Builder(setup)
        returned = record(own, graph)
        return kept_pass(own.fwd, own.bwd), returned

    return graph.memo(key, make)


def _forward_and_backward(b: _Builder, graph: CanonicalGraph) -> dict[str, int]:
    """A standard step's kernels up to its optimizer (forward, loss, Dropout, backward, gradient sums) into ``b``;
    returns the trainable tensors. Without a parameter placement (LoRA, QLoRA, shape-counted optimizers) they are kept
    with the graph per setup, less its optimizer fields (a queue's optimizers and their implementations share them),
    and a checkpointed setup's come from the plain pass it shares with the setup without checkpointing."""
    if b.place is not None:
        return _record_forward_and_backward(b, graph)[0]
    key, plain, plain_key = pass_keys(b.setup)

    def record() -> tuple[KeptPass, dict[str, int]]:
        kept, (trainable, (at, end, spans)) = _kept(graph, ("step_pass", plain_key), plain,
                                                    _record_forward_and_backward)
        if not b.setup.checkpointing:
            return kept, trainable
        return checkpointed_pass(kept, at, end, spans, checkpoint_blocks(graph)), trainable

    kept, trainable = graph.memo(("step_forward", key), record)
    b.start_with(kept)
    return dict(trainable)


def _record_forward_and_backward(b: _Builder,
                                 graph: CanonicalGraph) -> tuple[dict[str, int], tuple[int, int, list[Span]]]:
    """:func:`_forward_and_backward`'s kernels, recorded; returns the trainable tensors and where the pass's backward
    starts and ends in ``b.bwd`` with its nodes' spans."""
    at = len(b.bwd)
    trainable, out_bytes, spans = _forward_pass(b, graph)
    end = len(b.bwd)
    _accumulations(b, graph)
    _loss_and_dropout(b, graph, out_bytes)
    return trainable, (at, end, spans)


def _placement(graph: CanonicalGraph, setup: TrainingSetup) -> Any:
    """Which parameters train, are frozen or 4-bit (:func:`gpupred.finetune.placement`) where the setup changes it."""
    if not setup.counted_parameters:
        return None
    from gpupred.finetune import placement

    return placement(graph, setup)


def step_kernels(graph: CanonicalGraph, precision: str = "fp32", optimizer: str = "sgd",
                 recipe: str = "standard", setup: TrainingSetup | None = None) -> KernelList:
    """The kernels of one training step of a canonical graph, in launch order (see the module notes).

    ``setup`` is how the job trains (:class:`gpupred.setups.TrainingSetup`); without one, the sweeps' setup of
    ``precision`` and ``optimizer``. ``recipe`` says how the step runs over the graph: ``standard`` (one forward,
    loss, backward, optimizer, per micro-batch) or ``gan`` (the two-player step of :func:`_gan_step`, for a graph
    exporting G(z), D(real) and D(G(z)))."""
    job = as_setup(setup, precision, optimizer)
    b = _Builder(job, _placement(graph, job))
    if recipe == "gan":
        trainable = _gan_step(b, graph)
        cycles = 2
    else:
        trainable = _forward_and_backward(b, graph)
        _optimizer(b, trainable)
        cycles = 1
    trainable = _trained(b, trainable)
    if b.setup.accumulation > 1:  # what each further micro-batch adds into .grad (read by arrays() only then)
        b.accumulate = [(float(v), 3.0 * b.setup.state_bytes * v, False) for _k, v in sorted(trainable.items())]
    kl = b.arrays()
    kl.param_tensors = len(trainable)
    kl.cycles = cycles * b.setup.accumulation
    batch_bytes = graph.memo("input_bytes",  # a micro-batch's graph inputs, kept with the graph
                             lambda: int(sum(_nbytes(_tensor(graph, n)) for n in set(graph.graph_inputs))))
    kl.input_bytes = batch_bytes * b.setup.accumulation
    cores = len(attention_cores(graph))
    eager = cores - len(fused_cores(graph, b.setup.attention))
    branches = graph.memo_structure("multi_branch_sums", lambda: multi_branch_sums(graph))
    kl.traits = {"multi_branch_sums": float(branches),
                 "eager_attention_cores": float(eager),
                 "attention_cores": float(cores)}
    return kl
