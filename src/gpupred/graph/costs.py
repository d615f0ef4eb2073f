"""The per-op cost table: one entry per ONNX op type, computing MACs, FLOPs, bytes and a category.

Conventions (every rule follows them; tests check them against hand-computed values):

- ``macs`` counts multiply-accumulates of the contraction ops only (Conv, ConvTranspose, Gemm, MatMul,
  Einsum, LSTM/GRU/RNN, Attention); their ``flops`` are ``2 * macs`` plus one FLOP per bias add.
- Every other arithmetic op has ``macs = 0`` and ``flops`` = elements x a small per-element count:
  1 for simple elementwise ops and activations (Relu, Add, Sigmoid, Exp, ...), a few for composite
  ones (Gelu 8, HardSwish 4, ...), 5 per element for Softmax (max, sub, exp, sum, div), 7 per element
  for normalizations that compute statistics (LayerNorm, GroupNorm, InstanceNorm and BatchNorm in
  training mode: mean 1, variance 2, normalize 2, affine 2) and 2 for BatchNorm in inference form
  (scale and shift). Transcendentals are not weighted by their instruction cost (onnx-tool charges
  e.g. 32 per exp): on a GPU these ops are bandwidth-bound, so their bytes, not FLOPs, matter.
- Pooling: one FLOP per window element per output (compare or add), plus one divide per output for
  averaging. Reductions: one FLOP per input element (plus one per output for ReduceMean).
- Bytes: ``bytes_read`` is the size of every input the op reads (Gather reads only the gathered
  rows), ``bytes_written`` the size of its outputs. View ops (Reshape, Flatten, Squeeze, Unsqueeze,
  Identity) and shape metadata ops (Shape, Size, Constant) move no bytes: frameworks run them as
  views without touching memory. Copies (Transpose, Concat, Slice, Expand, Gather, Pad, ...) count.
- Weight inputs (initializers) are recognised by the caller and passed in ``TensorInfo.is_param``;
  which initializer inputs are trainable (BatchNorm's running mean and variance are not) is in
  :data:`NON_TRAINABLE_INPUTS`.

An op type missing from :data:`COST_TABLE` (or one whose shapes are unknown) is never a crash and
never silently zero: the featurizer counts it in ``unknown_ops`` and lists its type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

CATEGORIES: tuple[str, ...] = (
    "conv", "matmul", "recurrent", "norm", "act", "pool", "elementwise", "reshape", "other",
)


class TensorInfo(NamedTuple):
    """A tensor's static shape, element size in bytes, and whether it is a weight (initializer).

    An immutable named tuple: built for every tensor of every node, so cheaper than a dataclass.
    """

    shape: tuple[int, ...]
    itemsize: int
    is_param: bool = False

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return math.prod(self.shape) * self.itemsize


@dataclass
class NodeInfo:
    """What a cost rule sees: op type, attributes, and input/output tensors (None where absent/unknown)."""

    op_type: str
    attrs: dict[str, Any]
    inputs: list[TensorInfo | None]
    outputs: list[TensorInfo | None]
    name: str = ""


@dataclass
class OpCost:
    """The cost of one node."""

    macs: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class MissingShape(Exception):
    """A rule needed a shape that shape inference could not give."""


Rule = Callable[[NodeInfo], OpCost]


@dataclass(frozen=True)
class CostEntry:
    """One row of the cost table: the op's category and its cost rule."""

    category: str
    rule: Rule


# ---------------------------------------------------------------- helpers


def _in(n: NodeInfo, i: int) -> TensorInfo:
    if i >= len(n.inputs) or n.inputs[i] is None:
        raise MissingShape(f"{n.op_type} input {i}")
    return n.inputs[i]  # type: ignore[return-value]


def _out(n: NodeInfo, i: int = 0) -> TensorInfo:
    if i >= len(n.outputs) or n.outputs[i] is None:
        raise MissingShape(f"{n.op_type} output {i}")
    return n.outputs[i]  # type: ignore[return-value]


def _has(n: NodeInfo, i: int) -> bool:
    return i < len(n.inputs) and n.inputs[i] is not None


def output_bytes(outputs: "Iterable[TensorInfo | None]") -> int:
    """Bytes of the tensors of known shape among ``outputs`` (what a node writes)."""
    prod = math.prod
    written = 0
    for t in outputs:
        if t is not None:
            written += prod(t.shape) * t.itemsize
    return written


def _io_bytes(n: NodeInfo) -> tuple[int, int]:
    prod = math.prod
    read = written = 0
    for t in n.inputs:
        if t is not None:
            read += prod(t.shape) * t.itemsize
    for t in n.outputs:
        if t is not None:
            written += prod(t.shape) * t.itemsize
    return read, written


