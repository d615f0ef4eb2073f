"""What a scheduler's queue shares among its jobs gives each job exactly what it would get alone: kernel columns built
a column at a time, the footprint's terms from analyses a graph keeps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpupred.setups import setup_of
from gpupred.step.physics.kernels import BWD, FWD, OPT, kernel_columns


def _columns_one_by_one(groups: list[tuple[list[tuple[Any, ...]], int]]) -> tuple[np.ndarray, ...]:
    """kernel_columns as it was written before (a kernel at a time): the reference."""
    seq = [(k, p) for group, p in groups for k in group]
    n = len(seq)
    return (np.fromiter((k[0] for k, _ in seq), float, n), np.fromiter((k[1] for k, _ in seq), float, n),
            np.fromiter((int(k[2]) for k, _ in seq), np.int8, n),
            np.fromiter((len(k) > 3 and k[3] for k, _ in seq), bool, n),
            np.fromiter((k[4] if len(k) > 4 else p for k, p in seq), np.int8, n))


MIXED = [([(1.0, 2.0, False), (3, 4.5, 2), (0.0, 6.0, False, True)], FWD),
         ([(7.0, 8.0, 1, False, FWD), (9.0, 1e30, 3, True), (2 ** 60, 3.0, False)], BWD), ([(1.0, 8.0, False)], OPT)]


@pytest.mark.parametrize("groups", [
    [],
    [([], FWD), ([], BWD)],
    MIXED,  # a few kernels (an optimizer's): built from lists
    [(kernels * 10, phase) for kernels, phase in MIXED],  # more than FEW_KERNELS: built through iterators
])
def test_kernel_columns_equal_the_kernel_at_a_time_reference(groups: list[Any]) -> None:
    got, want = kernel_columns(groups), _columns_one_by_one(groups)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("graph", ["mobilenet.mobilenet_v2-img160", "gpt.gpt-v8192-m1024-h16-l2-seq64"])
def test_terms_from_a_graph_that_kept_its_analyses_equal_a_fresh_graphs(graph: str) -> None:
    """The footprint's terms with and without checkpointing, in either order on one loaded graph (which keeps what
    they share), equal each computed on a freshly loaded graph."""
    from gpupred import config
    from gpupred.graph.loader import clear_graph_cache
    from gpupred.memory.physics import graph_terms

    path = next(iter(sorted(config.GRAPHS.glob(f"{graph}*.onnx.gz"))))
    plain, checkpointed = setup_of("bf16", "adam"), setup_of("bf16", "adam").with_options(checkpointing=True)
    fresh = {}
    for setup in (plain, checkpointed):
        clear_graph_cache()
        fresh[setup.checkpointing] = graph_terms(path, 4, setup)
    for order in ((plain, checkpointed), (checkpointed, plain)):
        clear_graph_cache()
        for setup in order:
            assert graph_terms(path, 4, setup) == fresh[setup.checkpointing], (order, setup)
    assert fresh[True] != fresh[False]  # the two setups differ: the test can tell them apart


def _queue_setups() -> list[Any]:
    """The benchmark queue's setups (precision x optimizer x implementation x checkpointing), pure bf16 and fp16."""
    from itertools import product

    from gpupred.setups import TrainingSetup

    setups = [TrainingSetup(precision=p, optimizer=o, optimizer_impl=i, checkpointing=c)
              for p, o, i, c in product(("fp32", "bf16"), ("sgd", "adam"), ("foreach", "fused"), (False, True))]
    return setups + [TrainingSetup(precision="bf16-pure", optimizer="adam"), TrainingSetup(precision="fp16"),
                     TrainingSetup(precision="fp16", optimizer="adam", checkpointing=True, accumulation=2)]


@pytest.mark.parametrize("graph, recipe", [("resnet.resnet50-img224", "standard"),
                                           ("gpt.gpt-v8192-m1024-h16-l2-seq64", "standard"), ("dcgan", "gan")])
def test_every_setups_kernels_on_a_graph_that_kept_its_analyses_equal_a_fresh_graphs(graph: str, recipe: str) -> None:
    """A queue asks one loaded graph for every setup in turn (what a pass shares across setups is kept with the
    graph: the pass per precision and its kernel columns, its gradient sums and trainable tensors per node); each
    setup's kernels equal those of a freshly loaded graph asked for that setup alone (a GradScaler's loss scaling
    added after a kept pass's forward, gradient accumulation, a GAN's two optimizers)."""
    from gpupred import config
    from gpupred.graph.loader import clear_graph_cache, load_graph
    from gpupred.step.physics.kernels import step_kernels

    path = next(iter(sorted(config.GRAPHS.glob(f"{graph}*.onnx.gz"))))
    clear_graph_cache()
    kept = load_graph(path, 2)[0].form(True)
    for setup in _queue_setups():
        clear_graph_cache()
        a = step_kernels(kept, recipe=recipe, setup=setup)
        b = step_kernels(load_graph(path, 2)[0].form(True), recipe=recipe, setup=setup)
        for name in ("flops", "bytes", "tensor_core", "phase", "sync_after", "library", "on_tc"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), (setup, name)
        assert (a.counts, a.traits, a.param_tensors, a.input_bytes, a.cycles) == (
            b.counts, b.traits, b.param_tensors, b.input_bytes, b.cycles), setup
    assert ("accumulations", 2) in kept.derived and ("accumulations", None) in kept.derived
    assert any(isinstance(k, tuple) and k[0] in ("step_forward", "gan_passes") for k in kept.derived)


