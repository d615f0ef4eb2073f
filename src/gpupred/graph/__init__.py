"""Graph features: export a workload to ONNX (structure only) and featurize any ONNX graph for a batch size.

``featurize``, ``FEATURE_KEYS`` and ``check_complete`` (the predictor's refusal of a graph it could not see
whole, :mod:`gpupred.graph.coverage`) need only onnx and numpy; ``export_model`` / ``export_onnx`` (torch) and
``build_feature_table`` (pandas) are imported on first use. Every graph is featurized in the canonical form
of :mod:`gpupred.graph.canonical`, so a model's features do not depend on how it was exported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "FEATURE_KEYS", "COVERAGE_KEYS", "MAX_INCOMPLETE", "IncompleteGraphWarning", "check_complete", "featurize", "export_model", "export_onnx", "export_module", "build_feature_table", "write_feature_table",
]

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.graph.coverage import COVERAGE_KEYS, MAX_INCOMPLETE, IncompleteGraphWarning, check_complete
    from gpupred.graph.features import FEATURE_KEYS, featurize
    from gpupred.graph.export import export_model, export_module, export_onnx
    from gpupred.graph.table import build_feature_table, write_feature_table

_LAZY = {
    "COVERAGE_KEYS": "gpupred.graph.coverage",
    "MAX_INCOMPLETE": "gpupred.graph.coverage",
    "IncompleteGraphWarning": "gpupred.graph.coverage",
    "check_complete": "gpupred.graph.coverage",
    "FEATURE_KEYS": "gpupred.graph.features",
    "featurize": "gpupred.graph.features",
    "export_model": "gpupred.graph.export",
    "export_onnx": "gpupred.graph.export",
    "export_module": "gpupred.graph.export",
    "build_feature_table": "gpupred.graph.table",
    "write_feature_table": "gpupred.graph.table",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use (importing the package stays free of onnx, numpy, torch and pandas)."""
    if name in _LAZY:
        import importlib

        value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)
        return value
    raise AttributeError(f"module 'gpupred.graph' has no attribute {name!r}")
