"""Structure-only ONNX files: a graph whose large float initializers keep their names, dims and dtypes but no data.

Large float tensors are marked as external data in a file that does not exist (:data:`EXTERNAL_DATA_NAME`), so
the files are tiny and the featurizer, which never reads external data, needs nothing else. Small and integer
initializers (shape constants) keep their values so shape inference still works. Shared by the TorchScript
recipe (:mod:`gpupred.graph.export`) and the weightless one (:mod:`gpupred.graph.weightless`); torch-free.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import ModelProto, TensorProto

EXTERNAL_DATA_NAME = "weights-stripped-by-gpupred"  # a file that never exists
KEEP_FLOAT_NUMEL = 16  # float initializers up to this size keep their values
_FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}


def _itemsize(elem_type: int) -> int:
    from gpupred.graph.loader import itemsize as size

    return size(elem_type) or 1


def _strip_tensor(t: TensorProto) -> None:
    numel = 1
    for d in t.dims:
        numel *= int(d)
    has_data = bool(t.raw_data) or any(
        len(getattr(t, f)) for f in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data")
    )
    if has_data and (t.data_type not in _FLOATS or numel <= KEEP_FLOAT_NUMEL):
        return
    if not has_data and numel == 0:
        return
    for f in ("raw_data", "float_data", "double_data", "int32_data", "int64_data"):
        t.ClearField(f)
    del t.external_data[:]
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", EXTERNAL_DATA_NAME), ("offset", "0"), ("length", str(numel * _itemsize(t.data_type)))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value


def strip_weights(model: ModelProto) -> ModelProto:
    """Drop the data of large float initializers and constants in place (dims and dtypes kept); clear shapes."""
    g = model.graph
    for t in g.initializer:
        _strip_tensor(t)
    for node in g.node:
        node.doc_string = ""
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    _strip_tensor(a.t)
    del g.value_info[:]  # the featurizer re-infers every shape at the batch size it is asked for
    for out in g.output:
        out.type.tensor_type.ClearField("shape")
    model.doc_string = ""
    return model


def fold_batch_shapes(model: ModelProto) -> ModelProto:
    """Fold (in place) shape arithmetic: constants become initializers, batch-affine values go to metadata."""
    from gpupred.graph.loader import infer, resolve_batch, substitute
    from gpupred.graph.fold import AFFINE_KEY, FOLDED_KEY, batch_affine_folds, encode_affine, fold_shapes
    from gpupred.graph.fold import replace_with_constants

    def run(m: ModelProto, probe: int) -> dict[str, Any]:
        work = ModelProto()
        work.CopyFrom(m)
        _, name = resolve_batch(work, "<export>", probe)
        substitute(work, name, probe)
        return fold_shapes(work, lambda w: infer(w, "<export>"))[1]

    constants, affine = batch_affine_folds(model, run)
    # affine values become initializers too (their value at batch 1 as a placeholder; featurize overwrites it)
    placeholders = {k: (a + b).astype(dt) for k, (a, b, dt) in affine.items()}
    if constants or placeholders:
        replace_with_constants(model, {**constants, **placeholders})
    present = {t.name for t in model.graph.initializer}
    affine = {k: v for k, v in affine.items() if k in present}
    constants = {k: v for k, v in constants.items() if k in present}
    meta = {p.key: p for p in model.metadata_props}
    before = set(filter(None, meta[FOLDED_KEY].value.split(","))) if FOLDED_KEY in meta else set()
    for key, value in (
        (FOLDED_KEY, ",".join(sorted({*before, *constants, *affine}))),
        (AFFINE_KEY, encode_affine(affine)),
    ):
        entry = meta.get(key) or model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


def mark_buffers(proto: ModelProto, model: Any) -> None:
    """Name in the metadata the float initializers that are the module's buffers, not its parameters."""
    inits = {t.name for t in proto.graph.initializer}
    params = {id(p) for p in model.parameters()}
    names = sorted(n for n, b in model.named_buffers(remove_duplicate=False)
                   if b.is_floating_point() and id(b) not in params and n in inits)
    if names:
        from gpupred.graph.fold import BUFFERS_KEY

        entry = proto.metadata_props.add()
        entry.key, entry.value = BUFFERS_KEY, ",".join(names)
