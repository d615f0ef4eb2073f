"""Re-batching fixed-batch graphs (gpupred.graph.rebatch) and reading big files without their weights
(gpupred.graph.protoscan), on FIXTURE graphs built here with onnx.helper.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpupred.errors import GpupredError
from gpupred.graph.features import featurize
from gpupred.graph.protoscan import STRIPPED_LOCATION, load_without_weights
from gpupred.graph.rebatch import batch_candidates

F = TensorProto.FLOAT
S, H, D = 6, 2, 8  # sequence, heads, model width of the attention fixture


def attention(batch: int | str, baked: bool) -> onnx.ModelProto:
    """FIXTURE: seq-first multi-head attention as torch's MultiheadAttention exports it.

    With ``baked`` the reshape targets are constants at batch 1 (``[S, H, D/H]`` for ``[S, B*H, D/H]`` and
    ``[S, D]`` for ``[S*B, D]``), as exporters fold them; otherwise they use 0/-1 and work at any batch.
    """
    x = helper.make_tensor_value_info("x", F, [batch, S, D])
    t1 = [S, H, D // H] if baked else [0, -1, D // H]
    t2 = [S, D] if baked else [-1, D]
    inits = [numpy_helper.from_array(np.asarray(t1, np.int64), "t1"), numpy_helper.from_array(np.asarray(t2, np.int64), "t2"),
             numpy_helper.from_array(np.zeros((D, D), np.float32), "w")]
    nodes = [
        helper.make_node("Transpose", ["x"], ["sx"], perm=[1, 0, 2]),  # [S, B, D]
        helper.make_node("Reshape", ["sx", "t1"], ["heads"], name="split_heads"),  # [S, B*H, d]
        helper.make_node("Transpose", ["heads"], ["q"], perm=[1, 0, 2]),  # [B*H, S, d]
        helper.make_node("Transpose", ["heads"], ["kt"], perm=[1, 2, 0]),  # [B*H, d, S]
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),  # [B*H, S, S]
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "q"], ["o"]),  # [B*H, S, d]
        helper.make_node("Transpose", ["o"], ["so"], perm=[1, 0, 2]),  # [S, B*H, d]
        helper.make_node("Reshape", ["so", "t2"], ["merged"], name="merge_heads"),  # [S*B, D]
        helper.make_node("MatMul", ["merged", "w"], ["y"]),
    ]
    g = helper.make_graph(nodes, "fixture", [x], [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_baked_attention_is_rebatched_like_the_symbolic_graph() -> None:
    baked = attention(1, baked=True)
    for batch in (1, 3, 8):
        assert featurize(baked, batch_size=batch) == featurize(attention("batch", baked=False), batch_size=batch)
    row = featurize(baked, batch_size=3)
    assert row["macs_fwd"] == 3 * (2 * H * S * S * (D // H) + S * D * D)  # linear in the batch, no batch x batch term


def test_candidates_prefer_an_explicit_batch_dimension_then_later_dimensions() -> None:
    assert batch_candidates((4, 128, 64), (32, 128, 64), (1, 4, 128, 64), 1)[0] == 0  # [B*H, S, d] -> [B, H, S, d]
    assert batch_candidates((128, 1, 256), (128, 8, 256), (128, 4, 64), 1) == [1, 0]  # B*H, else S*B
    assert batch_candidates((2, 6), (3, 6), (3, 4), 2) == []  # 3 x 4 cannot hold a batch of 2


def test_unrepairable_reshape_is_named() -> None:
    x = helper.make_tensor_value_info("x", F, [2, 6])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["r"], name="odd_view"), helper.make_node("Relu", ["r"], ["y"])],
                          "fixture", [x], [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.asarray([3, 4], np.int64), "t")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert featurize(model)["batch_size"] == 2
    with pytest.raises(GpupredError, match=r"from 2 to 3: node 'odd_view' bakes the batch into its target shape \[3, 4\]"):
        featurize(model, batch_size=3)


def test_class_token_expanded_to_a_baked_batch_is_rebatched(tmp_path: Path) -> None:
    """A class token expanded to a baked batch of 1 and concatenated (ViT-style): it is expanded to the new batch."""
    x = helper.make_tensor_value_info("x", F, [1, 4, 8])
    inits = [numpy_helper.from_array(np.zeros((1, 1, 8), np.float32), "cls"),
             numpy_helper.from_array(np.asarray([1, 1, 8], np.int64), "shape")]
    g = helper.make_graph([
        helper.make_node("Expand", ["cls", "shape"], ["c"]),
        helper.make_node("Concat", ["c", "x"], ["y"], axis=1, name="add_class_token"),
        helper.make_node("Relu", ["y"], ["z"]),
    ], "fixture", [x], [helper.make_tensor_value_info("z", F, None)], inits)
    path = tmp_path / "vit_like.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    per_op: dict[str, dict[str, int]] = {}
    featurize(path, batch_size=4, per_op=per_op)
    assert per_op["Relu"]["elements"] == 4 * 5 * 8 and per_op["Concat"]["elements"] == 4 * 5 * 8


def test_broken_node_is_named_in_one_line(tmp_path: Path) -> None:
    """A Split with baked sizes along the batch cannot be re-batched: the node is named."""
    x = helper.make_tensor_value_info("x", F, [1, 8])
    inits = [numpy_helper.from_array(np.asarray([1, 1], np.int64), "sizes")]
    g = helper.make_graph([
        helper.make_node("Concat", ["x", "x"], ["xx"], axis=0),
        helper.make_node("Split", ["xx", "sizes"], ["a", "b"], axis=0, name="split_pairs"),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ], "fixture", [x], [helper.make_tensor_value_info("y", F, None)], inits)
    path = tmp_path / "pairs.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(GpupredError) as err:
        featurize(path, batch_size=4)
    text = str(err.value)
    assert text.startswith(f"{path}: cannot change the batch size from 1 to 4") and "'split_pairs'" in text
    assert "\n" not in text and "symbolic batch" in text


def _big_mlp(path: Path, width: int = 640) -> onnx.ModelProto:
    """A FIXTURE MLP whose inline weights (random) make a file over the scan threshold."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", F, ["batch", width])
    inits = [numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((width,)).astype(np.float32), "b1"),
             numpy_helper.from_array(np.asarray([0, -1], np.int64), "shape")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    g = helper.make_graph(nodes, "fixture", [x], [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return model


def test_big_file_read_without_weight_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.onnx"
    model = _big_mlp(path)
    assert path.stat().st_size > 1 << 20
    slim = load_without_weights(path)
    by_name = {t.name: t for t in slim.graph.initializer}
    assert by_name["w1"].raw_data == b"" and by_name["w1"].data_location == TensorProto.EXTERNAL
    assert by_name["w1"].external_data[0].value == STRIPPED_LOCATION and list(by_name["w1"].dims) == [640, 640]
    assert numpy_helper.to_array(by_name["shape"]).tolist() == [0, -1]  # small constants keep their values
    assert by_name["b1"].raw_data == model.graph.initializer[1].raw_data
    assert slim.graph.node == model.graph.node and slim.graph.input == model.graph.input
    assert featurize(path, batch_size=5) == featurize(model, batch_size=5)


def test_truncated_big_file_is_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "big.onnx"
    _big_mlp(path)
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(path.read_bytes()[: (1 << 20) + 1000])
    with pytest.raises(GpupredError, match=r"cut.onnx: not a readable ONNX file"):
        featurize(cut, batch_size=1)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], out: str,
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "fixture", inputs, [helper.make_tensor_value_info(out, F, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def broadcast_constant(batch: int | str, seq_first: bool) -> onnx.ModelProto:
    """FIXTURE: a constant expanded to the batch and projected (ConViT's ``rel_indices.expand(B, ...)``, or seq-first
    as XLNet's ``pos_emb.expand(-1, B, -1)``), added to the projected input. At a fixed batch the Expand's target is
    a constant (a no-op at batch 1: the projection runs for one sample and broadcasts); at a symbolic batch it reads
    the batch from the input's shape."""
    axis = 1 if seq_first else 0
    const_shape = [4, 1, 16] if seq_first else [1, 4, 16]
    x = helper.make_tensor_value_info("x", F, [batch, 4, 16])
    inits = {"pos": np.zeros(const_shape, np.float32), "w": np.zeros((16, 2), np.float32),
             "w2": np.zeros((16, 2), np.float32), "zero": np.asarray([0], np.int64)}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2])] if seq_first else [
        helper.make_node("Identity", ["x"], ["xt"])]
    if isinstance(batch, int):
        inits["target"] = np.asarray(const_shape, np.int64)
    else:  # [4, B, 16] or [B, 4, 16], B read from the input
        inits |= {"before": np.asarray(const_shape[:axis], np.int64), "after": np.asarray(const_shape[axis + 1:], np.int64)}
        nodes += [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "zero"], ["b"]),
                  helper.make_node("Concat", ["before", "b", "after"], ["target"], axis=0)]
    nodes += [
        helper.make_node("Expand", ["pos", "target"], ["e"], name="expand_to_batch"),
        helper.make_node("MatMul", ["e", "w"], ["p"]),
        helper.make_node("MatMul", ["xt", "w2"], ["q"]),
        helper.make_node("Add", ["q", "p"], ["y"]),
    ]
    return _model(nodes, [x], "y", inits)


