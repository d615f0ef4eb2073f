"""Nested cross-validation, source-calibrated (Mondrian) CV+ intervals and the out-of-fold file, on FIXTURE frames.

The FIXTURE dataset's labels come from a toy formula (tests/fixtures_learning.py); never data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge

from fixtures_learning import fixture_dataset
from gpupred.dataset import feature_columns
from gpupred.errors import GpupredError
from gpupred.learn.regressors import EXPORTABLE, REGRESSORS
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.nested import nested_cv
from gpupred.learn.evaluation import splits_for
from gpupred.learn.nested import CVSettings, choose_for_export, oof_frame
from gpupred.learn.oof import read_oof_predictions, write_oof_predictions

ROW_ID = "row_index_FIXTURE"  # a feature column holding each row's index, so a spy model can see which rows it got


class SpyRegressor(BaseEstimator, RegressorMixin):
    """A ridge that records which rows (by the ROW_ID column, the last feature) every fit saw."""

    fits: list[set[int]] = []

    def fit(self, X: np.ndarray, y: np.ndarray) -> "SpyRegressor":
        SpyRegressor.fits.append(set(X[:, -1].astype(int).tolist()))
        self.model_ = Ridge().fit(X[:, :-1], y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model_.predict(X[:, :-1])


@pytest.fixture(scope="module")
def df():
    data = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=2,
                           sources={"NVIDIA GeForce RTX 3090": "lucid"})
    return data


def test_outer_test_rows_never_reach_model_selection_or_fitting(df) -> None:
    """Every fit (inner selection, CV+ calibration, comparison) sees only one outer fold's training rows."""
    data = df.assign(**{ROW_ID: np.arange(len(df), dtype=float)})
    cols = [c for c in feature_columns(data) if c != ROW_ID] + [ROW_ID]
    SpyRegressor.fits = []
    splits = splits_for(data, "grouped_random", n_folds=4)
    res = nested_cv(data, "gpu_util", {"spy": SpyRegressor(), "spy2": SpyRegressor()},
                    cv=CVSettings(n_inner=3, n_cal=3, n_jobs=1), splits=splits, features=cols, compare=True)
    trains = [set(train.tolist()) for train, _, _ in splits]
    tests = [set(test.tolist()) for _, test, _ in splits]
    # per fold: 2 candidates x 3 inner, CV+ 3 + 1, and the comparison's other candidate (the winner's fit on these
    # rows is the CV+ full model)
    assert len(SpyRegressor.fits) == 4 * (2 * 3 + 3 + 1 + 1)
    for seen in SpyRegressor.fits:  # a selection over all rows would fit on rows of every fold's test side
        assert any(seen <= tr for tr in trains)
        assert all(not seen <= te for te in tests)
    # fits are in fold order: each fold's fits avoid that fold's test rows
    per_fold = len(SpyRegressor.fits) // 4
    for k, test in enumerate(tests):
        assert all(not (seen & test) for seen in SpyRegressor.fits[k * per_fold:(k + 1) * per_fold])
    assert set(res.predictions["fold"]) == {0, 1, 2, 3} and len(res.predictions) == len(data)


def test_nested_result_figures_and_choice(df) -> None:
    res = nested_cv(df, "gpu_util", ["ridge", "knn"], "grouped_random", CVSettings(n_outer=3, n_cal=3, n_jobs=1))
    assert set(res.folds["model"]) <= {"ridge", "knn"} and len(res.folds) == 3
    assert {"inner_rmsle_of_choice", "outer_rmsle", "coverage"} <= set(res.folds.columns)
    assert set(res.comparison["model"]) == {"ridge", "knn"} and len(res.comparison) == 6
    assert 0 < res.rmsle() < 1 and set(res.rmsle("source")) == {"gpupred", "lucid"}
    assert res.coverage() >= 0.8 and set(res.coverage("source")) == {"gpupred", "lucid"}  # 90 % intervals
    p = res.predictions
    assert ((p["low"] <= p["pred"]) & (p["pred"] <= p["high"])).all()
    lofo = nested_cv(df, "gpu_util", ["ridge"], "lofo", CVSettings(n_cal=3, n_jobs=1), compare=False)
    assert set(lofo.folds["fold_label"]) == {"resnet", "plain-convnet", "fully-connected", "rnn", "transformer"}
    assert lofo.comparison.empty
    assert choose_for_export(df, "gpu_util", ["ridge", "knn"], CVSettings(n_jobs=1)) in {"ridge", "knn"}


