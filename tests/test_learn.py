"""Regressors, splits, importance and conformal intervals on FIXTURE frames (toy formula, never data)."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError
from gpupred.dataset import feature_columns
from gpupred.learn.regressors import REGRESSORS, make_regressor
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.evaluation import rmsle
from gpupred.learn.folds import sibling_group
from gpupred.learn.evaluation import check_grouped, cross_gpu_splits, lofo_splits, splits_for
from gpupred.learn.importance import impurity_importance, permutation


@pytest.fixture(scope="module")
def df():
    return fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), n_batch_sizes=2)


def test_rmsle() -> None:
    assert rmsle([1, 2, 3], [1, 2, 3]) == 0
    assert rmsle([0.0], [np.e - 1]) == pytest.approx(1.0)
    assert rmsle([1.0], [-5.0]) == pytest.approx(np.log(2))  # negative predictions floored at 0


def test_splits() -> None:
    fam = ["a", "a", "b", "c"]
    assert [(list(te), lab) for _, te, lab in lofo_splits(fam)] == [([0, 1], "a"), ([2], "b"), ([3], "c")]
    assert cross_gpu_splits(["x", "x"]) == []
    assert [lab for *_, lab in cross_gpu_splits(["x", "y"])] == ["x->y", "y->x"]
    # with workloads, the test GPU's workloads are removed from training
    splits = cross_gpu_splits(["x", "x", "y"], workloads=["w1", "w2", "w1"])
    assert [(list(tr), list(te), lab) for tr, te, lab in splits] == [([1], [2], "x->y")]  # y->x: no unseen training rows


def test_grouped_splits_keep_every_run_of_a_workload_on_one_side(df) -> None:
    """Each FIXTURE workload ran on two GPUs (and, here, two sources): no split may straddle it."""
    two = df.assign(source=np.where(df["gpu"] == "H100 SXM", "gpupred", "lucid"))
    for scheme in ("grouped_random", "lofo", "cross_gpu"):
        for train, test, label in splits_for(two, scheme, n_folds=5):
            assert not set(two["workload_id"].iloc[train]) & set(two["workload_id"].iloc[test]), (scheme, label)
    folds = splits_for(two, "grouped_random", n_folds=5)
    assert sorted(np.concatenate([te for _, te, _ in folds]).tolist()) == list(range(len(two)))  # a partition
    for _, test, _ in folds:  # stratified by source: every fold tests both sources
        assert set(two["source"].iloc[test]) == {"gpupred", "lucid"}
    # the papers' ungrouped random split puts a workload's other GPU run in training: check_grouped catches it
    perm = np.random.default_rng(1).permutation(len(two))
    with pytest.raises(GpupredError, match="both sides"):
        check_grouped([(perm[: len(two) // 2], perm[len(two) // 2:], "ungrouped")], two["workload_id"])


def test_lofo_holds_out_sibling_families_together() -> None:
    fams = ["lstm", "gru", "bert", "gpt", "seq2seq", "resnet", "mlp", "fcnet", "pointnet", "mobilenet", "efficientnet"]
    held = {label: {fams[i] for i in test} for _, test, label in lofo_splits(fams)}
    assert held["rnn"] == {"lstm", "gru"} and held["transformer"] == {"bert", "gpt", "seq2seq"}
    assert held["fully-connected"] == {"mlp", "fcnet"} and held["inverted-residual"] == {"mobilenet", "efficientnet"}
    assert held["pointnet"] == {"pointnet"} and held["resnet"] == {"resnet"}
    assert sibling_group("resnet") == "resnet"  # resnet18_cifar is an architecture of the resnet family
    assert {frozenset(v) for v in held.values()} != {frozenset([f]) for f in fams}  # not one split per family


def test_zoo_has_the_required_models() -> None:
    assert len(REGRESSORS) >= 8
    for name in ("ridge", "lasso", "svr", "knn", "decision_tree", "random_forest", "extra_trees",
                 "gradient_boosting", "xgboost", "lightgbm", "mlp"):
        assert name in REGRESSORS
    with pytest.raises(GpupredError, match="unknown regressor"):
        make_regressor("oracle")


@pytest.mark.slow
def test_every_regressor_fits_and_beats_the_mean(df) -> None:
    """Each regressor (tuned) on a grouped split of the FIXTURE memory label: no worse than predicting the training
    mean, and the typical one far better (the toy formula is smooth in the features)."""
    X, y = df[feature_columns(df)].to_numpy(float), df["memory_mib"].to_numpy(float)
    train, test, _ = splits_for(df, "grouped_random", n_folds=2)[0]
    mean = rmsle(y[test], np.full(len(test), np.expm1(np.log1p(y[train]).mean())))
    scores = {name: rmsle(y[test], np.expm1(make_regressor(name, tune=True).fit(X[train], np.log1p(y[train])).predict(X[test])))
              for name in REGRESSORS}
    assert all(v <= mean * 1.01 for v in scores.values()), (mean, scores)
    assert np.median(list(scores.values())) < 0.5 * mean, (mean, scores)


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


def test_mlp_budget_is_recorded_not_warned(df) -> None:
    """FIXTURE memory label: the MLP runs into its iteration budget here; that is recorded, and no
    ConvergenceWarning reaches the console (33 of them in each `make all` before)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    X, z = df[feature_columns(df)].to_numpy(float), np.log1p(df["memory_mib"].to_numpy(float))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = make_regressor("mlp", tune=False).fit(X, z)
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    mlp = model[-1]
    assert mlp.hit_max_iter_ == (mlp.n_iter_ >= mlp.max_iter) and mlp.n_iter_ > 0


@pytest.mark.parametrize("n", [1, 2, 3, 17, 400])
def test_average_ranks_are_scipys_to_the_bit_and_spearman_its_pearson_of_them(n: int) -> None:
    """FIXTURE values with and without ties (half-unit rounding, repeated zeros of both signs): the ranks equal
    ``scipy.stats.rankdata``'s exactly, and ``spearman`` equals scipy's ``spearmanr`` on the finite pairs."""
    from scipy.stats import rankdata, spearmanr

    from gpupred.learn.evaluation import average_ranks, spearman

    rng = np.random.default_rng(n)
    for x in (rng.normal(size=n), np.round(rng.normal(size=n) * 2) / 2, np.where(rng.random(n) < 0.3, -0.0, 0.0)):
        assert np.array_equal(average_ranks(x), rankdata(x))
    a, b = rng.normal(size=n), np.round(rng.normal(size=n))
    b[0] = np.nan  # one pair dropped: fewer than 3 finite pairs (n <= 3) give NaN
    if n > 3:
        assert spearman(a, b) == pytest.approx(spearmanr(a[1:], b[1:]).statistic, rel=1e-12)
    else:
        assert np.isnan(spearman(a, b))
