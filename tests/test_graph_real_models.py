"""Real models a new user tries: shape-dependent padding, parameters behind weight preparation, loss nodes,
fixed-batch ViTs, and the coverage columns that make a graph the featurizer cannot see whole say so.

Each of the first three failed on the code before issue 36: timm's same padding featurized as 0 FLOPs, XLNet
lost its relative-position projection (7.1 M parameters at base size), a ViT exported at batch 1 could not be
re-batched.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.graph.features import FEATURE_KEYS, featurize
from gpupred.graph.coverage import IncompleteGraphWarning, check_complete
from gpupred.graph.corpus import read_corpus_index


def _export_plain(model: object, x: object, path: Path, dynamic: bool) -> Path:
    """torch.onnx.export as a user calls it (TorchScript, weights inline), with or without a symbolic batch."""
    import torch

    axes = {"x": {0: "batch"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes=axes)
    return path


def test_same_padding_conv_is_shaped_and_costed(tmp_path: Path) -> None:
    """The issue's three-layer repro: a Pad computed from the input size (Div, Ceil, Max/Clip) no longer stops shapes."""
    torch = pytest.importorskip("torch")
    timm = pytest.importorskip("timm")
    model = torch.nn.Sequential(timm.layers.Conv2dSame(3, 16, 3, stride=2), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1))
    path = _export_plain(model, torch.randn(2, 3, 224, 224), tmp_path / "c.onnx", dynamic=True)
    row = featurize(path, batch_size=32)
    macs = 32 * 16 * 112 * 112 * (27 + 144)  # stride-2 same-padded 3x3 conv to 112x112, then a 3x3 conv 16 -> 16
    assert row["macs_fwd"] == macs
    assert row["unknown_ops"] == 0 and row["frac_nodes_unshaped"] == 0.0 and row["first_incomplete_node"] == ""
    assert row["params"] == sum(p.numel() for p in model.parameters())


def test_xlnet_parameters_equal_torch() -> None:
    """XLNet's relative-position projection (einsum of a constant with a weight) and its weights count: torch's figure."""
    entry = read_corpus_index()["models"]["hf-xlnet-base"]
    row = featurize(config.CORPUS / "hf-xlnet-base.onnx.gz", batch_size=2)
    # the recorded unused parameters (mask_emb, r_s_bias, seg_embed: no forward without token types reads them)
    assert entry["torch_params_unused"] == 768 + 12 * (768 + 2 * 768)
    assert row["params"] == entry["torch_params"] - entry["torch_params_unused"]
    assert 2 * row["macs_fwd"] == entry["torch_flops_fwd"]


def _small_vit() -> object:
    torchvision = pytest.importorskip("torchvision")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                                 mlp_dim=64).eval()


def test_fixed_batch_vit_rebatches_like_a_symbolic_export(tmp_path: Path) -> None:
    """A torchvision ViT exported at batch 1 (the class token's Expand/Concat bakes the batch) re-batches exactly."""
    torch = pytest.importorskip("torch")
    import gpupred

    model = _small_vit()
    fixed = _export_plain(model, torch.randn(1, 3, 32, 32), tmp_path / "vit-b1.onnx", dynamic=False)
    symbolic = gpupred.export_model(model, torch.randn(2, 3, 32, 32), tmp_path / "vit.onnx")
    a, b = featurize(fixed, batch_size=16), featurize(symbolic, batch_size=16)
    assert a["frac_nodes_unshaped"] == 0.0
    for key in ("flops_fwd", "macs_fwd", "params", "activation_bytes"):
        assert a[key] == pytest.approx(b[key], rel=1e-3), key


@pytest.mark.slow
def test_vit_b_16_default_export_at_batch_1_matches_the_catalog(tmp_path: Path) -> None:
    """torchvision vit_b_16 exported with torch's defaults (dynamo, batch 1) featurizes within 2% of the catalog at 32."""
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.vit_b_16().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(tmp_path / "vit.onnx"))
    mine = featurize(tmp_path / "vit.onnx", batch_size=32)
    catalog = featurize(config.GRAPHS / "vit.vit_b_16-img224.onnx.gz", batch_size=32)
    for key in ("flops_fwd", "params", "activation_bytes", "bytes_moved"):
        assert mine[key] == pytest.approx(catalog[key], rel=0.02), key


