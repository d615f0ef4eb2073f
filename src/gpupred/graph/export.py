"""Export a workload's torch model to a structure-only ONNX graph with a symbolic batch dimension.

Exporter: the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``), in training mode
(BatchNorm keeps its batch statistics, Dropout stays in the graph), opset 17, no constant folding.
Measured on this machine (torch 2.14.1, 1 thread): ResNet-50 1.3 s with TorchScript against 6.3 s with
the dynamo exporter; a 2-layer LSTM language model 0.35 s against 6.9 s. The dynamo graphs are also
noisier (CastLike/Expand/Shape chains around every Conv) without adding cost-bearing ops, and a
catalog of 60-80 architectures must export in well under 3 minutes on 2 cores, so TorchScript wins.

The cached file keeps every initializer's name, dims and dtype but none of its data: large float
tensors are marked as external data in a file that does not exist
(:data:`gpupred.graph.stripped.EXTERNAL_DATA_NAME`), so the files are tiny and the featurizer, which
never reads external data, needs nothing else. Small and integer initializers (shape constants) keep
their values so shape inference still works. This module imports torch inside its functions only.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import onnx
from onnx import ModelProto, TensorProto

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.files import FileCache, atomic_write_bytes, is_file, sha256, within_look
from gpupred.graph.protoscan import GZIP_MAGIC
from gpupred.graph.stripped import fold_batch_shapes, mark_buffers, strip_weights

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.workloads.spec import WorkloadSpec

EXPORT_VERSION = 3  # bump when the export recipe changes: old cache files are then ignored
OPSET = 17
EXPORT_BATCH = 2  # trace at this batch size; the batch axis is symbolic in the graph
INDEX_NAME = "index.json"  # the graph store's index (export version, torch version, sha256 per graph)


def cache_path(spec: "WorkloadSpec") -> Path:
    """Where the structure-only export of a spec's architecture lives."""
    return config.ONNX_CACHE / f"{spec.arch_key}.v{EXPORT_VERSION}.onnx"


