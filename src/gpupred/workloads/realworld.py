"""Real-world architectures as workload families (issue 40): timm and Hugging Face models, built from code and configs.

The catalog's 18 families are textbook models; users train timm and Hugging Face architectures. These families
(:data:`REALWORLD_ARCHS`, ``Family.realworld`` in :mod:`gpupred.workloads.spec`) are built by name through
:mod:`gpupred.workloads.hubmodels`, the route of ``gpupred predict --timm/--hf`` (one way to build a timm or Hugging Face
model, not two): timm's registry, and transformers config classes given the published dimensions written here
(never a hub download). They are not in :func:`gpupred.workloads.catalog.catalog` (its sampling and
``plans/h100-solo.txt`` are unchanged): :func:`realworld_catalog` lists their specs, each architecture at 3-4 batch
sizes in fp32 and bf16 (SGD with momentum for the RegNets, EfficientNetV2 and NFNets as their papers trained them,
Adam for ConvNeXt, which its paper trained with AdamW, and for every transformer), and
``plans/realworld-solo.txt`` (``gpupred plan realworld``) is its sweep plan. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpupred.errors import GpupredError
from gpupred.workloads.hubmodels import NamedModel, hf_model, timm_model
from gpupred.workloads.spec import FAMILIES, WorkloadSpec


@dataclass(frozen=True)
class RealArch:
    """One real-world architecture: how it is built by name, and the input size, batch sizes and optimizer it sweeps."""

    family: str
    arch: str
    source: str  # timm or hf
    name: str  # timm's registry name, or a transformers model type
    size: int  # image side (timm), or tokens per sample (hf; Whisper: decoder tokens, its encoder takes 30 s of audio)
    batches: tuple[int, ...]  # batch sizes swept (sized for an 80 GB card; out-of-memory runs are kept as such)
    optimizer: str = "adam"
    head: str | None = None  # hf: the head (gpupred.workloads.hubmodels.HEADS)
    config: dict[str, Any] = field(default_factory=dict)  # hf: published dimensions over the config class's defaults

    def named(self, input_size: int | None = None) -> NamedModel:
        """The named model of this architecture at an input size (default: its own)."""
        size = input_size or self.size
        if self.source == "timm":
            return timm_model(self.name, image_size=size)
        return hf_model(self.name, head=self.head, seq_len=size, attention="eager", **self.config)  # as measured


_CNN = (32, 64, 128, 256)
_CNN_LARGE = (16, 32, 64, 128)
REALWORLD_ARCHS: tuple[RealArch, ...] = (
    # timm (Wightman, pytorch-image-models): registry names, random weights
    RealArch("convnext", "convnext_tiny", "timm", "convnext_tiny", 224, _CNN, "adam"),
    RealArch("convnext", "convnext_small", "timm", "convnext_small", 224, _CNN_LARGE, "adam"),
    RealArch("convnext", "convnextv2_tiny", "timm", "convnextv2_tiny", 224, _CNN, "adam"),
    RealArch("swin", "swin_tiny_patch4_window7_224", "timm", "swin_tiny_patch4_window7_224", 224, _CNN),
    RealArch("swin", "swin_small_patch4_window7_224", "timm", "swin_small_patch4_window7_224", 224, _CNN_LARGE),
    RealArch("swin", "swinv2_tiny_window8_256", "timm", "swinv2_tiny_window8_256", 256, _CNN_LARGE),
    RealArch("regnet", "regnety_016", "timm", "regnety_016", 224, _CNN, "sgd"),
    RealArch("regnet", "regnety_040", "timm", "regnety_040", 224, _CNN_LARGE, "sgd"),
    RealArch("regnet", "regnetx_032", "timm", "regnetx_032", 224, _CNN_LARGE, "sgd"),
    RealArch("effnetv2", "efficientnetv2_rw_s", "timm", "efficientnetv2_rw_s", 288, _CNN_LARGE, "sgd"),
    RealArch("effnetv2", "tf_efficientnetv2_b3", "timm", "tf_efficientnetv2_b3", 240, _CNN, "sgd"),
    RealArch("maxvit", "maxvit_tiny_tf_224", "timm", "maxvit_tiny_tf_224", 224, _CNN_LARGE),
    RealArch("deit", "deit_small_patch16_224", "timm", "deit_small_patch16_224", 224, _CNN),
    RealArch("deit", "deit_base_patch16_224", "timm", "deit_base_patch16_224", 224, _CNN_LARGE),
    RealArch("nfnet", "dm_nfnet_f0", "timm", "dm_nfnet_f0", 192, _CNN_LARGE, "sgd"),
    RealArch("nfnet", "eca_nfnet_l0", "timm", "eca_nfnet_l0", 224, _CNN_LARGE, "sgd"),
    # Hugging Face transformers: config classes with the published dimensions of each checkpoint's config.json
    RealArch("hfbert", "bert_base", "hf", "bert", 512, (8, 16, 32, 64), head="masked-lm"),
    RealArch("hfbert", "bert_large", "hf", "bert", 512, (4, 8, 16, 32), head="masked-lm",
             config={"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}),
    RealArch("roberta", "roberta_base", "hf", "roberta", 512, (8, 16, 32, 64), head="masked-lm",
             config={"vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1,
                     "bos_token_id": 0, "eos_token_id": 2}),
    RealArch("gpt2", "gpt2_medium", "hf", "gpt2", 1024, (2, 4, 8, 16), head="causal-lm",
             config={"n_embd": 1024, "n_layer": 24, "n_head": 16}),
    RealArch("gpt2", "gpt2_large", "hf", "gpt2", 1024, (1, 2, 4, 8), head="causal-lm",
             config={"n_embd": 1280, "n_layer": 36, "n_head": 20}),
    RealArch("llama", "llama_1b", "hf", "llama", 2048, (1, 2, 4), head="causal-lm",  # TinyLlama-1.1B's dimensions
             config={"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
                     "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}),
    RealArch("t5", "t5_small", "hf", "t5", 512, (8, 16, 32, 64), head="seq2seq-lm"),  # T5Config's defaults: t5-small
    RealArch("t5", "t5_base", "hf", "t5", 512, (4, 8, 16, 32), head="seq2seq-lm",
             config={"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12}),
    RealArch("bart", "bart_base", "hf", "bart", 512, (4, 8, 16, 32), head="seq2seq-lm",
             config={"d_model": 768, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 12,
                     "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072}),
    RealArch("whisper", "whisper_small", "hf", "whisper", 448, (4, 8, 16, 32), head="speech-seq2seq",
             config={"d_model": 768, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 12,
                     "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
                     "vocab_size": 51865, "num_mel_bins": 80, "max_source_positions": 1500, "max_target_positions": 448}),
    RealArch("pegasusx", "pegasus_x_base", "hf", "pegasus_x", 2048, (2, 4, 8, 16), head="seq2seq-lm",
             config={"d_model": 768, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 12,
                     "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
                     "vocab_size": 96103, "block_size": 512, "num_global_tokens": 128, "max_position_embeddings": 16384}),
)
REALWORLD_PRECISIONS: tuple[str, ...] = ("fp32", "bf16")
_BY_ARCH: dict[tuple[str, str], RealArch] = {(a.family, a.arch): a for a in REALWORLD_ARCHS}


def real_arch(spec: WorkloadSpec) -> RealArch | None:
    """The real-world architecture a spec names, else None (a catalog or imported family)."""
    return _BY_ARCH.get((spec.family, spec.arch))


def named_for(spec: WorkloadSpec) -> NamedModel:
    """The named model (gpupred.workloads.hubmodels) a real-world spec builds, at the spec's input size."""
    arch = real_arch(spec)
    if arch is None:
        raise GpupredError(f"workload {spec.id!r}: {spec.family}.{spec.arch} is not a real-world architecture")
    return arch.named(spec.input_size)


