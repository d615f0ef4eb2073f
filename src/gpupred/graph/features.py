"""Featurize any ONNX graph for a batch size: one flat row of numbers (FLOPs, bytes, op mix, depth...).

Reads graph structure and shapes only (``onnx.load(..., load_external_data=False)``): weights and
external data are never read, which is what makes it fast. Needs onnx and numpy, never torch.
Shapes come from ONNX shape inference at the requested batch size or, when the file carries a batch
shape map (:func:`gpupred.graph.fold.store_batch_shapes`, fitted and checked at export, tied to the
graph by a CRC), from that map without inference. Every protobuf field is read once into plain Python.

Rules beyond the per-op table in :mod:`gpupred.graph.costs`:

- ``flops_train = flops_fwd + flops_bwd + flops_optimizer``. Backward: a contraction op (Conv, Gemm,
  MatMul, LSTM, ...) costs 2x its forward FLOPs (gradient of the input and of the weight) or 1x when
  its data input is a graph input (no input gradient); every other op costs 1x its forward FLOPs.
  Optimizer update per trainable parameter: SGD with momentum 4 FLOPs (weight decay, momentum,
  update), Adam 12 (two moment updates, bias corrections, sqrt, divide, update).
- Precision: activations take the graph's dtype size (fp32: 4 bytes). Under ``bf16`` or ``fp16`` (autocast;
  both halve the same ops, only the 16-bit format differs) contraction ops read 16-bit copies of their inputs
  and weights and write 16-bit outputs; the outputs of
  ops that autocast runs in fp32 (Softmax, LogSoftmax, normalizations, Exp, Log, Pow, reductions)
  stay fp32, and every other op's output takes the wider of its activation inputs. Parameters stay
  fp32 master weights (``param_bytes``).
- ``activation_bytes``: sum of the outputs of every op that allocates (views and shape metadata
  excluded). ``bytes_moved``: forward bytes read + written by every op.
  ``arithmetic_intensity = flops_fwd / bytes_moved`` (forward pass, FLOPs per byte).
- ``params``: distinct floating-point initializers consumed by ops (BatchNorm running statistics
  excluded); tied weights count once.
- ``n_layers``: conv/matmul/recurrent/norm ops and Gathers (embeddings) that consume a trainable
  parameter. ``depth``: the longest chain of compute ops (views and metadata do not count).
  ``n_residual``: Add/Sum ops joining two activation branches of the same shape.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, numpy_helper

from gpupred.errors import GpupredError
from gpupred.graph.protoscan import load_without_weights
from gpupred.graph.rebatch import rebatch
from gpupred.graph.canonical import CanonicalGraph, canonicalize, raw_graph
from gpupred.graph.fold import AFFINE_KEY, FOLDED_KEY, SHAPES_KEY, decode_affine, fold_shapes
from gpupred.graph.costs import (
    COST_TABLE,
    MAC_CATEGORIES,
    NON_TRAINABLE_INPUTS,
    MissingShape,
    NodeInfo,
    view_rule,
    TensorInfo,
)

OPTIMIZER_FLOPS_PER_PARAM: dict[str, int] = {"sgd": 4, "adam": 12}
PRECISION_ACT_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
COUNT_CATEGORIES: tuple[str, ...] = ("conv", "matmul", "recurrent", "norm", "act", "pool", "elementwise")
FP32_UNDER_AUTOCAST: frozenset[str] = frozenset({
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
    "BatchNormalization", "Exp", "Log", "Pow", "ReduceSum", "ReduceMean", "ReduceLogSumExp", "ReduceL2",
})
ATTR_OPS: frozenset[str] = frozenset({  # ops whose cost rule reads attributes
    "Gemm", "Einsum", "LSTM", "GRU", "RNN", "BatchNormalization", "MaxPool", "AveragePool", "LpPool", "LRN",
    "Attention", "MultiHeadAttention",
})
_METADATA_OPS: frozenset[str] = frozenset({"Constant", "Shape", "Size", "Identity"})
_FLOAT_TYPES: frozenset[int] = frozenset({
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE,
})

FEATURE_KEYS: list[str] = [
    "batch_size", "is_bf16", "is_adam",
    "flops_fwd", "flops_bwd", "flops_optimizer", "flops_train", "macs_fwd",
    "params", "param_bytes", "activation_bytes", "input_bytes", "bytes_moved", "arithmetic_intensity",
    "n_nodes", "n_conv", "n_matmul", "n_recurrent", "n_norm", "n_act", "n_pool", "n_elementwise",
    "n_layers", "depth", "n_residual", "unknown_ops",
    "frac_flops_conv", "frac_flops_matmul", "frac_flops_recurrent", "frac_flops_norm", "frac_flops_act",
    "frac_flops_pool", "frac_flops_elementwise",
]


def _itemsize(elem_type: int) -> int:
    if elem_type == TensorProto.BFLOAT16:
        return 2
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except Exception:  # undefined / string types
        return 0


def load_structure(path_or_proto: str | os.PathLike[str] | ModelProto) -> tuple[ModelProto, str]:
    """Load an ONNX graph without weights or external data; return it and a label naming it."""
    model, label = _load_unchecked(path_or_proto)
    _check_complete(model, label)
    return model, label


def _load_unchecked(path_or_proto: str | os.PathLike[str] | ModelProto) -> tuple[ModelProto, str]:
    """Load an ONNX graph (a copy of a given proto) and check it is a model; nodes not yet checked."""
    if isinstance(path_or_proto, ModelProto):
        model = ModelProto()
        model.CopyFrom(path_or_proto)
        label = "<ModelProto>"
    else:
        path = Path(path_or_proto)
        label = os.fspath(path_or_proto)  # as the caller wrote it (a Path would drop a leading ./)
        if not path.is_file():
            raise GpupredError(f"{label}: no such file; give the path of an .onnx model")
        try:
            model = load_without_weights(path)
        except Exception as err:  # DecodeError, ScanError, ValueError...
            kind = "truncated or not an ONNX protobuf"
            raise GpupredError(f"{label}: not a readable ONNX file ({kind}: {type(err).__name__}); re-export it") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.node:
        raise GpupredError(f"{label}: not an ONNX model (no ir_version or no graph nodes); re-export it")
    return model, label


def _check_complete(model: ModelProto, label: str) -> None:
    """Every node input must be produced somewhere: a truncated file loses nodes or initializers."""
    g = model.graph
    known = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    known |= {t.name for t in g.sparse_initializer}
    for node in g.node:
        for name in node.input:
            if name not in known:
                raise GpupredError(
                    f"{label}: node {node.name or node.op_type!r} reads {name!r}, which nothing produces "
                    "(truncated or malformed file); re-export it"
                )
        known.update(node.output)


def _real_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _resolve_batch(model: ModelProto, label: str, batch_size: int | None) -> tuple[int, str | None]:
    """Find the batch dimension of the graph inputs; return the batch size and its symbolic name."""
    inputs = _real_inputs(model)
    if not inputs:
        raise GpupredError(f"{label}: the graph has no inputs, so it has no batch dimension")
    params: dict[str, tuple[str, int]] = {}
    static0: int | None = None
    for inp in inputs:
        tt = inp.type.tensor_type
        if not tt.HasField("shape"):
            raise GpupredError(f"{label}: input {inp.name!r} has no shape information; export it with shapes")
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                if axis == 0 and static0 is None:
                    static0 = d.dim_value
                continue
            name = d.dim_param or ("?" if axis == 0 else "")
            if not name:
                raise GpupredError(
                    f"{label}: input {inp.name!r} axis {axis} has an unknown size; export it with a fixed size"
                )
            params.setdefault(name, (inp.name, axis))
    if params:
        batch_name = "batch" if "batch" in params else next(
            (n for n, (_, ax) in params.items() if ax == 0), next(iter(params))
        )
        for name, (inp_name, axis) in params.items():
            if name != batch_name:
                raise GpupredError(
                    f"{label}: input {inp_name!r} axis {axis} is a dynamic dimension {name!r} other than the batch "
                    f"dimension {batch_name!r}; export the model with that size fixed"
                )
        if batch_size is None:
            raise GpupredError(
                f"{label}: the batch dimension {batch_name!r} is symbolic and no batch size was given; pass --batch-size N"
            )
        return int(batch_size), batch_name
    if static0 is None:
        raise GpupredError(f"{label}: no input has a batch dimension; give a model whose inputs have a leading batch axis")
    if batch_size is not None and int(batch_size) != static0:
        return int(batch_size), None  # a fixed batch asked at another size: _load_graph re-batches the graph
    return static0, None


def fixed_batch(model: ModelProto) -> int | None:
    """The batch size a graph is exported with when every input's leading dimension is fixed (else None)."""
    dims = []
    for inp in _real_inputs(model):
        shape = inp.type.tensor_type.shape.dim if inp.type.tensor_type.HasField("shape") else []
        if not shape or not shape[0].HasField("dim_value"):
            return None
        dims.append(int(shape[0].dim_value))
    return dims[0] if dims else None


