"""Featurize any ONNX graph for a batch size: one flat row of numbers (FLOPs, bytes, op mix, depth...).

Reads graph structure and shapes only (``onnx.load(..., load_external_data=False)``): weights and
external data are never read, which is what makes it fast. Needs onnx and numpy, never torch.
Shapes come from ONNX shape inference at the requested batch size or, when the file carries a batch
shape map (:func:`gpupred.graph.shapemap.store_batch_shapes`, fitted and checked at export, tied to the
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

import math
import os
from collections import Counter
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from onnx import ModelProto, TensorProto

from gpupred.errors import GpupredError
from gpupred.graph.canonical import CanonicalGraph, Shape, shape_elements
from gpupred.graph.loader import FLOAT_TYPES, cached_graph, clear_graph_cache
from gpupred.graph.coverage import Incomplete, coverage_columns, warn_incomplete
from gpupred.graph.costs import (
    MAC_CATEGORIES,
    NON_TRAINABLE_INPUTS,
    MissingShape,
    NodeInfo,
    TensorInfo,
    output_bytes,
    view_rule,
)

OPTIMIZER_FLOPS_PER_PARAM: dict[str, int] = {"sgd": 4, "adam": 12}
PRECISION_ACT_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
COUNT_CATEGORIES: tuple[str, ...] = ("conv", "matmul", "recurrent", "norm", "act", "pool", "elementwise")
FP32_UNDER_AUTOCAST: frozenset[str] = frozenset({
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
    "BatchNormalization", "Exp", "Log", "Pow", "ReduceSum", "ReduceMean", "ReduceLogSumExp", "ReduceL2",
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


def clear_cache() -> None:
    """Forget every inferred graph kept in this process (the next featurize of a file is a cold one)."""
    clear_graph_cache()


def featurize(
    path_or_proto: str | os.PathLike[str] | ModelProto,
    batch_size: int | None = None,
    precision: str = "fp32",
    optimizer: str = "sgd",
    per_op: dict[str, dict[str, int]] | None = None,
    canonical: bool = True,
    warn: bool = True,
) -> dict[str, Any]:
    """One flat feature row for an ONNX graph at a batch size, precision and optimizer.

    The graph is first reduced to the canonical form of :mod:`gpupred.graph.canonical` (so the row does
    not depend on how the model was exported); ``canonical=False`` featurizes it as exported (for
    checking the per-op cost rules against other counters). ``per_op``, if given, is filled with each op
    type's count, MACs, FLOPs and output elements. The row also says how much of the graph it could not see
    (:data:`gpupred.graph.coverage.COVERAGE_KEYS`), and with ``warn`` a one-line
    :class:`~gpupred.graph.coverage.IncompleteGraphWarning` says so when anything is missing.
    The inferred graph of a file is kept in-process per (path, mtime, size, batch size)
    (:func:`gpupred.graph.loader.cached_graph`, shared with the step model and the footprint), so featurizing the same
    file again at another precision or optimizer skips loading and inference.
    """
    if precision not in PRECISION_ACT_BYTES:
        raise GpupredError(f"unknown precision {precision!r}; known: {', '.join(PRECISION_ACT_BYTES)}")
    if optimizer not in OPTIMIZER_FLOPS_PER_PARAM:
        raise GpupredError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZER_FLOPS_PER_PARAM)}")
    if batch_size is not None and int(batch_size) < 1:
        raise GpupredError(f"batch size must be positive, got {batch_size}")
    graph, bs = cached_graph(path_or_proto, batch_size)
    row = _graph_features(graph.form(canonical), bs, precision, optimizer, per_op)
    if warn:
        warn_incomplete(row, "<ModelProto>" if isinstance(path_or_proto, ModelProto) else os.fspath(path_or_proto))
    return row


def _graph_features(
    graph: CanonicalGraph, bs: int, precision: str, optimizer: str, per_op: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """The feature row of a canonical graph: its structure and per-op costs at a precision, summed up."""
    bf16 = precision in ("bf16", "fp16")  # autocast to a 16-bit float: the same ops run at 2 bytes
    if per_op is not None:
        depth, n_residual = _structure(graph)
        return _feature_row(graph, bs, precision, optimizer, _costs(graph, bf16, per_op), depth, n_residual)
    # kept with the graph: a job's precisions and optimizers share the structure and costs, and setups that differ
    # in other options (a queue's) the row; each caller gets its own copy of the row (its values are scalars)
    depth, n_residual = graph.memo("structure", lambda: _structure(graph))
    totals = graph.memo(("costs", bf16), lambda: _costs(graph, bf16, None))
    return dict(graph.memo(("feature_row", bs, precision, optimizer),
                           lambda: _feature_row(graph, bs, precision, optimizer, totals, depth, n_residual)))


def _structure(graph: CanonicalGraph) -> tuple[int, int]:
    """The longest chain of compute ops (views and metadata do not count) and the residual joins of a graph."""
    shapes = graph.shapes
    float_types = FLOAT_TYPES
    dynamic: set[str] = set(graph.graph_inputs)  # tensors that carry data from a graph input
    producer: dict[str, int] = {}
    tensor_depth: dict[str, int] = {}
    depth_of = tensor_depth.get
    depth = n_residual = 0
    for idx, (op, _, ins, outs, _, _, entry) in enumerate(graph.nodes):
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
        if entry is not None and entry.rule is view_rule:  # views and metadata: no depth
            d = d_in
        else:
            if (op == "Add" or op == "Sum") and len(ins) >= 2:  # residual joins
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
    return depth, n_residual


@dataclass
class _CostTotals:
    """What the cost pass sums over a graph's nodes."""

    cat_count: Counter[str] = field(default_factory=Counter)
    cat_flops: Counter[str] = field(default_factory=Counter)
    unknown: Counter[str] = field(default_factory=Counter)
    trainable: dict[str, int] = field(default_factory=dict)  # parameter key -> elements
    macs: int = 0
    flops: int = 0
    flops_bwd: int = 0
    bytes_moved: int = 0
    activation_bytes: int = 0
    n_layers: int = 0
    n_work: int = 0
    n_nodes: int = 0
    incomplete: list[Incomplete] = field(default_factory=list)  # nodes unshaped or without a cost


