"""Learning: regressors compared by RMSLE under grouped splits, nested model selection, feature importance,
conformal intervals, and the out-of-fold predictions downstream stages read."""

from gpupred.learn.crossgpu import cross_gpu_evaluation, transfer_splits, twin_ratios
from gpupred.learn.splits import (
    SIBLINGS, cross_gpu_splits, grouped_random_splits, lofo_splits, rmsle, sibling_group, splits_for,
)
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.nested import CVSettings, NestedResult, nested_cv
from gpupred.learn.regressors import EXPORTABLE, REGRESSORS, TARGETS, make_regressor

__all__ = [
    "EXPORTABLE", "REGRESSORS", "SIBLINGS", "TARGETS", "CVSettings", "ConformalRegressor", "NestedResult",
    "cross_gpu_evaluation", "cross_gpu_splits", "grouped_random_splits", "lofo_splits", "make_regressor", "nested_cv",
    "rmsle", "sibling_group", "splits_for", "transfer_splits", "twin_ratios",
]
