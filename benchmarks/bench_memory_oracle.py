"""Memory at full size against torch's own count, on the CPU (issue 78 item 1): language models and timm's image models.

For real-size language models (GPT-2 large, OPT-1.3B, LLaMA-7B and Llama 3 8B, BERT base and large as masked LMs,
and LoRA fine-tunes of other decoder families: Mistral 7B, Qwen2 7B, Falcon 7B, Pythia 2.8B; their published shapes
from transformers' own config classes; no weights, nothing downloaded) under the recipes people run, and for timm's
image classifiers (ResNet, ConvNeXt, EfficientNet, MobileNetV3, RegNetY, ViT, Swin, DenseNet; their default configs,
batch 32 at 224 pixels, fp32 and bf16, AdamW), it prints two figures of one training step's peak:

- **torch**: torch's own count (:func:`gpupred.memory.oracle.torch_peak`): ``MemTracker`` over two training steps
  run under ``FakeTensorMode``, with the attention kernel and the autocast lists CUDA uses (see that module for what
  a fake CPU step cannot show and how it stays CUDA's); the GPT-2, OPT and BERT configs have their dropout off (the
  CPU's masks are 4 bytes, CUDA's 1);
- **ours**: the shipped predictor's torch-allocated peak (``memory_allocated_mib``, what
  ``torch.cuda.max_memory_allocated()`` reports) for the same job on an H100, less cuBLAS's two 32 MiB workspaces,
  which the CPU has not.

Neither figure counts the allocator's rounding or the CUDA context. Usage: ``python
benchmarks/bench_memory_oracle.py [--section hf|timm] [--only NAME ...]`` (about 20 minutes for the language models
and 12 for timm's on the 2-core machine, most of it torch's fake steps; each model is exported once for the
predictor, then cached).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKSPACE_MIB = 64.0  # cuBLAS's workspaces on Hopper (gpupred.memory.physics.WORKSPACE_MIB): not on the CPU
GPU = "H100 SXM"


@dataclass(frozen=True)
class Recipe:
    """One training job: a model config, its shape and its setup (gpupred.memory.oracle.FakeStep's)."""

    name: str
    model: str  # a key of configs()
    seq: int
    batch: int
    precision: str  # fp32 or bf16 (autocast)
    checkpointing: bool = False
    lora: int = 0  # peft LoRA rank (peft's default targets), 0: a full fine-tune
    attention: str = "sdpa"
    head: str = "causal-lm"  # or masked-lm (an encoder's)
    optimizer: str = "adamw"  # gpupred.memory.oracle.OPTIMIZERS
    qlora: bool = False  # 4-bit NF4 base weights (with lora)

    def step(self, config: dict[str, Any]) -> Any:
        """The :class:`gpupred.memory.oracle.FakeStep` of this recipe on ``config``."""
        from gpupred.memory.oracle import FakeStep

        return FakeStep(config, self.seq, self.batch, self.precision, self.checkpointing, self.lora, self.attention,
                        self.head, self.optimizer, self.qlora)


RECIPES: tuple[Recipe, ...] = (
    Recipe("gpt2-large fp32 adamw s512 b8", "gpt2-large", 512, 8, "fp32"),
    Recipe("gpt2-large fp32 adamw s512 b8 eager", "gpt2-large", 512, 8, "fp32", attention="eager"),
    Recipe("llama-7b bf16 adamw s2048 b1 ckpt", "llama-7b", 2048, 1, "bf16", checkpointing=True),
    Recipe("llama-7b bf16 lora16 s2048 b1", "llama-7b", 2048, 1, "bf16", lora=16),
    Recipe("llama-7b bf16 lora16 s2048 b1 ckpt", "llama-7b", 2048, 1, "bf16", checkpointing=True, lora=16),
    Recipe("llama-7b bf16 adamw s2048 b1", "llama-7b", 2048, 1, "bf16"),
    Recipe("gpt2-large fp32 lora16 s512 b8", "gpt2-large", 512, 8, "fp32", lora=16),
    Recipe("llama3-8b bf16 lora16 s2048 b1 ckpt", "llama3-8b", 2048, 1, "bf16", checkpointing=True, lora=16),
    Recipe("gpt2-large bf16 adamw s1024 b4", "gpt2-large", 1024, 4, "bf16"),
    Recipe("gpt2-large bf16 adamw s1024 b4 eager", "gpt2-large", 1024, 4, "bf16", attention="eager"),
    Recipe("gpt2-large bf16 adamw s1024 b4 ckpt", "gpt2-large", 1024, 4, "bf16", checkpointing=True),
    Recipe("llama-7b bf16 lora16 s2048 b4", "llama-7b", 2048, 4, "bf16", lora=16),
    Recipe("opt-1.3b bf16 adamw s2048 b4", "opt-1.3b", 2048, 4, "bf16"),
    Recipe("bert-base masked-lm fp32 s384 b32", "bert-base", 384, 32, "fp32", head="masked-lm"),
    Recipe("bert-large masked-lm bf16 s512 b16", "bert-large", 512, 16, "bf16", head="masked-lm"),
    Recipe("llama-7b bf16 sgd s2048 b1", "llama-7b", 2048, 1, "bf16", optimizer="sgd"),
    Recipe("llama-7b bf16 adamw8bit s2048 b1", "llama-7b", 2048, 1, "bf16", optimizer="adamw8bit"),
    Recipe("llama-7b bf16 adafactor s2048 b1", "llama-7b", 2048, 1, "bf16", optimizer="adafactor"),
    Recipe("llama-7b qlora16 s2048 b4", "llama-7b", 2048, 4, "bf16", lora=16, qlora=True),
    Recipe("llama-7b qlora16 s2048 b4 ckpt", "llama-7b", 2048, 4, "bf16", checkpointing=True, lora=16, qlora=True),
    Recipe("mistral-7b bf16 lora16 s2048 b1", "mistral-7b", 2048, 1, "bf16", lora=16),
    Recipe("qwen2-7b bf16 lora16 s1024 b2", "qwen2-7b", 1024, 2, "bf16", lora=16),
    Recipe("falcon-7b bf16 lora16 s512 b2", "falcon-7b", 512, 2, "bf16", lora=16),
    Recipe("pythia-2.8b bf16 lora16 s512 b2", "pythia-2.8b", 512, 2, "bf16", lora=16),
)
TIMM_MODELS: tuple[str, ...] = ("resnet50", "convnext_tiny", "efficientnet_b0", "mobilenetv3_large_100", "regnety_016",
                                "vit_base_patch16_224", "swin_tiny_patch4_window7_224", "densenet121")
TIMM_BATCH, TIMM_SIDE = 32, 224


def configs() -> dict[str, dict[str, Any]]:
    """The models' published shapes, from transformers' config classes (GPT-2 large: 36 layers of 1280; LLaMA's
    defaults are LLaMA-7B's; Llama 3 8B: grouped-query attention, a 128k vocabulary), as config.json values."""
    import transformers

    gpt2 = transformers.GPT2Config(n_layer=36, n_embd=1280, n_head=20, resid_pdrop=0.0, embd_pdrop=0.0,
                                   attn_pdrop=0.0)  # dropout off: the CPU's masks are 4 bytes, CUDA's 1
    llama3 = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                      max_position_embeddings=8192, rope_theta=500000.0)  # Llama 3 8B
    opt = transformers.OPTConfig(hidden_size=2048, ffn_dim=8192, num_hidden_layers=24, num_attention_heads=32,
                                 word_embed_proj_dim=2048, dropout=0.0, attention_dropout=0.0)  # OPT-1.3B
    bert = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    bert_large = transformers.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                         intermediate_size=4096, **bert)
    out = {}
    for name, cfg, arch in (("gpt2-large", gpt2, "GPT2LMHeadModel"), ("opt-1.3b", opt, "OPTForCausalLM"),
                            ("bert-base", transformers.BertConfig(**bert), "BertForMaskedLM"),
                            ("bert-large", bert_large, "BertForMaskedLM"),
                            ("llama-7b", transformers.LlamaConfig(), "LlamaForCausalLM"),
                            ("llama3-8b", llama3, "LlamaForCausalLM"), *_families(transformers)):
        values = cfg.to_diff_dict()
        values.update(model_type=cfg.model_type, architectures=[arch])
        out[name] = values
    return out


