"""The memory estimator: GPU memory of a training job, as the analytic footprint (:mod:`gpupred.memory.physics`) times a
bounded learned correction, with its interval rule inside.

- :mod:`gpupred.memory.baselines`: the evaluation's analytical baselines (Horus's formula, the first analytical
  estimate); the estimator's own physics is :mod:`gpupred.memory.physics`;
- :mod:`gpupred.memory.correction`: the learned correction, its settings, and the leave-one-family-out that chooses
  one and calibrates the intervals;
- :mod:`gpupred.memory.estimator`: :class:`MemoryEstimator` (scikit-learn style: ``fit``, ``predict``,
  ``get_params``, ``describe``), the model notebook 03 scores and the predictor ships;
- :mod:`gpupred.memory.evaluate`: the estimator beside its baselines (notebooks 03 and 05; evaluation only).

Names are imported on first use, so importing the estimator never imports the evaluation.
"""

from __future__ import annotations

from typing import Any

_LAZY: dict[str, str] = {
    "MemoryEstimator": "gpupred.memory.estimator", "BEST": "gpupred.memory.estimator",
    "FootprintModel": "gpupred.memory.estimator",  # the estimator's former name: predictors pickled before load
    "MIB": "gpupred.memory.baselines", "horus_mib": "gpupred.memory.baselines",
    "analytical_bytes": "gpupred.memory.baselines", "MemoryModel": "gpupred.memory.baselines",
    **{name: "gpupred.memory.correction" for name in (
        "CORRECTION_CLIP", "COVERAGE", "MAX_ROWS_PER_SOURCE", "CORRECTION_FEATURES", "CORRECTION_GRID",
        "DEFAULT_SETTING", "TARGET_CLIP", "CorrectionSetting", "correction_features", "correction_regressor",
        "fit_correction", "inner_lofo_residuals", "lofo_halfwidths", "per_source_sample", "selection_score",
        "source_weights")},
    **{name: "gpupred.memory.evaluate" for name in (
        "METHODS", "OLD_METHODS", "COMPARISON_METHODS", "MEMORY_METRICS", "compare_memory", "evaluate_memory",
        "memory_metrics", "method_key", "plot_estimates", "plot_memory", "regressor_columns", "split_methods",
        "summarize_memory")},
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), "MemoryEstimator" if name == "FootprintModel" else name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpupred.memory' has no attribute {name!r}")