def test_outer_folds_in_worker_processes_give_the_same_figures(df) -> None:
    """Outer folds side by side (each fit inside one after another) give the same predictions, choices and
    comparison, to the bit, as one process."""
    import pandas as pd

    results = [nested_cv(df, "gpu_util", ["ridge", "knn"], "grouped_random", CVSettings(n_outer=3, n_cal=3, n_jobs=n))
               for n in (1, 2)]
    for part in ("predictions", "folds", "comparison"):
        pd.testing.assert_frame_equal(getattr(results[0], part), getattr(results[1], part), check_exact=True)


def test_the_winners_comparison_figure_is_its_own_refit(df) -> None:
    """The comparison scores the winner with the CV+ regressor's full model (the same fit on the same rows): its
    figures equal, to the bit, those of comparing fresh estimators that are fitted again."""
    import pandas as pd

    from gpupred.learn.regressors import make_regressor

    cv = CVSettings(n_outer=3, n_cal=3, n_jobs=1)
    names = ["ridge", "decision_tree"]
    reused = nested_cv(df, "gpu_util", names, "grouped_random", cv, compare=True)
    refitted = nested_cv(df, "gpu_util", names, "grouped_random", cv,
                         compare={name: make_regressor(name, tune=False, seed=cv.seed) for name in names})
    pd.testing.assert_frame_equal(reused.comparison, refitted.comparison, check_exact=True)
    pd.testing.assert_frame_equal(reused.folds, refitted.folds, check_exact=True)


def test_compared_regressors_are_scored_but_never_chosen(df) -> None:
    """A regressor in the comparison table only (e.g. a forest too large to export) is never the procedure's choice."""
    res = nested_cv(df, "gpu_util", ["ridge"], "grouped_random", CVSettings(n_outer=3, n_cal=3, n_jobs=1),
                    compare=["ridge", "decision_tree"])
    assert set(res.folds["model"]) == {"ridge"}
    assert set(res.comparison["model"]) == {"ridge", "decision_tree"} and len(res.comparison) == 6


def _keeps_training_rows(model, X: np.ndarray) -> bool:  # type: ignore[no-untyped-def]
    """Whether the pickled fitted model holds a training row, as the model sees it (after its transforms)."""
    import pickle

    blob = pickle.dumps(model)
    seen = model[:-1].transform(X) if len(model.steps) > 1 else X
    return any(np.ascontiguousarray(seen[i], dtype=np.float64).tobytes() in blob for i in range(0, len(X), 7))


@pytest.mark.parametrize("name", REGRESSORS)
def test_exportable_regressors_keep_no_training_row(name: str) -> None:
    """A predictor is built only from regressors that keep no training row (size and speed independent of the
    rows; nothing of a source that may not be redistributed); svr and knn keep rows, the full-depth forests grow
    with them: compared, never exported."""
    from gpupred.learn.regressors import make_regressor

    frame = fixture_dataset(n_batch_sizes=3)
    X, y = frame[feature_columns(frame)].to_numpy(float), np.log1p(frame["gpu_util"].to_numpy(float))
    model = make_regressor(name, tune=False).fit(X, y)
    if name in ("random_forest", "extra_trees"):
        assert name not in EXPORTABLE
    else:
        assert (name in EXPORTABLE) == (not _keeps_training_rows(model, X))


def test_out_of_fold_file_for_every_row(df, tmp_path: Path) -> None:
    splits = splits_for(df, "grouped_random", n_folds=3)
    data = df.copy()
    data.loc[data.index[::3], "sm_active"] = np.nan  # a label some rows lack: still predicted for every row
    results = {t: nested_cv(data, t, ["ridge"], cv=CVSettings(n_cal=3, n_jobs=1), splits=splits, compare=False)
               for t in ("gpu_util", "memory_mib", "sm_active")}
    oof = oof_frame(results, data)
    assert list(oof.columns[:5]) == ["run_id", "workload_id", "gpu", "source", "fold"]
    assert len(oof) == len(data) and oof["sm_active"].notna().all() and {"memory_mib_low", "sm_active_high"} <= set(oof.columns)
    assert oof.groupby("workload_id")["fold"].nunique().max() == 1  # a workload's runs share a fold
    path = write_oof_predictions(oof, data, tmp_path / "oof.parquet")
    assert read_oof_predictions(data, path)["gpu_util"].tolist() == oof["gpu_util"].tolist()
    other = nested_cv(data, "memory_mib", ["ridge"], cv=CVSettings(n_cal=3, n_jobs=1),
                      splits=splits_for(df, "grouped_random", n_folds=3, seed=5), compare=False)
    with pytest.raises(GpupredError, match="folds differ"):
        oof_frame({"gpu_util": results["gpu_util"], "memory_mib": other}, data)


