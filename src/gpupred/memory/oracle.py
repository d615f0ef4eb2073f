"""torch's own count of a transformer's training step, on the CPU at any size: the memory evaluation's oracle.

:func:`torch_peak` builds a Hugging Face language model (a decoder, or an encoder's masked LM) from its config under
``FakeTensorMode`` (tensors with shapes and dtypes but no storage, so a 7B model needs no memory), runs two training
steps and returns the peak that torch's ``torch.distributed._tools.mem_tracker.MemTracker`` counts, per category
(parameters, gradients, optimizer state, activations, temporaries). That is the figure the footprint's torch-allocated
peak (:mod:`gpupred.memory.physics`) predicts, less cuBLAS's workspaces, which the CPU has not;
``benchmarks/bench_memory_oracle.py`` compares the two at full size and ``tests/test_memory_oracle.py`` at full width.

What a fake CPU step cannot show by itself, and how the count stays CUDA's:

- ``scaled_dot_product_attention`` on a CPU tensor takes its math fallback, which keeps the probabilities; the step
  calls the kernel CUDA picks in its place (:func:`efficient_sdpa`: memory-efficient, or flash for grouped-query
  attention; each keeps its output and log-sum-exp);
- CPU autocast leaves most of CUDA autocast's float32 ops (``pow``, ``softmax``, ``layer_norm``...) in the input's
  dtype: under it the step casts their 16-bit inputs itself (:func:`cuda_autocast_lists`), so what autograd saves is
  the float32 copy, as on CUDA (GPT-2's tanh GELU cubes its input in float32 on CUDA);
- CPU dropout saves a 4-byte mask where CUDA's saves a bool: give configs with their dropout off (the masks are
  checked on their own, tests/test_memory_terms.py);
- data-dependent steps cannot run on fake tensors: GradScaler's inf check, Adafactor's relative step size,
  bitsandbytes' kernels (QLoRA, 8-bit optimizers) are out of its reach.

Needs torch and transformers (and peft for LoRA): the ``torch`` and ``finetune`` extras.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

# CUDA ops that autocast runs in float32 (torch's "Automatic Mixed Precision" docs, "CUDA Ops that can autocast to
# float32"), by the names torch functions carry
CUDA_FP32_OPS: frozenset[str] = frozenset({
    "pow", "__pow__", "__rpow__", "__rdiv__", "__rtruediv__", "acos", "asin", "cosh", "sinh", "tan", "erfinv", "exp",
    "expm1", "log", "log10", "log1p", "log2", "reciprocal", "rsqrt", "softplus", "softmax", "softmin", "log_softmax",
    "layer_norm", "group_norm", "norm", "normalize", "cumprod", "cumsum", "prod", "sum", "renorm", "dist", "cdist",
    "pdist", "cosine_similarity"})


@dataclass(frozen=True)
class FakeStep:
    """One training step to count: a decoder's config.json values, the batch's shape and the training setup
    (AdamW, foreach, on the trainable parameters)."""

    config: dict[str, Any]  # a transformers config as config.json holds it (``model_type`` included)
    seq: int
    batch: int
    precision: str = "fp32"  # fp32, or bf16 (autocast)
    checkpointing: bool = False  # transformers' gradient_checkpointing_enable()
    lora: int = 0  # peft LoRA rank on peft's default targets for the model type; 0: a full fine-tune
    attention: str = "sdpa"  # transformers' attn_implementation: sdpa or eager
    head: str = "causal-lm"  # causal-lm or masked-lm (an encoder's): the loss is over the vocabulary either way


def efficient_sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
                   scale: float | None = None, enable_gqa: bool = False) -> Any:
    """``F.scaled_dot_product_attention`` as CUDA runs it: under autocast on 16-bit copies of its operands, in the
    memory-efficient kernel, or flash for grouped-query attention (each keeps its operands, the output and its
    log-sum-exp, no probabilities)."""
    import torch

    if torch.is_autocast_enabled("cpu"):  # CUDA autocast runs scaled_dot_product_attention in 16 bits: it casts first
        half = torch.get_autocast_dtype("cpu")
        q, k, v = (t.to(half) if t.is_floating_point() else t for t in (q, k, v))
    if enable_gqa and k.shape[1] != q.shape[1]:  # grouped K and V: the flash kernel reads them as they are
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, True, dropout_p, is_causal,
                                                                   scale=scale)[0]


def cuda_autocast_lists() -> Any:
    """A torch-function mode under which CPU autocast also runs CUDA's float32 ops (``CUDA_FP32_OPS``) in float32:
    their 16-bit tensor arguments are cast first."""
    import torch
    from torch.overrides import TorchFunctionMode

    half = (torch.bfloat16, torch.float16)

    def up(a: Any) -> Any:
        return a.float() if isinstance(a, torch.Tensor) and a.dtype in half else a

    class Fp32Ops(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") in CUDA_FP32_OPS and torch.is_autocast_enabled("cpu"):
                args, kwargs = [up(a) for a in args], {k: up(v) for k, v in kwargs.items()}
            return func(*args, **kwargs)

    return Fp32Ops()


def fake_model(step: FakeStep) -> Any:
    """The step's model in training mode, with checkpointing and LoRA as asked (call it under FakeTensorMode)."""
    import torch
    import transformers

    values = {k: v for k, v in step.config.items() if k != "architectures"}
    cfg = transformers.AutoConfig.for_model(values.pop("model_type"), **values)
    cfg.use_cache = False
    auto = {"causal-lm": transformers.AutoModelForCausalLM, "masked-lm": transformers.AutoModelForMaskedLM}[step.head]
    model = auto.from_config(cfg, attn_implementation=step.attention).train()
    if step.checkpointing:  # transformers' default (non-reentrant); a recompute under autocast runs CUDA's fp32
        # list too: torch's checkpoint reruns the forward inside the backward, outside the caller's torch-function mode
        kwargs = ({"use_reentrant": False, "context_fn": lambda: (contextlib.nullcontext(), cuda_autocast_lists())}
                  if step.precision == "bf16" else None)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if step.lora:
        import peft

        to = torch.nn.Module.to  # peft moves each adapter to its base layer's device: a fake tensor cannot be swapped,
        torch.nn.Module.to = lambda self, *a, **k: self  # and every tensor already sits on the one fake CPU device
        try:
            model = peft.get_peft_model(model, peft.LoraConfig(r=step.lora, task_type="CAUSAL_LM"))
        finally:
            torch.nn.Module.to = to
    return model


