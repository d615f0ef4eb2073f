"""torch's view layouts along a graph (gpupred.graph.strides): the strides against torch's own views, and the
operands of batched products that torch copies before saving, on FIXTURE graphs built here."""

from __future__ import annotations

import itertools

import pytest
from onnx import TensorProto, helper

from gpupred.graph.strides import contiguous_strides, copied_operands, view_strides
from gpupred.memory.physics import graph_terms


def test_view_strides_agree_with_torch() -> None:
    """Every reshape of permuted and split views of a [2, 3, 4, 5] tensor into the shapes that merge or split its
    dimensions: a view (and its strides) exactly where torch's ``view`` makes one."""
    torch = pytest.importorskip("torch")
    base = torch.zeros(2, 3, 4, 5)
    views = [base, base[:, :2], base[..., 1:4]]
    views += [v.permute(*p) for v in views[:2] for p in itertools.permutations(range(4))]
    checked = copies = 0
    for v in views:
        dims = tuple(v.shape)
        for new in {(v.numel(),), (dims[0] * dims[1], dims[2], dims[3]), (dims[0], dims[1] * dims[2], dims[3]),
                    (dims[0], dims[1], dims[2] * dims[3]), (dims[0] * dims[1] * dims[2], dims[3]), (1, *dims),
                    (*dims[:2], 1, *dims[2:])}:
            ours = view_strides(dims, tuple(v.stride()), new)
            try:
                theirs = tuple(v.view(new).stride())
            except RuntimeError:
                theirs = None
                copies += 1
            assert ours == theirs, (dims, v.stride(), new)
            checked += 1
    assert checked > 300 and copies > 50  # both outcomes exercised
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)


def _packed_attention(packed: bool) -> object:
    """FIXTURE graph: x = a[2, 4, 16] @ W[16, 48] (a packed projection) -> Reshape [2, 4, 3, 2, 8] ->
    Transpose(2, 0, 3, 1, 4) -> Split into Q, K, V [2, 2, 4, 8] (timm's window attention); Q scaled, K transposed,
    Q K^T -> Softmax -> P V. Unpacked: Q, K and V each a [2, 4, 16] input reshaped and transposed on its own."""
    f = TensorProto.FLOAT
    inits = [helper.make_tensor("s", f, [], [0.35]),
             helper.make_tensor("shape5", TensorProto.INT64, [5], [2, 4, 3, 2, 8]),
             helper.make_tensor("shape4", TensorProto.INT64, [4], [2, 4, 2, 8]),
             helper.make_tensor("axis0", TensorProto.INT64, [1], [0]),
             helper.make_tensor("w", f, [16, 48], [0.01] * 768)]
    if packed:
        nodes = [helper.make_node("MatMul", ["a", "w"], ["x"]), helper.make_node("Reshape", ["x", "shape5"], ["x5"]),
                 helper.make_node("Transpose", ["x5"], ["xt"], perm=[2, 0, 3, 1, 4]),
                 helper.make_node("Split", ["xt"], ["q1", "k1", "v1"], axis=0, num_outputs=3)]
        nodes += [helper.make_node("Squeeze", [f"{n}1", "axis0"], [n]) for n in "qkv"]
        inputs = [helper.make_tensor_value_info("a", f, [2, 4, 16])]
    else:
        nodes = [n for name in "qkv" for n in (helper.make_node("Reshape", [f"{name}in", "shape4"], [f"{name}4"]),
                                               helper.make_node("Transpose", [f"{name}4"], [name], perm=[0, 2, 1, 3]))]
        inputs = [helper.make_tensor_value_info(f"{n}in", f, [2, 4, 16]) for n in "qkv"]
    nodes += [helper.make_node("Mul", ["q", "s"], ["qs"]),
              helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qs", "kt"], ["sc"]), helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["o"])]
    graph = helper.make_graph(nodes, "fixture-packed-attention", inputs,
                              [helper.make_tensor_value_info("o", f, [2, 2, 4, 8])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_products_keep_copies_of_packed_operands() -> None:
    """K and V, parts of a permuted packed projection, are copied by the products' fold (their batch dimensions
    cannot merge as a view), so the products keep 2 x 128 elements of them, not the 384 of the projection; the scaled
    Q is a tensor of its own (kept whole); unpacked operands, each a whole tensor, are kept as before."""
    from gpupred.graph.loader import load_graph

    graph, _ = load_graph(_packed_attention(True), 2)
    cg = graph.form(True)
    producer = {o: n for n in cg.nodes for o in n[3]}
    copied = {t for _k, t in copied_operands(cg, producer)}
    assert copied == {"kt", "v"}
    t = graph_terms(_packed_attention(True), batch_size=2)
    # kept: the scaled Q (2*2*4*8 = 128), the copies of K^T and V (128 each), P (2*2*4*4 = 64); not the projection x
    # (2*4*48 = 384), which no op keeps now (kept through K's and V's views it was 384 + 128 + 64)
    assert t["saved_elems"] == 128 + 128 + 128 + 64
    unpacked, _ = load_graph(_packed_attention(False), 2)
    cu = unpacked.form(True)
    assert copied_operands(cu, {o: n for n in cu.nodes for o in n[3]}) == frozenset()