def _params_to_initializers(model: ModelProto, input_names: Sequence[str]) -> None:
    """With ``export_params=False`` weights arrive as graph inputs: make them (data-less) initializers again."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    real = set(input_names)
    keep = []
    for inp in g.input:
        if inp.name in real or inp.name in inits:
            keep.append(inp)
            continue
        tt = inp.type.tensor_type
        t = TensorProto(name=inp.name, data_type=tt.elem_type, dims=[d.dim_value for d in tt.shape.dim])
        g.initializer.append(t)
    del g.input[:]
    g.input.extend(keep)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence stdout/stderr at the file-descriptor level (the exporter dumps its IR graph on failure)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def _small_batch(inputs: Sequence[Any], batch_axes: Sequence[int]) -> tuple[Any, ...]:
    out = []
    for x, axis in zip(inputs, batch_axes):
        out.append(x.narrow(axis, 0, min(EXPORT_BATCH, x.shape[axis])) if x.dim() > axis else x)
    return tuple(out) + tuple(inputs[len(batch_axes):])


def export_module(
    model: Any,
    inputs: Sequence[Any],
    path: str | os.PathLike[str],
    input_names: Sequence[str],
    batch_axes: Sequence[int],
    keep_weights: bool = False,
    precompute: bool = True,
    symbolic: bool = True,
) -> Path:
    """Export any torch module to ``path`` as ONNX with a symbolic ``batch`` axis (weights stripped unless asked).

    ``precompute`` folds the shape arithmetic and stores the batch shape map (featurize then skips shape
    inference); without it the file is the exporter's graph as it came. ``symbolic=False`` keeps the inputs'
    own, fixed batch (as ``torch.onnx.export`` does by default). A module without weights (built under
    :func:`gpupred.graph.weightless.weightless` or on the meta device) is traced with fake tensors instead
    (:func:`gpupred.graph.weightless.export_weightless`): the host never holds its weights.
    """
    path = Path(path)
    inputs = _small_batch(tuple(inputs), tuple(batch_axes)) if symbolic else tuple(inputs)
    from gpupred.graph.weightless import export_weightless, holds_weights

    if not holds_weights(model):  # built under gpupred.weightless() or on the meta device: trace it with fake tensors
        if keep_weights:
            raise GpupredError(f"{path.name}: the model holds no weights (fake or meta tensors), so keep_weights "
                               "cannot write them; build it with real tensors")
        return export_weightless(model, inputs, path, input_names, batch_axes, precompute, symbolic)
    dynamic_axes = {name: {int(axis): "batch"} for name, axis in zip(input_names, batch_axes)} if symbolic else None
    proto = _torchscript_export(model, inputs, input_names, dynamic_axes, keep_weights, path)
    _params_to_initializers(proto, input_names)
    if not keep_weights:
        strip_weights(proto)
    mark_buffers(proto, model)
    if precompute:
        fold_batch_shapes(proto)
        from gpupred.graph.shapemap import store_batch_shapes

        store_batch_shapes(proto)  # every tensor's shape as a + b x batch: featurize then skips shape inference
    atomic_write_bytes(path, proto.SerializeToString())
    return path


def _torchscript_export(model: Any, inputs: tuple[Any, ...], input_names: Sequence[str],
                        dynamic_axes: dict[str, dict[int, str]] | None, keep_weights: bool, path: Path) -> ModelProto:
    """The TorchScript exporter in training mode, then eval mode; the dynamo exporter when both fail."""
    import torch

    was_training = model.training
    errors: list[str] = []
    # training mode keeps BatchNorm's batch statistics and Dropout; recurrent layers with dropout cannot
    # be exported that way, so those fall back to eval mode (Dropout dropped, BatchNorm in inference form)
    for mode in (torch.onnx.TrainingMode.TRAINING, torch.onnx.TrainingMode.EVAL):
        buf = io.BytesIO()
        try:
            with warnings.catch_warnings(), _quiet(), _loss_symbolic():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    model, inputs, buf, dynamo=False, input_names=list(input_names), dynamic_axes=dynamic_axes,
                    opset_version=OPSET, do_constant_folding=False, training=mode, export_params=keep_weights,
                )
            return onnx.load_model_from_string(buf.getvalue())
        except Exception as err:
            errors.append(f"{type(err).__name__}: {' '.join(str(err).split())[:300]}")
        finally:
            model.train(was_training)
    axes = [next(iter(a)) for a in dynamic_axes.values()] if dynamic_axes else None
    return _dynamo_export(model, inputs, input_names, axes, errors, path)


LOSS_IGNORE_INDEX = -100  # torch's default ignore_index, for a loss whose ignore_index is computed from a shape


def cross_entropy_symbolic(g: Any, logits: Any, target: Any, weight: Any, reduction: Any, ignore_index: Any,
                           label_smoothing: Any) -> Any:
    """TorchScript symbolic of ``aten::cross_entropy_loss`` that also takes an ignore_index computed in the graph.

    torch's own fails with "i_(): incompatible function arguments" when ignore_index is not a constant
    (BertForQuestionAnswering ignores positions equal to the sequence length, read from a shape). The
    graph's cost and shapes do not depend on which label is ignored, so such an index is exported as
    :data:`LOSS_IGNORE_INDEX`; the exported loss's value then differs, never its work.
    """
    from torch.onnx import symbolic_helper  # the TorchScript exporter's helpers (public alias)

    names = ["none", "mean", "sum"]
    red = names[symbolic_helper._maybe_get_const(reduction, "i")]
    index = symbolic_helper._maybe_get_const(ignore_index, "i")
    index = index if isinstance(index, int) else LOSS_IGNORE_INDEX
    args = (logits, target) if weight.node().mustBeNone() else (logits, target, weight)
    return g.op("SoftmaxCrossEntropyLoss", *args, reduction_s=red, ignore_index_i=index)


@contextlib.contextmanager
def _loss_symbolic() -> Iterator[None]:
    """Use :func:`cross_entropy_symbolic` for the duration of one export."""
    import torch

    torch.onnx.register_custom_op_symbolic("aten::cross_entropy_loss", cross_entropy_symbolic, OPSET)
    try:
        yield
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::cross_entropy_loss", OPSET)


def _dynamo_export(
    model: Any, inputs: tuple[Any, ...], input_names: Sequence[str], batch_axes: Sequence[int] | None, errors: list[str],
    path: Path,
) -> ModelProto:
    """Fallback for what TorchScript cannot export (e.g. adaptive pooling to a non-divisor size): the dynamo exporter."""
    import torch

    dims = None if batch_axes is None else tuple({int(axis): torch.export.Dim("batch", min=1)} for axis in batch_axes)
    try:
        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                model.train(), inputs, dynamo=True, input_names=list(input_names), dynamic_shapes=dims,
                opset_version=18, optimize=True, verify=False,
            )
        return program.model_proto
    except Exception as err:
        errors.append(f"dynamo: {type(err).__name__}: {' '.join(str(err).split())[:300]}")
        raise GpupredError(export_failure(path.name, input_names, errors)) from None


LOSS_INPUTS: tuple[str, ...] = ("labels", "start_positions", "end_positions", "next_sentence_label", "mc_labels")
# operators whose failure has a known cause in common models, and the call that avoids it
OPERATOR_WORKAROUNDS: dict[str, str] = {
    # transformers' masking_utils.find_packed_sequence_indices: no attention mask and no cache (use_cache=False, as
    # in training) make a decoder look for packed sequences with torch.diff, which TorchScript cannot export and
    # whose data-dependent check torch.export refuses (Whisper called with labels and use_cache=False)
    "aten::diff": ("give the decoder an attention mask, so that Hugging Face skips its packed-sequence check "
                   "(decoder_attention_mask=torch.ones_like(labels) for an encoder-decoder, attention_mask for a "
                   "decoder), or leave use_cache at its default"),
}


def export_failure(label: str, input_names: Sequence[str], errors: Sequence[str]) -> str:
    """One line for an export that failed: the operator the exporters name, why, and the call that works instead."""
    import re

    ops = [m.group(0) for e in errors for m in re.finditer(r"\b(?:aten|onnx|prim)::[A-Za-z_0-9.]+", e)]
    op = f"operator {ops[0]}" if ops else "an operator"
    losses = [n for n in input_names if n in LOSS_INPUTS]
    if ops and ops[0] in OPERATOR_WORKAROUNDS:
        fix = OPERATOR_WORKAROUNDS[ops[0]]
    elif losses:
        fix = (f"export the forward without {', '.join(losses)} (the loss is a small share of a step): "
               f"export_model(model, {{k: v for k, v in inputs.items() if k not in {tuple(losses)!r}}}, path)")
    else:
        fix = ("export the submodule around it with gpupred.export_model, or replace that call in the model "
               "(a torch.onnx.register_custom_op_symbolic for TorchScript)")
    first = errors[0].split(". ")[0][:160] if errors else "unknown error"
    return f"{label}: ONNX export failed at {op} ({first}); workaround: {fix}"


def store_path(spec: "WorkloadSpec", store: Path | None = None) -> Path:
    """Where the graph store keeps the structure-only export of a spec's architecture (gzip-compressed ONNX)."""
    return Path(store or config.GRAPHS) / f"{spec.arch_key}.onnx.gz"