class _NoHandle:
    def remove(self) -> None:
        pass


def torch_peak(step: FakeStep) -> dict[str, float]:
    """MemTracker's peak snapshot (MiB per category, and ``Total``) of two fake training steps: cross-entropy on fp32
    logits that the loop does not hold (as transformers' Trainer), ``zero_grad(set_to_none=True)``; the second step's
    peak holds the optimizer state."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = efficient_sdpa
    half = step.precision == "bf16"
    try:
        with FakeTensorMode(), torch.device("cpu"):
            model = fake_model(step)
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], foreach=True)
            ids = torch.randint(0, int(step.config["vocab_size"]), (step.batch, step.seq))
            tracker = MemTracker()
            tracker.track_external(model, opt)
            for p in model.parameters():  # MemTracker hooks every parameter's gradient; a frozen one cannot be hooked
                if not p.requires_grad:
                    tracker._param_to_grad_hook_handles[p] = (_NoHandle(), _NoHandle())
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if half else contextlib.nullcontext()
            with tracker, cuda_autocast_lists() if half else contextlib.nullcontext():
                for k in range(2):
                    with autocast:
                        logits = model(input_ids=ids).logits
                    loss = F.cross_entropy(logits.float().flatten(0, 1), ids.view(-1))
                    del logits
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if k == 0:
                        tracker.reset_mod_stats()
            (peak,) = tracker.get_tracker_snapshot("peak").values()
    finally:
        F.scaled_dot_product_attention = sdpa
    return {getattr(k, "name", str(k)): v / 2**20 for k, v in peak.items()}
