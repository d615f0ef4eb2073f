"""Load an ONNX graph without its weights and read it into plain Python at a batch size.

The lower layer of the featurizer (:mod:`gpupred.graph.features`) and of the export-time shape maps
(:mod:`gpupred.graph.shapemap`): load and check a file, find and substitute its batch dimension, run ONNX
shape inference (folding shape arithmetic, re-batching fixed-batch graphs), and read every protobuf field
the featurizer needs once into tuples and dicts (:class:`PlainGraph`). Needs onnx and numpy, never torch.
"""

from __future__ import annotations

import json
import os
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, numpy_helper

from gpupred.errors import GpupredError
from gpupred.files import file_version
from gpupred.graph.canonical import (SLICE_INPUTS, CanonicalGraph, Node, Reduction, Shape, canonicalize, raw_graph,
                                     reduce_like, reduction)
from gpupred.graph.costs import COST_TABLE
from gpupred.graph.fold import AFFINE_KEY, BUFFERS_KEY, FOLDED_KEY, SHAPES_KEY, decode_affine, fold_shapes
from gpupred.graph.protoscan import load_without_weights
from gpupred.graph.rebatch import rebatch

ATTR_OPS: frozenset[str] = frozenset({  # ops whose cost rule reads attributes
    "Gemm", "Einsum", "LSTM", "GRU", "RNN", "BatchNormalization", "MaxPool", "AveragePool", "LpPool", "LRN",
    "Attention", "MultiHeadAttention", "Transpose",  # Transpose: its perm (canonical form; the step model's views vs copies)
})
FLOAT_TYPES: frozenset[int] = frozenset({
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE,
})
INT_TYPES: frozenset[int] = frozenset({TensorProto.INT64, TensorProto.INT32})


def itemsize(elem_type: int) -> int:
    """Bytes per element of an ONNX tensor type (bfloat16: 2; 0 for undefined and string types)."""
    if elem_type == TensorProto.BFLOAT16:
        return 2
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except Exception:  # undefined / string types
        return 0


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


def _real_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def resolve_batch(model: ModelProto, label: str, batch_size: int | None) -> tuple[int, str | None]:
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
        return int(batch_size), None  # a fixed batch asked at another size: load_graph re-batches the graph
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


def substitute(model: ModelProto, name: str | None, value: int) -> None:
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


def infer(model: ModelProto, label: str, data_prop: bool = True) -> ModelProto:
    """ONNX shape inference of a model; a one-line error naming ``label`` when it fails."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=data_prop)
    except Exception as err:
        raise GpupredError(f"{label}: ONNX shape inference failed ({' '.join(str(err).split())[:200]})") from None


# ---------------------------------------------------------------- plain-Python view of a graph
# Protobuf field access is slow, so every field the featurizer needs is read once into tuples/dicts.

# Shape (canonical.Shape): (dims or None when unknown, elem_type, itemsize)
# Node (canonical.Node): (op_type, domain, inputs, outputs, name, attributes (only for ATTR_OPS), cost entry or None)
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


Init = tuple[tuple[int, ...], int, int]  # (dims, data_type, itemsize)


def _read_inits(model: ModelProto) -> dict[str, Init]:
    """Each initializer's dims, data type and item size, read once."""
    sizes = _ITEMSIZE
    inits: dict[str, Init] = {}
    for t in model.graph.initializer:
        et = t.data_type
        size = sizes.get(et)
        if size is None:
            size = sizes[et] = itemsize(et)
        inits[t.name] = (tuple(t.dims[:]), et, size)
    return inits


def read_nodes(model: ModelProto, label: str | None = None, inits: dict[str, Init] | None = None) -> list[Node]:
    """Each node's fields, read once; with a label, also check every input is produced (truncated files)."""
    out: list[Node] = []
    table = COST_TABLE
    attr_ops = ATTR_OPS
    g = model.graph
    known: set[str] | None = None
    if label is not None:
        known = {i.name for i in g.input} | {""}
        known.update(inits if inits is not None else (t.name for t in g.initializer))
        known |= {t.name for t in g.sparse_initializer}
    constants: dict[str, Any] = {}  # output -> Constant node (and "" -> initializers), for Slices' constant inputs
    for node in g.node:
        op = node.op_type
        ins = node.input[:]
        outs = node.output[:]
        if op == "Constant":
            constants[outs[0]] = node
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
        if op == "Slice":
            attrs = {key: constant_ints(model, ins[k], constants) if len(ins) > k and ins[k] else None
                     for k, key in enumerate(SLICE_INPUTS, start=1)}
        elif op == "Dropout":
            attrs = {"ratio": dropout_ratio(model, node, constants)}
        entry = table.get(op) if domain in ("", "ai.onnx", "com.microsoft") else None
        out.append((op, domain, ins, outs, node.name, attrs, entry))
    return out