def _index_path(store: Path | None = None) -> Path:
    return Path(store or config.GRAPHS) / INDEX_NAME


_INDEX: FileCache[dict[str, Any]] = FileCache()  # the index as read, per unchanged version of its file


def read_index(store: Path | None = None) -> dict[str, Any]:
    """The graph store's index: export recipe version, the torch that exported it, each graph's sha256. An index read
    before and unchanged since (same path, modification time and size) is not read again: every job given as a
    workload id asks for it. Callers that change what they get change a copy."""
    try:
        return _INDEX.read(_index_path(store), parse_index)
    except FileNotFoundError:
        return {"export_version": EXPORT_VERSION, "graphs": {}}


def parse_index(path: Path) -> dict[str, Any]:
    """The graph store's index file as JSON; a one-line GpupredError naming it where it is not JSON."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise GpupredError(f"{path}: not valid JSON ({err}); rebuild the store with `gpupred export --store`") from None


def stored_graph(spec: "WorkloadSpec", store: Path | None = None) -> Path | None:
    """The store's graph of a spec's architecture when it holds one made by this export recipe, else None; found
    once per architecture within a look at the files (:func:`gpupred.files.within_look`: a queue's jobs)."""
    where = store or config.GRAPHS
    return within_look(("stored_graph", str(where), spec.arch_key), lambda: _stored_graph(spec, store))


def _stored_graph(spec: "WorkloadSpec", store: Path | None) -> Path | None:
    """:func:`stored_graph`, looked up."""
    path = store_path(spec, store)
    if not is_file(path):
        return None
    index = read_index(store)
    if index.get("export_version") != EXPORT_VERSION or spec.arch_key not in index.get("graphs", {}):
        return None
    return path


def export_onnx(spec: "WorkloadSpec") -> Path:
    """Structure-only ONNX graph of a spec's architecture: the store's (no torch needed), else exported once and cached."""
    stored = stored_graph(spec)
    if stored is not None:
        return stored
    path = cache_path(spec)
    if is_file(path):
        return path
    return _export_spec(spec, path)


def _export_spec(spec: "WorkloadSpec", path: Path) -> Path:
    try:
        import torch
    except ImportError:
        raise GpupredError(
            f"{spec.arch_key}: no graph in the store ({_shown(config.GRAPHS)}) and torch is not installed to export one; "
            "install the torch extra (`pip install -e \".[torch]\"`, or `make test` sets it up)"
        ) from None
    from gpupred.workloads.builders import build

    with torch.random.fork_rng():
        built = build(spec, device="cpu", for_export=True)  # a real-world architecture: on the meta device, weightless
    return export_module(built.export_model, built.export_inputs, path, built.input_names, built.batch_axes)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(config.ROOT))
    except ValueError:
        return str(path)


