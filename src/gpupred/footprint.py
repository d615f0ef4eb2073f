"""Analytic GPU memory of one training job: what a PyTorch training step holds at its peak, term by term.

The footprint (MiB) of a job training with torch's caching allocator, as NVML sees its process:

    context(gpu, protocol) + allocator x (weights + gradients + optimizer state + autocast weight copies
                                          + activations saved for backward + loss buffers + input batch
                                          + workspace)

- weights = gradients = ``param_bytes`` (fp32 master weights and fp32 gradients, also under autocast);
- optimizer state = ``OPTIMIZER_STATES[optimizer] x param_bytes`` (SGD with momentum: one buffer; plain
  SGD none; Adam/AdamW two moments; RMSprop/Adagrad one);
- autocast weight copies = ``param_bytes / 2`` under bf16/fp16: autocast caches a 16-bit copy of every
  weight a matmul/convolution reads for the whole forward, and backward keeps them;
- activations saved for backward = the graph's ``activation_bytes`` (gpupred.graph sizes each op's output
  at the precision: 16-bit for what autocast runs in 16 bits, fp32 for softmax/normalizations/reductions)
  minus what torch never keeps: the attention scores a fused attention kernel never writes
  (``SDPA_PROTOCOLS``: torch >= 2.0 runs ``nn.MultiheadAttention`` through scaled_dot_product_attention,
  which keeps no [B, H, S, S] tensor): the Softmax output (fp32 under autocast), the QK^T product, its
  scale/mask ops and the scaled Q and K (at the precision's width); and the outputs of data-movement ops
  (``VIEW_OPS``: transposes, gathers, slices), which torch runs as views or whose backward saves nothing;
- loss buffers = the graph outputs (logits) in fp32: log_softmax's saved output and its gradient, plus the
  fp32 upcast of 16-bit logits (the catalog's ``F.cross_entropy(out.float(), ...)``);
- input batch = ``input_bytes`` (the measured loops keep their batches resident on the GPU);
- workspace = ``WORKSPACE_MIB``: cuBLAS's per-handle workspace (torch >= 2.3 allocates 32 MiB on Hopper
  through the caching allocator) plus a typical cuDNN convolution workspace; the rest is in ``allocator``;
- allocator = the caching allocator's reserved / allocated ratio (rounding to 512 B blocks and 2/20 MiB
  segments, fragmentation between forward and backward), 1.0 by default and fitted per protocol;
- context = the CUDA context plus the kernel images that lazy loading brings in (cuBLAS, cuDNN, torch's
  own kernels): ``CONTEXT_MIB`` by GPU kind (the H200 data card measured a bare context at 619 MiB), fitted
  per (GPU kind, protocol) on training rows where there are any.

A *protocol* is how a source measured memory (``PROTOCOLS``): this project's NVML per-process peak over the
window (``gpupred``), Lucid's ``gmem`` (nvidia-smi's used memory, mean over the window) and GPUMemNet's
maximum of DCGM's used memory. Their contexts and allocators differ (older torch and CUDA load every
kernel image eagerly), which is why the context and the allocator ratio are fitted per protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError

MIB = float(2**20)
OPTIMIZER_STATES: dict[str, float] = {  # param-sized buffers an optimizer keeps (the catalog's sgd has momentum)
    "sgd": 1.0, "sgd_momentum": 1.0, "sgd_nomomentum": 0.0, "adam": 2.0, "adamw": 2.0, "rmsprop": 1.0, "adagrad": 1.0,
}
HALF_PRECISIONS: frozenset[str] = frozenset({"bf16", "fp16"})
CONTEXT_MIB: dict[str, float] = {  # bare CUDA context by GPU kind (gpupred.hardware short name)
    "H200": 619.0,  # measured: data/raw/h200/2026-11-catalog (torch 2.11, CUDA 13, lazy module loading)
}
DEFAULT_CONTEXT_MIB = 619.0  # other GPU kinds: the one bare context measured here (CUDA >= 11.7 lazy loading)
WORKSPACE_MIB = 64.0  # cuBLAS workspace (32 MiB on Hopper) + a typical cuDNN workspace
SDPA_PROTOCOLS: frozenset[str] = frozenset({"gpupred"})  # protocols measured with torch >= 2 fused attention
PROTOCOLS: tuple[str, ...] = ("gpupred", "lucid", "gpumemnet")
TERMS: tuple[str, ...] = ("weights", "gradients", "optimizer", "autocast_copies", "activations", "loss", "inputs",
                          "workspace")
FOOTPRINT_COLUMNS: tuple[str, ...] = (  # graph terms beyond the feature row (graph_terms)
    "saved_elems", "fp32_elems", "cast_elems", "index_elems", "softmax_elems", "attention_elems", "output_elems")
VIEW_OPS: frozenset[str] = frozenset({"Transpose", "Gather", "Slice", "Split", "Expand"})
ALIAS_OPS: frozenset[str] = frozenset({  # no new memory (metadata, views of the same storage)
    "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size", "Constant", "Dropout"})
CONTRACTION_OPS: frozenset[str] = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "LSTM", "GRU", "RNN"})
FP32_OPS: frozenset[str] = frozenset({  # autocast runs these in fp32 (torch's CUDA autocast fp32 list)
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization", "Exp", "Log",
    "Pow", "ReduceSum", "ReduceMean", "ReduceLogSumExp", "ReduceL2", "Cast"})
NO_INPUT_SAVE: frozenset[str] = frozenset({  # backward needs none of their inputs
    "Add", "Sub", "Concat", "Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "AveragePool", "GlobalAveragePool",
    "ReduceMean", "ReduceSum", "Neg", "Cast", "Pad"})
OUTPUT_SAVE: frozenset[str] = frozenset({  # ops that save their output for backward
    "Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp"})
PROMOTING_OPS: frozenset[str] = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Concat", "Max", "Min"})
FLOAT_ELEM_TYPES: frozenset[int] = frozenset({1, 10, 11, 16})  # onnx FLOAT, FLOAT16, DOUBLE, BFLOAT16
SCORE_OPS: frozenset[str] = frozenset({"MatMul", "Einsum", "Add", "Mul", "Div", "Sub", "Where"})
SCALE_OPS: frozenset[str] = frozenset({"Mul", "Div", "Transpose"})


def graph_terms(path_or_proto: Any, batch_size: int) -> dict[str, float]:
    """Element counts of a graph's activations in canonical form at a batch size (``FOOTPRINT_COLUMNS``).

    ``saved_elems``: the op outputs autograd keeps for backward (read by an op that saves its inputs, i.e. not
    in ``NO_INPUT_SAVE``; written by one that saves its output, ``OUTPUT_SAVE``; with views, ``VIEW_OPS``,
    resolved to the tensor they alias, since torch runs transposes, gathers and slices as views);
    ``fp32_elems``: those autocast keeps in fp32 (outputs of
    ``FP32_OPS``, and of elementwise ops with an fp32 input: type promotion); ``cast_elems``: fp32 tensors a
    contraction reads, which autocast copies to 16 bits; ``softmax_elems``: Softmax outputs;
    ``attention_elems``: the other kept tensors of an attention block a fused kernel never writes (QK^T, its
    scale/mask ops, the scaled Q and K); ``output_elems``: the graph outputs (logits).
    """
    from gpupred.graph.canonical import shape_elements
    from gpupred.graph.loader import cached_graph

    graph, _ = cached_graph(path_or_proto, int(batch_size))
    cg = graph.form(True)
    producer = {o: node for node in cg.nodes for o in node[3]}
    numel = {name: shape_elements(shape) for name, shape in cg.shapes.items() if shape and shape[1] in FLOAT_ELEM_TYPES}
    attention: set[str] = set()
    for op, _d, ins, _o, *_ in cg.nodes:
        if op == "Softmax" and ins:
            attention |= _score_chain(ins[0], producer)
    kept = _kept_tensors(cg, producer)
    counts = _activation_counts(cg, producer, numel, kept)
    counts.update(
        softmax_elems=float(sum(numel.get(n[3][0], 0) for n in cg.nodes if n[0] == "Softmax" and n[3][0] in kept)),
        attention_elems=float(sum(numel.get(t, 0) for t in attention & kept)),
        output_elems=float(sum(shape_elements(graph.shapes.get(o)) for o in graph.graph_outputs)))
    return counts


def _activation_counts(cg: Any, producer: dict[str, Any], numel: dict[str, int], kept: set[str]) -> dict[str, float]:
    """saved_elems, fp32_elems, cast_elems and index_elems of a canonical graph (see ``graph_terms``)."""
    fp32: set[str] = set()
    cast: set[str] = set()
    for op, _d, ins, outs, *_ in cg.nodes:
        acts = [i for i in ins if i in producer]
        if op in CONTRACTION_OPS:
            cast |= {i for i in acts if i in fp32}
        elif op in FP32_OPS or (op in PROMOTING_OPS and any(i in fp32 for i in acts)):
            fp32 |= set(outs)
    pooled = sum(numel.get(n[3][0], 0) for n in cg.nodes if n[0] == "MaxPool" and n[3])
    return {"saved_elems": float(sum(numel.get(t, 0) for t in kept)), "index_elems": float(pooled),
            "fp32_elems": float(sum(numel.get(t, 0) for t in kept & fp32)),
            "cast_elems": float(sum(numel.get(t, 0) for t in cast))}


def _kept_tensors(cg: Any, producer: dict[str, Any]) -> set[str]:
    """The op outputs autograd keeps for backward: read by an op that saves its inputs, written by one that saves
    its output, or a graph output; views resolve to the tensor they alias. With BatchNorm folded into
    convolutions, each convolution's output is kept too (training-mode BatchNorm saves its input)."""
    def base(t: str) -> str:
        node = producer.get(t)
        while node is not None and (node[0] in VIEW_OPS or node[0] in ALIAS_OPS) and node[2] and node[2][0] in producer:
            t, node = node[2][0], producer.get(node[2][0])
        return t

    folded_bn = cg.dropped.get("batchnorm folded", 0) > 0
    kept: set[str] = set()
    for op, _d, ins, outs, *_ in cg.nodes:
        if op in VIEW_OPS or op in ALIAS_OPS:
            continue
        if op not in NO_INPUT_SAVE:
            kept |= {base(i) for i in ins if i in producer}
        if op in OUTPUT_SAVE or (folded_bn and op in ("Conv", "ConvTranspose")):
            kept |= set(outs[:1])
    consumed = {i for node in cg.nodes for i in node[2]}
    kept |= {base(o) for node in cg.nodes for o in node[3] if o not in consumed and node[0] not in ALIAS_OPS}
    return {t for t in kept if t in producer and producer[t][0] not in VIEW_OPS and producer[t][0] not in ALIAS_OPS}


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