def dropout_ratio(model: ModelProto, node: Any, constants: dict[str, Any]) -> float | None:
    """A Dropout node's ratio: its ``ratio`` input's constant value (opset 12 on; ONNX's default 0.5 where the input
    is absent), or its attribute (before opset 12); None when it is computed, not a constant."""
    attr = next((a.f for a in node.attribute if a.name == "ratio"), None)
    if attr is not None:
        return float(attr)
    if len(node.input) < 2 or not node.input[1]:
        return 0.5
    values = constant_values(model, node.input[1], constants, FLOAT_TYPES)
    return float(values[0]) if values else None


def constant_values(model: ModelProto, name: str, constants: dict[str, Any],
                    types: frozenset[int]) -> tuple[float, ...] | None:
    """The first 64 values of a small constant of one of ``types`` (an initializer or a Constant node's ``value``),
    else None."""
    tensor = None
    if name in constants:
        tensor = next((a.t for a in constants[name].attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                      None)
    else:
        if "" not in constants:  # the initializers by name, indexed once per graph on first use; batch-affine ones
            # hold a placeholder (their value at batch 1) until featurize writes the batch's: never read here
            meta = {p.key: p.value for p in model.metadata_props}
            affine = set(json.loads(meta[AFFINE_KEY])) if meta.get(AFFINE_KEY) else set()
            constants[""] = {t.name: t for t in model.graph.initializer if t.name not in affine}
        tensor = constants[""].get(name)
    if tensor is None or tensor.data_type not in types or tensor.data_location:
        return None
    return tuple(numpy_helper.to_array(tensor).reshape(-1)[:64].tolist())


def constant_ints(model: ModelProto, name: str, constants: dict[str, Any]) -> tuple[int, ...] | None:
    """The values of a small integer constant (an initializer or a Constant node's output), else None."""
    if name in constants:
        ints = next((a.ints for a in constants[name].attribute if a.name == "value_ints"), None)
        if ints is not None:
            return tuple(int(v) for v in ints)
    values = constant_values(model, name, constants, INT_TYPES)
    return None if values is None else tuple(int(v) for v in values)


class PlainGraph:
    """An inferred graph as plain Python: nodes, tensor shapes, initializers, graph inputs, folded constants."""

    __slots__ = ("nodes", "shapes", "known", "inits", "graph_inputs", "graph_outputs", "folded", "forms", "reductions")

    def __init__(
        self, model: ModelProto | None, nodes: list[Node], folded: set[str], inits: dict[str, Init] | None = None
    ) -> None:
        self.nodes = nodes
        self.folded = folded
        self.forms: dict[bool, CanonicalGraph] = {}  # canonical (True) and as-exported (False) views, made on demand
        self.reductions: list[Reduction] | None = None  # the reductions of its file at other batch sizes (_graph_at)
        if model is None:  # filled in by _graph_at
            return
        g = model.graph
        shapes: dict[str, Shape] = {}
        known: set[str] = set()
        sizes = _ITEMSIZE
        types: dict[bytes, Shape] = {}  # most tensors share a few types: decode each distinct one once
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
                        size = sizes[et] = itemsize(et)
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
                cg = self._canonical()
            else:
                cg = raw_graph(*args, self.folded, FLOAT_TYPES)
            self.forms[canonical] = cg
        return cg

    def _canonical(self) -> CanonicalGraph:
        """The canonical form: a kept reduction of its file at another batch size replayed on these shapes where its
        decisions hold (:func:`gpupred.graph.canonical.reduce_like`), else reduced afresh (and kept, at most
        ``REDUCTIONS_KEPT`` per file)."""
        args = (self.nodes, self.shapes, self.inits, self.graph_inputs, self.graph_outputs, self.folded, FLOAT_TYPES)
        kept = self.reductions
        if kept is None:  # no parse shared with other batch sizes: nothing to replay
            return canonicalize(*args)
        for template in kept:
            cg = reduce_like(template, self.shapes)
            if cg is not None:
                return cg
        template = reduction(*args)
        kept.append(template)
        if len(kept) > REDUCTIONS_KEPT:
            kept.pop(0)
        cg = reduce_like(template, self.shapes)  # the template's own graph keeps no batch size's analyses
        return template.graph if cg is None else cg

    def missing_shapes(self) -> bool:
        """Whether some node output has no static shape."""
        known = self.known
        return any(o and o not in known for node in self.nodes for o in node[3])


_CACHE_SIZE = 64
_CACHE: "OrderedDict[tuple[Any, ...], tuple[PlainGraph, int]]" = OrderedDict()


_PARSED_FILES = 16
REDUCTIONS_KEPT = 4  # canonical reductions kept per parsed file (a batch size whose shapes decide otherwise adds one)
_PARSED: "OrderedDict[tuple[Any, ...], StoredParse]" = OrderedDict()


@dataclass(frozen=True)
class StoredParse:
    """What a file with a valid stored shape map gives at every batch size: its parsed structure and the map, kept per
    file identity (:func:`file_identity`) so that another batch size only evaluates the map."""

    model: ModelProto
    label: str
    inits: dict[str, Init]
    nodes: list[Node]
    folded: set[str]
    shape_map: dict[str, Any]
    reductions: list[Reduction] = field(default_factory=list)  # its canonical reductions (PlainGraph._canonical)


def clear_graph_cache() -> None:
    """Forget every graph :func:`cached_graph` keeps in this process, and every parse :func:`load_graph` keeps."""
    _CACHE.clear()
    _PARSED.clear()


def file_identity(path_or_proto: Any) -> tuple[Any, ...] | None:
    """A file's identity in this process (:func:`gpupred.files.file_version`: absolute path, modification time, size,
    inode); None for a proto or a path that is not there. A changed file gets a new identity."""
    if isinstance(path_or_proto, ModelProto):
        return None
    try:
        return file_version(path_or_proto)
    except (OSError, TypeError):
        return None


def _cache_key(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None) -> tuple[Any, ...] | None:
    identity = file_identity(path_or_proto)
    return None if identity is None else (*identity, batch_size)


def cached_graph(path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None) -> tuple[PlainGraph, int]:
    """:func:`load_graph`, kept in-process per (file, mtime, size, batch size): featurize, the step model and the footprint
    of one job load its graph once. The graph is shared: read it, never change it."""
    key = _cache_key(path_or_proto, None if batch_size is None else int(batch_size))
    hit = _CACHE.get(key) if key is not None else None
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    graph, bs = load_graph(path_or_proto, batch_size)
    if key is not None:
        _CACHE[key] = (graph, bs)
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return graph, bs


def load_graph(
    path_or_proto: str | os.PathLike[str] | ModelProto, batch_size: int | None, stored: bool = True
) -> tuple[PlainGraph, int]:
    """Load, check, substitute the batch size, infer shapes (folding shape arithmetic if needed).

    With ``stored`` and a shape map from :func:`gpupred.graph.shapemap.batch_shape_map` in the file's metadata
    (written at export, checked against the file's nodes), shapes come from that map instead of inference.
    """
    identity = file_identity(path_or_proto) if stored else None
    parse = _PARSED.get(identity) if identity is not None else None
    if parse is not None:  # this file at another batch size: only its shape map is evaluated
        _PARSED.move_to_end(identity)
        bs, _ = resolve_batch(parse.model, parse.label, batch_size)
        graph = _graph_at(parse.shape_map, bs, parse.model, parse.nodes, parse.folded, parse.inits)
        if graph is not None:
            graph.reductions = parse.reductions
            return graph, bs
    model, label = _load_unchecked(path_or_proto)
    inits = _read_inits(model)  # the batch-affine values below keep each initializer's dims and type
    nodes = read_nodes(model, label, inits)
    bs, batch_name = resolve_batch(model, label, batch_size)
    meta = {p.key: p.value for p in model.metadata_props}
    folded = set(filter(None, meta.get(FOLDED_KEY, "").split(",")))
    folded |= set(filter(None, meta.get(BUFFERS_KEY, "").split(",")))  # state, not parameters: never counted
    shape_map = _shape_map(meta[SHAPES_KEY], model, inits) if stored and meta.get(SHAPES_KEY) else None
    graph = None if shape_map is None else _graph_at(shape_map, bs, model, nodes, folded, inits)
    if graph is not None:
        if identity is not None:  # read-only from here on: the graphs of every batch size share it
            _PARSED[identity] = parse = StoredParse(model, label, inits, nodes, folded, shape_map)
            graph.reductions = parse.reductions
            if len(_PARSED) > _PARSED_FILES:
                _PARSED.popitem(last=False)
        return graph, bs
    fixed = fixed_batch(model) if batch_name is None else None
    if fixed is not None and fixed != bs:
        folded |= rebatch(model, label, fixed, bs, lambda m: infer(m, label))  # its shape arithmetic folded
        inits = _read_inits(model)
        nodes = read_nodes(model, None, inits)
    substitute(model, batch_name, bs)
    if meta.get(AFFINE_KEY):
        values = decode_affine(meta[AFFINE_KEY], bs)
        for t in model.graph.initializer if values else ():
            if t.name in values:
                t.CopyFrom(numpy_helper.from_array(values[t.name], t.name))
    inferred = infer(model, label, data_prop=False)
    graph = PlainGraph(inferred, nodes, folded, inits)  # shape inference leaves nodes and initializers as they were
    if graph.missing_shapes():
        inferred, more = fold_shapes(model, lambda m: infer(m, label))
        folded |= set(more)
        graph = PlainGraph(inferred, read_nodes(inferred), folded)
    return graph, bs


def graph_fingerprint(model: ModelProto, inits: dict[str, Init] | None = None) -> int:
    """CRC-32 of the graph's structure (nodes, attributes, inputs, outputs, initializer names, types and dims).

    A stored shape map fits only this structure. Initializer contents and where they are stored (inline,
    stripped or external data) are left out: moving the weights does not change a shape.
    """
    g = model.graph
    inits = _read_inits(model) if inits is None else inits  # (dims, type, itemsize) by name, in file order
    parts = [item.SerializeToString() for part in (g.node, g.input, g.output) for item in part]
    parts.append(repr([(name, et, dims) for name, (dims, et, _) in inits.items()]).encode())
    return zlib.crc32(b"".join(parts))


def _shape_map(text: str, model: ModelProto, inits: dict[str, Init]) -> dict[str, Any] | None:
    """A stored shape map (JSON) when it fits this graph's structure, else None."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("version") != 1:
        return None
    if data.get("graph_crc32") != graph_fingerprint(model, inits):
        return None
    return data


def _graph_at(
    data: dict[str, Any], bs: int, model: ModelProto, nodes: list[Node], folded: set[str], inits: dict[str, Init]
) -> PlainGraph | None:
    """The graph's shapes at batch ``bs`` from a stored shape map (:func:`_shape_map`); None if the map does not
    fit this graph."""
    try:
        sizes = _ITEMSIZE
        types: list[Shape] = []  # the distinct (elem_type, dims) of the map, evaluated at this batch size
        for et, dims in data["types"]:
            size = sizes.get(et)
            if size is None:
                size = sizes[et] = itemsize(et)
            vals = None if dims is None else tuple([d if d.__class__ is int else d[0] + d[1] * bs for d in dims])
            types.append((vals, et, size))
        shapes: dict[str, Shape] = {name: types[i] for name, i in data["tensors"].items()}
        known = {name for name, shp in shapes.items() if shp[0] is not None}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    shapes.update(inits)
    graph = PlainGraph(None, nodes, folded)
    graph.shapes = shapes
    graph.known = known
    graph.inits = inits
    graph.graph_inputs = [i.name for i in model.graph.input if i.name not in inits]
    graph.graph_outputs = [o.name for o in model.graph.output]
    return None if graph.missing_shapes() else graph
