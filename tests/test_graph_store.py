"""The graph store and `gpupred export`: catalog graphs come from data/graphs without torch, `gpupred export` writes a
plain .onnx, `build_store` writes reproducible gzip files with an index, and the committed store matches fresh exports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from gpupred.graph.features import featurize
from gpupred.graph.export import EXPORT_VERSION, read_index, store_path, stored_graph
from gpupred.workloads.spec import WorkloadSpec

REPO = Path(__file__).resolve().parent.parent
SPEC = "resnet.resnet50-bs64-img224-bf16-sgd"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpupred.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_export_a_catalog_workload_from_the_store(tmp_path: Path) -> None:
    result = _cli(tmp_path, "export", SPEC, "-o", "out/resnet50.onnx")
    assert result.returncode == 0, result.stderr
    path = tmp_path / "out" / "resnet50.onnx"
    model = onnx.load(str(path), load_external_data=False)  # a plain ONNX file, not the store's gzip
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    spec = WorkloadSpec.from_id(SPEC)
    stored = stored_graph(spec)
    assert stored is not None and stored.parent == REPO / "data" / "graphs"
    assert featurize(path, batch_size=64) == featurize(stored, batch_size=64)
    assert "gpupred predict out/resnet50.onnx --batch-size 64" in result.stdout


def test_export_needs_exactly_one_target(tmp_path: Path) -> None:
    result = _cli(tmp_path, "export")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "give one of WORKLOAD_ID, --timm NAME, --hf MODEL, --store or --corpus" in result.stderr


def test_build_store_is_reproducible(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from gpupred.graph.export import build_store

    spec = WorkloadSpec.from_id("mlp.mlp-w64-d2-bs8-in32-fp32-sgd")
    first = build_store([spec], store=tmp_path, progress=False)
    data = first[0].read_bytes()
    assert first == [store_path(spec, tmp_path)] and data[:2] == b"\x1f\x8b"
    assert build_store([spec], store=tmp_path, progress=False) == []  # current: nothing to do
    build_store([spec], store=tmp_path, force=True, progress=False)
    assert store_path(spec, tmp_path).read_bytes() == data  # same bytes on every export
    index = read_index(tmp_path)
    assert index["export_version"] == EXPORT_VERSION and list(index["graphs"]) == [spec.arch_key]
    assert stored_graph(spec, tmp_path) == store_path(spec, tmp_path)
    assert featurize(store_path(spec, tmp_path), batch_size=8)["params"] == 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["mlp.mlp-w512-d2-bs64-in784-fp32-sgd", "resnet.resnet18-bs32-img32-fp32-sgd",
                                      "bert.bert-v8192-m256-h4-l6-bs8-seq256-fp32-sgd",
                                      "seq2seq.transformer-v3000-t3000-m512-h8-l6-bs32-seq52-fp32-adam",
                                      "deit.deit_small_patch16_224-bs32-img224-bf16-adam"])  # real-world: weightless
def test_committed_store_matches_a_fresh_export(workload: str, tmp_path: Path) -> None:
    """The store is not stale: a fresh export of the architecture has the same graph (and so the same features)."""
    pytest.importorskip("torch")
    from gpupred.graph.export import build_store
    from gpupred.graph.loader import graph_fingerprint
    from gpupred.graph.protoscan import load_without_weights

    spec = WorkloadSpec.from_id(workload)
    committed = stored_graph(spec)
    assert committed is not None, f"{spec.arch_key} missing from the store"
    fresh = build_store([spec], store=tmp_path, progress=False)[0]
    assert graph_fingerprint(load_without_weights(fresh)) == graph_fingerprint(load_without_weights(committed))
    assert featurize(fresh, batch_size=spec.batch_size) == featurize(committed, batch_size=spec.batch_size)