def _need(df: pd.DataFrame, cols: tuple[str, ...]) -> None:
    """Raise naming the first column the footprint needs and the frame lacks."""
    for col in cols:
        if col not in df.columns:
            raise GpupredError(f"memory footprint needs column {col!r}; use a dataset frame (gpupred.dataset) "
                               "with footprint_columns() added")


def footprint_terms(df: pd.DataFrame, protocol: str | pd.Series = "gpupred") -> pd.DataFrame:
    """Each allocated term of the footprint in MiB (``TERMS``), one row per input row (no context, no allocator)."""
    _need(df, ("param_bytes", "activation_bytes", "optimizer", "precision"))
    p = df["param_bytes"].to_numpy(float)
    opt = df["optimizer"].astype(str).str.lower()
    unknown = sorted(set(opt) - set(OPTIMIZER_STATES))
    if unknown:
        raise GpupredError(f"unknown optimizer {unknown[0]!r}; known: {', '.join(OPTIMIZER_STATES)}")
    half = df["precision"].isin(list(HALF_PRECISIONS)).to_numpy()
    proto = pd.Series(protocol, index=df.index) if isinstance(protocol, str) else protocol.reindex(df.index)
    sdpa = proto.isin(list(SDPA_PROTOCOLS)).to_numpy()
    act = activation_bytes(df, half, sdpa)
    loss = _col(df, "output_elems") * 4.0 * (2.0 + half)
    terms = {
        "weights": p, "gradients": p, "optimizer": opt.map(OPTIMIZER_STATES).to_numpy(float) * p,
        "autocast_copies": 0.5 * p * half, "activations": act, "loss": loss, "inputs": _col(df, "input_bytes"),
        "workspace": np.full(len(df), WORKSPACE_MIB * MIB),
    }
    return pd.DataFrame({k: v / MIB for k, v in terms.items()}, index=df.index)


