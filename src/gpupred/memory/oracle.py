"""torch's own count of a model's training step, on the CPU at any size: the memory evaluation's oracle.

:func:`torch_peak` builds a Hugging Face language model (a decoder, or an encoder's masked LM) from its config,
:func:`timm_peak` a timm image classifier, under ``FakeTensorMode`` (tensors with shapes and dtypes but no storage,
so a 7B model needs no memory), runs two training steps and returns the peak that torch's
``torch.distributed._tools.mem_tracker.MemTracker`` counts, per category
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
- data-dependent steps cannot run on fake tensors: GradScaler's inf check, and Adafactor's relative step size and
  parameter scale, so the step runs transformers' Adafactor with a fixed learning rate (the same state, factored
  second moments, and the same update's temporaries);
- bitsandbytes registers fake kernels for its ops, but makes its quantization maps from Python lists: the 8-bit
  optimizers are built outside the fake mode (their maps real tensors, which the mode takes in as constants), and
  QLoRA's 4-bit weights (:func:`synthetic_4bit`) are real ``Params4bit`` over untouched storage with the
  ``QuantState`` that ``quantize_4bit(compress_statistics=True)`` makes. The mode converts each real tensor an op
  reads into a fake one once and keeps it, which MemTracker then counts a second time among the activations: the
  count takes the packed weights' converted copies out again (:func:`real_parameter_bytes`). bitsandbytes' fake
  ``gemm_4bit`` writes the product alone, where its CUDA kernel dequantizes the weight to 16 bits first: that
  transient is not in this count.

Needs torch and transformers or timm (and peft for LoRA): the ``torch`` and ``finetune`` extras.
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
    optimizer: str = "adamw"  # OPTIMIZERS: torch's AdamW or SGD (foreach), bitsandbytes' AdamW8bit, Adafactor
    qlora: bool = False  # 4-bit NF4 base weights (double quantization, bf16 compute) under the LoRA adapters


OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd", "adamw8bit", "adafactor")  # what FakeStep.optimizer names
NF4_BLOCK = 64  # bitsandbytes' 4-bit block size (Params4bit's default)


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
    if step.qlora:
        synthetic_4bit(model)
    if step.lora:
        import peft

        to = torch.nn.Module.to  # peft moves each adapter to its base layer's device: a fake tensor cannot be swapped,
        torch.nn.Module.to = lambda self, *a, **k: self  # and every tensor already sits on the one fake CPU device
        try:
            model = peft.get_peft_model(model, peft.LoraConfig(r=step.lora, task_type="CAUSAL_LM"))
        finally:
            torch.nn.Module.to = to
    return model


def synthetic_4bit(model: Any) -> None:
    """Every ``nn.Linear`` of ``model`` but its output head as bitsandbytes' ``Linear4bit`` (NF4, double quantization,
    bf16 compute), its weight a ``Params4bit`` over untouched (never written) packed storage with the
    ``QuantState`` that ``quantize_4bit(compress_statistics=True)`` makes of a bf16 weight: a 7B model's codes cost no
    memory, and quantizing fake tensors is out of reach (see the module notes). Call it under FakeTensorMode."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as bf
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    head = model.get_output_embeddings()
    with unset_fake_temporarily():
        bf.name2qmap.setdefault("dynamic", bf.create_dynamic_map(signed=True))  # the second level's code, kept
        for parent in list(model.modules()):
            for name, lin in list(parent.named_children()):
                if type(lin) is not torch.nn.Linear or lin is head:
                    continue
                out_f, in_f = lin.weight.shape
                blocks = -(-out_f * in_f // NF4_BLOCK)
                nested = bf.QuantState(absmax=torch.empty(-(-blocks // 256)), code=bf.name2qmap["dynamic"].clone(),
                                       blocksize=256, dtype=torch.float32)
                state = bf.QuantState(absmax=torch.empty(blocks, dtype=torch.uint8), shape=torch.Size([out_f, in_f]),
                                      dtype=torch.bfloat16, blocksize=NF4_BLOCK, quant_type="nf4",
                                      offset=torch.zeros(()), code=bf.get_4bit_type("nf4", device="cpu"),
                                      state2=nested)
                q = bnb.nn.Linear4bit(in_f, out_f, bias=lin.bias is not None, compute_dtype=torch.bfloat16,
                                      compress_statistics=True, quant_type="nf4", device="meta")
                q.weight = bnb.nn.Params4bit(torch.empty((out_f * in_f + 1) // 2, 1, dtype=torch.uint8),
                                             requires_grad=False, quant_state=state, blocksize=NF4_BLOCK,
                                             compress_statistics=True, quant_type="nf4", bnb_quantized=True)
                if lin.bias is not None:
                    q.bias = torch.nn.Parameter(torch.empty(out_f), requires_grad=False)
                setattr(parent, name, q)


def real_parameter_bytes(model: Any) -> float:
    """Bytes of ``model``'s parameters that are real tensors (:func:`synthetic_4bit`'s), each storage once: what
    FakeTensorMode's converted copies of them add to MemTracker's count."""
    from torch._subclasses.fake_tensor import FakeTensor

    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()
                if not isinstance(p, FakeTensor)}
    return float(sum(storages.values()))


def step_optimizer(name: str, params: list[Any]) -> Any:
    """The training step's optimizer over ``params`` (``OPTIMIZERS``; build it outside FakeTensorMode)."""
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, foreach=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
    if name == "adamw8bit":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(params)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-3, relative_step=False, scale_parameter=False, warmup_init=False)
    raise ValueError(f"optimizer {name!r}: the oracle runs {', '.join(OPTIMIZERS)}")


class _NoHandle:
    def remove(self) -> None:
        pass


def torch_peak(step: FakeStep) -> dict[str, float]:
    """MemTracker's peak snapshot (MiB per category, and ``Total``) of two fake training steps: cross-entropy on fp32
    logits that the loop does not hold (as transformers' Trainer), ``zero_grad(set_to_none=True)``; the second step's
    peak holds the optimizer state. Less the converted copies of real parameters (:func:`real_parameter_bytes`)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)  # bitsandbytes' quantization maps and 4-bit weights are real
    with _efficient_attention():
        with mode, torch.device("cpu"):
            model = fake_model(step)
        opt = step_optimizer(step.optimizer, [p for p in model.parameters() if p.requires_grad])
        with mode, torch.device("cpu"):
            ids = torch.randint(0, int(step.config["vocab_size"]), (step.batch, step.seq))
            out = _tracked_steps(model, opt, lambda: model(input_ids=ids).logits.flatten(0, 1), ids.view(-1),
                                 step.precision == "bf16")
    converted = real_parameter_bytes(model) / 2**20
    out["ACT"], out["Total"] = out["ACT"] - converted, out["Total"] - converted
    return out


def timm_peak(name: str, image_size: int, batch: int, precision: str = "fp32", optimizer: str = "adamw"
              ) -> dict[str, float]:
    """:func:`torch_peak` of a timm image classifier (``timm.create_model(name)``, its default config; 1,000 classes)
    trained on ``batch`` images of ``image_size`` squared: built on the meta device (timm's constructors read values,
    such as drop-path rates, that a fake tensor has not), then given fake storage."""
    import timm
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with torch.device("meta"):
        try:
            model = timm.create_model(name, pretrained=False, img_size=image_size)
        except TypeError:  # a convolutional net: built for no image size
            model = timm.create_model(name, pretrained=False)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with _efficient_attention():
        with mode:
            model = model.to_empty(device="cpu").train()
        opt = step_optimizer(optimizer, list(model.parameters()))
        with mode, torch.device("cpu"):
            images = torch.randn(batch, 3, image_size, image_size)
            labels = torch.randint(0, int(getattr(model, "num_classes", 1000)), (batch,))
            return _tracked_steps(model, opt, lambda: model(images), labels, precision == "bf16")


def _tracked_steps(model: Any, opt: Any, forward: Any, labels: Any, half: bool) -> dict[str, float]:
    """MemTracker's peak (MiB per category, and ``Total``) over two training steps of ``model`` (under a running
    FakeTensorMode): ``forward()`` gives the logits, cross-entropy against ``labels`` on their fp32 upcast (not held
    by the loop), backward, ``opt.step()``, ``zero_grad(set_to_none=True)``; under ``half``, bf16 autocast with CUDA's
    fp32 list. The second step's peak holds the optimizer state."""
    import torch
    import torch.nn.functional as F
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model, opt)
    for p in model.parameters():  # MemTracker hooks every parameter's gradient; a frozen one cannot be hooked
        if not p.requires_grad:
            tracker._param_to_grad_hook_handles[p] = (_NoHandle(), _NoHandle())
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if half else contextlib.nullcontext()
    with tracker, cuda_autocast_lists() if half else contextlib.nullcontext():
        for k in range(2):
            with autocast:
                logits = forward()
            loss = F.cross_entropy(logits.float(), labels)
            del logits
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if k == 0:
                tracker.reset_mod_stats()
        (peak,) = tracker.get_tracker_snapshot("peak").values()
    return {getattr(k, "name", str(k)): v / 2**20 for k, v in peak.items()}


@contextlib.contextmanager
def _efficient_attention() -> Any:
    """``F.scaled_dot_product_attention`` replaced by :func:`efficient_sdpa` (the kernel CUDA picks) meanwhile."""
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = efficient_sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = sdpa
