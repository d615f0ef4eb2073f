"""The memory estimator: the analytic footprint of :mod:`gpupred.memory.physics` times a bounded learned correction
(:mod:`gpupred.memory.correction`), with intervals calibrated on leave-one-family-out residuals of its training
rows: what the predictor ships for ``memory_mib``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.columnar import Rows, text
from gpupred.dataset import SOURCE_OWN
from gpupred.learn.forest import FOREST_MAX_ROWS, Forest
from gpupred.learn.params import Estimator
from gpupred.memory.correction import (
    CORRECTION_GRID, DEFAULT_SETTING, MAX_ROWS_PER_SOURCE, CorrectionSetting, correction_features,
    fit_correction, inner_lofo_residuals, lofo_halfwidths, per_source_sample, selection_score,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

BEST = "footprint*correction"  # the estimate's column (the evaluation's method name)


@dataclass(frozen=True)
class MemoryParts:
    """What :meth:`MemoryEstimator.explain` finds for each row: the estimate's columns (``figures``; ``estimate``:
    :meth:`MemoryEstimator.predict`'s frame of them), the footprint's terms live at the peak (``term_values``;
    ``terms``: :func:`gpupred.memory.physics.footprint_terms`' frame of them, MiB), whether the peak is the backward's
    (else the optimizer step's), the CUDA context (MiB), the allocator's ratio in effect (reserved over allocated
    varying terms), the steady and varying MiB of the
    terms (:func:`gpupred.memory.physics.steady_varying`), and the rows' index. The frames are built when first
    read: a prediction reads the arrays."""

    figures: dict[str, np.ndarray]
    term_values: dict[str, np.ndarray]
    at_backward: np.ndarray
    context: np.ndarray
    ratio: np.ndarray
    steady: np.ndarray
    varying: np.ndarray
    index: pd.Index

    @cached_property
    def estimate(self) -> pd.DataFrame:
        """:meth:`MemoryEstimator.predict`'s frame."""
        import pandas as pd

        return pd.DataFrame(self.figures, index=self.index)

    @cached_property
    def terms(self) -> pd.DataFrame:
        """The footprint's terms live at the peak, a frame (MiB)."""
        import pandas as pd

        return pd.DataFrame(self.term_values, index=self.index)

    def row(self, i: int) -> "MemoryParts":
        """The parts of row ``i`` alone (what one job's answer reads)."""
        pick = slice(i, i + 1)
        return MemoryParts({k: v[pick] for k, v in self.figures.items()},
                           {k: v[pick] for k, v in self.term_values.items()}, self.at_backward[pick],
                           self.context[pick], self.ratio[pick], self.steady[pick], self.varying[pick],
                           self.index[pick])


class MemoryEstimator(Estimator):
    """Analytic footprint x a bounded learned correction, with leave-one-family-out calibrated intervals
    (scikit-learn style: ``fit``, ``predict``, ``get_params``, ``describe``).

    ``fit`` runs a leave-one-family-out over its own (training) rows: every setting of ``settings`` (default
    ``CORRECTION_GRID``) predicts each held-out family from the other families; the setting with the lowest
    source-balanced median |log error| is fitted on all the rows, and its held-out residuals calibrate the
    intervals. Nothing outside the rows given to ``fit`` is seen, so an outer split stays honest.

    The correction is learned on NVML's device memory and applies to that figure alone. torch's allocated and reserved
    peaks stay the physics' own: the terms are checked tensor by tensor against torch's count (tests/test_memory_terms,
    benchmarks/bench_memory_oracle), and on this project's runs held out by family the correction moved them away from
    torch's measured peaks (16-bit runs' allocated peak: p90 relative error 22.7% with it spread over the figure, 7.9%
    without; notebook 05's ``memory_torch_allocated_lofo_16bit_own_*``).
    """

    APART = ("correction_",)  # the LightGBM correction, pickled apart: its numpy forest answers a few rows
    FOREST = "correction_forest_"

    def __init__(self, seed: int = 0, calibrate: bool = True,
                 settings: tuple[CorrectionSetting, ...] | None = None) -> None:
        self.seed = seed
        self.calibrate = calibrate
        self.settings = settings

    def fit(self, df: pd.DataFrame, target: str = "memory_mib") -> "MemoryEstimator":
        """Choose the correction's setting and calibrate on the rows' inner leave-one-family-out, then fit it all."""
        data = per_source_sample(df[df[target].notna()], MAX_ROWS_PER_SOURCE, self.seed)
        grid = tuple(self.settings or CORRECTION_GRID)
        sources = data["source"].astype(str).to_numpy() if "source" in data.columns else np.full(len(data), SOURCE_OWN)
        self.selection_: dict[CorrectionSetting, float] = {}
        self.setting_, self.halfwidth_ = (grid[0] if len(grid) == 1 else DEFAULT_SETTING), {}
        if self.calibrate or len(grid) > 1:
            residuals, seen = inner_lofo_residuals(data, grid, target, self.seed)
            if np.isfinite(residuals[:, seen]).any():  # rows on default constants do not judge the correction
                self.selection_ = {s: selection_score(r[seen], sources[seen]) for s, r in zip(grid, residuals)}
                self.setting_ = min(grid, key=lambda s: (self.selection_[s], grid.index(s)))
            if self.calibrate:
                self.halfwidth_ = lofo_halfwidths(residuals[grid.index(self.setting_)], sources)
        self.footprint_, self.correction_ = fit_correction(data, self.setting_, target, self.seed)
        self.forest_pending()
        self.fitted_keys_ = set(self.footprint_.context_mib)
        return self

    def build_forest(self) -> Forest | None:
        """The numpy forest of the LightGBM correction."""
        return Forest.from_models([self.correction_])

    def describe(self) -> dict[str, Any]:
        """What a card says of the memory model: fitted constants, the chosen correction setting, interval widths."""
        return {"footprint_constants": self.footprint_.constants(), "correction_clip_log": self.setting_.clip,
                "correction_setting": self.setting_.describe(),
                "correction_selection": (f"lowest source-balanced median |log error| of {len(self.selection_)} "
                                         "settings under a leave-one-family-out of the training rows" if self.selection_ else
                                         "default (fewer than two family groups to choose on)"),
                "interval_halfwidth_log": {k: round(v, 4) for k, v in self.halfwidth_.items()}}

    def correction(self, df: Rows, terms: pd.DataFrame | dict[str, np.ndarray] | None = None) -> np.ndarray:
        """The learned log-factor, clipped to the chosen setting's bound (``terms``: the footprint terms of ``df``
        where the caller has them)."""
        clip = self.setting_.clip
        X = correction_features(df, terms)
        forest = self.few_rows_forest() if len(X) <= FOREST_MAX_ROWS else None
        if forest is not None:  # the same numbers, in numpy
            return np.clip(forest.predict(X)[0], -clip, clip)
        booster = getattr(self.correction_, "booster_", None)  # LightGBM's booster: its numbers, without the
        raw = booster.predict(X, num_threads=1) if booster is not None else self.correction_.predict(X)  # wrapper's checks
        return np.clip(raw, -clip, clip)

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """footprint, footprint*correction (NVML's device memory) and its interval (``low``, ``high``), and torch's
        own figures as the physics counts them, without the learned correction: the reserved peak (the steady terms
        + the varying ones + the allocator's reserve on them) and the allocated peak (the steady + the varying terms:
        ``torch.cuda.max_memory_allocated()``), both less paged optimizer states, which bitsandbytes keeps in CUDA
        unified memory outside torch's allocator; in MiB, one row per input row."""
        return self.explain(df).estimate

    def explain(self, df: Rows) -> MemoryParts:
        """:meth:`predict`'s frame and the parts it was made of (:class:`MemoryParts`), in one pass: what an answer's
        memory breakdown reads (:mod:`gpupred.predictor.answer`); ``df`` a DataFrame, or
        :class:`gpupred.columnar.Columns` (what the predictor's core passes)."""
        from gpupred.finetune import PAGED
        from gpupred.memory.physics import peak_term_arrays, source_array, source_keys

        src = source_array(df)
        (terms, at_backward), keys = peak_term_arrays(df, src), source_keys(df)
        ctx, steady, varying, reserve = self.footprint_.parts(keys, terms)
        base = ctx + steady + varying + reserve  # the footprint's predict, from the parts it adds up
        best = np.maximum(base, 1.0) * np.exp(self.correction(df, terms))
        widest = max(self.halfwidth_.values(), default=np.log(2.0))  # nothing calibrated: x2 either way
        seen = np.isin(keys, list(self.fitted_keys_))
        known = np.isin(src, [k.split("|")[1] for k in self.fitted_keys_])
        # extrapolated: a GPU not measured by the source gets the widest calibrated half-width doubled; a
        # source never measured, whose context and allocator are defaults, that plus log 2 (a factor of 2)
        q = np.array([self.halfwidth_.get(s, widest) if ok else 2.0 * widest if kn else widest + np.log(2.0)
                      for s, ok, kn in zip(src, seen, known)])
        ratio = 1.0 + np.divide(reserve, varying, out=np.zeros_like(reserve), where=varying > 0)  # in effect
        paged = terms["optimizer"] * np.isin(text(df, "optimizer"), list(PAGED))
        # torch's own figures are the physics' (see the class notes): paged optimizer states live in CUDA unified
        # memory, outside torch's allocator
        reserved = steady + varying + reserve - paged
        allocated = steady + varying - paged
        estimate = {"footprint": base, BEST: best, "low": best * np.exp(-q), "high": best * np.exp(q),
                    "reserved": reserved, "allocated": allocated}
        return MemoryParts(estimate, terms, np.asarray(at_backward, bool), np.asarray(ctx, float),
                           np.asarray(ratio, float), steady, varying, df.index)