def _substitute(model: ModelProto, name: str | None, value: int) -> None:
    """Replace the symbolic batch dimension (or an unnamed leading one) by ``value`` everywhere."""
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if not vi.type.tensor_type.HasField("shape"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                continue
            if (name is not None and d.dim_param == name) or (axis == 0 and not d.dim_param):
                d.dim_value = value


_ITEMSIZE: dict[int, int] = {}  # elem_type -> item size in bytes, filled on first use


def _infer(model: ModelProto, label: str, data_prop: bool = True) -> ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=data_prop)
    except Exception as err:
        raise GpupredError(f"{label}: ONNX shape inference failed ({' '.join(str(err).split())[:200]})") from None


# ---------------------------------------------------------------- plain-Python view of a graph
# Protobuf field access is slow, so every field the featurizer needs is read once into tuples/dicts.

_Shape = tuple[tuple[int, ...] | None, int, int]  # (dims or None when unknown, elem_type, itemsize)
# (op_type, domain, inputs, outputs, name, attributes (only for ATTR_OPS), cost entry or None)
_Node = tuple[str, str, tuple[str, ...], tuple[str, ...], str, dict[str, Any], Any]
_NO_ATTRS: dict[str, Any] = {}
_ATTR_FIELDS: dict[int, str] = {
    onnx.AttributeProto.FLOAT: "f", onnx.AttributeProto.INT: "i", onnx.AttributeProto.STRING: "s",
}
_ATTR_LISTS: dict[int, str] = {
    onnx.AttributeProto.FLOATS: "floats", onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.STRINGS: "strings",
}


