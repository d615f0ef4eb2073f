"""The canonical form every graph is reduced to before it is featurized, so that the features do not depend on
how a model was exported.

One torchvision ResNet-50 exported three ways (the catalog's training-mode TorchScript recipe, torch's
legacy exporter in eval mode, the dynamo exporter) gives three different ONNX graphs: BatchNorm kept or
folded into the convolutions, Dropout and stochastic depth present or gone, GELU as one op or five,
a linear layer as Gemm or MatMul + Add, global pooling as GlobalAveragePool or ReduceMean, weights
transposed by nodes or pre-transposed, shape arithmetic as nodes or folded constants, equal weights
deduplicated behind Identity nodes. The predictor learns from the catalog's exports and is asked
about files made any other way, so all of them are reduced to one form, that of an **eval-mode
export with BatchNorm folded into the preceding contraction**: the form every exporter can reach.
The training-mode graph can be folded down to it; the folded graph cannot be unfolded (a Conv with
a bias is the same whether or not a BatchNorm was folded into it).

The rules, in order (each keeps the graph's cost-bearing work and its shapes):

1. **Static subgraphs are constants.** A node none of whose inputs carries data from a graph input
   (only initializers, constants and shapes of tensors) computes a constant: shape arithmetic, weight
   transposes and casts, causal masks. It is dropped. A view, transpose, cast, slice or Identity of one
   weight is that weight (its parameters counted once per Identity, since exporters deduplicate equal
   weights behind Identity nodes); a concatenation or split of weights stands for its first weight. Every
   weight a dropped node reads is still a parameter of the model (counted once). Work on weights is not
   a constant: a contraction, normalization or elementwise op that reads a weight and no activation
   (XLNet's relative-position projection, NFNet's weight standardization, Swin v2's position MLP) runs in
   every training step, so it is kept and charged, and its output stands for the weight it read.
2. **Training-only regularisation and no-ops are dropped.** Dropout, and stochastic depth (a product or quotient
   of an activation with a tensor derived from Random* ops), become the identity; the random ops go too.
   Identity, single-input Concat/Sum, same-type Cast or CastLike (a CastLike of a constant is a constant: its
   second input gives only a type), a Transpose with the identity permutation and a Slice
   that keeps every element (``x[:, 0:INT64_MAX]``; a flip, step -1, is kept) on activations become the
   identity. Slices with constant bounds that cut one tensor along one axis into pieces tiling it are one Split: the
   dynamo exporter writes ``unbind`` as a Slice per piece where TorchScript writes a Split, and TorchScript
   writes ``chunk`` as Slices where the dynamo exporter writes a Split.
3. **Bias adds fuse into their contraction.** MatMul (or Conv, or Gemm without C) followed only by an
   Add of a per-output-channel constant is one contraction with a bias, as Gemm is.
4. **BatchNorm folds into the contraction before it.** A BatchNormalization whose input is produced
   only for it by a Conv, ConvTranspose or Gemm disappears; the contraction gains the bias that folding
   produces (one add per output element), as in an eval-mode export. Its parameters stay torch's: the
   BatchNorm's scale and shift (2C) are counted, so ``params`` equals ``sum(p.numel())`` of the module; an
   export that folded them already shows only the C of the bias (under 1% of a CNN's parameters). A BatchNormalization
   that follows anything else (DenseNet's pre-activation BatchNorms) stays and is always charged its
   training-mode cost (statistics, normalize, affine: 7 FLOPs per element), whatever mode it was
   exported in: the predictor is about training jobs.
5. **Decompositions are recomposed.** GELU written with Erf (x * 0.5 * (1 + erf(x / sqrt 2))) becomes
   one Gelu, and so does the tanh GELU the dynamo exporter decomposed from one ``aten.gelu`` (its last node keeps the
   op's name; written as Python ops, as GPT-2's ``gelu_new``, it stays the ops torch runs one by one); SiLU written
   as x * sigmoid(x) becomes one Swish (a sigmoid gating another tensor stays two ops);
   LayerNorm written as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div (and the affine Mul/Add)
   becomes one LayerNormalization; ReduceMean over every spatial axis of a feature map is
   GlobalAveragePool. Reshape and Flatten are both views (free, not counted as nodes).

What the canonical features lose, and where that cost goes: a training step runs the BatchNorms that
rule 4 folds away (statistics over the batch, normalize, affine, and a stored output for backward;
ResNet-50: +42% activation bytes, +26% bytes moved) and the Dropout masks that rule 2 drops. A folded
export shows neither, so no feature may depend on them, or the same model would look different
depending on how it was exported. That cost is still in what the predictor learns: its labels are
measured training runs, which executed every BatchNorm and Dropout, and in the architectures that carry
them it follows the contraction outputs (every folded BatchNorm sits on a Conv output, whose size the
features keep), so a regressor fitted on measured runs charges it through those features. Models whose
training forward differs in structure from their eval forward (GoogLeNet and Inception v3 with their
auxiliary heads) cannot be reduced this way: export them with :func:`gpupred.export_model`, which
exports in training mode like the catalog.

Torch-free: works on the plain-Python node tuples of :mod:`gpupred.graph.loader`.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from gpupred.graph.costs import COST_TABLE, NON_TRAINABLE_INPUTS

# a Slice's attributes, set by the loader: the values of its inputs 1-4 when they are constant, else None
SLICE_INPUTS: tuple[str, ...] = ("starts", "ends", "axes", "steps")

# a node: (op_type, domain, inputs, outputs, name, attributes, cost entry or None)
Node = tuple[str, str, tuple[str, ...], tuple[str, ...], str, dict[str, Any], Any]
Shape = tuple[tuple[int, ...] | None, int, int]  # (dims or None, elem_type, itemsize)


def shape_elements(shape: Shape | None) -> int:
    """Elements of a tensor of ``shape`` (0 when the shape or its dims are unknown)."""
    return int(math.prod(shape[0])) if shape is not None and shape[0] is not None else 0


RANDOM_OPS: frozenset[str] = frozenset({
    "RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal", "Bernoulli", "Multinomial",
})
META_OPS: frozenset[str] = frozenset({"Shape", "Size", "Constant"})
WEIGHT_VIEWS: frozenset[str] = frozenset({
    "Identity", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "CastLike", "Slice", "Gather", "Expand",
})
WEIGHT_COPIES: frozenset[str] = frozenset({"Concat", "Split", "Tile", "Pad"})
WEIGHT_WORK: frozenset[str] = frozenset({"conv", "matmul", "recurrent", "norm", "act", "pool", "elementwise"})
VARIADIC: frozenset[str] = frozenset({"Concat", "Sum", "Max", "Min", "Mean"})
CONTRACTIONS_WITH_BIAS: dict[str, int] = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2, "MatMul": 2}  # op -> bias slot
BN_FOLD_INTO: frozenset[str] = frozenset({"Conv", "ConvTranspose", "Gemm"})
_DEFAULT_DOMAINS: frozenset[str] = frozenset({"", "ai.onnx"})


FOLDED_BATCHNORM = "gpupred_folded_batchnorm"  # attribute of a contraction a BatchNorm was folded into

T = TypeVar("T")
MEMO_ENTRIES = 48  # analyses a canonical graph keeps (CanonicalGraph.memo): a step's kernels take up to ~1 MB each


@dataclass
class CanonicalGraph:
    """A graph in canonical form: the nodes that do work, their shapes, and which tensors are which parameters."""

    nodes: list[Node]
    shapes: dict[str, Shape]
    params: dict[str, str]  # tensor name -> parameter key (an initializer, or an Identity copy of one)
    param_sizes: dict[str, tuple[int, int]]  # parameter key -> (elements, item size)
    graph_inputs: list[str]
    dropped: Counter[str] = field(default_factory=Counter)  # what the reduction removed, by rule
    static_params: set[str] = field(default_factory=set)  # parameter keys read only by dropped static nodes
    dropout_inputs: list[str] = field(default_factory=list)  # what each dropped Dropout of ratio > 0 masked (its input)
    derived: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)  # what memo keeps
    shared: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)  # what memo_structure keeps

    def memo(self, key: Any, make: Callable[[], T]) -> T:
        """What ``make()`` derives from this graph, computed once per ``key`` and kept with the graph: a graph is
        read-only once built (:func:`gpupred.graph.loader.cached_graph` shares it), so its analyses (costs, attention
        cores, checkpoint blocks, a training step's forward kernels) hold while it lives. Callers treat what they get
        as read-only too. At most ``MEMO_ENTRIES`` are kept, the oldest going first (a long-lived scheduler asking
        about many setups of one graph)."""
        return kept_in(self.derived, key, make)

    def memo_structure(self, key: Any, make: Callable[[], T]) -> T:
        """:meth:`memo` for an analysis that reads only the graph's structure (its nodes, parameters, graph inputs and
        which tensors have a shape entry), never a shape's value: kept with every canonical graph that shares this
        one's reduction (:func:`reduce_like`: the same file at other batch sizes), at most ``MEMO_ENTRIES``."""
        return kept_in(self.shared, key, make)


