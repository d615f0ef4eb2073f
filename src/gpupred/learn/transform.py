"""The regressors' input transform, in a module light enough for an exported predictor to unpickle without
scikit-learn (the numpy forests keep a reference to it)."""

from __future__ import annotations

import numpy as np


def signed_log1p(x: np.ndarray) -> np.ndarray:
    """sign(x) * log1p(|x|): tames FLOPs and bytes that span many orders of magnitude."""
    x = np.asarray(x, dtype=float)
    return np.copysign(np.log1p(np.abs(x)), x)