def _families(transformers: Any) -> list[tuple[str, Any, str]]:
    """Other decoder families' published shapes (dropout off): Mistral 7B (the config class's defaults: grouped-query
    attention), Qwen2 7B (a 152k vocabulary, biased Q, K and V), Falcon 7B (the class's defaults: multi-query, parallel
    attention and MLP), Pythia 2.8B (GPT-NeoX: parallel residual, partial rotary)."""
    qwen2 = transformers.Qwen2Config(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                     num_attention_heads=28, num_key_value_heads=4, vocab_size=152064)
    falcon = transformers.FalconConfig(hidden_dropout=0.0, attention_dropout=0.0)
    pythia = transformers.GPTNeoXConfig(hidden_size=2560, intermediate_size=10240, num_hidden_layers=32,
                                        num_attention_heads=32, vocab_size=50304, hidden_dropout=0.0,
                                        attention_dropout=0.0)
    return [("mistral-7b", transformers.MistralConfig(), "MistralForCausalLM"),
            ("qwen2-7b", qwen2, "Qwen2ForCausalLM"), ("falcon-7b", falcon, "FalconForCausalLM"),
            ("pythia-2.8b", pythia, "GPTNeoXForCausalLM")]


def ours_timm(predictor: Any, name: str, precision: str) -> float:
    """The predictor's torch-allocated peak (MiB) of a timm model's AdamW step on an H100, less cuBLAS's workspaces."""
    import gpupred
    from gpupred.setups import setup_of

    frame = predictor.predict(gpupred.timm_model(name, image_size=TIMM_SIDE), batch_size=TIMM_BATCH, gpu=GPU,
                              setup=setup_of(precision, "adamw"))
    return float(frame["memory_allocated_mib"].iloc[0]) - WORKSPACE_MIB