def _attr_value(a: onnx.AttributeProto) -> Any:
    """``onnx.helper.get_attribute_value`` with the common scalar and list types read directly."""
    if not a.ref_attr_name:
        t = a.type
        f = _ATTR_FIELDS.get(t)
        if f is not None:
            return getattr(a, f)
        f = _ATTR_LISTS.get(t)
        if f is not None:
            return list(getattr(a, f))
    return onnx.helper.get_attribute_value(a)


_Init = tuple[tuple[int, ...], int, int]  # (dims, data_type, itemsize)


def _read_inits(model: ModelProto) -> dict[str, _Init]:
    """Each initializer's dims, data type and item size, read once."""
    sizes = _ITEMSIZE
    inits: dict[str, _Init] = {}
    for t in model.graph.initializer:
        et = t.data_type
        size = sizes.get(et)
        if size is None:
            size = sizes[et] = _itemsize(et)
        inits[t.name] = (tuple(t.dims[:]), et, size)
    return inits


def _read_nodes(model: ModelProto, label: str | None = None, inits: dict[str, _Init] | None = None) -> list[_Node]:
    """Each node's fields, read once; with a label, also check every input is produced (truncated files)."""
    out: list[_Node] = []
    table = COST_TABLE
    attr_ops = ATTR_OPS
    g = model.graph
    known: set[str] | None = None
    if label is not None:
        known = {i.name for i in g.input} | {""}
        known.update(inits if inits is not None else (t.name for t in g.initializer))
        known |= {t.name for t in g.sparse_initializer}
    for node in g.node:
        op = node.op_type
        ins = node.input[:]
        outs = node.output[:]
        if known is not None:
            for n in ([] if known.issuperset(ins) else ins):
                if n not in known:
                    raise GpupredError(
                        f"{label}: node {node.name or op!r} reads {n!r}, which nothing produces "
                        "(truncated or malformed file); re-export it"
                    )
            known.update(outs)
        domain = node.domain
        attrs = {a.name: _attr_value(a) for a in node.attribute} if op in attr_ops else _NO_ATTRS
        entry = table.get(op) if domain in ("", "ai.onnx", "com.microsoft") else None
        out.append((op, domain, ins, outs, node.name, attrs, entry))
    return out


