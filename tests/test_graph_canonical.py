"""The canonical form (gpupred.graph.canonical): pairs of FIXTURE graphs that write the same model two ways
(as a training-mode export and as an eval-mode or other exporter would) featurize identically.

Every graph here is built by hand with onnx.helper; none is a real model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpupred.graph.features import FEATURE_KEYS, featurize

F = TensorProto.FLOAT


def graph(nodes: list[onnx.NodeProto], inputs: dict[str, list[Any]], inits: dict[str, Any], out: str,
          opset: int = 17) -> onnx.ModelProto:
    """A FIXTURE model: float inputs, initializers from numpy arrays (zeros of a shape, or given values)."""
    tensors = []
    for name, value in inits.items():
        arr = value if isinstance(value, np.ndarray) else np.zeros(value, np.float32)
        tensors.append(numpy_helper.from_array(arr, name))
    g = helper.make_graph(
        nodes, "fixture", [helper.make_tensor_value_info(k, F, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(out, F, None)], tensors,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def same(a: onnx.ModelProto, b: onnx.ModelProto, batch: int = 4) -> dict[str, Any]:
    """Assert two graphs featurize identically (every feature) and return the row."""
    fa, fb = featurize(a, batch_size=batch), featurize(b, batch_size=batch)
    diff = {k: (fa[k], fb[k]) for k in FEATURE_KEYS if fa[k] != fb[k]}
    assert not diff, diff
    return fa


def differs_as_exported(a: onnx.ModelProto, b: onnx.ModelProto, batch: int = 4) -> None:
    """The pair really is written differently: featurized as exported, the rows differ."""
    assert featurize(a, batch_size=batch, canonical=False) != featurize(b, batch_size=batch, canonical=False)


X = {"x": ["batch", 3, 8, 8]}
CONV = {"w": (4, 3, 3, 3)}


def test_batchnorm_after_conv_folds_like_an_eval_export() -> None:
    bn_inits = {**CONV, "s": (4,), "b": (4,), "m": (4,), "v": (4,)}
    training = graph([
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n", "rm", "rv"], training_mode=1),
        helper.make_node("Relu", ["n"], ["y"]),
    ], X, bn_inits, "y")
    folded = graph([
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ], X, {**CONV, "cb": (4,)}, "y")
    differs_as_exported(training, folded)
    a, b = featurize(training, batch_size=4), featurize(folded, batch_size=4)
    param_keys = {"params", "param_bytes", "flops_optimizer", "flops_train"}
    assert {k: a[k] for k in FEATURE_KEYS if k not in param_keys} == {k: b[k] for k in FEATURE_KEYS if k not in param_keys}
    assert a["n_norm"] == 0 and a["n_layers"] == 1
    # torch's count: the training export keeps BatchNorm's scale and shift (2 x 4); folding leaves one bias (4)
    assert a["params"] == 4 * 27 + 8 and b["params"] == 4 * 27 + 4


def test_batchnorm_elsewhere_stays_and_costs_training_flops_in_any_mode() -> None:
    """DenseNet's pre-activation BatchNorm follows a Concat/Relu, not a contraction: kept, 7 FLOPs per element."""
    def pre_activation(training: bool) -> onnx.ModelProto:
        bn = helper.make_node("BatchNormalization", ["r", "s", "b", "m", "v"], ["n", "rm", "rv"] if training else ["n"],
                              **({"training_mode": 1} if training else {}))
        return graph([helper.make_node("Relu", ["x"], ["r"]), bn, helper.make_node("Conv", ["n", "w"], ["y"])],
                     X, {**CONV, "s": (3,), "b": (3,), "m": (3,), "v": (3,)}, "y")

    differs_as_exported(pre_activation(True), pre_activation(False))
    row = same(pre_activation(True), pre_activation(False))
    assert row["n_norm"] == 1 and row["frac_flops_norm"] > 0
    per_op: dict[str, dict[str, int]] = {}
    featurize(pre_activation(False), batch_size=4, per_op=per_op)
    assert per_op["BatchNormalization"]["flops"] == 7 * 4 * 3 * 64


