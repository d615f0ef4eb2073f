"""Transformer memory at full size against torch's own count, on the CPU (issue 78 item 1).

For real-size decoders (GPT-2 large and LLaMA-7B, their published shapes from transformers' own config classes;
no weights, nothing downloaded) under the recipes people run, it prints two figures of one training step's peak:

- **torch**: torch's own count, ``torch.distributed._tools.mem_tracker.MemTracker`` over two training steps run
  under ``FakeTensorMode`` (tensors with shapes and dtypes but no storage, so a 7B model needs no memory): the peak
  of parameters, gradients, optimizer state and every live tensor, per category;
- **ours**: the shipped predictor's torch-allocated peak (``memory_allocated_mib``, what
  ``torch.cuda.max_memory_allocated()`` reports) for the same job on an H100, less cuBLAS's two 32 MiB workspaces,
  which the CPU has not.

What the CPU run cannot show, and how the comparison stays like with like:

- torch on a fake CPU device: CPU autocast (its op lists differ from CUDA's in ops these decoders do not run under
  autocast: LLaMA's RMSNorm upcasts by hand), and CPU dropout, which saves a 4-byte mask where CUDA's saves a bool:
  the GPT-2 configs here have their dropout off (tests/test_memory_terms.py checks the masks);
- SDPA: on a fake CPU tensor ``scaled_dot_product_attention`` picks its math fallback, which keeps the attention
  probabilities. The run calls the memory-efficient kernel CUDA picks (``_scaled_dot_product_efficient_attention``,
  which saves the output and its log-sum-exp) in its place;
- the allocator's rounding and the CUDA context are not counted by either figure.

Usage: ``python benchmarks/bench_memory_oracle.py [--only NAME ...]`` (about 6 minutes on the 2-core machine,
most of it torch's fake steps; each model is exported once for the predictor, then cached).
"""

from __future__ import annotations

import argparse
import contextlib
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
    """One training job: a model config, its shape and its setup."""

    name: str
    model: str  # a key of configs()
    seq: int
    batch: int
    precision: str  # fp32 or bf16 (autocast)
    checkpointing: bool = False
    lora: int = 0  # peft LoRA rank (peft's default targets), 0: a full fine-tune
    attention: str = "sdpa"


RECIPES: tuple[Recipe, ...] = (
    Recipe("gpt2-large fp32 adamw s512 b8", "gpt2-large", 512, 8, "fp32"),
    Recipe("gpt2-large fp32 adamw s512 b8 eager", "gpt2-large", 512, 8, "fp32", attention="eager"),
    Recipe("llama-7b bf16 adamw s2048 b1 ckpt", "llama-7b", 2048, 1, "bf16", checkpointing=True),
    Recipe("llama-7b bf16 lora16 s2048 b1", "llama-7b", 2048, 1, "bf16", lora=16),
    Recipe("llama-7b bf16 lora16 s2048 b1 ckpt", "llama-7b", 2048, 1, "bf16", checkpointing=True, lora=16),
    Recipe("llama-7b bf16 adamw s2048 b1", "llama-7b", 2048, 1, "bf16"),
    Recipe("gpt2-large fp32 lora16 s512 b8", "gpt2-large", 512, 8, "fp32", lora=16),
    Recipe("llama3-8b bf16 lora16 s2048 b1 ckpt", "llama3-8b", 2048, 1, "bf16", checkpointing=True, lora=16),
)


def configs() -> dict[str, dict[str, Any]]:
    """The models' published shapes, from transformers' config classes (GPT-2 large: 36 layers of 1280; LLaMA's
    defaults are LLaMA-7B's; Llama 3 8B: grouped-query attention, a 128k vocabulary), as config.json values."""
    import transformers

    gpt2 = transformers.GPT2Config(n_layer=36, n_embd=1280, n_head=20, resid_pdrop=0.0, embd_pdrop=0.0,
                                   attn_pdrop=0.0)  # dropout off: the CPU's masks are 4 bytes, CUDA's 1
    llama3 = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                      max_position_embeddings=8192, rope_theta=500000.0)  # Llama 3 8B
    out = {}
    for name, cfg, arch in (("gpt2-large", gpt2, "GPT2LMHeadModel"),
                            ("llama-7b", transformers.LlamaConfig(), "LlamaForCausalLM"),
                            ("llama3-8b", llama3, "LlamaForCausalLM")):
        values = cfg.to_diff_dict()
        values.update(model_type=cfg.model_type, architectures=[arch])
        out[name] = values
    return out


def efficient_sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
                   scale: float | None = None, enable_gqa: bool = False) -> Any:
    """``F.scaled_dot_product_attention`` as CUDA runs it: the memory-efficient kernel, or flash for grouped-query
    attention (each keeps the output and its log-sum-exp, no probabilities)."""
    import torch

    if enable_gqa and k.shape[1] != q.shape[1]:  # grouped K and V: the flash kernel reads them as they are
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, True, dropout_p, is_causal,
                                                                   scale=scale)[0]