NodeTensors = tuple[tuple["TensorInfo | None", ...], tuple["TensorInfo | None", ...]]
Cost = tuple[int, int, int, int]  # an OpCost's (MACs, FLOPs, bytes read, bytes written)


@dataclass(frozen=True)
class NodeCosts:
    """Each node of a canonical graph under a precision's item sizes, in graph order: the tensors a cost rule read of
    it, what the rule answered, and the bytes its outputs take. The feature row sums them; the step model's kernels
    are made of them (:mod:`gpupred.step.physics.kernels`). Plain tuples: a scheduler keeps thousands of these, which
    the garbage collector need not walk."""

    tensors: tuple[NodeTensors | None, ...]  # (inputs, outputs); None: a view or shape metadata (no cost)
    costs: tuple[Cost | None, ...]  # None: a view, an op without a rule, or one its rule could not cost
    failed: frozenset[int]  # the nodes whose rule raised (a shape it needed is unknown)
    written: tuple[float, ...]  # bytes of each node's outputs of known shape (0 for a view)
    sizes: dict[str, int]  # under 16-bit autocast, the item size of each float activation (empty otherwise)

    def info(self, graph: CanonicalGraph, i: int) -> NodeInfo:
        """Node ``i``'s :class:`NodeInfo` as its cost rule read it."""
        op, _d, _ins, _outs, name, attrs, _entry = graph.nodes[i]
        ins, outs = self.tensors[i] or ((), ())
        return NodeInfo(op, attrs, list(ins), list(outs), name)


