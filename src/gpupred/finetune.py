"""Parameter-efficient fine-tuning and the optimizers whose state is not parameter-sized, counted tensor by tensor
from a canonical graph (torch-free): what LoRA, QLoRA, bitsandbytes' and transformers' optimizers change in a
training step's memory (:func:`parameter_terms`, read by :func:`gpupred.memory.physics.footprint_terms`) and kernels
(:func:`adapted_weights`, read by :func:`gpupred.step.physics.kernels.step_kernels`).

**Which weights.** A Linear weight is a parameter named ``<module>.weight`` that a MatMul or Gemm reads as its second
operand (the canonical graph keeps each initializer's parameter name, :attr:`CanonicalGraph.params`, also where the
exporter transposed it). A fused projection that is not an ``nn.Linear`` (``nn.MultiheadAttention``'s
``in_proj_weight``) is not one: peft cannot target it and bitsandbytes does not quantize it. A graph whose weights
keep no such names (an exporter that renamed them all) cannot place LoRA targets, and is refused by name.

**LoRA** (peft ``LoraConfig``): the target modules are ``setup.lora_targets``, else peft's default for the model
type (:data:`LORA_TARGET_MODULES`, a copy of peft's ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`` as peft
0.21.2 has it; a type it lacks is refused, as peft refuses it); a module matches a name as peft's
``check_target_module_exists`` does (the name itself or a ``.name`` suffix; a single string is a regular expression
matched whole). Each adapted Linear (``in`` -> ``out``) gains ``A: r x in`` and ``B: out x r``, in fp32 under
autocast and also on a bf16 base (peft's
``autocast_adapter_dtype=True`` casts 16-bit adapters to fp32). Every other parameter is frozen: it keeps its weight,
but gets no gradient and no optimizer state (``lora_bias`` ``all``/``lora_only`` trains the biases,
``lora_modules_to_save`` trains a copy of whole modules beside the frozen original).

**Activations.** torch's autograd saves an operand of a matmul only when the other operand's gradient is needed
(``tools/autograd/gen_variable_type.py``'s ``guard_for``: ``grad_fn->should_compute_output``): a frozen Linear keeps
its weight (autocast's 16-bit copy of it under bf16/fp16: not cached, autocast caches only leaves that require
grad, but held by the backward node until it runs) and not its input. So, per distinct input ``x`` of frozen
Linears (:func:`activation_delta`):

- ``x`` is no longer saved, unless another op keeps it (a reader that saves its input, a producer that saves its
  output, a trainable contraction, a graph output); under autocast, an fp32 ``x``
  (:func:`gpupred.graph.canonical.autocast_fp32`) loses the 16-bit copy each frozen Linear would have saved (the
  footprint counts one per Linear; the fp32 ``x`` itself only where an fp32 op saves it, which stays);
- each adapter on ``x`` saves what its ``A`` reads: ``x`` itself (already counted where it is kept) or, when a cast is
  needed, its own copy (autocast's 16-bit cast of an fp32 ``x``; on a pure-bf16 base, peft's cast of ``x`` to the
  adapter's fp32); with ``lora_dropout`` > 0, the dropped-out copy of ``x`` and its mask (1 byte per element)
  instead;
- ``B`` saves ``A x``: ``rows x r`` elements, 2 bytes under autocast, 4 otherwise (fp32 adapters);
- a product by a frozen parameter (a normalization's weight: RMSNorm's ``weight * x``) saves the weight alone, so
  its other operand is no longer saved, unless another op keeps it (:func:`frozen_scales`);
- a fused attention kernel keeps its output (``kernel_outputs`` of :func:`parameter_terms`: the caller's
  :func:`gpupred.step.physics.attention.fused_cores`), so a frozen output projection reading it frees nothing;
- under checkpointing only the recomputed block holds them: the delta is divided by the number of checkpointed
  blocks.

**Autocast's weight copies.** Autocast caches the 16-bit copy of an fp32 leaf that requires grad (``cached_cast``,
``aten/src/ATen/autocast_mode.cpp``) until the forward's autocast region exits, so a trainable weight's copy is live at
the forward's end whatever saves it, also under checkpointing (the footprint then counts the copies at the forward's
end, :func:`gpupred.memory.physics.peak_terms`). A frozen weight's copy is not cached: it lives only as long as the
backward node that saved it. Under checkpointing a Linear inside a checkpointed block saves nothing in the forward,
so only the frozen Linears outside every block (the head) keep theirs. LLaMA-7B with peft's default LoRA (r 16), bf16
autocast, sequence 2048, checkpointing: torch's own count of the allocated peak (MemTracker under FakeTensorMode,
``benchmarks/bench_memory_oracle.py``) 27,927 MiB; the footprint 27,905 MiB (-0.1%; +1.1% before the recomputed
layer, the loss buffers and the weight copies were three phases), and 40,546 MiB (+45%) when it held every frozen copy.

**QLoRA** (bitsandbytes ``Params4bit`` with ``quant_type="nf4"``, ``compress_statistics=True``; ``quantize_4bit`` in
``bitsandbytes/functional.py``): every Linear weight but the output head (transformers keeps the output embedding
unquantized: ``get_keys_to_not_convert``) and weights also read by another op (tied embeddings) is stored as
``ceil(n / 2)`` bytes of packed 4-bit codes, ``ceil(n / 64)`` uint8 quantized absmax, ``ceil(n / 64 / 256)`` fp32
second-level absmax, a fp32 offset, a 16-entry fp32 NF4 code and its own copy of the 256-entry fp32 dynamic code of
the second level (``quantize_blockwise`` keeps ``code.to(device, copy=True)`` per weight: 1 KiB, found by
tests/test_finetune_units.py against bitsandbytes 0.50): 0.5159 bytes per weight; each allocation is rounded
to torch's 512-byte blocks (``kMinBlockSize``, ``c10/cuda/CUDACachingAllocator.cpp``). ``MatMul4Bit`` saves neither
its input nor a dequantized weight: it dequantizes to the compute dtype in the forward and again in the backward
(one weight's 16-bit copy at a time: ``dequant_bytes``, the largest one, counted where a 4-bit contraction runs at the
peak: the recomputed layer's phase under checkpointing, a backward peak past the loss's; not at the loss's backward,
the forward's end or the optimizer step). ``Linear4bit`` casts its input to
the compute dtype and its output back to the input's dtype (``.to(inp_dtype)``): under autocast, where the input is
the fp32 residual stream's normalized copy (LLaMA's), the output is fp32, and so is every op after it up to the next
contraction, a SwiGLU MLP's activation and product included: their saved inputs are 4 bytes wide where an
``nn.Linear`` under autocast leaves them 16-bit (:func:`gpupred.graph.canonical.autocast_fp32`'s ``input_dtype``;
checked against the tensors autograd saves, with bitsandbytes' own ``Linear4bit`` on the CPU, in
tests/test_finetune_units.py). On the 1.1B LLaMA QLoRA fine-tune measured on an H200 (batch 2, sequence 512) this is
726 MiB of the 3,768 MiB allocated peak. Non-quantized modules (embeddings, norms, the head) keep the setup's weight
dtype.

**Optimizer state**, per trainable tensor (``n`` elements; fp32 masters or bf16 under pure bf16):

- SGD: momentum ``n`` (none without); Adam/AdamW: ``2 n``, at the weight's width;
- ``adamw8bit``: bitsandbytes' ``Optimizer2State.init_state`` (``bitsandbytes/optim/optimizer.py``): two uint8 moments
  and two fp32 absmax per 256-element block; a tensor under ``min_8bit_size`` (4096 elements) keeps two fp32 moments;
- ``paged_adamw``: two fp32 moments (bitsandbytes' 32-bit states are fp32 whatever the weight dtype) in CUDA unified
  memory (``cudaMallocManaged``): outside torch's allocator, so ``torch.cuda.max_memory_allocated`` does not see them,
  but resident on the device while the step runs, which is what NVML shows: counted as device memory at the peak;
  ``paged_adamw8bit``: ``adamw8bit``'s states, paged likewise;
- ``adafactor`` (transformers' ``Adafactor`` defaults: ``beta1=None``, ``relative_step=True``): a matrix (2-D or more)
  keeps ``exp_avg_sq_row`` (its shape less the last axis) and ``exp_avg_sq_col`` (less the second-last), a vector its
  full ``exp_avg_sq``, at the gradient's dtype, and every tensor a 0-d fp32 ``RMS``; its step makes full-size fp32 temporaries (the squared gradient and the
  factored estimate) of the tensor it updates: two of the largest, counted among the optimizer step's temporaries
  (``transient_bytes``).

Every tensor the optimizer, a gradient or a weight allocates is rounded to 512 bytes as torch's caching allocator does.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Sequence

from gpupred.errors import GpupredError
from gpupred.graph.canonical import cast_copies
from gpupred.setups import TrainingSetup

# peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (src/peft/utils/constants.py), whole, as peft 0.21.2 has it:
# peft adapts these by default for a model of the type, and refuses a type it lacks ("Please specify
# `target_modules`"); a one-element tuple is a regular expression, as peft reads a string
LORA_TARGET_MODULES: dict[str, tuple[str, ...]] = {
    "t5": ("q", "v"), "mt5": ("q", "v"), "bart": ("q_proj", "v_proj"), "gpt2": ("c_attn",),
    "bloom": ("query_key_value",), "blip-2": ("q", "v", "q_proj", "v_proj"), "opt": ("q_proj", "v_proj"),
    "gptj": ("q_proj", "v_proj"), "gpt_neox": ("query_key_value",), "gpt_neo": ("q_proj", "v_proj"),
    "bert": ("query", "value"), "roberta": ("query", "value"), "xlm-roberta": ("query", "value"),
    "electra": ("query", "value"), "deberta-v2": ("query_proj", "value_proj"), "deberta": ("in_proj",),
    "layoutlm": ("query", "value"), "llama": ("q_proj", "v_proj"), "llama4": ("q_proj", "v_proj"),
    "chatglm": ("query_key_value",), "gpt_bigcode": ("c_attn",), "mpt": ("Wqkv",),
    "RefinedWebModel": ("query_key_value",), "RefinedWeb": ("query_key_value",), "falcon": ("query_key_value",),
    "btlm": ("c_proj", "c_attn"), "codegen": ("qkv_proj",), "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"), "stablelm": ("q_proj", "v_proj"), "phi": ("q_proj", "v_proj", "fc1", "fc2"),
    "gemma": ("q_proj", "v_proj"), "gemma2": ("q_proj", "v_proj"), "gemma3_text": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"), "qwen3": ("q_proj", "v_proj"),
    "gemma4": (r".*language_model\..*\.(q_proj|v_proj)",), "nemotron_h": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "rwkv": ("key", "value", "receptance", "output"),
    "rwkv7": ("r_proj", "k_proj", "v_proj", "o_proj", "key", "value"),
}
# what a graph of unknown model type (a user's own export) is matched against, in this order (the most adapted
# modules win): the defaults of the families this project builds
GUESSED_TARGETS: tuple[tuple[str, ...], ...] = (
    ("q_proj", "v_proj"), ("q_proj", "v_proj", "fc1", "fc2"), ("c_attn",), ("query_key_value",), ("q", "v"),
    ("query", "value"), ("query_proj", "value_proj"),
)
ALLOC_BLOCK = 512  # torch's caching allocator rounds every allocation up to 512 bytes (kMinBlockSize)
NF4_BLOCK = 64  # bitsandbytes' 4-bit blocksize (Params4bit's default)
NESTED_BLOCK = 256  # double quantization: the absmax quantized in blocks of 256 (quantize_blockwise)
NF4_CODE_BYTES = 16 * 4  # the NF4 code: 16 fp32 values per QuantState
NESTED_CODE_BYTES = 256 * 4  # the second level's dynamic code, copied into every weight's nested QuantState
OPT8_BLOCK = 256  # bitsandbytes' 8-bit optimizers: one fp32 absmax per 256 elements per moment
MIN_8BIT_SIZE = 4096  # bitsandbytes' min_8bit_size: smaller tensors keep fp32 moments
ADAPTER_BYTES = 4  # peft's adapters are fp32 (autocast_adapter_dtype=True)
PAGED: frozenset[str] = frozenset({"paged_adamw", "paged_adamw8bit"})
EIGHT_BIT: frozenset[str] = frozenset({"adamw8bit", "paged_adamw8bit"})
# what the memory physics' kept-tensor rule says (tests/test_peft.py checks these copies against it)
NO_INPUT_SAVE: frozenset[str] = frozenset({
    "Add", "Sub", "Concat", "Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "AveragePool", "GlobalAveragePool",
    "ReduceMean", "ReduceSum", "Neg", "Cast", "Pad"})
OUTPUT_SAVE: frozenset[str] = frozenset({"Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp"})
PASS_OPS: frozenset[str] = frozenset({  # views and aliases: a reader of their output reads their input
    "Transpose", "Gather", "Slice", "Split", "Expand", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity",
    "Dropout"})
LINEAR_OPS: frozenset[str] = frozenset({"MatMul", "Gemm"})
PARAM_COLUMNS: tuple[str, ...] = (  # bytes the footprint reads in place of its parameter-sized rule
    "weight_bytes", "grad_bytes", "state_bytes", "copy_bytes", "held_copy_bytes", "act_delta_bytes", "transient_bytes",
    "dequant_bytes")


@dataclass(frozen=True)
class LinearWeight:
    """One Linear weight of a canonical graph: its parameter key, module name, features, and the token rows and
    input tensors of the contractions that read it."""

    key: str
    module: str
    in_features: int
    out_features: int
    rows: int  # output elements / out_features, over every node that reads it
    inputs: tuple[str, ...]
    nodes: tuple[int, ...]


def alloc(nbytes: float) -> int:
    """Bytes torch's caching allocator takes for a tensor of ``nbytes`` (rounded up to 512; 0 for none)."""
    return int(math.ceil(nbytes / ALLOC_BLOCK)) * ALLOC_BLOCK if nbytes > 0 else 0