@pytest.mark.parametrize("seq_first", [False, True])
def test_constant_expanded_to_the_export_batch_takes_the_new_one(seq_first: bool) -> None:
    """Re-batched, a fixed-batch export counts the constant's projection per sample, as the symbolic export does."""
    per_op: dict[str, dict[str, int]] = {}
    row = featurize(broadcast_constant(1, seq_first), batch_size=8, per_op=per_op)
    assert per_op["MatMul"]["macs"] == 2 * 8 * 4 * 16 * 2  # both projections, for 8 samples
    assert row == featurize(broadcast_constant("batch", seq_first), batch_size=8)


def test_constant_repeated_for_one_sample_stays_one_sample() -> None:
    """FIXTURE: torch's repeat(1, 1, W) on a constant exports as Expand (to ones: rank only) then Tile; torch computes
    it once (timm's XCiT position encoding), so re-batching leaves it at one sample."""
    x = helper.make_tensor_value_info("x", F, [1, 4, 16])
    inits = {"pos": np.zeros((1, 4, 16), np.float32), "ones": np.ones(3, np.int64), "reps": np.ones(3, np.int64),
             "w": np.zeros((16, 2), np.float32), "w2": np.zeros((16, 2), np.float32)}
    model = _model([helper.make_node("Expand", ["pos", "ones"], ["e"]), helper.make_node("Tile", ["e", "reps"], ["t"]),
                    helper.make_node("MatMul", ["t", "w"], ["p"]), helper.make_node("MatMul", ["x", "w2"], ["q"]),
                    helper.make_node("Add", ["q", "p"], ["y"])], [x], "y", inits)
    per_op: dict[str, dict[str, int]] = {}
    featurize(model, batch_size=8, per_op=per_op)
    assert per_op["MatMul"]["macs"] == (8 + 1) * 4 * 16 * 2


