"""Re-batch a graph exported with a fixed batch size (most exported files have batch 1) to another batch size.

The inputs' leading dimension is set to the new batch and shapes are inferred again. That is all a graph
needs when its reshapes compute their target shapes (or use Flatten). Exporters often fold those targets
into constants, which bakes the export's batch in: ``Reshape(x, [128, 4, 64])`` in an attention layer
exported at batch 1 means ``[seq, batch x heads, head_dim]``. Such a reshape is repaired when the batch can
be placed: the output dimensions that overlap the input's batch axis in the flattened order are the
candidates (:func:`batch_candidates`), the most likely one becomes -1 in a copy of the target, and
shape inference checks the result. At batch 1 a reshape can be ambiguous (``[seq, 1, 256] -> [seq, 256]``
may mean seq x batch or batch x 256); when a node downstream then breaks (its shapes no longer fit, or
its size changes by other than the batch ratio), the next candidate is tried. A constant concatenated with
the batch (a ViT's class token, expanded to the export's batch by a constant Expand, or folded into an
initializer by the dynamo exporter) is expanded to the new batch (:func:`expand_constant_inputs`), and so are
a constant scattered into (``new_zeros(labels.shape)`` in Hugging Face's ``shift_tokens_right``) and gather
indices made for one sample. An exporter also traces one sample into tensors that only broadcast against the
batch (``rel_indices.expand(B, ...)``, ``pos_emb.expand(-1, B, -1)``): no shape breaks, so those Expands of
constants are found on the graph as exported and given the new batch (:func:`batch_expands`). A reshape that
cannot be repaired, a node whose shapes still do not fit, or a node that still takes the batch and gives a
tensor that does not grow with it (:func:`lost_nodes`) is named in a one-line
:class:`~gpupred.errors.GpupredError`: a refusal, never features of one sample. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from gpupred.errors import GpupredError
from gpupred.graph.fold import evaluate, static_shapes

Infer = Callable[[ModelProto], ModelProto]
MAX_ROUNDS = 256
_FIX_HINT = "re-export it with a symbolic batch (gpupred export, or gpupred.export_model)"


def batch_candidates(x_old: tuple[int, ...], x_new: tuple[int, ...], y_old: tuple[int, ...], old: int) -> list[int]:
    """The dimensions of a reshape's old output that may carry the batch, most likely first (empty: none can).

    In the flattened order the input's batch axis covers [lo, hi] (prefix products at the old batch); when
    that axis merges the batch with something else (batch x heads) the batch is its outer or its inner
    factor. A candidate output dimension overlaps where the batch can be. A dimension that held exactly
    the old batch comes first (an explicit batch dimension, outermost first); then later dimensions before
    earlier ones (at batch 1 ``[seq, 1, 256] -> [seq, 4, 64]`` splits heads out of batch x heads). On the
    leading axis the outer factor's candidates come first (Swin's batch x windows), the inner's after them
    (seq x batch in torch's seq-first attention).
    """
    diff = [i for i, (a, b) in enumerate(zip(x_old, x_new)) if a != b]
    if len(diff) != 1 or len(x_old) != len(x_new):
        return []
    axis = diff[0]
    lo = math.prod(x_old[:axis])
    hi = lo * x_old[axis]
    if x_old[axis] == old:
        return _overlapping(y_old, [(lo, hi)], old)
    if axis == 0:
        outer = _overlapping(y_old, [(lo, lo * old)], old)
        return outer + [j for j in _overlapping(y_old, [(hi // old, hi)], old) if j not in outer]
    return _overlapping(y_old, [(lo, lo * old), (hi // old, hi)], old)


def _overlapping(y_old: tuple[int, ...], spans: list[tuple[int, int]], old: int) -> list[int]:
    """The output dimensions overlapping the spans, explicit batch dimensions first, then later before earlier."""
    prefix = [1]
    for d in y_old:
        prefix.append(prefix[-1] * d)
    found = []
    for j, d in enumerate(y_old):
        start, end = prefix[j], prefix[j + 1]
        if d % old:
            continue
        for a, b in spans:
            if (start < b and a < end) if (a != b and start != end) else (start <= b and a <= end):
                found.append(j)
                break
    explicit = [j for j in found if y_old[j] == old]
    return explicit + [j for j in reversed(found) if j not in explicit]


def _constant_targets(model: ModelProto, before: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Values of the initializers, Constant nodes and computations (at the old batch) that feed a Reshape's shape input."""
    wanted = {n.input[1] for n in model.graph.node if n.op_type == "Reshape" and len(n.input) > 1}
    return constant_values(model, before, wanted)


def constant_values(model: ModelProto, before: dict[str, tuple[int, ...]], wanted: set[str]) -> dict[str, np.ndarray]:
    """Values of the ``wanted`` tensors that initializers, Constant nodes or computations from them and from the
    shapes at the old batch give."""
    g = model.graph
    values: dict[str, np.ndarray] = {}
    for t in g.initializer:
        if t.name in wanted and t.data_location != TensorProto.EXTERNAL:
            values[t.name] = numpy_helper.to_array(t)
    for n in g.node:
        if n.op_type == "Constant" and n.output[0] in wanted and n.attribute and n.attribute[0].name == "value":
            values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    # targets computed from constants and shapes, as they were at the old batch (timm's x.reshape(B, H // 2, 2, ...)
    # traced at batch 1: B a Constant, H read from a shape); only the reshapes that then break are repaired
    computed = evaluate(model, before)
    values.update({name: computed[name] for name in wanted if name in computed and name not in values})
    return values


def input_dependent(model: ModelProto) -> set[str]:
    """The tensors computed from the graph's inputs (the rest come from constants alone)."""
    inits = {t.name for t in model.graph.initializer}
    found = {i.name for i in model.graph.input if i.name not in inits}
    for node in model.graph.node:
        if any(i in found for i in node.input if i):
            found.update(o for o in node.output if o)
    return found


def _batch_axis(x: tuple[int, ...], y: tuple[int, ...], old: int) -> int | None:
    """The axis of an Expand's output (``x`` to ``y``) that may be the batch: the leading one, or the only one."""
    pad = (1,) * (len(y) - len(x)) + x
    axes = [j for j, (a, b) in enumerate(zip(pad, y)) if b == old and a in (1, old)]
    return 0 if 0 in axes else (axes[0] if len(axes) == 1 else None)


def batch_expands(model: ModelProto, before: dict[str, tuple[int, ...]], old: int, new: int) -> dict[str, np.ndarray]:
    """The Expands of a constant to a target computed at the old batch (``rel_indices.expand(B, ...)``,
    ``pos_emb.expand(-1, B, -1)`` traced at a fixed batch), by output: their target at the new batch.

    Without them one sample is computed and broadcast against the batch downstream: no shape breaks, the
    features silently count one sample's work. An Expand of a constant exists only to copy it (a no-op at a
    batch of 1), and the copies in a fixed-batch export are the batch: the leading axis at the old batch, or
    the only axis at the old batch (seq-first layouts). An Expand that feeds a Tile is left: it only adds
    the dimensions of TorchScript's ``repeat`` (the Tile copies). Read on the graph as exported (before any repair).
    """
    data = input_dependent(model)
    tiled = {i for n in model.graph.node if n.op_type == "Tile" for i in n.input[:1]}  # repeat's rank promotion
    nodes = [n for n in model.graph.node if n.op_type == "Expand" and len(n.input) == 2 and n.input[0] not in data
             and n.output[0] not in tiled]
    targets = constant_values(model, before, {n.input[1] for n in nodes})
    consts = {n.output[0]: tuple(n.attribute[0].t.dims) for n in model.graph.node
              if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    known = {**consts, **{k: v.shape for k, v in evaluate(model, before).items()}, **before}  # small ones fold away
    plan = {}
    for node in nodes:
        x, y = known.get(node.input[0]), known.get(node.output[0])
        if node.input[1] not in targets or x is None or y is None or len(y) < len(x):
            continue
        axis = _batch_axis(x, y, old)
        if axis is not None:
            plan[node.output[0]] = np.asarray([new if j == axis else d for j, d in enumerate(y)], dtype=np.int64)
    return plan


def apply_expands(model: ModelProto, plan: dict[str, np.ndarray], new: int) -> int:
    """Point the Expands of :func:`batch_expands` at their targets at the new batch; return how many."""
    count = 0
    for node in model.graph.node:
        if node.op_type == "Expand" and node.output[0] in plan:
            name = f"{node.input[1]}::batch{new}::{node.name or node.output[0]}"
            model.graph.initializer.append(numpy_helper.from_array(plan[node.output[0]], name))
            node.input[1] = name
            count += 1
    return count


def _set_inputs(model: ModelProto, old: int, new: int) -> None:
    inits = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == old:
            dims[0].dim_value = new


class _Choice:
    """A repaired reshape: its node, the candidate batch dimensions, and which one is in use."""

    def __init__(self, node: Any, target: str, y_old: tuple[int, ...], candidates: list[int], new: int) -> None:
        # the node is found again by its output each time: inserting nodes (a class token's Expand) copies the list
        self.out, self.label = node.output[0], node.name or node.output[0]
        self.target, self.y_old, self.candidates, self.used, self.new = target, y_old, candidates, 0, new

    def apply(self, model: ModelProto, targets: dict[str, np.ndarray]) -> None:
        """Point the reshape at a copy of its target with the chosen dimension set to -1."""
        value = np.asarray(self.y_old, dtype=np.int64)
        value[self.candidates[self.used]] = -1
        name = f"{self.target}::batch{self.new}::{self.label}::{self.used}"
        model.graph.initializer.append(numpy_helper.from_array(value, name))
        next(n for n in model.graph.node if n.output and n.output[0] == self.out).input[1] = name
        targets[name] = value

    def flip(self, model: ModelProto, targets: dict[str, np.ndarray]) -> bool:
        """Use the next candidate, if there is one."""
        if self.used + 1 >= len(self.candidates):
            return False
        self.used += 1
        self.apply(model, targets)
        return True


def _repair_round(model: ModelProto, label: str, before: dict[str, tuple[int, ...]], now: dict[str, tuple[int, ...]],
                  old: int, new: int, targets: dict[str, np.ndarray], chosen: dict[str, _Choice]) -> list[_Choice]:
    """Repair every reshape whose input now carries the new batch but whose output is not the expected one."""
    made: list[_Choice] = []
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in targets:
            continue
        x, y = node.input[0], node.output[0]
        x_new, x_old, y_old = now.get(x), before.get(x), before.get(y)
        if x_new is None or x_old is None or y_old is None or math.prod(x_new) == math.prod(x_old):
            continue
        candidates = batch_candidates(x_old, x_new, y_old, old)
        if math.prod(x_new) * old != math.prod(x_old) * new or not candidates:
            raise GpupredError(
                f"{label}: cannot change the batch size from {old} to {new}: node {node.name or 'Reshape'!r} bakes the "
                f"batch into its target shape {list(y_old)}; {_FIX_HINT}"
            )
        previous = chosen.get(node.output[0])
        pick = previous.candidates[previous.used] if previous is not None and previous.candidates == candidates else candidates[0]
        want = tuple(d * new // old if i == pick else d for i, d in enumerate(y_old))
        if now.get(y) == want:
            continue
        choice = chosen[node.output[0]] = _Choice(node, previous.target if previous else node.input[1], y_old, candidates, new)
        choice.used = candidates.index(pick)
        choice.apply(model, targets)
        made.append(choice)
    return made


def _first_broken(inferred: ModelProto, before: dict[str, tuple[int, ...]], now: dict[str, tuple[int, ...]],
                  old: int, new: int) -> Any:
    """The first node whose output lost its shape, or whose size changed by neither 1 nor new/old."""
    for node in inferred.graph.node:
        for o in node.output:
            if not o or o not in before:
                continue
            shape = now.get(o)
            if shape is None:
                return node
            a, b = math.prod(before[o]), math.prod(shape)
            if a != b and a * new != b * old:
                return node
    return None


def _flip_upstream(model: ModelProto, broken: Any, pending: list[_Choice], targets: dict[str, np.ndarray]) -> bool:
    """Try the next candidate of the latest repaired reshape that feeds the broken node."""
    producer = {o: n for n in model.graph.node for o in n.output}
    seen: set[str] = set()
    stack = list(broken.input)
    ancestors: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen or name not in producer:
            continue
        seen.add(name)
        node = producer[name]
        ancestors.add(name)
        stack.extend(node.input)
    for choice in reversed(pending):
        if choice.out in ancestors and choice.flip(model, targets):
            return True
    return False


# inputs that carry a sample axis of their own beside a batch-carrying input: scatter data, gather indices
_SAMPLE_INPUTS: dict[str, tuple[int, ...]] = {"ScatterND": (0,), "ScatterElements": (0,), "Gather": (1,),
                                              "GatherElements": (1,)}


def _grew(name: str, before: dict[str, tuple[int, ...]], now: dict[str, tuple[int, ...]], old: int, new: int) -> bool:
    """Whether a tensor's size changed by exactly the batch ratio."""
    return name in before and name in now and 0 < math.prod(before[name]) and math.prod(now[name]) * old == math.prod(
        before[name]) * new


def _stuck_inputs(node: Any, before: dict[str, tuple[int, ...]], now: dict[str, tuple[int, ...]],
                  old: int, new: int) -> list[int]:
    """The inputs of a node that kept the old batch while another input took the new one: those of a Concat (not on
    the batch axis), a scatter's data and a gather's indices when the node's output then did not grow."""
    ins = list(node.input)
    if node.op_type == "Concat":
        rank = len(before.get(ins[0], ())) if ins else 0
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if not rank or axis % rank == 0:
            return []
        moved = any(n in before and n in now and before[n][0] == old and now[n][0] == new for n in ins)
        candidates = list(range(len(ins))) if moved else []
    else:
        out = node.output[0] if node.output else ""
        lost = out in before and out in now and math.prod(before[out]) > 1 and now[out] == before[out]
        moved = lost and any(_grew(n, before, now, old, new) for n in ins if n)
        candidates = [i for i in _SAMPLE_INPUTS.get(node.op_type, ()) if i < len(ins)] if moved else []
    return [i for i in candidates if ins[i] in before and now.get(ins[i]) == before[ins[i]]
            and before[ins[i]][:1] == (old,)]


def expand_constant_inputs(model: ModelProto, node: Any, before: dict[str, tuple[int, ...]],
                           now: dict[str, tuple[int, ...]], old: int, new: int) -> bool:
    """Give a constant joined to the batch (a ViT's class token, expanded to the export's batch and concatenated
    with the patch embeddings) the new batch: an Expand (after a one-sample Slice when the old batch is not 1)."""
    stuck = _stuck_inputs(node, before, now, old, new)
    nodes = list(model.graph.node)
    at = next((j for j, n in enumerate(nodes) if list(n.output) == list(node.output)), None)
    if at is None:  # ``node`` comes from an inferred copy: the model's own node is the one with its outputs
        return False
    node = nodes[at]
    added: list[Any] = []
    for i in stuck:
        name = node.input[i]
        rank = len(before[name])
        src = name
        if old != 1:
            consts = {f"{name}::one_{k}": np.asarray([v], np.int64) for k, v in (("s", 0), ("e", 1), ("a", 0))}
            model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
            src = f"{name}::one_sample"
            added.append(helper.make_node("Slice", [name, *consts], [src]))
        shape = f"{name}::batch{new}_shape"
        model.graph.initializer.append(numpy_helper.from_array(np.asarray([new] + [1] * (rank - 1), np.int64), shape))
        node.input[i] = f"{name}::batch{new}"
        added.append(helper.make_node("Expand", [src, shape], [node.input[i]]))
    if added:
        nodes[at:at] = added
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return bool(added)


def _expand_lost(model: ModelProto, inferred: ModelProto, before: dict[str, tuple[int, ...]],
                 now: dict[str, tuple[int, ...]], old: int, new: int) -> bool:
    """Give the new batch to the one-sample constants of the first node that lost the batch for want of it
    (a scatter into a constant made at the export's batch, a gather by indices made for one sample)."""
    for node in inferred.graph.node:
        if node.op_type != "Concat" and _stuck_inputs(node, before, now, old, new):
            if expand_constant_inputs(model, node, before, now, old, new):
                return True
    return False


class Folded(NamedTuple):
    """A model's shapes: its copy with the shape arithmetic folded, the folded values, the inferred copy, the shapes."""

    model: ModelProto
    folds: dict[str, np.ndarray]
    inferred: ModelProto
    shapes: dict[str, tuple[int, ...]]


def fold_copy(model: ModelProto, infer: Infer) -> Folded:
    """Shapes by inference, shape arithmetic folded on a copy (folding at a half-repaired batch must not stick)."""
    from gpupred.graph.fold import fold_shapes

    work = ModelProto()
    work.CopyFrom(model)
    inferred, folds = fold_shapes(work, infer)
    return Folded(work, folds, inferred, static_shapes(inferred))


def rebatch(model: ModelProto, label: str, old: int, new: int, infer: Infer) -> set[str]:
    """Change a fixed batch size ``old`` to ``new`` in place (inputs and baked reshapes, shape arithmetic folded
    into constants); return the names of the folded constants (not weights).

    Two search orders: every reshape downstream is repaired before anything flips (a node may break only for
    want of a later repair, as in timm's ECA); unless that leaves no node losing the batch
    (:func:`lost_nodes`), also the order where a node that breaks first flips the reshapes repaired in the
    round before it (torch's seq-first attention); the result that loses the batch in fewer nodes is kept.
    Once the batch flows, constants expanded to the old batch take the new one (:func:`batch_expands`) and
    the search runs again. A result where some node still loses the batch is refused, naming that node.
    """
    before = fold_copy(model, infer).shapes
    del model.graph.value_info[:]  # shapes stored at the old batch would be kept by inference
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    _set_inputs(model, old, new)
    plan = batch_expands(model, before, old, new)
    results: list[tuple[list[Any], bool, Folded | None, GpupredError | None]] = []
    for repair_first in (True, False):  # both searches; the one that loses the batch in fewer nodes wins
        work = ModelProto()
        work.CopyFrom(model)
        try:
            state = _search(work, label, before, old, new, infer, repair_first)
            if apply_expands(work, plan, new):  # once the batch flows, so that no repair sees half of it
                state = _search(work, label, before, old, new, infer, repair_first)
        except GpupredError as err:
            results.append(([], repair_first, None, err))
            continue
        results.append((lost_nodes(state.inferred, before, state.shapes, old, new), repair_first, state, None))
        if not results[-1][0]:
            break
    lost, _, best, err = min(results, key=lambda r: (r[3] is not None, len(r[0]), not r[1]))
    if err is not None or best is None:
        raise err or GpupredError(f"{label}: cannot change the batch size from {old} to {new}")
    if lost:
        node = lost[0]
        raise GpupredError(
            f"{label}: cannot change the batch size from {old} to {new}: node {node.name or node.op_type!r} "
            f"({node.op_type}) takes the batch but its output does not grow with it (the graph computes one "
            f"batch of {old} there); {_FIX_HINT}"
        )
    model.CopyFrom(best.model)
    return set(best.folds)


def _search(model: ModelProto, label: str, before: dict[str, tuple[int, ...]], old: int, new: int, infer: Infer,
            repair_first: bool) -> Folded:
    """Repair reshapes and class tokens until every shape fits (or name the node that does not); the final shapes."""
    targets = _constant_targets(model, before)
    history: list[_Choice] = []  # the repairs that a broken node may flip (all of them, or the last round's)
    chosen: dict[str, _Choice] = {}
    for _ in range(MAX_ROUNDS):
        state = fold_copy(model, infer)
        inferred, now = state.inferred, state.shapes
        broken = None if repair_first else _first_broken(inferred, before, now, old, new)
        if broken is not None and (expand_constant_inputs(model, broken, before, now, old, new)
                                   or _flip_upstream(model, broken, history, targets)):
            continue
        made = _repair_round(model, label, before, now, old, new, targets, chosen)
        if made:
            history = history + made if repair_first else made
            continue
        broken = _first_broken(inferred, before, now, old, new) if repair_first else None
        if broken is not None and (expand_constant_inputs(model, broken, before, now, old, new)
                                   or _flip_upstream(model, broken, history, targets)):
            continue
        if not _expand_lost(model, inferred, before, now, old, new):
            break
    else:  # out of rounds after a change: the shapes of the model as it is
        state = fold_copy(model, infer)
    _check(state.inferred, label, before, state.shapes, old, new)
    return state


def lost_nodes(inferred: ModelProto, before: dict[str, tuple[int, ...]], now: dict[str, tuple[int, ...]],
               old: int, new: int) -> list[Any]:
    """The nodes of a re-batched model (inferred, with its shapes ``now``) that take an input that grew with the
    batch and give a tensor (not a scalar, not a shape) that did not grow, or grew by another ratio: a search that
    placed the batch wrongly leaves such nodes, and so does a graph that indexes one sample of its export batch."""
    found = []
    for node in inferred.graph.node:
        if node.op_type in ("Shape", "Size"):
            continue
        grew = any(_grew(n, before, now, old, new) for n in node.input if n)
        for o in node.output[:1]:
            if not grew or o not in before or o not in now or math.prod(before[o]) <= 1:
                continue
            if not _grew(o, before, now, old, new):
                found.append(node)
    return found


def _check(inferred: ModelProto, label: str, before: dict[str, tuple[int, ...]], now: dict[str, tuple[int, ...]],
           old: int, new: int) -> None:
    """Every tensor known at the old batch must be known at the new one, else name the first node that broke."""
    for node in inferred.graph.node:
        for o in node.output:
            if o and o in before and o not in now:
                raise GpupredError(
                    f"{label}: cannot change the batch size from {old} to {new}: the shapes of node "
                    f"{node.name or node.op_type!r} ({node.op_type}) no longer fit (a batch of {old} is baked into "
                    f"the graph around it); {_FIX_HINT}"
                )