def test_mondrian_intervals_follow_each_source() -> None:
    """FIXTURE: one stratum has 10x the noise of the other; per-stratum calibration widens only its intervals
    and covers both near nominal, where pooled calibration under-covers the noisy one."""
    rng = np.random.default_rng(0)
    n = 1200
    X = rng.uniform(0, 1, (n, 3))
    strata = np.where(np.arange(n) % 4 == 0, "noisy", "quiet")
    noise = np.where(strata == "noisy", 0.5, 0.05)
    y = np.expm1(2 + X[:, 0] + rng.normal(0, 1, n) * noise)
    train, test = np.arange(n) < 800, np.arange(n) >= 800
    cr = ConformalRegressor(Ridge(), alpha=0.1, n_folds=5).fit(X[train], y[train], strata=strata[train])
    _, lo_m, hi_m = cr.predict(X[test], strata[test])
    _, lo_p, hi_p = cr.predict(X[test])
    yt, st = y[test], strata[test]
    cover = lambda lo, hi, s: float(((yt >= lo) & (yt <= hi))[st == s].mean())  # noqa: E731
    assert 0.8 <= cover(lo_m, hi_m, "noisy") <= 0.97 and 0.8 <= cover(lo_m, hi_m, "quiet") <= 0.97
    assert cover(lo_p, hi_p, "noisy") < 0.75  # pooled residuals are mostly quiet ones
    width = np.log1p(hi_m) - np.log1p(lo_m)
    assert width[st == "noisy"].mean() > 5 * width[st == "quiet"].mean()
    _, lo_u, _ = cr.predict(X[test][:3], np.array(["unseen"] * 3))  # a stratum never trained on: pooled residuals
    np.testing.assert_allclose(lo_u, lo_p[:3])


def test_one_thread_limits_each_pool_and_restores_it_without_reading_the_libraries_again() -> None:
    """The fits' one-thread context: every BLAS/OpenMP pool runs one thread inside and its own count after, and a
    second use inspects no library again (threadpoolctl's cached controller, kept until the next import)."""
    import threadpoolctl

    from gpupred.learn.parallel import one_thread

    def counts() -> dict[str, int]:
        return {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()}

    with threadpoolctl.threadpool_limits(limits=2):  # the test workers run one thread: give the pools two
        before = counts()
        if max(before.values(), default=1) < 2:
            pytest.skip("no thread pool here runs two threads (one core)")
        with one_thread():
            assert set(counts().values()) == {1}
        assert counts() == before
        controller = threadpoolctl.get_cached_controller()
        with one_thread("openmp"):
            assert all(i["num_threads"] == 1 for i in threadpoolctl.threadpool_info() if i["user_api"] == "openmp")
        assert threadpoolctl.get_cached_controller() is controller
        assert counts() == before


def test_cores_are_what_the_environment_gives_else_the_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cores()`` reads GPUPRED_CORES (what ``gpupred pipeline`` gives a notebook), refuses a value that is not a
    whole number, and falls back to the CPUs this process may run on; ``jobs(0)`` means ``cores()``."""
    from gpupred.learn.parallel import CORES_ENV, cores, jobs
    from gpupred.loader.hostinfo import affinity_cores

    monkeypatch.setenv(CORES_ENV, "3")
    assert (cores(), jobs(0), jobs(5)) == (3, 3, 5)
    monkeypatch.setenv(CORES_ENV, "0")
    assert cores() == 1
    monkeypatch.setenv(CORES_ENV, "two")
    with pytest.raises(ValueError, match="GPUPRED_CORES='two'"):
        cores()
    monkeypatch.delenv(CORES_ENV)
    assert cores() == affinity_cores() >= 1
