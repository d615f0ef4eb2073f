"""The physics of the memory estimator's evaluation baselines: Horus's formula and the first analytical estimate
(weights, gradients, optimizer state, autocast copies, activations kept for backward, plus a fitted overhead).

Analytical estimate (MiB) = weights + gradients + optimizer state + autocast weight copies +
activations kept for backward + overhead, where weights = gradients = ``param_bytes`` (fp32 master
weights, also under bf16/fp16 autocast), optimizer state = 1x (SGD momentum) or 2x (Adam moments)
``param_bytes``, autocast's cached 16-bit copies of the weights = ``param_bytes / 2`` under bf16 and fp16,
activations = ``activation_bytes`` (gpupred.graph already sizes them by the precision: autocast outputs
2 bytes, fp32-kept ops 4), and overhead (CUDA context, cuBLAS/cuDNN workspaces, caching-allocator slack)
is the median gap left in the training data, per GPU kind (one GPU kind per source here). Horus's
baseline counts weights and forward feature maps only: ``(4 * params + activation_bytes) / 2**20``
(Yeung et al., TPDS 2022, our reading of their formula).

The estimator's own physics is the analytic footprint of :mod:`gpupred.memory.physics` (its graph terms and its fitted
context and allocator constants), which :mod:`gpupred.memory.correction` and :mod:`gpupred.memory.estimator` use.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError

MIB = float(2**20)


def horus_mib(df: pd.DataFrame) -> np.ndarray:
    """Horus's memory formula: weights plus forward feature maps, fp32."""
    return (4.0 * df["params"].to_numpy(float) + df["activation_bytes"].to_numpy(float)) / MIB


def analytical_bytes(df: pd.DataFrame) -> np.ndarray:
    """Weights + gradients + optimizer state + activations kept for backward, in bytes (no overhead)."""
    for col in ("param_bytes", "activation_bytes", "optimizer"):
        if col not in df.columns:
            raise GpupredError(f"memory estimate needs column {col!r}; use a dataset frame (gpupred.dataset)")
    from gpupred.memory.physics import OPTIMIZER_STATES

    p = df["param_bytes"].to_numpy(float)
    states = df["optimizer"].astype(str).str.lower().map(OPTIMIZER_STATES).fillna(1.0).to_numpy(float)
    half = df["precision"].isin(["bf16", "fp16"]).to_numpy(float) if "precision" in df.columns else 0.0
    act = df["activation_bytes"].to_numpy(float)  # already at the precision's dtype sizes
    return p * (2.0 + states + 0.5 * half) + act


class MemoryModel:
    """Analytical memory plus fitted overhead, and a learned multiplicative residual on top (a baseline)."""

    def __init__(self, residual_model: str = "lightgbm", seed: int = 0) -> None:
        self.residual_model = residual_model
        self.seed = seed

    def fit(self, df: pd.DataFrame, target: str = "memory_mib") -> "MemoryModel":
        """Fit the overhead (median gap per GPU) and the residual model on log(measured / analytical)."""
        from gpupred.dataset import feature_columns
        from gpupred.learn.regressors import make_regressor

        data = df[df[target].notna()]
        gap = data[target].to_numpy(float) - analytical_bytes(data) / MIB
        self.overhead_ = pd.Series(gap, index=data["gpu"].to_numpy()).groupby(level=0).median().to_dict()
        self.overhead_default_ = float(np.median(gap))
        from gpupred.memory.physics import FOOTPRINT_COLUMNS

        self.features_ = [c for c in feature_columns(data) if c not in FOOTPRINT_COLUMNS]  # the baseline as it was
        ratio = np.log(data[target].to_numpy(float)) - np.log(np.maximum(self.analytical(data), 1.0))
        self.residual_ = make_regressor(self.residual_model, tune=False, seed=self.seed).fit(
            data[self.features_].to_numpy(float), ratio)
        return self

    def analytical(self, df: pd.DataFrame) -> np.ndarray:
        """The analytical estimate in MiB, overhead included."""
        overhead = (df["gpu"].map(self.overhead_).fillna(self.overhead_default_).to_numpy(float) if "gpu" in df
                    else self.overhead_default_)
        return analytical_bytes(df) / MIB + overhead

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """Each method's estimate in MiB: horus, analytical, analytical+residual."""
        ana = self.analytical(df)
        corrected = np.maximum(ana, 1.0) * np.exp(self.residual_.predict(df[self.features_].to_numpy(float)))
        return pd.DataFrame({"horus": horus_mib(df), "analytical": ana, "analytical+residual": corrected},
                            index=df.index)
