"""Fold shape arithmetic (Shape -> Gather -> Div -> Clip -> Concat -> Pad/Reshape chains) into constants.

ONNX's data propagation (``infer_shapes(..., data_prop=True)``) follows Shape, Gather, Concat, Slice and
integer Add/Sub/Mul, but not Div, Ceil, Clip, Max or Range, so a Pad whose amounts are computed from the
input size (timm's "same" padding) or a Reshape whose target is computed that way leaves every later shape
unknown. Once the graph's input shapes are static (a batch size is given), this evaluates such chains on
their small tensors with onnx's own reference implementation of each op (:mod:`onnx.reference`) and
replaces them by initializers, alternating with shape inference until every shape is known. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import onnx
from onnx import ModelProto, numpy_helper

MAX_NUMEL = 4096  # only small tensors (shape vectors, scalars) are folded
# ops that never compute shape arithmetic: contractions, normalizations, random numbers, control flow
NOT_FOLDED: frozenset[str] = frozenset({
    "Conv", "ConvTranspose", "Gemm", "Einsum", "LSTM", "GRU", "RNN", "BatchNormalization", "LayerNormalization",
    "GroupNormalization", "InstanceNormalization", "RandomUniform", "RandomNormal", "RandomUniformLike",
    "RandomNormalLike", "Bernoulli", "Multinomial", "If", "Loop", "Scan", "Dropout", "Resize", "Upsample",
})
_RUN_PARAMS: dict[str, Any] = {}  # what onnx.reference's op classes need to be built, filled on first use
_OP_CLASSES: dict[tuple[str, int], Any] = {}
# run_node's results by (opset, node, input values): re-batching folds the same shape arithmetic round after round
_RUNS: dict[tuple[Any, ...], list[np.ndarray] | None] = {}
MAX_RUNS = 65536  # entries kept before the memo starts again


def _op_class(op: str, opset: int) -> Any:
    """onnx.reference's implementation of ``op`` at ``opset`` (cached; None when it has none)."""
    key = (op, opset)
    if key not in _OP_CLASSES:
        from onnx.reference.ops import load_op

        try:
            _OP_CLASSES[key] = load_op("", op, version=opset)
        except Exception:  # no reference implementation of this op
            _OP_CLASSES[key] = None
    return _OP_CLASSES[key]


def _bound(op: str, ins: list[np.ndarray | None]) -> int:
    """An upper bound on the elements of a node's output, known before evaluating it (generators read their inputs)."""
    real = [np.asarray(x) for x in ins if x is not None]
    if op == "ConstantOfShape":
        return int(np.prod(real[0])) if real[0].size else 1
    if op == "Expand":
        return int(np.prod(np.broadcast_shapes(real[0].shape, tuple(int(v) for v in real[1].ravel()))))
    if op == "Tile":
        return int(real[0].size * np.prod(real[1]))  # the repeats' values, not a shape
    if op == "Range":
        start, limit, delta = (float(x.ravel()[0]) for x in real[:3])
        return int(max(0.0, np.ceil((limit - start) / delta))) if delta else MAX_NUMEL + 1
    try:
        return math.prod(np.broadcast_shapes(*(x.shape for x in real))) if real else 1
    except ValueError:  # not a broadcasting op (Concat, Gather...): its output is at most its inputs together
        return int(sum(x.size for x in real))