def kept_in(store: dict[Any, Any], key: Any, make: Callable[[], T]) -> T:
    """``store[key]``, made by ``make()`` the first time; at most ``MEMO_ENTRIES`` kept, the oldest going first."""
    if key in store:
        return store[key]
    value = make()
    while len(store) >= MEMO_ENTRIES:
        store.pop(next(iter(store)))
    store[key] = value
    return value


def raw_graph(
    nodes: list[Node], shapes: dict[str, Shape], inits: dict[str, tuple[tuple[int, ...], int, int]],
    graph_inputs: list[str], folded: set[str], float_types: frozenset[int],
) -> CanonicalGraph:
    """The graph as exported (no reduction): every node, weights through Identity counted once."""
    params = {n: n for n, (_, et, _) in inits.items() if et in float_types and n not in folded}
    sizes = {n: (math.prod(inits[n][0] or ()), inits[n][2]) for n in params}
    for op, _, ins, outs, _, _, _ in nodes:
        if op == "Identity" and ins and ins[0] in params:
            params[outs[0]] = params[ins[0]]
    return CanonicalGraph(list(nodes), shapes, params, sizes, list(graph_inputs))


# ------------------------------------------------------------ the decisions a reduction reads from shapes
# Each is a function of the shapes and arguments; _Reducer logs its calls (Decision), and reduce_like replays the log on
# another batch size's shapes: the reduction is the same wherever every decision comes out the same.
Decision = tuple[Callable[..., Any], tuple[Any, ...], Any, "str | None"]  # (rule, arguments, result, tensor written)


def whole_slice(shapes: dict[str, Shape], ins: tuple[str, ...], outs: tuple[str, ...],
                steps: tuple[int, ...] | None) -> bool:
    """A Slice that keeps every element in order: its output's shape is its input's, and no step is negative
    (a step of -1 over a whole axis, a flip, is the one other Slice that keeps the shape)."""
    dims_in = shapes.get(ins[0], (None, 0, 0))[0]
    if dims_in is None or dims_in != shapes.get(outs[0], (None, 0, 0))[0]:
        return False
    if len(ins) < 5 or not ins[4]:
        return True
    return steps is not None and all(v > 0 for v in steps)


