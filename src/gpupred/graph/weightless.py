"""Export a model's graph without ever holding its weights: a 7B model costs the host what a ResNet does.

The TorchScript recipe of :mod:`gpupred.graph.export` runs a real forward, so the host holds every weight (and
``export_params=False`` only leaves them out of the file): GPT-2-large at sequence 1024 was killed at 22.4 GB
resident on this project's 24 GB machine. Here the model is built on torch's meta device (:func:`weightless`):
parameters and buffers have shapes and dtypes but no storage (timm and transformers build there; under
torch's ``FakeTensorMode`` timm's constructors fail, since they read values with ``tolist()``). For the trace
they become fake CPU tensors (``FakeTensorMode``), ``torch.export`` traces the module (non-strict, training
mode, a dynamic batch), the dynamo ONNX exporter translates the program, and the graph is written in the
structure-only form of :mod:`gpupred.graph.stripped`: the weights are data-less initializers, never read. Under
fake tensors an eager attention score matrix costs no memory either, so the host's memory does not grow with
the square of the sequence.

Of the ONNX optimizer only constant folding runs (with the module's parameters and buffers held out as graph
inputs, so it never touches them): it turns ``SplitToSequence``/``SequenceAt`` into ``Split`` and folds shape
arithmetic, and every initializer it creates is named a constant in the metadata (``gpupred.folded``: not a
parameter). Of its pattern rewriter only the fusion of consecutive transposes runs, which TorchScript's exporter
does too (the whole rewriter took as long as the export on a 7B graph); the canonical form of
:mod:`gpupred.graph.canonical` reduces the rest the dynamo exporter writes differently (identity transposes, whole
slices, ``unbind`` as slices) for any file. Of the exporter's metadata only each node's module scope is kept, as
TorchScript's exporter keeps it, in the node's name (``/model/layers.0/self_attn/q_proj/node_linear``): activation
checkpointing's blocks are found by it (:mod:`gpupred.step.physics.blocks`). torch is imported inside functions only.
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

from onnx import ModelProto

from gpupred.errors import GpupredError
from gpupred.files import atomic_write_bytes
from gpupred.graph.fold import FOLDED_KEY
from gpupred.graph.stripped import EXTERNAL_DATA_NAME, fold_batch_shapes, mark_buffers, strip_weights

BATCH_NAME = "batch"  # the symbolic batch axis of every exported input and output
WEIGHTLESS_KEY = "gpupred.weightless"  # metadata: the graph was traced under fake tensors
PARAMS_KEY = "gpupred.torch_params"  # metadata: sum(p.numel()) of the exported module, counted at export
NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"  # the dynamo exporter's node metadata: the module scopes of the op


@contextlib.contextmanager
def weightless() -> Iterator[None]:
    """Build torch modules inside it without memory for their weights (torch's meta device: shapes and dtypes only)."""
    import torch

    with torch.device("meta"):
        yield


def holds_weights(model: Any) -> bool:
    """Whether a module's parameters and buffers are all real tensors (none fake, none on the meta device)."""
    from torch._subclasses.fake_tensor import FakeTensor

    for t in (*model.parameters(), *model.buffers()):
        if isinstance(t, FakeTensor) or t.is_meta:
            return False
    return True


def _fake_model(model: Any) -> Any:
    """The module itself when it holds no meta tensors (already fake), else :func:`fake_copy`'s module."""
    if not any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        return model  # already fake (built under the caller's own FakeTensorMode)
    return fake_copy(model)[0]


def fake_copy(model: Any) -> tuple[Any, Any]:
    """A copy of a module whose meta-device tensors are fake CPU tensors (storage-less; tied weights stay tied), and the
    ``FakeTensorMode`` to run it under (``with mode: model(x)`` computes shapes, never values)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    clone = copy.deepcopy(model)  # meta tensors copy for free; the caller's module is left as it was
    done: dict[int, Any] = {}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        for module in clone.modules():
            for table, make in ((module._parameters, _fake_parameter), (module._buffers, _fake_buffer)):
                for name, t in list(table.items()):
                    if t is not None and t.is_meta:
                        if id(t) not in done:
                            done[id(t)] = make(t, torch)
                        table[name] = done[id(t)]
    return clone, mode


def _fake_parameter(t: Any, torch: Any) -> Any:
    return torch.nn.Parameter(torch.empty(t.shape, dtype=t.dtype, device="cpu"), requires_grad=t.requires_grad)


def _fake_buffer(t: Any, torch: Any) -> Any:
    return torch.empty(t.shape, dtype=t.dtype, device="cpu")


def _real_inputs(inputs: Sequence[Any], batch_axes: Sequence[int], symbolic: bool) -> tuple[Any, ...]:
    """Example inputs as real tensors (ones where they were fake or on meta: valid ids, masks that attend), a batch
    of 1 doubled when symbolic (torch.export specializes a dimension of size 1)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    out = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and (isinstance(x, FakeTensor) or x.is_meta):
            x = torch.ones(tuple(int(d) for d in x.shape), dtype=x.dtype)
        if symbolic and i < len(batch_axes) and isinstance(x, torch.Tensor) and x.dim() > batch_axes[i] \
                and x.shape[batch_axes[i]] == 1:
            x = torch.cat([x, x], dim=batch_axes[i])
        out.append(x)
    return tuple(out)


def _takes_varargs(model: Any) -> bool:
    """Whether a module's forward takes its inputs as ``*args``."""
    import inspect

    kinds = [p.kind for p in inspect.signature(model.forward).parameters.values()]
    return inspect.Parameter.VAR_POSITIONAL in kinds and inspect.Parameter.POSITIONAL_OR_KEYWORD not in kinds


def trace(model: Any, inputs: Sequence[Any], input_names: Sequence[str], batch_axes: Sequence[int],
          symbolic: bool = True) -> Any:
    """The ``torch.export`` program of a weightless module in training mode, with a dynamic batch axis."""
    import torch

    dims: Any = tuple({int(a): torch.export.Dim.AUTO} for a in batch_axes) if symbolic else None
    if dims is not None and _takes_varargs(model):
        dims = (dims,)  # a forward(*args) takes the inputs as one tuple
    was_training = model.training
    model.train()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.export(model, tuple(inputs), dynamic_shapes=dims, strict=False)
    except Exception as err:
        text = " ".join(str(err).split())[:300]
        raise GpupredError(f"{type(model).__name__}: torch.export could not trace it without weights "
                           f"({type(err).__name__}: {text}); export a real (small) instance with "
                           "gpupred.export_model instead") from None
    finally:
        model.train(was_training)


def _hold_out_state(graph: Any, state: set[str]) -> list[tuple[Any, Any]]:
    """Move the initializers that are the module's parameters and buffers (or fake) to graph inputs, so that no
    pass reads them; return them."""
    from torch._subclasses.fake_tensor import FakeTensor

    held = []
    for name, value in list(graph.initializers.items()):
        if name in state or isinstance(getattr(value.const_value, "raw", None), FakeTensor):
            held.append((value, value.const_value))
            value.const_value = None
            graph.initializers.pop(name)
            graph.inputs.append(value)
    return held


def _is_fake(tensor: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(getattr(tensor, "raw", None), FakeTensor)


def _restore_stripped(graph: Any, held: list[tuple[Any, Any]]) -> None:
    """Put held-out initializers back, the fake ones data-less (external data in a file that never exists)."""
    import onnx_ir as ir

    for value, tensor in held:
        if value not in graph.inputs:
            continue  # a weight no node reads any more
        graph.inputs.remove(value)
        if _is_fake(tensor):
            tensor = ir.ExternalTensor(EXTERNAL_DATA_NAME, 0, tensor.nbytes, tensor.dtype, shape=tensor.shape,
                                       name=value.name, base_dir="")
        value.const_value = tensor
        graph.register_initializer(value)


def to_onnx(program: Any, input_names: Sequence[str], opset: int = 18) -> ModelProto:
    """The structure-only ONNX model of an exported program with fake weights (constant folding only)."""
    import onnxscript
    import torch
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_program = torch.onnx.export(program, dynamo=True, input_names=list(input_names), opset_version=opset,
                                         optimize=False, verify=False, verbose=False)
    model = onnx_program.model
    signature = program.graph_signature
    held = _hold_out_state(model.graph, {*signature.parameters, *signature.buffers})
    onnxscript.optimizer.fold_constants(model, onnx_shape_inference=False)
    onnxscript.rewriter.rewrite(model, pattern_rewrite_rules=_torchscript_peepholes())
    RemoveUnusedNodesPass()(model)
    _restore_stripped(model.graph, held)
    import onnx_ir as ir

    proto = ir.serde.serialize_model(model)
    name_module_scopes(proto)
    drop_exporter_metadata(proto)
    state = {value.name for value, _ in held}  # every other initializer is a constant the exporter or folding made
    _set_meta(proto, **{FOLDED_KEY: ",".join(sorted(t.name for t in proto.graph.initializer if t.name not in state))})
    return proto


def module_path(scopes: Sequence[str]) -> str:
    """TorchScript's node-name prefix (``/model/layers.0/self_attn/q_proj``) of the dynamo exporter's module scopes
    (``['', 'model', 'model.layers.0', 'model.layers.0.self_attn', ...]``: each module's full dotted path, outermost
    first): each module's name within its parent, joined by ``/``."""
    parts, parent = [], ""
    for scope in scopes:
        if not scope:
            continue
        parts.append(scope[len(parent) + 1:] if parent and scope.startswith(parent + ".") else scope)
        parent = scope
    return "".join(f"/{p}" for p in parts)


def name_module_scopes(proto: ModelProto) -> None:
    """Prefix each node's name with its module path, as TorchScript's exporter names nodes
    (``/model/layers.0/self_attn/q_proj/node_linear``), from the module scopes the dynamo exporter records
    (``pkg.torch.onnx.name_scopes``, whose last entry is the traced op's own name): the module path is what
    :mod:`gpupred.step.physics.blocks` finds the checkpointed layers by, and it is the one part of the exporter's metadata
    that depends on the model alone. Nodes without scopes (made by constant folding) keep their names."""
    import ast

    for node in proto.graph.node:
        scopes = next((p.value for p in node.metadata_props if p.key == NAME_SCOPES_KEY), None)
        if not scopes:
            continue
        try:
            names = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            continue
        prefix = module_path([str(n) for n in names[:-1]]) if isinstance(names, list) else ""
        if prefix:
            node.name = f"{prefix}/{node.name}"


def drop_exporter_metadata(proto: ModelProto) -> None:
    """Remove the metadata the dynamo exporter attaches to the graph, its nodes, inputs and outputs (each node's
    Python stack trace, with this checkout's paths and line numbers; its module scope): a graph's bytes and its
    fingerprint then depend on the model alone, not on where and from which line it was exported."""
    g = proto.graph
    del g.metadata_props[:]
    for item in (*g.node, *g.input, *g.output, *g.value_info, *g.initializer):
        del item.metadata_props[:]


def _torchscript_peepholes() -> Any:
    """onnxscript's rule for what TorchScript's exporter does in its peephole pass and the dynamo exporter does not:
    consecutive transposes fused into one (HF attention's ``key.transpose(1, 2)`` then ``.transpose(-1, -2)``)."""
    from onnxscript.rewriter import RewriteRuleSet
    from onnxscript.rewriter.rules import common

    return RewriteRuleSet([common.transpose_transpose_rule])


def name_batch_axis(proto: ModelProto, input_names: Sequence[str], batch_axes: Sequence[int]) -> None:
    """Rename the batch axis's symbol (torch.export calls it s0, s72, ...) to :data:`BATCH_NAME` everywhere."""
    wanted = dict(zip(input_names, batch_axes))
    symbols = set()
    for inp in proto.graph.input:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in wanted and len(dims) > wanted[inp.name] and dims[wanted[inp.name]].dim_param:
            symbols.add(dims[wanted[inp.name]].dim_param)
    for value in (*proto.graph.input, *proto.graph.output):
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param in symbols:
                d.dim_param = BATCH_NAME


def _set_meta(proto: ModelProto, **values: str) -> None:
    meta = {p.key: p for p in proto.metadata_props}
    for key, value in values.items():
        entry = meta.get(key) or proto.metadata_props.add()
        entry.key, entry.value = key, value


def export_weightless(model: Any, inputs: Sequence[Any], path: str | os.PathLike[str], input_names: Sequence[str],
                      batch_axes: Sequence[int], precompute: bool = True, symbolic: bool = True) -> Path:
    """Export a module built without weights (:func:`weightless`, or on the meta device) as a structure-only ONNX file.

    ``inputs`` are positional example inputs (real, fake or meta tensors: only their shapes and dtypes are
    used); ``batch_axes`` their batch axes, made symbolic unless ``symbolic=False``. ``precompute`` folds the
    shape arithmetic and stores the batch shape map, as the catalog's recipe does.
    """
    from gpupred.graph.shapemap import store_batch_shapes

    path = Path(path)
    model = _fake_model(model)
    program = trace(model, _real_inputs(inputs, batch_axes, symbolic), input_names, batch_axes, symbolic)
    proto = to_onnx(program, input_names)
    name_batch_axis(proto, input_names, batch_axes)
    strip_weights(proto)
    mark_buffers(proto, model)
    params = sum(p.numel() for p in model.parameters())
    _set_meta(proto, **{WEIGHTLESS_KEY: "1", PARAMS_KEY: str(int(params))})
    if precompute:
        fold_batch_shapes(proto)
        store_batch_shapes(proto)
    atomic_write_bytes(path, proto.SerializeToString())
    return path