def node_costs(graph: CanonicalGraph, half: bool) -> NodeCosts:
    """:class:`NodeCosts` of ``graph`` in fp32 (``half`` False: every tensor at the graph's item size) or under 16-bit
    autocast (:func:`autocast_sizes`), kept with the graph: a job's feature row and its step kernels read the same."""
    return graph.memo(("node_costs", half), lambda: _node_costs(graph, half))


def _node_costs(graph: CanonicalGraph, half: bool) -> NodeCosts:
    """:func:`node_costs`' pass over the nodes."""
    shapes, param_of = graph.shapes, graph.params
    act_size: dict[str, int] = {}  # effective itemsize of float activations under the precision
    tensors: list[NodeTensors | None] = []
    costs: list[Cost | None] = []
    written: list[float] = []
    failed: set[int] = set()
    for i, (op, _domain, ins, outs, node_name, attrs, entry) in enumerate(graph.nodes):
        if entry is not None and entry.rule is view_rule:  # views and metadata: no cost
            src_size = act_size.get(ins[0]) if ins else None
            if src_size is not None:
                for out in outs:
                    act_size[out] = src_size
            tensors.append(None)
            costs.append(None)
            written.append(0.0)
            continue
        in_params = [name in param_of for name in ins]
        mac_op = (entry.category if entry else "other") in MAC_CATEGORIES
        if half:
            autocast_sizes(op, ins, outs, {n for n, p in zip(ins, in_params) if p}, mac_op, shapes, act_size)
        info = _node_info(op, attrs, ins, outs, node_name, in_params, mac_op, shapes, act_size, half)
        cost = None
        if entry is not None:
            try:
                c = entry.rule(info)
            except (MissingShape, IndexError, ValueError, KeyError, ZeroDivisionError, TypeError):
                failed.add(i)
            else:
                cost = None if c is None else (c.macs, c.flops, c.bytes_read, c.bytes_written)
        tensors.append((tuple(info.inputs), tuple(info.outputs)))
        costs.append(cost)
        written.append(float(output_bytes(info.outputs)))
    return NodeCosts(tuple(tensors), tuple(costs), frozenset(failed), tuple(written), act_size)


def _costs(graph: CanonicalGraph, bf16: bool, per_op: dict[str, dict[str, int]] | None) -> _CostTotals:
    """Every node's cost under the precision (:func:`node_costs`), op counts, unknown ops and trainable parameters,
    summed."""
    shapes = graph.shapes
    param_of = graph.params
    graph_inputs = set(graph.graph_inputs)
    mac_categories = MAC_CATEGORIES
    nodes = node_costs(graph, bf16)
    t = _CostTotals()
    t.n_nodes = len(graph.nodes)
    for i, (op, domain, ins, outs, node_name, _attrs, entry) in enumerate(graph.nodes):
        category = entry.category if entry else "other"
        unshaped = _unshaped(outs, shapes)
        if entry is not None and entry.rule is view_rule:  # views and metadata: no cost
            if unshaped:
                t.incomplete.append((node_name, op, "view", True, 0))
            t.cat_count[category] += 1
            continue
        t.n_work += 1
        in_params = [name in param_of for name in ins]
        mac_op = category in mac_categories
        if entry is None or i in nodes.failed:  # no rule for the op, or it could not cost it
            t.unknown[f"{op}(no shape)" if entry is not None else
                      op if domain in ("", "ai.onnx") else f"{domain}.{op}"] += 1
            t.incomplete.append((node_name, op, category, unshaped, _weight_elements(ins, in_params, param_of, graph)))
        else:
            if unshaped:
                t.incomplete.append((node_name, op, "view", True, 0))  # costed, but an output is unknown
            cost = nodes.costs[i]
            if cost is not None:
                _add_cost(t, op, category, mac_op, bool(ins) and ins[0] in graph_inputs, cost, nodes.tensors[i], per_op)
        if True in in_params:
            has_weight = _add_params(op, ins, in_params, param_of, graph.param_sizes, t.trainable)
            if has_weight and (mac_op or category == "norm" or op == "Gather"):
                t.n_layers += 1
    return t


