"""The memory estimator's learned correction: a bounded log-factor over the analytic footprint, learned by small
boosted trees on scale-free inputs, its setting chosen and its intervals calibrated by a leave-one-family-out of the
training rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.columnar import Rows, frame_values, is_frame, numeric, row_sums

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

CORRECTION_CLIP = 0.2  # the default bound of |log correction| (x0.82 .. x1.22), kept when nothing can be selected
COVERAGE = 0.9  # nominal coverage of the intervals
MAX_ROWS_PER_SOURCE = 600  # the model is fitted on at most this many rows per source (seeded sample; keeps it fast)
CORRECTION_FEATURES: tuple[str, ...] = (  # scale-free: the correction multiplies, it never sets the size
    "is_bf16", "is_adam", "frac_flops_conv", "frac_flops_matmul", "frac_flops_recurrent", "frac_flops_norm",
    "frac_flops_act", "frac_flops_pool", "frac_flops_elementwise")


def correction_features(df: Rows, terms: pd.DataFrame | dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Scale-free inputs of the correction: flags, FLOP mix, and each footprint term's share of the total
    (``terms``: :func:`gpupred.memory.physics.footprint_terms` of ``df``, or its columns
    (:func:`gpupred.memory.physics.peak_term_arrays`), where the caller has them already)."""
    from gpupred.memory.physics import footprint_terms, sources

    terms = footprint_terms(df, sources(df)) if terms is None else terms
    if is_frame(terms):
        table, total = terms.to_numpy(float), terms.sum(axis=1).to_numpy(float)
    else:  # the frame's numbers, added in the same order
        table, total = frame_values(terms), row_sums(terms)
    shares = table / np.maximum(total[:, None], 1e-9)
    flags = np.column_stack([numeric(df, c) for c in CORRECTION_FEATURES])
    return np.column_stack([flags, shares])


def per_source_sample(df: pd.DataFrame, max_rows: int, seed: int = 0) -> pd.DataFrame:
    """At most ``max_rows`` rows of each source (seeded sample): a source's weight is its total anyway."""
    import pandas as pd

    if "source" not in df.columns:
        return df
    parts = [g if len(g) <= max_rows else g.sample(max_rows, random_state=seed)
             for _, g in df.groupby("source", sort=False)]
    return df[df.index.isin(pd.concat(parts).index)] if parts else df


def source_weights(df: pd.DataFrame) -> np.ndarray:
    """Per-row weights giving every source the same total (3,000 imported MLPs do not outvote 200 own runs)."""
    src = df["source"].astype(str).to_numpy(dtype=object) if "source" in df.columns else np.full(len(df), "")
    _, inverse, counts = np.unique(src, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse].astype(float)


@dataclass(frozen=True)
class CorrectionSetting:
    """One setting of the correction: its clip (|log factor| bound) and its boosted trees' size."""

    clip: float  # the learned log-factor stays within +-clip (x exp(-clip) .. x exp(clip) of the footprint)
    n_estimators: int
    min_samples_leaf: int

    def describe(self) -> str:
        """A short label, e.g. 'clip 0.2, 30 trees, leaves >= 30'."""
        return f"clip {self.clip:g}, {self.n_estimators} trees, leaves >= {self.min_samples_leaf}"


CORRECTION_GRID: tuple[CorrectionSetting, ...] = tuple(  # the settings the inner leave-one-family-out chooses from
    CorrectionSetting(c, n, 20) for c in (0.0, 0.1, 0.2, 0.3, 0.5) for n in (30, 60, 100))
DEFAULT_SETTING = CorrectionSetting(CORRECTION_CLIP, 30, 20)  # when the training rows hold one family group only
TARGET_CLIP = max(s.clip for s in CORRECTION_GRID)  # the trees learn log(measured / footprint) clipped to this


