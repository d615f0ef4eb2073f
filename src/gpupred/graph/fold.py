"""Fold shape arithmetic (Shape -> Gather -> Div -> Concat -> Reshape chains) into constants with numpy.

ONNX's data propagation cannot follow every op (Div, Floor, Sqrt, Range...), so a Reshape whose target
shape is computed that way leaves every later shape unknown. This evaluates such chains on small
tensors once the graph's input shapes are static, and replaces them by initializers. Torch-free.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import ModelProto, numpy_helper

MAX_NUMEL = 4096  # only small tensors (shape vectors, scalars) are folded
_Ev = Callable[[list[np.ndarray], dict[str, Any]], np.ndarray]


def _axes(ins: list[np.ndarray], attrs: dict[str, Any], pos: int = 1) -> list[int]:
    if len(ins) > pos and ins[pos] is not None:
        return [int(a) for a in np.asarray(ins[pos]).ravel()]
    return [int(a) for a in attrs.get("axes", [])]


def _unsqueeze(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = ins[0]
    axes = sorted(a % (x.ndim + len(_axes(ins, attrs))) for a in _axes(ins, attrs))
    for a in axes:
        x = np.expand_dims(x, a)
    return x


def _squeeze(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    axes = _axes(ins, attrs)
    return np.squeeze(ins[0], axis=tuple(axes)) if axes else np.squeeze(ins[0])


def _slice(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = ins[0]
    starts, ends = [int(v) for v in ins[1].ravel()], [int(v) for v in ins[2].ravel()]
    axes = [int(v) for v in ins[3].ravel()] if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = [int(v) for v in ins[4].ravel()] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    sl = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[a] = slice(s, e, st)
    return x[tuple(sl)]


def _div(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    a, b = ins
    if np.issubdtype(a.dtype, np.integer):
        return (np.trunc(a / b)).astype(a.dtype)
    return (a / b).astype(a.dtype)


def _cast(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return ins[0].astype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))


def _shape(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    shape = np.asarray(ins[0], dtype=np.int64)
    return shape[int(attrs.get("start", 0)): attrs.get("end", None)]


def _constant_of_shape(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    value = attrs.get("value")
    fill = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    return np.full([int(v) for v in ins[0].ravel()], fill.ravel()[0], dtype=fill.dtype)


def _same(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(ref.dtype)


EVAL: dict[str, _Ev] = {
    "Shape": _shape,
    "Identity": lambda i, a: i[0],
    "Gather": lambda i, a: np.take(i[0], i[1].astype(np.int64), axis=int(a.get("axis", 0))),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda i, a: np.concatenate([np.atleast_1d(x) for x in i], axis=int(a.get("axis", 0))),
    "Cast": _cast,
    "Add": lambda i, a: _same(i[0] + i[1], i[0]),
    "Sub": lambda i, a: _same(i[0] - i[1], i[0]),
    "Mul": lambda i, a: _same(i[0] * i[1], i[0]),
    "Div": _div,
    "Mod": lambda i, a: _same(np.fmod(i[0], i[1]) if a.get("fmod") else np.mod(i[0], i[1]), i[0]),
    "Floor": lambda i, a: np.floor(i[0]),
    "Ceil": lambda i, a: np.ceil(i[0]),
    "Sqrt": lambda i, a: np.sqrt(i[0]),
    "Neg": lambda i, a: -i[0],
    "Abs": lambda i, a: np.abs(i[0]),
    "Reciprocal": lambda i, a: _same(1 / i[0], i[0]),
    "Pow": lambda i, a: _same(np.power(i[0], i[1]), i[0]),
    "Max": lambda i, a: np.maximum.reduce(i),
    "Min": lambda i, a: np.minimum.reduce(i),
    "Equal": lambda i, a: np.equal(i[0], i[1]),
    "Less": lambda i, a: np.less(i[0], i[1]),
    "Greater": lambda i, a: np.greater(i[0], i[1]),
    "Not": lambda i, a: np.logical_not(i[0]),
    "Where": lambda i, a: np.where(i[0], i[1], i[2]),
    "Slice": _slice,
    "Range": lambda i, a: np.arange(i[0].item(), i[1].item(), i[2].item()).astype(i[0].dtype),
    "ConstantOfShape": _constant_of_shape,
    "Expand": lambda i, a: i[0] * np.ones([int(v) for v in i[1].ravel()], dtype=i[0].dtype),
    "Reshape": lambda i, a: i[0].reshape([int(v) for v in i[1].ravel()]),
    "ReduceProd": lambda i, a: np.prod(i[0], keepdims=bool(a.get("keepdims", 1))),
    "Size": lambda i, a: np.asarray(i[0], dtype=np.int64).prod(),
}


def static_shapes(model: ModelProto) -> dict[str, tuple[int, ...]]:
    """Every fully static shape the graph declares (inputs, value_info, outputs) and every initializer's."""
    out: dict[str, tuple[int, ...]] = {}
    g = model.graph
    for vi in (*g.input, *g.value_info, *g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


MAX_FLOAT_NUMEL = 16  # float tensors above this size are weights, never shape arithmetic: left unread
_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE})


