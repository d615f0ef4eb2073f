"""How much of a graph the featurizer could see: never a silent zero.

A node whose output shape stays unknown, or whose op has no cost rule, adds nothing to the FLOPs and bytes
of its feature row. Every row therefore says how much is missing (:data:`COVERAGE_KEYS`):

- ``frac_nodes_unshaped``: the share of the canonical graph's nodes with an output of unknown shape;
- ``frac_nodes_uncosted``: the share of its work nodes (views excluded) that got no cost (no rule, or no shape);
- ``frac_flops_affected``: the estimated share of the forward FLOPs in those nodes. An uncosted node is
  charged the mean FLOPs of the costed nodes of its category, and a contraction at least 2 FLOPs per weight
  element per sample (its weight is applied once per sample at least); the share is their sum over the
  total with the costed FLOPs. It is an estimate, and 1.0 when nothing could be costed;
- ``first_incomplete_node``: the first such node and its op (``'name' (Op)``), empty when none.

:func:`check_complete` is the predictor's gate: it refuses a row with more than :data:`MAX_INCOMPLETE` (1%) of
its nodes unshaped or of its estimated FLOPs affected, naming that first node. ``featurize`` warns in one
line (:class:`IncompleteGraphWarning`) whenever anything is missing. Torch-free.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from gpupred.errors import GpupredError

COVERAGE_KEYS: list[str] = ["frac_nodes_unshaped", "frac_nodes_uncosted", "frac_flops_affected", "first_incomplete_node"]
MAX_INCOMPLETE = 0.01  # the predictor refuses a row with more than this share of nodes unshaped or FLOPs affected
CONTRACTIONS = ("conv", "matmul", "recurrent")

# an incomplete node: (name, op, category, unshaped, weight elements it reads)
Incomplete = tuple[str, str, str, bool, int]


class IncompleteGraphWarning(UserWarning):
    """featurize could not shape or cost every node of a graph: its FLOPs and bytes are too small."""


def node_label(name: str, op: str) -> str:
    """How a node is named in messages: ``'name' (Op)``."""
    return f"{name or op!r} ({op})"


def coverage_columns(n_nodes: int, n_work: int, incomplete: list[Incomplete], cat_count: Mapping[str, int],
                     cat_flops: Mapping[str, int], batch: int) -> dict[str, Any]:
    """The coverage columns of a feature row from the cost pass's counts and its incomplete nodes."""
    unshaped = sum(1 for item in incomplete if item[3])
    uncosted = sum(1 for item in incomplete if item[2] != "view")
    costed = sum(cat_flops.values())
    mean_all = costed / max(1, sum(cat_count.values()))
    estimate = 0.0
    for _, _, category, _, weight in incomplete:
        if category == "view":
            continue
        mean = cat_flops.get(category, 0) / cat_count[category] if cat_count.get(category) else mean_all
        if category in CONTRACTIONS:
            mean = max(mean, 2.0 * weight * batch)
        estimate += mean
    affected = (estimate / (estimate + costed) if estimate + costed > 0 else 1.0) if uncosted else 0.0
    first = next((node_label(name, op) for name, op, *_ in incomplete), "")
    return {
        "frac_nodes_unshaped": unshaped / n_nodes if n_nodes else 0.0,
        "frac_nodes_uncosted": uncosted / n_work if n_work else 0.0,
        "frac_flops_affected": float(affected),
        "first_incomplete_node": first,
    }


def incomplete_summary(row: Mapping[str, Any]) -> str:
    """One line on what a row is missing (empty when nothing is)."""
    if not row.get("first_incomplete_node"):
        return ""
    kinds = row.get("unknown_op_types") or "no unknown op types"
    return (f"{row.get('frac_nodes_unshaped', 0.0):.1%} of nodes unshaped, {row.get('frac_nodes_uncosted', 0.0):.1%} "
            f"uncosted (about {row.get('frac_flops_affected', 0.0):.1%} of FLOPs), first {row['first_incomplete_node']}; "
            f"{kinds}")


def warn_incomplete(row: Mapping[str, Any], label: str) -> None:
    """Warn in one line when a row is missing nodes (``featurize`` calls it)."""
    summary = incomplete_summary(row)
    if summary:
        warnings.warn(f"{label}: features are incomplete: {summary}", IncompleteGraphWarning, stacklevel=3)


def check_complete(row: Mapping[str, Any], label: str = "graph", limit: float = MAX_INCOMPLETE) -> None:
    """Raise a one-line GpupredError when over ``limit`` of a row's nodes are unshaped or of its FLOPs affected."""
    if "frac_nodes_unshaped" not in row:
        return  # a row made before the coverage columns (e.g. a dataset row): nothing to check
    worst = max(float(row["frac_nodes_unshaped"]), float(row["frac_flops_affected"]))
    if worst > limit:
        raise GpupredError(
            f"{label}: cannot predict from an incomplete graph ({incomplete_summary(row)}); over {limit:.0%} is "
            "missing, so its FLOPs and memory would be too small: re-export it (gpupred.export_model) or report the op"
        )

