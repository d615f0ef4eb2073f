"""The footprint at full width against torch's own count (gpupred.memory.oracle, issue 78 item 1): decoders with the
published widths of GPT-2 large, LLaMA-7B and Llama 3 8B but only a few layers (FIXTURE configs built here from
transformers' config classes; no weights, nothing downloaded), each exported as ``predict --hf`` exports it and run
through two training steps under FakeTensorMode.

The footprint's torch-allocated peak (its terms at the peak, less cuBLAS's workspaces, which the CPU has not) is held
to 3% of torch's count, 6% where the footprint is known to count one layer too many (measured, torch 2.14,
transformers 5.23, peft 0.21: in ``test_full_width_decoders_against_torch``). At full depth
``benchmarks/bench_memory_oracle.py`` prints the same comparison.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from fixtures_hf import config_files

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")  # the 8-bit optimizer and QLoRA cases

pytestmark = pytest.mark.slow

TOLERANCE = 0.03
WORKSPACE_MIB = 64.0  # cuBLAS's two 32 MiB workspaces on Hopper: counted by the footprint, not on the CPU


def _configs() -> dict[str, dict[str, Any]]:
    """FIXTURE configs: published widths (BERT's: base), 2-4 layers, dropout off (the CPU's masks are 4 bytes, CUDA's
    1)."""
    import transformers

    gpt2 = transformers.GPT2Config(n_layer=4, n_embd=1280, n_head=20, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    gpt2_tanh = transformers.GPT2Config(**{**gpt2.to_diff_dict(), "activation_function": "gelu_pytorch_tanh"})
    llama = transformers.LlamaConfig(num_hidden_layers=2)  # LLaMA-7B's width
    llama3 = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                      max_position_embeddings=8192, rope_theta=500000.0)  # Llama 3 8B's width
    bert = transformers.BertConfig(num_hidden_layers=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    gemma = transformers.GemmaConfig(hidden_size=3072, intermediate_size=24576, num_hidden_layers=2,
                                     num_attention_heads=16, num_key_value_heads=16, head_dim=256,
                                     vocab_size=256000)  # Gemma 7B's width: a tanh-GELU-gated MLP, a 256k vocabulary
    out = {}
    for name, cfg, arch in (("gpt2", gpt2, "GPT2LMHeadModel"), ("gpt2_tanh", gpt2_tanh, "GPT2LMHeadModel"),
                            ("llama", llama, "LlamaForCausalLM"),
                            ("llama3", llama3, "LlamaForCausalLM"), ("bert", bert, "BertForMaskedLM"),
                            ("gemma", gemma, "GemmaForCausalLM")):
        out[name] = {**cfg.to_diff_dict(), "model_type": cfg.model_type, "architectures": [arch]}
    return out


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The FIXTURE config files, and a private graph cache for the module."""
    yield from config_files(tmp_path_factory.mktemp("oracle"), _configs())


def _ours(config_path: Path, seq: int, batch: int, setup: Any, head: str) -> float:
    """The footprint's torch-allocated peak (MiB) of the job, less cuBLAS's workspaces."""
    from gpupred.graph.named import named_graph
    from gpupred.workloads.hubmodels import hf_model

    attention = None if setup.attention == "auto" else setup.attention  # auto: transformers' default, SDPA
    graph = named_graph(hf_model(str(config_path), seq_len=seq, attention=attention, head=head))
    return _allocated(graph, config_path.parent.name, batch, setup)


def _allocated(graph: Any, label: str, batch: int, setup: Any) -> float:
    """The footprint's torch-allocated peak (MiB) of a graph's job, less cuBLAS's workspaces."""
    import pandas as pd

    from gpupred.memory.physics import allocated_mib
    from gpupred.predictor.core import memory_row
    from gpupred.predictor.jobgraph import JobGraph

    row = memory_row(JobGraph(graph, label, batch, setup), "H100 SXM")
    return float(allocated_mib(pd.DataFrame([row]))[0]) - WORKSPACE_MIB


