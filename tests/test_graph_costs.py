"""Cost rules against hand-computed values, on tiny one-node ONNX graphs built here (fixtures, not data)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from gpupred.graph.features import featurize
from gpupred.graph.costs import COST_TABLE, NodeInfo, TensorInfo, attention_rule

F = TensorProto.FLOAT


def one_node(
    op: str,
    inputs: list[tuple[str, list[int], bool]],
    n_out: int = 1,
    domain: str = "",
    int_inputs: dict[str, np.ndarray] | None = None,
    **attrs: Any,
) -> onnx.ModelProto:
    """A graph of one node: inputs are (name, shape, is_initializer); int_inputs are constant initializers."""
    graph_inputs, inits = [], []
    for name, shape, is_init in inputs:
        if is_init:
            inits.append(numpy_helper.from_array(np.zeros(shape, np.float32), name))
        elif name:
            graph_inputs.append(helper.make_tensor_value_info(name, F, shape))
    for name, value in (int_inputs or {}).items():
        inits.append(numpy_helper.from_array(value, name))
    names = [n for n, _, _ in inputs] + list(int_inputs or {})
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    graph = helper.make_graph([node], "fixture", graph_inputs, [helper.make_tensor_value_info(o, F, None) for o in outs], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


def feats(model: onnx.ModelProto, **kw: Any) -> dict[str, Any]:
    return featurize(model, **kw)


def test_conv_stride_padding_bias() -> None:
    m = one_node("Conv", [("x", [1, 3, 8, 8], False), ("w", [4, 3, 3, 3], True), ("b", [4], True)],
                 strides=[2, 2], pads=[1, 1, 1, 1])
    f = feats(m)
    assert f["macs_fwd"] == 1 * 4 * 4 * 4 * 27  # out 4x4
    assert f["flops_fwd"] == 2 * 1728 + 4 * 16
    assert f["params"] == 4 * 27 + 4 and f["n_conv"] == 1 and f["n_layers"] == 1
    assert f["bytes_moved"] == 4 * (3 * 64 + 108 + 4) + 4 * 64


def test_conv_groups_dilation() -> None:
    m = one_node("Conv", [("x", [2, 4, 9, 9], False), ("w", [6, 2, 3, 3], True)], group=2, dilations=[2, 2])
    f = feats(m)
    assert f["macs_fwd"] == 2 * 6 * 5 * 5 * (2 * 9)  # out 9 - 2*(3-1) = 5
    assert f["flops_fwd"] == 2 * f["macs_fwd"]


def test_conv_transpose() -> None:
    m = one_node("ConvTranspose", [("x", [1, 4, 5, 5], False), ("w", [4, 2, 3, 3], True)], strides=[2, 2])
    f = feats(m)
    assert f["macs_fwd"] == 4 * 25 * 2 * 9  # each input element scatters into (M/g) x k x k outputs
    assert f["n_conv"] == 1


def test_gemm_transb_bias() -> None:
    m = one_node("Gemm", [("a", [2, 3], False), ("b", [4, 3], True), ("c", [4], True)], transB=1)
    f = feats(m)
    assert f["macs_fwd"] == 2 * 4 * 3
    assert f["flops_fwd"] == 48 + 8
    assert f["params"] == 16 and f["n_matmul"] == 1


def test_matmul_batched_broadcast() -> None:
    m = one_node("MatMul", [("a", [2, 1, 3, 4], False), ("b", [5, 4, 6], True)])
    f = feats(m)
    assert f["macs_fwd"] == 2 * 5 * 3 * 6 * 4
    assert f["flops_fwd"] == 2 * 720


def test_matmul_vector() -> None:
    m = one_node("MatMul", [("a", [3, 4], False), ("b", [4], True)])
    assert feats(m)["macs_fwd"] == 12


@pytest.mark.parametrize("op,gates,extra", [("LSTM", 4, 5), ("GRU", 3, 4), ("RNN", 1, 0)])
def test_recurrent_bidirectional(op: str, gates: int, extra: int) -> None:
    seq, batch, inp, hid, dirs = 7, 2, 3, 5, 2
    m = one_node(op, [("x", [seq, batch, inp], False), ("w", [dirs, gates * hid, inp], True),
                      ("r", [dirs, gates * hid, hid], True), ("b", [dirs, 2 * gates * hid], True)],
                 hidden_size=hid, direction="bidirectional")
    f = feats(m)
    steps = seq * batch * dirs
    macs = steps * gates * hid * (inp + hid)
    assert f["macs_fwd"] == macs
    assert f["flops_fwd"] == 2 * macs + steps * 2 * gates * hid + steps * (gates * hid + extra * hid)
    assert f["n_recurrent"] == 1 and f["params"] == dirs * gates * hid * (inp + hid + 2)


def test_recurrent_layout_batch_first() -> None:
    m = one_node("LSTM", [("x", [2, 7, 3], False), ("w", [1, 20, 3], True), ("r", [1, 20, 5], True)],
                 hidden_size=5, layout=1)
    assert feats(m)["macs_fwd"] == 7 * 2 * 20 * 8


def test_batchnorm_training_and_inference() -> None:
    ins = [("x", [2, 3, 4, 4], False), ("s", [3], True), ("b", [3], True), ("mean", [3], True), ("var", [3], True)]
    train = feats(one_node("BatchNormalization", ins, n_out=3, training_mode=1), canonical=False)
    infer = feats(one_node("BatchNormalization", ins), canonical=False)
    assert train["flops_fwd"] == 7 * 96 and infer["flops_fwd"] == 2 * 96
    # canonical form: a BatchNorm that is not folded is always charged its training cost
    assert feats(one_node("BatchNormalization", ins))["flops_fwd"] == 7 * 96
    assert train["params"] == 6  # running mean and variance are state, not parameters
    assert train["n_norm"] == 1 and train["n_layers"] == 1


def test_layernorm_softmax() -> None:
    ln = feats(one_node("LayerNormalization", [("x", [2, 5, 8], False), ("s", [8], True), ("b", [8], True)], axis=-1))
    assert ln["flops_fwd"] == 7 * 80 and ln["params"] == 16
    sm = feats(one_node("Softmax", [("x", [2, 5, 8], False)], axis=-1))
    assert sm["flops_fwd"] == 5 * 80 and sm["n_act"] == 1


def test_pools() -> None:
    mp = feats(one_node("MaxPool", [("x", [1, 1, 4, 4], False)], kernel_shape=[2, 2], strides=[2, 2]))
    ap = feats(one_node("AveragePool", [("x", [1, 1, 4, 4], False)], kernel_shape=[2, 2], strides=[2, 2]))
    gp = feats(one_node("GlobalAveragePool", [("x", [1, 2, 4, 4], False)]))
    assert mp["flops_fwd"] == 4 * 4 and ap["flops_fwd"] == 4 * 5 and gp["flops_fwd"] == 32 + 2
    assert mp["n_pool"] == ap["n_pool"] == gp["n_pool"] == 1


@pytest.mark.parametrize("op,per", [("Add", 1), ("Mul", 1), ("Sub", 1), ("Div", 1), ("Pow", 1)])
def test_binary_elementwise(op: str, per: int) -> None:
    f = feats(one_node(op, [("a", [2, 3], False), ("b", [2, 3], False)]))
    assert f["flops_fwd"] == per * 6 and f["n_elementwise"] == 1
    assert f["bytes_moved"] == 3 * 6 * 4


@pytest.mark.parametrize("op,per", [("Relu", 1), ("Sigmoid", 1), ("Tanh", 1), ("Erf", 1), ("Sqrt", 1), ("Gelu", 8)])
def test_unary_activations(op: str, per: int) -> None:
    m = one_node(op, [("a", [2, 3], False)])
    if op == "Gelu":
        m.opset_import[0].version = 20
    assert feats(m)["flops_fwd"] == per * 6


def test_reduce_mean() -> None:
    f = feats(one_node("ReduceMean", [("a", [2, 3], False)], int_inputs={"axes": np.array([1], np.int64)}))
    assert f["flops_fwd"] == 6 + 2


def test_data_movement() -> None:
    t = feats(one_node("Transpose", [("a", [2, 3], False)], perm=[1, 0]))
    assert t["flops_fwd"] == 0 and t["bytes_moved"] == 2 * 24
    r = feats(one_node("Reshape", [("a", [2, 3], False)], int_inputs={"shape": np.array([3, 2], np.int64)}))
    assert r["flops_fwd"] == 0 and r["bytes_moved"] == 0  # a view
    c = feats(one_node("Concat", [("a", [2, 3], False), ("b", [2, 3], False)], axis=0))
    assert c["flops_fwd"] == 0 and c["bytes_moved"] == 2 * 24 + 48
    assert t["unknown_ops"] == r["unknown_ops"] == c["unknown_ops"] == 0


def test_gather_embedding() -> None:
    table = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])
    node = helper.make_node("Gather", ["emb", "ids"], ["y"])
    graph = helper.make_graph([node], "fixture", [table], [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.zeros((10, 4), np.float32), "emb")])
    f = feats(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert f["params"] == 40 and f["flops_fwd"] == 0
    assert f["bytes_moved"] == (24 * 4 + 6 * 8) + 24 * 4  # gathered rows + indices read, output written


def test_einsum() -> None:
    m = one_node("Einsum", [("a", [2, 3, 4], False), ("b", [2, 4, 5], False)], equation="bij,bjk->bik")
    assert feats(m)["macs_fwd"] == 2 * 3 * 4 * 5


def test_attention_rule() -> None:
    b, h, s, d = 2, 4, 16, 8
    q = TensorInfo((b, h, s, d), 4)
    node = NodeInfo("Attention", {}, [q, q, q], [TensorInfo((b, h, s, d), 4)])
    cost = attention_rule(node)
    assert cost.macs == 2 * b * h * s * s * d and cost.flops == 2 * cost.macs + 5 * b * h * s * s


def test_unknown_op_is_counted_not_zeroed() -> None:
    m = one_node("Frobnicate", [("a", [2, 3], False)], domain="com.example")
    f = feats(m)
    assert f["unknown_ops"] == 1 and f["unknown_op_types"] == "com.example.Frobnicate"


def test_every_category_is_known() -> None:
    from gpupred.graph.costs import CATEGORIES

    assert {e.category for e in COST_TABLE.values()} <= set(CATEGORIES)


def test_bf16_halves_contraction_outputs_and_training_rule() -> None:
    m = one_node("Gemm", [("a", [2, 3], False), ("b", [3, 4], True)])
    fp32, bf16 = feats(m), feats(m, precision="bf16")
    assert fp32["activation_bytes"] == 8 * 4 and bf16["activation_bytes"] == 8 * 2
    assert fp32["param_bytes"] == bf16["param_bytes"] == 12 * 4
    # the data input is a graph input: backward computes only the weight gradient (1x forward)
    assert fp32["flops_bwd"] == fp32["flops_fwd"]
    assert fp32["flops_optimizer"] == 12 * 4
    assert feats(m, optimizer="adam")["flops_optimizer"] == 12 * 12


# ------------------------------------------------------------------ property tests


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 3), cg=st.integers(1, 4), groups=st.integers(1, 3), mg=st.integers(1, 4),
    h=st.integers(5, 16), w=st.integers(5, 16), k=st.integers(1, 3), s=st.integers(1, 3),
    p=st.integers(0, 2), d=st.integers(1, 2),
)
def test_conv_property(n: int, cg: int, groups: int, mg: int, h: int, w: int, k: int, s: int, p: int, d: int) -> None:
    c, m_out = cg * groups, mg * groups
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (k - 1) - 1) // s + 1
    if ho < 1 or wo < 1:
        return
    m = one_node("Conv", [("x", [n, c, h, w], False), ("w", [m_out, cg, k, k], True)], group=groups,
                 strides=[s, s], pads=[p, p, p, p], dilations=[d, d])
    assert feats(m)["macs_fwd"] == n * m_out * ho * wo * cg * k * k


@settings(max_examples=30, deadline=None)
@given(m_=st.integers(1, 64), k=st.integers(1, 64), n=st.integers(1, 64), ta=st.booleans(), tb=st.booleans())
def test_gemm_property(m_: int, k: int, n: int, ta: bool, tb: bool) -> None:
    a = [k, m_] if ta else [m_, k]
    b = [n, k] if tb else [k, n]
    f = feats(one_node("Gemm", [("a", a, False), ("b", b, True)], transA=int(ta), transB=int(tb)))
    assert f["macs_fwd"] == m_ * n * k and f["flops_fwd"] == 2 * m_ * n * k


@settings(max_examples=30, deadline=None)
@given(
    batch=st.lists(st.integers(1, 4), min_size=0, max_size=2), bcast=st.booleans(),
    m_=st.integers(1, 16), k=st.integers(1, 16), n=st.integers(1, 16),
)
def test_matmul_property(batch: list[int], bcast: bool, m_: int, k: int, n: int) -> None:
    b_batch = [1] * len(batch) if bcast else batch
    f = feats(one_node("MatMul", [("a", [*batch, m_, k], False), ("b", [*b_batch, k, n], True)]))
    assert f["macs_fwd"] == math.prod(batch) * m_ * n * k