def test_dropout_and_stochastic_depth_are_dropped() -> None:
    inputs = {"x": ["batch", 16]}
    inits = {"w": (16, 16), "ratio": np.array(0.1, np.float32), "half": np.array(0.5, np.float32)}
    training = graph([
        helper.make_node("Gemm", ["x", "w"], ["h"]),
        helper.make_node("Dropout", ["h", "ratio"], ["d", "mask"]),
        # stochastic depth: a per-sample random mask scales the branch
        helper.make_node("RandomUniformLike", ["d"], ["u"]),
        helper.make_node("Less", ["u", "half"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["keepf"], to=F),
        helper.make_node("Div", ["keepf", "half"], ["scale"]),
        helper.make_node("Mul", ["d", "scale"], ["sd"]),
        helper.make_node("Add", ["sd", "x"], ["y"]),
    ], inputs, inits, "y")
    plain = graph([helper.make_node("Gemm", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "x"], ["y"])],
                  inputs, {"w": (16, 16)}, "y")
    differs_as_exported(training, plain)
    assert same(training, plain)["n_residual"] == 1


def test_matmul_plus_bias_is_a_gemm() -> None:
    inputs = {"x": ["batch", 16]}
    matmul = graph([helper.make_node("MatMul", ["x", "wt"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
                   inputs, {"wt": (16, 8), "b": (8,)}, "y")
    gemm = graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], inputs, {"w": (8, 16), "b": (8,)}, "y")
    differs_as_exported(matmul, gemm)
    row = same(matmul, gemm)
    assert row["flops_fwd"] == 4 * 8 * (2 * 16 + 1) and row["n_elementwise"] == 0


def test_weight_transposed_by_a_node_is_the_weight() -> None:
    """Training-mode exports transpose weights with nodes; eval exports store them transposed."""
    inputs = {"x": ["batch", 5, 16]}
    by_node = graph([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["y"])],
                    inputs, {"w": (8, 16)}, "y")
    stored = graph([helper.make_node("MatMul", ["x", "wt"], ["y"])], inputs, {"wt": (16, 8)}, "y")
    differs_as_exported(by_node, stored)
    row = same(by_node, stored)
    assert row["params"] == 128 and row["n_layers"] == 1