class _Graph:
    """An inferred graph as plain Python: nodes, tensor shapes, initializers, graph inputs, folded constants."""

    __slots__ = ("nodes", "shapes", "known", "inits", "graph_inputs", "graph_outputs", "folded", "forms")

    def __init__(
        self, model: ModelProto | None, nodes: list[_Node], folded: set[str], inits: dict[str, _Init] | None = None
    ) -> None:
        self.nodes = nodes
        self.folded = folded
        self.forms: dict[bool, CanonicalGraph] = {}  # canonical (True) and as-exported (False) views, made on demand
        if model is None:  # filled in by _stored_graph
            return
        g = model.graph
        shapes: dict[str, _Shape] = {}
        known: set[str] = set()
        sizes = _ITEMSIZE
        types: dict[bytes, _Shape] = {}  # most tensors share a few types: decode each distinct one once
        for seq in (g.value_info, g.output, g.input):
            for vi in seq:
                typ = vi.type
                key = typ.SerializeToString()
                shp = types.get(key)
                if shp is None:
                    tt = typ.tensor_type
                    et = tt.elem_type
                    size = sizes.get(et)
                    if size is None:
                        size = sizes[et] = _itemsize(et)
                    vals: tuple[int, ...] | None = None
                    if tt.HasField("shape"):
                        dims = tt.shape.dim
                        vals = tuple([d.dim_value for d in dims])
                        if 0 in vals and any(not d.HasField("dim_value") for d in dims):
                            vals = None
                    shp = types[key] = (vals, et, size)
                name = vi.name
                shapes[name] = shp
                if shp[0] is not None:
                    known.add(name)
        if inits is None:
            inits = _read_inits(model)
        shapes.update(inits)
        self.shapes = shapes
        self.known = known
        self.inits = inits
        self.graph_inputs = [i.name for i in g.input if i.name not in inits]
        self.graph_outputs = [o.name for o in g.output]

    def form(self, canonical: bool) -> CanonicalGraph:
        """The canonical form (:mod:`gpupred.graph.canonical`) or the graph as exported, computed once."""
        cg = self.forms.get(canonical)
        if cg is None:
            args = (self.nodes, self.shapes, self.inits, self.graph_inputs)
            if canonical:
                cg = canonicalize(*args, self.graph_outputs, self.folded, _FLOAT_TYPES)
            else:
                cg = raw_graph(*args, self.folded, _FLOAT_TYPES)
            self.forms[canonical] = cg
        return cg

    def missing_shapes(self) -> bool:
        """Whether some node output has no static shape."""
        known = self.known
        return any(o and o not in known for node in self.nodes for o in node[3])


_CACHE_SIZE = 64
_CACHE: "OrderedDict[tuple[Any, ...], tuple[_Graph, int]]" = OrderedDict()


def clear_cache() -> None:
    """Forget every inferred graph kept in this process (the next featurize of a file is a cold one)."""
    _CACHE.clear()


def _cache_key(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None) -> tuple[Any, ...] | None:
    if isinstance(path_or_proto, ModelProto):
        return None
    try:
        st = os.stat(path_or_proto)
    except OSError:
        return None
    return (os.path.abspath(path_or_proto), st.st_mtime_ns, st.st_size, st.st_ino, batch_size)