def _cost(n: NodeInfo, macs: int = 0, flops: int = 0) -> OpCost:
    _out(n)  # every costed op needs its output shape
    read, written = _io_bytes(n)
    return OpCost(int(macs), int(flops), read, written)


# ---------------------------------------------------------------- contraction ops


def conv_rule(n: NodeInfo) -> OpCost:
    """Conv: MACs = N x M x prod(out spatial) x (C/groups) x prod(kernel); output shape carries stride/pad/dilation."""
    w, y = _in(n, 1), _out(n)
    per_output = math.prod(w.shape[1:])  # (C/groups) x kernel
    macs = y.numel * per_output
    bias = y.numel if _has(n, 2) else 0
    return _cost(n, macs, 2 * macs + bias)


def conv_transpose_rule(n: NodeInfo) -> OpCost:
    """ConvTranspose: every input element scatters into (M/groups) x prod(kernel) outputs."""
    x, w, y = _in(n, 0), _in(n, 1), _out(n)
    macs = x.numel * math.prod(w.shape[1:])
    bias = y.numel if _has(n, 2) else 0
    return _cost(n, macs, 2 * macs + bias)


def gemm_rule(n: NodeInfo) -> OpCost:
    """Gemm: Y = alpha op(A) op(B) + beta C; MACs = M x N x K, plus M x N adds for C."""
    a, y = _in(n, 0), _out(n)
    k = a.shape[0] if n.attrs.get("transA", 0) else a.shape[1]
    macs = y.numel * k
    bias = y.numel if _has(n, 2) else 0
    return _cost(n, macs, 2 * macs + bias)


def matmul_rule(n: NodeInfo) -> OpCost:
    """MatMul (numpy semantics, batched and broadcast): MACs = elements of the output x K (+ a bias add when fused)."""
    a, y = _in(n, 0), _out(n)
    macs = y.numel * a.shape[-1]
    bias = y.numel if _has(n, 2) else 0  # the canonical form fuses MatMul + Add(bias) into one contraction
    return _cost(n, macs, 2 * macs + bias)


def einsum_rule(n: NodeInfo) -> OpCost:
    """Einsum: MACs = product of the sizes of every distinct index (a contraction's loop nest)."""
    eq = n.attrs.get("equation", "")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    lhs = eq.split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for i, term in enumerate(lhs):
        shape = _in(n, i).shape
        if "..." in term:
            head, tail = term.split("...")
            ell = len(shape) - len(head) - len(tail)
            letters = list(head) + [f"_{j}" for j in range(ell)] + list(tail)
        else:
            letters = list(term)
        for letter, dim in zip(letters, shape):
            sizes[letter] = max(sizes.get(letter, 1), dim)
    macs = math.prod(sizes.values()) if len(lhs) > 1 else 0
    flops = 2 * macs if len(lhs) > 1 else _in(n, 0).numel
    return _cost(n, macs, flops)


def _recurrent(gates: int, extra_per_hidden: int) -> Rule:
    """LSTM (4 gates), GRU (3), RNN (1): per step and direction batch x gates*H x (I + H) MACs."""

    def rule(n: NodeInfo) -> OpCost:
        x, w, r = _in(n, 0), _in(n, 1), _in(n, 2)
        layout = int(n.attrs.get("layout", 0))
        seq, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
        num_dir, gh, inp = w.shape
        hidden = r.shape[2]
        steps = seq * num_dir * batch
        macs = steps * gh * (inp + hidden)
        bias = steps * 2 * gh if _has(n, 3) else 0
        # one FLOP per gate activation plus the cell/state update per hidden unit
        elementwise = steps * (gh + extra_per_hidden * hidden)
        if gh != gates * hidden:
            raise MissingShape(f"{n.op_type} weight rows {gh} != {gates} x hidden {hidden}")
        read, written = _io_bytes(n)
        return OpCost(int(macs), int(2 * macs + bias + elementwise), read, written)

    rule.__doc__ = f"Recurrent op with {gates} gate(s): MACs = seq x dirs x batch x {gates}H x (I + H)."
    return rule