def build_store(specs: Sequence["WorkloadSpec"], store: Path | None = None, force: bool = False,
                progress: bool = True) -> list[Path]:
    """Export every architecture of ``specs`` into the graph store (skipping current ones unless ``force``); update its index."""
    from gpupred.reports import progress_bar

    store = Path(store or config.GRAPHS)
    index = copy.deepcopy(read_index(store))  # changed below: not the copy read_index keeps
    if index.get("export_version") != EXPORT_VERSION:
        index = {"export_version": EXPORT_VERSION, "graphs": {}}
    first: dict[str, "WorkloadSpec"] = {}
    for spec in specs:
        first.setdefault(spec.arch_key, spec)
    written = []
    todo = [s for key, s in first.items() if force or stored_graph(s, store) is None]
    for spec in progress_bar(iterable=todo, desc="graph store", unit="arch", disable=not progress):
        path = store_path(spec, store)
        plain = _export_spec(spec, path.with_suffix(""))
        atomic_write_bytes(path, gzip.compress(plain.read_bytes(), compresslevel=9, mtime=0))  # same bytes every time
        plain.unlink()
        index["graphs"][spec.arch_key] = sha256(path)
        written.append(path)
    import torch

    index["torch"] = torch.__version__.split("+")[0]
    index["graphs"] = dict(sorted(index["graphs"].items()))
    _index_path(store).write_text(json.dumps(index, indent=1) + "\n")
    return written


def copy_graph(source: Path, target: Path) -> Path:
    """Copy a graph to ``target`` as a plain .onnx file (decompressing one from the store)."""
    data = source.read_bytes()
    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data)
    return target


# ---------------------------------------------------------------- a user's own model


def export_model(
    model: Any,
    example_input: Any,
    path: str | os.PathLike[str],
    keep_weights: bool = False,
    batch_axis: int = 0,
    precompute: bool = True,
    symbolic: bool = True,
) -> Path:
    """Export a torch module to the ONNX file the predictor expects: symbolic batch, structure only (unless asked).

    ``example_input`` is one tensor, a tuple of tensors (positional inputs) or a dict of keyword inputs
    (``{"input_ids": ids, "attention_mask": mask}``; non-tensor values are passed through as constants).
    Every tensor input's ``batch_axis`` becomes the symbolic ``batch`` axis. Outputs may be tensors,
    tuples, dicts or ModelOutput-like objects. The model is exported in training mode, as the catalog is
    (BatchNorm keeps its batch statistics, Dropout stays), with the catalog's recipe
    (:func:`export_module`); weights are left out unless ``keep_weights``. ``precompute`` and ``symbolic``
    are :func:`export_module`'s. A module built without weights (:func:`gpupred.weightless`) is traced with fake
    tensors (:mod:`gpupred.graph.weightless`).
    """
    from gpupred.graph.adapter import positional

    adapter, tensors, names = positional(model, example_input, batch_axis)
    return export_module(adapter, tensors, path, names, [batch_axis] * len(tensors),
                         keep_weights=keep_weights, precompute=precompute, symbolic=symbolic)
