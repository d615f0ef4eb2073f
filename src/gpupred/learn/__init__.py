"""Learning: regressors compared by RMSLE under grouped splits, nested model selection, feature importance,
conformal intervals, and the out-of-fold predictions downstream stages read.

Names are imported on first use, so importing one module (the intervals an exported predictor unpickles) does not
import scikit-learn's model selection with the rest.
"""

from __future__ import annotations

from typing import Any

_LAZY: dict[str, str] = {
    **{name: "gpupred.learn.crossgpu" for name in ("cross_gpu_evaluation", "transfer_splits", "twin_ratios")},
    **{name: "gpupred.learn.splits" for name in (
        "SIBLINGS", "cross_gpu_splits", "grouped_random_splits", "lofo_splits", "rmsle", "sibling_group", "splits_for")},
    "ConformalRegressor": "gpupred.learn.intervals",
    **{name: "gpupred.learn.nested" for name in ("CVSettings", "NestedResult", "nested_cv")},
    **{name: "gpupred.learn.regressors" for name in ("EXPORTABLE", "REGRESSORS", "TARGETS", "make_regressor")},
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpupred.learn' has no attribute {name!r}")