def attention_rule(n: NodeInfo) -> OpCost:
    """Attention (ONNX 23 / com.microsoft): QK^T and PV contractions plus a softmax over the scores."""
    q, k = _in(n, 0), _in(n, 1)
    if len(q.shape) == 4:  # (B, heads, S, head_dim)
        b, h, sq, d = q.shape
        skv = k.shape[2]
        hv = _in(n, 2).shape[-1] if _has(n, 2) else d
    else:  # (B, S, hidden): heads from attributes
        heads = int(n.attrs.get("q_num_heads", n.attrs.get("num_heads", 1)))
        b, sq, hidden = q.shape
        h, d = heads, hidden // heads
        skv = k.shape[1]
        hv = (_in(n, 2).shape[-1] // heads) if _has(n, 2) else d
    scores = b * h * sq * skv
    macs = scores * d + scores * hv
    return _cost(n, macs, 2 * macs + 5 * scores)


# ---------------------------------------------------------------- per-element ops


def _per_output(k: float) -> Rule:
    def rule(n: NodeInfo) -> OpCost:
        return _cost(n, 0, round(k * _out(n).numel))

    rule.__doc__ = f"{k:g} FLOP(s) per output element."
    return rule


def _per_input(k: float) -> Rule:
    def rule(n: NodeInfo) -> OpCost:
        return _cost(n, 0, round(k * _in(n, 0).numel))

    rule.__doc__ = f"{k:g} FLOP(s) per input element."
    return rule


def batchnorm_rule(n: NodeInfo) -> OpCost:
    """BatchNormalization: 7 FLOPs/element in training mode (statistics + normalize + affine), 2 in inference."""
    training = int(n.attrs.get("training_mode", 0)) == 1 or sum(o is not None for o in n.outputs) > 1
    return _cost(n, 0, (7 if training else 2) * _out(n).numel)


def reduce_rule(n: NodeInfo) -> OpCost:
    """Reduce*: one FLOP per input element, plus a divide per output for ReduceMean."""
    flops = _in(n, 0).numel + (_out(n).numel if n.op_type == "ReduceMean" else 0)
    return _cost(n, 0, flops)


def _window(n: NodeInfo) -> int:
    return math.prod(int(k) for k in n.attrs.get("kernel_shape", [1]))


def maxpool_rule(n: NodeInfo) -> OpCost:
    """MaxPool: one compare per window element per output."""
    return _cost(n, 0, _out(n).numel * _window(n))


def avgpool_rule(n: NodeInfo) -> OpCost:
    """AveragePool: one add per window element per output, plus one divide per output."""
    return _cost(n, 0, _out(n).numel * (_window(n) + 1))


def global_pool_rule(n: NodeInfo) -> OpCost:
    """GlobalAverage/MaxPool: one FLOP per input element, plus one divide per output for averaging."""
    extra = _out(n).numel if n.op_type == "GlobalAveragePool" else 0
    return _cost(n, 0, _in(n, 0).numel + extra)


def lrn_rule(n: NodeInfo) -> OpCost:
    """LRN: a window of ``size`` squares and adds plus a power and divide per element."""
    return _cost(n, 0, _out(n).numel * (2 * int(n.attrs.get("size", 1)) + 3))


def softmax_cross_entropy_rule(n: NodeInfo) -> OpCost:
    """SoftmaxCrossEntropyLoss: a log-softmax over the scores (6 FLOPs per score), then one FLOP per label (pick, negate,
    weight) and one per label for the reduction."""
    scores, labels = _in(n, 0), _in(n, 1)
    return _cost(n, 0, 6 * scores.numel + 2 * labels.numel)


def nll_loss_rule(n: NodeInfo) -> OpCost:
    """NegativeLogLikelihoodLoss: one FLOP per label to pick and negate its log-probability, one to reduce."""
    return _cost(n, 0, 2 * _in(n, 1).numel)


# ---------------------------------------------------------------- data movement


def copy_rule(n: NodeInfo) -> OpCost:
    """Data movement (Transpose, Concat, Slice, ...): zero FLOPs, bytes read and written counted."""
    return _cost(n, 0, 0)


def gather_rule(n: NodeInfo) -> OpCost:
    """Gather (embedding lookups): zero FLOPs; reads the gathered rows and the indices, writes the output."""
    y = _out(n)
    idx = n.inputs[1].nbytes if _has(n, 1) else 0
    return OpCost(0, 0, y.nbytes + idx, y.nbytes)


def view_rule(n: NodeInfo) -> OpCost:
    """Views and metadata (Reshape, Squeeze, Shape, Constant, ...): no FLOPs, no bytes moved."""
    return OpCost()


# ---------------------------------------------------------------- the table

_ELEMENTWISE_1 = (
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sqrt", "Reciprocal", "Pow", "Exp", "Log", "Erf", "Floor",
    "Ceil", "Round", "Sign", "Max", "Min", "Mod", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where", "Sin", "Cos", "Tan", "Atan", "Asin", "Acos",
    "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "IsNaN", "IsInf", "BitShift", "Clip", "Sum", "Mean",
    "Dropout", "CumSum", "Trilu", "RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal",
    "Bernoulli", "BitwiseAnd", "BitwiseOr", "BitwiseNot", "BitwiseXor",
)
_ACTIVATIONS: dict[str, float] = {
    "Relu": 1, "LeakyRelu": 2, "PRelu": 2, "Sigmoid": 1, "Tanh": 1, "Elu": 3, "Selu": 3, "Celu": 3,
    "ThresholdedRelu": 1, "HardSigmoid": 3, "HardSwish": 4, "Softplus": 2, "Softsign": 3, "Mish": 5,
    "Gelu": 8, "FastGelu": 8, "QuickGelu": 3, "BiasGelu": 9, "Shrink": 2, "Swish": 2,
}
_COPIES = (
    "Transpose", "Concat", "Slice", "Split", "Expand", "Tile", "Pad", "Cast", "CastLike", "GatherElements",
    "GatherND", "ScatterND", "ScatterElements", "Scatter", "Resize", "Upsample", "DepthToSpace",
    "SpaceToDepth", "ReverseSequence", "OneHot", "Compress", "ConstantOfShape", "Range", "NonZero",
    "EyeLike", "TopK", "ArgMax", "ArgMin", "Unique",
)
_VIEWS = (
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Constant",
)
_REDUCES = (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)

COST_TABLE: dict[str, CostEntry] = {
    "Conv": CostEntry("conv", conv_rule),
    "ConvTranspose": CostEntry("conv", conv_transpose_rule),
    "Gemm": CostEntry("matmul", gemm_rule),
    "MatMul": CostEntry("matmul", matmul_rule),
    "Einsum": CostEntry("matmul", einsum_rule),
    "Attention": CostEntry("matmul", attention_rule),
    "MultiHeadAttention": CostEntry("matmul", attention_rule),
    "LSTM": CostEntry("recurrent", _recurrent(4, 5)),  # c = f*c + i*g (3), h = o*tanh(c) (2)
    "GRU": CostEntry("recurrent", _recurrent(3, 4)),  # h = (1-z)*n + z*h (4 per unit)
    "RNN": CostEntry("recurrent", _recurrent(1, 0)),
    "BatchNormalization": CostEntry("norm", batchnorm_rule),
    "LayerNormalization": CostEntry("norm", _per_output(7)),
    "GroupNormalization": CostEntry("norm", _per_output(7)),
    "InstanceNormalization": CostEntry("norm", _per_output(7)),
    "SimplifiedLayerNormalization": CostEntry("norm", _per_output(5)),
    "SkipLayerNormalization": CostEntry("norm", _per_output(8)),
    "RMSNormalization": CostEntry("norm", _per_output(5)),
    "LpNormalization": CostEntry("norm", _per_output(3)),
    "MeanVarianceNormalization": CostEntry("norm", _per_output(5)),
    "LRN": CostEntry("norm", lrn_rule),
    "Softmax": CostEntry("act", _per_output(5)),
    "LogSoftmax": CostEntry("act", _per_output(6)),
    "Hardmax": CostEntry("act", _per_output(2)),
    "SoftmaxCrossEntropyLoss": CostEntry("act", softmax_cross_entropy_rule),
    "NegativeLogLikelihoodLoss": CostEntry("act", nll_loss_rule),
    "MaxPool": CostEntry("pool", maxpool_rule),
    "AveragePool": CostEntry("pool", avgpool_rule),
    "LpPool": CostEntry("pool", avgpool_rule),
    "GlobalAveragePool": CostEntry("pool", global_pool_rule),
    "GlobalMaxPool": CostEntry("pool", global_pool_rule),
    "Gather": CostEntry("reshape", gather_rule),
    **{op: CostEntry("act", _per_output(k)) for op, k in _ACTIVATIONS.items()},
    **{op: CostEntry("elementwise", _per_output(1)) for op in _ELEMENTWISE_1},
    **{op: CostEntry("elementwise", reduce_rule) for op in _REDUCES},
    **{op: CostEntry("reshape", copy_rule) for op in _COPIES},
    **{op: CostEntry("reshape", view_rule) for op in _VIEWS},
}

# initializer inputs that are state, not trainable parameters
NON_TRAINABLE_INPUTS: dict[str, tuple[int, ...]] = {"BatchNormalization": (3, 4)}
# contraction ops: their weight gradients double the backward cost
MAC_CATEGORIES: tuple[str, ...] = ("conv", "matmul", "recurrent")