def realworld_catalog() -> list[WorkloadSpec]:
    """Every real-world spec: each architecture at its batch sizes, fp32 then bf16, interleaved over architectures."""
    groups = [[WorkloadSpec(a.family, a.arch, bs, a.size, p, a.optimizer)  # type: ignore[arg-type]
               for bs in a.batches for p in REALWORLD_PRECISIONS] for a in REALWORLD_ARCHS]
    return [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]


# the fine-tune plan's sequence lengths beyond each architecture's own (plans/finetune.txt, the campaign's stage 3)
FINETUNE_LENGTHS: dict[tuple[str, str], tuple[int, ...]] = {("llama", "llama_1b"): (512, 1024),
                                                           ("gpt2", "gpt2_medium"): (512,)}


def finetune_catalog() -> list[WorkloadSpec]:
    """The real-world specs the fine-tune plan adds: each architecture at its other sequence lengths (bf16, Adam, one
    per length: the graph store keeps one graph per architecture and length)."""
    return [WorkloadSpec(family, arch, 1, seq, "bf16", _BY_ARCH[(family, arch)].optimizer)  # type: ignore[arg-type]
            for (family, arch), seqs in FINETUNE_LENGTHS.items() for seq in seqs]


def check_families() -> None:
    """Every real-world architecture is one of its family's (spec.FAMILIES), and every realworld family has one."""
    for a in REALWORLD_ARCHS:
        fam = FAMILIES.get(a.family)
        if fam is None or not fam.realworld or a.arch not in fam.archs:
            raise GpupredError(f"{a.family}.{a.arch}: not a real-world architecture of gpupred.workloads.spec.FAMILIES")
    missing = {f for f, fam in FAMILIES.items() if fam.realworld} - {a.family for a in REALWORLD_ARCHS}
    if missing:
        raise GpupredError(f"real-world families without architectures: {', '.join(sorted(missing))}")
