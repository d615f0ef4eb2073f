"""Torch builders: every family builds and trains one CPU step; bf16 autocast; fused copies equal separate runs."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from gpupred.errors import GpupredError  # noqa: E402
from gpupred.workloads.builders import build, copy_lrs, make_optimizer  # noqa: E402
from gpupred.workloads.fused import LoopRNN  # noqa: E402
from gpupred.workloads.spec import WorkloadSpec  # noqa: E402


def _trainable(built) -> int:  # type: ignore[no-untyped-def]
    """Trainable parameters of a built workload (all copies for a fused spec)."""
    return sum(p.numel() for p in built.model.parameters() if p.requires_grad)


# Tiny configurations (not catalog entries): one per family, batch 2, small inputs where the arch allows.
TINY = {
    "mlp": "mlp.mlp-w32-d2-bs2-in16",
    "lstm": "lstm.lstm-v50-e8-h16-l2-bs2-seq6",
    "gru": "gru.gru-v50-e8-h16-l1-bs2-seq6",
    "bert": "bert.bert-v50-m16-h2-l2-bs2-seq6",
    "gpt": "gpt.gpt-v50-m16-h2-l2-bs2-seq6",
    "dcgan": "dcgan.dcgan-z8-g4-k4-bs2-img16",
    "neumf": "neumf.neumf-u20-i30-e4-l2-bs4",
    "resnet": "resnet.resnet18-bs2-img32",
    "mobilenet": "mobilenet.mobilenet_v2-bs2-img32",
}
SLOW = {  # the other torchvision models (seconds each on 2 shared cores)
    "mobilenet3": "mobilenet.mobilenet_v3_large-bs2-img32",
    "densenet": "densenet.densenet121-bs2-img32",
    "efficientnet": "efficientnet.efficientnet_b0-bs2-img32",
    "squeezenet": "squeezenet.squeezenet1_1-bs2-img32",
    "shufflenet": "shufflenet.shufflenet_v2_x1_0-bs2-img32",
    "googlenet": "googlenet.googlenet-bs2-img32",
    "resnet50": "resnet.resnet50-bs2-img32",
    "resnet101": "resnet.resnet101-bs2-img32",
    "vgg11": "vgg.vgg11-bs2-img32",
    "vgg16": "vgg.vgg16-bs2-img32",
    "alexnet": "alexnet.alexnet-bs2-img64",
    "inception": "inception.inception_v3-bs2-img75",
    "vit": "vit.vit_b_16-bs2-img32",
}


def _spec(prefix: str, tail: str = "fp32-sgd") -> WorkloadSpec:
    return WorkloadSpec.from_id(f"{prefix}-{tail}")


def _one_step(spec: WorkloadSpec) -> None:
    built = build(spec)
    before = [p.detach().clone() for p in built.model.parameters()]
    step = built.make_train_step("cpu")
    loss = step()
    assert torch.isfinite(loss).all(), spec.id
    after = list(built.model.parameters()) if spec.fused == 1 else list(step.params.values())  # type: ignore[attr-defined]
    if spec.fused == 1:
        assert any(not torch.equal(a, b) for a, b in zip(before, after)), spec.id
    else:
        assert all(torch.isfinite(p).all() for p in after)
    assert _trainable(built) > 0
    assert len(built.export_inputs) == len(built.input_names) == len(built.batch_axes)
    for x, axis in zip(built.export_inputs, built.batch_axes):
        assert x.shape[axis] == spec.batch_size and x.device.type == "cpu"
        assert x.dtype in (torch.float32, torch.int64)


@pytest.mark.parametrize("name", list(TINY))
def test_family_builds_and_trains_one_step(name: str) -> None:
    _one_step(_spec(TINY[name], "fp32-adam" if name in ("lstm", "bert", "neumf") else "fp32-sgd"))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW))
def test_big_torchvision_builds_and_trains_one_step(name: str) -> None:
    _one_step(_spec(SLOW[name]))


@pytest.mark.parametrize("name", ["mlp", "gpt", "dcgan", "mobilenet"])
def test_bf16_autocast_step(name: str) -> None:
    _one_step(_spec(TINY[name], "bf16-adam"))


def test_loss_decreases_on_fixed_batch() -> None:
    step = build(_spec(TINY["mlp"], "fp32-adam")).make_train_step("cpu")
    losses = [float(step()) for _ in range(20)]
    assert losses[-1] < losses[0]


def test_host_batches_and_determinism() -> None:
    spec = _spec(TINY["bert"], "fp32-adam")
    a = build(spec)
    b = build(spec)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa, pb)
    assert all(torch.equal(x, y) for x, y in zip(a.export_inputs, b.export_inputs))
    torch.manual_seed(1)
    la = float(a.make_train_step("cpu")())
    torch.manual_seed(1)
    lb = float(b.make_train_step("cpu", host_batches=True)())
    assert la == pytest.approx(lb)


def test_export_model_forward() -> None:
    for name in ("mlp", "lstm", "gpt", "dcgan", "neumf"):
        built = build(_spec(TINY[name]))
        out = built.export_model(*built.export_inputs)
        outs = out if isinstance(out, tuple) else (out,)
        assert all(o.shape[0] == built.spec.batch_size for o in outs), name
    fused = build(_spec(TINY["mlp"], "fp32-sgd-x3"))
    assert fused.export_model(*fused.export_inputs).shape == (3, 2, 10)
    assert len(list(fused.export_model.modules())) > 3 * len(list(build(_spec(TINY["mlp"])).model.modules())) - 3


def test_bad_builds_raise_one_line() -> None:
    for bad in ("inception.inception_v3-bs2-img32-fp32-sgd", "vit.vit_b_16-bs2-img40-fp32-sgd",
                "dcgan.dcgan-z8-g4-k4-bs2-img48-fp32-sgd", "bert.bert-v50-m16-h3-l1-bs2-seq6-fp32-sgd",
                "dcgan.dcgan-z8-g4-k4-bs2-img16-fp32-sgd-x2"):
        with pytest.raises(GpupredError, match="workload"):
            build(WorkloadSpec.from_id(bad))


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_fused_step_equals_separate_steps(opt: str) -> None:
    """Two fused MLP copies after 3 steps equal two separately trained copies with stock torch.optim."""
    built = build(_spec(TINY["mlp"], f"fp32-{opt}-x2"))
    separate = [copy.deepcopy(m) for m in built.model]
    assert not torch.equal(separate[0].net[0].weight, separate[1].net[0].weight)  # distinct initializations
    assert built.lrs == copy_lrs(opt, 2) and built.lrs[0] != built.lrs[1]
    step = built.make_train_step("cpu")
    for _ in range(3):
        fused_losses = step()
    x, y = built.export_inputs[0], built.targets
    for i, model in enumerate(separate):
        o = make_optimizer(opt, model.parameters(), built.lrs[i])
        for _ in range(3):
            o.zero_grad()
            loss = built.loss_fn(model(x), y)  # type: ignore[misc]
            loss.backward()
            o.step()
        for name, p in model.named_parameters():
            torch.testing.assert_close(step.params[name][i], p, rtol=1e-4, atol=1e-5)  # type: ignore[attr-defined]
    assert fused_losses.shape == (2,)


@pytest.mark.parametrize("prefix", [
    pytest.param("resnet.resnet18-bs2-img32", marks=pytest.mark.slow),
    pytest.param("mobilenet.mobilenet_v2-bs2-img32", marks=pytest.mark.slow),
    "mlp.mlp-w32-d2-bs2-in16", "lstm.lstm-v50-e8-h16-l2-bs2-seq6", "bert.bert-v50-m16-h2-l2-bs2-seq6",
])
def test_fused_models_train(prefix: str) -> None:
    spec = _spec(prefix, "bf16-adam-x2")
    _one_step(spec)


def test_fused_batchnorm_keeps_per_copy_running_stats() -> None:
    step = build(_spec("resnet.resnet18-bs2-img32", "fp32-sgd-x2")).make_train_step("cpu")
    step()
    rm = step.buffers["bn1.running_mean"]  # type: ignore[attr-defined]
    assert rm.shape[0] == 2 and rm.abs().sum() > 0 and not torch.equal(rm[0], rm[1])
    assert step.buffers["bn1.num_batches_tracked"].tolist() == [1, 1]  # type: ignore[attr-defined]


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_loop_rnn_matches_torch(cell: str) -> None:
    rnn = getattr(torch.nn, cell)(5, 7, num_layers=2, batch_first=True)
    x = torch.randn(3, 4, 5)
    torch.testing.assert_close(LoopRNN(rnn)(x)[0], rnn(x)[0], rtol=1e-5, atol=1e-6)


# Rebuilt published workloads (gpupred.importers): tiny sizes where the architecture allows.
PUBLISHED = {
    "resnet18_cifar": "resnet.resnet18_cifar-bs2-img32",
    "vgg11_cifar": "vgg.vgg11_cifar-bs2-img32",
    "mobilenet_v2_cifar": "mobilenet.mobilenet_v2_cifar-bs2-img32",
    "efficientnet_b0_cifar": "efficientnet.efficientnet_b0_cifar-bs2-img32",
    "bert_qa": "bert.bert_qa-v50-m16-h2-l2-bs2-seq6",
    "seq2seq": "seq2seq.transformer-v50-t60-m16-h2-l2-bs2-seq7",
    "pointnet": "pointnet.pointnet_cls-c4-bs3-pts20",
    "fcnet_pyramid": "fcnet.fc_pyramid-o3-d3-bs4-in40",
    "fcnet_binary": "fcnet.fc_gradual-o1-d2-bs4-in40",
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_workload_builds_and_trains_one_step(name: str) -> None:
    _one_step(_spec(PUBLISHED[name], "fp32-adam" if name in ("bert_qa", "seq2seq", "pointnet") or "fcnet" in name else "fp32-sgd"))


def test_published_parameter_counts() -> None:
    """Parameter counts of the rebuilt CIFAR models match kuangliu/pytorch-cifar's; BERT-QA differs from HF
    bert-base-uncased QA (108,893,186) by exactly the documented approximations."""
    from gpupred.workloads import models

    counts = {arch: sum(p.numel() for p in cls().parameters()) for arch, cls in models.CIFAR_MODELS.items()}
    assert counts["resnet18_cifar"] == 11_173_962
    assert counts["vgg11_cifar"] == 9_231_114
    assert counts["mobilenet_v2_cifar"] == 2_296_922
    bert = build(WorkloadSpec.from_id("bert.bert_qa-v30522-m768-h12-l12-bs1-seq384-fp32-adam"))
    # no token-type table (2 x 768) and 384 instead of 512 positions (128 x 768)
    assert _trainable(bert) + 2 * 768 + 128 * 768 == 108_893_186
    widths = [m.out_features for m in build(_spec(PUBLISHED["fcnet_pyramid"])).model.model if isinstance(m, torch.nn.Linear)]
    assert widths == [20, 10, 5, 3]


@pytest.mark.parametrize("name", ["mlp", "dcgan", "neumf"])
def test_fp16_autocast_with_loss_scaler_step(name: str) -> None:
    _one_step(_spec(TINY[name], "fp16-adam"))


def test_fp16_uses_a_loss_scaler_and_bf16_does_not() -> None:
    from gpupred.workloads.batches import Amp

    fp16, bf16 = Amp("fp16", "cpu"), Amp("bf16", "cpu")
    assert fp16.enabled and fp16.dtype == torch.float16 and fp16.scaler.is_enabled()
    assert bf16.enabled and bf16.dtype == torch.bfloat16 and not bf16.scaler.is_enabled()
    assert not Amp("fp32", "cpu").enabled
    model = torch.nn.Linear(4, 2)
    with fp16.autocast():
        out = model(torch.randn(3, 4))
    assert out.dtype == torch.float16
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fp16.backward_step(out.float().sum(), opt)
    assert fp16.scaler.get_scale() > 1  # the scaled loss went through backward and the scale was updated