_NO_SHAPE: Shape = (None, 0, 4)


def _unshaped(outs: tuple[str, ...], shapes: dict[str, Shape]) -> bool:
    """Whether a node has an output of unknown shape."""
    for o in outs:
        if o:
            shp = shapes.get(o)
            if shp is None or shp[0] is None:
                return True
    return False


def _weight_elements(ins: tuple[str, ...], in_params: list[bool], param_of: dict[str, str], graph: CanonicalGraph) -> int:
    """Elements of the weights a node reads (the coverage estimate of an uncosted contraction)."""
    return sum(graph.param_sizes[param_of[n]][0] for n, p in zip(ins, in_params) if p)


def autocast_sizes(op: str, ins: Iterable[str], outs: Iterable[str], params: Container[str], mac_op: bool,
                   shapes: dict[str, Shape], act_size: dict[str, int]) -> None:
    """Under 16-bit autocast, the item size of each float output of a node (into ``act_size``).

    Contractions write 16 bits; ops autocast keeps in fp32 write 4 bytes; any other op takes the widest of its float
    activation inputs, as torch's type promotion does: an input in ``params`` (a weight), an integer index (as
    Gather reads) or a one-element scale promotes nothing.
    """
    in_sizes = [act_size.get(n) or shapes[n][2] for n in ins if n and n not in params and n in shapes
                and shapes[n][1] in FLOAT_TYPES and shape_elements(shapes[n]) > 1]
    for out in outs:
        shp = shapes.get(out)
        if shp is None or shp[1] not in FLOAT_TYPES or shp[2] != 4:
            continue
        act_size[out] = 2 if mac_op else (4 if op in FP32_UNDER_AUTOCAST or not in_sizes else max(in_sizes))


def _tensor_infos(names: tuple[str, ...], params: Iterable[bool], mac_op: bool, shapes: dict[str, Shape],
                  act_size: dict[str, int], bf16: bool) -> list[TensorInfo | None]:
    """Shapes and item sizes of ``names`` under the precision (None where a shape is unknown).

    Under bf16 an fp32 tensor is 2 bytes at a contraction; elsewhere a parameter keeps its own item size
    and an activation takes the size ``act_size`` gave its producer.
    """
    fp32 = TensorProto.FLOAT
    new_tuple = tuple.__new__  # TensorInfo(shape, size, is_param) without the named tuple's Python-level __new__
    infos: list[TensorInfo | None] = []
    for name, is_p in zip(names, params):
        shp = shapes.get(name) if name else None
        if shp is None or shp[0] is None:
            infos.append(None)
            continue
        size = shp[2]
        if bf16 and shp[1] == fp32:
            size = 2 if mac_op else (size if is_p else act_size.get(name, size))
        infos.append(new_tuple(TensorInfo, (shp[0], size, is_p)))
    return infos


def _node_info(op: str, attrs: dict[str, Any], ins: tuple[str, ...], outs: tuple[str, ...], node_name: str,
               in_params: list[bool], mac_op: bool, shapes: dict[str, Shape], act_size: dict[str, int],
               bf16: bool) -> NodeInfo:
    """What a cost rule reads about a node: its inputs' and outputs' shapes and item sizes under the precision."""
    return NodeInfo(op, attrs, _tensor_infos(ins, in_params, mac_op, shapes, act_size, bf16),
                    _tensor_infos(outs, repeat(False), mac_op, shapes, act_size, bf16), node_name)