def same_type(shapes: dict[str, Shape], src: str, out: str) -> bool:
    """Whether a Cast's output has its input's element type (a no-op cast)."""
    return shapes.get(src, (None, -1, 0))[1] == shapes.get(out, (None, -2, 0))[1]


def slice_cut(shapes: dict[str, Shape], ins: tuple[str, ...], a: dict[str, Any]) -> tuple[int, int, int] | None:
    """(axis, start, end) of a Slice along one axis with step 1 and constant bounds (clamped as ONNX does)."""
    dims = shapes.get(ins[0], (None, 0, 0))[0]
    if dims is None or any(a.get(k) is None for k in ("starts", "ends", "axes")) or len(a["axes"]) != 1:
        return None
    if a.get("steps") not in (None, (1,)) or (a.get("steps") is None and len(ins) > 4 and ins[4]):
        return None
    axis = a["axes"][0] % len(dims)
    size = dims[axis]
    start, end = (min(max(v + size if v < 0 else v, 0), size) for v in (a["starts"][0], a["ends"][0]))
    return (axis, start, end) if start < end else None


def axis_size(shapes: dict[str, Shape], x: str, axis: int) -> int:
    """The size of a tensor's axis."""
    return shapes[x][0][axis]  # type: ignore[index]


def per_channel(shapes: dict[str, Shape], op: str, bias: str, y: str) -> bool:
    """Whether ``bias`` is one value per output channel of a contraction's output ``y``."""
    bdims, ydims = shapes.get(bias, (None, 0, 0))[0], shapes.get(y, (None, 0, 0))[0]
    if bdims is None or ydims is None or not ydims:
        return False
    axis = 1 if op in ("Conv", "ConvTranspose") else len(ydims) - 1
    if len(ydims) <= axis:
        return False
    channels = ydims[axis]
    if math.prod(bdims or ()) != channels or len(bdims) > len(ydims):
        return False
    pad = (1,) * (len(ydims) - len(bdims)) + tuple(bdims)  # numpy broadcasting aligns from the right
    return all(d == (channels if k == axis else 1) for k, d in enumerate(pad)) or channels == 1


def bias_shape(shapes: dict[str, Shape], scale: str, channels: int, itemsize: int) -> Shape:
    """The shape of the bias a folded BatchNorm gives its contraction: its scale's channels (``channels`` when the
    scale is a weight, else the scale's elements)."""
    if not channels:
        channels = math.prod(shapes.get(scale, ((0,), 0, 4))[0] or ())
    return ((channels,), 1, itemsize)


def global_pool(shapes: dict[str, Shape], x: str, y: str) -> bool:
    """Whether a ReduceMean from ``x`` to ``y`` averages every spatial axis of a feature map."""
    xin = shapes.get(x, (None, 0, 0))[0]
    yout = shapes.get(y, (None, 0, 0))[0]
    if xin is None or yout is None or len(xin) < 3:
        return False
    return tuple(yout) in (tuple(xin[:2]) + (1,) * (len(xin) - 2), tuple(xin[:2])) and math.prod(xin[2:]) > 1


