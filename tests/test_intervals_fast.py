"""The fast CV+ quantile (gpupred.learn.intervals.cvplus_kth) gives exactly CV+'s numbers, and fast_predict exactly
``predict``'s, on FIXTURE data (random numbers and the toy-formula frames of fixtures_learning).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
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
        for width in (2, 64):  # the bracketing path, not the direct one (few values here)
            np.testing.assert_array_equal(cvplus_kth(centers, offsets, kth, max_width=width, direct_max_values=0),
                                          brute(centers, offsets, kth))


@pytest.mark.parametrize("seed", range(3))
def test_cvplus_kth_narrows_when_fold_models_disagree(seed: int) -> None:
    """Thousands of residuals and fold predictions that differ by far more than the residuals' spread: the bracket
    around each answer is halved until it is narrow, and the numbers stay those of sorting everything."""
    rng = np.random.default_rng(seed)
    offsets = [np.sort(np.abs(rng.standard_normal(600)) * 0.2 * (-1) ** seed) for _ in range(5)]
    offsets[seed] = np.sort(np.concatenate([offsets[seed], np.zeros(100)]))  # a run of ties
    centers = rng.standard_normal(300)[None, :] + rng.standard_normal((5, 300)) * 3.0
    n = sum(len(o) for o in offsets)
    for kth in (int(0.1 * (n + 1)) - 1, int(np.ceil(0.9 * (n + 1))) - 1):
        np.testing.assert_array_equal(cvplus_kth(centers, offsets, kth, direct_max_values=0), brute(centers, offsets, kth))


@pytest.mark.parametrize("model", ["xgboost", "lightgbm", "ridge", "gradient_boosting", "mlp"])
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


def _forest_frame(missing: bool) -> tuple[np.ndarray, np.ndarray]:
    from gpupred.dataset import feature_columns

    df = fixture_dataset(n_batch_sizes=3)
    X, y = df[feature_columns(df)].to_numpy(float, copy=True), np.log1p(df["memory_mib"].to_numpy(float))
    if missing:  # missing values take each split's default direction
        X[np.random.default_rng(1).random(X.shape) < 0.05] = np.nan
    return X, y


@pytest.mark.parametrize("model", ["xgboost", "lightgbm", "decision_tree", "gradient_boosting"])
def test_numpy_forest_equals_the_library(model: str) -> None:
    from gpupred.learn.forest import Forest
    from gpupred.learn.regressors import make_regressor

    X, y = _forest_frame(missing=model != "gradient_boosting")  # scikit-learn's gradient boosting refuses NaN
    rng = np.random.default_rng(1)
    models = [make_regressor(model, tune=False, seed=s).fit(X[s::2], y[s::2]) for s in (0, 1)]
    forest = Forest.from_models(models)
    assert forest is not None
    probe = np.vstack([X, X * rng.uniform(0.5, 2.0, X.shape)])
    np.testing.assert_array_equal(forest.predict(probe), np.stack([m.predict(probe) for m in models]))
    np.testing.assert_array_equal(forest.predict(probe[:1]), np.stack([m.predict(probe[:1]) for m in models]))
    assert Forest.from_models([make_regressor("ridge", tune=False).fit(np.nan_to_num(X), y)]) is None  # not a forest


def test_the_forest_is_built_where_it_answers_and_before_pickling() -> None:
    """A fitted conformal regressor converts its trees only when a few rows ask it again (or it is pickled): many
    rows never build the forest, nor does a fresh fit's first answer of a few rows (an evaluation's fit answers
    once); the second builds it; a pickle of a fresh fit carries it, its library models apart."""
    import pickle

    from gpupred.learn.forest import FOREST_MAX_ROWS
    from gpupred.learn.intervals import ConformalRegressor
    from gpupred.learn.regressors import make_regressor

    X, y = _forest_frame(missing=True)
    cr = ConformalRegressor(make_regressor("lightgbm", tune=False), n_folds=3).fit(X, np.expm1(y))
    assert "forest_" not in vars(cr)
    many = cr.model_predictions(np.vstack([X] * (FOREST_MAX_ROWS // len(X) + 2)))
    assert "forest_" not in vars(cr)  # the libraries answered
    first = cr.model_predictions(X[:3])
    assert "forest_" not in vars(cr)  # the libraries answered a fresh fit's first few rows
    few = cr.model_predictions(X[:3])
    assert vars(cr)["forest_"] is not None and not vars(cr).get("forest_pending_")
    assert "few_row_answers_" not in vars(cr)
    np.testing.assert_array_equal(few, many[:, :3])  # the same numbers either way
    np.testing.assert_array_equal(first, few)
    fresh = ConformalRegressor(make_regressor("lightgbm", tune=False), n_folds=3).fit(X, np.expm1(y))
    state = fresh.__getstate__()
    assert state["forest_"] is not None and "apart_payload_" in state and "full_model_" not in state
    again = pickle.loads(pickle.dumps(fresh))
    np.testing.assert_array_equal(again.model_predictions(X[:3]), few)
    assert "apart_payload_" in vars(again)  # the forest answered: the library models are still packed


def test_numpy_forest_mixes_libraries() -> None:
    """XGBoost, LightGBM and scikit-learn models in one forest (a predictor's targets combined): each model keeps
    its library's arithmetic, and NaN is refused when a model refuses it."""
    from gpupred.learn.forest import Forest
    from gpupred.learn.regressors import make_regressor

    X, y = _forest_frame(missing=False)
    names = ["xgboost", "gradient_boosting", "lightgbm", "decision_tree"]
    models = [make_regressor(name, tune=False, seed=s).fit(X[s::2], y[s::2]) for s, name in enumerate(names)]
    combined = Forest.combine([Forest.from_models([m]) for m in models])
    assert combined is not None
    probe = np.vstack([X, X * np.random.default_rng(2).uniform(0.5, 2.0, X.shape)])
    want = np.stack([m.predict(probe) for m in models])
    np.testing.assert_array_equal(combined.predict(probe), want)
    np.testing.assert_array_equal(combined.predict(probe[3:4]), want[:, 3:4])
    probe[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        models[1].predict(probe[:1])
    with pytest.raises(ValueError, match="NaN"):
        combined.predict(probe[:1])


def test_predictor_paths_agree_exactly() -> None:
    """A few rows (numpy forest), many rows (libraries), repeated rows (predicted once): the same numbers."""
    import gpupred.learn.intervals as intervals
    from gpupred.predictor.training import train_predictor
    from gpupred.predictor.predictor import distinct_rows

    p = train_predictor(fixture_dataset(gpus=("NVIDIA H100 80GB HBM3",), n_batch_sizes=2), models="xgboost", tune=False)
    rows = fixture_dataset(n_batch_sizes=2).head(6)
    fast = p.predict(rows)
    limit = intervals.FOREST_MAX_ROWS
    try:
        intervals.FOREST_MAX_ROWS = 0
        slow = p.predict(rows)
    finally:
        intervals.FOREST_MAX_ROWS = limit
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    repeated = pd.concat([rows] * 3, ignore_index=True)
    np.testing.assert_array_equal(p.predict(repeated).to_numpy(), np.vstack([fast.to_numpy()] * 3))
    one = p.predict({k: v for k, v in rows.iloc[2].items()})
    np.testing.assert_array_equal(one.to_numpy()[0], fast.to_numpy()[2])
    first, inverse = distinct_rows(np.array([[1.0, np.nan], [2.0, 0.0], [1.0, np.nan]]))
    assert len(first) == 2 and inverse.tolist() == [0, 1, 0] and first.tolist() == [0, 1]


def test_numpy_forest_evaluates_the_step_correction() -> None:
    """The step estimator's shrunk correction (a LightGBM pipeline pulled towards its median) goes through the
    forest with the same numbers, combined with a plain model; at weight 0 it is a constant without trees."""
    from gpupred.learn.forest import Forest
    from gpupred.learn.regressors import correction_model, make_regressor
    from gpupred.step.correction import ShrunkCorrection

    X, y = _forest_frame(missing=True)
    probe = np.vstack([X, X * np.random.default_rng(3).uniform(0.5, 2.0, X.shape)])
    shrunk = [ShrunkCorrection(correction_model(s), w).fit(X[s::2], y[s::2]) for s, w in ((0, 0.5), (1, 1.0))]
    plain = make_regressor("lightgbm", tune=False).fit(X, y)
    forest = Forest.from_models([*shrunk, plain])
    assert forest is not None
    want = np.stack([m.predict(probe) for m in [*shrunk, plain]])
    np.testing.assert_array_equal(forest.predict(probe), want)
    np.testing.assert_array_equal(forest.predict(probe[5:6]), want[:, 5:6])
    combined = Forest.combine([Forest.from_models([m]) for m in shrunk])
    np.testing.assert_array_equal(combined.predict(probe[:7]), want[:2, :7])
    assert not np.array_equal(want[0], shrunk[0].model_.predict(probe))  # the pull is applied, not skipped
    constant = [ShrunkCorrection(correction_model(s), 0.0).fit(X[s::2], y[s::2]) for s in (0, 1)]  # no trees
    for models in (constant, [constant[0], *shrunk]):
        forest = Forest.from_models(models)
        assert forest is not None
        np.testing.assert_array_equal(forest.predict(probe[:9]), np.stack([m.predict(probe[:9]) for m in models]))


def test_a_constant_correction_answers_each_stratum_once_with_the_same_numbers() -> None:
    """A CV+ regressor whose models are shrunk to their medians (no trees: :meth:`ConformalRegressor.constant`) keeps
    each stratum's answer: the same numbers as the regular path over every row, one row, or rows of several strata
    (among them one it never saw), before and after a pickle round trip; a refit forgets them."""
    import pickle

    from gpupred.learn.regressors import correction_model
    from gpupred.step.correction import ShrunkCorrection

    X, y = _forest_frame(missing=False)
    strata = np.where(np.arange(len(X)) % 3 == 0, "a", "b")
    cr = ConformalRegressor(ShrunkCorrection(correction_model(0), 0.0), alpha=0.1, n_folds=4).fit(
        X, y, groups=np.arange(len(X)) % 7, strata=strata)
    assert not cr.constant()  # a fresh fit: no forest yet, the libraries answer
    cr = pickle.loads(pickle.dumps(cr))  # the forest travels with the pickle
    assert cr.constant()
    probe = X * np.random.default_rng(5).uniform(0.5, 2.0, X.shape)
    asked = np.array(["a", "b", "never"] * (len(probe) // 3) + ["a"] * (len(probe) % 3))
    for rows, s in ((probe, asked), (probe[4:5], asked[4:5]), (probe[:10], None), (probe, None)):
        want = cr.predict_log(rows, s, cr.model_predictions(rows))  # predictions given: the regular path
        for _ in range(2):  # computed, then kept
            got = cr.predict_log(rows, s)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
    assert len(cr.__dict__["_constant_cache"]) == 4  # a, b, never, and no strata
    assert "_constant_cache" not in pickle.loads(pickle.dumps(cr)).__dict__
    cr.fit(X, 2.0 * y, groups=np.arange(len(X)) % 7, strata=strata)
    assert "_constant_cache" not in cr.__dict__