def featurize(
    path_or_proto: str | os.PathLike[str] | ModelProto,
    batch_size: int | None = None,
    precision: str = "fp32",
    optimizer: str = "sgd",
    per_op: dict[str, dict[str, int]] | None = None,
    canonical: bool = True,
) -> dict[str, Any]:
    """One flat feature row for an ONNX graph at a batch size, precision and optimizer.

    The graph is first reduced to the canonical form of :mod:`gpupred.graph.canonical` (so the row does
    not depend on how the model was exported); ``canonical=False`` featurizes it as exported (for
    checking the per-op cost rules against other counters). ``per_op``, if given, is filled with each op
    type's count, MACs, FLOPs and output elements.
    The inferred graph of a file is kept in-process per (path, mtime, size, batch size), so
    featurizing the same file again at another precision or optimizer skips loading and inference.
    """
    if precision not in PRECISION_ACT_BYTES:
        raise GpupredError(f"unknown precision {precision!r}; known: {', '.join(PRECISION_ACT_BYTES)}")
    if optimizer not in OPTIMIZER_FLOPS_PER_PARAM:
        raise GpupredError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZER_FLOPS_PER_PARAM)}")
    if batch_size is not None and int(batch_size) < 1:
        raise GpupredError(f"batch size must be positive, got {batch_size}")
    key = _cache_key(path_or_proto, None if batch_size is None else int(batch_size))
    hit = _CACHE.get(key) if key is not None else None
    if hit is not None:
        _CACHE.move_to_end(key)
        graph, bs = hit
    else:
        graph, bs = _load_graph(path_or_proto, batch_size)
        if key is not None:
            _CACHE[key] = (graph, bs)
            if len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return _graph_features(graph.form(canonical), bs, precision, optimizer, per_op)


def _load_graph(
    path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None, stored: bool = True
) -> tuple[_Graph, int]:
    """Load, check, substitute the batch size, infer shapes (folding shape arithmetic if needed).

    With ``stored`` and a shape map from :func:`gpupred.graph.fold.batch_shape_map` in the file's metadata
    (written at export, checked against the file's nodes), shapes come from that map instead of inference.
    """
    model, label = _load_unchecked(path_or_proto)
    inits = _read_inits(model)  # the batch-affine values below keep each initializer's dims and type
    nodes = _read_nodes(model, label, inits)
    bs, batch_name = _resolve_batch(model, label, batch_size)
    meta = {p.key: p.value for p in model.metadata_props}
    folded = set(filter(None, meta.get(FOLDED_KEY, "").split(",")))
    if stored and meta.get(SHAPES_KEY):
        graph = _stored_graph(meta[SHAPES_KEY], bs, model, nodes, folded, inits)
        if graph is not None:
            return graph, bs
    fixed = fixed_batch(model) if batch_name is None else None
    if fixed is not None and fixed != bs:
        rebatch(model, label, fixed, bs, lambda m: _infer(m, label))
        inits = _read_inits(model)
        nodes = _read_nodes(model, None, inits)
    _substitute(model, batch_name, bs)
    if meta.get(AFFINE_KEY):
        values = decode_affine(meta[AFFINE_KEY], bs)
        for t in model.graph.initializer if values else ():
            if t.name in values:
                t.CopyFrom(numpy_helper.from_array(values[t.name], t.name))
    inferred = _infer(model, label, data_prop=False)
    graph = _Graph(inferred, nodes, folded, inits)  # shape inference leaves nodes and initializers as they were
    if graph.missing_shapes():
        inferred, more = fold_shapes(model, lambda m: _infer(m, label))
        folded |= set(more)
        graph = _Graph(inferred, _read_nodes(inferred), folded)
    return graph, bs


def graph_fingerprint(model: ModelProto, inits: dict[str, _Init] | None = None) -> int:
    """CRC-32 of the graph's structure (nodes, attributes, inputs, outputs, initializer names, types and dims).

    A stored shape map fits only this structure. Initializer contents and where they are stored (inline,
    stripped or external data) are left out: moving the weights does not change a shape.
    """
    g = model.graph
    inits = _read_inits(model) if inits is None else inits  # (dims, type, itemsize) by name, in file order
    parts = [item.SerializeToString() for part in (g.node, g.input, g.output) for item in part]
    parts.append(repr([(name, et, dims) for name, (dims, et, _) in inits.items()]).encode())
    return zlib.crc32(b"".join(parts))


