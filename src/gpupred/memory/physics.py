"""Analytic GPU memory of one training job: what a PyTorch training step holds at its peak, term by term.

The footprint (MiB) of a job training with torch's caching allocator, as NVML sees its process:

    context(gpu, source) + steady + varying + allocator reserve(varying), at the step's peak, where
    steady  = weights + optimizer state + input batch + workspace      (allocated once, held at their size)
    varying = the larger of the backward's peak, autocast weight copies + activations saved for backward + loss
              buffers + the gradients live beside them, and the optimizer step's, every gradient + the step's
              temporaries (the activations then freed)

The peak: ``zero_grad(set_to_none=True)`` frees the gradients before the forward, so the forward ends with the
activations and no gradient; backward then frees each kept tensor at the first node that read it and allocates each
parameter's gradient at the last node that read it (:func:`peak_gradients` walks the graph in reverse: AlexNet's and
VGG's classifiers, read last, have their gradients written while every convolution's activations are still kept; a
ResNet's are spread; a recommender's embeddings, read first, only at the end), and the optimizer step holds every
gradient and, for torch's foreach implementations, a gradient-sized temporary (:func:`step_temporaries`). Against
torch's own ``max_memory_allocated`` on the 297 runs of this project's sweeps, the sum of every term (the rule before)
had a median |log error| of 0.101, the peak 0.078 (NeuMF with Adam: -0.21 -> -0.005: its peak is the step's
square root). Gradient accumulation keeps every gradient through the forward.
The allocator ratio multiplies the varying terms only: weights and optimizer state are allocated once, in blocks
the caching allocator rounds by at most 2 MiB, while the per-step tensors fragment its segments. Fitted per source,
that reads NVML's figure at least as well as the ratio on every term (the sweeps' runs, in sample: median |error|
7.1% -> 6.6%, p90 20.6% -> 18.0%) and keeps a 7B model's 100 GiB of weights and state from growing by a fifth.
The reserve grows slower than the bytes it holds: torch's reserved less allocated peak on the sweeps' 337 runs goes
as the varying terms to the power 0.73 (log-log slope; the median reserve is 28-38% of the varying terms below 500 MiB,
11-13% above 8 GiB), as a reserve made of partly used 2 MiB and 20 MiB segments and of split blocks would. So the
reserve is ``(ratio - 1) x 1 GiB x (varying / 1 GiB) ** exponent`` (:func:`allocator_reserve_mib`), and each
constant is fitted on the figure it is (:meth:`Footprint.fit`): the ratio and exponent on torch's reserved less
allocated peak, the context on NVML's figure less torch's reserved peak. Fitted jointly on NVML's figure alone (as
before), a ratio of 1.24 on every varying MiB also took up the terms' own errors on the catalog's CNNs, and it
over-counted the reserve of every fine-tune this project measured (LLaMA-1.1B full, LoRA and QLoRA on an H200,
never fitted on: device memory median error 7.0% -> 3.4%, torch's reserved peak 7.9% -> 4.0%).

- weights = gradients = ``param_bytes`` (fp32 master weights and fp32 gradients, also under autocast; half of it
  under pure bf16, whose weights, gradients and optimizer state are bf16);
- optimizer state = ``OPTIMIZER_STATES[optimizer] x param_bytes`` (SGD with momentum: one buffer; plain
  SGD none; Adam/AdamW two moments; RMSprop/Adagrad one);
- autocast weight copies = two bytes per element of every fp32 weight autocast's 16-bit ops read
  (:func:`gpupred.graph.canonical.cast_copies`, ``cast_copy_elems``; ``param_bytes / 2`` where a frame has no graph
  terms) under bf16/fp16: autocast caches a 16-bit copy of every weight a matmul/convolution reads for the whole
  forward (an embedding read by a gather alone, a norm's scale: none); through the backward each copy lives as long as
  the saved tensors of the node that read it, so the backward's walk frees it there (``peak_grad_elems_copies``: a
  full fine-tune whose optimizer state is small peaks at the backward's end with no copy left, LLaMA-7B's width under
  SGD, 8-bit AdamW or Adafactor -0.2%, -0.3% and -0.0% against torch's count, +14%, +17% and +18% while they were held
  to the peak); under activation checkpointing the cache (``cached_cast`` in aten/src/ATen/autocast_mode.cpp: fp32
  leaves that require grad, on CPU and CUDA alike) lives until the outermost autocast region exits (``torch.amp.autocast.__exit__``: ``clear_autocast_cache``
  at nesting 0), so the forward's peak holds every copy, and the recompute of one block in backward
  (``torch.utils.checkpoint`` re-enters autocast with the forward's settings) re-creates that block's copies only, a
  subset of the same size or less;
- activations saved for backward = each tensor autograd keeps, once, at the dtype torch saves it in (``graph_terms``;
  Dropout's bool masks, one byte per element of its input, and the masked copy of an input its writer keeps (eager
  attention's dropped-out probabilities), but neither for dropout inside a fused attention kernel,
  :func:`dropout_masks`, :func:`dropout_copies`;
  without graph terms, the feature row's ``activation_bytes``); under autocast by torch's CUDA op lists
  (:mod:`gpupred.graph.canonical`): an fp32 tensor that only 16-bit ops (matmuls, convolutions) save is kept as
  their 16-bit copies alone, one per op, a 16-bit tensor an fp32 op (normalizations, softmax, pow) saves as its fp32
  copy; minus what torch never keeps: the attention scores a fused attention kernel never writes
  (``SDPA_SOURCES``: torch >= 2.0 runs ``nn.MultiheadAttention`` through scaled_dot_product_attention,
  which keeps no [B, H, S, S] tensor): the Softmax output (fp32 under autocast), the QK^T product, its
  scale/mask ops and the scaled Q and K (at the precision's width), while the kernel keeps the Q, K and V it read
  (:func:`fused_operands`); and the outputs of data-movement ops
  (``VIEW_OPS``: transposes, gathers, slices), which torch runs as views or whose backward saves nothing, save where
  a batched product's fold cannot view an operand that is a part of a permuted tensor and saves a copy of it alone
  (:func:`matmul_copies`; timm's Swin at batch 32 against torch's MemTracker count: +4.4% while its window
  attention kept the packed QKV projection, -0.4% with the copies, benchmarks/bench_memory_oracle.py; at batch 8
  in tests/test_memory_oracle.py); and the
  operand of a product or quotient by a one-element tensor (a scale: autograd saves one operand only for the other's
  gradient; measured against torch's MemTracker in tests/test_memory_terms.py);
- loss buffers = ``LOSS_BUFFERS`` fp32 tensors the size of the graph outputs (logits), live together as the cross
  entropy's backward runs log_softmax's: its saved output, the gradient of that output and the gradient of the
  logits it writes (an fp32 upcast of 16-bit logits, the catalog's ``F.cross_entropy(out.float(), ...)``, is freed
  after the forward: log_softmax saves its output, not its input); the logits themselves are not kept (no op saves
  them, and a loop that computes the loss from the model's output without holding it, the catalog's and
  transformers' Trainer, frees them after the forward);
- input batch = ``input_bytes`` (the measured loops keep their batches resident on the GPU);
- workspace = :func:`workspace_mib`: torch's cuBLAS workspace, one per handle and stream, allocated through the
  caching allocator: 32 MiB on Hopper, 8 MiB + 128 KiB elsewhere (``CUBLAS_WORKSPACE_CONFIG``'s default in
  ``aten/src/ATen/cuda/CublasHandlePool.cpp``; cuBLASLt shares it), two handles in a training step (the
  forward's thread and the autograd engine's); cuDNN's convolution workspaces are in ``allocator``;
- allocator reserve = what the caching allocator holds beyond the varying tensors (rounding to 512 B blocks and
  2/20 MiB segments, fragmentation between forward and backward): its ratio at 1 GiB of varying terms and its
  exponent (none by default), fitted on torch's own peaks where a source records them (this project's); a source
  that does not (Lucid, GPUMemNet) keeps a ratio on every varying MiB fitted with its context on NVML's figure;
- context = the CUDA context plus the kernel images that lazy loading brings in (cuBLAS, cuDNN, torch's
  own kernels): ``CONTEXT_MIB`` by GPU kind (the H200 data card measured a bare context at 619 MiB), fitted
  per (GPU kind, source) on training rows where there are any (NVML's figure less torch's reserved peak, their
  median, where the rows record torch's peaks: 758 MiB on the H200 in training, the bare 619 MiB plus cuBLAS's and
  cuDNN's handles and the kernels a step loads). On a GPU without a measurement or a fit it
  comes from the GPU's architecture and the software (:func:`context_mib`): the local-memory reservation, which
  the driver makes for every thread the GPU can hold (``hardware.max_threads_per_sm x SMs x 1 KiB``, the default
  ``cudaLimitStackSize``: NVIDIA's answer on its developer forum, "Local memory management", 2024, and
  ``cuCtxCreate``'s ``CU_CTX_LMEM_RESIZE_TO_MAX``; threads per SM from the CUDA C++ Programming Guide's
  compute-capability table), plus the software's share (the H200's 619 MiB less its 264 MiB of local memory:
  355 MiB under torch 2.11, CUDA 13, lazy loading), plus the kernel images that eager module loading adds:
  362 MiB (PyTorch PR #86509, torch 1.13: 636 MiB eager against 274 MiB lazy). Lazy loading needs a CUDA 11.7+
  runtime and is on when torch >= 1.13 sets ``CUDA_MODULE_LOADING=LAZY`` or the driver defaults to it (Linux,
  CUDA 12.2+: CUDA C++ Programming Guide, "Lazy Loading"). A GPU kind its source was fitted on elsewhere
  borrows the fits' software share (their context less their local memory) and adds its own local memory; a
  source without any fit borrows the mean software share of every fit.

The training setup (:class:`gpupred.setups.TrainingSetup`) changes the terms: pure bf16 halves weights, gradients
and state and stores every activation in 2 bytes with no autocast copies; activation checkpointing keeps only each
checkpointed block's inputs, plus the recomputed activations of the largest block during its backward
(:mod:`gpupred.step.physics.blocks`), and autocast's copies of activations only where their source is kept; its
step has three candidate peaks, the forward's end, the loss's backward and the recomputed block's, whose weight
copies autocast casts again (:func:`checkpoint_phases`; against torch's MemTracker count, LLaMA-7B LoRA r16 bf16
sequence 2048 -0.1%, +1.1% with the recomputed block, the loss buffers and the weight copies counted at once); the
attention option decides which cores' scores a fused kernel never writes
(:func:`gpupred.step.physics.attention.fused_cores`); gradient accumulation keeps the gradients through the forward;
the optimizer's implementation decides the step's temporaries (fused and for-loop steps have none).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from gpupred.columnar import Rows, equal, floats, frame_values, is_frame, notna, numeric, text
from gpupred.errors import GpupredError
from gpupred.graph.canonical import (AUTOCAST_16BIT_OPS, AUTOCAST_FP32_OPS, autocast_fp32, cast_copies,
                                     shape_elements)
from gpupred.graph.strides import copied_operands, part_operands
from gpupred.setups import DEFAULT_SETUP, TrainingSetup
from gpupred.workloads.spec import spec_or_none

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

MIB = float(2**20)
OPTIMIZER_STATES: dict[str, float] = {  # param-sized buffers an optimizer keeps (the catalog's sgd has momentum)
    "sgd": 1.0, "sgd_momentum": 1.0, "sgd_nomomentum": 0.0, "adam": 2.0, "adamw": 2.0, "rmsprop": 1.0, "adagrad": 1.0,
    # a frame row without gpupred.finetune's PARAM_COLUMNS (which count these tensor by tensor): bitsandbytes' 8-bit
    # moments (2 bytes and two fp32 absmax per 256 elements) and its paged fp32 moments, per fp32 parameter byte;
    # Adafactor's factored second moment (a row and a column per matrix) needs the shapes: none without them
    "adamw8bit": (2 + 8 / 256) / 4, "paged_adamw8bit": (2 + 8 / 256) / 4, "paged_adamw": 2.0, "adafactor": 0.0,
}
HALF_PRECISIONS: frozenset[str] = frozenset({"bf16", "fp16"})
CONTEXT_MIB: dict[str, float] = {  # bare CUDA context by GPU kind (gpupred.hardware short name)
    "H200": 619.0,  # measured: data/raw/h200/2026-11-catalog (torch 2.11, CUDA 13, lazy module loading)
}
DEFAULT_CONTEXT_MIB = 619.0  # the one bare context measured here: the start of context fits
STACK_BYTES = 1024  # cudaLimitStackSize's default: local memory reserved per resident thread
EAGER_IMAGES_MIB = (666_632_192 - 287_047_680) / MIB  # kernel images eager loading adds (PyTorch PR #86509): 362 MiB
CUBLAS_WORKSPACE_MIB: dict[bool, float] = {True: 32.0, False: 8.125}  # per handle: Hopper (sm90) or not (torch)
CUBLAS_HANDLES = 2  # the forward's thread and the autograd engine's backward thread each take a handle
WORKSPACE_MIB = CUBLAS_HANDLES * CUBLAS_WORKSPACE_MIB[True]  # on Hopper: 64 MiB
SDPA_SOURCES: frozenset[str] = frozenset({"gpupred"})  # sources that measured with torch >= 2 fused attention
SOURCES: tuple[str, ...] = ("gpupred", "lucid", "gpumemnet")  # whose memory measurements it models
TORCH_PEAK_COLUMNS: tuple[str, str] = ("torch_peak_allocated_mib", "torch_peak_reserved_mib")  # torch's own peaks
REFERENCE_VARYING_MIB = 1024.0  # the allocator ratio is read at 1 GiB of varying terms
EXPONENT_BOUNDS: tuple[float, float] = (0.3, 1.5)  # the allocator exponent's fit stays inside
TERMS: tuple[str, ...] = ("weights", "gradients", "optimizer", "optimizer_step", "autocast_copies", "activations",
                          "loss", "inputs", "workspace")
STEADY_TERMS: tuple[str, ...] = ("weights", "optimizer", "inputs", "workspace")  # allocated once: no allocator reserve
FOOTPRINT_COLUMNS: tuple[str, ...] = (  # graph terms beyond the feature row (graph_terms)
    "saved_elems", "fp32_elems", "half_elems", "index_elems", "softmax_elems", "attention_elems", "fused_fp32_elems",
    "fused_half_elems", "output_elems", "peak_grad_elems", "peak_grad_elems_half", "peak_grad_elems_copies",
    "cast_copy_elems", "outside_elems",
    "outside_fp32_elems", "outside_half_elems", "recompute_copy_elems", "dropout_mask_elems", "fused_mask_elems",
    "dropout_copy_elems", "fused_copy_elems")
VIEW_OPS: frozenset[str] = frozenset({"Transpose", "Gather", "Slice", "Split", "Expand"})
ALIAS_OPS: frozenset[str] = frozenset({  # no new memory (metadata, views of the same storage)
    "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size", "Constant", "Dropout"})
CONTRACTION_OPS: frozenset[str] = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "LSTM", "GRU", "RNN"})
LOWER_PRECISION_OPS: frozenset[str] = AUTOCAST_16BIT_OPS  # autocast's 16-bit ops: their fp32 inputs cast to
# 16-bit copies, one per op (autocast caches the casts of leaf weights only): gpupred.graph.canonical's CUDA lists
FP32_OPS: frozenset[str] = AUTOCAST_FP32_OPS  # autocast's fp32 ops: their 16-bit inputs cast to fp32 copies
NO_INPUT_SAVE: frozenset[str] = frozenset({  # backward needs none of their inputs
    "Add", "Sub", "Concat", "Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "AveragePool", "GlobalAveragePool",
    "ReduceMean", "ReduceSum", "Neg", "Cast", "Pad"})
OUTPUT_SAVE: frozenset[str] = frozenset({  # ops that save their output for backward
    "Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp"})
FLOAT_ELEM_TYPES: frozenset[int] = frozenset({1, 10, 11, 16})  # onnx FLOAT, FLOAT16, DOUBLE, BFLOAT16
SCORE_OPS: frozenset[str] = frozenset({"MatMul", "Einsum", "Add", "Mul", "Div", "Sub", "Where"})
SCALE_OPS: frozenset[str] = frozenset({"Mul", "Div", "Transpose"})
RESULT_SAVE_IN_PLACE: frozenset[str] = frozenset({"LeakyRelu"})  # in place, its backward reads its output
LOSS_BUFFERS = 3.0  # fp32 logits-sized tensors at the cross entropy's backward (tests/test_memory_terms.py)
SCALAR_SAVE_OPS: frozenset[str] = frozenset({"Mul", "Div"})  # by a one-element tensor: nothing of the other kept


def graph_terms(path_or_proto: Any, batch_size: int, setup: TrainingSetup | None = None,
                gradients: dict[str, int] | None = None, quantized: Collection[str] = ()) -> dict[str, float]:
    """Element counts of a graph's activations in canonical form at a batch size (``FOOTPRINT_COLUMNS``), under a
    training setup's attention and checkpointing options (default: the sweeps').

    ``saved_elems``: the op outputs autograd keeps for backward (read by an op that saves its inputs, i.e. not
    in ``NO_INPUT_SAVE``; written by one that saves its output, ``OUTPUT_SAVE``; with views, ``VIEW_OPS``,
    resolved to the tensor they alias, since torch runs transposes, gathers and slices as views);
    ``fp32_elems`` and ``half_elems``: what autocast saves of them in fp32 and in 16 bits, each saved tensor counted
    once at the dtype torch saves it in (:func:`autocast_fp32` its dtype, :func:`_saved_forms` its copies): an fp32
    tensor that only ``LOWER_PRECISION_OPS`` save is kept as their 16-bit copies alone, one per op;
    ``fused_fp32_elems`` and ``fused_half_elems``: the same of the tensors a fused attention kernel never writes
    (``softmax_elems`` and ``attention_elems``), less the operands it keeps that no written-out op kept
    (:func:`fused_operands`); ``softmax_elems``: Softmax outputs of the attention cores
    the setup fuses; ``attention_elems``: their other kept tensors a fused kernel never writes (QK^T, its
    scale/mask ops, the scaled Q and K), less those operands, and for exported scaled_dot_product_attention cores the
    setup runs as their ops, the exporter's scaled Q and K (:func:`_attention_tensors`); ``output_elems``: the graph
    outputs (logits);
    ``dropout_mask_elems``: Dropout's masks (:func:`dropout_masks`), ``fused_mask_elems`` those of them inside the
    attention cores the setup fuses (dropout on the probabilities, which a fused kernel draws and keeps no mask of);
    ``dropout_copy_elems``: Dropout's outputs kept beside their inputs (:func:`dropout_copies`), ``fused_copy_elems``
    those of them inside the attention cores the setup fuses.
    Under checkpointing the kept tensors are those of :func:`checkpointed`. ``gradients``: the gradient elements
    of each parameter key where not every parameter trains (LoRA: :func:`gpupred.finetune.gradient_elements`), which
    the backward's walk (:func:`peak_gradients`) allocates; None: every parameter's. ``quantized``: the parameter
    keys of QLoRA's 4-bit weights (:attr:`gpupred.finetune.Placement.quantized`), whose contractions write their
    input's dtype under autocast (:func:`autocast_fp32`).
    """
    from gpupred.graph.loader import cached_graph

    job = setup or DEFAULT_SETUP
    graph, _ = cached_graph(path_or_proto, int(batch_size))
    cg = graph.form(True)
    grads_key = None if gradients is None else tuple(sorted(gradients.items()))
    quant_key = frozenset(quantized)
    return dict(cg.memo(("graph_terms", job.attention, job.checkpointing, grads_key, quant_key),  # what they read
                        lambda: _graph_terms(graph, cg, job, gradients, quant_key)))


def _graph_terms(graph: Any, cg: Any, job: TrainingSetup, gradients: dict[str, int] | None = None,
                 quantized: frozenset[str] = frozenset()) -> dict[str, float]:
    """:func:`graph_terms` of a loaded graph and its canonical form."""
    producer, numel, kept = cg.memo("kept_tensors", lambda: _tensors_kept(cg))  # every setup's start
    attention, softmax = _attention_tensors(cg, producer, job.attention)
    operands = fused_operands(cg, job.attention, numel, producer) - kept
    blocks = checkpoint_blocks_of(cg) if job.checkpointing else None
    recompute: Recompute = Recompute()
    if blocks is not None:
        kept, operands = checkpointed(cg, kept, numel, blocks), checkpointed(cg, kept | operands, numel, blocks)
        operands -= kept
        recompute = recomputed_block(cg, kept | operands, numel, blocks, job, gradients)
    counts = _activation_counts(cg, producer, numel, kept, attention | softmax, operands, quantized)
    counts.update(
        softmax_elems=float(sum(numel.get(t, 0) for t in softmax & kept)),
        attention_elems=float(sum(numel.get(t, 0) for t in attention & kept) - sum(numel.get(t, 0) for t in operands)),
        output_elems=float(sum(shape_elements(graph.shapes.get(o)) for o in graph.graph_outputs)))
    masks = dropout_masks(cg, numel, None if blocks is None else blocks[1])  # a fused attention kernel keeps no mask
    counts.update(dropout_mask_elems=float(sum(masks.values())),
                  fused_mask_elems=float(sum(n for t, n in masks.items() if t in attention | softmax)))
    copies = dropout_copies(cg, producer, numel, kept)
    counts.update(dropout_copy_elems=float(sum(copies.values())),
                  fused_copy_elems=float(sum(n for t, n in copies.items() if t in attention | softmax)))
    walk = cg.memo_structure(("gradient_walk", tuple(graph.graph_outputs)),  # every setup's and batch size's: it
                             lambda: gradient_walk(cg, producer, graph.graph_outputs))  # reads the nodes alone
    counts["peak_grad_elems"], counts["peak_grad_elems_half"] = peak_gradients(
        cg, producer, numel, kept | operands, (1.0, 2.0), counts["output_elems"], graph.graph_outputs, gradients, walk)
    # under autocast, its 16-bit weight copies freed node by node through the backward too (a step without
    # checkpointing: checkpoint_phases places them otherwise)
    cast = cast_copies(cg, gradients is not None, quantized)
    counts["cast_copy_elems"] = float(sum(cast.values()))
    (counts["peak_grad_elems_copies"],) = peak_gradients(
        cg, producer, numel, kept | operands, (2.0,), counts["output_elems"], graph.graph_outputs, gradients, walk,
        cast)
    # under checkpointing, what is kept outside the recomputed block (its inputs from earlier blocks, the head's), as
    # saved, fp32 and 16-bit elements; the block's own activations are the rest (checkpoint_phases)
    outside = (_activation_counts(cg, producer, numel, (kept | operands) - recompute.tensors, set(),
                                  quantized=quantized)
               if recompute.tensors else {})
    counts.update(outside_elems=outside.get("saved_elems", 0.0), outside_fp32_elems=outside.get("fp32_elems", 0.0),
                  outside_half_elems=outside.get("half_elems", 0.0),
                  recompute_copy_elems=float(sum(recompute.copies.values())))
    return counts


def _tensors_kept(cg: Any) -> tuple[dict[str, Any], dict[str, int], set[str]]:
    """(each tensor's producing node, each float tensor's elements, the tensors autograd keeps) of a canonical graph."""
    producer = {o: node for node in cg.nodes for o in node[3]}
    numel = {name: shape_elements(shape) for name, shape in cg.shapes.items() if shape and shape[1] in FLOAT_ELEM_TYPES}
    return producer, numel, _kept_tensors(cg, producer)


def peak_gradients(cg: Any, producer: dict[str, Any], numel: dict[str, int], kept: set[str],
                   ratios: tuple[float, ...], output_elems: float = 0.0, outputs: Sequence[str] = (),
                   gradients: dict[str, int] | None = None,
                   walk: tuple[dict[str, int], dict[str, int], int] | None = None,
                   copies: dict[int, int] | None = None) -> tuple[float, ...]:
    """Parameter elements whose gradients are live at the backward's peak (see the module notes).

    Backward runs the nodes in reverse: a parameter's gradient is allocated at the backward of the last node that
    reads it (a tied embedding: at the head), and a kept tensor is freed at the backward of the first node that
    reads it. While node k runs, the gradients of the parameters read at k or later and the kept tensors first read
    at k or earlier are live; the peak is the k with the most bytes, a gradient element weighing ``ratio``
    activation elements (2: fp32 gradients beside 16-bit activations under autocast). Before any node, the cross
    entropy's backward holds its ``LOSS_BUFFERS`` fp32 buffers the size of the logits (``output_elems``, each element
    weighing ``ratio`` too) and no gradient; of them only the logits' gradient is left while the node that wrote the
    logits (through views) runs its backward, and none after. ``gradients``: each parameter key's gradient elements
    where not every parameter trains (a frozen one has none; a LoRA-adapted weight's are its adapters'). Returned,
    for each of ``ratios``: the gradient elements live at that peak beyond the activations and the loss buffers all
    kept at once (0 when the peak is the loss's). A decoder's head gradient is therefore not added on top of the loss
    buffers: GPT-2 large's width at 4 layers, fp32, against torch's MemTracker count, 4,540 MiB with it and 4,290
    without, torch 4,290 (tests/test_memory_oracle.py). ``walk``: :func:`gradient_walk` of the graph, ``producer``
    and ``outputs`` when already known. ``copies``: autocast's 16-bit weight copies by the node whose backward frees
    them (:func:`gpupred.graph.canonical.cast_copies`), walked like kept tensors of that many elements: the peak is
    then beyond them too."""
    n = len(cg.nodes)
    grads, acts = np.zeros(n + 1), np.zeros(n + 1)
    last, first, logits_at = walk if walk is not None else gradient_walk(cg, producer, outputs)
    for key, i in last.items():
        grads[i] += cg.param_sizes[key][0] if gradients is None else gradients.get(key, 0)
    for t in kept:
        acts[first.get(t, n)] += numel.get(t, 0)  # never read (a graph output): live until backward starts
    for i, elems in (copies or {}).items():
        acts[i] += elems
    later, kept_by = np.cumsum(grads[::-1])[::-1], np.cumsum(acts)  # node k: gradients read at >= k, kept <= k
    logits_grad = np.arange(n + 1) >= logits_at  # the nodes whose backward runs beside it
    return tuple(float(max((r * later + kept_by + r * output_elems * logits_grad).max()
                           - acts.sum() - r * output_elems * LOSS_BUFFERS, 0.0) / r) for r in ratios)


def gradient_walk(cg: Any, producer: dict[str, Any], outputs: Sequence[str] = ()
                  ) -> tuple[dict[str, int], dict[str, int], int]:
    """What :func:`peak_gradients` reads of the graph whatever it keeps: the last node that reads each parameter key,
    the first node that reads each tensor (through views: ``producer``) or, for an op that saves its output, writes
    it, and :func:`logits_writer` of ``outputs``."""
    last: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, (op, _d, ins, outs, *_) in enumerate(cg.nodes):
        for t in ins:
            if t in cg.params:
                last[cg.params[t]] = i
            first.setdefault(_base(t, producer), i)
            first.setdefault(t, i)  # a copy a product saves of a view (matmul_copies): freed at that product
        if op in OUTPUT_SAVE and outs:
            first.setdefault(outs[0], i)
    return last, first, logits_writer(cg, outputs)


def logits_writer(cg: Any, outputs: Sequence[str]) -> int:
    """The index of the first node that wrote one of ``outputs`` (the graph's), through the aliases after it
    (``ALIAS_OPS``); the last node when no node of the canonical graph writes one under its name."""
    writer = {o: i for i, node in enumerate(cg.nodes) for o in node[3]}
    found = []
    for out in outputs:
        i = writer.get(out)
        while i is not None and cg.nodes[i][0] in ALIAS_OPS and cg.nodes[i][2] and cg.nodes[i][2][0] in writer:
            i = writer[cg.nodes[i][2][0]]
        if i is not None:
            found.append(i)
    return min(found, default=len(cg.nodes) - 1)


def fused_operands(cg: Any, attention: str, numel: dict[str, int], producer: dict[str, Any]) -> set[str]:
    """What a fused attention kernel saves for its backward beyond its output, and what an exported
    scaled_dot_product_attention core run as its ops saves in place of the exporter's scaled copies (written-out
    attention scales the scores or Q alone): Q, K and V as it reads them (each core's
    operands before the exporter's views and scales, :class:`gpupred.step.physics.attention.AttentionCore`, resolved
    to the tensor they are views of: a packed projection's Q, K and V are one tensor, which V's product keeps). The
    written-out core keeps the exporter's scaled Q and K instead (its Q K^T saves them), so where no other op keeps
    them (a rotary embedding's outputs, a BERT layer's query and key projections) the fused kernel's savings are the
    scores less these (``graph_terms``' ``fused_*_elems`` and ``attention_elems``, taken out only for sources whose
    torch fuses attention); under autocast the kernel, a 16-bit op, keeps 16-bit copies (LLaMA's rotary outputs are
    fp32: its cos and sin are); their log-sum-exp (batch x heads x sequence) is left out. BERT-base's masked LM
    (12 layers, fp32, sequence 384, batch 8) against torch's MemTracker count: -5.3% without them, -0.1% with them
    (tests/test_memory_oracle.py)."""
    from gpupred.step.physics.attention import attention_cores, fused_cores

    cores = {c.first: c for c in fused_cores(cg, attention)}
    cores.update({c.first: c for c in attention_cores(cg) if c.sdpa})  # run as ops: its scaled copies are gone too
    found = {_base(t, producer) for c in cores.values() for t in (c.q, c.k, c.v)}
    return (found & numel.keys()) - set(cg.graph_inputs)  # a graph input is the batch: the inputs term counts it


def _attention_tensors(cg: Any, producer: dict[str, Any], attention: str) -> tuple[set[str], set[str]]:
    """(tensors no kernel writes or keeps, fused cores' softmax outputs) under the setup's attention option: a fused
    core's scores chain (:func:`_score_chain`) and softmax output; an exported ``scaled_dot_product_attention`` core
    run as its ops keeps its scores but not the exporter's scaled copies of Q and K (written-out attention scales
    the scores or Q alone, in place of both)."""
    from gpupred.step.physics.attention import attention_cores, fused_cores

    fused = {c.last for c in fused_cores(cg, attention)}
    gone: set[str] = set()
    softmax: set[str] = set()
    copies = matmul_copies(cg, producer)
    for core in attention_cores(cg):
        first = cg.nodes[core.first]
        if core.last not in fused:
            if core.sdpa:
                gone |= {i for i in first[2][:2] if i in producer and producer[i][0] in ("Mul", "Div")}
            continue
        gone |= {t for k, t in copies if k in core.nodes}  # the products' copies of their operands: no kernel's
        for i in core.nodes:
            op, _d, ins, outs, *_ = cg.nodes[i]
            if op == "Softmax" and ins:
                gone |= _score_chain(ins[0], producer)
                softmax.add(outs[0])
            elif i != core.last:
                gone |= set(outs)  # whatever else the core's nodes write (a NaN guard's output): inside the kernel
    return gone, softmax


def checkpoint_blocks_of(cg: Any) -> tuple[list[Any], dict[str, int]]:
    """The checkpointed blocks (:func:`gpupred.step.physics.blocks.checkpoint_blocks`) and, for each output of their
    nodes, the block it belongs to: they read the nodes alone, so they are kept for every batch size of the graph
    (read-only)."""
    from gpupred.step.physics.blocks import checkpoint_blocks

    def find() -> tuple[list[Any], dict[str, int]]:
        blocks = checkpoint_blocks(cg)
        return blocks, {o: k for k, b in enumerate(blocks) for i in b.nodes for o in cg.nodes[i][3]}

    return cg.memo_structure("checkpoint_blocks_of", find)


def dropout_masks(cg: Any, numel: dict[str, int], block_of: dict[str, int] | None) -> dict[str, int]:
    """The masks Dropout keeps for backward, by the tensor each masked (elements; one byte each, as CUDA's
    ``native_dropout`` saves a bool mask the size of its input): one per Dropout node of nonzero ratio in a
    training-mode export, which the canonical form drops (``CanonicalGraph.dropout_inputs``; torch runs p = 0 as the
    identity). Under checkpointing (``block_of``: :func:`checkpoint_blocks_of`'s map; None without), the masks made
    outside every checkpointed block, plus the largest block's, which its backward recomputes."""
    sizes: dict[str, int] = {}
    for t in getattr(cg, "dropout_inputs", ()):
        sizes[t] = sizes.get(t, 0) + numel.get(t, 0)
    if block_of is None:
        return sizes
    inner: dict[int, dict[str, int]] = {}
    for t, n in sizes.items():
        if t in block_of:
            inner.setdefault(block_of[t], {})[t] = n
    largest = max(inner.values(), key=lambda masks: sum(masks.values()), default={})
    return {**{t: n for t, n in sizes.items() if t not in block_of}, **largest}


def dropout_copies(cg: Any, producer: dict[str, Any], numel: dict[str, int], kept: set[str]) -> dict[str, int]:
    """Dropout's outputs autograd keeps beside its inputs, by the tensor each masked (elements): where a Dropout's
    input is kept by the op that wrote it (an ``OUTPUT_SAVE`` op: eager attention's Softmax) and its output is read
    by an op that saves it (the probabilities x V product), torch keeps both, the probabilities and their masked copy.
    The canonical form drops Dropout (its readers read its input), so the copy is counted here; a Dropout whose output
    only an op saving nothing reads (a residual Add) keeps no copy."""
    out: dict[str, int] = {}
    saved: set[str] | None = None
    for t in getattr(cg, "dropout_inputs", ()):
        node = producer.get(t)
        if t not in kept or t in out or node is None or node[0] not in OUTPUT_SAVE:
            continue
        if saved is None:
            saved = _inputs_saved(cg, producer)  # once, and only for a graph with a Dropout worth a look
        if t in saved:
            out[t] = numel.get(t, 0)
    return out


def checkpointed(cg: Any, kept: set[str], numel: dict[str, int],
                 blocks: tuple[list[Any], dict[str, int]] | None = None) -> set[str]:
    """What autograd keeps under activation checkpointing: the kept tensors made outside every checkpointed block
    (:func:`gpupred.step.physics.blocks.checkpoint_blocks`), each block's inputs and outputs read after it, and the kept
    tensors of the largest block (the earliest of equal ones), which its backward recomputes (the peak: one block at a
    time); graph outputs stay.
    ``blocks``: :func:`checkpoint_blocks_of` of ``cg``, where the caller has it."""
    out, _, largest = checkpoint_split(cg, kept, numel, checkpoint_blocks_of(cg) if blocks is None else blocks)
    return out | largest


def checkpoint_split(cg: Any, kept: set[str], numel: dict[str, int], blocks: tuple[list[Any], dict[str, int]]
                     ) -> tuple[set[str], int, set[str]]:
    """:func:`checkpointed`'s parts: (what stays kept outside every block's insides, with the blocks' inputs; the
    recomputed block's index; its own kept tensors)."""
    outside = read_outside_blocks(cg, blocks)
    blocks, block_of = blocks
    inputs = {t for b in blocks for t in b.inputs if t in numel and t not in cg.graph_inputs}
    out = {t for t in kept if t not in block_of or t in outside} | inputs
    inner: dict[int, set[str]] = {}
    for t in kept - out:
        inner.setdefault(block_of[t], set()).add(t)
    # of equal blocks (a decoder's identical layers) the earliest, whose recompute comes last, beside every later
    # block's gradients; blocks in index order, since the set above iterates in the string hash's order, which
    # changes from one process to the next
    k, largest = max(sorted(inner.items()), key=lambda kv: sum(numel.get(t, 0) for t in kv[1]), default=(0, set()))
    return out, k, largest


def read_outside_blocks(cg: Any, blocks: tuple[list[Any], dict[str, int]]) -> frozenset[str]:
    """The outputs of checkpointed blocks' nodes read outside their own block, and those never read (graph outputs);
    for a canonical graph's own blocks (:func:`checkpoint_blocks_of`), kept for every batch size of it."""
    from gpupred.graph.canonical import CanonicalGraph

    if isinstance(cg, CanonicalGraph) and blocks is checkpoint_blocks_of(cg):
        return cg.memo_structure("read_outside_blocks", lambda: _read_outside(cg, blocks))
    return _read_outside(cg, blocks)


def _read_outside(cg: Any, blocks: tuple[list[Any], dict[str, int]]) -> frozenset[str]:
    """:func:`read_outside_blocks`' search."""
    blocks_, block_of = blocks
    node_block = {i: k for k, b in enumerate(blocks_) for i in b.nodes}
    read = {t for node in cg.nodes for t in node[2]}
    outside = {t for i, node in enumerate(cg.nodes) for t in node[2] if t in block_of and node_block.get(i) != block_of[t]}
    return frozenset(outside | {t for t in block_of if t not in read})


@dataclass(frozen=True)
class Recompute:
    """What the recomputed checkpointed block holds during its backward (:func:`recomputed_block`): its kept tensors
    and autocast's 16-bit weight copies by the node that saves each (elements)."""

    tensors: frozenset[str] = frozenset()
    copies: dict[int, int] = field(default_factory=dict)


def recomputed_block(cg: Any, kept: set[str], numel: dict[str, int], blocks: tuple[list[Any], dict[str, int]],
                     job: TrainingSetup = DEFAULT_SETUP, gradients: dict[str, int] | None = None) -> Recompute:
    """Of ``kept`` (:func:`checkpointed`'s tensors), those the recomputed block holds during its backward (made inside
    the largest block and read only there: :func:`checkpoint_split`'s choice), and under autocast the
    16-bit copies of the fp32 weights its contractions read, which the recomputed forward casts again and each
    node's backward holds: a trainable weight's once (autocast caches it), a frozen one's per reader (``gradients``
    given: LoRA's base weights; not cached), none of QLoRA's 4-bit weights (dequantized inside each op)."""
    _, k, inner = checkpoint_split(cg, kept, numel, blocks)
    if not inner:
        return Recompute()
    copies = (cast_copies(cg, gradients is not None, nodes=sorted(blocks[0][k].nodes))
              if job.autocast and not job.qlora else {})
    return Recompute(frozenset(inner), copies)


def _activation_counts(cg: Any, producer: dict[str, Any], numel: dict[str, int], kept: set[str],
                       gone: set[str], operands: set[str] = frozenset(), quantized: frozenset[str] = frozenset()
                       ) -> dict[str, float]:
    """saved_elems, fp32_elems, half_elems and index_elems of a canonical graph (each kept tensor once, a folded
    BatchNorm's own output a second time: :func:`batchnorm_outputs`), and fused_fp32_elems and fused_half_elems: what
    fused attention kernels save, net: the ``gone`` tensors they never write less the ``operands`` they keep that no
    written-out op kept (see ``graph_terms``). ``producer`` and ``numel`` are the graph's own (``_tensors_kept``):
    what reads them alone is kept with the graph (:func:`_saved_dtypes`), per set of ``quantized`` weights."""
    fp32, (whole, half, full), pooled, read = cg.memo(("saved_forms", quantized),
                                                      lambda: _saved_dtypes(cg, producer, numel, quantized))

    def autocast_elems(tensors: set[str]) -> tuple[float, float]:
        """(fp32, 16-bit) elements autocast saves of the tensors: each kept whole at its dtype where an op saves it
        as it is (or where nothing names a form: graph outputs, checkpointed blocks' inputs), plus its copies."""
        f = h = 0
        for t in tensors:
            n = numel.get(t, 0)
            as_is = t in whole or not (half.get(t) or full.get(t))
            f += n * (full.get(t, 0) + (as_is and t in fp32))
            h += n * (half.get(t, 0) + (as_is and t not in fp32))
        return float(f), float(h)

    f32, f16 = autocast_elems(kept)
    g32, g16 = autocast_elems(kept & gone)
    g16 -= sum(numel.get(t, 0) for t in operands)  # the kernel, a 16-bit op under autocast, keeps 16-bit copies
    doubled = {t for t in read if t in kept}  # batchnorm_outputs: a second tensor each, at the convolution's dtype
    f32 += sum(numel.get(t, 0) for t in doubled if t in fp32)
    f16 += sum(numel.get(t, 0) for t in doubled if t not in fp32)
    return {"saved_elems": float(sum(numel.get(t, 0) for t in kept) + sum(numel.get(t, 0) for t in doubled)),
            "index_elems": float(pooled),
            "fp32_elems": f32, "half_elems": f16, "fused_fp32_elems": g32, "fused_half_elems": g16}


def _saved_dtypes(cg: Any, producer: dict[str, Any], numel: dict[str, int], quantized: frozenset[str] = frozenset()
                  ) -> tuple[set[str], tuple[set[str], dict[str, int], dict[str, int]], int, set[str]]:
    """What :func:`_activation_counts` reads of a canonical graph whatever it keeps (its ``producer`` and ``numel`` are
    the graph's own, from ``_tensors_kept``): the tensors autocast leaves in fp32, how each is saved
    (:func:`_saved_forms`), MaxPool's index elements, and :func:`batchnorm_outputs` of every tensor (to be cut down
    to the kept ones). Kept with the graph: a setup with and without checkpointing, and checkpointing's outside part,
    read the same."""
    fp32 = autocast_fp32(cg, producer, quantized)
    pooled = sum(numel.get(n[3][0], 0) for n in cg.nodes if n[0] == "MaxPool" and n[3])
    everything = set(producer)  # batchnorm_outputs keeps only produced tensors: of all, they are its whole answer
    return fp32, _saved_forms(cg, producer, fp32), pooled, batchnorm_outputs(cg, producer, everything)


def batchnorm_outputs(cg: Any, producer: dict[str, Any], kept: set[str]) -> set[str]:
    """The kept convolution outputs whose folded BatchNorm's output torch keeps as a tensor of its own: the canonical
    form folds BatchNorm into the convolution, so one name stands for both, and the convolution's output (what
    training-mode BatchNorm saves) is kept already; where an op that saves its input reads it (SiLU and Hardswish,
    whose in-place forms save a copy of what they overwrite; a convolution right after, as in a depthwise separable
    pair), torch keeps the BatchNorm's output too. ReLU (which saves its output), LeakyReLU (in place after a
    BatchNorm by convention, as in DCGAN, where it saves its output too: ``RESULT_SAVE_IN_PLACE``) and Add (nothing)
    add none. Every convolution of a graph that folded any BatchNorm counts as followed by one (a
    squeeze-and-excitation block's convolutions, which are not, are 1x1 in space)."""
    if cg.dropped.get("batchnorm folded", 0) == 0:
        return set()
    read = {_base(i, producer) for i in _inputs_saved(cg, producer, RESULT_SAVE_IN_PLACE) if i in producer}
    return {t for t in read if t in kept and producer[t][0] in ("Conv", "ConvTranspose")}


def _saved_forms(cg: Any, producer: dict[str, Any], fp32: set[str]) -> tuple[set[str], dict[str, int], dict[str, int]]:
    """How autocast saves each tensor for backward: (kept as it is, its 16-bit copies, its fp32 copies). A
    ``LOWER_PRECISION_OPS`` op saves a 16-bit copy of an fp32 input, one per op (autocast caches the casts of leaf
    weights only; the fp32 original is freed unless another op saves it); an ``FP32_OPS`` op an fp32 copy of a 16-bit
    input; any other op, and an op saving its output, the tensor as it is."""
    folded_bn = cg.dropped.get("batchnorm folded", 0) > 0
    copies = matmul_copies(cg, producer)
    whole: set[str] = set()
    half: dict[str, int] = {}
    full: dict[str, int] = {}
    for k, (op, _d, ins, outs, *_) in enumerate(cg.nodes):
        if op in VIEW_OPS or op in ALIAS_OPS:
            continue
        if op in OUTPUT_SAVE or (folded_bn and op in ("Conv", "ConvTranspose")):
            whole |= set(outs[:1])
        if op in NO_INPUT_SAVE:
            continue
        for t in _saved_names(cg, producer, k, op, ins, copies):
            if op in LOWER_PRECISION_OPS and t in fp32:
                half[t] = half.get(t, 0) + 1
            elif op in FP32_OPS and t not in fp32:
                full[t] = full.get(t, 0) + 1
            else:
                whole.add(t)
    return whole, half, full


def _base(t: str, producer: dict[str, Any]) -> str:
    """The tensor a view or alias resolves to (torch runs transposes, gathers, slices and reshapes as views)."""
    node = producer.get(t)
    while node is not None and (node[0] in VIEW_OPS or node[0] in ALIAS_OPS) and node[2] and node[2][0] in producer:
        t, node = node[2][0], producer.get(node[2][0])
    return t


def _kept_tensors(cg: Any, producer: dict[str, Any]) -> set[str]:
    """The op outputs autograd keeps for backward: read by an op that saves its inputs or written by one that saves
    its output; views resolve to the tensor they alias. With BatchNorm folded into convolutions, each convolution's
    output is kept too (training-mode BatchNorm saves its input). A graph output (the logits) is not: the cross
    entropy's log_softmax saves its output, not its input, and a training loop that computes the loss from the model's
    output without holding it (the catalog's, transformers' Trainer) frees the logits after the forward; the loss's
    own buffers are the ``loss`` term."""
    folded_bn = cg.dropped.get("batchnorm folded", 0) > 0
    copies = matmul_copies(cg, producer)
    kept: set[str] = set()
    for k, (op, _d, ins, outs, *_) in enumerate(cg.nodes):
        if op in VIEW_OPS or op in ALIAS_OPS:
            continue
        if op not in NO_INPUT_SAVE:
            kept |= _saved_names(cg, producer, k, op, ins, copies)
        if op in OUTPUT_SAVE or (folded_bn and op in ("Conv", "ConvTranspose")):
            kept |= set(outs[:1])
    copied = {t for _k, t in copies}
    return {t for t in kept if t in producer and (t in copied or (producer[t][0] not in VIEW_OPS and
                                                                  producer[t][0] not in ALIAS_OPS))}


def matmul_copies(cg: Any, producer: dict[str, Any]) -> frozenset[tuple[int, str]]:
    """(node, operand) of the products that save a copy of an operand, not the tensor it is a view of
    (:func:`gpupred.graph.strides.copied_operands`), kept with the graph at its batch size; the operands it judges
    (:func:`gpupred.graph.strides.part_operands`) are found once for every batch size."""
    return cg.memo("matmul_copies", lambda: copied_operands(
        cg, producer, cg.memo_structure("matmul_part_operands", lambda: part_operands(cg, producer))))


def _saved_names(cg: Any, producer: dict[str, Any], k: int, op: str, ins: list[str],
                 copies: frozenset[tuple[int, str]]) -> set[str]:
    """The tensors node ``k`` (an op saving its inputs) keeps: each saved input resolved to the tensor it is a view
    of, or itself where the node saves a copy of it (``copies``: :func:`matmul_copies`)."""
    return {i if (k, i) in copies else _base(i, producer) for i in _saved_inputs(cg, op, ins, producer)
            if i in producer}


def _inputs_saved(cg: Any, producer: dict[str, Any], skip: frozenset[str] = frozenset()) -> set[str]:
    """Every input (as named, views unresolved) that some op saving its inputs keeps (:func:`_saved_inputs`), the ops
    of ``skip`` aside."""
    out: set[str] = set()
    for op, _d, ins, *_ in cg.nodes:
        if op not in NO_INPUT_SAVE and op not in VIEW_OPS and op not in ALIAS_OPS and op not in skip:
            out.update(_saved_inputs(cg, op, ins, producer))
    return out


def _saved_inputs(cg: Any, op: str, ins: list[str], producer: dict[str, Any]) -> list[str]:
    """The inputs an op saving its inputs keeps: a product or quotient by a one-element tensor (a scale: torch's
    ``mul``/``div`` by a scalar) or by a constant (a tensor no node of the step computes and no parameter: a rotary
    embedding's cos and sin, folded from the positions; a product with one, or a quotient by one) keeps nothing of its
    other operand, since autograd saves one operand only for the other's gradient and a constant needs none."""
    if op in SCALAR_SAVE_OPS and len(ins) == 2:
        if any(shape_elements(cg.shapes.get(i)) == 1 for i in ins):
            return []
        constant = [i not in producer and i not in cg.params and i not in cg.graph_inputs for i in ins]
        if constant[1] or (op == "Mul" and constant[0]):
            return []
    return list(ins)


def _score_chain(tensor: str, producer: dict[str, Any]) -> set[str]:
    """The attention scores feeding a Softmax: scale/mask ops back to the QK^T MatMul, and its scaled inputs."""
    chain: set[str] = set()
    node = producer.get(tensor)
    while node is not None and node[0] in SCORE_OPS:
        chain.add(node[3][0])
        if node[0] in ("MatMul", "Einsum"):
            chain |= {i for i in node[2] if producer.get(i) is not None and producer[i][0] in SCALE_OPS}
            break
        node = next((producer[i] for i in node[2] if i in producer), None)
    return chain


def _need(df: Rows, cols: tuple[str, ...]) -> None:
    """Raise naming the first column the footprint needs and the frame lacks."""
    for col in cols:
        if col not in df.columns:
            raise GpupredError(f"memory footprint needs column {col!r}; use a dataset frame (gpupred.dataset) "
                               "with footprint_columns() added")


def footprint_terms(df: pd.DataFrame, source: str | pd.Series = "gpupred") -> pd.DataFrame:
    """Each allocated term of the footprint in MiB (``TERMS``) live at the step's peak, one row per input row (no
    context, no allocator): the larger of the backward's peak and the optimizer step's (see the module notes)."""
    return peak_terms(df, source)[0]


def peak_terms(df: pd.DataFrame, source: str | pd.Series = "gpupred") -> tuple[pd.DataFrame, pd.Series]:
    """(:func:`footprint_terms`, whether each row's peak is the backward's: False where it is the optimizer step's)."""
    import pandas as pd

    t, backward = peak_term_arrays(df, source)
    return pd.DataFrame(t, index=df.index), pd.Series(backward, index=df.index)


def peak_term_arrays(df: Rows, source: str | pd.Series | np.ndarray = "gpupred") -> tuple[dict[str, np.ndarray],
                                                                                       np.ndarray]:
    """:func:`peak_terms` as one array per term (MiB, in ``TERMS`` order) and one of whether each row's peak is the
    backward's: the same numbers without a frame (rows as a DataFrame or :class:`gpupred.columnar.Columns`)."""
    t = term_arrays(df, source)
    ckpt = numeric(df, "checkpointing") > 0
    # under checkpointing three phases (checkpoint_phases); otherwise autocast's copies and the activations saved are
    # freed through the backward beside the gradients. QLoRA's dequantized weight is live where a 4-bit contraction
    # runs: in the recomputed block's phase, or at a backward peak past the loss's (gradients live beyond it)
    peak = checkpoint_phases(t, t.pop("peak_gradients"), ckpt)
    live = t.pop("dequant")
    dequant = np.where(ckpt | (peak > 0), live, 0.0)
    backward = (t["autocast_copies"] + t["activations"] + t["loss"] + peak + dequant
                >= t["gradients"] + t["optimizer_step"])
    t["workspace"] = t["workspace"] + np.where(backward, dequant, 0.0)
    for name in ("autocast_copies", "activations", "loss"):
        t[name] = np.where(backward, t[name], 0.0)
    t["gradients"] = np.where(backward, peak, t["gradients"])
    t["optimizer_step"] = np.where(backward, 0.0, t["optimizer_step"])
    return t, backward


def checkpoint_phases(t: dict[str, np.ndarray], peak: np.ndarray, ckpt: np.ndarray) -> np.ndarray:
    """Under checkpointing (``ckpt`` rows), the step's three candidate peaks, of which the largest stays (in place,
    MiB; returns the gradients live there, ``peak`` elsewhere):

    - the forward's end: the activations kept outside the recomputed block, autocast's weight copies (cached ones
      die as the autocast region exits, frozen ones are held on), the logits (one buffer);
    - the loss's backward: the same activations, the frozen weights' copies alone, the loss buffers;
    - the recomputed block's backward (``recompute``: its activations; ``recompute_copies``: the copies of the
      weights it reads, cast again as it reruns), after the loss's and the later blocks' backward: every activation,
      those copies and the gradients live then.

    Outside ``ckpt`` rows nothing changes. ``t["dequant"]``, where given (QLoRA's dequantized weight), is live in the
    third phase alone: in ``ckpt`` rows it is kept where that phase stays, and 0 elsewhere."""
    block, copies, held = t.pop("recompute"), t.pop("recompute_copies"), t.pop("held_copies")
    acts, loss, cast = t["activations"], t["loss"], t["autocast_copies"]
    dequant = t.get("dequant", np.zeros_like(acts))
    phases = np.stack([acts - block + cast + loss / LOSS_BUFFERS, acts - block + held + loss,
                       acts + copies + peak + dequant])
    which = np.argmax(phases, axis=0)  # the earliest of equal ones
    if "dequant" in t:
        t["dequant"] = np.where(ckpt & (which < 2), 0.0, dequant)
    t["activations"] = np.where(ckpt & (which < 2), acts - block, acts)
    t["autocast_copies"] = np.where(ckpt, np.choose(which, [cast, held, copies]), cast)
    t["loss"] = np.where(ckpt, np.choose(which, [loss / LOSS_BUFFERS, loss, np.zeros_like(loss)]), loss)
    return np.where(ckpt & (which < 2), 0.0, peak)


def term_sizes(df: pd.DataFrame, source: str | pd.Series = "gpupred") -> pd.DataFrame:
    """Every term's size in MiB (``TERMS``) as if all were live at once, ``peak_gradients``: the gradients live
    at the backward's peak (the graph terms' ``peak_grad_elems``; all of them under gradient accumulation, which
    keeps them through the forward, or where the frame has no graph terms), and under checkpointing ``recompute``,
    ``recompute_copies`` and ``held_copies``: the recomputed block's activations and autocast's weight copies, and
    the frozen weights' copies held past the forward (:func:`checkpoint_phases`), and ``dequant``: QLoRA's dequantized
    weight (:func:`peak_term_arrays` places it)."""
    import pandas as pd

    return pd.DataFrame(term_arrays(df, source), index=df.index)


def term_arrays(df: Rows, source: str | pd.Series | np.ndarray = "gpupred") -> dict[str, np.ndarray]:
    """:func:`term_sizes` as one array per term (MiB), in ``TERMS`` order then ``peak_gradients``, ``recompute_copies``,
    ``held_copies``, ``dequant`` and ``recompute``; ``source`` one for every row, or each row's (a Series on the frame's index, or an
    array in row order)."""
    _need(df, ("param_bytes", "activation_bytes", "optimizer", "precision"))
    opt = _optimizers(df)
    precision = text(df, "precision")
    autocast = np.isin(precision, list(HALF_PRECISIONS))
    pure = precision == "bf16-pure"
    p = floats(df, "param_bytes") * np.where(pure, 0.5, 1.0)  # weights (and their kind of state) in bf16
    proto = (np.full(len(df), source, dtype=object) if isinstance(source, str) else source
             if isinstance(source, np.ndarray) else source.reindex(df.index).to_numpy())
    sdpa = np.isin(proto, list(SDPA_SOURCES))
    act = activation_bytes(df, autocast, sdpa, pure)
    states = np.array([OPTIMIZER_STATES[o] for o in opt], dtype=float)
    counted = _counted(df, "weight_bytes")  # gpupred.finetune's tensor-by-tensor parameter terms, where a row has them
    grads = _or(counted, df, "grad_bytes", p)
    # under autocast without checkpointing the backward frees the weight copies node by node (cast_copies), where the
    # frame has them; under checkpointing checkpoint_phases places them
    freed = notna(df, "peak_grad_elems_copies") & (numeric(df, "checkpointing") <= 0)
    half_peak = np.where(freed, numeric(df, "peak_grad_elems_copies"), numeric(df, "peak_grad_elems_half"))
    peak = np.where(autocast, half_peak, numeric(df, "peak_grad_elems")) * np.where(pure, 2.0, 4.0)
    # autocast's copies: of the weights its 16-bit ops read (cast_copies), else of every parameter
    cast = np.where(notna(df, "cast_copy_elems"), 2.0 * numeric(df, "cast_copy_elems"), 0.5 * p)
    # what is kept outside the recomputed block (checkpointing), in bytes as activation_bytes counts them
    outside_saved = numeric(df, "outside_elems")
    outside = np.where(autocast, 2.0 * numeric(df, "outside_half_elems")
                       + 4.0 * numeric(df, "outside_fp32_elems"), np.where(pure, 2.0, 4.0) * outside_saved)
    sizes = {
        "weights": _or(counted, df, "weight_bytes", p), "gradients": grads,
        "optimizer": _or(counted, df, "state_bytes", states * p),
        "optimizer_step": step_temporaries(df, opt) * grads + numeric(df, "transient_bytes"),
        "autocast_copies": _or(counted, df, "copy_bytes", cast * autocast),
        "activations": np.maximum(act + numeric(df, "act_delta_bytes"), 0.0) + dropout_mask_bytes(df, sdpa)
        + dropout_copy_bytes(df, sdpa, autocast, pure),
        "loss": numeric(df, "output_elems") * 4.0 * LOSS_BUFFERS,
        "recompute_copies": numeric(df, "recompute_copy_elems") * 2.0,
        "held_copies": numeric(df, "held_copy_bytes"),
        "inputs": numeric(df, "input_bytes"),
        "workspace": _workspaces(df) * MIB,
        "dequant": numeric(df, "dequant_bytes"),
        "peak_gradients": np.where(_counted(df, "peak_grad_elems") & (numeric(df, "accumulation") <= 1),
                                   np.minimum(peak, grads), grads),
    }
    out = {k: np.asarray(v, float) / MIB for k, v in sizes.items()}
    # the recomputed block's activations: every one kept less those outside it (none without checkpointing)
    out["recompute"] = np.where(outside_saved > 0, np.maximum(out["activations"] - outside / MIB, 0.0), 0.0)
    return out


def step_temporaries(df: Rows, opt: np.ndarray) -> np.ndarray:
    """Gradient-sized temporaries of the optimizer step, per gradient byte: torch's foreach implementations allocate
    each intermediate as a list over every parameter (``torch.optim`` docs: foreach "uses more peak memory" than the
    for-loop): Adam's and AdamW's ``_foreach_sqrt`` of the second moment, RMSprop's and Adagrad's square root, and
    the weight decay of SGD, Adam, RMSprop and Adagrad added to a copy of the gradients; fused and for-loop steps
    and bitsandbytes' kernels none."""
    impl = text(df, "optimizer_impl") if "optimizer_impl" in df.columns else np.full(len(df), "foreach")
    decay = (numeric(df, "weight_decay") > 0) & np.isin(opt, ["sgd", "sgd_momentum", "sgd_nomomentum", "adam",
                                                                      "rmsprop", "adagrad"])
    root = np.isin(opt, ["adam", "adamw", "rmsprop", "adagrad"])
    return np.where(impl == "foreach", root + decay, 0.0).astype(float)


def _counted(df: Rows, name: str) -> np.ndarray:
    """Rows that have column ``name`` (the parameter terms counted tensor by tensor,
    :data:`gpupred.finetune.PARAM_COLUMNS`, or a graph term)."""
    return notna(df, name)


def _or(counted: np.ndarray, df: Rows, name: str, rule: np.ndarray) -> np.ndarray:
    """A counted parameter term where the row has it, else the parameter-sized rule's."""
    return np.where(counted, numeric(df, name), rule) if counted.any() else rule


def _optimizers(df: Rows) -> np.ndarray:
    """The optimizer of each row as ``OPTIMIZER_STATES`` names it (plain SGD where ``sgd_momentum`` is False)."""
    opt = np.array([o.lower() for o in text(df, "optimizer")], dtype=object)
    if "sgd_momentum" in df.columns:
        plain = (opt == "sgd") & equal(df, "sgd_momentum", False)
        opt = np.where(plain, "sgd_nomomentum", opt)
    unknown = sorted(set(opt) - set(OPTIMIZER_STATES))
    if unknown:
        raise GpupredError(f"unknown optimizer {unknown[0]!r}; known: {', '.join(OPTIMIZER_STATES)}")
    return opt


def _workspaces(df: Rows) -> np.ndarray:
    """The cuBLAS workspaces of each row's GPU kind, in MiB (Hopper's where the frame names no GPU)."""
    if "gpu" not in df.columns:
        return np.full(len(df), WORKSPACE_MIB)
    gpu = text(df, "gpu")
    per = {g: workspace_mib(g) for g in set(gpu)}
    return np.array([per[g] for g in gpu], dtype=float)


def activation_bytes(df: Rows, half: np.ndarray, sdpa: np.ndarray, pure: np.ndarray | None = None) -> np.ndarray:
    """Bytes of the activations saved for backward: from the graph terms where the frame has them, else the
    feature row's ``activation_bytes``; less the scores of the fused attention cores where the source's torch
    fuses attention. ``half``: autocast rows (16-bit where autocast runs in 16 bits); ``pure``: pure bf16 rows
    (every activation in 2 bytes)."""
    fallback = floats(df, "activation_bytes")
    if "saved_elems" not in df.columns:
        return fallback
    pure = np.zeros(len(df), bool) if pure is None else pure
    saved = numeric(df, "saved_elems")
    act = np.where(half, 2.0 * numeric(df, "half_elems") + 4.0 * numeric(df, "fp32_elems"), 4.0 * saved)
    act = np.where(pure, 2.0 * saved, act)
    scores = (numeric(df, "softmax_elems") + numeric(df, "attention_elems")) * np.where(pure, 2.0, 4.0)
    scores = np.where(half, 2.0 * numeric(df, "fused_half_elems") + 4.0 * numeric(df, "fused_fp32_elems"),
                      scores)
    # plus the indices MaxPool saves for backward: int64, 8 bytes each
    act = np.maximum(act - np.where(sdpa, scores, 0.0), 0.0) + 8.0 * numeric(df, "index_elems")
    return np.where(notna(df, "saved_elems"), act, fallback)


def dropout_mask_bytes(df: Rows, sdpa: np.ndarray) -> np.ndarray:
    """Bytes of Dropout's masks (one an element): all of them, less those inside fused attention cores where the
    source's torch fuses attention (as :func:`activation_bytes` takes their scores out)."""
    return numeric(df, "dropout_mask_elems") - np.where(sdpa, numeric(df, "fused_mask_elems"), 0.0)


def dropout_copy_bytes(df: Rows, sdpa: np.ndarray, autocast: np.ndarray, pure: np.ndarray) -> np.ndarray:
    """Bytes of Dropout's kept outputs (:func:`dropout_copies`), less those inside fused attention cores where the
    source's torch fuses attention: 4 an element, 2 in pure bf16, none under autocast (whose product casts the masked
    fp32 probabilities to the 16-bit copy it saves, which the activations count already)."""
    elems = numeric(df, "dropout_copy_elems") - np.where(sdpa, numeric(df, "fused_copy_elems"), 0.0)
    return elems * np.where(autocast, 0.0, np.where(pure, 2.0, 4.0))


def allocated_mib(df: pd.DataFrame, source: str | pd.Series = "gpupred") -> np.ndarray:
    """What the training step allocates at its peak (MiB): the sum of ``footprint_terms``."""
    return footprint_terms(df, source).sum(axis=1).to_numpy(float)


def steady_varying(terms: pd.DataFrame | dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(steady, varying) MiB of ``footprint_terms``: the tensors allocated once and kept (``STEADY_TERMS``: weights,
    optimizer state, the batch, cuBLAS's workspaces), which the caching allocator holds at their size, and those
    every step allocates and frees (gradients, the step's temporaries, autocast's copies, activations, the loss),
    on which its reserve grows. ``terms``: a frame, or its columns (:func:`peak_term_arrays`), summed alike."""
    table = terms.to_numpy(float) if is_frame(terms) else frame_values(terms)
    names = list(terms.columns if is_frame(terms) else terms)
    steady = table[:, [names.index(t) for t in STEADY_TERMS]].sum(axis=1)
    return steady, table.sum(axis=1) - steady


def local_memory_mib(gpu: str) -> float:
    """The local memory the CUDA driver reserves for every thread a GPU can hold (MiB): threads per SM x SMs x the
    default stack size (see the module notes)."""
    from gpupred.hardware import gpu_spec, max_threads_per_sm

    return gpu_spec(gpu).sm_count * max_threads_per_sm(gpu) * STACK_BYTES / MIB


SOFTWARE_CONTEXT_MIB = CONTEXT_MIB["H200"] - 132 * 2048 * STACK_BYTES / MIB  # the H200's context less its local memory


def lazy_loading(torch_version: str = "2.11", cuda_version: str = "13.0") -> bool:
    """Whether CUDA loads kernel images lazily: a CUDA 11.7+ runtime, and torch >= 1.13 (which sets
    ``CUDA_MODULE_LOADING=LAZY``) or CUDA >= 12.2 (the Linux driver's default)."""
    def version(text: str) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in str(text).split("+")[0].split(".")[:2])
        except ValueError:
            raise GpupredError(f"cannot read version {text!r}; give it as MAJOR.MINOR, e.g. 2.4 or 12.1") from None

    cuda, torch = version(cuda_version), version(torch_version)
    return cuda >= (11, 7) and (torch >= (1, 13) or cuda >= (12, 2))


def context_mib(gpu: str, torch_version: str = "2.11", cuda_version: str = "13.0") -> float:
    """The CUDA context of a GPU kind under a torch and CUDA version (MiB): measured where ``CONTEXT_MIB`` has it
    (for the software it was measured with), else the GPU's local memory + the software's share + the kernel
    images eager loading adds (see the module notes)."""
    from gpupred.hardware import gpu_spec

    lazy = lazy_loading(torch_version, cuda_version)
    name = gpu_spec(gpu).name
    if name in CONTEXT_MIB and lazy:
        return CONTEXT_MIB[name]
    return local_memory_mib(name) + SOFTWARE_CONTEXT_MIB + (0.0 if lazy else EAGER_IMAGES_MIB)


def default_context_mib(gpu: str) -> float:
    """The CUDA context of a GPU kind (MiB) under the sweeps' software: :func:`context_mib`'s defaults."""
    return context_mib(gpu)


def workspace_mib(gpu: str) -> float:
    """torch's cuBLAS workspaces of a training step on a GPU kind (MiB): ``CUBLAS_HANDLES`` x the per-handle size."""
    from gpupred.hardware import architecture

    return CUBLAS_HANDLES * CUBLAS_WORKSPACE_MIB[architecture(gpu) == "hopper"]


@dataclass
class Footprint:
    """Per-(GPU kind, source) context and allocator law: the analytic footprint's fitted constants. The allocator's
    reserve on the varying terms is ``(ratio - 1) x REFERENCE_VARYING_MIB x (varying / REFERENCE_VARYING_MIB) **
    exponent`` (:func:`allocator_reserve_mib`): ``ratio`` is the reserved / allocated ratio of a job whose varying
    terms are 1 GiB, and an exponent below 1 makes the reserve grow slower than the bytes it holds."""

    context_mib: dict[str, float] = field(default_factory=dict)  # key "gpu|source"
    allocator: dict[str, float] = field(default_factory=dict)  # the ratio at REFERENCE_VARYING_MIB
    exponent: dict[str, float] = field(default_factory=dict)  # how the reserve grows with the varying terms
    min_rows: int = 8  # fewer training rows than this in a (gpu, source): keep the defaults

    def fit(self, df: pd.DataFrame, target: str = "memory_mib") -> "Footprint":
        """Fit the constants per (gpu, source) on ``df``'s rows (training rows only): where the rows carry torch's
        own peaks (``TORCH_PEAK_COLUMNS``), each on the figure it is, the allocator law on torch's reserved less
        allocated peak and the context on NVML's figure less torch's reserved peak; elsewhere (Lucid's and
        GPUMemNet's protocols) the context and a ratio on every varying MiB together on NVML's figure, which is all
        that figure can tell apart."""
        import pandas as pd

        keys = source_keys(df)
        steady, varying = steady_varying(footprint_terms(df, sources(df)))
        y = df[target].to_numpy(float)
        allocated, reserved = (df[c].to_numpy(float) if c in df.columns else np.full(len(df), np.nan)
                               for c in TORCH_PEAK_COLUMNS)
        with_torch = np.isfinite(y) & np.isfinite(allocated) & np.isfinite(reserved) & (varying > 0)
        for key in pd.unique(keys):
            m = (keys == key) & with_torch
            if m.sum() >= self.min_rows:
                self.allocator[key], self.exponent[key] = fit_allocator_law(varying[m], allocated[m], reserved[m])
                self.context_mib[key] = float(np.median(y[m] - reserved[m]))
                continue
            m = (keys == key) & np.isfinite(y)  # a protocol without torch's peaks: both on NVML's figure together
            if m.sum() >= self.min_rows:
                self.context_mib[key], self.allocator[key] = fit_context_allocator(varying[m], y[m], steady[m])
                self.exponent[key] = 1.0
        return self

    def predict(self, df: Rows, terms: pd.DataFrame | dict[str, np.ndarray] | None = None,
                keys: np.ndarray | None = None) -> np.ndarray:
        """The analytic footprint in MiB, one per row: context + steady terms + varying terms + the allocator's
        reserve on them (:meth:`parts`); ``terms`` (:func:`footprint_terms`) and ``keys`` (:func:`source_keys`) of
        ``df`` where the caller has them already."""
        ctx, steady, varying, reserve = self.parts(source_keys(df) if keys is None else keys,
                                                   footprint_terms(df, sources(df)) if terms is None else terms)
        return ctx + steady + varying + reserve

    def parts(self, keys: np.ndarray, terms: pd.DataFrame | dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """(context, steady, varying, allocator reserve) MiB of each row, from its key and its footprint terms
        (:func:`steady_varying`, :func:`allocator_reserve_mib` under the key's law): what the footprint adds up."""
        ctx, ratio, exponent = self.row_constants(keys)
        steady, varying = steady_varying(terms)
        return ctx, steady, varying, allocator_reserve_mib(varying, ratio, exponent)

    def row_constants(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(context MiB, allocator ratio, allocator exponent) of each 'gpu|source' key: NVML's figure is context +
        torch's reserved peak, which is the steady terms + the varying ones + the allocator's reserve on them."""
        uniq, inverse = np.unique(keys, return_inverse=True)
        ctx = np.array([self.context(k) for k in uniq], dtype=float)[inverse]
        laws = np.array([self.law(k) for k in uniq], dtype=float).reshape(-1, 2)[inverse]
        return ctx, laws[:, 0], laws[:, 1]

    def law(self, key: str) -> tuple[float, float]:
        """(ratio, exponent) of the allocator for 'gpu|source': :meth:`constant` of each (fitted there, else the mean
        over the source's fits: the allocator is the software's), else no reserve."""
        return self.constant(key, self.allocator, 1.0), self.constant(key, self.exponent, 1.0)

    def constant(self, key: str, fitted: dict[str, float], default: float) -> float:
        """A constant for 'gpu|source': fitted there, else the mean over GPUs measured by the source
        (the allocator is the software's), else the default."""
        if key in fitted:
            return fitted[key]
        same = [v for k, v in fitted.items() if k.split("|")[1] == key.split("|")[1]]
        return float(np.mean(same)) if same else default

    def context(self, key: str) -> float:
        """The context for 'gpu|source': fitted there; else the mean software share (context less local memory) of
        the GPUs fitted under the source, or of every fit when the source has none (its software is unknown: the
        fits span the software measured), plus this GPU's local memory; else :func:`default_context_mib` (the GPU's
        architecture, the sweeps' software)."""
        gpu, source = key.split("|")
        if key in self.context_mib:
            return self.context_mib[key]
        shares = {k: v - local_memory_mib(k.split("|")[0]) for k, v in self.context_mib.items()}
        same = [v for k, v in shares.items() if k.split("|")[1] == source] or list(shares.values())
        return float(np.mean(same)) + local_memory_mib(gpu) if same else default_context_mib(gpu)

    def constants(self) -> dict[str, dict[str, float]]:
        """The fitted constants, for a predictor card: each key's context and allocator law."""
        laws = {k: self.law(k) for k in sorted(self.context_mib)}
        return {k: {"context_mib": round(self.context_mib[k], 1), "allocator": round(ratio, 4),
                    "allocator_exponent": round(exponent, 4)} for k, (ratio, exponent) in laws.items()}


def allocator_reserve_mib(varying: np.ndarray, ratio: np.ndarray | float, exponent: np.ndarray | float = 1.0
                          ) -> np.ndarray:
    """The caching allocator's reserve (MiB) on ``varying`` MiB of per-step tensors: ``(ratio - 1) x
    REFERENCE_VARYING_MIB x (varying / REFERENCE_VARYING_MIB) ** exponent`` (exponent 1: ``(ratio - 1) x varying``)."""
    v = np.maximum(np.asarray(varying, float), 0.0)
    return (np.asarray(ratio, float) - 1.0) * REFERENCE_VARYING_MIB * np.power(v / REFERENCE_VARYING_MIB, exponent)


def fit_allocator_law(varying: np.ndarray, allocated: np.ndarray, reserved: np.ndarray) -> tuple[float, float]:
    """(ratio, exponent) of :func:`allocator_reserve_mib` minimizing the mean absolute log error of torch's measured
    allocated peak + the reserve on the predicted ``varying`` terms against torch's measured reserved peak."""
    from scipy.optimize import minimize

    def loss(theta: np.ndarray) -> float:
        pred = allocated + allocator_reserve_mib(varying, 1.0 + np.exp(theta[0]), theta[1])
        return float(np.mean(np.abs(np.log(np.maximum(pred, 1.0)) - np.log(reserved))))

    res = minimize(loss, np.array([np.log(0.2), 1.0]), method="Nelder-Mead",
                   options={"xatol": 1e-4, "fatol": 1e-8, "maxiter": 2000})
    ratio = float(np.clip(1.0 + np.exp(res.x[0]), 1.0, 3.0))
    return ratio, float(np.clip(res.x[1], *EXPONENT_BOUNDS))


def fit_context_allocator(varying: np.ndarray, measured: np.ndarray, steady: np.ndarray | float = 0.0
                          ) -> tuple[float, float]:
    """(context MiB, allocator ratio) minimizing the mean absolute log error of ``context + steady + ratio x
    varying`` against ``measured`` (NVML's figure): the fit of a protocol that did not record torch's peaks."""
    from scipy.optimize import minimize

    def loss(theta: np.ndarray) -> float:
        pred = theta[0] + steady + theta[1] * varying
        return float(np.mean(np.abs(np.log(np.maximum(pred, 1.0)) - np.log(measured))))

    start = np.array([DEFAULT_CONTEXT_MIB, 1.0])
    res = minimize(loss, start, method="Nelder-Mead", options={"xatol": 0.5, "fatol": 1e-6, "maxiter": 2000})
    return float(np.clip(res.x[0], 0.0, 4096.0)), float(np.clip(res.x[1], 0.5, 3.0))


def sources(df: pd.DataFrame) -> pd.Series:
    """Each row's source (whose way of measuring memory its constants are fitted to): its ``source`` column, else
    this project's ('gpupred')."""
    import pandas as pd

    return df["source"].astype(str) if "source" in df.columns else pd.Series("gpupred", index=df.index)


def source_array(df: Rows) -> np.ndarray:
    """:func:`sources` as an object array of str, in row order."""
    return text(df, "source") if "source" in df.columns else np.full(len(df), "gpupred", dtype=object)


def source_keys(df: Rows) -> np.ndarray:
    """'gpu|source' per row (the key of the fitted constants)."""
    from gpupred.hardware import gpu_spec

    gpu = text(df, "gpu") if "gpu" in df.columns else np.full(len(df), "H200", dtype=object)
    names = {g: gpu_spec(g).name for g in set(gpu)}
    return np.array([f"{names[g]}|{s}" for g, s in zip(gpu, source_array(df))], dtype=object)


def setup_columns(setup: TrainingSetup) -> dict[str, Any]:
    """The frame columns the footprint reads of a training setup (precision, optimizer and its implementation,
    weight decay, gradient accumulation, checkpointing)."""
    return {"precision": setup.precision, "optimizer": setup.optimizer_key, "optimizer_impl": setup.optimizer_impl,
            "weight_decay": setup.decay, "accumulation": setup.accumulation, "checkpointing": setup.checkpointing}


def footprint_mib(features: dict[str, Any], gpu: str, precision: str, optimizer: str,
                  terms: dict[str, float] | None = None, source: str = "gpupred",
                  fitted: Footprint | None = None, setup: TrainingSetup | None = None) -> float:
    """Analytic training memory (MiB) of one feature row (``gpupred.featurize``) with its ``graph_terms`` on a GPU;
    ``setup`` (:class:`gpupred.setups.TrainingSetup`) replaces ``precision`` and ``optimizer`` when given."""
    import pandas as pd

    job = {"precision": precision, "optimizer": optimizer} if setup is None else setup_columns(setup)
    row = pd.DataFrame([{**features, **(terms or {}), **job, "gpu": gpu, "source": source}])
    return float((fitted or Footprint()).predict(row)[0])


def onnx_footprint_mib(path_or_proto: Any, batch_size: int, precision: str, optimizer: str, gpu: str,
                       fitted: Footprint | None = None, setup: TrainingSetup | None = None) -> float:
    """Analytic training memory (MiB) of an ONNX graph at a batch size and training setup (default: the sweeps'
    setup of ``precision`` and ``optimizer``) on a GPU."""
    from gpupred.setups import as_setup

    row = graph_row(path_or_proto, batch_size, as_setup(setup, precision, optimizer), gpu)
    return float((fitted or Footprint()).predict(row)[0])


def graph_row(path_or_proto: Any, batch_size: int, setup: TrainingSetup, gpu: str = "H100 SXM",
              source: str = "gpupred") -> pd.DataFrame:
    """The one-row frame the footprint reads of an ONNX graph at a batch size under a training setup on a GPU: its
    feature row, its graph terms and the setup's columns."""
    import pandas as pd

    from gpupred.graph.features import featurize

    features = featurize(path_or_proto, batch_size=batch_size, precision=setup.job_precision,
                         optimizer="adam" if setup.state_buffers >= 2 else "sgd")
    return pd.DataFrame([{**features, **graph_terms(path_or_proto, batch_size, setup), **setup_columns(setup),
                          "gpu": gpu, "source": source}])


def footprint_columns(df: pd.DataFrame, progress: bool = False) -> pd.DataFrame:
    """``df`` with ``FOOTPRINT_COLUMNS`` added from each workload's graph (the graph store's, or a built fcnet);
    NaN where neither has it (the footprint then uses the row's ``activation_bytes``)."""
    import pandas as pd

    from gpupred.reports import progress_bar

    _need(df, ("workload_id",))
    out = df.copy()
    cache: dict[tuple[str, int], dict[str, float]] = {}
    graphs: dict[str, Any] = {}
    rows = []
    for wid in progress_bar(iterable=out["workload_id"].astype(str), desc="footprint graph terms", unit="row",
                            disable=not progress):
        spec = spec_or_none(wid)
        key = (spec.arch_key, int(spec.batch_size)) if spec is not None else (wid, 0)
        if key not in cache:
            if spec is not None and spec.arch_key not in graphs:
                graphs = {spec.arch_key: _stored_graph(spec)}  # one architecture at a time: memory stays flat
            graph = graphs.get(spec.arch_key) if spec is not None else None
            cache[key] = graph_terms(graph, spec.batch_size) if graph is not None else {}
        rows.append(cache[key])
    terms = pd.DataFrame(rows, index=out.index).reindex(columns=list(FOOTPRINT_COLUMNS))
    for col in FOOTPRINT_COLUMNS:
        out[col] = terms[col].astype(float)
    return out


def _stored_graph(spec: Any) -> Any:
    """A spec's graph without torch: a GPUMemNet network built with onnx.helper, else the graph store's, else None."""
    if spec.family == "fcnet":
        from gpupred.graph.graphstore import fcnet_onnx

        return fcnet_onnx(spec)
    from gpupred.graph.export import stored_graph

    return stored_graph(spec)
