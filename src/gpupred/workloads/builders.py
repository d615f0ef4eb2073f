"""Build a workload spec into torch modules, a synthetic batch and a one-iteration training step.

This module imports torch at top level: import it only from code that needs torch (the profiler's
child process, ONNX export), never from the light path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gpupred.errors import GpupredError
from gpupred.workloads import models
from gpupred.workloads.batches import Amp, Batches
from gpupred.workloads.fcnet import fc_widths
from gpupred.workloads.spec import FAMILIES, WorkloadSpec

LossFn = Callable[[Any, tuple[Tensor, ...]], Tensor]

BASE_LR: dict[str, float] = {"sgd": 0.01, "adam": 1e-3}  # base learning rate per optimizer
SGD_MOMENTUM = 0.9
SEED = 0  # base seed: copy i of a fused job and its synthetic batch derive from it


@dataclass
class _Task:
    """One family's trainable module, synthetic inputs/targets and loss."""

    model: nn.Module
    inputs: tuple[Tensor, ...]
    input_names: list[str]
    targets: tuple[Tensor, ...]
    loss_fn: LossFn


@dataclass
class BuiltWorkload:
    """A spec built into torch: trainable model(s), what ONNX export traces, example inputs, a train-step factory.

    ``export_model`` shares its parameters with ``model``; export before calling ``make_train_step`` on
    another device (that moves the model). For a fused spec, ``model`` is an ``nn.ModuleList`` of the F
    copies, ``export_model`` runs every copy on the shared input, and ``lrs`` holds each copy's learning rate.
    ``batch_size`` is per copy: every copy trains on the same batch.
    """

    spec: WorkloadSpec
    model: nn.Module
    export_model: nn.Module
    export_inputs: tuple[Tensor, ...]
    input_names: list[str]
    batch_axes: tuple[int, ...]
    targets: tuple[Tensor, ...] = field(repr=False)
    loss_fn: LossFn | None = field(repr=False)
    lrs: tuple[float, ...] = ()

    def make_train_step(self, device: str = "cpu", host_batches: bool = False,
                        batches: Callable[[], tuple[Tensor, ...]] | None = None) -> Callable[[], Tensor]:
        """A closure running one full training iteration on ``device``; it returns the loss (not synced).

        ``batches``: where each step's batch comes from (inputs then targets, on ``device``), e.g. a
        :class:`gpupred.workloads.batches.FeedBatches` over a DataLoader; None: the synthetic batch, resident or
        copied from pinned host memory (``host_batches``)."""
        if batches is not None and (self.spec.fused > 1 or self.spec.family == "dcgan"):
            raise GpupredError(f"workload {self.spec.id!r}: a batch source feeds plain (unfused, non-GAN) steps only")
        if self.spec.fused > 1:
            from gpupred.workloads.fused import FusedTrainStep

            assert isinstance(self.model, nn.ModuleList) and self.loss_fn is not None
            return FusedTrainStep(
                list(self.model), self.loss_fn, self.export_inputs, self.targets, self.lrs, self.spec, device, host_batches
            )
        if self.spec.family == "dcgan":
            return _dcgan_step(self, device, host_batches)
        assert self.loss_fn is not None
        model = self.model.to(device).train()
        opt = make_optimizer(self.spec.optimizer, model.parameters(), self.lrs[0])
        batch = batches or Batches(self.export_inputs + self.targets, device, host_batches)
        n_in, loss_fn = len(self.export_inputs), self.loss_fn
        amp = Amp(self.spec.precision, device)

        def step() -> Tensor:
            data = batch()
            opt.zero_grad(set_to_none=True)
            with amp.autocast():
                loss = loss_fn(model(*data[:n_in]), data[n_in:])
            amp.backward_step(loss, opt)
            return loss.detach()

        return step


def make_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    """SGD with momentum 0.9 or Adam, at learning rate ``lr``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise GpupredError(f"unknown optimizer {name!r}; known: sgd, adam")


def cross_entropy(out: Tensor, targets: tuple[Tensor, ...]) -> Tensor:
    """Cross-entropy over the last axis (classification or per-token), ignoring target -100."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), targets[0].reshape(-1), ignore_index=-100)


def _span_ce(out: Tensor, targets: tuple[Tensor, ...]) -> Tensor:
    """Mean of the start and end cross-entropies of a span head ``[B, S, 2]`` (targets ``[B, 2]``)."""
    logits = out.float()
    return (F.cross_entropy(logits[..., 0], targets[0][:, 0]) + F.cross_entropy(logits[..., 1], targets[0][:, 1])) / 2


def _bce(out: Tensor, targets: tuple[Tensor, ...]) -> Tensor:
    """Binary cross-entropy on logits."""
    return F.binary_cross_entropy_with_logits(out.float(), targets[0])


