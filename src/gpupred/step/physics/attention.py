"""Attention cores of a canonical graph: the nodes torch runs as one fused kernel (torch-free).

Torch's attention modules (``nn.MultiheadAttention``, hence ``nn.TransformerEncoderLayer`` and ``nn.Transformer``,
torchvision's ViT, timm's and Hugging Face's default ``sdpa`` attention) call ``scaled_dot_product_attention``,
which CUDA runs as one fused kernel (FlashAttention for 16-bit inputs, the memory-efficient kernel otherwise):
the scores ``Q K^T`` and their softmax never reach memory. An ONNX export writes the same computation out as
MatMul(Q, K^T) -> scale / mask -> Softmax -> MatMul(., V), the scale often applied to Q and K beforehand. A
step model that charged those nodes one kernel each would move the ``S x S`` scores through memory several
times each way, which the GPU never does.

:func:`attention_cores` finds every such chain: a Softmax whose input comes, through views and elementwise
scale or mask ops, from a MatMul of two activations, and whose output feeds (through views, casts, and the
``Where(IsNaN(p), 0, p)`` guard torch's exporter writes after a masked softmax) the first operand of a MatMul by an
activation. Scale ops on Q or K (an elementwise op with a one-element operand) join
the core. :mod:`gpupred.step.physics.kernels` charges each core as one forward kernel (the two MatMuls' FLOPs; Q, K, V,
the output and a mask read or written once) and two backward kernels (a preprocessing pass over the output
and its gradient, and the main kernel: 2.5x the forward FLOPs, as FlashAttention recomputes the scores).

Not every core runs fused: only the model code decides. A model that calls ``scaled_dot_product_attention`` is
exported by torch's ONNX symbolic as ``MatMul(Q * sqrt(scale), K^T * sqrt(scale))``: both operands of the scores
product scaled by one-element constants (the exporter's ``Sqrt`` of the scale). Hand-written attention scales Q alone,
or the scores, or neither (timm's Swin and Swin-V2 windows, CrossViT's cross-attention, Hugging Face models with
``attn_implementation="eager"``) and runs as its ops: the scores written, a softmax kernel, a product by V.
:attr:`AttentionCore.sdpa` tells the two apart, and :func:`fused_cores` picks the cores a training setup's
``attention`` option fuses: ``auto`` those exported from ``scaled_dot_product_attention``, ``sdpa`` and ``flash``
every one (the model run with a fused implementation), ``eager`` none.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupred.graph.canonical import CanonicalGraph, shape_elements
from gpupred.graph.costs import view_rule

SIDE_OPS: frozenset[str] = frozenset({"Add", "Sub", "Mul", "Div", "Where"})  # scale or mask between MatMul and Softmax
PASS_OPS: frozenset[str] = frozenset({"Cast"})
TORCH_VIEWS: frozenset[str] = frozenset({"Slice", "Split", "Expand", "Transpose"})  # no forward kernel in torch
BACKWARD_FLOPS = 2.5  # FlashAttention's backward: five S x S contractions against the forward's two


@dataclass(frozen=True)
class AttentionCore:
    """One fused attention kernel: the graph nodes it replaces and its operands."""

    first: int  # index of the Q K^T MatMul
    last: int  # index of the MatMul by V (where the fused kernel is launched)
    nodes: frozenset[int]  # every node the kernel replaces
    q: str
    k: str
    v: str
    out: str
    mask: str | None  # a mask tensor the kernel reads (None: none, or a one-element scale)
    sdpa: bool = True  # exported from scaled_dot_product_attention (both operands of Q K^T scaled by one element)


def _numel(graph: CanonicalGraph, name: str) -> int:
    return shape_elements(graph.shapes.get(name))


def _is_view(graph: CanonicalGraph, i: int) -> bool:
    entry = graph.nodes[i][6]
    return entry is not None and entry.rule is view_rule


def tensor_links(graph: CanonicalGraph) -> tuple[dict[str, int], dict[str, list[int]]]:
    """(producer, consumers) of every tensor: the node writing it, the nodes reading it in order. They read the nodes
    alone, so they are kept for every batch size of a graph (:meth:`CanonicalGraph.memo_structure`); read-only."""
    def links() -> tuple[dict[str, int], dict[str, list[int]]]:
        producer: dict[str, int] = {}
        consumers: dict[str, list[int]] = {}
        for i, node in enumerate(graph.nodes):
            for o in node[3]:
                producer[o] = i
            for n in set(node[2]):
                if n:
                    consumers.setdefault(n, []).append(i)
        return producer, consumers

    return graph.memo_structure("tensor_links", links)


class _Links:
    """Producer and consumers of every tensor."""

    def __init__(self, graph: CanonicalGraph) -> None:
        self.graph = graph
        self.producer, self.consumers = tensor_links(graph)

    def activation(self, name: str) -> bool:
        """A tensor computed from the graph inputs (not a weight, not a constant)."""
        g = self.graph
        return bool(name) and name not in g.params and (name in self.producer or name in g.graph_inputs)

    def back(self, name: str, found: set[int], side: list[str]) -> int | None:
        """Walk up from ``name`` through views, casts and scale/mask ops to a MatMul of two activations."""
        while name in self.producer:
            i = self.producer[name]
            op, _d, ins, _o, _n, _a, _e = self.graph.nodes[i]
            if op == "MatMul":
                return i if len(ins) >= 2 and all(self.activation(n) for n in ins[:2]) else None
            if not (_is_view(self.graph, i) or op in PASS_OPS or op in SIDE_OPS) or not ins:
                return None
            acts = [n for n in ins if self.activation(n) and _numel(self.graph, n) > 1]
            chain = [n for n in acts if _numel(self.graph, n) == _numel(self.graph, name)] or acts[:1]
            if not chain:
                return None
            side.extend(n for n in ins if n and n != chain[0] and op in SIDE_OPS)
            found.add(i)
            name = chain[0]
        return None

    def nan_guard(self, name: str, found: set[int]) -> str:
        """The output of ``Where(IsNaN(p), 0, p)`` when ``name`` (p) feeds only that (torch's export of
        scaled_dot_product_attention with a mask zeroes fully masked rows so), else ``name``."""
        readers = self.consumers.get(name, [])
        ops = {self.graph.nodes[i][0]: i for i in readers}
        if len(readers) != 2 or set(ops) != {"IsNaN", "Where"}:
            return name
        guard, where = ops["IsNaN"], ops["Where"]
        if self.graph.nodes[guard][3][0] not in self.graph.nodes[where][2]:
            return name
        found |= {guard, where}
        return self.graph.nodes[where][3][0]

    def forward(self, name: str, found: set[int]) -> int | None:
        """Walk down from ``name`` through views, casts and a NaN guard to the MatMul that reads it as its first
        operand."""
        name = self.nan_guard(name, found)
        while len(self.consumers.get(name, [])) == 1:
            i = self.consumers[name][0]
            op, _d, ins, outs, _n, _a, _e = self.graph.nodes[i]
            if op == "MatMul":
                return i if ins[0] == name and len(ins) > 1 and self.activation(ins[1]) else None
            if not (_is_view(self.graph, i) or op in PASS_OPS) or not outs:
                return None
            found.add(i)
            name = outs[0]
        return None

    def scaled_by_one_element(self, name: str) -> bool:
        """Whether ``name`` is a product (or quotient) of an activation and a one-element tensor."""
        g = self.graph
        if name not in self.producer:
            return False
        op, _d, ins, _o, _n, _a, _e = g.nodes[self.producer[name]]
        return op in ("Mul", "Div") and len(ins) == 2 and _numel(g, ins[1]) == 1 and self.activation(ins[0])

    def scaled(self, name: str, found: set[int]) -> str:
        """The tensor before the views and one-element scales that lead only to ``name`` (they join ``found``)."""
        g = self.graph
        while name in self.producer and len(self.consumers.get(name, [])) == 1:
            i = self.producer[name]
            op, _d, ins, _o, _n, _a, _e = g.nodes[i]
            if not ins or not self.activation(ins[0]):
                break
            scale = op in ("Mul", "Div") and len(ins) == 2 and _numel(g, ins[1]) == 1
            if not (scale or _is_view(g, i) or op in TORCH_VIEWS):
                break
            found.add(i)
            name = ins[0]
        return name


def attention_cores(graph: CanonicalGraph) -> list[AttentionCore]:
    """Every attention core of ``graph`` (see the module notes), in graph order (found once per graph)."""
    return list(graph.memo("attention_cores", lambda: _find_cores(graph)))


def _find_cores(graph: CanonicalGraph) -> tuple[AttentionCore, ...]:
    """:func:`attention_cores`' search."""
    links = _Links(graph)
    cores = []
    taken: set[int] = set()
    for i, (op, _d, ins, outs, _n, _a, _e) in enumerate(graph.nodes):
        if op != "Softmax" or not ins or not outs:
            continue
        found: set[int] = {i}
        side: list[str] = []
        first = links.back(ins[0], found, side)
        last = links.forward(outs[0], found) if first is not None else None
        if first is None or last is None:
            continue
        sdpa = all(links.scaled_by_one_element(n) for n in graph.nodes[first][2][:2])
        q = links.scaled(graph.nodes[first][2][0], found)
        k = links.scaled(graph.nodes[first][2][1], found)
        v = links.scaled(graph.nodes[last][2][1], found)
        nodes = frozenset(found | {first, last})
        if nodes & taken:
            continue
        taken |= nodes
        masks = [n for n in side if _numel(graph, n) > 1]
        cores.append(AttentionCore(first, last, nodes, q, k, v, graph.nodes[last][3][0],
                                   masks[0] if masks else None, sdpa))
    return tuple(cores)


def fused_cores(graph: CanonicalGraph, attention: str = "auto") -> list[AttentionCore]:
    """The attention cores that run as one fused kernel under a training setup's ``attention`` option (``auto``:
    those exported from ``scaled_dot_product_attention``; ``sdpa``, ``flash``: all; ``eager``: none)."""
    if attention == "eager":
        return []
    cores = attention_cores(graph)
    return cores if attention in ("sdpa", "flash") else [c for c in cores if c.sdpa]
