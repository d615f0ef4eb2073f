"""The exported predictor: load it (checked), predict utilization, SM activity and memory with intervals.

Importing this package is light (the CLI imports it to register ``gpupred predict``); the artifact module, with
pandas and scikit-learn behind it, is imported on first use of a name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.predictor.artifact import SCHEMA_VERSION, Predictor, export_predictor, load_predictor, train_predictor

__all__ = ["SCHEMA_VERSION", "Predictor", "export_predictor", "load_predictor", "train_predictor"]


def __getattr__(name: str) -> Any:
    """Import the public names on first use."""
    if name in __all__:
        from gpupred.predictor import artifact

        return getattr(artifact, name)
    raise AttributeError(f"module 'gpupred.predictor' has no attribute {name!r}")
