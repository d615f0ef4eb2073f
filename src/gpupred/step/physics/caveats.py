"""Failure classes the step model does not model whole: detected per job, each widening its interval (torch-free).

Issue 62 quotes public measurements this project does not hold (training steps of timm models on an RTX 3090,
FP32 BERT-large on four GPUs). Some of the classes of error they show are fixed in the physics: attention written
out by the model runs as its ops (:func:`gpupred.step.physics.attention.fused_cores`), permutes that must be made contiguous
are copied, NCHW tensor-core convolutions transpose their operands, autocast casts into fp32 ops. What remains of
each class cannot be modelled from what this project measured, so a job that shows the class gets an interval at
least ``log_width`` wide (log of the step time; log1p of utilization) and its prediction names the class:

- ``multi_branch``: train-time multi-branch blocks (parallel convolutions of one input summed, RepVGG and MobileOne
  style): each branch is priced at the one fitted contraction efficiency, which large dense 3x3 convolutions beat;
- ``eager_attention``: attention cores run as their ops (timm's Swin and Swin-V2 windows, CrossViT's
  cross-attention, Hugging Face ``eager``): their kernels are modelled, not the low efficiency of many tiny batched
  products;
- ``depthwise_heavy``: depthwise convolutions take at least ``DEPTHWISE_SHARE`` of the GPU time (GhostNet, MobileNets
  at large batch) on an architecture without fitted constants: their efficiency is one constant, fitted on Hopper
  only;
- ``fp32_matmul_unfitted``: matmuls on CUDA cores (fp32 with TF32 off) take at least ``SHARE`` of the GPU time on
  an architecture without fitted constants: its FP32 GEMM rate is the published default.

Each width is the error #62 quotes for the class, times what this change's physics moved the same job's prediction
(default constants, the same GPU and setup): the error left, as far as the quoted figure shows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpupred.graph.canonical import CanonicalGraph

SHARE = 0.2  # share of the GPU-busy time from which CUDA-core matmuls mark a job
DEPTHWISE_SHARE = 0.1  # share of the GPU-busy time from which depthwise convolutions mark a job


@dataclass(frozen=True)
class Caveat:
    """A failure class: its name, the least log half-width of the interval of a job showing it, and why."""

    name: str
    log_width: float
    what: str
    evidence: str

    def describe(self) -> dict[str, str | float]:
        """Plain values, for the predictor's card."""
        return {"log_width": round(self.log_width, 3), "what": self.what, "evidence": self.evidence}


CAVEATS: dict[str, Caveat] = {c.name: c for c in (
    Caveat("multi_branch", math.log(1.81 * 1.107),
           "train-time multi-branch blocks (parallel convolutions of one input summed): every branch priced at the "
           "average contraction efficiency",
           "RepVGG-B2 +81% (#62, RTX 3090, AMP); this change's NCHW transposes add 10.7% (default constants, batch 64)"),
    Caveat("eager_attention", math.log(1 / (0.57 * 1.104)),
           "attention run as its ops (written out by the model, or attention='eager'): kernels modelled, the "
           "efficiency of many tiny batched products not",
           "CrossViT -43%, Swin-V2 -46% (#62, RTX 3090, AMP); this change adds 10.4% and 31% (default constants, "
           "batch 64): -37% and -29% left"),
    Caveat("depthwise_heavy", math.log(1 / (0.29 * 1.217)),
           f"depthwise convolutions take at least {DEPTHWISE_SHARE:.0%} of the GPU time on an architecture without "
           "fitted constants: one efficiency, fitted on Hopper only",
           "GhostNet-0.5 at batch 512 -71% (#62, RTX 3090, AMP); this change adds 21.7%: -65% left"),
    Caveat("fp32_matmul_unfitted", math.log(1 / (0.43 * 1.49)),
           f"fp32 matmuls on CUDA cores (TF32 off) take at least {SHARE:.0%} of the GPU time on an architecture "
           "without fitted constants: its FP32 GEMM rate is the published default",
           "BERT-large FP32 with eager attention, L4 -57% (#62, worst of H100, A100, L4); this change adds 49% on "
           "the L4 (default constants, batch 8, sequence 512): -36% left"),
)}


def multi_branch_sums(graph: CanonicalGraph) -> int:
    """Adds of two convolution outputs computed from one input (a train-time multi-branch block, RepVGG style)."""
    producer = {o: node for node in graph.nodes for o in node[3]}
    count = 0
    for op, _d, ins, _o, *_ in graph.nodes:
        if op != "Add" or len(ins) < 2:
            continue
        convs = [producer.get(i) for i in ins[:2]]
        if all(c is not None and c[0] == "Conv" for c in convs) and convs[0][2][0] == convs[1][2][0]:  # type: ignore[index]
            count += 1
    return count


def job_caveats(traits: dict[str, float], shares: dict[str, float], fitted_architecture: bool) -> list[str]:
    """The failure classes a job shows: from its graph's traits (``KernelList.traits``) and the shares of its GPU time
    per kernel class on its GPU (:func:`time_shares`), ``fitted_architecture``: its GPU's architecture has fits."""
    out = []
    if traits.get("multi_branch_sums", 0) >= 2:
        out.append("multi_branch")
    if traits.get("eager_attention_cores", 0) > 0:
        out.append("eager_attention")
    if shares.get("depthwise", 0.0) >= DEPTHWISE_SHARE and not fitted_architecture:
        out.append("depthwise_heavy")
    if shares.get("fp32_matmul", 0.0) >= SHARE and not fitted_architecture:
        out.append("fp32_matmul_unfitted")
    return out


def time_shares(times: np.ndarray, depthwise: np.ndarray, fp32_matmul: np.ndarray) -> dict[str, float]:
    """Shares of the GPU-busy time ``times`` in the kernels marked ``depthwise`` and ``fp32_matmul`` (boolean masks:
    depthwise convolutions, matmuls on CUDA cores)."""
    busy = float(times.sum()) or 1.0
    return {"depthwise": float(times[depthwise].sum()) / busy, "fp32_matmul": float(times[fp32_matmul].sum()) / busy}


def widest(names: list[str]) -> float:
    """The largest least width among the named classes (0 when there are none)."""
    return max((CAVEATS[n].log_width for n in names), default=0.0)
