"""A real-world transformer trained under a :class:`gpupred.setups.TrainingSetup`, as people fine-tune one: the
profiler's fine-tune units (plan lines with setup options, :mod:`gpupred.profile.units`; the campaign's stage 3).

What runs is what the setup's notes (:mod:`gpupred.setups`) and the predictor's counts (:mod:`gpupred.finetune`)
describe, built with each library's own API and defaults:

- the model: the spec's named architecture (:func:`gpupred.workloads.realworld.named_for`) with seeded random weights
  (no download), its attention as the setup asks (``auto``: as the catalog built it; ``sdpa``/``eager``: transformers'
  ``attn_implementation``); ``bf16-pure`` casts it to bf16, autocast keeps fp32 weights;
- ``checkpointing``: transformers' activation checkpointing (:func:`checkpoint_blocks`) with ``use_reentrant=False`` (torch's advice);
- ``qlora``: every ``nn.Linear`` (and GPT-2's ``Conv1D``, transposed) but the output head and weights tied to another
  module becomes ``bitsandbytes.nn.Linear4bit`` with NF4 codes, double quantization and bf16 compute (what
  ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
  bnb_4bit_compute_dtype=torch.bfloat16)`` loads; quantized when moved to the device). peft's
  ``prepare_model_for_kbit_training`` is *not* called: it would cast the unquantized weights to fp32 and turn on
  checkpointing, which the setup states on its own;
- ``lora_rank``: peft's ``get_peft_model`` with ``LoraConfig(r, lora_alpha, target_modules, lora_dropout, bias,
  modules_to_save)``; targets None take peft's default for the model type;
- the optimizer over the trainable parameters (:func:`setup_optimizer`); ``accumulation`` micro-batches per step;
  fp16 scales the loss with ``torch.amp.GradScaler``.

Imports torch (and peft / bitsandbytes when the setup needs them): the profiler's child process only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import torch
from torch import Tensor, nn

from gpupred.errors import GpupredError
from gpupred.setups import TrainingSetup
from gpupred.workloads.batches import Amp, Batches
from gpupred.workloads.builders import BASE_LR, SEED, LogitsOf, cross_entropy, head_targets
from gpupred.workloads.spec import WorkloadSpec

NF4_BLOCK = 64  # bitsandbytes' default 4-bit block size (Linear4bit's quant_storage uint8)


def hf_attention(setup: TrainingSetup, built_with: str | None) -> str | None:
    """transformers' ``attn_implementation`` for the setup's attention (``auto``: what the model was built with)."""
    if setup.attention == "auto":
        return built_with
    if setup.attention == "flash":
        return "flash_attention_2"
    return setup.attention


def build_model(spec: WorkloadSpec, setup: TrainingSetup) -> tuple[Any, dict[str, Tensor], Tensor]:
    """(the transformers model, its keyword inputs, its head's targets) of a real-world spec under ``setup``, with
    seeded random weights on the CPU."""
    from gpupred.workloads.hubmodels import build_named
    from gpupred.workloads.realworld import named_for

    named = named_for(spec)
    if named.source != "hf":
        raise GpupredError(f"workload {spec.id!r}: a fine-tune setup runs on transformers models (this is {named.source})")
    named = dataclasses.replace(named, attention=hf_attention(setup, named.attention))
    built = build_named(named, weights=True, batch=spec.batch_size)
    inputs = dict(built.example)
    targets = head_targets(built, spec.batch_size, torch.Generator().manual_seed(SEED))[0]
    return built.model, inputs, targets


def _linears(model: nn.Module) -> Iterable[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, module) of every ``nn.Linear`` and transformers ``Conv1D`` below ``model``."""
    from transformers.pytorch_utils import Conv1D

    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, (nn.Linear, Conv1D)):
                yield parent, name, child