class _Reducer:
    """Rules 1-5 over a node list, in topological order.

    Every read of a tensor's shape goes through :meth:`_decide` (a module-level rule of the shapes, logged): that log
    is what lets :func:`reduce_like` reuse a reduction at another batch size. A rule that read ``self.shapes``
    directly would be missed there: tests/test_canonical_batches.py compares replayed forms with fresh ones."""

    def __init__(self, nodes: list[Node], shapes: dict[str, Shape], inits: dict[str, tuple[tuple[int, ...], int, int]],
                 graph_inputs: list[str], graph_outputs: list[str], folded: set[str], float_types: frozenset[int]) -> None:
        self.shapes = dict(shapes)
        self.graph_inputs = list(graph_inputs)
        self.outputs = set(graph_outputs)
        self.params = {n: n for n, (_, et, _) in inits.items() if et in float_types and n not in folded}
        self.sizes = {n: (math.prod(inits[n][0] or ()), inits[n][2]) for n in self.params}
        self.data: set[str] = set(graph_inputs)
        self.noise: set[str] = set()
        self.rename: dict[str, str] = {}
        self.dropped: Counter[str] = Counter()
        self.static_params: set[str] = set()
        self.dropout_inputs: list[str] = []
        self.decisions: list[Decision] = []  # every decision read from a shape, in order (reduce_like replays them)
        self.nodes = self._classify(nodes)

    def _decide(self, rule: Callable[..., T], *args: Any, write: str | None = None) -> T:
        """``rule(shapes, *args)``, logged with its arguments and result; ``write``: a tensor whose shape entry the
        result is (written into the shapes)."""
        result = rule(self.shapes, *args)
        self.decisions.append((rule, args, result, write))
        if write is not None:
            self.shapes[write] = result
        return result

    # ------------------------------------------------------------ rules 1 and 2
    def _classify(self, nodes: list[Node]) -> list[list[Any]]:
        kept: list[list[Any]] = []
        data, noise, rename, dropped = self.data, self.noise, self.rename, self.dropped
        for op, domain, ins, outs, name, attrs, entry in nodes:
            ins = tuple(rename.get(n, n) for n in ins)
            data_ins = [n for n in (ins[:1] if op == "CastLike" else ins) if n in data]  # CastLike reads only the type
            if domain not in _DEFAULT_DOMAINS and domain != "com.microsoft":
                if data_ins:  # an unknown custom op on activations: kept (and counted unknown)
                    data.update(o for o in outs if o)
                    kept.append([op, domain, ins, outs, name, attrs, entry])
                continue
            if op in RANDOM_OPS:
                noise.update(outs)
                dropped["random"] += 1
                continue
            if not data_ins or op in META_OPS:
                if self._static(op, ins, outs, entry):
                    kept.append([op, domain, ins, outs, name, attrs, entry])
                continue
            if self._passes_through(op, ins, outs, data_ins, attrs):
                continue
            data.update(o for o in outs if o)
            kept.append([op, domain, ins, outs, name, attrs, entry])
        return kept

    def _static(self, op: str, ins: tuple[str, ...], outs: tuple[str, ...], entry: Any) -> bool:
        """Rule 1: a node computing a constant (or noise, or a view of weights) is dropped; True: keep it.

        Work on weights is kept (a contraction of a weight with a constant, as XLNet's relative-position
        projection, or a weight standardization runs every step): its cost counts and its output stands for
        its first weight. The weights any dropped node reads are recorded (``static_params``) and counted.
        """
        if any(n in self.noise for n in ins):
            self.noise.update(outs)
            self.dropped["random"] += 1
            return False
        skip = NON_TRAINABLE_INPUTS.get(op, ())
        weights = [n for pos, n in enumerate(ins) if n in self.params and pos not in skip]
        keys = list(dict.fromkeys(self.params[w] for w in weights))
        if keys and entry is not None and entry.category in WEIGHT_WORK and op not in META_OPS:
            for o in outs:
                if o:
                    self.params[o] = keys[0]
            return True
        self.dropped["static"] += 1
        self.static_params.update(keys)
        if len(keys) == 1 and op in WEIGHT_VIEWS and outs:
            key = keys[0]
            if op == "Identity" and len(weights) == 1:  # an exporter's copy of an equal-valued weight: its own parameter
                self.sizes[outs[0]] = self.sizes[key]
                key = outs[0]
            self.params[outs[0]] = key
        elif keys and op in WEIGHT_COPIES and outs:  # weights concatenated or split: the first stands for them all
            for o in outs:
                if o:
                    self.params[o] = keys[0]
        return False

    def _passes_through(self, op: str, ins: tuple[str, ...], outs: tuple[str, ...], data_ins: list[str],
                        attrs: dict[str, Any]) -> bool:
        """Rule 2: identity-like nodes on activations are replaced by their input."""
        src = data_ins[0]
        real = [n for n in ins if n]
        if op == "Dropout":
            reason = "dropout"
            if attrs.get("ratio") is None or attrs["ratio"] > 0:  # p = 0 is the identity: torch keeps no mask
                self.dropout_inputs.append(src)
        elif op == "Identity" or (op in VARIADIC and len(real) == 1):
            reason = "identity"
        elif op == "Transpose" and list(attrs.get("perm") or ()) == list(range(len(attrs.get("perm") or (0, 0)))):
            reason = "identity"
        elif op == "Slice" and data_ins == [ins[0]] and self._decide(whole_slice, ins, outs, attrs.get("steps")):
            reason = "identity"
        elif op in ("Mul", "Div", "Where") and len(data_ins) == 1 and any(n in self.noise for n in ins):
            reason = "stochastic depth"
        elif op in ("Cast", "CastLike") and self._decide(same_type, src, outs[0]):
            reason = "identity"
        else:
            return False
        self.rename[outs[0]] = src
        self.noise.update(o for o in outs[1:] if o)  # Dropout's mask
        if outs[0] in self.outputs:
            self.outputs.add(src)
        self.dropped[reason] += 1
        return True

    def split_slices(self) -> None:
        """Rule 2: Slices that cut one tensor along one axis into pieces that tile it are one Split (``unbind`` and
        ``chunk`` as the dynamo exporter writes them, one Slice per piece)."""
        groups: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for i, node in enumerate(self.nodes):
            cut = self._decide(slice_cut, node[2], node[5]) if node is not None and node[0] == "Slice" else None
            if cut is not None:
                groups.setdefault((node[2][0], cut[0]), []).append((cut[1], cut[2], i))
        for (x, axis), pieces in groups.items():
            pieces.sort()
            if len(pieces) < 2 or pieces[0][0] != 0 or pieces[-1][1] != self._decide(axis_size, x, axis) or \
                    any(a[1] != b[0] for a, b in zip(pieces, pieces[1:])):
                continue
            first = min(i for _, _, i in pieces)
            outs = tuple(self.nodes[i][3][0] for _, _, i in pieces)
            name = f"{self.nodes[first][4]}::split"  # the first Slice's name: its module path (gpupred.step.physics.blocks)
            for _, _, i in pieces:
                self.nodes[i] = None
            self.nodes[first] = ["Split", "", (x,), outs, name, {"axis": axis}, COST_TABLE["Split"]]
            self.dropped["slices as split"] += len(pieces) - 1

    # ------------------------------------------------------------ helpers for rules 3-5
    def _index(self) -> None:
        self.producer: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            if node is None:
                continue
            for o in node[3]:
                self.producer[o] = i
            for n in set(node[2]):
                self.readers.setdefault(n, []).append(i)

    def _sole(self, tensor: str) -> int | None:
        """The index of the only node reading ``tensor`` (None if several, none, or it is a graph output)."""
        readers = [j for j in self.readers.get(tensor, ()) if self.nodes[j] is not None]
        if len(readers) != 1 or tensor in self.outputs:
            return None
        return readers[0]

    def _prod(self, tensor: str, ops: tuple[str, ...] | frozenset[str] | dict[str, int]) -> int | None:
        i = self.producer.get(tensor)
        if i is None or self.nodes[i] is None or self.nodes[i][0] not in ops or tensor not in self.nodes[i][3]:
            return None
        return i

    def _other(self, node: list[Any], tensor: str) -> str | None:
        """The other input of a binary node that also reads ``tensor``."""
        ins = [n for n in node[2] if n]
        if len(ins) != 2 or tensor not in ins:
            return None
        return ins[1] if ins[0] == tensor else ins[0]

    def _is_const(self, tensor: str | None) -> bool:
        return tensor is not None and tensor not in self.data and tensor not in self.noise

    def _drop(self, *idx: int, reason: str) -> None:
        for i in idx:
            self.nodes[i] = None
        self.dropped[reason] += len(idx)

    # ------------------------------------------------------------ rule 3
    def fuse_bias(self) -> None:
        """MatMul/Conv/Gemm followed only by an Add of a per-channel constant: one contraction with a bias."""
        self._index()
        for i, node in enumerate(self.nodes):
            if node is None or node[0] != "Add":
                continue
            for d in node[2]:
                p = self._prod(d, CONTRACTIONS_WITH_BIAS)
                if p is None or self._sole(d) != i:
                    continue
                prod = self.nodes[p]
                slot = CONTRACTIONS_WITH_BIAS[prod[0]]
                if len(prod[2]) > slot and prod[2][slot]:
                    continue
                bias = self._other(node, d)
                if not self._is_const(bias) or not self._decide(per_channel, prod[0], bias, d):
                    continue
                prod[2] = tuple(prod[2][:slot]) + ("",) * (slot - len(prod[2])) + (bias,)
                prod[3] = (node[3][0],)
                self.producer[node[3][0]] = p
                self._drop(i, reason="bias add")
                break

    # ------------------------------------------------------------ rule 4
    def fold_batchnorm(self) -> None:
        """BatchNorm right after a Conv/ConvTranspose/Gemm folds into it; any other BatchNorm is charged as in training."""
        self._index()
        for i, node in enumerate(self.nodes):
            if node is None or node[0] != "BatchNormalization":
                continue
            x = node[2][0]
            p = self._prod(x, BN_FOLD_INTO)
            if p is None or self._sole(x) != i:
                node[5] = {**node[5], "training_mode": 1}
                node[3] = tuple(node[3][:1])  # the running statistics a training-mode export also outputs
                continue
            prod = self.nodes[p]
            scale, beta = (node[2][k] if len(node[2]) > k else "" for k in (1, 2))
            self.static_params.update(self.params[n] for n in (scale, beta) if n in self.params)  # torch's gamma, beta
            if len(prod[2]) < 3 or not prod[2][2]:
                prod[2] = tuple(prod[2][:2]) + ("",) * (2 - len(prod[2][:2])) + (self._folded_bias(prod, scale, beta),)
            prod[3] = (node[3][0],)
            prod[5] = {**prod[5], FOLDED_BATCHNORM: 1}  # the step model runs the training-mode BatchNorm it dropped
            self.producer[node[3][0]] = p
            self._drop(i, reason="batchnorm folded")

    def _folded_bias(self, prod: list[Any], scale: str, beta: str) -> str:
        """The bias a folded BatchNorm gives its contraction: its own shift when that is a weight, else a new one."""
        if beta in self.params:
            return beta
        bias = f"{prod[3][0]}::folded_batchnorm_bias"
        channels, itemsize = self.sizes.get(self.params.get(scale, ""), (0, 4))
        channels = self._decide(bias_shape, scale, channels, itemsize, write=bias)[0][0]
        self.params[bias] = bias
        self.sizes[bias] = (channels, itemsize)
        return bias

    # ------------------------------------------------------------ rule 5
    def recompose(self) -> None:
        """GELU, SiLU and LayerNorm decompositions become one op; ReduceMean over all spatial axes is
        GlobalAveragePool."""
        self._index()
        for i, node in enumerate(self.nodes):
            if node is None:
                continue
            if node[0] == "Erf":
                self._gelu(i)
            elif node[0] == "Tanh":
                self._gelu_tanh(i)
            elif node[0] == "Sub":
                self._layernorm(i)
            elif node[0] == "Sigmoid":
                self._swish(i)
        for i, node in enumerate(self.nodes):
            if node is not None and node[0] == "ReduceMean" and self._decide(global_pool, node[2][0], node[3][0]):
                node[0], node[2], node[6] = "GlobalAveragePool", node[2][:1], COST_TABLE["GlobalAveragePool"]
                self.dropped["reduce-mean as pooling"] += 1

    def _sole_op(self, tensor: str, ops: tuple[str, ...]) -> int | None:
        j = self._sole(tensor)
        return j if j is not None and self.nodes[j][0] in ops else None

    def _gelu(self, e: int) -> None:
        """x * 0.5 * (1 + erf(x / sqrt(2))) in any of the orders exporters write it."""
        erf = self.nodes[e]
        d = self._prod(erf[2][0], ("Div", "Mul"))
        if d is None or self._sole(erf[2][0]) != e:
            return
        x = next((n for n in self.nodes[d][2] if n in self.data), None)
        if x is None or not self._is_const(self._other(self.nodes[d], x)):
            return
        a = self._sole_op(erf[3][0], ("Add",))
        if a is None or not self._is_const(self._other(self.nodes[a], erf[3][0])):
            return
        one_plus = self.nodes[a][3][0]
        m1 = self._sole_op(one_plus, ("Mul",))
        if m1 is None:
            return
        other = self._other(self.nodes[m1], one_plus)
        cluster = [d, e, a, m1]
        if other == x or self._is_const(other):  # (x * (1 + erf)) * 0.5  or  x * ((1 + erf) * 0.5)
            m2 = self._sole_op(self.nodes[m1][3][0], ("Mul",))
            want = x if self._is_const(other) else None
            last = None if m2 is None else self._other(self.nodes[m2], self.nodes[m1][3][0])
            if m2 is None or (last != want if want is not None else not self._is_const(last)):
                return
            cluster.append(m2)
            out = self.nodes[m2][3][0]
        else:  # (x * 0.5) * (1 + erf)
            h = self._prod(other, ("Mul",)) if other is not None else None
            if h is None or self._sole(other) != m1 or not self._is_const(self._other(self.nodes[h], x)):
                return
            cluster.append(h)
            out = self.nodes[m1][3][0]
        self._replace(cluster, "Gelu", (x,), out, erf[4])

    def _gelu_tanh(self, t: int) -> None:
        """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) that the dynamo exporter wrote for one
        ``aten.gelu(approximate="tanh")`` (``F.gelu``, transformers' ``gelu_pytorch_tanh``: Gemma, SigLIP; timm's
        MaxViT): one Gelu, as torch runs it (a kernel each way, only its input saved). The op's decomposition keeps the
        op's name on its last node (``node_gelu``, ``node_gelu_3``); the same formula written as Python ops
        (transformers' ``NewGELUActivation``, GPT-2's ``gelu_new``) is named after each op (``node_tanh``,
        ``node_mul_98``) and stays as those ops, which torch runs one by one, each saving its operands."""
        inner = self.nodes[t][2][0] if self.nodes[t][2] else ""
        cluster = self._tanh_argument(inner, t)
        if cluster is None:
            return
        x, inside = cluster
        plus = self._sole_op(self.nodes[t][3][0], ("Add",))
        if plus is None or not self._is_const(self._other(self.nodes[plus], self.nodes[t][3][0])):
            return
        half = self._sole_op(self.nodes[plus][3][0], ("Mul",))
        if half is None:
            return
        other = self._other(self.nodes[half], self.nodes[plus][3][0])
        if other != x and not self._is_const(other):
            return
        last = self._sole_op(self.nodes[half][3][0], ("Mul",))
        want = x if self._is_const(other) else None  # (0.5 * (1 + tanh)) * x  or  (x * (1 + tanh)) * 0.5
        rest = None if last is None else self._other(self.nodes[last], self.nodes[half][3][0])
        if last is None or (rest != want if want is not None else not self._is_const(rest)):
            return
        if not re.search(r"(^|/)node_gelu(_\d+)?$", str(self.nodes[last][4])):  # Python ops: torch runs each
            return
        self._replace([*inside, t, plus, half, last], "Gelu", (x,), self.nodes[last][3][0], self.nodes[last][4])

    def _tanh_argument(self, inner: str, t: int) -> tuple[str, list[int]] | None:
        """(x, the nodes computing ``inner``) where ``inner`` is sqrt(2 / pi) * (x + 0.044715 * x^3), read only by
        node ``t``; None otherwise."""
        scale = self._prod(inner, ("Mul",))
        if scale is None or self._sole(inner) != t:
            return None
        total = next((n for n in self.nodes[scale][2] if n in self.data), None)
        add = self._prod(total, ("Add",)) if total is not None else None
        if add is None or self._sole(total) != scale or not self._is_const(self._other(self.nodes[scale], total)):
            return None
        for x in (n for n in self.nodes[add][2] if n in self.data):
            cubic = self._other(self.nodes[add], x)
            times = self._prod(cubic, ("Mul",)) if cubic is not None else None
            if times is None or self._sole(cubic) != add:
                continue
            cube = next((n for n in self.nodes[times][2] if n in self.data), None)
            power = self._prod(cube, ("Pow",)) if cube is not None else None
            if (power is not None and self._sole(cube) == times and self.nodes[power][2][0] == x
                    and self._is_const(self._other(self.nodes[times], cube))):
                return x, [power, times, add, scale]
        return None

    def _swish(self, s: int) -> None:
        """x * sigmoid(x), as exporters write torch's SiLU: one Swish (ONNX's, alpha 1), as torch runs it (one kernel
        each way, its input saved for backward); a product of a sigmoid and anything else (a squeeze-and-excitation
        gate) stays two ops."""
        sig = self.nodes[s]
        x = sig[2][0] if sig[2] else ""
        if x not in self.data:
            return
        m = self._sole_op(sig[3][0], ("Mul",))
        if m is None or self._other(self.nodes[m], sig[3][0]) != x:
            return
        self._replace([s, m], "Swish", (x,), self.nodes[m][3][0], sig[4])

    def _layernorm(self, s: int) -> None:
        """ReduceMean, Sub, Pow (or Mul), ReduceMean, Add, Sqrt, Div, then an optional Mul and Add: LayerNormalization."""
        sub = self.nodes[s]
        x, m = sub[2][0], sub[2][1] if len(sub[2]) > 1 else ""
        r1 = self._prod(m, ("ReduceMean",))
        if r1 is None or self.nodes[r1][2][0] != x or self._sole(m) != s:
            return
        dev = sub[3][0]
        readers = [j for j in self.readers.get(dev, ()) if self.nodes[j] is not None]
        if len(readers) != 2 or dev in self.outputs:
            return
        p = next((j for j in readers if self.nodes[j][0] in ("Pow", "Mul")), None)
        div = next((j for j in readers if self.nodes[j][0] == "Div"), None)
        if p is None or div is None or self.nodes[div][2][0] != dev:
            return
        r2 = self._sole_op(self.nodes[p][3][0], ("ReduceMean",))
        add = None if r2 is None else self._sole_op(self.nodes[r2][3][0], ("Add",))
        sqrt = None if add is None else self._sole_op(self.nodes[add][3][0], ("Sqrt",))
        if sqrt is None or self.nodes[div][2][1] != self.nodes[sqrt][3][0] or self._sole(self.nodes[sqrt][3][0]) != div:
            return
        cluster, out, inputs = [r1, s, p, r2, add, sqrt, div], self.nodes[div][3][0], [x]
        for op in ("Mul", "Add"):  # the affine scale and shift, when present
            j = self._sole_op(out, (op,))
            w = None if j is None else self._other(self.nodes[j], out)
            if j is None or not self._is_const(w):
                break
            cluster.append(j)
            inputs.append(w)
            out = self.nodes[j][3][0]
        self._replace(cluster, "LayerNormalization", tuple(inputs), out, sub[4])

    def _replace(self, cluster: list[int], op: str, ins: tuple[str, ...], out: str, name: str) -> None:
        first = min(cluster)
        before = set(self.nodes[first][2])
        for j in cluster:
            self.nodes[j] = None
        self.nodes[first] = [op, "", ins, (out,), name, {}, COST_TABLE[op]]
        self.dropped[f"{op} recomposed"] += len(cluster) - 1
        # the index as _index would rebuild it (lookups skip removed nodes): re-indexing the whole graph after
        # every merge was quadratic (a BERT export with 1,024 GELUs: 9 s)
        self.producer[out] = first
        for n in before - set(ins):
            self.readers[n].remove(first)
        for n in set(ins) - before:
            bisect.insort(self.readers.setdefault(n, []), first)

    def result(self) -> CanonicalGraph:
        """The reduced graph, inputs renamed through every dropped identity."""
        rename = self.rename

        def resolve(n: str) -> str:
            while n in rename:
                n = rename[n]
            return n

        nodes: list[Node] = []
        for node in self.nodes:
            if node is None:
                continue
            op, domain, ins, outs, name, attrs, entry = node
            nodes.append((op, domain, tuple(resolve(n) for n in ins), tuple(outs), name, attrs, entry))
        return CanonicalGraph(nodes, self.shapes, self.params, self.sizes, self.graph_inputs, self.dropped,
                              self.static_params, [resolve(n) for n in self.dropout_inputs])


