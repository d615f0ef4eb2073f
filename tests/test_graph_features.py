"""featurize on whole graphs: batch handling, errors, no external data, export of a tiny module (fixtures)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpupred.errors import GpupredError
from gpupred.graph.features import FEATURE_KEYS, featurize


def mlp_graph(batch: int | str = "batch", hidden: int = 16) -> onnx.ModelProto:
    """x -> MatMul -> Add(bias) -> Relu -> MatMul, plus a residual Add: a fixture graph."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])
    inits = [
        numpy_helper.from_array(np.ones((8, hidden), np.float32), "w1"),
        numpy_helper.from_array(np.ones((hidden,), np.float32), "b1"),
        numpy_helper.from_array(np.ones((hidden, 8), np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["a"]),
        helper.make_node("MatMul", ["a", "w2"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "fixture", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_feature_keys_numeric_and_fixed() -> None:
    f = featurize(mlp_graph(), batch_size=4)
    assert list(f)[: len(FEATURE_KEYS)] == FEATURE_KEYS
    assert all(isinstance(f[k], (int, float)) for k in FEATURE_KEYS)
    assert f["macs_fwd"] == 4 * 8 * 16 * 2
    assert f["params"] == 8 * 16 + 16 + 16 * 8
    # canonical form: MatMul + Add(bias) is one contraction with a bias, so the chain is MatMul, Relu, MatMul, Add
    assert f["n_residual"] == 1 and f["n_layers"] == 2 and f["depth"] == 4 and f["n_nodes"] == 4
    assert featurize(mlp_graph(), batch_size=4, canonical=False)["depth"] == 5
    assert f["input_bytes"] == 4 * 8 * 4 and f["batch_size"] == 4


def test_batch_scales_linearly() -> None:
    f1, f8 = featurize(mlp_graph(), batch_size=1), featurize(mlp_graph(), batch_size=8)
    assert f8["flops_fwd"] == 8 * f1["flops_fwd"]
    assert f8["params"] == f1["params"]


def test_static_batch_used_when_none_given() -> None:
    assert featurize(mlp_graph(batch=3))["batch_size"] == 3


def test_fixed_batch_is_rebatched() -> None:
    """A graph exported at a fixed batch of 3, asked at 5, is featurized as the symbolic graph at 5."""
    fixed, symbolic = featurize(mlp_graph(batch=3), batch_size=5), featurize(mlp_graph(), batch_size=5)
    assert fixed == symbolic and fixed["batch_size"] == 5


def test_symbolic_batch_needs_batch_size() -> None:
    with pytest.raises(GpupredError, match="pass --batch-size"):
        featurize(mlp_graph())


def test_second_dynamic_dimension_is_an_error(tmp_path: Path) -> None:
    m = mlp_graph()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"
    path = tmp_path / "two_dyn.onnx"
    onnx.save(m, path)
    with pytest.raises(GpupredError, match="two_dyn.onnx.*'features'"):
        featurize(path, batch_size=2)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(GpupredError, match="no such file"):
        featurize(tmp_path / "missing.onnx", batch_size=1)
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 20)
    with pytest.raises(GpupredError, match="notes.onnx"):
        featurize(text, batch_size=1)
    good = tmp_path / "good.onnx"
    onnx.save(mlp_graph(), good)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(GpupredError, match="truncated.onnx"):
        featurize(truncated, batch_size=1)


def test_external_data_never_read(tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save(mlp_graph(hidden=64), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.onnx.data", size_threshold=0)
    (tmp_path / "ext.onnx.data").unlink()  # the weights are gone; the structure is enough
    f = featurize(path, batch_size=2)
    assert f["params"] == 8 * 64 + 64 + 64 * 8 and f["unknown_ops"] == 0


def test_bad_precision_optimizer() -> None:
    with pytest.raises(GpupredError, match="precision"):
        featurize(mlp_graph(), batch_size=1, precision="fp8")
    with pytest.raises(GpupredError, match="optimizer"):
        featurize(mlp_graph(), batch_size=1, optimizer="lion")


def test_export_tiny_module_symbolic_batch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from gpupred.graph.export import export_module
    from gpupred.graph.stripped import EXTERNAL_DATA_NAME

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8 * 6 * 6, 10)

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            y = torch.relu(self.bn(self.conv(x)))
            return self.fc(y.reshape(x.shape[0], -1))

    path = export_module(Tiny(), (torch.randn(5, 3, 6, 6),), tmp_path / "tiny.onnx", ["x"], [0])
    assert not (tmp_path / EXTERNAL_DATA_NAME).exists() and path.stat().st_size < 20_000
    f1, f7 = featurize(path, batch_size=1), featurize(path, batch_size=7)
    conv_macs = 8 * 36 * 27
    assert f1["macs_fwd"] == conv_macs + 288 * 10
    assert f7["macs_fwd"] == 7 * f1["macs_fwd"]
    # canonical form: the BatchNorm after the conv folds into it; its scale and shift stay counted, as torch counts them
    assert f1["params"] == sum(p.numel() for p in Tiny().parameters())
    assert f1["unknown_ops"] == 0 and f1["n_norm"] == 0
    raw = featurize(path, batch_size=1, canonical=False)
    assert raw["params"] == sum(p.numel() for p in Tiny().parameters()) and raw["n_norm"] == 1


def test_an_int64_index_does_not_widen_an_embedding_under_autocast(tmp_path: Path) -> None:
    """FIXTURE graph: an embedding lookup (Gather of an fp32 table by int64 ids) then a Relu. Under bf16 autocast
    the lookup stays fp32 (4 bytes an element), as torch runs it; the ids' 8-byte type promotes nothing."""
    table = numpy_helper.from_array(np.zeros((100, 16), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["emb"]), helper.make_node("Relu", ["emb"], ["y"])], "fixture",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 16])], [table])
    path = tmp_path / "embedding.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    fp32, bf16 = (featurize(path, batch_size=4, precision=p) for p in ("fp32", "bf16"))
    assert bf16["activation_bytes"] == fp32["activation_bytes"] > 0