def _graph(nodes: list[onnx.NodeProto], inits: dict[str, tuple[int, ...]], out: str,
           x: tuple[int | str, ...] = ("batch", 8)) -> onnx.ModelProto:
    """A FIXTURE graph: input x, data-less float initializers, one output."""
    tensors = []
    for n, dims in inits.items():
        t = TensorProto(name=n, data_type=TensorProto.FLOAT, dims=list(dims), data_location=TensorProto.EXTERNAL)
        entry = t.external_data.add()
        entry.key, entry.value = "location", "missing"
        tensors.append(t)
    g = helper.make_graph(nodes, "fixture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], tensors)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def _half_unknown() -> onnx.ModelProto:
    """A FIXTURE: a MatMul, then a custom op nothing can shape, then another MatMul."""
    return _graph([
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Frobnicate", ["h"], ["f"], domain="com.example"),
        helper.make_node("MatMul", ["f", "w2"], ["y"]),
    ], {"w1": (8, 16), "w2": (16, 16)}, "y")


def test_incomplete_graph_says_so_warns_and_is_refused() -> None:
    model = _half_unknown()
    with pytest.warns(IncompleteGraphWarning, match=r"'Frobnicate' \(Frobnicate\)"):
        row = featurize(model, batch_size=4)
    assert row["frac_nodes_unshaped"] == pytest.approx(2 / 3)  # the custom op and the MatMul after it
    assert row["frac_nodes_uncosted"] == pytest.approx(2 / 3)
    # costed: 4 x 8 x 16 MACs; the unshaped MatMul is estimated at >= 2 x 256 weights x 4 samples
    assert 0.5 < row["frac_flops_affected"] < 1.0
    with pytest.raises(GpupredError, match=r"Frobnicate.*over 1%"):
        check_complete(row, "half.onnx")


def test_complete_graph_passes_the_check_silently() -> None:
    model = _graph([helper.make_node("MatMul", ["x", "w1"], ["y"])], {"w1": (8, 16)}, "y")
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteGraphWarning)
        row = featurize(model, batch_size=4)
    assert (row["frac_nodes_unshaped"], row["frac_nodes_uncosted"], row["frac_flops_affected"]) == (0.0, 0.0, 0.0)
    check_complete(row)
    assert all(k in row for k in FEATURE_KEYS)


def test_features_cli_warns_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "half.onnx"
    onnx.save(_half_unknown(), path)
    result = subprocess.run([sys.executable, "-m", "gpupred.cli", "features", str(path), "--batch-size", "4", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "incomplete" in line]
    assert len(lines) == 1 and "Frobnicate" in lines[0]


def test_softmax_cross_entropy_loss_has_a_cost() -> None:
    """A Hugging Face loss node: log-softmax over the scores (6 per score) plus 2 per label."""
    model = _graph([
        helper.make_node("MatMul", ["x", "w1"], ["scores"]),
        helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["y"], reduction="mean"),
    ], {"w1": (8, 10)}, "y")
    model.graph.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64, ["batch"]))
    per_op: dict[str, dict[str, int]] = {}
    row = featurize(model, batch_size=4, per_op=per_op)
    assert per_op["SoftmaxCrossEntropyLoss"]["flops"] == 6 * 4 * 10 + 2 * 4
    assert row["unknown_ops"] == 0


def test_export_failure_names_the_operator_and_the_workaround() -> None:
    from gpupred.graph.export import export_failure

    errors = ["TypeError: i_(): incompatible function arguments. Invoked with: %3 : Tensor = onnx::SoftmaxCrossEntropyLoss(",
              "dynamo: TorchExportError: Failed"]
    line = export_failure("qa.onnx", ["input_ids", "start_positions", "end_positions"], errors)
    assert "\n" not in line and "onnx::SoftmaxCrossEntropyLoss" in line and "without start_positions, end_positions" in line


@pytest.mark.slow
def test_whisper_with_labels_and_no_cache_names_aten_diff_and_the_call_that_works(tmp_path: Path) -> None:
    """The issue's Whisper failure, reproduced: with labels and use_cache=False the decoder calls torch.diff (Hugging
    Face's packed-sequence check), which TorchScript cannot export and torch.export refuses; the one-line error names
    aten::diff and the call that works (a decoder attention mask), and that call exports."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gpupred.graph.corpus import HF_MODELS, build_hf
    import gpupred

    entry = next(e for e in HF_MODELS if e.name == "hf-whisper-labels")
    model, example, _ = build_hf(entry, 2)
    with pytest.raises(GpupredError) as err:
        gpupred.export_model(model, {**example, "use_cache": False}, tmp_path / "whisper.onnx")
    text = str(err.value)
    assert "\n" not in text and "operator aten::diff" in text and "decoder_attention_mask" in text
    mask = torch.ones_like(example["labels"])
    path = gpupred.export_model(model, {**example, "use_cache": False, "decoder_attention_mask": mask},
                                tmp_path / "whisper.onnx")
    assert featurize(path, batch_size=4)["unknown_ops"] == 0


def test_bert_question_answering_with_positions_exports(tmp_path: Path) -> None:
    """The issue's failing call: BertForQuestionAnswering with start/end positions (a loss whose ignore_index is a shape)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gpupred.graph.corpus import HF_MODELS, build_hf
    import gpupred

    entry = next(e for e in HF_MODELS if e.name == "hf-bert-qa-labels")
    model, example, _ = build_hf(entry, 2)
    path = gpupred.export_model(model, example, tmp_path / "qa.onnx")
    row = featurize(path, batch_size=4)
    assert row["unknown_ops"] == 0 and row["params"] == sum(p.numel() for p in model.parameters())
