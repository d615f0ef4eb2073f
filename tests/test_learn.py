"""Regressors, splits, importance and conformal intervals on FIXTURE frames (toy formula, never data)."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError
from gpupred.learn import REGRESSORS, ConformalRegressor, evaluate, make_regressor, rmsle, summarize
from gpupred.learn.evaluate import choose_model, cross_gpu_splits, lofo_splits, random_splits
from gpupred.learn.importance import impurity_importance, permutation
from gpupred.learn.intervals import interval_coverage, overall_coverage


@pytest.fixture(scope="module")
def df():
    return fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), n_batch_sizes=2)


def test_rmsle() -> None:
    assert rmsle([1, 2, 3], [1, 2, 3]) == 0
    assert rmsle([0.0], [np.e - 1]) == pytest.approx(1.0)
    assert rmsle([1.0], [-5.0]) == pytest.approx(np.log(2))  # negative predictions floored at 0


def test_splits() -> None:
    s = random_splits(10, n_repeats=3, test_size=0.2)
    assert len(s) == 3 and all(len(te) == 2 and len(set(tr) | set(te)) == 10 for tr, te, _ in s)
    fam = ["a", "a", "b", "c"]
    assert [(list(te), lab) for _, te, lab in lofo_splits(fam)] == [([0, 1], "a"), ([2], "b"), ([3], "c")]
    assert cross_gpu_splits(["x", "x"]) == []
    assert [lab for *_, lab in cross_gpu_splits(["x", "y"])] == ["x->y", "y->x"]


def test_zoo_has_the_required_models() -> None:
    assert len(REGRESSORS) >= 8
    for name in ("ridge", "lasso", "svr", "knn", "decision_tree", "random_forest", "extra_trees",
                 "gradient_boosting", "xgboost", "lightgbm", "mlp"):
        assert name in REGRESSORS
    with pytest.raises(GpupredError, match="unknown regressor"):
        make_regressor("oracle")


def test_evaluate_all_schemes(df) -> None:
    res = evaluate(df, "gpu_util", models=["ridge", "knn"], n_repeats=2, tune=False, n_jobs=1)
    assert set(res["scheme"]) == {"random", "lofo", "cross_gpu"}
    assert len(res) == 2 * (2 + 5 + 2)
    assert (res["rmsle"] >= 0).all() and {"mae", "r2"} <= set(res.columns)
    table = summarize(res)
    assert "random_mean" in table.columns and "lofo_std" in table.columns
    assert choose_model(res) in {"ridge", "knn"}


@pytest.mark.slow
def test_every_regressor_fits(df) -> None:
    res = evaluate(df, "memory_mib", models=REGRESSORS, schemes=("random",), n_repeats=1, tune=True, n_jobs=2)
    assert set(res["model"]) == set(REGRESSORS)
    assert res["rmsle"].notna().all()


def test_importance(df) -> None:
    imp = impurity_importance(df, "memory_mib", models=("decision_tree", "xgboost"))
    assert list(imp.columns) == ["decision_tree", "xgboost", "mean"]
    assert imp["mean"].sum() == pytest.approx(1.0)
    perm = permutation(df, "memory_mib", model="xgboost", n_repeats=2)
    assert perm.index[0] in ("activation_bytes", "params", "param_bytes", "flops_fwd", "flops_train", "bytes_moved")


def test_conformal_interval_contains_point_and_covers(df) -> None:
    X = df[[c for c in df.columns if c in ("flops_train", "params", "activation_bytes", "is_bf16")]].to_numpy(float)
    y = df["memory_mib"].to_numpy(float)
    perm = np.random.default_rng(0).permutation(len(y))
    train, test = perm[:140], perm[140:]
    cr = ConformalRegressor(make_regressor("ridge", tune=False), alpha=0.1, n_folds=5).fit(X[train], y[train])
    point, lo, hi = cr.predict(X[test])
    assert (lo <= point).all() and (point <= hi).all()
    assert ((y[test] >= lo) & (y[test] <= hi)).mean() >= 0.7


def test_interval_coverage_table(df) -> None:
    cov = interval_coverage(df, "gpu_util", model="ridge", n_repeats=1, n_folds=3)
    assert set(cov["scheme"]) == {"random", "lofo"}
    pooled = overall_coverage(cov)
    assert 0 <= pooled["lofo"] <= 1 and 0 <= pooled["random"] <= 1
