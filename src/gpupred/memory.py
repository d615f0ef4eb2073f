"""GPU memory of a training job: Horus's formula, an analytical estimate, and a learned residual on top.

Analytical estimate (MiB) = weights + gradients + optimizer state + autocast weight copies +
activations kept for backward + overhead, where weights = gradients = ``param_bytes`` (fp32 master
weights, also under bf16/fp16 autocast), optimizer state = 1x (SGD momentum) or 2x (Adam moments)
``param_bytes``, autocast's cached 16-bit copies of the weights = ``param_bytes / 2`` under bf16 and fp16,
activations = ``activation_bytes`` (gpupred.graph already sizes them by the precision: autocast outputs
2 bytes, fp32-kept ops 4), and overhead (CUDA context, cuBLAS/cuDNN workspaces, caching-allocator slack)
is the median gap left in the training data, per GPU kind (one GPU kind per source here). Horus's
baseline counts weights and forward feature maps only: ``(4 * params + activation_bytes) / 2**20``
(Yeung et al., TPDS 2022, our reading of their formula).

Evaluation (:func:`evaluate_memory`) uses the same splits as the regressors (grouped by workload, and
leave-one-family-out with sibling families together) and reports every figure per source as well.
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
    half = df["precision"].isin(["bf16", "fp16"]).to_numpy(float) if "precision" in df.columns else 0.0
    act = df["activation_bytes"].to_numpy(float)  # already at the precision's dtype sizes
    return p * (2.0 + states + 0.5 * half) + act


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


def evaluate_memory(df: pd.DataFrame, schemes: tuple[str, ...] = ("grouped_random", "lofo"), n_folds: int = 5,
                    target: str = "memory_mib", seed: int = 0, residual_model: str = "lightgbm") -> pd.DataFrame:
    """Out-of-sample estimate and relative error of every method, one row per (scheme, split, run, method)."""
    from gpupred.learn.evaluate import splits_for

    data = df[df[target].notna()].reset_index(drop=True)
    source = data["source"].to_numpy() if "source" in data.columns else np.full(len(data), "")
    out = []
    for scheme in schemes:
        for train, test, label in splits_for(data, scheme, n_folds, seed):
            model = MemoryModel(residual_model=residual_model, seed=seed).fit(data.iloc[train], target)
            est = model.predict(data.iloc[test])
            measured = data.iloc[test][target].to_numpy(float)
            for method in METHODS:
                rel = np.abs(est[method].to_numpy() - measured) / measured
                out.append(pd.DataFrame({"scheme": scheme, "split": label, "method": method,
                                         "run_id": data.iloc[test]["run_id"].to_numpy(), "estimate_mib": est[method].to_numpy(),
                                         "measured_mib": measured, "rel_err": rel, "source": source[test],
                                         "family": data.iloc[test]["family"].to_numpy()}))
    return pd.concat(out, ignore_index=True)


def summarize_memory(errors: pd.DataFrame, by_source: bool = False) -> pd.DataFrame:
    """Median and p90 relative error per method and scheme (and per source)."""
    keys = ["method", "scheme", *(["source"] if by_source else [])]
    g = errors.groupby(keys)["rel_err"]
    table = pd.DataFrame({"median": g.median(), "p90": g.quantile(0.9), "max": g.max(), "n": g.size()})
    return table.unstack("scheme")


def plot_memory(errors: pd.DataFrame) -> Any:
    """Box plots of relative error per method and scheme (log scale), one panel per source."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sources = sorted(errors["source"].unique()) if "source" in errors.columns else [None]
    fig, axes = plt.subplots(1, len(sources), figsize=(6.5 * len(sources), 3.5), squeeze=False, sharex=True)
    for ax, src in zip(axes[0], sources):
        data = errors if src is None else errors[errors["source"] == src]
        sns.boxplot(data=data, x="rel_err", y="method", hue="scheme", ax=ax, showfliers=True)
        ax.set_xscale("log")
        ax.set_xlabel("relative error |estimate - measured| / measured")
        ax.set_title(src or "")
    fig.tight_layout()
    return fig


def plot_estimates(errors: pd.DataFrame, scheme: str = "grouped_random") -> Any:
    """Estimated vs measured memory (MiB, log axes) for every method under one scheme, coloured by source."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = errors[errors["scheme"] == scheme]
    methods = list(dict.fromkeys(data["method"]))
    fig, axes = plt.subplots(1, len(methods), figsize=(4.6 * len(methods), 4.2), squeeze=False, sharey=True)
    lo = max(1.0, float(data[["estimate_mib", "measured_mib"]].min().min()) * 0.8)
    hi = float(data[["estimate_mib", "measured_mib"]].max().max()) * 1.2
    for ax, method in zip(axes[0], methods):
        sns.scatterplot(data=data[data["method"] == method], x="measured_mib", y="estimate_mib", hue="source", s=12,
                        alpha=0.6, linewidth=0, ax=ax)
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=method, xlabel="measured MiB",
               ylabel="estimate MiB")
    fig.tight_layout()
    return fig
