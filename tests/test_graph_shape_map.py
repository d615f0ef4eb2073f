"""Stored batch shape maps (shapemap.store_batch_shapes): same features as shape inference, stale maps ignored (fixtures)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpupred.graph.features import featurize
from gpupred.graph import features as F
from gpupred.graph import loader
from gpupred.graph.fold import SHAPES_KEY
from gpupred.graph.shapemap import store_batch_shapes


def conv_graph() -> onnx.ModelProto:
    """x -> Conv(stride 2) -> Relu -> Flatten -> Gemm, symbolic batch: a fixture graph."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 9, 9])
    inits = [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"),
             numpy_helper.from_array(np.ones((64, 10), np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("Gemm", ["f", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "fixture", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_stored_map_matches_inference_and_skips_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, stored = tmp_path / "plain.onnx", tmp_path / "stored.onnx"
    onnx.save(conv_graph(), plain)
    onnx.save(store_batch_shapes(conv_graph()), stored)
    want = {(bs, p): featurize(plain, batch_size=bs, precision=p) for bs in (1, 5, 64) for p in ("fp32", "bf16")}
    F.clear_cache()
    monkeypatch.setattr(loader, "infer", lambda *a, **k: pytest.fail("shape inference ran despite a stored map"))
    for (bs, p), row in want.items():
        assert featurize(stored, batch_size=bs, precision=p) == row


def test_stale_map_falls_back_to_inference(tmp_path: Path) -> None:
    m = store_batch_shapes(conv_graph())
    assert any(p.key == SHAPES_KEY for p in m.metadata_props)
    m.graph.node[0].attribute[0].ints[:] = [1, 1]  # stride 1: the stored shapes no longer fit
    m.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.ones((196, 10), np.float32), "fc"))
    path = tmp_path / "stale.onnx"
    onnx.save(m, path)
    fixed = conv_graph()
    fixed.graph.node[0].attribute[0].ints[:] = [1, 1]
    fixed.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.ones((196, 10), np.float32), "fc"))
    assert featurize(path, batch_size=3) == featurize(fixed, batch_size=3)
    assert featurize(path, batch_size=3)["macs_fwd"] == 3 * (4 * 49 * 27 + 196 * 10)


def test_map_survives_moving_weights_to_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights inline at export, then saved as external data (the usual layout): the map still fits the graph."""
    inline = tmp_path / "inline.onnx"
    onnx.save(store_batch_shapes(conv_graph()), inline)
    want = featurize(inline, batch_size=7)
    external = tmp_path / "external.onnx"
    onnx.save(onnx.load(str(inline)), external, save_as_external_data=True, all_tensors_to_one_file=True,
              location="external.onnx.data", size_threshold=0)
    F.clear_cache()
    monkeypatch.setattr(loader, "infer", lambda *a, **k: pytest.fail("shape inference ran despite a stored map"))
    assert featurize(external, batch_size=7) == want


def test_a_file_with_a_map_is_parsed_once_for_every_batch_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_graph keeps a file's parse and checked map (loader.StoredParse) per file identity: another batch size
    only evaluates the map, each batch's graph is what a fresh load gives, and a rewritten file is parsed again."""
    import os

    path = tmp_path / "stored.onnx"
    onnx.save(store_batch_shapes(conv_graph()), path)
    F.clear_cache()
    fresh = {}
    for bs in (1, 7, 32):
        F.clear_cache()
        fresh[bs] = loader.load_graph(path, bs)[0]
    parses = []
    real = loader._load_unchecked
    monkeypatch.setattr(loader, "_load_unchecked", lambda *a: parses.append(1) or real(*a))
    F.clear_cache()
    for bs in (1, 7, 32, 7):
        graph, got = loader.load_graph(path, bs)
        assert got == bs and graph.shapes == fresh[bs].shapes and graph.nodes == fresh[bs].nodes
    assert len(parses) == 1
    m = conv_graph()
    m.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.ones((64, 12), np.float32), "fc"))  # 12 classes now
    onnx.save(store_batch_shapes(m), path)  # (which parses it at several batch sizes itself)
    os.utime(path, ns=(1, 1))
    parses.clear()
    assert loader.load_graph(path, 7)[0].shapes["y"][0] == (7, 12) and len(parses) == 1
