"""A host input pipeline must hand the model what its graph takes (gpupred.predictor.jobs.check_pipeline_inputs):
decoded images and log-mel frames a float input (of any layout: a dataset may flatten an image), token ids an integer
one; a model with no such input is refused in one line naming the graph's inputs and the kinds that fit, instead of
costing a pipeline the model never reads. The graphs are FIXTURES built here with onnx.helper (a token model, an
image model and a log-mel model, no weights)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpupred.errors import GpupredError
from gpupred.predictor.jobgraph import JobGraph
from gpupred.predictor.jobs import check_pipeline_inputs
from gpupred.setups import InputPipeline, setup_of


def _save(path: Path, nodes: list, inputs: list, inits: list) -> Path:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    onnx.save(helper.make_model(helper.make_graph(nodes, "fixture", inputs, [out], inits),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """FIXTURE graphs: token ids -> embedding -> projection; an image -> convolution; log-mel frames -> MatMul."""
    root = tmp_path_factory.mktemp("graphs")
    emb = numpy_helper.from_array(np.zeros((100, 8), np.float32), "emb")
    proj = numpy_helper.from_array(np.zeros((8, 4), np.float32), "proj")
    conv = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "conv")
    mel = numpy_helper.from_array(np.zeros((16, 4), np.float32), "mel")
    return {
        "tokens": _save(root / "tokens.onnx", [helper.make_node("Gather", ["emb", "ids"], ["e"]),
                                               helper.make_node("MatMul", ["e", "proj"], ["y"])],
                        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 12])], [emb, proj]),
        "image": _save(root / "image.onnx", [helper.make_node("Conv", ["x", "conv"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])], [conv]),
        "audio": _save(root / "audio.onnx", [helper.make_node("MatMul", ["f", "mel"], ["y"])],
                       [helper.make_tensor_value_info("f", TensorProto.FLOAT, ["N", 30, 16])], [mel]),
    }


def _job(path: Path) -> JobGraph:
    return JobGraph(str(path), path.stem, 4, setup_of())


@pytest.mark.parametrize(("graph", "kind"), [("tokens", "text-tokens"), ("image", "image-files"),
                                             ("audio", "audio-logmel"), ("tokens", "host-tensors"),
                                             ("image", "array-files"), ("audio", "resident"),
                                             ("audio", "image-files")])  # images flattened by the dataset, say
def test_a_pipeline_that_hands_the_model_its_inputs_is_taken(graphs: dict[str, Path], graph: str, kind: str) -> None:
    check_pipeline_inputs(_job(graphs[graph]), InputPipeline(kind))


@pytest.mark.parametrize(("graph", "kind", "fits"), [
    ("tokens", "image-files", "use text-tokens or host-tensors"),
    ("tokens", "audio-logmel", "use text-tokens or host-tensors"),
    ("image", "text-tokens", "use image-files or audio-logmel or host-tensors"),
    ("audio", "text-tokens", "use image-files or audio-logmel or host-tensors"),
])
def test_a_pipeline_the_model_does_not_read_is_refused_with_what_fits(graphs: dict[str, Path], graph: str, kind: str,
                                                                      fits: str) -> None:
    with pytest.raises(GpupredError, match=rf"^{graph}: --data {kind} hands the model .* and it takes none \(its "
                                           rf"inputs: .*\); {fits}"):
        check_pipeline_inputs(_job(graphs[graph]), InputPipeline(kind))


def test_the_inputs_are_read_at_the_job_s_batch(graphs: dict[str, Path]) -> None:
    assert _job(graphs["tokens"]).inputs == (("ids", TensorProto.INT64, (4, 12)),)
    assert _job(graphs["image"]).inputs == (("x", TensorProto.FLOAT, (4, 3, 8, 8)),)