def shifted_labels(batch: int) -> onnx.ModelProto:
    """FIXTURE: Hugging Face's shift_tokens_right as TorchScript exports it at a fixed batch: labels[:, :-1] written
    by ScatterND into a constant made by new_zeros(labels.shape), through a Reshape whose target is the shape of a
    constant computation (so only folding finds it), then embedded and projected (the decoder)."""
    labels = helper.make_tensor_value_info("labels", TensorProto.INT64, [batch, 5])
    index = np.stack([np.zeros(4, np.int64), np.arange(1, 5)], axis=-1)[None]  # [[0, 1], [0, 2], [0, 3], [0, 4]]
    inits = {"starts": np.asarray([0], np.int64), "ends": np.asarray([-1], np.int64), "axes": np.asarray([1], np.int64),
             "c1": np.zeros((1, 4), np.int64), "c2": np.ones((1, 4), np.int64), "zeros": np.zeros((1, 5), np.int64),
             "index": index, "emb": np.zeros((10, 8), np.float32), "w": np.zeros((8, 8), np.float32)}
    nodes = [
        helper.make_node("Slice", ["labels", "starts", "ends", "axes"], ["head"]),
        helper.make_node("Add", ["c1", "c2"], ["like"]),
        helper.make_node("Shape", ["like"], ["like_shape"]),
        helper.make_node("Reshape", ["head", "like_shape"], ["updates"]),
        helper.make_node("ScatterND", ["zeros", "index", "updates"], ["shifted"], name="shift_right"),
        helper.make_node("Gather", ["emb", "shifted"], ["h"]),
        helper.make_node("MatMul", ["h", "w"], ["y"]),
    ]
    return _model(nodes, [labels], "y", inits)


def test_labels_scattered_into_a_constant_are_rebatched() -> None:
    """The decoder of a model exported with labels at batch 1 runs for every sample once re-batched."""
    per_op: dict[str, dict[str, int]] = {}
    featurize(shifted_labels(1), batch_size=4, per_op=per_op)
    assert per_op["MatMul"]["macs"] == 4 * 5 * 8 * 8 and per_op["ScatterND"]["elements"] == 4 * 5