def run_node(node: onnx.NodeProto, ins: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """Evaluate one node on small constant inputs with onnx's reference implementation (None: not foldable).

    Results are remembered by the node and its input values (never for object arrays, whose bytes are not their
    values); callers must not change the arrays returned.
    """
    key = _run_key(node, ins, opset)
    if key is not None and key in _RUNS:
        return _RUNS[key]
    out = _run_node(node, ins, opset)
    if key is not None:
        if len(_RUNS) >= MAX_RUNS:
            _RUNS.clear()
        _RUNS[key] = out
    return out


def _run_key(node: onnx.NodeProto, ins: list[np.ndarray | None], opset: int) -> tuple[Any, ...] | None:
    """What decides a node's result: its proto, its opset and each input's dtype, shape and bytes (None: no key)."""
    parts: list[Any] = [opset, node.SerializeToString()]
    for x in ins:
        if x is None:
            parts.append(None)
            continue
        a = np.asarray(x)
        if a.dtype.hasobject:
            return None
        parts.append((a.dtype.str, a.shape, a.tobytes()))
    return tuple(parts)


def _run_node(node: onnx.NodeProto, ins: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """The node's outputs by onnx.reference, unless it is never shape arithmetic or its output could be large."""
    if node.op_type in NOT_FOLDED or _bound(node.op_type, ins) > MAX_NUMEL:
        return None
    cls = _op_class(node.op_type, opset)
    if cls is None:
        return None
    if not _RUN_PARAMS:
        from onnx.reference import ReferenceEvaluator

        _RUN_PARAMS.update(log=lambda *a: None, opsets={"": opset}, new_ops=None, verbose=0,
                           existing_functions={}, evaluator_cls=ReferenceEvaluator)
    with np.errstate(all="ignore"):
        out = cls(node, {**_RUN_PARAMS, "opsets": {"": opset}}).run(*ins)
    return [np.asarray(o) for o in out]


def static_shapes(model: ModelProto) -> dict[str, tuple[int, ...]]:
    """Every fully static shape the graph declares (inputs, value_info, outputs) and every initializer's."""
    out: dict[str, tuple[int, ...]] = {}
    g = model.graph
    for vi in (*g.input, *g.value_info, *g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if None not in dims:
                out[vi.name] = tuple(dims)
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


MAX_FLOAT_NUMEL = 16  # float tensors above this size are weights, never shape arithmetic: left unread
_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE})


def _readable(t: onnx.TensorProto) -> bool:
    """Whether a tensor's value may be used: small, inline, and not a weight (so inline and stripped files agree)."""
    numel = math.prod(t.dims)
    if t.data_location == onnx.TensorProto.EXTERNAL or numel > MAX_NUMEL:
        return False
    return t.data_type not in _FLOATS or numel <= MAX_FLOAT_NUMEL


def _initial_values(model: ModelProto, memo: dict[str, np.ndarray | None] | None = None) -> dict[str, np.ndarray]:
    """The readable initializers' values (``memo``: values read before, by name, within one fold)."""
    values: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if memo is not None and t.name in memo:
            value = memo[t.name]
        else:
            value = numpy_helper.to_array(t) if _readable(t) else None
            if memo is not None:
                memo[t.name] = value
        if value is not None:
            values[t.name] = value
    return values


def _opset(model: ModelProto) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a Constant node when it is small and inline (stripped weights are never read)."""
    a = node.attribute[0]
    if a.name == "value":
        return numpy_helper.to_array(a.t) if _readable(a.t) else None
    if a.name in ("value_int", "value_ints", "value_float", "value_floats"):
        return np.asarray(onnx.helper.get_attribute_value(a))
    return None


def _node_inputs(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> list[np.ndarray | None] | None:
    """The node's input values; None when one is unknown."""
    if not all(n in values for n in node.input if n):
        return None
    return [values[n] if n else None for n in node.input]


def evaluate(model: ModelProto, shapes: dict[str, tuple[int, ...]],
             memo: dict[str, np.ndarray | None] | None = None) -> dict[str, np.ndarray]:
    """Values of every small tensor computable from constants and known shapes, in one topological pass.

    Each node runs through onnx's reference implementation of its op (:mod:`onnx.reference`), so any op
    the shape arithmetic uses (Div, Clip, Max, Ceil, Range, Where...) folds, not a hand-picked few. ``memo`` keeps
    the initializers' and Constant nodes' values by name between the passes of one fold (:func:`fold_shapes`), where
    they never change.
    """
    values = _initial_values(model, memo)
    computed: dict[str, np.ndarray] = {}
    opset = _opset(model)
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        try:
            if node.op_type == "Constant":
                if memo is None:
                    value = _constant_value(node)
                elif node.output[0] in memo:
                    value = memo[node.output[0]]
                else:
                    value = memo[node.output[0]] = _constant_value(node)
                if value is not None:
                    values[node.output[0]] = value
                continue
            if node.op_type in ("Shape", "Size"):  # the shape of a tensor computed here is its value's
                known = shapes.get(node.input[0], values[node.input[0]].shape if node.input[0] in values else None)
                if known is None:
                    continue
                dims = np.asarray(known, dtype=np.int64)
                out = [dims[_shape_slice(node)] if node.op_type == "Shape" else np.asarray(dims.prod())]
            else:
                ins = _node_inputs(node, values)
                out = None if ins is None else run_node(node, ins, opset)
            if out is None or out[0].size > MAX_NUMEL:
                continue
            values[node.output[0]] = computed[node.output[0]] = out[0]
        except Exception:  # anything odd: leave the node to shape inference
            continue
    return computed


def _shape_slice(node: onnx.NodeProto) -> slice:
    attrs = {a.name: a.i for a in node.attribute}
    return slice(attrs.get("start", 0), attrs.get("end"))


def replace_with_constants(model: ModelProto, folded: dict[str, np.ndarray]) -> None:
    """Turn folded tensors into initializers, drop their producers, then prune nodes nobody reads."""
    g = model.graph
    outputs = {o.name for o in g.output}
    nodes = list(g.node)
    dropped = [bool(node.output) and all(o in folded or not o for o in node.output)
               and not any(o in outputs for o in node.output) for node in nodes]
    for name, value in folded.items():
        g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    # prune dead nodes (a Shape feeding only folded Gathers) in one reverse pass, then dead initializers
    used = set(outputs)
    dead = []
    for i in range(len(nodes) - 1, -1, -1):
        if not dropped[i] and any(o in used for o in nodes[i].output):
            used.update(nodes[i].input)
        else:
            dead.append(i)
    delete_at(g.node, dead)
    delete_at(g.initializer, [i for i, t in enumerate(g.initializer) if t.name not in used])


def delete_at(field: Any, indices: list[int]) -> None:
    """Delete the items at ``indices`` from a repeated protobuf field in place, a run of neighbours at a time (the
    others keep their order and are not copied, where rebuilding the field copies every message)."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    for start, stop in reversed(runs):
        del field[start:stop]


def fold_shapes(
    model: ModelProto, infer: Callable[[ModelProto], ModelProto], max_rounds: int = 64
) -> tuple[ModelProto, dict[str, np.ndarray]]:
    """Alternate shape inference and folding (in place) until every shape is known; return inferred model and folds."""
    all_folded: dict[str, np.ndarray] = {}
    memo: dict[str, np.ndarray | None] = {}
    for _ in range(max_rounds):
        inferred = infer(model)
        shapes = static_shapes(inferred)
        missing = any(o and o not in shapes for node in inferred.graph.node for o in node.output)
        if not missing:
            return inferred, all_folded
        folded = evaluate(inferred, shapes, memo)
        if not folded:
            return inferred, all_folded
        all_folded.update(folded)
        replace_with_constants(model, folded)
    return infer(model), all_folded


AFFINE_KEY = "gpupred.batch_affine"  # metadata: folded shape values as intercept + slope x batch
FOLDED_KEY = "gpupred.folded"  # metadata: names of initializers that are folded constants, not weights
BUFFERS_KEY = "gpupred.buffers"  # metadata: float initializers that are torch buffers (state), not parameters
SHAPES_KEY = "gpupred.batch_shapes"  # metadata: every tensor's shape, each dim a constant or intercept + slope x batch


def batch_affine_folds(
    model: ModelProto, run: Callable[[ModelProto, int], dict[str, np.ndarray]], probes: tuple[int, int, int] = (7919, 7907, 7901)
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray, str]]]:
    """Fold at three probe batch sizes: values equal in all are constants, integer-affine ones are a + b x batch."""
    runs = [run(model, p) for p in probes]
    constants: dict[str, np.ndarray] = {}
    affine: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
    for name, v0 in runs[0].items():
        vs = [r.get(name) for r in runs]
        if any(v is None or v.shape != v0.shape or v.dtype != v0.dtype for v in vs):
            continue
        if all(np.array_equal(v, v0) for v in vs[1:]):
            constants[name] = v0
        elif np.issubdtype(v0.dtype, np.integer):
            v1, v2 = vs[1].astype(np.int64), vs[2].astype(np.int64)
            diff = v0.astype(np.int64) - v1
            if np.any(diff % (probes[0] - probes[1])):
                continue
            slope = diff // (probes[0] - probes[1])
            intercept = v0.astype(np.int64) - slope * probes[0]
            if np.array_equal(intercept + slope * probes[2], v2):
                affine[name] = (intercept, slope, str(v0.dtype))
    return constants, affine


def encode_affine(affine: dict[str, tuple[np.ndarray, np.ndarray, str]]) -> str:
    """JSON for the model's metadata."""
    import json

    return json.dumps({
        k: {"dtype": dt, "shape": list(a.shape), "a": a.ravel().tolist(), "b": b.ravel().tolist()}
        for k, (a, b, dt) in affine.items()
    })


def decode_affine(text: str, batch: int) -> dict[str, np.ndarray]:
    """Values of the affine shape folds at a batch size."""
    import json

    out = {}
    for k, d in json.loads(text).items():
        a, b = np.asarray(d["a"], np.int64), np.asarray(d["b"], np.int64)
        out[k] = (a + b * batch).astype(d["dtype"]).reshape(d["shape"])
    return out