def activation_bytes(df: pd.DataFrame, half: np.ndarray, sdpa: np.ndarray) -> np.ndarray:
    """Bytes of the activations saved for backward: from the graph terms where the frame has them, else the
    feature row's ``activation_bytes``; less the attention scores under fused attention."""
    fallback = df["activation_bytes"].to_numpy(float)
    if "saved_elems" not in df.columns:
        return fallback
    saved, fp32 = _col(df, "saved_elems"), _col(df, "fp32_elems")
    act = np.where(half, 2.0 * (saved - fp32) + 4.0 * fp32 + 2.0 * _col(df, "cast_elems"), 4.0 * saved)
    scores = _col(df, "softmax_elems") * 4.0 + _col(df, "attention_elems") * np.where(half, 2.0, 4.0)
    act = np.maximum(act - np.where(sdpa, scores, 0.0), 0.0) + 8.0 * _col(df, "index_elems")  # MaxPool's int64 argmax
    return np.where(df["saved_elems"].notna().to_numpy(), act, fallback)


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column, zeros where it is absent or missing."""
    return df[name].fillna(0.0).to_numpy(float) if name in df.columns else np.zeros(len(df))


def allocated_mib(df: pd.DataFrame, protocol: str | pd.Series = "gpupred") -> np.ndarray:
    """What the training step allocates at its peak (MiB): the sum of ``footprint_terms``."""
    return footprint_terms(df, protocol).sum(axis=1).to_numpy(float)


def default_context_mib(gpu: str) -> float:
    """The CUDA context of a GPU kind (MiB): measured where the table has it, else ``DEFAULT_CONTEXT_MIB``."""
    from gpupred.hardware import gpu_spec

    return CONTEXT_MIB.get(gpu_spec(gpu).name, DEFAULT_CONTEXT_MIB)


@dataclass
class Footprint:
    """Per-(GPU kind, protocol) context and allocator ratio: the analytic footprint's fitted constants."""

    context_mib: dict[str, float] = field(default_factory=dict)  # key "gpu|protocol"
    allocator: dict[str, float] = field(default_factory=dict)
    min_rows: int = 8  # fewer training rows than this in a (gpu, protocol): keep the defaults

    def fit(self, df: pd.DataFrame, target: str = "memory_mib") -> "Footprint":
        """Fit context and allocator ratio per (gpu, protocol) on ``df``'s rows (training rows only)."""
        keys = protocol_keys(df)
        dyn = allocated_mib(df, protocols(df))
        y = df[target].to_numpy(float)
        for key in pd.unique(keys):
            m = (keys == key) & np.isfinite(y)
            if m.sum() >= self.min_rows:
                self.context_mib[key], self.allocator[key] = fit_context_allocator(dyn[m], y[m])
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """The analytic footprint in MiB, one per row."""
        keys = pd.Series(protocol_keys(df))
        uniq = keys.unique()
        ctx = {k: self.constant(k, self.context_mib, default_context_mib(k.split("|")[0])) for k in uniq}
        alloc = {k: self.constant(k, self.allocator, 1.0) for k in uniq}
        return keys.map(ctx).to_numpy(float) + keys.map(alloc).to_numpy(float) * allocated_mib(df, protocols(df))

    def constant(self, key: str, fitted: dict[str, float], default: float) -> float:
        """A constant for 'gpu|protocol': fitted there, else the mean over GPUs measured with the protocol
        (context and allocator are mostly the software's), else the default."""
        if key in fitted:
            return fitted[key]
        same = [v for k, v in fitted.items() if k.split("|")[1] == key.split("|")[1]]
        return float(np.mean(same)) if same else default

    def constants(self) -> dict[str, dict[str, float]]:
        """The fitted constants, for a predictor card."""
        return {k: {"context_mib": round(self.context_mib[k], 1), "allocator": round(self.allocator[k], 4)}
                for k in sorted(self.context_mib)}