def _num_classes(image_size: int) -> int:
    """CIFAR-like 10 classes for small images, ImageNet's 1000 otherwise."""
    return 10 if image_size <= 64 else 1000


def _torchvision(spec: WorkloadSpec) -> nn.Module:
    """A torchvision classifier with random weights (never downloads), or a CIFAR variant (``*_cifar``)."""
    if spec.arch in models.CIFAR_MODELS:
        return models.CIFAR_MODELS[spec.arch](num_classes=_num_classes(spec.input_size))
    import torchvision.models as tvm

    kw: dict[str, Any] = {"weights": None, "num_classes": _num_classes(spec.input_size)}
    if spec.arch in ("inception_v3", "googlenet"):
        kw.update(aux_logits=False, init_weights=False)
        if spec.arch == "inception_v3" and spec.input_size < 75:
            raise GpupredError(f"workload {spec.id!r}: inception_v3 needs images of at least 75x75")
    if spec.arch == "vit_b_16":
        if spec.input_size % 16:
            raise GpupredError(f"workload {spec.id!r}: vit_b_16 needs an image size divisible by 16")
        kw["image_size"] = spec.input_size
    if spec.arch == "alexnet" and spec.input_size < 63:
        raise GpupredError(f"workload {spec.id!r}: alexnet needs images of at least 63x63")
    return tvm.get_model(spec.arch, **kw)


def _task(spec: WorkloadSpec, seed: int, weights: bool = True) -> _Task:
    """Construct one copy of the spec's model (seeded) and its synthetic batch (seeded by SEED)."""
    g = torch.Generator().manual_seed(SEED + 12345)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if FAMILIES[spec.family].realworld:
            return _named_task(spec, g, weights)
        make = _image_task if spec.kind == "cnn" or spec.family == "vit" else _FAMILY_TASKS.get(spec.family)
        if make is not None:
            return make(spec, g)
    raise GpupredError(f"workload {spec.id!r}: no builder for family {spec.family!r}")  # pragma: no cover


def _image_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """A torchvision (or CIFAR) classifier on random images and labels."""
    b, s = spec.batch_size, spec.input_size
    model = _torchvision(spec)
    x = torch.randn(b, 3, s, s, generator=g)
    y = torch.randint(0, _num_classes(s), (b,), generator=g)
    return _Task(model, (x,), ["images"], (y,), cross_entropy)


def _mlp_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """An MLP on random features, 10 classes."""
    b, s, k = spec.batch_size, spec.input_size, spec.knob
    model = models.MLP(s, k["w"], k["d"])
    x = torch.randn(b, s, generator=g)
    y = torch.randint(0, 10, (b,), generator=g)
    return _Task(model, (x,), ["features"], (y,), cross_entropy)


def _rnn_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """An LSTM/GRU language model on random tokens (next-token targets)."""
    b, s, k = spec.batch_size, spec.input_size, spec.knob
    model = models.RNNLM(spec.family, k["v"], k["e"], k["h"], k["l"])
    tokens = torch.randint(0, k["v"], (b, s + 1), generator=g)
    return _Task(model, (tokens[:, :-1].contiguous(),), ["tokens"], (tokens[:, 1:].contiguous(),), cross_entropy)


def _check_heads(spec: WorkloadSpec) -> None:
    """A one-line error unless the transformer's d_model divides into its heads."""
    k = spec.knob
    if k["m"] % k["h"]:
        raise GpupredError(f"workload {spec.id!r}: d_model m{k['m']} is not divisible by heads h{k['h']}")


def _transformer_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """BERT (masked LM, or SQuAD spans for bert_qa) or GPT (next token) on random tokens."""
    b, s, k, fam = spec.batch_size, spec.input_size, spec.knob, spec.family
    _check_heads(spec)
    if spec.arch == "bert_qa":  # SQuAD fine-tuning: start/end logits per token, two cross-entropies
        model = models.TransformerLM(k["v"], k["m"], k["h"], k["l"], s, causal=False, out_features=2)
        x = torch.randint(0, k["v"], (b, s), generator=g)
        span = torch.randint(0, s, (b, 2), generator=g)
        return _Task(model, (x,), ["tokens"], (span,), _span_ce)
    model = models.TransformerLM(k["v"], k["m"], k["h"], k["l"], s, causal=fam == "gpt")
    tokens = torch.randint(0, k["v"], (b, s + 1), generator=g)
    if fam == "gpt":
        return _Task(model, (tokens[:, :-1].contiguous(),), ["tokens"], (tokens[:, 1:].contiguous(),), cross_entropy)
    x = tokens[:, :-1].contiguous()
    masked = torch.rand(b, s, generator=g) < 0.15  # masked-LM: loss on 15% of positions
    y = torch.where(masked, x, torch.full_like(x, -100))
    return _Task(model, (x,), ["tokens"], (y,), cross_entropy)