@dataclass(frozen=True)
class Reduction:
    """A graph's canonical form and the decisions its reduction read from shapes, in order: the same nodes at other
    shapes (the same parsed file at another batch size) reduce to the same form wherever every decision comes out
    the same (:func:`reduce_like`)."""

    graph: CanonicalGraph
    decisions: tuple[Decision, ...]


def reduction(
    nodes: list[Node], shapes: dict[str, Shape], inits: dict[str, tuple[tuple[int, ...], int, int]],
    graph_inputs: list[str], graph_outputs: list[str], folded: set[str], float_types: frozenset[int],
) -> Reduction:
    """Reduce a graph to the canonical form (rules 1-5 of this module's docstring), logging its shape decisions."""
    r = _Reducer(nodes, shapes, inits, graph_inputs, graph_outputs, folded, float_types)
    r.split_slices()
    r.fuse_bias()
    r.fold_batchnorm()
    r.recompose()
    return Reduction(r.result(), tuple(r.decisions))


def canonicalize(
    nodes: list[Node], shapes: dict[str, Shape], inits: dict[str, tuple[tuple[int, ...], int, int]],
    graph_inputs: list[str], graph_outputs: list[str], folded: set[str], float_types: frozenset[int],
) -> CanonicalGraph:
    """Reduce a graph to the canonical form (rules 1-5 of this module's docstring)."""
    return reduction(nodes, shapes, inits, graph_inputs, graph_outputs, folded, float_types).graph


