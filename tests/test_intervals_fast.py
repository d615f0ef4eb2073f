"""The fast CV+ quantile (gpupred.learn.intervals.cvplus_kth) gives exactly CV+'s numbers, and fast_predict exactly
``predict``'s, on FIXTURE data (random numbers and the toy-formula frames of fixtures_learning).
"""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_learning import fixture_dataset
from gpupred.learn.intervals import ConformalRegressor, cvplus_kth, fast_predict


def reference_bounds(cr: ConformalRegressor, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CV+ by its definition: every training row's fold prediction +- its residual, then order statistics."""
    point = cr.full_model_.predict(X)
    fold_pred = np.stack([m.predict(X) for m in cr.fold_models_])
    per_row = fold_pred[cr.fold_of_]
    n = len(cr.residuals_)
    k_lo = int(np.floor(cr.alpha * (n + 1))) - 1
    k_hi = int(np.ceil((1 - cr.alpha) * (n + 1))) - 1
    lo = np.partition(per_row - cr.residuals_[:, None], k_lo, axis=0)[k_lo]
    hi = np.partition(per_row + cr.residuals_[:, None], k_hi, axis=0)[k_hi]
    return point, np.minimum(lo, point), np.maximum(hi, point)


def brute(centers: np.ndarray, offsets: list[np.ndarray], kth: int) -> np.ndarray:
    values = np.concatenate([centers[k][None, :] + offsets[k][:, None] for k in range(len(offsets))])
    return np.sort(values, axis=0)[kth]


@pytest.mark.parametrize("seed", range(6))
def test_cvplus_kth_equals_sorting_everything(seed: int) -> None:
    rng = np.random.default_rng(seed)
    folds, rows = 5, 400
    sizes = rng.integers(1, 60, folds)
    offsets = [np.sort(rng.standard_normal(s) * rng.uniform(0.01, 2)) for s in sizes]
    if seed % 2:  # ties: repeated residuals within and across folds
        offsets = [np.sort(np.round(o, 1)) for o in offsets]
    spread = [1e-6, 0.01, 0.3, 5.0][seed % 4]  # fold models that agree closely ... or not at all
    centers = rng.standard_normal(rows)[None, :] * 3 + rng.standard_normal((folds, rows)) * spread
    n = int(sizes.sum())
    for kth in {0, 1, n // 10, n // 2, n - n // 10, n - 2, n - 1}:
        np.testing.assert_array_equal(cvplus_kth(centers, offsets, kth), brute(centers, offsets, kth))
        np.testing.assert_array_equal(cvplus_kth(centers, offsets, kth, max_width=2), brute(centers, offsets, kth))


@pytest.mark.parametrize("model", ["xgboost", "lightgbm", "ridge"])
def test_conformal_predictions_unchanged(model: str) -> None:
    from gpupred.dataset import feature_columns
    from gpupred.learn.regressors import make_regressor

    df = fixture_dataset(n_batch_sizes=2)
    X, y = df[feature_columns(df)].to_numpy(float), df["gpu_util"].to_numpy(float)
    cr = ConformalRegressor(make_regressor(model, tune=model == "ridge"), alpha=0.1, n_folds=5).fit(X[:150], y[:150],
                                                                                                  groups=df["family"][:150].to_numpy())
    for got, want in zip(cr.predict_log(X), reference_bounds(cr, X)):
        np.testing.assert_array_equal(got, want)
    for m in [cr.full_model_, *cr.fold_models_]:
        np.testing.assert_array_equal(fast_predict(m, X), m.predict(X))
