"""One job class: a graph's feature row, kernels and footprint terms computed once, and the job kept per file."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

from gpupred.predictor.jobgraph import JobGraph, clear_jobs, job_graph
from gpupred.setups import setup_of
from test_graph_features import mlp_graph


@pytest.fixture()
def onnx_file(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_graph(), path)  # a FIXTURE graph
    clear_jobs()
    return path


def test_the_same_file_is_one_job_and_each_part_is_computed_once(onnx_file: Path, monkeypatch) -> None:
    import gpupred.graph.features as features

    calls = []
    real = features.featurize
    monkeypatch.setattr(features, "featurize", lambda *a, **k: calls.append(1) or real(*a, **k))
    setup = setup_of("fp32", "sgd")
    job = job_graph(str(onnx_file), "mlp.onnx", 4, setup)
    assert job_graph(str(onnx_file), "mlp.onnx", 4, setup) is job
    first = (job.row, job.kernels, job.terms)
    assert (job.row, job.kernels, job.terms) == first and len(calls) == 1
    assert job.row["batch_size"] == 4 and job.features["precision"] == "fp32" and job.terms
    assert job_graph(str(onnx_file), "mlp.onnx", 8, setup) is not job  # another batch size: another job
    assert job_graph(str(onnx_file), "mlp.onnx", 4, setup_of("bf16", "adam")) is not job


def test_a_changed_file_is_a_new_job(onnx_file: Path) -> None:
    setup = setup_of("fp32", "sgd")
    job = job_graph(str(onnx_file), "mlp.onnx", 4, setup)
    before = job.row["params"]
    onnx.save(mlp_graph(hidden=32), onnx_file)
    os.utime(onnx_file, ns=(1, 1))  # a new modification time, as any rewrite gives
    again = job_graph(str(onnx_file), "mlp.onnx", 4, setup)
    assert again is not job and again.row["params"] > before


def test_a_job_from_parts_answers_without_its_graph() -> None:
    job = JobGraph.of_parts({"batch_size": 2.0}, kernels="K", terms={"t": 1.0}, setup=setup_of("bf16", "adam"))
    assert (job.kernels, job.terms, job.batch_size, job.precision, job.optimizer) == ("K", {"t": 1.0}, 2, "bf16", "adam")
