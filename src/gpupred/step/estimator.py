"""The step estimator: utilization, SM activity and iteration time of a training job, as the step model's answer
times a learned correction, with its interval rule inside. The one model notebook 03 scores, notebooks 06 and 07
consume (out of fold), notebook 08 exports and the predictor's card describes.

``fit`` on dataset rows (labels, features, GPU, protocol, source):

1. the step model's constants per (GPU kind, measurement protocol) on the rows (:mod:`gpupred.step.rowphysics`);
   a row whose input pipeline lengthens its modelled step (:func:`gpupred.step.rowphysics.loader_bound`) is left out
   of every fit here, so that a loader's error is never learned as the device step's;
2. per target, the correction of ``measured / physics`` (:mod:`gpupred.step.correction`), calibrated on folds that
   keep whole families (``interval_groups="family"``, the default: an interval then carries the error of an unseen
   family) or workloads;
3. per target, the extrapolation widths: how wrong physics alone is on a (GPU kind, protocol) whose constants were
   borrowed, measured on the rows by holding each key (and each protocol) out in turn;
4. per target, the loader width (:func:`gpupred.step.rowphysics.loader_width`): how wrong the fitted step model is
   on the loader-bound rows left out of every fit, the least half-width of a loader-bound row's interval (a factor
   of 2 either way while fewer than ``MIN_LOADER_ROWS`` such rows were measured).

``predict`` on rows of the same columns (no labels needed): point and ``_low``/``_high`` per target, ``samples_per_s``
from the iteration time and ``batch_size``, and ``extrapolated`` (the row's GPU kind and protocol had no training
rows: its constants are borrowed, :meth:`gpupred.step.physics.constants.ConstantsTable.get`, and its intervals reach at
least the extrapolation width; a row fed by a host pipeline that names no host of its own, priced on a GPU server as
measured, reaches what physics gives on each end of :data:`gpupred.loader.speed.HOST_SCORE_BAND`:
:func:`gpupred.step.rowphysics.host_band_physics`). Kernels come with the rows
(:class:`gpupred.step.rowphysics.PhysicsData`) or from each
row's workload graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpupred.columnar import Rows, floats, text
from gpupred.errors import GpupredError
from gpupred.learn.conformal import widen
from gpupred.learn.folds import INTERVAL_GROUPINGS, interval_groups
from gpupred.learn.params import Estimator
from gpupred.loader.speed import GPU_HOST_SCORE, HOST_SCORE_BAND
from gpupred.step.correction import (
    CORRECTION_FEATURES, WEIGHTINGS, Correction, CorrectionSetting, correction_features,
)
from gpupred.step.rowphysics import (
    MIN_LOADER_ROWS, PHYSICS_TARGETS, ExtrapolationWidths, PhysicsData, default_columns, default_log_error, extrapolation_widths,
    fitted_physics, guessed_hosts, host_band_physics, loader_bound, loader_width, physics_data, row_physics,
    rows_unfitted, spread_over_hosts,
)
from gpupred.step.physics.constants import StepConstants
from gpupred.step.physics.timeline import STEP_COLUMNS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

STEP_TARGETS: tuple[str, ...] = ("gpu_util", "sm_active", "iter_time_mean_s")
MIN_LABELLED = 10  # a target with fewer labelled training rows is not fitted


class StepEstimator(Estimator):
    """Utilization, SM activity and iteration time: the step model x a learned correction (module docstring).

    ``correct=False`` is physics alone (no intervals): the comparison's "physics" method, the same constants.
    """

    def __init__(self, targets: tuple[str, ...] = STEP_TARGETS, weighting: str = "per_source",
                 interval_groups: str = "family", correct: bool = True, alpha: float = 0.1, n_cal: int = 5,
                 n_inner: int = 3, seed: int = 0) -> None:
        self.targets = targets
        self.weighting = weighting
        self.interval_groups = interval_groups
        self.correct = correct
        self.alpha = alpha
        self.n_cal = n_cal
        self.n_inner = n_inner
        self.seed = seed

    def _check(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise GpupredError(f"unknown weighting {self.weighting!r}; known: {', '.join(WEIGHTINGS)}")
        if self.interval_groups not in INTERVAL_GROUPINGS:
            raise GpupredError(f"unknown interval grouping {self.interval_groups!r}; known: "
                               f"{', '.join(INTERVAL_GROUPINGS)}")
        unknown = [t for t in self.targets if t not in PHYSICS_TARGETS]
        if unknown:
            raise GpupredError(f"no physics for target {unknown[0]!r}; known: {', '.join(PHYSICS_TARGETS)}")

    def fit(self, X: pd.DataFrame, physics: PhysicsData | None = None,
            asked: list[str] | None = None) -> "StepEstimator":
        """Fit the constants, and per target with at least ``MIN_LABELLED`` labels its correction and widths.

        ``asked``: the sources the estimator will be asked about (an evaluation's test rows'), so corrections no one
        reads are not fitted; default any source, a new one included."""
        self._check()
        pdata = physics.align(X) if physics is not None else physics_data(X)
        X = with_default_physics(X, pdata)
        bound = loader_bound(pdata)
        kept = np.flatnonzero(~bound)  # a loader-bound row is scored, never fitted on
        self.constants_, util, step = fitted_physics(pdata, kept, self.seed)
        self.features_ = [c for c in CORRECTION_FEATURES if c in X.columns]
        setting = CorrectionSetting(self.weighting, self.alpha, self.n_cal, self.n_inner, self.seed)
        self.corrections_: dict[str, Correction] = {}
        self.widths_: dict[str, ExtrapolationWidths] = {}
        self.loader_widths_: dict[str, tuple[float, int]] = {}
        for target in self.targets:
            y = X[target].to_numpy(float) if target in X.columns else np.full(len(X), np.nan)
            rows = kept[np.isfinite(y[kept])]
            if len(rows) < MIN_LABELLED:
                continue
            is_step = PHYSICS_TARGETS[target] == "step"
            self.loader_widths_[target] = loader_width(np.flatnonzero(bound), y, step if is_step else util, is_step,
                                                       self.alpha)
            self.widths_[target] = extrapolation_widths(pdata, self.constants_, rows, y, is_step, self.alpha,
                                                        default_log_error(X, target))
            if self.correct:
                self.corrections_[target] = self._fit_correction(X, y, rows, step if is_step else util, setting,
                                                                 (util, step), asked)
        self.fitted_targets_ = list(self.widths_)
        return self

    def _fit_correction(self, X: pd.DataFrame, y: np.ndarray, rows: np.ndarray, base: np.ndarray,
                        setting: CorrectionSetting, phys: tuple[np.ndarray, np.ndarray],
                        asked: list[str] | None = None) -> Correction:
        sub = X.iloc[rows]
        matrix = correction_features(sub, self.features_, phys[0][rows], phys[1][rows])
        ratio = 100.0 * y[rows] / np.maximum(base[rows], 1e-12)
        return Correction(setting).fit(matrix, ratio, interval_groups(sub, self.interval_groups),
                                       _sources(sub), sub["workload_id"].astype(str).to_numpy(), asked)

    def physics(self, X: pd.DataFrame, physics: PhysicsData | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(utilization %, step s) of the step model under the fitted constants, per row of ``X``."""
        pdata = physics.align(X) if physics is not None else physics_data(X)
        return row_physics(pdata, self.constants_)

    def predict(self, X: Rows, physics: PhysicsData | None = None, constants: StepConstants | None = None,
                widths: dict[str, float] | None = None) -> pd.DataFrame:
        """Per row of ``X``: each fitted target, its ``_low``/``_high`` bounds, ``samples_per_s`` and ``extrapolated``.

        ``constants`` (a calibrated GPU's: :mod:`gpupred.calibration.use`) replace the fitted or borrowed ones for
        every row, and ``widths`` (per target, measured for calibrated GPUs) replace the extrapolation widths of rows
        whose (GPU kind, protocol) has no fit.
        """
        import pandas as pd

        return pd.DataFrame(self.predict_columns(X, physics, constants, widths), index=X.index)

    def predict_columns(self, X: Rows, physics: PhysicsData | None = None, constants: StepConstants | None = None,
                        widths: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """:meth:`predict`'s columns, as arrays in its order, without the frame (``X``: a DataFrame, or
        :class:`gpupred.columnar.Columns`, what the predictor's core passes)."""
        pdata = physics.align(X) if physics is not None else physics_data(X)
        X = with_default_physics(X, pdata)

        def priced(p: PhysicsData) -> tuple[np.ndarray, np.ndarray]:
            return row_physics(p, self.constants_) if constants is None else _physics_under(p, constants)

        util, step = priced(pdata)
        unfitted, new_arch, new_protocol = rows_unfitted(pdata.keys, self.constants_)
        bound = loader_bound(pdata)
        guessed = np.flatnonzero(guessed_hosts(pdata))
        ends = host_band_physics(pdata, guessed, priced) if len(guessed) else []
        out: dict[str, np.ndarray] = {}  # columns gathered first: inserting them one by one costs ~0.3 ms each
        matrix, strata = correction_features(X, self.features_, util, step), _sources(X)  # every target's inputs
        for target in self.fitted_targets_:
            is_step = PHYSICS_TARGETS[target] == "step"
            base = step if is_step else util
            pt, lo, hi = self._corrected(matrix, strata, target, base)
            if target in self.corrections_:
                width = (self.widths_[target].for_rows(new_protocol, new_arch) if not widths or target not in widths
                         else widths[target])
                lo, hi = widen(pt, lo, hi, width, unfitted, log1p=not is_step)
                lo, hi = widen(pt, lo, hi, self.loader_widths_[target][0], bound, log1p=not is_step)
                if ends:  # a host named by no one: every host of the band
                    lo, hi = spread_over_hosts(lo, hi, base, guessed, [e[int(is_step)] for e in ends])
            if not is_step:
                pt, lo, hi = (np.clip(a, 0, 100) for a in (pt, lo, hi))
            out[target], out[f"{target}_low"], out[f"{target}_high"] = pt, lo, hi
        if "iter_time_mean_s" in out and "batch_size" in X.columns:
            batch = floats(X, "batch_size")
            out["samples_per_s"] = batch / out["iter_time_mean_s"]
            out["samples_per_s_low"] = batch / out["iter_time_mean_s_high"]
            with np.errstate(divide="ignore"):  # a step-time bound of 0 (a wide held-out interval): no upper bound
                out["samples_per_s_high"] = batch / out["iter_time_mean_s_low"]
        out["extrapolated"] = unfitted
        return out

    def _corrected(self, matrix: np.ndarray, strata: np.ndarray, target: str,
                   base: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Physics x the correction's point and bounds (physics alone, no bounds, without a correction); ``matrix``
        the corrections' inputs (:func:`correction_features`), ``strata`` each row's source."""
        if target not in self.corrections_:
            nan = np.full(len(base), np.nan)
            return base.copy(), nan, nan.copy()
        pt, lo, hi = self.corrections_[target].predict(matrix, strata)
        return pt * base / 100.0, lo * base / 100.0, hi * base / 100.0

    def describe(self) -> dict[str, Any]:
        """What the predictor's card says of the step estimator: settings, fitted constants, widths."""
        return {
            "estimator": "gpupred.step.estimator.StepEstimator: the step model (gpupred.step.physics) x a learned "
                         "correction",
            "params": self.get_params(),
            "targets": self.fitted_targets_,
            "constants": self.constants_.as_records(),
            "constants_borrowed": "an unfitted (GPU kind, protocol) borrows as "
                                  "gpupred.step.physics.constants.ConstantsTable.get says (host constants of its "
                                  "protocol, device constants of its architecture, the launch cost alone across "
                                  "protocols), else the published defaults",
            "correction_features": [*self.features_, "log fitted physics utilization", "log fitted physics step time"],
            "interval": f"CV+ conformal, {1 - self.alpha:.0%} nominal, calibrated per source on folds keeping whole "
                        f"{'sibling family groups' if self.interval_groups == 'family' else 'workloads'}",
            "loader_bound_width": {t: {"width": w, "rows": n, "scale": "log" if PHYSICS_TARGETS[t] == "step" else "log1p",
                                       "basis": "conformal quantile of the fitted step model's error on the loader-bound "
                                                "training rows (never fitted on)" if n >= MIN_LOADER_ROWS else
                                                "unmeasured (fewer than MIN_LOADER_ROWS loader-bound training rows): "
                                                "a factor of 2 either way"}
                                   for t, (w, n) in self.loader_widths_.items()},
            "host_band": {"scores": list(HOST_SCORE_BAND), "priced_at": GPU_HOST_SCORE,
                          "rule": "a job fed by a host pipeline that names no host (no host speed, score or profile) "
                                  "is priced on a GPU server as measured (priced_at, a single-core score), and its "
                                  "step-model bounds reach those moved by physics at each end of the band: the slowest "
                                  "GPU host measured and the reference host "
                                  "(gpupred.step.rowphysics.host_band_physics)"},
            "extrapolated_width": {t: {"key": w.key, "architecture": w.architecture, "protocol": w.protocol,
                                       "fallback": w.fallback,
                                       "scale": "log" if PHYSICS_TARGETS[t] == "step" else "log1p",
                                       "basis": "conformal quantile of physics' log error on each fitted (GPU kind, "
                                                "protocol) held out in turn, predicted as an unfitted one borrows "
                                                "(key: a new GPU of a fitted architecture; architecture: one whose "
                                                "architecture no fit of its protocol shares, device constants the "
                                                "published defaults; protocol: a protocol never fitted), each key "
                                                "weighing the same"}
                                   for t, w in self.widths_.items()},
        }


def _physics_under(pdata: PhysicsData, constants: StepConstants) -> tuple[np.ndarray, np.ndarray]:
    """(utilization %, step s) of every row of ``pdata`` under one set of constants."""
    from gpupred.step.physics.fit import predict_rows

    return predict_rows(pdata.rows, constants)


def with_default_physics(X: Rows, pdata: PhysicsData) -> Rows:
    """``X`` with the default-constant step model's ``STEP_COLUMNS`` (computed from ``pdata`` where it lacks them)."""
    if all(c in X.columns for c in STEP_COLUMNS):
        return X
    return X.assign(**{c: v.to_numpy() for c, v in default_columns(pdata).items()})


def _sources(df: Rows) -> np.ndarray:
    """Each row's source (the correction's strata): a new job's is this project's protocol."""
    from gpupred.dataset import SOURCE_OWN

    return text(df, "source") if "source" in df.columns else np.full(len(df), SOURCE_OWN)