def _fake_model(values: dict[str, Any], recipe: Recipe) -> Any:
    """The recipe's model, built on fake tensors (call under FakeTensorMode): training mode, checkpointing, LoRA."""
    import torch
    import transformers

    values = dict(values)
    values.pop("architectures")
    cfg = transformers.AutoConfig.for_model(values.pop("model_type"), **values)
    cfg.use_cache = False
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=recipe.attention).train()
    if recipe.checkpointing:
        model.gradient_checkpointing_enable()
    if recipe.lora:
        import peft

        to = torch.nn.Module.to  # peft moves each adapter to its base layer's device: a fake tensor cannot be swapped,
        torch.nn.Module.to = lambda self, *a, **k: self  # and every tensor already sits on the one fake CPU device
        try:
            model = peft.get_peft_model(model, peft.LoraConfig(r=recipe.lora, task_type="CAUSAL_LM"))
        finally:
            torch.nn.Module.to = to
    return model


class _NoHandle:
    def remove(self) -> None:
        pass


def torch_peak(values: dict[str, Any], recipe: Recipe) -> dict[str, float]:
    """MemTracker's peak snapshot (MiB per category, and ``Total``) of two fake training steps of the recipe: foreach
    AdamW on the trainable parameters, cross-entropy on fp32 logits that the loop does not hold (as transformers'
    Trainer), ``zero_grad(set_to_none=True)``."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = efficient_sdpa
    try:
        with FakeTensorMode(), torch.device("cpu"):
            model = _fake_model(values, recipe)
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], foreach=True)
            ids = torch.randint(0, values["vocab_size"], (recipe.batch, recipe.seq))
            tracker = MemTracker()
            tracker.track_external(model, opt)
            for p in model.parameters():  # MemTracker hooks every parameter's gradient; a frozen one cannot be hooked
                if not p.requires_grad:
                    tracker._param_to_grad_hook_handles[p] = (_NoHandle(), _NoHandle())
            autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if recipe.precision == "bf16"
                        else contextlib.nullcontext())
            with tracker:
                for step in range(2):  # the second step's peak holds the optimizer state
                    with autocast:
                        logits = model(input_ids=ids).logits
                    loss = F.cross_entropy(logits.float().flatten(0, 1), ids.view(-1))
                    del logits
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if step == 0:
                        tracker.reset_mod_stats()
            (peak,) = tracker.get_tracker_snapshot("peak").values()
    finally:
        F.scaled_dot_product_attention = sdpa
    return {getattr(k, "name", str(k)): v / 2**20 for k, v in peak.items()}


def ours(predictor: Any, config_path: Path, recipe: Recipe) -> float:
    """The predictor's torch-allocated peak (MiB) of the recipe on an H100, less cuBLAS's workspaces."""
    import gpupred
    from gpupred.setups import setup_of

    options: dict[str, Any] = {"checkpointing": recipe.checkpointing, "attention": recipe.attention}
    if recipe.lora:
        options["lora_rank"] = recipe.lora
    model = gpupred.hf_model(str(config_path), seq_len=recipe.seq, attention=recipe.attention)
    frame = predictor.predict(model, batch_size=recipe.batch, gpu=GPU,
                              setup=setup_of(recipe.precision, "adamw", **options))
    return float(frame["memory_allocated_mib"].iloc[0]) - WORKSPACE_MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="recipe names (default: all)")
    args = parser.parse_args()
    import gpupred

    predictor = gpupred.load_predictor()
    recipes = [r for r in RECIPES if not args.only or r.name in args.only]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, values in configs().items():
            (Path(tmp) / name).mkdir()
            paths[name] = Path(tmp) / name / "config.json"
            paths[name].write_text(json.dumps(values))
        print(f"{'recipe':38s} {'torch MiB':>10s} {'ours MiB':>10s} {'ours/torch':>10s}  torch's peak by category, s")
        for r in recipes:
            t0 = time.perf_counter()
            peak = torch_peak(json.loads(paths[r.model].read_text()), r)
            t1 = time.perf_counter()
            mine = ours(predictor, paths[r.model], r)
            parts = ", ".join(f"{k} {v:,.0f}" for k, v in peak.items() if k != "Total" and v)
            print(f"{r.name:38s} {peak['Total']:10,.0f} {mine:10,.0f} {mine / peak['Total'] - 1:+10.1%}  {parts}; "
                  f"torch {t1 - t0:.0f} s, ours {time.perf_counter() - t1:.0f} s", flush=True)
            rows.append(mine / peak["Total"] - 1)
    if rows:
        worst = max(rows, key=abs)
        print(f"{len(rows)} recipes: largest |ours/torch - 1| {abs(worst):.1%}")


if __name__ == "__main__":
    main()