def correction_regressor(setting: CorrectionSetting, seed: int = 0) -> Any:
    """The correction's regressor: small boosted trees (LightGBM, one thread, deterministic; depth-3-sized leaves)."""
    from lightgbm import LGBMRegressor

    return LGBMRegressor(n_estimators=setting.n_estimators, learning_rate=0.08, num_leaves=8, max_depth=3,
                         min_child_samples=setting.min_samples_leaf, subsample=0.8, subsample_freq=1, n_jobs=1,
                         random_state=seed, verbose=-1, deterministic=True, force_col_wise=True)


def fit_correction(data: pd.DataFrame, setting: CorrectionSetting, target: str = "memory_mib",
                   seed: int = 0) -> tuple[Any, Any]:
    """(the footprint's fitted constants, the correction regressor) fitted on ``data`` with one setting."""
    from gpupred.memory.physics import Footprint

    fitted = Footprint().fit(data, target)
    ratio = np.log(data[target].to_numpy(float)) - np.log(np.maximum(fitted.predict(data), 1.0))
    model = correction_regressor(setting, seed).fit(correction_features(data),
                                                    np.clip(ratio, -TARGET_CLIP, TARGET_CLIP),
                                                    sample_weight=source_weights(data))
    return fitted, model


def inner_lofo_residuals(data: pd.DataFrame, grid: tuple[CorrectionSetting, ...], target: str = "memory_mib",
                         seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """log(measured / footprint*correction) of every row of ``data`` with its family group held out of ``data``,
    per setting of ``grid`` (shape settings x rows; NaN where a row could not be held out: one group only), and
    per row whether its (GPU kind, source) had rows in the fold's training side (else default constants).

    One footprint fit per held-out group serves every setting, and one tree fit per leaf size serves every clip
    and tree count (the clip bounds the output; fewer trees are the first iterations)."""
    from gpupred.memory.physics import Footprint, source_keys
    from gpupred.learn.evaluation import lofo_splits

    y = np.log(data[target].to_numpy(float))
    keys = source_keys(data)
    X = correction_features(data)
    weights = source_weights(data)
    out = np.full((len(grid), len(data)), np.nan)
    seen = np.zeros(len(data), dtype=bool)
    fits: dict[int, list[int]] = {}
    for i, s in enumerate(grid):
        fits.setdefault(s.min_samples_leaf, []).append(i)
    for train, test, _ in lofo_splits(data["family"]):
        if len(train) == 0:
            continue
        fitted = Footprint().fit(data.iloc[train], target)
        ratio = y - np.log(np.maximum(fitted.predict(data), 1.0))
        for leaf, members in fits.items():
            most = max(grid[i].n_estimators for i in members)
            model = correction_regressor(CorrectionSetting(TARGET_CLIP, most, leaf), seed).fit(
                X[train], np.clip(ratio[train], -TARGET_CLIP, TARGET_CLIP), sample_weight=weights[train])
            for i in members:
                learned = model.predict(X[test], num_iteration=grid[i].n_estimators)
                out[i, test] = ratio[test] - np.clip(learned, -grid[i].clip, grid[i].clip)
        seen[test] = np.isin(keys[test], list(fitted.context_mib))
    return out, seen


def selection_score(residuals: np.ndarray, sources: np.ndarray) -> float:
    """The mean over sources of the median |log error| of the held-out rows: every source counts the same."""
    import pandas as pd

    ok = np.isfinite(residuals)
    meds = [np.median(np.abs(residuals[ok & (sources == s)])) for s in pd.unique(sources[ok])]
    return float(np.mean(meds)) if meds else float("inf")


def lofo_halfwidths(residuals: np.ndarray, sources: np.ndarray) -> dict[str, float]:
    """Per source, the conformal COVERAGE quantile of held-out |log error| (sources with fewer than 10 left out)."""
    import pandas as pd

    from gpupred.learn.conformal import conformal_quantile

    out = {}
    for s in pd.unique(sources):
        r = residuals[(sources == s) & np.isfinite(residuals)]
        if len(r) >= 10:
            out[str(s)] = conformal_quantile(r, 1.0 - COVERAGE)
    return out