def quantize_linears(model: nn.Module, compute_dtype: torch.dtype, keep: tuple[str, ...] = ()) -> int:
    """Replace the Linear layers of ``model`` by NF4 ``bitsandbytes.nn.Linear4bit`` (double quantization, bf16
    compute) in place, but the output head, weights shared with another module (tied embeddings) and modules named in
    ``keep``; the number replaced. The codes are made when the model moves to its device."""
    import bitsandbytes as bnb
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    owners: dict[int, int] = {}
    for m in model.modules():
        for p in m.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    names = {id(m): n for n, m in model.named_modules()}
    replaced = 0
    for parent, attr, lin in list(_linears(model)):
        name = names.get(id(lin), attr)
        if lin is head or owners.get(id(lin.weight), 0) > 1 or any(name == k or name.endswith(f".{k}") for k in keep):
            continue
        weight = lin.weight.data.t() if isinstance(lin, Conv1D) else lin.weight.data  # Conv1D stores [in, out]
        out_f, in_f = weight.shape
        q = bnb.nn.Linear4bit(in_f, out_f, bias=lin.bias is not None, compute_dtype=compute_dtype,
                              compress_statistics=True, quant_type="nf4", device="cpu")
        q.weight = bnb.nn.Params4bit(weight.contiguous(), requires_grad=False, compress_statistics=True,
                                     quant_type="nf4", blocksize=NF4_BLOCK)
        if lin.bias is not None:
            q.bias = nn.Parameter(lin.bias.data.clone(), requires_grad=False)
        setattr(parent, attr, q)
        replaced += 1
    return replaced


def add_lora(model: nn.Module, setup: TrainingSetup) -> nn.Module:
    """The peft model of ``model`` with the setup's LoRA adapters (peft's defaults where the setup says nothing)."""
    from peft import LoraConfig, get_peft_model

    targets = setup.lora_targets
    target_modules: Any = None if targets is None else (targets[0] if len(targets) == 1 else list(targets))
    config = LoraConfig(r=setup.lora_rank, lora_alpha=setup.lora_alpha if setup.lora_alpha is not None else 8,
                        target_modules=target_modules, lora_dropout=setup.lora_dropout, bias=setup.lora_bias,
                        modules_to_save=list(setup.lora_modules_to_save) or None)
    try:
        return get_peft_model(model, config)
    except ValueError as err:  # peft: "Target modules ... not found in the base model"
        raise GpupredError(f"LoRA: {' '.join(str(err).split())[:200]}") from None


def setup_optimizer(setup: TrainingSetup, params: list[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """The setup's optimizer over ``params`` (the trainable ones), with its weight decay and implementation."""
    impl = {"foreach": {"foreach": True}, "fused": {"fused": True}, "forloop": {"foreach": False}}[setup.optimizer_impl]
    decay = setup.decay
    if setup.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9 if setup.sgd_momentum else 0.0, weight_decay=decay, **impl)
    if setup.optimizer in ("adam", "adamw"):
        cls = torch.optim.Adam if setup.optimizer == "adam" else torch.optim.AdamW
        return cls(params, lr=lr, weight_decay=decay, **impl)
    if setup.optimizer == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=None, relative_step=True, scale_parameter=True, warmup_init=False,
                         weight_decay=decay)
    import bitsandbytes as bnb

    cls = {"adamw8bit": bnb.optim.AdamW8bit, "paged_adamw": bnb.optim.PagedAdamW32bit,
           "paged_adamw8bit": bnb.optim.PagedAdamW8bit}[setup.optimizer]
    return cls(params, lr=lr, weight_decay=decay)


def prepare(model: nn.Module, setup: TrainingSetup, device: str) -> nn.Module:
    """``model`` made ready to train under ``setup`` on ``device``: checkpointing, precision, 4-bit base weights, the
    move to the device (where bitsandbytes quantizes), LoRA adapters: the order a QLoRA script loads and wraps it."""
    if setup.checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise GpupredError(f"{type(model).__name__} does not support gradient checkpointing in transformers")
        checkpoint_blocks(model)
    if setup.precision == "bf16-pure":
        model = model.to(torch.bfloat16)
    if setup.qlora:
        quantize_linears(model, torch.float16 if setup.precision == "fp16" else torch.bfloat16,
                         setup.lora_modules_to_save)
    model = model.to(device)  # bitsandbytes makes the 4-bit codes here, as loading onto the GPU does
    if setup.lora:
        model = add_lora(model, setup)  # peft puts each adapter on its base layer's device
    if setup.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model.train()