def reduce_like(template: Reduction, shapes: dict[str, Shape]) -> CanonicalGraph | None:
    """The canonical form of the nodes ``template`` reduced (the same nodes, initializers, inputs, outputs and
    folded tensors: the caller keeps that true) at other ``shapes``, without reducing them again: the template's
    nodes and parameters with these shapes, when every logged decision comes out the same on them and they name
    the same tensors; else None (reduce them afresh). It shares the template's structure memo
    (:meth:`CanonicalGraph.memo_structure`), not its :meth:`CanonicalGraph.memo`."""
    out = dict(shapes)
    for rule, args, result, write in template.decisions:
        value = rule(out, *args)
        if value != result:
            return None
        if write is not None:
            out[write] = value
    g = template.graph
    if out.keys() != g.shapes.keys():
        return None
    return CanonicalGraph(g.nodes, out, g.params, g.param_sizes, g.graph_inputs, g.dropped, g.static_params,
                          g.dropout_inputs, shared=g.shared)


__all__ = ["CanonicalGraph", "Reduction", "canonicalize", "raw_graph", "reduce_like", "reduction"]


# torch's CUDA autocast lists (aten/src/ATen/autocast_mode.h, torch 2.14: AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
# AT_FORALL_FP32_SET_OPT_DTYPE) as ONNX ops. The CPU's lists differ (its fp32 list has no pow, exp, rsqrt, softmax,
# log_softmax, layer_norm, rms_norm or sum): the memory footprint models CUDA's, what users train on.
AUTOCAST_16BIT_OPS: frozenset[str] = frozenset({  # conv*, matmul/mm/bmm/baddbmm/addmm/linear, einsum, rnn, prelu
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "LSTM", "GRU", "RNN", "PRelu"})
AUTOCAST_FP32_OPS: frozenset[str] = frozenset({  # their 16-bit inputs cast to fp32 (and the graph's explicit Casts)
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "RMSNormalization", "Exp", "Log", "Pow",
    "Reciprocal", "Softplus", "Acos", "Asin", "Cosh", "Sinh", "Tan", "ReduceSum", "ReduceProd", "CumSum",
    "ReduceLogSumExp", "ReduceL1", "ReduceL2", "Resize", "Cast"})