def _dcgan_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """A DCGAN on random latents and random real images (its step is :func:`_dcgan_step`)."""
    b, s, k = spec.batch_size, spec.input_size, spec.knob
    try:
        model = models.DCGAN(k["z"], k["g"], k["k"], s)
    except ValueError as err:
        raise GpupredError(f"workload {spec.id!r}: {err}") from None
    z = torch.randn(b, k["z"], 1, 1, generator=g)
    real = torch.rand(b, 3, s, s, generator=g) * 2 - 1
    return _Task(model, (z, real), ["latent", "images"], (), _bce)


def _seq2seq_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """An encoder-decoder transformer on random source and target tokens (next target token)."""
    b, s, k = spec.batch_size, spec.input_size, spec.knob
    _check_heads(spec)
    model = models.Seq2SeqTransformer(k["v"], k["t"], k["m"], k["h"], k["l"], s)
    src = torch.randint(0, k["v"], (b, s), generator=g)
    tgt = torch.randint(0, k["t"], (b, s + 1), generator=g)
    return _Task(model, (src, tgt[:, :-1].contiguous()), ["source", "target"], (tgt[:, 1:].contiguous(),), cross_entropy)


def _pointnet_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """A PointNet classifier on random point clouds."""
    b, s, k = spec.batch_size, spec.input_size, spec.knob
    model = models.PointNetCls(k["c"])
    points = torch.randn(b, 3, s, generator=g)
    return _Task(model, (points,), ["points"], (torch.randint(0, k["c"], (b,), generator=g),), cross_entropy)


def _fcnet_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """A GPUMemNet fully connected net on random features (BCE for one output, cross-entropy otherwise)."""
    b, s, k = spec.batch_size, spec.input_size, spec.knob
    model = models.FCNet(s, fc_widths(s, k["o"], k["d"], spec.arch))
    x = torch.randn(b, s, generator=g)
    if k["o"] == 1:
        return _Task(model, (x,), ["features"], (torch.randint(0, 2, (b, 1), generator=g).float(),), _bce)
    return _Task(model, (x,), ["features"], (torch.randint(0, k["o"], (b,), generator=g),), cross_entropy)


def _neumf_task(spec: WorkloadSpec, g: torch.Generator) -> _Task:
    """A NeuMF recommender on random user/item pairs and clicks."""
    b, k = spec.batch_size, spec.knob
    model = models.NeuMF(k["u"], k["i"], k["e"], k["l"])
    users = torch.randint(0, k["u"], (b,), generator=g)
    items = torch.randint(0, k["i"], (b,), generator=g)
    y = torch.randint(0, 2, (b,), generator=g).float()
    return _Task(model, (users, items), ["users", "items"], (y,), _bce)


class LogitsOf(nn.Module):
    """A timm or Hugging Face model as the profiler trains it: positional input tensors in, the logits out."""

    def __init__(self, model: nn.Module, keys: list[str] | None) -> None:
        super().__init__()
        self.model = model
        self.keys = keys

    def forward(self, *inputs: Tensor) -> Tensor:
        """The logits of the model's forward on ``inputs`` (keyword inputs of a Hugging Face model, in ``keys`` order)."""
        out = self.model(**dict(zip(self.keys, inputs))) if self.keys else self.model(*inputs)
        return out.logits if hasattr(out, "logits") else out


def _named_task(spec: WorkloadSpec, g: torch.Generator, weights: bool = True) -> _Task:
    """A real-world architecture (gpupred.workloads.realworld: timm or transformers, built by name) with seeded random
    weights (on the meta device without ``weights``: only the export wants it), its batch and its head's targets."""
    from gpupred.workloads.hubmodels import build_named
    from gpupred.workloads.realworld import named_for

    built = build_named(named_for(spec), weights=weights, batch=spec.batch_size)
    keys = list(built.example) if isinstance(built.example, dict) else None
    inputs = tuple(built.example.values()) if keys else (built.example,)
    return _Task(LogitsOf(built.model, keys), inputs, keys or ["images"], head_targets(built, spec.batch_size, g), cross_entropy)


def head_targets(built: Any, batch: int, g: torch.Generator) -> tuple[Tensor, ...]:
    """Synthetic targets of a head: a class per sample (image and sequence classification), else a token per output
    position (15% of them for a masked LM, the rest ignored)."""
    cfg = getattr(built.model, "config", None)
    if built.head in ("image-cls", "seq-cls"):
        classes = int(getattr(built.model, "num_classes", 0) or getattr(cfg, "num_labels", 2))
        return (torch.randint(0, classes, (batch,), generator=g),)
    tokens = torch.randint(0, int(cfg.vocab_size), (batch, int(built.seq_len)), generator=g)
    if built.head == "masked-lm":
        tokens = torch.where(torch.rand(tokens.shape, generator=g) < 0.15, tokens, torch.full_like(tokens, -100))
    return (tokens,)