def _stored_graph(
    text: str, bs: int, model: ModelProto, nodes: list[_Node], folded: set[str], inits: dict[str, _Init]
) -> _Graph | None:
    """The graph's shapes at batch ``bs`` from a stored shape map; None if the map does not fit this graph."""
    try:
        data = json.loads(text)
        if data.get("version") != 1 or data.get("graph_crc32") != graph_fingerprint(model, inits):
            return None
        sizes = _ITEMSIZE
        types: list[_Shape] = []  # the distinct (elem_type, dims) of the map, evaluated at this batch size
        for et, dims in data["types"]:
            size = sizes.get(et)
            if size is None:
                size = sizes[et] = _itemsize(et)
            vals = None if dims is None else tuple([d if d.__class__ is int else d[0] + d[1] * bs for d in dims])
            types.append((vals, et, size))
        shapes: dict[str, _Shape] = {name: types[i] for name, i in data["tensors"].items()}
        known = {name for name, shp in shapes.items() if shp[0] is not None}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    shapes.update(inits)
    graph = _Graph(None, nodes, folded)
    graph.shapes = shapes
    graph.known = known
    graph.inits = inits
    graph.graph_inputs = [i.name for i in model.graph.input if i.name not in inits]
    graph.graph_outputs = [o.name for o in model.graph.output]
    return None if graph.missing_shapes() else graph