PROMOTING_OPS: frozenset[str] = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Concat", "Max", "Min"})
DTYPE_PASS_OPS: frozenset[str] = frozenset({  # views and aliases: their output has their first input's dtype
    "Transpose", "Gather", "Slice", "Split", "Expand", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity",
    "Dropout"})
FLOAT_TYPES: frozenset[int] = frozenset({1, 10, 11, 16})  # onnx FLOAT, FLOAT16, DOUBLE, BFLOAT16
FLOAT32 = 1  # onnx FLOAT: the weights autocast casts


def cast_copies(cg: CanonicalGraph, per_reader: bool, quantized: Collection[str] = (),
                nodes: Sequence[int] | None = None) -> dict[int, int]:
    """Elements of autocast's 16-bit copies of the fp32 weights its 16-bit ops (``AUTOCAST_16BIT_OPS``) read, by the
    node whose backward frees them: a trainable weight's is cast once and cached (``cached_cast``), so it lives until
    the backward of its first reader, the last of its readers to run backward; a frozen weight's (``per_reader``:
    LoRA's base weights) is cast by every reader and saved by it alone; QLoRA's 4-bit weights (``quantized``
    parameter keys) have none, being dequantized inside each op. Weights no 16-bit op reads (embeddings read by a
    gather, norms' scales) are not cast at all. ``nodes``: those nodes alone, in that order (a checkpointed block's,
    which its recompute casts again); without them the whole graph's answer, kept with the graph
    (:meth:`CanonicalGraph.memo`): the footprint's graph terms and the fine-tune's parameter terms both read it."""
    if nodes is None:
        quantized = frozenset(quantized)
        return cg.memo(("cast_copies", per_reader, quantized),
                       lambda: cast_copies(cg, per_reader, quantized, range(len(cg.nodes))))
    out: dict[int, int] = {}
    cast: set[str] = set()
    for i in nodes:
        op, _d, ins, *_ = cg.nodes[i]
        if op not in AUTOCAST_16BIT_OPS:
            continue
        for t in ins:
            key, shape = cg.params.get(t), cg.shapes.get(t)
            if key is None or key in quantized or not shape or shape[1] != FLOAT32 or (key in cast and not per_reader):
                continue
            cast.add(key)
            out[i] = out.get(i, 0) + int(cg.param_sizes[key][0])
    return out


