"""One estimator base (issue 74 item 2): every estimator class derives from gpupred.learn.params.Estimator, which
sklearn's clone treats as its own, and pickling keeps working (FIXTURE estimators, unfitted or fitted on toy rows)."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from gpupred.colocation.failures import FailureModel
from gpupred.learn.baselines import ConstantBaseline, RegressorBaseline
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.params import Estimator
from gpupred.memory.estimator import MemoryEstimator
from gpupred.slowdown.estimator import SlowdownEstimator, SlowdownModel, SummedUtilization
from gpupred.step.correction import ShrunkCorrection
from gpupred.step.estimator import StepEstimator

CLASSES = (StepEstimator, MemoryEstimator, ConformalRegressor, ShrunkCorrection, SlowdownEstimator, SlowdownModel,
           FailureModel, ConstantBaseline, RegressorBaseline)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_estimator_has_the_one_base(cls: type) -> None:
    assert issubclass(cls, Estimator)
    assert "sklearn" not in " ".join(k.__module__ for k in cls.__mro__)  # no scikit-learn base to import


def test_clone_get_params_describe_and_pickle() -> None:
    model = SlowdownModel(SummedUtilization())
    twin = clone(model)
    assert twin is not model and twin.get_params(deep=False).keys() == model.get_params(deep=False).keys()
    assert set(model.get_params(deep=False)) <= set(model.get_params(deep=True))
    fitted = ConstantBaseline("gpu_util").fit(pd.DataFrame({"gpu_util": np.linspace(10, 90, 9)}))  # FIXTURE rows
    again = pickle.loads(pickle.dumps(fitted))
    assert again.point_ == fitted.point_ and again.describe()["name"] == "ConstantBaseline"
    assert FailureModel(("a",)).describe() == {"name": "FailureModel", "params": {"refs": ("a",)}}