_FAMILY_TASKS: dict[str, Callable[[WorkloadSpec, torch.Generator], _Task]] = {
    "mlp": _mlp_task, "lstm": _rnn_task, "gru": _rnn_task, "bert": _transformer_task, "gpt": _transformer_task,
    "seq2seq": _seq2seq_task, "dcgan": _dcgan_task, "pointnet": _pointnet_task, "fcnet": _fcnet_task,
    "neumf": _neumf_task,
}


class FusedExport(nn.Module):
    """F copies of a model run one after another on the same input; outputs stacked on a new axis 0."""

    def __init__(self, copies: list[nn.Module]) -> None:
        super().__init__()
        self.copies = nn.ModuleList(copies)

    def forward(self, x: Tensor, x2: Tensor | None = None) -> Tensor:
        """Every copy's output, stacked ``[F, ...]`` (a fixed signature, which torch.export prefers to *args)."""
        inputs = (x,) if x2 is None else (x, x2)
        return torch.stack([m(*inputs) for m in self.copies])


def copy_lrs(optimizer: str, copies: int) -> tuple[float, ...]:
    """Per-copy learning rates: the base rate for one copy, log-spaced over base/10..base*10 for F copies."""
    base = BASE_LR[optimizer]
    if copies == 1:
        return (base,)
    return tuple(base * 10 ** (-1 + 2 * i / (copies - 1)) for i in range(copies))


def build(spec: WorkloadSpec, device: str = "cpu", for_export: bool = False) -> BuiltWorkload:
    """Build ``spec`` into modules (random init, no downloads), example inputs and a train-step factory.

    ``for_export``: the modules are only exported, so a real-world architecture is built on the meta device (its graph
    is exported without weights, :mod:`gpupred.graph.weightless`); the other families are built as for training.
    """
    lrs = copy_lrs(spec.optimizer, spec.fused)
    if spec.fused > 1:
        if spec.family == "dcgan":
            raise GpupredError(f"workload {spec.id!r}: fused copies are not supported for dcgan")
        tasks = [_task(spec, SEED + i) for i in range(spec.fused)]
        t0 = tasks[0]
        copies = [t.model.to(device) for t in tasks]
        return BuiltWorkload(
            spec, nn.ModuleList(copies), FusedExport(copies), t0.inputs, t0.input_names,
            tuple(0 for _ in t0.inputs), t0.targets, t0.loss_fn, lrs,
        )
    t = _task(spec, SEED, weights=not for_export)
    model = t.model if for_export else t.model.to(device)
    export = _DCGANExport(model) if spec.family == "dcgan" else model
    return BuiltWorkload(spec, model, export, t.inputs, t.input_names, tuple(0 for _ in t.inputs), t.targets, t.loss_fn, lrs)


class _DCGANExport(nn.Module):
    """One DCGAN iteration's forward compute: G(z), then D on the real and the fake batch."""

    def __init__(self, gan: nn.Module) -> None:
        super().__init__()
        self.gan = gan

    def forward(self, z: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
        """Discriminator logits on real and generated images."""
        return self.gan(z, real)


def _dcgan_step(built: BuiltWorkload, device: str, host_batches: bool) -> Callable[[], Tensor]:
    """One DCGAN iteration: a discriminator step on real+fake, then a generator step."""
    gan = built.model.to(device).train()
    assert isinstance(gan, models.DCGAN)
    lr = built.lrs[0]
    opt_d = make_optimizer(built.spec.optimizer, gan.D.parameters(), lr)
    opt_g = make_optimizer(built.spec.optimizer, gan.G.parameters(), lr)
    batch = Batches(built.export_inputs, device, host_batches)
    amp = Amp(built.spec.precision, device)
    ones = torch.ones(built.spec.batch_size, device=device)
    zeros = torch.zeros(built.spec.batch_size, device=device)

    def step() -> Tensor:
        z, real = batch()
        opt_d.zero_grad(set_to_none=True)
        with amp.autocast():
            fake = gan.G(z)
            loss_d = _bce(gan.D(real), (ones,)) + _bce(gan.D(fake.detach()), (zeros,))
        amp.backward(loss_d)
        amp.step(opt_d)
        opt_g.zero_grad(set_to_none=True)
        with amp.autocast():
            loss_g = _bce(gan.D(fake), (ones,))
        amp.backward(loss_g)
        amp.step(opt_g)
        amp.update()  # one scale update per iteration, after both optimizers (as the AMP DCGAN script does)
        return (loss_d + loss_g).detach()

    return step
