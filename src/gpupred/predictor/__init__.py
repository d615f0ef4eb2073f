"""The exported predictor: load it (checked), predict utilization, SM activity and memory with intervals."""

from gpupred.predictor.artifact import (
    SCHEMA_VERSION,
    Predictor,
    export_predictor,
    load_predictor,
    train_predictor,
)

__all__ = ["SCHEMA_VERSION", "Predictor", "export_predictor", "load_predictor", "train_predictor"]
