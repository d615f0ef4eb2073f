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
    before, flops, terms = job.row["params"], float(job.kernels.flops.sum()), job.terms
    onnx.save(mlp_graph(hidden=32), onnx_file)
    os.utime(onnx_file, ns=(1, 1))  # a new modification time, as any rewrite gives
    again = job_graph(str(onnx_file), "mlp.onnx", 4, setup)
    assert again is not job and again.row["params"] > before
    # every part is read from the new file: the kernels too (the step model keeps kernels per file version)
    assert float(again.kernels.flops.sum()) > flops and again.terms != terms


def test_a_job_from_parts_answers_without_its_graph() -> None:
    job = JobGraph.of_parts({"batch_size": 2.0}, kernels="K", terms={"t": 1.0}, setup=setup_of("bf16", "adam"))
    assert (job.kernels, job.terms, job.batch_size, job.precision, job.optimizer) == ("K", {"t": 1.0}, 2, "bf16", "adam")


def test_what_a_graph_keeps_is_what_a_fresh_graph_computes() -> None:
    """A canonical graph keeps its analyses (CanonicalGraph.memo): costs, attention cores, the footprint's terms and a
    step's kernels up to the optimizer, which a setup's optimizer options share; those of its structure alone
    (checkpoint blocks, copied transposes) with the file's other batch sizes (CanonicalGraph.memo_structure). Every
    setup's kernels, feature row and terms on a graph that kept them equal those of a freshly loaded graph."""
    from gpupred import config
    from gpupred.graph.features import featurize
    from gpupred.graph.loader import cached_graph, clear_graph_cache, load_graph
    from gpupred.memory.physics import graph_terms
    from gpupred.step.physics.kernels import step_kernels

    path = config.GRAPHS / "gpt.gpt-v8192-m1024-h16-l2-seq64.onnx.gz"  # the store's graph: attention and blocks
    base = setup_of("fp32", "sgd")
    setups = [base, base.with_options(optimizer="adam", optimizer_impl="fused"),  # the optimizer alone: one pass
              *(base.with_options(**{k: v}) for k, v in (("checkpointing", True), ("attention", "eager"),
                                                         ("precision", "bf16"), ("accumulation", 2)))]
    setups.append(setup_of("bf16", "adamw8bit"))  # a parameter placement: its kernels are not kept
    clear_graph_cache()
    kept = load_graph(path, 3)[0].form(True)
    for setup in setups + setups:  # the second pass reads what the first kept
        clear_graph_cache()  # reduced afresh: no reduction of the file kept (gpupred.graph.canonical.reduce_like)
        fresh = load_graph(path, 3)[0].form(True)
        a, b = step_kernels(kept, setup=setup), step_kernels(fresh, setup=setup)
        for name in ("flops", "bytes", "tensor_core", "phase", "sync_after"):
            assert (getattr(a, name) == getattr(b, name)).all(), (setup, name)
        assert (len(a), a.traits, a.param_tensors, a.input_bytes) == (len(b), b.traits, b.param_tensors, b.input_bytes)
    assert {k[0] if isinstance(k, tuple) else k for k in kept.derived} >= {"attention_cores", "step_forward"}
    assert {k[0] if isinstance(k, tuple) else k for k in kept.shared} >= {"checkpoint_blocks", "copied_transposes"}
    assert len([k for k in kept.derived if isinstance(k, tuple) and k[0] == "step_forward"]) == 5  # 6 setups, 5 passes
    gan = config.GRAPHS / "dcgan.dcgan-z100-g32-k32-img32.onnx.gz"  # the GAN recipe keeps its passes too
    kept_gan = load_graph(gan, 3)[0].form(True)
    for setup in (base, setups[1], setups[2], setups[4], base):  # plain, another optimizer, checkpointed, bf16
        a = step_kernels(kept_gan, recipe="gan", setup=setup)
        b = step_kernels(load_graph(gan, 3)[0].form(True), recipe="gan", setup=setup)
        assert all((getattr(a, n) == getattr(b, n)).all() for n in ("flops", "bytes", "tensor_core", "phase")), setup
    assert len([k for k in kept_gan.derived if isinstance(k, tuple) and k[0] == "gan_passes"]) == 3
    rows = [featurize(path, 3, s.job_precision, s.job_optimizer, warn=False) for s in setups]  # one cached graph
    assert {"structure", ("costs", False), ("costs", True)} <= set(cached_graph(path, 3)[0].form(True).derived)
    for setup, row in zip(setups, rows):
        clear_graph_cache()
        assert featurize(path, 3, setup.job_precision, setup.job_optimizer, warn=False) == row
    again = graph_terms(path, 3, setups[2])  # checkpointed
    again["saved_elems"] = -1.0  # a caller's copy: what the graph keeps is unchanged
    assert graph_terms(path, 3, setups[2])["saved_elems"] >= 0


def test_a_graph_keeps_a_bounded_number_of_analyses() -> None:
    """CanonicalGraph.memo keeps at most MEMO_ENTRIES, the oldest going first; a kept one is not made again."""
    from gpupred.graph.canonical import MEMO_ENTRIES, CanonicalGraph

    graph = CanonicalGraph([], {}, {}, {}, [])  # a FIXTURE: an empty graph
    made = []
    for k in range(MEMO_ENTRIES + 5):
        assert graph.memo(k, lambda k=k: made.append(k) or k) == k
    assert len(graph.derived) == MEMO_ENTRIES and 0 not in graph.derived and MEMO_ENTRIES + 4 in graph.derived
    assert graph.memo(MEMO_ENTRIES + 4, lambda: made.append("again")) == MEMO_ENTRIES + 4 and "again" not in made
