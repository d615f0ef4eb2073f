"""Learning: regressors compared by RMSLE, feature importance, conformal intervals."""

from gpupred.learn.evaluate import cross_gpu_splits, evaluate, lofo_splits, random_splits, rmsle, summarize
from gpupred.learn.intervals import ConformalRegressor, interval_coverage
from gpupred.learn.regressors import REGRESSORS, TARGETS, make_regressor

__all__ = [
    "REGRESSORS", "TARGETS", "ConformalRegressor", "cross_gpu_splits", "evaluate", "interval_coverage", "lofo_splits",
    "make_regressor", "random_splits", "rmsle", "summarize",
]
