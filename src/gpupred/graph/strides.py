"""Strides of torch's views along an exported graph: which operands of a batched product torch copies before saving.

torch runs transposes, splits, slices and most reshapes as views of one storage, and autograd keeps a saved view's
whole storage alive. ``torch.matmul`` folds an operand of three or more dimensions into what ``bmm`` (both operands
batched) or ``mm`` (a matrix of weights) takes with ``reshape``, which returns a view where the strides allow and a
contiguous copy where they do not (ATen's ``computeStride``); the product then saves that copy, and nothing of the
storage it came from. A packed Q, K and V projection split after it was permuted into heads (timm's window attention,
``qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)``) is such a case: each of K and V is copied when the
product folds it, so the products keep two operands' worth, not the packed projection (swin_tiny at batch 32, fp32,
against torch's MemTracker count: +4.4% while the projection was kept, ``benchmarks/bench_memory_oracle.py``).

Only the layout matters here, never values: each tensor's strides are followed from the contiguous tensor its views
start at, through ``Transpose`` (a permutation), ``Split`` and ``Slice`` (a part: the same strides), ``Gather`` by a
scalar index (torch's ``select``: a dimension dropped), ``Expand`` (stride 0) and the reshaping aliases (a view where
:func:`view_strides` finds strides, else a copy).
"""

from __future__ import annotations

from math import prod
from typing import Any, Sequence

PART_OPS: frozenset[str] = frozenset({"Split", "Slice", "Gather"})  # a view of part of a larger tensor
RESHAPE_OPS: frozenset[str] = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})
LAYOUT_OPS: frozenset[str] = PART_OPS | RESHAPE_OPS | {"Transpose", "Expand"}


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (in elements) of a contiguous tensor."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(out))


def view_strides(shape: Sequence[int], strides: Sequence[int], new: Sequence[int]) -> tuple[int, ...] | None:
    """The strides of ``reshape(new)`` of a tensor with ``shape`` and ``strides`` as a view, or None where torch must
    copy (ATen's ``computeStride``: each run of dimensions merged or split must be contiguous within itself)."""
    if prod(shape) == 0:
        return contiguous_strides(new)
    out = [0] * len(new)
    view_d = len(new) - 1
    chunk = strides[-1] if strides else 1
    tensor_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                out[view_d] = view_numel * chunk
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk, tensor_numel, view_numel = strides[d - 1], 1, 1
    return tuple(out) if view_d == -1 else None


def operand_layout(t: str, producer: dict[str, Any], shapes: dict[str, Any]) -> tuple[tuple[int, ...], bool] | None:
    """(strides of ``t``, whether it is a part of a larger tensor) as torch lays it out, following its views back to
    the tensor they start at (contiguous); None where a shape is unknown, an op is not a view, or a step copies (the
    operand is then a tensor of its own)."""
    chain: list[tuple[Any, str]] = []
    node = producer.get(t)
    name = t
    while node is not None and node[0] in LAYOUT_OPS and node[2] and node[2][0] in producer:
        chain.append((node, name))
        name = node[2][0]
        node = producer.get(name)
    dims = _dims(name, shapes)
    if dims is None:
        return None
    strides, part = contiguous_strides(dims), False
    for node, out in reversed(chain):
        new = _dims(out, shapes)
        if new is None:
            return None
        stepped = _step(node, dims, strides, new)
        if stepped is None:
            return None
        strides, part = stepped[0], part or stepped[1]
        dims = new
    return strides, part


def _dims(t: str, shapes: dict[str, Any]) -> tuple[int, ...] | None:
    """A tensor's static dimensions, or None."""
    shape = shapes.get(t)
    if not shape or shape[0] is None or any(not isinstance(d, int) for d in shape[0]):
        return None
    return tuple(shape[0])


def _step(node: Any, dims: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...]
          ) -> tuple[tuple[int, ...], bool] | None:
    """One view op's (strides of its output, whether it takes a part), or None where it copies or is not followed."""
    op, attrs = node[0], node[5] or {}
    if op == "Transpose":
        perm = list(attrs.get("perm") or range(len(dims) - 1, -1, -1))
        return tuple(strides[p] for p in perm), False
    if op in ("Split", "Slice"):
        if len(new) != len(dims):
            return None
        return strides, new != dims
    if op == "Gather":  # by a scalar index: torch's select (a view, one dimension dropped); by a tensor: a copy
        axis = int(attrs.get("axis", 0)) % max(len(dims), 1)
        if len(new) != len(dims) - 1 or new != dims[:axis] + dims[axis + 1:]:
            return None
        return strides[:axis] + strides[axis + 1:], True
    if op == "Expand":
        if len(new) < len(dims):
            return None
        lead = (0,) * (len(new) - len(dims))
        return lead + tuple(0 if d == 1 and n != 1 else s for d, n, s in zip(dims, new[len(lead):], strides)), False
    out = view_strides(dims, strides, new)  # the reshaping aliases
    return None if out is None else (out, False)


def part_operands(cg: Any, producer: dict[str, Any]) -> tuple[tuple[int, int, str], ...]:
    """(node, position, operand) of each ``MatMul`` operand that is a view of part of a larger tensor (a ``PART_OPS``
    op among the views back to the tensor it starts at): the only ones :func:`copied_operands` judges. It reads the
    nodes alone, so one answer serves every batch size of a graph."""
    out = []
    for k, (op, _d, ins, *_rest) in enumerate(cg.nodes):
        if op != "MatMul" or len(ins) < 2:
            continue
        for pos, t in enumerate(ins[:2]):
            node = producer.get(t)
            while node is not None and node[0] in LAYOUT_OPS and node[0] not in PART_OPS and node[2]:
                node = producer.get(node[2][0])
            if t not in cg.params and node is not None and node[0] in PART_OPS:
                out.append((k, pos, t))
    return tuple(out)


def copied_operands(cg: Any, producer: dict[str, Any],
                    candidates: Sequence[tuple[int, int, str]] | None = None) -> frozenset[tuple[int, str]]:
    """(node, operand) of each ``MatMul`` whose operand of three or more dimensions is a part of a larger tensor that
    ``torch.matmul``'s fold cannot view, so that the product saves a copy of the operand alone (see the module notes):
    folded to ``[batch, rows, columns]`` against another batched operand, to ``[rows, columns]`` when it is the first
    operand and the second a matrix (a matrix first and a batched operand second is folded transposed: not followed).
    ``candidates``: :func:`part_operands` of the graph, when already known."""
    out = set()
    for k, pos, t in part_operands(cg, producer) if candidates is None else candidates:
        ins = cg.nodes[k][2]
        matrix = [i in cg.params or len(_dims(i, cg.shapes) or ()) == 2 for i in ins[:2]]
        dims = _dims(t, cg.shapes)
        if dims is None or len(dims) < 3 or (pos == 1 and matrix[0]):
            continue  # a matrix times a batched operand: torch folds the latter transposed, not followed here
        layout = operand_layout(t, producer, cg.shapes)
        if layout is None or not layout[1]:
            continue
        folded = (prod(dims[:-1]), dims[-1]) if matrix[1 - pos] else (prod(dims[:-2]), dims[-2], dims[-1])
        if view_strides(dims, layout[0], folded) is None:
            out.add((k, t))
    return frozenset(out)


__all__ = ["PART_OPS", "contiguous_strides", "copied_operands", "operand_layout", "part_operands",
           "view_strides"]