def fit_context_allocator(allocated: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(context MiB, allocator ratio) minimizing the median absolute log error of ``context + ratio x allocated``."""
    from scipy.optimize import minimize

    def loss(theta: np.ndarray) -> float:
        pred = theta[0] + theta[1] * allocated
        return float(np.mean(np.abs(np.log(np.maximum(pred, 1.0)) - np.log(measured))))

    start = np.array([DEFAULT_CONTEXT_MIB, 1.0])
    res = minimize(loss, start, method="Nelder-Mead", options={"xatol": 0.5, "fatol": 1e-6, "maxiter": 2000})
    ctx, ratio = float(np.clip(res.x[0], 0.0, 4096.0)), float(np.clip(res.x[1], 0.5, 3.0))
    return ctx, ratio


def protocols(df: pd.DataFrame) -> pd.Series:
    """Each row's measurement protocol: its ``source`` column, else this project's ('gpupred')."""
    return df["source"].astype(str) if "source" in df.columns else pd.Series("gpupred", index=df.index)


def protocol_keys(df: pd.DataFrame) -> np.ndarray:
    """'gpu|protocol' per row (the key of the fitted constants)."""
    from gpupred.hardware import gpu_spec

    gpu = df["gpu"].astype(str) if "gpu" in df.columns else pd.Series("H200", index=df.index)
    names = {g: gpu_spec(g).name for g in pd.unique(gpu)}
    return (gpu.map(names) + "|" + protocols(df)).to_numpy()


def footprint_mib(features: dict[str, Any], gpu: str, precision: str, optimizer: str,
                  terms: dict[str, float] | None = None, protocol: str = "gpupred",
                  fitted: Footprint | None = None) -> float:
    """Analytic training memory (MiB) of one feature row (``gpupred.featurize``) with its ``graph_terms`` on a GPU."""
    row = pd.DataFrame([{**features, **(terms or {}), "precision": precision, "optimizer": optimizer, "gpu": gpu,
                         "source": protocol}])
    return float((fitted or Footprint()).predict(row)[0])


def onnx_footprint_mib(path_or_proto: Any, batch_size: int, precision: str, optimizer: str, gpu: str,
                       fitted: Footprint | None = None) -> float:
    """Analytic training memory (MiB) of an ONNX graph at a batch size, precision and optimizer on a GPU."""
    from gpupred.graph import featurize

    features = featurize(path_or_proto, batch_size=batch_size, precision=precision,
                         optimizer="adam" if OPTIMIZER_STATES.get(optimizer, 0) >= 2 else "sgd")
    return footprint_mib(features, gpu, precision, optimizer, graph_terms(path_or_proto, batch_size), fitted=fitted)


def footprint_columns(df: pd.DataFrame, progress: bool = False) -> pd.DataFrame:
    """``df`` with ``FOOTPRINT_COLUMNS`` added from each workload's graph (the graph store's, or a built fcnet);
    NaN where neither has it (the footprint then uses the row's ``activation_bytes``)."""
    from gpupred.reports import progress_bar

    _need(df, ("workload_id",))
    out = df.copy()
    cache: dict[tuple[str, int], dict[str, float]] = {}
    graphs: dict[str, Any] = {}
    rows = []
    for wid in progress_bar(iterable=out["workload_id"].astype(str), desc="footprint graph terms", unit="row",
                            disable=not progress):
        spec = _spec(wid)
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


def _spec(workload_id: str) -> Any:
    """The workload spec of an id, or None when the id is not one."""
    from gpupred.workloads.spec import WorkloadSpec

    try:
        return WorkloadSpec.from_id(workload_id)
    except (GpupredError, ValueError, KeyError):
        return None


def _stored_graph(spec: Any) -> Any:
    """A spec's graph without torch: a GPUMemNet network built with onnx.helper, else the graph store's, else None."""
    if spec.family == "fcnet":
        from gpupred.importers.gpumemnet import fcnet_onnx

        return fcnet_onnx(spec)
    from gpupred.graph.export import stored_graph

    return stored_graph(spec)
