"""GPU memory of a training job: Horus's formula, an analytical estimate, and a learned residual on top.

Analytical estimate (MiB) = weights + gradients + optimizer state + activations kept for backward
+ overhead, where weights = gradients = ``param_bytes`` (fp32 master weights, also under bf16
autocast), optimizer state = 1x (SGD momentum) or 2x (Adam moments) ``param_bytes``, activations =
``activation_bytes`` (gpupred.graph already sizes them by the precision: bf16 autocast outputs 2 bytes,
fp32-kept ops 4), and overhead (CUDA
context, cuBLAS/cuDNN workspaces, caching-allocator slack) is the median gap left in the training
data, per GPU kind. Horus's baseline counts weights and forward feature maps only:
``(4 * params + activation_bytes) / 2**20`` (Yeung et al., TPDS 2022, our reading of their formula).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError

MIB = float(2**20)
OPTIMIZER_STATES: dict[str, float] = {"sgd": 1.0, "adam": 2.0}  # param-sized buffers per optimizer
METHODS: tuple[str, ...] = ("horus", "analytical", "analytical+residual")


def horus_mib(df: pd.DataFrame) -> np.ndarray:
    """Horus's memory formula: weights plus forward feature maps, fp32."""
    return (4.0 * df["params"].to_numpy(float) + df["activation_bytes"].to_numpy(float)) / MIB


def analytical_bytes(df: pd.DataFrame) -> np.ndarray:
    """Weights + gradients + optimizer state + activations kept for backward, in bytes (no overhead)."""
    for col in ("param_bytes", "activation_bytes", "optimizer"):
        if col not in df.columns:
            raise GpupredError(f"memory estimate needs column {col!r}; use a dataset frame (gpupred.dataset)")
    p = df["param_bytes"].to_numpy(float)
    states = df["optimizer"].map(OPTIMIZER_STATES).fillna(1.0).to_numpy(float)
    act = df["activation_bytes"].to_numpy(float)  # already at the precision's dtype sizes
    return p * (2.0 + states) + act


class MemoryModel:
    """Analytical memory plus fitted overhead, and a learned multiplicative residual on top."""

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
        self.features_ = feature_columns(data)
        ratio = np.log(data[target].to_numpy(float)) - np.log(np.maximum(self.analytical(data), 1.0))
        self.residual_ = make_regressor(self.residual_model, tune=False, seed=self.seed).fit(
            data[self.features_].to_numpy(float), ratio)
        return self

    def analytical(self, df: pd.DataFrame) -> np.ndarray:
        """The analytical estimate in MiB, overhead included."""
        overhead = df["gpu"].map(self.overhead_).fillna(self.overhead_default_).to_numpy(float) if "gpu" in df else self.overhead_default_
        return analytical_bytes(df) / MIB + overhead

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """Each method's estimate in MiB: horus, analytical, analytical+residual."""
        ana = self.analytical(df)
        corrected = np.maximum(ana, 1.0) * np.exp(self.residual_.predict(df[self.features_].to_numpy(float)))
        return pd.DataFrame({"horus": horus_mib(df), "analytical": ana, "analytical+residual": corrected}, index=df.index)


def evaluate_memory(df: pd.DataFrame, schemes: tuple[str, ...] = ("random", "lofo"), n_repeats: int = 3,
                    target: str = "memory_mib", seed: int = 0) -> pd.DataFrame:
    """Out-of-sample relative error of every method, one row per (scheme, split, run, method)."""
    from gpupred.learn.evaluate import splits_for

    data = df[df[target].notna()].reset_index(drop=True)
    out = []
    for scheme in schemes:
        for train, test, label in splits_for(data, scheme, n_repeats, seed):
            model = MemoryModel(seed=seed).fit(data.iloc[train], target)
            est = model.predict(data.iloc[test])
            measured = data.iloc[test][target].to_numpy(float)
            for method in METHODS:
                rel = np.abs(est[method].to_numpy() - measured) / measured
                out.append(pd.DataFrame({"scheme": scheme, "split": label, "method": method,
                                         "run_id": data.iloc[test]["run_id"].to_numpy(), "rel_err": rel,
                                         "family": data.iloc[test]["family"].to_numpy()}))
    return pd.concat(out, ignore_index=True)


def summarize_memory(errors: pd.DataFrame) -> pd.DataFrame:
    """Median and p90 relative error per method and scheme."""
    g = errors.groupby(["method", "scheme"])["rel_err"]
    return pd.DataFrame({"median": g.median(), "p90": g.quantile(0.9), "max": g.max()}).unstack("scheme")


def plot_memory(errors: pd.DataFrame) -> Any:
    """Box plots of relative error per method and scheme (log scale)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(7, 3.5))
    sns.boxplot(data=errors, x="rel_err", y="method", hue="scheme", ax=ax, showfliers=True)
    ax.set_xscale("log")
    ax.set_xlabel("relative error |estimate - measured| / measured")
    fig.tight_layout()
    return fig