CASES = {  # name: (config, seq, batch, precision, setup options, tolerance)
    "gpt2 fp32 sdpa": ("gpt2", 512, 4, "fp32", {}, TOLERANCE),
    "gpt2 bf16 eager": ("gpt2", 512, 4, "bf16", {"attention": "eager"}, TOLERANCE),
    # torch's fused tanh GELU (gelu_pytorch_tanh: Gemma's, SigLIP's) saves its input alone; counted as the eight ops the
    # exporter decomposes it into it was +25% (GPT-2 large at full depth, fp32, batch 8, sequence 512)
    "gpt2 fused-tanh-gelu fp32 sdpa": ("gpt2_tanh", 512, 4, "fp32", {}, TOLERANCE),
    "gemma bf16 lora": ("gemma", 1024, 1, "bf16", {"lora_rank": 16}, TOLERANCE),  # +6.8% with the GELU's eight ops
    # under checkpointing the forward's end, the loss's backward and the recomputed layer's are three phases
    # (gpupred.memory.physics.checkpoint_phases): -0.3%, -2.1% and +1.8%; +4.3%, +11.7% and +7.4% while the recomputed
    # layer, the loss buffers and every weight copy were counted at once
    "llama bf16 lora ckpt": ("llama", 1024, 1, "bf16", {"lora_rank": 16, "checkpointing": True}, TOLERANCE),
    "gpt2 bf16 ckpt": ("gpt2", 512, 4, "bf16", {"checkpointing": True}, TOLERANCE),
    "gpt2 bf16 lora ckpt": ("gpt2", 512, 4, "bf16", {"lora_rank": 16, "checkpointing": True}, TOLERANCE),
    "llama3 bf16 lora": ("llama3", 1024, 1, "bf16", {"lora_rank": 16}, TOLERANCE),
    "bert masked-lm fp32 sdpa": ("bert", 384, 8, "fp32", {}, TOLERANCE),
    # a full fine-tune whose optimizer state is small peaks at the backward's end: autocast's weight copies are gone
    # by then, each freed with the saved tensors of the node that read it (gpupred.memory.physics.cast_copies); held
    # through the backward they were +14%, +17% and +18%
    "llama bf16 sgd": ("llama", 1024, 1, "bf16", {"optimizer": "sgd"}, TOLERANCE),
    "llama bf16 adamw8bit": ("llama", 1024, 1, "bf16", {"optimizer": "adamw8bit"}, TOLERANCE),
    "llama bf16 adafactor": ("llama", 1024, 1, "bf16", {"optimizer": "adafactor"}, TOLERANCE),
    # QLoRA: the dequantized weight counts only where a 4-bit contraction runs at the peak (+5.1% while it counted at
    # the loss's backward); the fake kernel never makes it, so a peak in the recomputed layer would be above torch's
    "llama qlora": ("llama", 1024, 1, "bf16", {"lora_rank": 16, "qlora": True}, TOLERANCE),
    "llama qlora ckpt adamw8bit": ("llama", 1024, 1, "bf16", {"lora_rank": 16, "qlora": True, "checkpointing": True,
                                                              "optimizer": "adamw8bit"}, TOLERANCE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_full_width_decoders_against_torch(configs: dict[str, Path], case: str) -> None:
    """Measured, ours / torch - 1: gpt2 fp32 sdpa -0.0%, gpt2 bf16 eager +0.1% (+6% while the head's gradient was
    added to the loss buffers), llama bf16 lora ckpt -0.3% (+4.3% with the recomputed layer beside the loss buffers,
    +28% with every frozen weight's copy held), gpt2 bf16 ckpt -2.1% and gpt2 bf16 lora ckpt +1.8% (+11.7% and +7.4%
    before the three phases), llama3 bf16 lora +0.2% (grouped-query attention, a 128k vocabulary; +0.9% while a
    product by a frozen norm weight kept its operand), bert masked-lm fp32 sdpa -0.0% (-5.3% before the fused kernel's
    saved Q and K were counted),
    gpt2 fused-tanh-gelu fp32 sdpa -0.0% and gemma bf16 lora +0.7% (+6.8% for Gemma while the exporter's eight ops of
    a fused tanh GELU were counted as ops), llama bf16 sgd -0.2%, adamw8bit -0.3% and adafactor -0.0% (+14%, +17% and
    +18% while autocast's weight copies were held through the backward), llama qlora +1.3% (+5.1% with the dequantized
    weight at the loss's backward) and qlora ckpt adamw8bit -0.2%."""
    from gpupred.memory.oracle import FakeStep, torch_peak
    from gpupred.setups import setup_of

    name, seq, batch, precision, options, tolerance = CASES[case]
    head = "masked-lm" if name == "bert" else "causal-lm"
    setup = dataclasses.replace(setup_of(precision, "adamw"), **options)
    torch_ = torch_peak(FakeStep(json.loads(configs[name].read_text()), seq, batch, precision,
                                 setup.checkpointing, setup.lora_rank or 0, options.get("attention", "sdpa"), head,
                                 setup.optimizer, setup.qlora))
    ours = _ours(configs[name], seq, batch, setup, head)
    assert ours == pytest.approx(torch_["Total"], rel=tolerance), (case, ours, torch_)


TIMM_CASES = {  # name: (timm model, image side, batch, precision); the window attention's products copy K and V
    # (gpupred.graph.strides): +4.4% while they were counted as the packed QKV projection they are views of. Seven
    # more families, fp32 and bf16, are in benchmarks/bench_memory_oracle.py (about 45 s each here: one is enough)
    "swin fp32": ("swin_tiny_patch4_window7_224", 224, 8, "fp32"),
}


@pytest.mark.parametrize("case", sorted(TIMM_CASES))
def test_timm_models_against_torch(case: str, tmp_path: Path) -> None:
    """A timm image classifier (its default config, random weights, nothing downloaded) exported as
    ``predict --timm`` exports it, against two fake training steps (AdamW) of the same model: measured, ours /
    torch - 1, swin fp32 -0.8% (-0.4% at batch 32, +4.4% there before the products' copies)."""
    pytest.importorskip("timm")
    from gpupred import config
    from gpupred.graph.named import named_graph
    from gpupred.memory.oracle import timm_peak
    from gpupred.setups import setup_of
    from gpupred.workloads.hubmodels import timm_model

    name, side, batch, precision = TIMM_CASES[case]
    saved = config.ONNX_CACHE
    config.ONNX_CACHE = tmp_path / "cache"
    try:
        graph = named_graph(timm_model(name, image_size=side))
    finally:
        config.ONNX_CACHE = saved
    ours = _allocated(graph, name, batch, setup_of(precision, "adamw"))
    torch_ = timm_peak(name, side, batch, precision)
    assert ours == pytest.approx(torch_["Total"], rel=TOLERANCE), (case, ours, torch_)