def ours(predictor: Any, config_path: Path, recipe: Recipe) -> float:
    """The predictor's torch-allocated peak (MiB) of the recipe on an H100, less cuBLAS's workspaces."""
    import gpupred
    from gpupred.setups import setup_of

    options: dict[str, Any] = {"checkpointing": recipe.checkpointing, "attention": recipe.attention,
                               "qlora": recipe.qlora}
    if recipe.lora:
        options["lora_rank"] = recipe.lora
    model = gpupred.hf_model(str(config_path), seq_len=recipe.seq, attention=recipe.attention, head=recipe.head)
    frame = predictor.predict(model, batch_size=recipe.batch, gpu=GPU,
                              setup=setup_of(recipe.precision, recipe.optimizer, **options))
    return float(frame["memory_allocated_mib"].iloc[0]) - WORKSPACE_MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="recipe names or timm models (default: all)")
    parser.add_argument("--section", choices=("all", "hf", "timm"), default="all",
                        help="language models, timm's, or both")
    args = parser.parse_args()
    import gpupred

    predictor = gpupred.load_predictor()
    print(f"{'recipe':38s} {'torch MiB':>10s} {'ours MiB':>10s} {'ours/torch':>10s}  torch's peak by category, s")
    rows = []
    if args.section in ("all", "hf"):
        rows += _language_models(predictor, [r for r in RECIPES if not args.only or r.name in args.only])
    if args.section in ("all", "timm"):
        rows += _timm_models(predictor, [m for m in TIMM_MODELS if not args.only or m in args.only])
    if rows:
        worst = max(rows, key=abs)
        print(f"{len(rows)} recipes: largest |ours/torch - 1| {abs(worst):.1%}, median "
              f"{sorted(map(abs, rows))[len(rows) // 2]:.1%}")


def _line(name: str, peak: dict[str, float], mine: float, t0: float, t1: float) -> float:
    """Print one recipe's figures; return ours / torch - 1."""
    parts = ", ".join(f"{k} {v:,.0f}" for k, v in peak.items() if k != "Total" and v)
    print(f"{name:38s} {peak['Total']:10,.0f} {mine:10,.0f} {mine / peak['Total'] - 1:+10.1%}  {parts}; "
          f"torch {t1 - t0:.0f} s, ours {time.perf_counter() - t1:.0f} s", flush=True)
    return mine / peak["Total"] - 1


def _language_models(predictor: Any, recipes: list[Recipe]) -> list[float]:
    """The language-model recipes' lines."""
    from gpupred.memory.oracle import torch_peak

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, values in configs().items():
            (Path(tmp) / name).mkdir()
            paths[name] = Path(tmp) / name / "config.json"
            paths[name].write_text(json.dumps(values))
        for r in recipes:
            t0 = time.perf_counter()
            peak = torch_peak(r.step(json.loads(paths[r.model].read_text())))
            t1 = time.perf_counter()
            rows.append(_line(r.name, peak, ours(predictor, paths[r.model], r), t0, t1))
    return rows


def _timm_models(predictor: Any, models: list[str]) -> list[float]:
    """timm's models' lines, fp32 and bf16 each."""
    from gpupred.memory.oracle import timm_peak

    rows = []
    for name in models:
        for precision in ("fp32", "bf16"):
            t0 = time.perf_counter()
            peak = timm_peak(name, TIMM_SIDE, TIMM_BATCH, precision)
            t1 = time.perf_counter()
            rows.append(_line(f"{name} {precision} b{TIMM_BATCH}", peak, ours_timm(predictor, name, precision), t0, t1))
    return rows


if __name__ == "__main__":
    main()
