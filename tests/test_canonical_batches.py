"""One canonical reduction per parsed file, replayed at its other batch sizes (gpupred.graph.canonical.reduce_like,
gpupred.graph.loader.PlainGraph): the replayed form is the one a fresh reduction gives, bit for bit, and a batch
size whose shapes decide otherwise is reduced afresh (FIXTURE graphs, and graphs of the store)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpupred import config
from gpupred.graph import loader
from gpupred.graph.canonical import CanonicalGraph, canonicalize
from gpupred.graph.features import featurize
from gpupred.graph.loader import FLOAT_TYPES, PlainGraph, cached_graph, clear_graph_cache
from gpupred.graph.shapemap import store_batch_shapes
from gpupred.memory.physics import graph_terms
from gpupred.step.physics.kernels import step_kernels
from gpupred.setups import TrainingSetup


def fresh(plain: PlainGraph) -> CanonicalGraph:
    """The canonical form of a loaded graph, reduced afresh (no kept reduction)."""
    return canonicalize(plain.nodes, plain.shapes, plain.inits, plain.graph_inputs, plain.graph_outputs,
                        plain.folded, FLOAT_TYPES)


def bias_per_batch_graph() -> onnx.ModelProto:
    """x [batch, 4] -> Transpose -> MatMul(w [3, 4]) -> [3, batch] -> Add(one-element constant) -> Relu: a FIXTURE whose
    Add is a per-channel bias only at batch 1 (the output's last axis is the batch), so its reduction depends on the
    batch size although every shape is affine in it (a stored shape map holds)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    inits = [numpy_helper.from_array(np.ones((3, 4), np.float32), "w"),
             numpy_helper.from_array(np.ones((1,), np.float32), "c")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), helper.make_node("MatMul", ["w", "xt"], ["m"]),
             helper.make_node("Add", ["m", "c"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "fixture", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_batch_whose_shapes_decide_otherwise_is_reduced_afresh(tmp_path: Path) -> None:
    path = tmp_path / "bias.onnx"
    onnx.save(store_batch_shapes(bias_per_batch_graph()), path)
    clear_graph_cache()
    forms = {}
    for bs in (4, 1, 8, 1):  # 4 reduces; 1 decides otherwise (its Add is a bias): reduced afresh; 8 replays 4's
        plain, _ = cached_graph(path, bs)
        assert plain.reductions is not None  # the stored shape map's path: reductions are kept per file
        forms[bs] = plain.form(True)
        assert forms[bs] == fresh(plain)
    assert [n[0] for n in forms[1].nodes] == ["Transpose", "MatMul", "Relu"]  # the bias fused at batch 1 only
    assert [n[0] for n in forms[4].nodes] == [n[0] for n in forms[8].nodes] == ["Transpose", "MatMul", "Add", "Relu"]
    assert forms[8].shapes["m"][0] == (3, 8)
    assert len(plain.reductions) == 2  # 4's and 1's, each replayed where it holds
    assert forms[8].shared is forms[4].shared and forms[1].shared is not forms[4].shared
    assert featurize(path, batch_size=1) == featurize(bias_per_batch_graph(), batch_size=1)  # as a proto (no replay)


def test_replays_without_a_shape_map_are_never_shared(tmp_path: Path) -> None:
    """A graph without a stored shape map is inferred per batch size (its nodes may differ): nothing is replayed."""
    path = tmp_path / "plain.onnx"
    onnx.save(bias_per_batch_graph(), path)
    clear_graph_cache()
    for bs in (4, 8):
        plain, _ = cached_graph(path, bs)
        assert plain.reductions is None
        assert plain.form(True) == fresh(plain)


STORE_GRAPHS = ("resnet.resnet50-img224", "bert.bert-v30522-m256-h4-l2-seq256", "dcgan.dcgan-z100-g32-k32-img32",
                "lstm")


@pytest.mark.parametrize("prefix", STORE_GRAPHS)
def test_replayed_forms_give_the_kernels_and_features_of_fresh_ones(prefix: str) -> None:
    """A file's batch sizes in turn (the first reduces, the rest replay and share the analyses of structure) against
    each batch size loaded alone: the canonical form, the feature row, the step's kernels and the footprint's terms
    (with and without checkpointing) agree bit for bit."""
    path = next(iter(sorted(config.GRAPHS.glob(f"{prefix}*.onnx.gz"))), None)
    if path is None:
        pytest.skip(f"no {prefix} graph in the store")
    setups = [TrainingSetup(), TrainingSetup(precision="bf16", optimizer="adam", checkpointing=True)]

    def analyses(bs: int) -> tuple[CanonicalGraph, dict, list]:
        cg = cached_graph(path, bs)[0].form(True)
        kls = [step_kernels(cg, setup=s, recipe="gan" if prefix.startswith("dcgan") else "standard") for s in setups]
        terms = [graph_terms(path, bs, s) for s in setups]
        return cg, {**featurize(path, batch_size=bs, precision="bf16"), "terms": terms}, kls

    clear_graph_cache()
    together = {bs: analyses(bs) for bs in (64, 1, 3, 64)}
    assert len(loader._PARSED) == 1 and next(iter(loader._PARSED.values())).reductions  # kept, and replayed
    for bs, (cg, row, kls) in together.items():
        clear_graph_cache()
        alone_cg, alone_row, alone_kls = analyses(bs)
        assert cg == alone_cg and row == alone_row
        for a, b in zip(kls, alone_kls):
            for name in ("flops", "bytes", "tensor_core", "phase", "sync_after", "library", "on_tc"):
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
            assert (a.traits, a.counts, a.param_tensors, a.input_bytes) == (b.traits, b.counts, b.param_tensors,
                                                                            b.input_bytes)