def test_shape_arithmetic_is_not_work() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape computes a constant: same as Flatten."""
    computed = graph([
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["f"]),
        helper.make_node("Gemm", ["f", "w"], ["y"]),
    ], X, {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "minus1": np.array([-1], np.int64), "w": (192, 10)}, "y")
    flatten = graph([helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Gemm", ["f", "w"], ["y"])], X, {"w": (192, 10)}, "y")
    differs_as_exported(computed, flatten)
    assert same(computed, flatten)["n_nodes"] == 1


def test_gelu_decompositions_are_one_gelu() -> None:
    inputs = {"x": ["batch", 32]}
    consts = {"sqrt2": np.array(1.4142135, np.float32), "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    head = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["a"])]
    variants = [
        [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])],  # torch legacy
        [helper.make_node("Mul", ["a", "half"], ["m"]), helper.make_node("Mul", ["x", "m"], ["y"])],
        [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "a"], ["y"])],
    ]
    op = graph([helper.make_node("Gelu", ["x"], ["y"])], inputs, {}, "y", opset=20)
    for tail in variants:
        decomposed = graph(head + tail, inputs, consts, "y")
        differs_as_exported(decomposed, op)
        row = same(decomposed, op)
        assert row["n_act"] == 1 and row["n_elementwise"] == 0 and row["depth"] == 1


def test_a_tanh_gelu_the_exporter_decomposed_is_one_gelu_and_one_written_as_python_ops_stays() -> None:
    """The dynamo exporter writes one aten.gelu(approximate="tanh") as Pow/Mul/Add/Mul/Tanh/Add/Mul/Mul, its last node
    keeping the op's name (``node_gelu``): one Gelu, as torch runs it (one kernel each way, its input saved). The same
    formula written as Python ops (GPT-2's gelu_new, NewGELUActivation) is named after each op and stays: torch runs
    the ops one by one, each saving its operands (torch's MemTracker counts both: tests/test_memory_oracle.py)."""
    inputs = {"x": ["batch", 32]}
    consts = {"three": np.array(3.0, np.float32), "c": np.array(0.044715, np.float32),
              "k": np.array(0.7978846, np.float32), "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}

    def tanh_gelu(last: str) -> onnx.ModelProto:
        return graph([
            helper.make_node("Pow", ["x", "three"], ["p"], name="node_Pow_1"),
            helper.make_node("Mul", ["c", "p"], ["cp"], name="node_Mul_2"),
            helper.make_node("Add", ["x", "cp"], ["s"], name="node_Add_3"),
            helper.make_node("Mul", ["k", "s"], ["u"], name="node_Mul_4"),
            helper.make_node("Tanh", ["u"], ["t"], name="node_Tanh_5"),
            helper.make_node("Add", ["t", "one"], ["a"], name="node_Add_6"),
            helper.make_node("Mul", ["half", "a"], ["h"], name="node_Mul_7"),
            helper.make_node("Mul", ["x", "h"], ["y"], name=last)], inputs, consts, "y")

    op = graph([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], inputs, {}, "y", opset=20)
    for name in ("node_gelu", "/model/h.0/mlp/act/node_gelu_3"):
        decomposed = tanh_gelu(name)
        differs_as_exported(decomposed, op)
        row = same(decomposed, op)
        assert row["n_act"] == 1 and row["n_elementwise"] == 0 and row["depth"] == 1
    python_ops = featurize(tanh_gelu("node_mul_110"), batch_size=4)  # gelu_new: the ops torch runs
    assert python_ops["n_act"] == 1 and python_ops["n_elementwise"] == 7  # the Tanh and its seven neighbours


def test_silu_decomposition_is_one_swish_and_a_sigmoid_gate_stays_two_ops() -> None:
    """x * sigmoid(x) (torch's SiLU as exporters write it, either operand order) is ONNX's Swish; a sigmoid gating
    another tensor (a squeeze-and-excitation block) stays a Sigmoid and a Mul."""
    inputs = {"x": ["batch", 32]}
    op = graph([helper.make_node("Swish", ["x"], ["y"])], inputs, {}, "y", opset=24)
    for order in (["x", "s"], ["s", "x"]):
        decomposed = graph([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", order, ["y"])],
                           inputs, {}, "y")
        differs_as_exported(decomposed, op)
        row = same(decomposed, op)
        assert row["n_act"] == 1 and row["n_elementwise"] == 0 and row["depth"] == 1
    gate = graph([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["z", "s"], ["y"])],
                 {**inputs, "z": ["batch", 32]}, {}, "y")
    row = featurize(gate, batch_size=4)
    assert row["n_act"] == 1 and row["n_elementwise"] == 1


def test_layernorm_decomposition_is_one_layernorm() -> None:
    inputs = {"x": ["batch", 5, 16]}
    decomposed = graph([
        helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["x", "mu"], ["dev"]),
        helper.make_node("Pow", ["dev", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["dev", "std"], ["n"]),
        helper.make_node("Mul", ["n", "g"], ["ng"]),
        helper.make_node("Add", ["ng", "b"], ["y"]),
    ], inputs, {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32), "g": (16,), "b": (16,)}, "y", opset=17)
    fused = graph([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)],
                  inputs, {"g": (16,), "b": (16,)}, "y")
    differs_as_exported(decomposed, fused)
    row = same(decomposed, fused)
    assert row["n_norm"] == 1 and row["params"] == 32 and row["n_layers"] == 1


def test_reduce_mean_over_feature_map_is_global_pooling() -> None:
    reduce = graph([helper.make_node("ReduceMean", ["x"], ["p"], axes=[2, 3], keepdims=1),
                    helper.make_node("Flatten", ["p"], ["y"])], X, {}, "y")
    pool = graph([helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Reshape", ["p", "t"], ["y"])],
                 X, {"t": np.array([0, -1], np.int64)}, "y")
    differs_as_exported(reduce, pool)
    assert same(reduce, pool)["n_pool"] == 1


def test_weights_deduplicated_behind_identity_still_count() -> None:
    """The legacy exporter replaces equal-valued weights by Identity nodes; each is still a parameter."""
    inputs = {"x": ["batch", 8]}
    dedup = graph([helper.make_node("Identity", ["w1"], ["w2"]), helper.make_node("MatMul", ["x", "w1"], ["h"]),
                   helper.make_node("Relu", ["h"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])],
                  inputs, {"w1": (8, 8)}, "y")
    distinct = graph([helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                      helper.make_node("MatMul", ["r", "w2"], ["y"])], inputs, {"w1": (8, 8), "w2": (8, 8)}, "y")
    differs_as_exported(dedup, distinct)
    assert same(dedup, distinct)["params"] == 128
    tied = graph([helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                  helper.make_node("MatMul", ["r", "w1"], ["y"])], inputs, {"w1": (8, 8)}, "y")
    assert featurize(tied, batch_size=4)["params"] == 64  # one weight used twice (tied) counts once


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_canonical_form_keeps_plain_graphs_unchanged(precision: str) -> None:
    """A graph already in canonical form featurizes the same either way."""
    plain = graph([helper.make_node("Conv", ["x", "w", "cb"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
                  X, {**CONV, "cb": (4,)}, "y")
    assert featurize(plain, batch_size=3, precision=precision) == featurize(plain, batch_size=3, precision=precision, canonical=False)


def test_merges_keep_the_index_a_rebuild_would_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chained LayerNorm and GELU decompositions (a FIXTURE transformer-like stack): after every merge the reducer's
    incrementally updated index equals a full rebuild, and the stack still featurizes as its fused twin."""
    from gpupred.graph import canonical

    def live(r: Any) -> tuple[dict[str, int], dict[str, list[int]]]:
        producer = {t: i for t, i in r.producer.items() if r.nodes[i] is not None and t in r.nodes[i][3]}
        readers = {t: [j for j in js if r.nodes[j] is not None] for t, js in r.readers.items()}
        return producer, {t: js for t, js in readers.items() if js}

    checked = []
    replace = canonical._Reducer._replace

    def checking(self: Any, *args: Any) -> None:
        replace(self, *args)
        after = live(self)
        self._index()
        assert after == live(self)
        checked.append(args[1])

    monkeypatch.setattr(canonical._Reducer, "_replace", checking)
    consts = {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32), "sqrt2": np.array(1.4142135, np.float32),
              "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    decomposed, fused, x = [], [], "x"
    for k in range(3):
        g, b = f"g{k}", f"b{k}"
        consts.update({g: (16,), b: (16,)})
        decomposed += [
            helper.make_node("ReduceMean", [x], [f"mu{k}"], axes=[-1]), helper.make_node("Sub", [x, f"mu{k}"], [f"dev{k}"]),
            helper.make_node("Pow", [f"dev{k}", "two"], [f"sq{k}"]), helper.make_node("ReduceMean", [f"sq{k}"], [f"var{k}"], axes=[-1]),
            helper.make_node("Add", [f"var{k}", "eps"], [f"ve{k}"]), helper.make_node("Sqrt", [f"ve{k}"], [f"std{k}"]),
            helper.make_node("Div", [f"dev{k}", f"std{k}"], [f"n{k}"]), helper.make_node("Mul", [f"n{k}", g], [f"ng{k}"]),
            helper.make_node("Add", [f"ng{k}", b], [f"ln{k}"]),
            helper.make_node("Div", [f"ln{k}", "sqrt2"], [f"d{k}"]), helper.make_node("Erf", [f"d{k}"], [f"e{k}"]),
            helper.make_node("Add", [f"e{k}", "one"], [f"a{k}"]), helper.make_node("Mul", [f"ln{k}", f"a{k}"], [f"m{k}"]),
            helper.make_node("Mul", [f"m{k}", "half"], [f"y{k}"]),
        ]
        fused += [helper.make_node("LayerNormalization", [x, g, b], [f"ln{k}"], axis=-1),
                  helper.make_node("Gelu", [f"ln{k}"], [f"y{k}"])]
        x = f"y{k}"
    inputs = {"x": ["batch", 5, 16]}
    row = same(graph(decomposed, inputs, consts, x), graph(fused, inputs, {n: v for n, v in consts.items() if n[0] in "gb"}, x,
                                                            opset=20))
    assert checked.count("LayerNormalization") == 3 and checked.count("Gelu") == 3
    assert row["n_norm"] == 3 and row["n_act"] == 3 and row["n_elementwise"] == 0


def test_no_op_transposes_and_slices_are_the_identity() -> None:
    """The dynamo exporter writes identity Transposes and Slices over a whole tensor (``x[:, 0:INT64_MAX]``) where
    TorchScript writes none: a FIXTURE pair featurizes identically. (A Transpose of a Transpose stays two: TorchScript
    writes ``nn.MultiheadAttention``'s key as transpose, reshape, transpose and the dynamo exporter as two transposes,
    so merging them would part the two; the weightless recipe fuses consecutive transposes as TorchScript does.)"""
    inputs = {"x": ["batch", 4, 6, 8]}
    big = np.array([2**63 - 1], np.int64)
    dynamo = graph([
        helper.make_node("Transpose", ["x"], ["t0"], perm=[0, 1, 2, 3]),
        helper.make_node("Transpose", ["t0"], ["t1"], perm=[0, 2, 1, 3]),
        helper.make_node("Slice", ["t1", "zero", "big", "one_axis", "step1"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ], inputs, {"zero": np.array([0], np.int64), "big": big, "one_axis": np.array([1], np.int64),
                "step1": np.array([1], np.int64)}, "y")
    torchscript = graph([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
                         helper.make_node("Relu", ["t"], ["y"])], inputs, {}, "y")
    differs_as_exported(dynamo, torchscript)
    row = same(dynamo, torchscript)
    assert row["n_nodes"] == 2


def test_a_flip_is_not_a_whole_slice() -> None:
    """A Slice with step -1 over a whole axis keeps the shape but reverses it: it stays a copy (FIXTURE graphs)."""
    inputs = {"x": ["batch", 6]}
    consts = {"start": np.array([-1], np.int64), "end": np.array([-(2**63)], np.int64), "axis": np.array([1], np.int64),
              "step": np.array([-1], np.int64)}
    flip = graph([helper.make_node("Slice", ["x", "start", "end", "axis", "step"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                 inputs, consts, "y")
    plain = graph([helper.make_node("Relu", ["x"], ["y"])], inputs, {}, "y")
    assert featurize(flip, batch_size=4)["n_nodes"] == featurize(plain, batch_size=4)["n_nodes"] + 1


def test_slices_that_tile_a_tensor_are_one_split() -> None:
    """``q, k, v = qkv.unbind(0)``: TorchScript writes one Split, the dynamo exporter one Slice per piece (FIXTURE
    pair); pieces that leave a gap, or overlap, stay Slices."""
    inputs = {"x": [3, "batch", 8]}
    ints = {f"i{k}": np.array([k], np.int64) for k in range(4)}

    def pieces(bounds: list[tuple[int, int]]) -> onnx.ModelProto:
        nodes = [helper.make_node("Slice", ["x", f"i{a}", f"i{b}", "i0"], [f"p{k}"]) for k, (a, b) in enumerate(bounds)]
        nodes += [helper.make_node("Relu", [f"p{k}"], [f"r{k}"]) for k in range(len(bounds))]
        nodes.append(helper.make_node("Sum", [f"r{k}" for k in range(len(bounds))], ["y"]))
        return graph(nodes, inputs, ints, "y")

    split = graph([helper.make_node("Split", ["x"], ["p0", "p1", "p2"], axis=0, num_outputs=3),
                   *[helper.make_node("Relu", [f"p{k}"], [f"r{k}"]) for k in range(3)],
                   helper.make_node("Sum", ["r0", "r1", "r2"], ["y"])], inputs, {}, "y", opset=18)
    sliced = pieces([(0, 1), (1, 2), (2, 3)])
    differs_as_exported(sliced, split)
    assert same(sliced, split)["n_nodes"] == 5
    gap, overlap = pieces([(0, 1), (2, 3)]), pieces([(0, 2), (1, 3)])
    assert featurize(gap, batch_size=4)["n_nodes"] == 5 and featurize(overlap, batch_size=4)["n_nodes"] == 5
    assert featurize(gap, batch_size=4)["bytes_moved"] > 0


def test_castlike_of_a_constant_is_a_constant() -> None:
    """``q * self.scale``: the dynamo exporter casts the scale like the activation (CastLike), TorchScript multiplies
    by the constant (FIXTURE pair); a CastLike of an activation to its own type is the identity."""
    inputs = {"x": ["batch", 8]}
    scale = {"s": np.array(0.125, np.float32)}
    dynamo = graph([helper.make_node("CastLike", ["s", "x"], ["sx"]), helper.make_node("Mul", ["x", "sx"], ["m"]),
                    helper.make_node("CastLike", ["m", "x"], ["y"])], inputs, scale, "y", opset=18)
    torchscript = graph([helper.make_node("Mul", ["x", "s"], ["y"])], inputs, scale, "y")
    differs_as_exported(dynamo, torchscript)
    assert same(dynamo, torchscript)["n_nodes"] == 1
