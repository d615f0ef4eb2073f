"""The workload spec: a frozen description of one training job, and its stable readable id.

Id grammar (the join key everywhere)::

    <family>.<arch>[-<knob><int>...]-bs<int>[-<img|seq|in|pts><int>]-<fp32|bf16|fp16>-<sgd|adam>[-x<int>]

e.g. ``resnet.resnet50-bs64-img224-bf16-sgd`` or ``lstm.lstm-v10000-e256-h512-l2-bs32-seq64-fp32-adam``.
``x<F>`` marks F fused copies (inter-trial fusion) and is left out when F is 1. ``family`` is the
architecture family used by leave-one-family-out evaluation (resnet18/50/101 are one family).

Precisions: ``fp32``; ``bf16`` and ``fp16`` are autocast mixed precision (fp32 master weights; fp16 adds
a dynamic loss scaler, as ``torch.amp.GradScaler`` does). The sweep catalog uses fp32 and bf16 only; fp16
is there for published workloads trained with AMP (Lucid's ``amp`` column, :mod:`gpupred.importers`).
Families and architectures marked ``in_catalog=False`` / ``extra_archs`` are not sampled by the catalog:
they rebuild workloads that other groups measured (CIFAR variants of torchvision models, PointNet, the
encoder-decoder Transformer, GPUMemNet's fully connected networks...).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Literal

from gpupred.errors import GpupredError
from gpupred.workloads.fcnet import SHAPES as FC_SHAPES

Precision = Literal["fp32", "bf16", "fp16"]
Optimizer = Literal["sgd", "adam"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
HALF_PRECISIONS: tuple[str, ...] = ("bf16", "fp16")  # autocast mixed precision
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")


@dataclass(frozen=True)
class Family:
    """What a family is: its kind, the input token of its ids, its knobs in id order, its architectures.

    ``archs`` are the ones the sweep catalog samples; ``extra_archs`` are valid too but rebuilt only for
    published measurements; a family with ``in_catalog=False`` is not in the catalog at all. A ``realworld`` family
    is a timm or Hugging Face architecture built by name (:mod:`gpupred.workloads.realworld`), swept by its own plan.
    """

    name: str
    kind: Literal["cnn", "mlp", "rnn", "transformer", "gan", "recsys", "pointcloud"]
    input_token: Literal["img", "seq", "in", "pts", ""]
    knobs: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()
    extra_archs: tuple[str, ...] = ()
    in_catalog: bool = True
    realworld: bool = False

    @property
    def all_archs(self) -> tuple[str, ...]:
        """Catalog and extra architectures."""
        return self.archs + self.extra_archs


# knob letters: w width, d depth, v vocab, e embedding, h hidden (rnn) / heads (transformer),
# l layers, m d_model, f feed-forward, z latent, g generator width, k discriminator width,
# u users, i items, c classes, o output features, t target vocabulary.
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        # *_cifar: the CIFAR-10 variants (3x3 stem, no early downsampling) that Lucid trained
        Family("resnet", "cnn", "img", archs=("resnet18", "resnet50", "resnet101"), extra_archs=("resnet18_cifar",)),
        Family("vgg", "cnn", "img", archs=("vgg11", "vgg16"), extra_archs=("vgg11_cifar",)),
        Family("alexnet", "cnn", "img", archs=("alexnet",)),
        Family("googlenet", "cnn", "img", archs=("googlenet",)),
        Family("inception", "cnn", "img", archs=("inception_v3",)),
        Family("mobilenet", "cnn", "img", archs=("mobilenet_v2", "mobilenet_v3_large"),
               extra_archs=("mobilenet_v2_cifar", "mobilenet_v3_small")),
        Family("densenet", "cnn", "img", archs=("densenet121",)),
        Family("efficientnet", "cnn", "img", archs=("efficientnet_b0",), extra_archs=("efficientnet_b0_cifar",)),
        Family("squeezenet", "cnn", "img", archs=("squeezenet1_1",)),
        Family("shufflenet", "cnn", "img", archs=("shufflenet_v2_x1_0",)),
        Family("vit", "transformer", "img", archs=("vit_b_16",)),
        Family("mlp", "mlp", "in", knobs=("w", "d"), archs=("mlp",)),
        Family("lstm", "rnn", "seq", knobs=("v", "e", "h", "l"), archs=("lstm",)),
        Family("gru", "rnn", "seq", knobs=("v", "e", "h", "l"), archs=("gru",)),
        # bert_qa: the encoder with a span (start/end) head instead of the vocabulary head (SQuAD fine-tuning)
        Family("bert", "transformer", "seq", knobs=("v", "m", "h", "l"), archs=("bert",), extra_archs=("bert_qa",)),
        Family("gpt", "transformer", "seq", knobs=("v", "m", "h", "l"), archs=("gpt",)),
        Family("dcgan", "gan", "img", knobs=("z", "g", "k"), archs=("dcgan",)),
        Family("neumf", "recsys", "", knobs=("u", "i", "e", "l"), archs=("neumf",)),
        # published workloads only (not in the sweep catalog)
        # encoder-decoder Transformer (Vaswani et al.): v source vocab, t target vocab, l layers each side, ff = 4m
        Family("seq2seq", "transformer", "seq", knobs=("v", "t", "m", "h", "l"), archs=("transformer",), in_catalog=False),
        # PointNet classifier (Qi et al. 2017) over pts points, c classes, no feature transform
        Family("pointnet", "pointcloud", "pts", knobs=("c",), archs=("pointnet_cls",), in_catalog=False),
        # GPUMemNet's fully connected networks: in input features, o output features, d hidden layers; the
        # architecture names the width rule (gpupred.workloads.fcnet.fc_widths)
        Family("fcnet", "mlp", "in", knobs=("o", "d"), archs=FC_SHAPES, in_catalog=False),
        # real-world architectures (issue 40): timm and Hugging Face models built by name from code and configs
        # (gpupred.workloads.realworld: how each is built, its batch sizes); not in the sweep catalog, swept by
        # plans/realworld-solo.txt. Images (img) for timm, tokens per sample (seq) for Hugging Face.
        *(Family(name, kind, token, archs=archs, in_catalog=False, realworld=True) for name, kind, token, archs in (
            ("convnext", "cnn", "img", ("convnext_tiny", "convnext_small", "convnextv2_tiny")),
            ("swin", "transformer", "img", ("swin_tiny_patch4_window7_224", "swin_small_patch4_window7_224",
                                            "swinv2_tiny_window8_256")),
            ("regnet", "cnn", "img", ("regnety_016", "regnety_040", "regnetx_032")),
            ("effnetv2", "cnn", "img", ("efficientnetv2_rw_s", "tf_efficientnetv2_b3")),
            ("maxvit", "transformer", "img", ("maxvit_tiny_tf_224",)),
            ("deit", "transformer", "img", ("deit_small_patch16_224", "deit_base_patch16_224")),
            ("nfnet", "cnn", "img", ("dm_nfnet_f0", "eca_nfnet_l0")),
            ("hfbert", "transformer", "seq", ("bert_base", "bert_large")),
            ("roberta", "transformer", "seq", ("roberta_base",)),
            ("gpt2", "transformer", "seq", ("gpt2_medium", "gpt2_large")),
            ("llama", "transformer", "seq", ("llama_1b",)),
            ("t5", "transformer", "seq", ("t5_small", "t5_base")),
            ("bart", "transformer", "seq", ("bart_base",)),
            ("whisper", "transformer", "seq", ("whisper_small",)),
            ("pegasusx", "transformer", "seq", ("pegasus_x_base",)),
        )),
    )
}
REALWORLD_FAMILIES: tuple[str, ...] = tuple(f for f, fam in FAMILIES.items() if fam.realworld)
CATALOG_FAMILIES: tuple[str, ...] = tuple(f for f, fam in FAMILIES.items() if fam.in_catalog)

_TOKEN = re.compile(r"^([a-z]+)(\d+)$")


@dataclass(frozen=True)
class WorkloadSpec:
    """One training job: family, architecture, knobs, batch size, input size, precision, optimizer."""

    family: str
    arch: str
    batch_size: int
    input_size: int = 0  # image side, sequence length or input features; 0 where the family has none
    precision: Precision = "fp32"
    optimizer: Optimizer = "sgd"
    knobs: tuple[tuple[str, int], ...] = field(default=())  # in the family's knob order
    fused: int = 1  # F independent copies trained as one job (torch.func vmap)

    def __post_init__(self) -> None:
        fam = FAMILIES.get(self.family)
        if fam is None:
            raise GpupredError(f"unknown workload family {self.family!r}; known: {', '.join(FAMILIES)}")
        if self.arch not in fam.all_archs:
            raise GpupredError(
                f"unknown architecture {self.arch!r} for family {self.family!r}; known: {', '.join(fam.all_archs)}")
        if tuple(k for k, _ in self.knobs) != fam.knobs:
            raise GpupredError(f"family {self.family!r} needs knobs {fam.knobs}, got {tuple(k for k, _ in self.knobs)}")
        if self.precision not in PRECISIONS:
            raise GpupredError(f"unknown precision {self.precision!r}; known: {', '.join(PRECISIONS)}")
        if self.optimizer not in OPTIMIZERS:
            raise GpupredError(f"unknown optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZERS)}")
        if self.batch_size < 1 or self.fused < 1 or (fam.input_token and self.input_size < 1):
            raise GpupredError(f"batch size, fused count and input size must be positive: {self!r}")
        if self.fused > 1 and self.precision == "fp16":
            raise GpupredError(f"fused copies train in fp32 or bf16, not fp16 (no loss scaler for stacked copies): {self!r}")

    @property
    def kind(self) -> str:
        """The broad kind of model (cnn, rnn, transformer, ...)."""
        return FAMILIES[self.family].kind

    @property
    def knob(self) -> dict[str, int]:
        """Knobs as a dict, e.g. ``{'w': 1024, 'd': 4}``."""
        return dict(self.knobs)

    @property
    def arch_key(self) -> str:
        """The id without batch size, precision and optimizer: one ONNX export serves all of them."""
        parts = [f"{self.family}.{self.arch}", *(f"{k}{v}" for k, v in self.knobs)]
        token = FAMILIES[self.family].input_token
        if token:
            parts.append(f"{token}{self.input_size}")
        if self.fused != 1:
            parts.append(f"x{self.fused}")
        return "-".join(parts)

    @property
    def id(self) -> str:
        """The stable readable id, e.g. ``resnet.resnet50-bs64-img224-bf16-sgd``."""
        parts = [f"{self.family}.{self.arch}", *(f"{k}{v}" for k, v in self.knobs), f"bs{self.batch_size}"]
        token = FAMILIES[self.family].input_token
        if token:
            parts.append(f"{token}{self.input_size}")
        parts += [self.precision, self.optimizer]
        if self.fused != 1:
            parts.append(f"x{self.fused}")
        return "-".join(parts)

    def to_json(self) -> str:
        """The spec as a JSON object (stored with every run)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "WorkloadSpec":
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        d["knobs"] = tuple((str(k), int(v)) for k, v in d.get("knobs", ()))
        return cls(**d)

    @classmethod
    def from_record(cls, workload_id: str, spec_json: object = None) -> "WorkloadSpec":
        """A run's spec: its recorded JSON when it has a readable one (a fused or knobbed spec), else its id parsed."""
        if isinstance(spec_json, str) and spec_json:
            try:
                return cls.from_json(spec_json)
            except (ValueError, TypeError, KeyError):
                pass
        return cls.from_id(workload_id)

    @classmethod
    def from_id(cls, workload_id: str) -> "WorkloadSpec":
        """Parse an id; raise :class:`GpupredError` naming the id if it is not one. The last ``PARSED_IDS`` ids parsed
        are kept (a spec is frozen: every caller may share it; a scheduler's queue parses each job's id a few times)."""
        key = (cls, workload_id)
        spec = _PARSED.get(key)
        if spec is None:
            spec = _PARSED[key] = cls._parse_id(workload_id)
            if len(_PARSED) > PARSED_IDS:
                _PARSED.pop(next(iter(_PARSED)))
        return spec

    @classmethod
    def _parse_id(cls, workload_id: str) -> "WorkloadSpec":
        """:meth:`from_id`'s parse."""
        try:
            head, *tokens = workload_id.strip().split("-")
            family, arch = head.split(".", 1)
            fused = 1
            if tokens and re.fullmatch(r"x\d+", tokens[-1]):
                fused = int(tokens.pop()[1:])
            optimizer, precision = tokens.pop(), tokens.pop()
            fam = FAMILIES[family]
            input_size = 0
            if fam.input_token:
                m = _TOKEN.match(tokens.pop())
                if not m or m.group(1) != fam.input_token:
                    raise ValueError("input token")
                input_size = int(m.group(2))
            m = _TOKEN.match(tokens.pop())
            if not m or m.group(1) != "bs":
                raise ValueError("batch token")
            knobs = []
            for tok in tokens:
                km = _TOKEN.match(tok)
                if not km:
                    raise ValueError(tok)
                knobs.append((km.group(1), int(km.group(2))))
            return cls(family, arch, int(m.group(2)), input_size, precision, optimizer, tuple(knobs), fused)  # type: ignore[arg-type]
        except GpupredError as err:
            raise GpupredError(f"workload id {workload_id!r}: {err}") from None
        except (ValueError, IndexError, KeyError):
            raise GpupredError(
                f"not a workload id: {workload_id!r} (expected <family>.<arch>[-knobs]-bs<N>[-img|seq|in|pts<N>]-<fp32|bf16|fp16>-<sgd|adam>; "
                "`gpupred zoo list` shows the catalog)"
            ) from None


PARSED_IDS = 4096  # workload ids whose specs from_id keeps
_PARSED: dict[tuple[type, str], WorkloadSpec] = {}


def spec_or_none(workload_id: str) -> WorkloadSpec | None:
    """The spec of a workload id, or None when the id is not one (an imported job's, a malformed one)."""
    try:
        return WorkloadSpec.from_id(workload_id)
    except (GpupredError, ValueError, KeyError):
        return None
