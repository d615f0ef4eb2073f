"""How rows are grouped when folds are drawn inside a fit: families that share their building blocks, workloads.

Runtime code (an estimator's inner selection and its conformal calibration) and evaluation code (the outer splits
of :mod:`gpupred.learn.evaluation`) draw on the same rules, so they live here, below both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpupred.errors import GpupredError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# Families that share their building blocks are held out together by leave-one-family-out: a model must
# not see GRU before being tested on LSTM, or GPT before BERT. Families not listed are their own group.
SIBLINGS: dict[str, str] = {
    "lstm": "rnn", "gru": "rnn",
    "bert": "transformer", "gpt": "transformer", "seq2seq": "transformer", "vit": "transformer",
    "mobilenet": "inverted-residual", "efficientnet": "inverted-residual",  # MBConv blocks (EfficientNet builds on MobileNetV2's)
    "vgg": "plain-convnet", "alexnet": "plain-convnet",
    "googlenet": "inception", "inception": "inception",
    "mlp": "fully-connected", "fcnet": "fully-connected",
    # real-world families (gpupred.workloads.realworld) with their catalog twins: the Hugging Face encoders, decoders
    # and encoder-decoders (Whisper's too, behind its two convolutions) are the catalog's bert, gpt and seq2seq
    # written by another library, DeiT is ViT; EfficientNetV2 keeps MBConv blocks; RegNet and NFNet are residual
    # bottleneck networks; Swin and MaxViT share windowed attention; ConvNeXt is its own group
    "deit": "transformer", "hfbert": "transformer", "roberta": "transformer", "gpt2": "transformer",
    "llama": "transformer", "t5": "transformer", "bart": "transformer", "pegasusx": "transformer",
    "whisper": "transformer", "effnetv2": "inverted-residual", "regnet": "resnet", "nfnet": "resnet",
    "swin": "windowed-attention", "maxvit": "windowed-attention",
}
INTERVAL_GROUPINGS: tuple[str, ...] = ("workload", "family")  # what a conformal (CV+) fold keeps whole


def sibling_group(family: str) -> str:
    """The leave-one-family-out group of a family (its siblings share it; resnet variants are one family)."""
    return SIBLINGS.get(family, family)


def interval_groups(df: pd.DataFrame, grouping: str) -> np.ndarray:
    """Per row, the group a conformal (or inner-selection) fold keeps whole: its workload, or its sibling family
    group (intervals then carry the error of an unseen family)."""
    if grouping == "family":
        return np.asarray([sibling_group(str(f)) for f in df["family"]])
    if grouping == "workload":
        return df["workload_id"].astype(str).to_numpy()
    raise GpupredError(f"unknown interval grouping {grouping!r}; known: {', '.join(INTERVAL_GROUPINGS)}")


def inner_splits(groups: np.ndarray, n_inner: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Grouped K-fold over (outer training) rows: no group on both sides."""
    k = min(n_inner, len(set(groups)))
    if k < 2:
        raise GpupredError(f"only {len(set(groups))} group(s) in the training rows: too few for an inner cross-validation")
    from sklearn.model_selection import GroupKFold

    return list(GroupKFold(k, shuffle=True, random_state=seed).split(groups, groups=groups))