def autocast_fp32(cg: CanonicalGraph, producer: dict[str, Any], input_dtype: Collection[str] = ()) -> set[str]:
    """The tensors 16-bit autocast (torch's CUDA lists) leaves in fp32: outputs of ``AUTOCAST_FP32_OPS``; of views
    of fp32 tensors (an embedding's lookup of its fp32 weight included); of ``PROMOTING_OPS`` with an fp32 operand,
    where a parameter, constant or graph input of more than one element is fp32 (type promotion; a scalar promotes
    nothing; a bias added to a product is the product's own, addmm's); of other ops with an fp32 activation or graph
    input (a normalization's fp32 weights leave a 16-bit input 16-bit). ``AUTOCAST_16BIT_OPS`` write 16 bits, but a
    contraction by a weight whose parameter key is in ``input_dtype`` writes its input's dtype: bitsandbytes'
    ``Linear4bit`` (QLoRA) computes in 16 bits and casts its output back to its input's dtype (``.to(inp_dtype)``),
    so an fp32 input (LLaMA's normalized residual stream) gives an fp32 output, and every op after it runs in fp32."""
    def wide_leaf(t: str) -> bool:
        shape = cg.shapes.get(t)
        return (producer.get(t) is None or producer[t][0] == "Constant") and bool(shape) and \
            shape[1] in FLOAT_TYPES and shape_elements(shape) > 1

    fp32: set[str] = set()
    for op, _d, ins, outs, *_ in cg.nodes:
        if op in AUTOCAST_16BIT_OPS and input_dtype and len(ins) > 1 and cg.params.get(ins[1]) in input_dtype:
            if ins[0] in fp32 or (ins[0] in cg.graph_inputs and wide_leaf(ins[0])):
                fp32 |= set(outs)
            continue
        if op in AUTOCAST_16BIT_OPS or op == "Constant":
            continue
        acts = [i for i in ins if i in producer and producer[i][0] != "Constant"]
        if op in DTYPE_PASS_OPS:
            wide = bool(ins) and (ins[0] in fp32 or wide_leaf(ins[0]))
        elif op in PROMOTING_OPS:
            bias = op == "Add" and any(producer[i][0] in AUTOCAST_16BIT_OPS for i in acts)
            wide = any(i in fp32 for i in acts) or (not bias and any(wide_leaf(i) for i in ins))
        else:
            wide = op in AUTOCAST_FP32_OPS or any(i in fp32 or (i in cg.graph_inputs and wide_leaf(i)) for i in ins)
        if wide:
            fp32 |= set(outs)
    return fp32