def _readable(t: onnx.TensorProto) -> bool:
    """Whether a tensor's value may be used: small, inline, and not a weight (so inline and stripped files agree)."""
    numel = np.prod(t.dims)
    if t.data_location == onnx.TensorProto.EXTERNAL or numel > MAX_NUMEL:
        return False
    return t.data_type not in _FLOATS or numel <= MAX_FLOAT_NUMEL


def _initial_values(model: ModelProto) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if _readable(t):
            values[t.name] = numpy_helper.to_array(t)
    return values


def evaluate(model: ModelProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Values of every small tensor computable from constants and known shapes, in one topological pass."""
    values = _initial_values(model)
    computed: dict[str, np.ndarray] = {}
    for node in model.graph.node:
        op = node.op_type
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            if op == "Constant":
                a = node.attribute[0]
                if a.name == "value" and _readable(a.t):
                    values[node.output[0]] = numpy_helper.to_array(a.t)
                elif a.name in ("value_int", "value_ints", "value_float", "value_floats"):
                    values[node.output[0]] = np.asarray(onnx.helper.get_attribute_value(a))
                continue
            if op in ("Shape", "Size"):
                if node.input[0] not in shapes:
                    continue
                ins = [np.asarray(shapes[node.input[0]], dtype=np.int64)]
            else:
                if op not in EVAL or not all((n in values) for n in node.input if n):
                    continue
                ins = [values[n] if n else None for n in node.input]  # type: ignore[misc]
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            with np.errstate(all="ignore"):
                out = np.asarray(EVAL[op](ins, attrs))
            if out.size > MAX_NUMEL or len(node.output) != 1:
                continue
            values[node.output[0]] = out
            computed[node.output[0]] = out
        except Exception:  # anything odd: leave the node to shape inference
            continue
    return computed


def replace_with_constants(model: ModelProto, folded: dict[str, np.ndarray]) -> None:
    """Turn folded tensors into initializers, drop their producers, then prune nodes nobody reads."""
    g = model.graph
    outputs = {o.name for o in g.output}
    keep = []
    for node in g.node:
        if node.output and all(o in folded or not o for o in node.output) and not any(o in outputs for o in node.output):
            continue
        keep.append(node)
    for name, value in folded.items():
        g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    # prune dead nodes (a Shape feeding only folded Gathers) in one reverse pass, then dead initializers
    used = set(outputs)
    alive = []
    for node in reversed(keep):
        if any(o in used for o in node.output):
            alive.append(node)
            used.update(node.input)
    keep = alive[::-1]
    kept_inits = [t for t in g.initializer if t.name in used]
    del g.node[:]
    g.node.extend(keep)
    del g.initializer[:]
    g.initializer.extend(kept_inits)


def fold_shapes(
    model: ModelProto, infer: Callable[[ModelProto], ModelProto], max_rounds: int = 64
) -> tuple[ModelProto, dict[str, np.ndarray]]:
    """Alternate shape inference and folding (in place) until every shape is known; return inferred model and folds."""
    all_folded: dict[str, np.ndarray] = {}
    for _ in range(max_rounds):
        inferred = infer(model)
        shapes = static_shapes(inferred)
        missing = any(o and o not in shapes for node in inferred.graph.node for o in node.output)
        if not missing:
            return inferred, all_folded
        folded = evaluate(inferred, shapes)
        if not folded:
            return inferred, all_folded
        all_folded.update(folded)
        replace_with_constants(model, folded)
    return infer(model), all_folded


AFFINE_KEY = "gpupred.batch_affine"  # metadata: folded shape values as intercept + slope x batch
FOLDED_KEY = "gpupred.folded"  # metadata: names of initializers that are folded constants, not weights
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