def test_gather_by_indices_made_for_one_sample_is_rebatched() -> None:
    """FIXTURE: an attention mask flattened and gathered by constant indices made for one sample (TorchScript's
    advanced indexing at a fixed batch of 1): the indices take the new batch."""
    mask = helper.make_tensor_value_info("mask", F, [1, 6])
    inits = {"idx": np.arange(6, dtype=np.int64).reshape(1, 1, 1, 6)}
    model = _model([helper.make_node("Flatten", ["mask"], ["flat"], axis=2),
                    helper.make_node("Gather", ["flat", "idx"], ["g"], axis=0, name="index_mask"),
                    helper.make_node("Relu", ["g"], ["y"])], [mask], "y", inits)
    per_op: dict[str, dict[str, int]] = {}
    featurize(model, batch_size=8, per_op=per_op)
    assert per_op["Relu"]["elements"] == 8 * 6


def test_node_computing_one_sample_is_refused(tmp_path: Path) -> None:
    """A slice that keeps one sample of the export's batch (x[:1]) cannot be told from a batch: refused, named."""
    x = helper.make_tensor_value_info("x", F, [1, 8])
    inits = {"s": np.asarray([0], np.int64), "e": np.asarray([1], np.int64), "a": np.asarray([0], np.int64),
             "w": np.zeros((8, 8), np.float32)}
    path = tmp_path / "first.onnx"
    onnx.save(_model([helper.make_node("Slice", ["x", "s", "e", "a"], ["first"], name="first_sample"),
                      helper.make_node("MatMul", ["first", "w"], ["y"])], [x], "y", inits), path)
    with pytest.raises(GpupredError) as err:
        featurize(path, batch_size=4)
    text = str(err.value)
    assert text.startswith(f"{path}: cannot change the batch size from 1 to 4: node 'first_sample' (Slice)")
    assert "does not grow" in text and "\n" not in text


def test_shape_of_a_computed_constant_is_folded() -> None:
    """FIXTURE: Shape of a tensor computed from constants (its shape declared nowhere, as after folding prunes it):
    its value gives the shape (a re-batched Reshape's target at the old batch comes from it)."""
    from gpupred.graph.fold import evaluate

    model = _model([helper.make_node("Add", ["c1", "c2"], ["like"]), helper.make_node("Shape", ["like"], ["y"])],
                   [], "y", {"c1": np.zeros((1, 4), np.int64), "c2": np.ones((1, 4), np.int64)})
    assert evaluate(model, {})["y"].tolist() == [1, 4]


def test_folded_nodes_are_remembered_by_their_input_values() -> None:
    """run_node remembers a result by the node and its input values: the same values give the same arrays without
    running onnx.reference again; other values, or another node, run again; object (string) inputs are never keyed."""
    from gpupred.graph import fold

    div = helper.make_node("Div", ["a", "b"], ["c"], name="FIXTURE-div")
    a, b = np.asarray([8, 6], np.int64), np.asarray(2, np.int64)
    fold._RUNS.clear()
    first = fold.run_node(div, [a, b], 17)
    assert first is not None and first[0].tolist() == [4, 3] and len(fold._RUNS) == 1
    assert fold.run_node(div, [a.copy(), b.copy()], 17) is first  # remembered: the same list back
    run32 = fold.run_node(div, [np.asarray([8, 6], np.int32), np.asarray(2, np.int32)], 17)  # another dtype: run
    assert run32 is not first and run32[0].dtype == np.int32
    other = fold.run_node(div, [a, np.asarray(4, np.int64)], 17)
    assert other is not None and other[0].tolist() == [2, 1]
    mul = helper.make_node("Mul", ["a", "b"], ["c"], name="FIXTURE-div")
    assert fold.run_node(mul, [a, b], 17)[0].tolist() == [16, 12]  # same name, another op: another key
    assert fold._run_key(div, [np.asarray(["x"], object), b], 17) is None


def test_folding_drops_the_folded_nodes_and_keeps_the_others_in_order() -> None:
    """replace_with_constants deletes in place: folded producers and what only they read go, every other node keeps
    its place, and dead initializers go with them (fixture graph)."""
    from gpupred.graph.fold import delete_at, replace_with_constants

    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="gather"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "n"], ["y"], name="reshape"),
             helper.make_node("Neg", ["y"], ["z"], name="neg")]
    graph = helper.make_graph(nodes, "fixture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
                               numpy_helper.from_array(np.array([1.0], dtype=np.float32), "unused")])
    model = helper.make_model(graph)
    replace_with_constants(model, {"n": np.array([12], dtype=np.int64)})
    assert [n.name for n in model.graph.node] == ["relu", "reshape", "neg"]
    assert [t.name for t in model.graph.initializer] == ["n"]
    field = helper.make_graph([helper.make_node("Relu", [str(i)], [f"o{i}"], name=str(i)) for i in range(8)], "g",
                              [], []).node
    delete_at(field, [6, 0, 2, 3, 7])
    assert [n.name for n in field] == ["1", "4", "5"]