def nf4_bytes(numel: int) -> int:
    """Device bytes of one weight stored by bitsandbytes as NF4 with double quantization (see the module notes)."""
    blocks = -(-numel // NF4_BLOCK)
    return (alloc((numel + 1) // 2) + alloc(blocks) + alloc(4 * -(-blocks // NESTED_BLOCK)) + alloc(4)
            + alloc(NF4_CODE_BYTES) + alloc(NESTED_CODE_BYTES))


def optimizer_state_bytes(optimizer: str, shape: tuple[int, ...], item: int, sgd_momentum: bool = True) -> int:
    """Bytes of the optimizer state of one trainable tensor of ``shape`` whose weight is ``item`` bytes wide."""
    numel = math.prod(shape) if shape else 1
    if optimizer == "sgd":
        return alloc(numel * item) if sgd_momentum else 0
    if optimizer in ("adam", "adamw"):
        return 2 * alloc(numel * item)
    if optimizer == "paged_adamw":
        return 2 * alloc(numel * 4)
    if optimizer in EIGHT_BIT:
        if numel < MIN_8BIT_SIZE:
            return 2 * alloc(numel * 4)
        return 2 * (alloc(numel) + alloc(4 * -(-numel // OPT8_BLOCK)))
    if optimizer == "adafactor":  # and its 0-d fp32 ``RMS`` per tensor
        if len(shape) < 2:
            return alloc(numel * item) + alloc(4)
        return alloc(numel // shape[-1] * item) + alloc(numel // shape[-2] * item) + alloc(4)
    raise GpupredError(f"unknown optimizer {optimizer!r}")


def linear_weights(cg: Any) -> dict[str, LinearWeight]:
    """The Linear weights of a canonical graph by parameter key (see the module notes), in graph order."""
    found: dict[str, dict[str, Any]] = {}
    for i, (op, _d, ins, outs, *_rest) in enumerate(cg.nodes):
        if op not in LINEAR_OPS or len(ins) < 2 or ins[1] not in cg.params or ins[0] in cg.params:
            continue
        key = cg.params[ins[1]]
        out_shape = cg.shapes.get(outs[0]) if outs else None
        numel = cg.param_sizes.get(key, (0, 4))[0]
        if not key.endswith(".weight") or out_shape is None or out_shape[0] is None or numel <= 0:
            continue
        out_elems, out_f = math.prod(out_shape[0]), int(out_shape[0][-1])
        entry = found.setdefault(key, {"out": out_f, "rows": 0, "inputs": [], "nodes": []})
        entry["rows"] += out_elems // max(out_f, 1)
        entry["inputs"].append(ins[0])
        entry["nodes"].append(i)
    return {k: LinearWeight(k, k[: -len(".weight")], cg.param_sizes[k][0] // max(v["out"], 1), v["out"], v["rows"],
                            tuple(v["inputs"]), tuple(v["nodes"])) for k, v in found.items()}


def _matches(module: str, targets: tuple[str, ...]) -> bool:
    """Whether peft would adapt ``module`` for ``targets`` (a one-element tuple is also tried as a full regex)."""
    if len(targets) == 1 and any(c in targets[0] for c in "*+?[]()|^$\\"):
        pattern = re.compile(targets[0])
        return any(pattern.fullmatch(m) for m in (module, re.sub(r"^model\.", "", module)))
    return any(module == t or module.endswith("." + t) for t in targets)


def default_targets(linears: dict[str, LinearWeight], model_type: str | None, label: str) -> tuple[str, ...]:
    """peft's default target modules for the model type; a type peft has none for is refused, as peft refuses it.
    Where the type is unknown (an ONNX file of the user's), the defaults of :data:`GUESSED_TARGETS` whose every
    target the graph has (the most adapted modules first)."""
    if model_type is not None and model_type in LORA_TARGET_MODULES:
        return LORA_TARGET_MODULES[model_type]
    fits = []
    for targets in GUESSED_TARGETS:
        if all(any(_matches(w.module, (t,)) for w in linears.values()) for t in targets):
            fits.append((sum(_matches(w.module, targets) for w in linears.values()), targets))
    best = max(fits, key=lambda f: f[0])[1] if fits else None
    if model_type is not None or best is None:
        names = module_names(linears)
        attention = [n for n in names if re.search(r"qkv|query|value|attn|^[qv](_[a-z]+)?$", n)] or names[:1]
        raise GpupredError(f"{label}: peft has no default LoRA target modules for this model (type "
                           f"{model_type or 'unknown'}) and asks for them; name them (--lora-targets "
                           f"{','.join(best or attention)}, say, or an adapter_config.json): its Linear modules "
                           f"are named {names_clause(names)}")
    return best


def module_names(linears: dict[str, LinearWeight]) -> list[str]:
    """The Linear modules' own names (the last part of their paths), sorted, each once."""
    return sorted({w.module.rsplit(".", 1)[-1] for w in linears.values()})


def names_clause(names: list[str]) -> str:
    """The first dozen names, and an ellipsis if there are more."""
    return f"{', '.join(names[:12])}{' ...' if len(names) > 12 else ''}"


def lora_targets(cg: Any, setup: TrainingSetup, label: str, model_type: str | None = None) -> dict[str, LinearWeight]:
    """The Linear weights LoRA adapts under ``setup`` (refusing targets the graph does not have)."""
    linears = linear_weights(cg)
    if not linears:
        raise GpupredError(f"{label}: the graph keeps no Linear module names (its weights are not named "
                           "'<module>.weight'), so LoRA targets cannot be placed; export it with parameter names kept")
    targets = setup.lora_targets if setup.lora_targets is not None else default_targets(linears, model_type, label)
    missing = [t for t in targets if not any(_matches(w.module, (t,) if len(targets) > 1 else targets)
                                             for w in linears.values())]
    if missing:
        raise GpupredError(f"{label}: LoRA target module {missing[0]!r} is not a Linear module of this model; its "
                           f"Linear modules are named {names_clause(module_names(linears))}")
    return {k: w for k, w in linears.items() if _matches(w.module, targets)}


def quantized_weights(cg: Any, linears: dict[str, LinearWeight]) -> set[str]:
    """The Linear weights QLoRA stores in 4 bits: all but the output head and weights another op also reads."""
    read = {t for node in cg.nodes for t in node[2]}
    outputs = {o for node in cg.nodes for o in node[3] if o not in read}  # the graph's outputs (the logits)
    head = {k for k, w in linears.items() if any(o in outputs for n in w.nodes for o in cg.nodes[n][3])}
    read_elsewhere = {cg.params[n] for i, node in enumerate(cg.nodes) for n in node[2]
                      if n in cg.params and not (node[0] in LINEAR_OPS and len(node[2]) > 1 and node[2][1] == n)}
    return {k for k in linears if k not in head and k not in read_elsewhere}


def _trainable_base(cg: Any, setup: TrainingSetup, adapted: dict[str, LinearWeight]) -> set[str]:
    """Base parameters that still train under LoRA: biases (``lora_bias``) and ``lora_modules_to_save``'s."""
    keys = set(cg.param_sizes)
    out: set[str] = set()
    if setup.lora_bias == "all":
        out |= {k for k in keys if k.endswith(".bias")}
    elif setup.lora_bias == "lora_only":
        out |= {w.module + ".bias" for w in adapted.values()} & keys
    if setup.lora_modules_to_save:
        out |= {k for k in keys if _matches(k.rsplit(".", 1)[0], setup.lora_modules_to_save)}
    return out


@dataclass
class Placement:
    """Which parameters of a graph train, which are frozen and which are stored in 4 bits, under a setup."""

    shapes: dict[str, tuple[int, ...]]  # every parameter key
    trainable: dict[str, tuple[int, ...]]  # trainable tensors (base parameters and adapters) -> shape
    copies: set[str]  # modules_to_save: a frozen original and a trainable copy
    quantized: set[str]
    adapted: dict[str, LinearWeight]


def placement(cg: Any, setup: TrainingSetup, label: str = "graph", model_type: str | None = None) -> Placement:
    """Where each parameter of a canonical graph goes under a setup (every one trains in a full fine-tune)."""
    shapes = {k: _param_shape(cg, k) for k in cg.param_sizes}
    if not setup.lora:
        return Placement(shapes, dict(shapes), set(), set(), {})
    adapted = lora_targets(cg, setup, label, model_type)
    base = _trainable_base(cg, setup, adapted)
    trainable = {k: shapes[k] for k in sorted(base)}
    for k, w in adapted.items():
        trainable[k + "::lora_A"] = (setup.lora_rank, w.in_features)
        trainable[k + "::lora_B"] = (w.out_features, setup.lora_rank)
    quantized = quantized_weights(cg, linear_weights(cg)) - base if setup.qlora else set()
    saved = setup.lora_modules_to_save
    copies = {k for k in base if saved and _matches(k.rsplit(".", 1)[0], saved)}
    return Placement(shapes, trainable, copies, quantized, adapted)


def _param_shape(cg: Any, key: str) -> tuple[int, ...]:
    """A parameter's shape (from a tensor named by it; its element count as one axis where none is)."""
    for name, k in cg.params.items():
        if k == key and name == key and cg.shapes.get(name) and cg.shapes[name][0] is not None:
            return tuple(int(d) for d in cg.shapes[name][0])
    for name, k in cg.params.items():
        if k == key and cg.shapes.get(name) and cg.shapes[name][0] is not None:
            shape = tuple(int(d) for d in cg.shapes[name][0])
            return shape[::-1] if len(shape) == 2 else shape  # a transposed Linear weight: torch's [out, in]
    return (int(cg.param_sizes[key][0]),)


def _readers(cg: Any) -> dict[str, list[tuple[int, int]]]:
    """(node, input position) of every reader of each tensor."""
    out: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(cg.nodes):
        for pos, t in enumerate(node[2]):
            out.setdefault(t, []).append((i, pos))
    return out


def _base(t: str, producer: dict[str, Any]) -> str:
    """The tensor a view or alias reads through to (gpupred.memory.physics resolves kept tensors the same way)."""
    node = producer.get(t)
    while node is not None and node[0] in PASS_OPS and node[2] and node[2][0] in producer:
        t, node = node[2][0], producer.get(node[2][0])
    return t


def _kept_by_others(cg: Any, t: str, producer: dict[str, Any], readers: dict[str, list[tuple[int, int]]],
                    frozen_nodes: set[int], unsaved: frozenset[tuple[int, int]] = frozenset()) -> bool:
    """Whether an op other than a frozen Linear keeps tensor ``t`` (read through views) for backward; ``unsaved``:
    further (node, input position) reads that keep nothing (a product by a frozen weight, :func:`frozen_scales`)."""
    if producer.get(t) is not None and producer[t][0] in OUTPUT_SAVE:
        return True
    frontier, seen = [t], set()
    while frontier:
        cur = frontier.pop()
        if cur in seen:
            continue
        seen.add(cur)
        if cur not in readers:
            return True  # a graph output (the loss reads it)
        for i, pos in readers.get(cur, []):
            op = cg.nodes[i][0]
            if op in PASS_OPS and pos == 0:
                frontier += list(cg.nodes[i][3])
            elif not (i in frozen_nodes and pos == 0) and (i, pos) not in unsaved and op not in NO_INPUT_SAVE:
                return True
    return False


def frozen_scales(cg: Any, place: Placement, producer: dict[str, Any]) -> dict[str, list[tuple[int, int]]]:
    """Products by a frozen parameter (a normalization's weight under LoRA): by the operand they multiply (resolved
    through views), the (node, position) reads of it. autograd saves the weight for that operand's gradient and
    nothing of the operand, as the weight needs no gradient."""
    out: dict[str, list[tuple[int, int]]] = {}
    for i, (op, _d, ins, *_) in enumerate(cg.nodes):
        if op != "Mul" or len(ins) != 2:
            continue
        for pos, (w, x) in enumerate(((ins[1], ins[0]), (ins[0], ins[1]))):
            key = cg.params.get(w)
            if key is not None and key not in place.trainable and x in producer and x not in cg.params:
                out.setdefault(_base(x, producer), []).append((i, pos))
    return out


def activation_delta(cg: Any, setup: TrainingSetup, place: Placement, kernel_outputs: Collection[str] = ()) -> float:
    """Bytes that LoRA's frozen base and adapters add to the activations the graph's kept-tensor rule counts (negative:
    fewer): see the module notes. ``kernel_outputs``: the outputs of the attention cores the setup fuses, which the
    kernel saves for its backward (with Q, K, V and the log-sum-exp) whatever reads them."""
    from gpupred.graph.canonical import autocast_fp32

    if not setup.lora:
        return 0.0
    producer = {o: node for node in cg.nodes for o in node[3]}
    readers = _readers(cg)
    linears = linear_weights(cg)
    frozen = {k: w for k, w in linears.items() if k not in place.trainable}
    frozen_nodes = {n for w in frozen.values() for n in w.nodes}
    fp32 = autocast_fp32(cg, producer, place.quantized) if setup.autocast else set()
    kernel_outputs = {_base(t, producer) for t in kernel_outputs}
    width = 4 if setup.precision == "fp32" else 2
    a_width = 2 if setup.autocast else 4  # what A saves of its input, and A x
    by_input: dict[str, list[LinearWeight]] = {}
    for w in frozen.values():
        for x in w.inputs:
            if x in producer:
                by_input.setdefault(_base(x, producer), []).append(w)
    delta = 0.0
    for x, users in by_input.items():
        numel = _numel(cg, x)
        adapters = [w for w in users if w.key in place.adapted]
        cast = (setup.autocast and x in fp32) or setup.precision == "bf16-pure"
        shares_x = bool(adapters) and not cast and setup.lora_dropout == 0
        if x in fp32:  # the footprint counts one 16-bit copy per Linear reading it: a frozen Linear keeps none
            delta -= 2.0 * numel * len(users)
        elif not shares_x and x not in kernel_outputs and not _kept_by_others(cg, x, producer, readers, frozen_nodes):
            delta -= numel * width
        for _w in adapters:
            if setup.lora_dropout > 0:
                delta += numel * (a_width + 1)  # the dropped-out copy A reads (cast) and its mask
            elif cast:
                delta += numel * a_width
    scales = frozen_scales(cg, place, producer)
    unsaved = frozenset(r for reads in scales.values() for r in reads)
    for x in scales.keys() - by_input.keys():  # an operand no longer saved by its product with a frozen weight
        if x not in kernel_outputs and not _kept_by_others(cg, x, producer, readers, frozen_nodes, unsaved):
            wide = setup.precision == "fp32" or (setup.autocast and x in fp32)
            delta -= _numel(cg, x) * (4 if wide else 2)
    rank_rows = sum(w.rows for w in place.adapted.values()) * (setup.lora_rank or 0)
    return delta + rank_rows * a_width


def _numel(cg: Any, t: str) -> int:
    shp = cg.shapes.get(t)
    return math.prod(shp[0]) if shp and shp[0] is not None else 0


def parameter_terms(cg: Any, setup: TrainingSetup, label: str = "graph", model_type: str | None = None,
                    blocks: Sequence[Sequence[int]] = (), kernel_outputs: Collection[str] = (),
                    place: Placement | None = None) -> dict[str, float]:
    """The footprint's parameter-side bytes of a canonical graph under a setup (``PARAM_COLUMNS``): weights as
    stored, gradients, optimizer state, autocast's 16-bit weight copies (held to the backward; under checkpointing,
    live at the forward's end), LoRA's activation delta (divided over the checkpointed blocks under checkpointing),
    the optimizer step's transients (Adafactor's temporaries), and QLoRA's dequantized weight, live while a 4-bit
    contraction runs (:func:`gpupred.memory.physics.peak_term_arrays` places both); empty for the setups the
    parameter-sized rule counts (see the module notes). ``blocks``: the nodes of each checkpointed block, under checkpointing;
    ``kernel_outputs``: the outputs of the attention cores the setup fuses (:func:`activation_delta`); ``place``:
    :func:`placement`'s answer where the caller has it (``label`` and ``model_type`` are then not read)."""
    if not setup.counted_parameters:
        return {}
    place = placement(cg, setup, label, model_type) if place is None else place
    item = setup.state_bytes
    numel = {k: int(cg.param_sizes[k][0]) for k in place.shapes}
    weights = sum(nf4_bytes(n) if k in place.quantized else alloc(n * item) for k, n in numel.items())
    widths = {k: (ADAPTER_BYTES if "::lora_" in k else item) for k in place.trainable}
    sizes = {k: math.prod(s) for k, s in place.trainable.items()}
    extra = sum(alloc(sizes[k] * widths[k]) for k in place.trainable if "::lora_" in k or k in place.copies)
    grads = sum(alloc(sizes[k] * widths[k]) for k in place.trainable)
    states = sum(optimizer_state_bytes(setup.optimizer, s, widths[k], setup.sgd_momentum)
                 for k, s in place.trainable.items())
    copied, frozen = autocast_copy_elems(cg, setup, place, blocks) if setup.autocast else (0, 0)
    copies, held = 2.0 * copied, 2.0 * frozen
    dequant = 2.0 * max((numel[k] for k in place.quantized), default=0)
    transient = 2 * 4.0 * max(sizes.values(), default=0) if setup.optimizer == "adafactor" else 0.0
    act = activation_delta(cg, setup, place, kernel_outputs) / (max(len(blocks), 1) if setup.checkpointing else 1)
    return {"weight_bytes": float(weights + extra), "grad_bytes": float(grads), "state_bytes": float(states),
            "copy_bytes": copies, "held_copy_bytes": held, "act_delta_bytes": float(act), "transient_bytes": transient,
            "dequant_bytes": dequant}


def gradient_elements(place: Placement) -> dict[str, int]:
    """The gradient elements each parameter key gets under a placement: a trainable parameter's own, an adapted
    Linear weight's adapters' (``A`` and ``B``, allocated as the weight's node runs its backward), none for a frozen
    one (what the backward's walk, :func:`gpupred.memory.physics.peak_gradients`, allocates)."""
    out: dict[str, int] = {}
    for key, shape in place.trainable.items():
        base = key.split("::lora_")[0]
        out[base] = out.get(base, 0) + math.prod(shape)
    return out


def autocast_copy_elems(cg: Any, setup: TrainingSetup, place: Placement, blocks: Sequence[Sequence[int]] = ()
                        ) -> tuple[int, int]:
    """Elements of autocast's 16-bit weight copies the footprint counts (see the module notes): in a full fine-tune
    those of the weights autocast's 16-bit ops read (cached: :func:`gpupred.graph.canonical.cast_copies`; an
    embedding read by a gather alone or a norm's scale has none), the adapters' (cached) and the frozen, unquantized
    Linear weights' under LoRA, less,
    under checkpointing, the frozen ones read only inside checkpointed ``blocks`` (not cached, saved by no forward
    there); and of them the frozen weights' alone (not cached: held until their node's backward, past the forward's
    autocast region)."""
    if not setup.lora:
        return sum(cast_copies(cg, per_reader=False).values()), 0
    numel = {k: int(cg.param_sizes[k][0]) for k in place.shapes}
    inside = {n for b in blocks for n in b} if setup.checkpointing else set()
    adapters = sum(math.prod(s) for k, s in place.trainable.items() if "::lora_" in k)
    held = [k for k, w in linear_weights(cg).items()
            if k not in place.quantized and (k in place.trainable or not inside.issuperset(w.nodes))]
    return adapters + sum(numel[k] for k in held), sum(numel[k] for k in held if k not in place.trainable)


LORA_CONFIG_FIELDS: dict[str, str] = {  # adapter_config.json field -> TrainingSetup option
    "r": "lora_rank", "lora_alpha": "lora_alpha", "target_modules": "lora_targets", "lora_dropout": "lora_dropout",
    "bias": "lora_bias", "modules_to_save": "lora_modules_to_save"}


def read_adapter_config(path: str | Path) -> dict[str, Any]:
    """The LoRA options of a peft ``adapter_config.json`` as :class:`gpupred.setups.TrainingSetup` names them (one
    line naming the file and the field when it is malformed)."""
    p = Path(path)
    if not p.is_file():
        raise GpupredError(f"{path}: no such adapter config (give peft's adapter_config.json)")
    try:
        raw = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise GpupredError(f"{path}: not JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise GpupredError(f"{path}: an adapter config is a JSON object, got {type(raw).__name__}")
    kind = raw.get("peft_type", "LORA")
    if str(kind).upper() != "LORA":
        raise GpupredError(f"{path}: field 'peft_type' is {kind!r}; only LORA adapters are modelled")
    checks: dict[str, Any] = {
        "r": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "lora_alpha": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "target_modules": lambda v: v is None or isinstance(v, str) or (
            isinstance(v, list) and all(isinstance(t, str) for t in v)),
        "lora_dropout": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "bias": lambda v: isinstance(v, str),
        "modules_to_save": lambda v: v is None or (isinstance(v, list) and all(isinstance(t, str) for t in v)),
    }
    if "r" not in raw:
        raise GpupredError(f"{path}: field 'r' (the LoRA rank) is missing")
    out: dict[str, Any] = {}
    for name, option in LORA_CONFIG_FIELDS.items():
        if name not in raw:
            continue
        if not checks[name](raw[name]):
            raise GpupredError(f"{path}: field {name!r} is malformed ({raw[name]!r})")
        value = raw[name]
        if name == "target_modules" and isinstance(value, str):
            value = (value,)
        out[option] = tuple(value) if isinstance(value, list) else value
    out.setdefault("lora_modules_to_save", ())
    out["lora_modules_to_save"] = out["lora_modules_to_save"] or ()
    return out


def model_type_of(graph: Any) -> str | None:
    """The transformers model type of a graph a model name was exported to (recorded beside it), else None."""
    if not isinstance(graph, (str, Path)):
        return None
    side = Path(graph).with_suffix(".json")
    try:
        info = json.loads(side.read_text()) if side.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return None
    config = info.get("config") if isinstance(info, dict) else None
    return str(config["model_type"]) if isinstance(config, dict) and config.get("model_type") else None