def _add_cost(t: _CostTotals, op: str, category: str, mac_op: bool, data_from_input: bool, cost: Cost,
              tensors: NodeTensors | None, per_op: dict[str, dict[str, int]] | None) -> None:
    """Add one node's cost (MACs, FLOPs, bytes read, bytes written) to the totals (and to ``per_op``, with the elements
    of its first output of ``tensors``): backward is 2x a contraction's FLOPs, else 1x."""
    macs, flops, read, written = cost
    if per_op is not None:
        slot = per_op.setdefault(op, {"count": 0, "macs": 0, "flops": 0, "elements": 0})
        slot["count"] += 1
        slot["macs"] += macs
        slot["flops"] += flops
        out0 = tensors[1][0] if tensors is not None and tensors[1] else None
        slot["elements"] += out0.numel if out0 is not None else 0
    t.cat_count[category] += 1
    t.cat_flops[category] += flops
    t.macs += macs
    t.flops += flops
    t.bytes_moved += read + written
    if mac_op:
        t.flops_bwd += flops * (1 if data_from_input else 2)  # no input gradient for a graph input
    else:
        t.flops_bwd += flops
    t.activation_bytes += written


def _add_params(op: str, ins: tuple[str, ...], in_params: list[bool], param_of: dict[str, str],
                param_sizes: dict[str, tuple[int, int]], trainable: dict[str, int]) -> bool:
    """Record the trainable parameters a node consumes; whether one of them is a weight (more than one element)."""
    skip = NON_TRAINABLE_INPUTS.get(op, ())
    has_weight = False
    for pos, (name, is_p) in enumerate(zip(ins, in_params)):
        if not is_p or pos in skip:
            continue
        base = param_of[name]
        numel, itemsize = param_sizes[base]
        has_weight = has_weight or numel > 1
        trainable[base] = numel
    return has_weight


def _feature_row(graph: CanonicalGraph, bs: int, precision: str, optimizer: str, t: _CostTotals, depth: int,
                 n_residual: int) -> dict[str, Any]:
    """The flat feature row (:data:`FEATURE_KEYS` and ``unknown_op_types``) from the summed costs and structure."""
    shapes = graph.shapes
    param_sizes = graph.param_sizes
    trainable = dict(t.trainable)
    for key in graph.static_params:  # weights read only by weight preparation (concatenated, cast, sliced...)
        trainable[key] = param_sizes[key][0]
    params = sum(trainable.values())
    param_bytes = sum(trainable[b] * param_sizes[b][1] for b in trainable)
    input_bytes = 0
    for name in set(graph.graph_inputs):
        shp = shapes.get(name)
        if shp is not None and shp[0] is not None:
            input_bytes += math.prod(shp[0]) * shp[2]
    flops, bytes_moved, cat_count, cat_flops = t.flops, t.bytes_moved, t.cat_count, t.cat_flops
    flops_opt = params * OPTIMIZER_FLOPS_PER_PARAM[optimizer]
    row: dict[str, Any] = {
        "batch_size": bs,
        "is_bf16": int(precision == "bf16"),
        "is_adam": int(optimizer == "adam"),
        "flops_fwd": int(flops),
        "flops_bwd": int(t.flops_bwd),
        "flops_optimizer": int(flops_opt),
        "flops_train": int(flops + t.flops_bwd + flops_opt),
        "macs_fwd": int(t.macs),
        "params": int(params),
        "param_bytes": int(param_bytes),
        "activation_bytes": int(t.activation_bytes),
        "input_bytes": int(input_bytes),
        "bytes_moved": int(bytes_moved),
        "arithmetic_intensity": float(flops / bytes_moved) if bytes_moved else 0.0,
        "n_nodes": t.n_work,
        **{f"n_{c}": int(cat_count[c]) for c in COUNT_CATEGORIES},
        "n_layers": t.n_layers,
        "depth": depth,
        "n_residual": n_residual,
        "unknown_ops": int(sum(t.unknown.values())),
        **{f"frac_flops_{c}": (cat_flops[c] / flops if flops else 0.0) for c in COUNT_CATEGORIES},
    }
    row["unknown_op_types"] = ",".join(sorted(t.unknown))
    row.update(coverage_columns(t.n_nodes, t.n_work, t.incomplete, cat_count, cat_flops, bs))
    return row