def _graph_features(
    graph: CanonicalGraph, bs: int, precision: str, optimizer: str, per_op: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    bf16 = precision in ("bf16", "fp16")  # autocast to a 16-bit float: the same ops run at 2 bytes
    shapes = graph.shapes
    param_of = graph.params
    param_sizes = graph.param_sizes
    graph_inputs = set(graph.graph_inputs)
    float_types = _FLOAT_TYPES
    fp32 = TensorProto.FLOAT
    mac_categories = MAC_CATEGORIES
    no_shape: _Shape = (None, 0, 4)
    new_tuple = tuple.__new__  # TensorInfo(shape, size, is_param) without the named tuple's Python-level __new__

    act_size: dict[str, int] = {}  # effective itemsize of float activations under the precision
    dynamic: set[str] = set(graph_inputs)
    producer: dict[str, int] = {}
    tensor_depth: dict[str, int] = {}
    depth_of = tensor_depth.get
    trainable: dict[str, int] = {}

    cat_count: Counter[str] = Counter()
    cat_flops: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    macs = flops = flops_bwd = bytes_moved = activation_bytes = 0
    n_layers = n_residual = n_work = 0
    depth = 0

    for idx, (op, domain, ins, outs, node_name, attrs, entry) in enumerate(graph.nodes):
        category = entry.category if entry else "other"
        # depth of the deepest input and whether any input is an activation (not a constant)
        d_in = 0
        is_dyn = False
        for n in ins:
            if n:
                dn = depth_of(n, 0)
                if dn > d_in:
                    d_in = dn
            if not is_dyn and n in dynamic:
                is_dyn = True
        if entry is not None and entry.rule is view_rule:  # views and metadata: no cost, no depth
            cat_count[category] += 1
            src_size = act_size.get(ins[0]) if ins else None
            for out in outs:
                producer[out] = idx
                tensor_depth[out] = d_in
                if src_size is not None:
                    act_size[out] = src_size
                if is_dyn:
                    dynamic.add(out)
            continue
        n_work += 1
        in_params = [name in param_of for name in ins]
        mac_op = category in mac_categories
        # dtype sizes under the precision
        if bf16:
            in_sizes = [act_size.get(n) or shapes.get(n, no_shape)[2] for n, p in zip(ins, in_params) if n and not p]
            for out in outs:
                shp = shapes.get(out)
                if shp is None or shp[1] not in float_types or shp[2] != 4:
                    continue
                if mac_op:
                    act_size[out] = 2
                elif op in FP32_UNDER_AUTOCAST or not in_sizes:
                    act_size[out] = 4
                else:
                    act_size[out] = max(in_sizes)

        cost = None
        if entry is None:
            unknown[op if domain in ("", "ai.onnx") else f"{domain}.{op}"] += 1
        else:
            in_infos: list[TensorInfo | None] = []
            for name, is_p in zip(ins, in_params):
                shp = shapes.get(name) if name else None
                if shp is None or shp[0] is None:
                    in_infos.append(None)
                    continue
                size = shp[2]
                if bf16 and shp[1] == fp32:
                    size = 2 if mac_op else (size if is_p else act_size.get(name, size))
                in_infos.append(new_tuple(TensorInfo, (shp[0], size, is_p)))
            out_infos: list[TensorInfo | None] = []
            for name in outs:
                shp = shapes.get(name) if name else None
                if shp is None or shp[0] is None:
                    out_infos.append(None)
                    continue
                size = shp[2]
                if bf16 and shp[1] == fp32:
                    size = 2 if mac_op else act_size.get(name, size)
                out_infos.append(new_tuple(TensorInfo, (shp[0], size, False)))
            ninfo = NodeInfo(op, attrs, in_infos, out_infos, node_name)
            try:
                cost = entry.rule(ninfo)
            except (MissingShape, IndexError, ValueError, KeyError, ZeroDivisionError, TypeError):
                unknown[f"{op}(no shape)"] += 1
        if cost is not None:
            if per_op is not None:
                slot = per_op.setdefault(op, {"count": 0, "macs": 0, "flops": 0, "elements": 0})
                slot["count"] += 1
                slot["macs"] += cost.macs
                slot["flops"] += cost.flops
                out0 = ninfo.outputs[0] if ninfo.outputs else None
                slot["elements"] += out0.numel if out0 is not None else 0
            cat_count[category] += 1
            cat_flops[category] += cost.flops
            macs += cost.macs
            flops += cost.flops
            bytes_moved += cost.bytes_read + cost.bytes_written
            if mac_op:
                data_from_input = bool(ins) and ins[0] in graph_inputs
                flops_bwd += cost.flops * (1 if data_from_input else 2)
            else:
                flops_bwd += cost.flops
            activation_bytes += cost.bytes_written
        # parameters
        if True in in_params:
            skip = NON_TRAINABLE_INPUTS.get(op, ())
            has_weight = False
            for pos, (name, is_p) in enumerate(zip(ins, in_params)):
                if not is_p or pos in skip:
                    continue
                base = param_of[name]
                numel, itemsize = param_sizes[base]
                has_weight = has_weight or numel > 1
                trainable[base] = numel
            if has_weight and (mac_op or category == "norm" or op == "Gather"):
                n_layers += 1
        # graph structure: residual joins, depth, dynamic tensors
        if (op == "Add" or op == "Sum") and len(ins) >= 2:
            a, b = ins[0], ins[1]
            if a in dynamic and b in dynamic and producer.get(a, a) != producer.get(b, b):
                sa, sb = shapes.get(a), shapes.get(b)
                if sa is not None and sb is not None and sa[0] is not None and sa[0] == sb[0] and sa[1] in float_types:
                    n_residual += 1
        d = (0 if category == "reshape" or category == "other" else 1) + d_in
        if d > depth:
            depth = d
        for out in outs:
            producer[out] = idx
            tensor_depth[out] = d
            if is_dyn:
                dynamic.add(out)

    params = sum(trainable.values())
    param_bytes = sum(trainable[b] * param_sizes[b][1] for b in trainable)
    input_bytes = 0
    for name in graph_inputs:
        shp = shapes.get(name)
        if shp is not None and shp[0] is not None:
            input_bytes += math.prod(shp[0]) * shp[2]
    flops_opt = params * OPTIMIZER_FLOPS_PER_PARAM[optimizer]
    row: dict[str, Any] = {
        "batch_size": bs,
        "is_bf16": int(precision == "bf16"),
        "is_adam": int(optimizer == "adam"),
        "flops_fwd": int(flops),
        "flops_bwd": int(flops_bwd),
        "flops_optimizer": int(flops_opt),
        "flops_train": int(flops + flops_bwd + flops_opt),
        "macs_fwd": int(macs),
        "params": int(params),
        "param_bytes": int(param_bytes),
        "activation_bytes": int(activation_bytes),
        "input_bytes": int(input_bytes),
        "bytes_moved": int(bytes_moved),
        "arithmetic_intensity": float(flops / bytes_moved) if bytes_moved else 0.0,
        "n_nodes": n_work,
        **{f"n_{c}": int(cat_count[c]) for c in COUNT_CATEGORIES},
        "n_layers": n_layers,
        "depth": depth,
        "n_residual": n_residual,
        "unknown_ops": int(sum(unknown.values())),
        **{f"frac_flops_{c}": (cat_flops[c] / flops if flops else 0.0) for c in COUNT_CATEGORIES},
    }
    row["unknown_op_types"] = ",".join(sorted(unknown))
    return row