def test_a_kept_feature_row_is_handed_out_as_a_copy() -> None:
    """featurize keeps a row per (batch, precision, optimizer) with the graph; a caller changing its row changes
    nobody else's."""
    from gpupred import config
    from gpupred.graph.features import featurize

    path = config.GRAPHS / "resnet.resnet50-img224.onnx.gz"
    first = featurize(path, 2, "bf16", "adam", warn=False)
    first["params"] = -1
    again = featurize(path, 2, "bf16", "adam", warn=False)
    assert again["params"] > 0 and again is not first
    assert featurize(path, 2, "fp32", "adam", warn=False)["activation_bytes"] > again["activation_bytes"]


@pytest.mark.parametrize("graph", ["resnet.resnet50-img224", "gpt.gpt-v8192-m1024-h16-l2-seq64",
                                   "dcgan.dcgan-z100-g32-k32-img32", "lstm.lstm", "llama.llama"])
def test_kernels_from_the_featurizers_costs_equal_the_pass_sizing_its_own_tensors(
        graph: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the step model reads the featurizer's per-node infos and costs (fp32, autocast), every setup's kernels
    equal those of the pass that sizes and costs each node itself; pure bf16 always sizes its own."""
    from gpupred import config
    from gpupred.graph.loader import clear_graph_cache, load_graph
    from gpupred.step.physics import kernels
    from gpupred.step.physics.columns import recipe_of

    path = next(iter(sorted(config.GRAPHS.glob(f"{graph}*.onnx.gz"))))
    recipe = recipe_of(graph.split(".")[0])
    clear_graph_cache()
    shared = {s: kernels.step_kernels(load_graph(path, 3)[0].form(True), recipe=recipe, setup=s) for s in _queue_setups()}
    used = [s for s in _queue_setups() if kernels.shared_costs(load_graph(path, 3)[0].form(True), s) is not None]
    assert len(used) == len(_queue_setups()) - 1  # all but pure bf16
    monkeypatch.setattr(kernels, "shared_costs", lambda graph, setup: None)
    for setup, a in shared.items():
        b = kernels.step_kernels(load_graph(path, 3)[0].form(True), recipe=recipe, setup=setup)
        for name in ("flops", "bytes", "tensor_core", "phase", "sync_after", "library", "on_tc"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (setup, name)
        assert (a.counts, a.param_tensors) == (b.counts, b.param_tensors), setup


def test_a_graph_with_int32_at_a_contraction_sizes_its_own_tensors_under_autocast() -> None:
    """The featurizer halves only fp32 tensors at a contraction, the step model every 4-byte one: a FIXTURE graph whose
    MatMul reads an int32 tensor keeps the step model's own sizing under autocast, and shares the costs in fp32."""
    import onnx
    from onnx import TensorProto, helper

    from gpupred.graph.loader import load_graph
    from gpupred.step.physics.kernels import shared_costs, wide_ints_at_contractions

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT32, [8, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    nodes = [helper.make_node("Cast", ["ids"], ["w"], to=TensorProto.INT32),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "FIXTURE-int32-matmul", [x, ids], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = load_graph(onnx.ModelProto.FromString(model.SerializeToString()), 2)[0].form(True)
    assert wide_ints_at_contractions(graph)
    assert shared_costs(graph, setup_of("bf16", "sgd")) is None
    assert shared_costs(graph, setup_of("fp32", "sgd")) is not None


def test_the_collector_is_paused_inside_and_left_as_it_was() -> None:
    """collector_paused: no automatic collection inside; enabled again after (also after an error); a caller's own
    disabled collector stays disabled."""
    import gc

    from gpupred.gcpause import collector_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with collector_paused():
            assert not gc.isenabled()
            with collector_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
            raise RuntimeError("FIXTURE")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_kernels_added_after_a_kept_pass_launch_where_a_copied_pass_puts_them() -> None:
    """A step starts from the pass kept with its graph without copying its kernels; what it adds after (fp16's loss
    scaling, a forward kernel) lands after the kept forward and before the kept backward, as if appended to copies."""
    from gpupred import config
    from gpupred.graph.loader import load_graph
    from gpupred.setups import TrainingSetup
    from gpupred.step.physics.kernels import PHASES, KeptPass, forward_key, step_kernels

    graph = load_graph(next(iter(sorted(config.GRAPHS.glob("resnet.resnet18*.onnx.gz")))), 2)[0].form(True)
    setup = TrainingSetup(precision="fp16")
    kl = step_kernels(graph, setup=setup)
    kept, _ = graph.derived[("step_forward", forward_key(setup))]
    assert isinstance(kept, KeptPass)
    copied = kernel_columns([((*kept.fwd, (1.0, 8.0, False)), FWD), (kept.bwd[::-1], BWD)])
    n = len(copied[0])
    for got, want in zip((kl.flops, kl.bytes, kl.tensor_core, kl.library, kl.phase), copied):
        assert got.dtype == want.dtype and np.array_equal(got[:n], want)
    assert kl.phase[n:].tolist() == [OPT] * (len(kl) - n) and kl.counts[PHASES[FWD]] == len(kept.fwd) + 1


def test_a_queues_job_keys_are_each_jobs_own(tmp_path: Any) -> None:
    """job_keys works out what a queue's jobs share once (a model's defaults and text, a setup's and a pipeline's
    changes, per object); each job's resolved options and key are the job's own, computed alone: equal setups built
    apart (weight decay 0 and 0.0 name different keys), a file, a workload id, a pipeline (FIXTURE file)."""
    from gpupred.files import one_look
    from gpupred.predictor.pairing import Job, job_keys
    from gpupred.setups import InputPipeline, TrainingSetup

    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"FIXTURE")
    wid = "resnet.resnet50-bs64-img224-fp32-sgd"
    a, b = TrainingSetup(weight_decay=0), TrainingSetup(weight_decay=0.0)
    assert a == b  # equal values, keyed apart by what each says
    jobs = [Job(wid, setup=a), Job(wid, 8, setup=b), Job(wid, setup=a, pipeline=InputPipeline("image-files")),
            Job(str(onnx), 4), Job(onnx, 4, "bf16"), Job(wid, precision="bf16"), Job(wid), Job(wid, setup=b)]
    with one_look():
        resolved, keys = job_keys(jobs)
    assert resolved == [j.resolved() for j in jobs] and keys == [j.key for j in jobs]
    assert keys[0] != keys[7] and len(set(keys)) == len(keys)


def test_the_tensor_core_mask_is_each_units_rule() -> None:
    """tensor_core_mask looks each kernel's unit up: convolutions and matmuls on tensor cores in 16 bits, in fp32 as
    the TF32 options say; CUDA-core and depthwise kernels never."""
    from gpupred.setups import TrainingSetup
    from gpupred.step.physics.kernels import CONV, DEPTHWISE, MATMUL, tensor_core_mask

    unit = np.array([0, MATMUL, CONV, DEPTHWISE, CONV, 0, MATMUL], np.int8)
    for s in [*_queue_setups(), TrainingSetup(tf32_matmul=True), TrainingSetup(tf32_conv=False)]:
        want = ((unit == CONV) & (s.half or s.tf32_conv)) | ((unit == MATMUL) & (s.half or s.tf32_matmul))
        got = tensor_core_mask(unit, s)
        assert got.dtype == bool and got.tolist() == want.tolist(), s


@pytest.mark.parametrize("graph", ["resnet.resnet50-img224", "gpt.gpt-v8192-m1024-h16-l2-seq64", "llama.llama"])
def test_a_checkpointed_pass_gathered_from_the_plain_one_equals_its_kernels_columns(graph: str) -> None:
    """checkpointed_pass gathers its columns from the plain pass's: they equal kernel_columns of the recomputed
    backward (checkpointing reorders kernels, each keeping its columns), kernels and counts included."""
    from gpupred import config
    from gpupred.graph.loader import load_graph
    from gpupred.step.physics.blocks import checkpoint_blocks
    from gpupred.step.physics.kernels import checkpointed_pass, forward_key, kept_pass, recomputed, step_kernels

    path = next(iter(sorted(config.GRAPHS.glob(f"{graph}*.onnx.gz"))))
    cg = load_graph(path, 2)[0].form(True)
    for precision in ("fp32", "bf16"):
        setup = setup_of(precision, "adam")
        step_kernels(cg, setup=setup)  # keeps the plain pass with the graph: read it back
        plain, (_trainable, (at, end, spans)) = cg.memo(("step_pass", forward_key(setup)), lambda: pytest.fail())
        blocks = checkpoint_blocks(cg)
        assert blocks, graph
        gathered = checkpointed_pass(plain, at, end, spans, blocks)
        bwd = (*plain.bwd[:at], *recomputed(plain.fwd, plain.bwd[:end], at, spans, blocks), *plain.bwd[end:])
        built = kept_pass(plain.fwd, bwd)
        assert gathered.bwd == built.bwd and len(bwd) > len(plain.bwd)
        for x, y in zip(gathered.columns, built.columns):
            assert x.dtype == y.dtype and np.array_equal(x, y)
        assert np.array_equal(gathered.per_phase, built.per_phase)
