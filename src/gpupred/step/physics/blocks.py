"""The blocks activation checkpointing recomputes, found in a canonical graph (torch-free).

Hugging Face's ``gradient_checkpointing_enable()`` wraps every layer of the model's layer list
(``model.layers.N``, ``encoder.layer.N``) in ``torch.utils.checkpoint``; timm's ``set_grad_checkpointing()``
does the same to every block (``blocks.N``, ``stages.N.blocks.M``; its ResNets flatten the stages into their
residual blocks). The stem, the head, and the modules between stages (patch merging, downsampling) are not
checkpointed. An exported graph keeps those module paths in its node names (``/model/layers.0/self_attn/...``),
so the blocks are found there:

- a *numbered module* is a path component ending in ``.N`` or ``_N`` (never the node's own name, whose ``_N``
  only tells apart repeated ops); its *list* is its path with the number removed;
- a list is a *block list* when at least two of its members hold the same number (two or more) of contractions:
  repeated blocks (a layer list, a stage's blocks), not the ``Sequential`` indices inside one block (one contraction
  or none each) nor the different sublayers of one (T5's attention and feed-forward ``layer.0``, ``layer.1``);
- a node belongs to the innermost member of a block list on its path, unless that member itself holds a block
  list (a stage whose blocks are checkpointed one by one): such a container's other nodes are not checkpointed.

A graph whose names give no block list (hand-built graphs, exporters that drop module paths) is cut into about
sqrt(n) runs of contractions of equal count, as ``torch.utils.checkpoint.checkpoint_sequential`` does.

Each :class:`Block` lists its nodes and its inputs: the activations it reads that were computed before it (or are
graph inputs), which is what checkpointing keeps for its backward.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

from gpupred.graph.canonical import CanonicalGraph
from gpupred.graph.costs import MAC_CATEGORIES

NUMBERED = re.compile(r"^(?:(.+)[._])?(\d+)$")  # a numbered module: ``layers.3``, ``encoder_layer_3``, ``blocks.2.1``, ``0``


@dataclass(frozen=True)
class Block:
    """One checkpointed block: its nodes (graph order) and the activations it reads from before it."""

    name: str
    nodes: tuple[int, ...]
    inputs: tuple[str, ...]


def _is_contraction(graph: CanonicalGraph, i: int) -> bool:
    entry = graph.nodes[i][6]
    return entry is not None and entry.category in MAC_CATEGORIES


def _members(graph: CanonicalGraph) -> tuple[list[list[str]], dict[str, int]]:
    """Each node's numbered-module paths (outermost first), and the contractions under each path."""
    paths: list[list[str]] = []
    macs: dict[str, int] = defaultdict(int)
    for i, node in enumerate(graph.nodes):
        parts = [p for p in str(node[4]).split("/") if p][:-1]  # the last part is the node's own name
        mine = ["/".join(parts[:j + 1]) for j, p in enumerate(parts) if NUMBERED.match(p)]
        paths.append(mine)
        if _is_contraction(graph, i):
            for p in mine:
                macs[p] += 1
    return paths, macs


def _list_of(path: str) -> str:
    head, _, last = path.rpartition("/")
    m = NUMBERED.match(last)
    return f"{head}/{m.group(1) or '#'}" if m else path


def _block_members(paths: list[list[str]], macs: dict[str, int]) -> set[str]:
    """The numbered modules of two or more contractions in a block list: one where at least two such members hold
    the same number of contractions (repeated blocks, not the different sublayers of one block)."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    rich = {p for mine in paths for p in mine if macs.get(p, 0) >= 2}
    for p in rich:
        counts[(_list_of(p), macs[p])] += 1
    lists = {name for (name, _), n in counts.items() if n >= 2}
    return {p for p in rich if _list_of(p) in lists}


def _named_blocks(graph: CanonicalGraph) -> dict[str, list[int]]:
    """Block name -> its nodes, from the module paths in the node names ({} when they give no block list)."""
    paths, macs = _members(graph)
    members = _block_members(paths, macs)
    containers = {p for mine in paths for k, p in enumerate(mine) if p in members and
                  any(q in members for q in mine[k + 1:])}
    out: dict[str, list[int]] = defaultdict(list)
    for i, mine in enumerate(paths):
        inner = [p for p in mine if p in members]
        if inner and inner[-1] not in containers:
            out[inner[-1]].append(i)
    return dict(out)


def _sequential_blocks(graph: CanonicalGraph) -> dict[str, list[int]]:
    """About sqrt(n) runs of equal contraction count (checkpoint_sequential's segments) for a graph without names."""
    macs = [i for i in range(len(graph.nodes)) if _is_contraction(graph, i)]
    if len(macs) < 2:
        return {}
    segments = max(2, round(math.sqrt(len(macs))))
    per = math.ceil(len(macs) / segments)
    bounds = [macs[k] for k in range(0, len(macs), per)][1:] + [len(graph.nodes)]
    out, start = {}, 0
    for k, stop in enumerate(bounds):
        out[f"segment {k}"] = list(range(start, stop))
        start = stop
    return out


def checkpoint_blocks(graph: CanonicalGraph) -> list[Block]:
    """The blocks activation checkpointing would wrap, in graph order (see the module notes; found once per graph and
    its other batch sizes: they read node names, parameters and which tensors have shapes, never a shape's value)."""
    return list(graph.memo_structure("checkpoint_blocks", lambda: _find_blocks(graph)))


def _find_blocks(graph: CanonicalGraph) -> tuple[Block, ...]:
    """:func:`checkpoint_blocks`' search."""
    named = _named_blocks(graph) or _sequential_blocks(graph)
    producer = {o: i for i, node in enumerate(graph.nodes) for o in node[3]}
    inputs = set(graph.graph_inputs)
    blocks = []
    for name, nodes in named.items():
        mine = set(nodes)
        reads = []
        for i in nodes:
            for t in graph.nodes[i][2]:
                if t and t not in graph.params and t in graph.shapes and t not in reads and (
                        (t in producer and producer[t] not in mine) or t in inputs):
                    reads.append(t)
        blocks.append(Block(name, tuple(nodes), tuple(reads)))
    return tuple(sorted(blocks, key=lambda b: b.nodes[0]))