def checkpoint_blocks(model: nn.Module) -> None:
    """Checkpoint every decoder block with ``use_reentrant=False``: transformers' ``activation_checkpointing_enable``
    (5.2x and later), else its older name ``gradient_checkpointing_enable``."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def set_tf32(setup: TrainingSetup) -> None:
    """torch's TF32 switches as the setup has them (this process only: the profiler runs one job per child)."""
    torch.backends.cuda.matmul.allow_tf32 = setup.tf32_matmul
    torch.backends.cudnn.allow_tf32 = setup.tf32_conv


def make_setup_step(spec: WorkloadSpec, setup: TrainingSetup, device: str = "cpu",
                    host_batches: bool = False) -> Callable[[], Tensor]:
    """A closure running one optimizer step of ``spec`` under ``setup`` on ``device`` (``accumulation``
    forward/backward passes, then the optimizer); it returns the last loss (not synced)."""
    if spec.fused > 1:
        raise GpupredError(f"workload {spec.id!r}: a fine-tune setup runs plain (unfused) workloads only")
    set_tf32(setup)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        hf, inputs, targets = build_model(spec, setup)
        model = prepare(hf, setup, device)
    keys = list(inputs)
    wrapped = LogitsOf(model, keys)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise GpupredError(f"workload {spec.id!r}: the setup leaves no parameter to train")
    opt = setup_optimizer(setup, trainable, BASE_LR["adam" if setup.optimizer != "sgd" else "sgd"])
    batch = Batches((*inputs.values(), targets), device, host_batches)
    amp = Amp(setup.precision if setup.autocast else "fp32", device)
    n_in, micro = len(keys), setup.accumulation

    def step() -> Tensor:
        opt.zero_grad(set_to_none=True)
        for _ in range(micro):
            data = batch()
            with amp.autocast():
                loss = cross_entropy(wrapped(*data[:n_in]), data[n_in:]) / micro
            amp.backward(loss)
        amp.step(opt)
        amp.update()
        return loss.detach()

    return step


def trainable_count(model: nn.Module) -> tuple[int, int]:
    """(trainable parameters, all parameters) as peft's ``get_nb_trainable_parameters`` counts them (a 4-bit weight
    counts its elements, not its packed bytes)."""
    if hasattr(model, "get_nb_trainable_parameters"):
        return tuple(int(x) for x in model.get_nb_trainable_parameters())  # type: ignore[return-value]
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total


def preflight(device: str = "cuda") -> None:
    """Raise unless this machine can run the fine-tune units: a 4-bit NF4 layer with a peft LoRA adapter, forward and
    backward under bf16 autocast, and a step of bitsandbytes' 8-bit AdamW (and, on CUDA, its paged one). The campaign
    runs it in a child before a sweep of setup units, so that a broken install never writes error rows as data."""
    from peft import LoraConfig, get_peft_model

    import bitsandbytes as bnb

    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64))
    quantize_linears(model, torch.bfloat16)
    model = get_peft_model(model.to(device), LoraConfig(r=4, target_modules=["0", "2"]))
    optimizers = ["adamw8bit"] + (["paged_adamw"] if device.startswith("cuda") else [])
    for name in optimizers:
        opt = setup_optimizer(TrainingSetup(precision="bf16", optimizer=name), [p for p in model.parameters()
                                                                                 if p.requires_grad], 1e-3)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = model(torch.randn(8, 128, device=device)).float().pow(2).mean()
        loss.backward()
        opt.step()
    wrapped = [m.base_layer for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")]
    if len(wrapped) != 2 or not all(isinstance(b, bnb.nn.Linear4bit) for b in wrapped):
        raise GpupredError("fine-tune preflight: peft did not put its adapters on bitsandbytes' Linear4bit layers")
