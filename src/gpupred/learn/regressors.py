"""The regressor zoo: each a scikit-learn pipeline on signed-log features with a small tuning grid.

Sizes are kept moderate (100 trees per forest, an early-stopped MLP): nested cross-validation fits every
candidate about 4 times per outer fold on a few thousand rows, on two cores.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from gpupred.learn.transform import signed_log1p

# targets learned on log1p scale; the predictor's output column names are the keys
TARGETS: dict[str, str] = {"gpu_util": "log1p", "memory_mib": "log1p", "sm_active": "log1p"}


def _scaled(model: Any) -> Pipeline:
    return make_pipeline(FunctionTransformer(signed_log1p), StandardScaler(), model)


def _logged(model: Any) -> Pipeline:
    return make_pipeline(FunctionTransformer(signed_log1p), model)


class BoundedMLP(MLPRegressor):
    """MLPRegressor with early stopping whose ``max_iter`` is a budget: reaching it (the validation score still
    creeping up by more than ``tol``) is recorded in ``hit_max_iter_`` instead of warned about in every fold."""

    def fit(self, X: Any, y: Any) -> "BoundedMLP":
        """Fit as MLPRegressor does; the budget's ConvergenceWarning becomes ``hit_max_iter_``."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=ConvergenceWarning, message="Stochastic Optimizer")
            super().fit(X, y)
        self.hit_max_iter_ = bool(self.n_iter_ >= self.max_iter)
        return self


def _factories(seed: int) -> dict[str, tuple[Callable[[], Any], dict[str, list[Any]]]]:
    from lightgbm import LGBMRegressor
    from sklearn.ensemble import ExtraTreesRegressor, GradientBoostingRegressor, RandomForestRegressor
    from sklearn.linear_model import Lasso, Ridge
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.svm import SVR
    from sklearn.tree import DecisionTreeRegressor
    from xgboost import XGBRegressor

    return {
        "ridge": (lambda: _scaled(Ridge()), {"ridge__alpha": [0.1, 1.0, 10.0]}),
        "lasso": (lambda: _scaled(Lasso(max_iter=20000)), {"lasso__alpha": [1e-3, 1e-2, 1e-1]}),
        "svr": (lambda: _scaled(SVR()), {"svr__C": [1.0, 10.0], "svr__epsilon": [0.01, 0.1]}),
        "knn": (lambda: _scaled(KNeighborsRegressor()), {"kneighborsregressor__n_neighbors": [3, 5, 9],
                                                          "kneighborsregressor__weights": ["distance"]}),
        "decision_tree": (lambda: _logged(DecisionTreeRegressor(random_state=seed)),
                          {"decisiontreeregressor__max_depth": [4, 8, None]}),
        "random_forest": (lambda: _logged(RandomForestRegressor(n_estimators=100, max_features=0.5, random_state=seed,
                                                                n_jobs=1)),
                          {"randomforestregressor__max_features": [0.5, 1.0]}),
        "extra_trees": (lambda: _logged(ExtraTreesRegressor(n_estimators=100, random_state=seed, n_jobs=1)),
                        {"extratreesregressor__max_features": [0.5, 1.0]}),
        "gradient_boosting": (lambda: _logged(GradientBoostingRegressor(random_state=seed)),
                              {"gradientboostingregressor__max_depth": [2, 3], "gradientboostingregressor__n_estimators": [200]}),
        "xgboost": (lambda: _logged(XGBRegressor(n_estimators=300, learning_rate=0.05, n_jobs=1, random_state=seed, verbosity=0)),
                    {"xgbregressor__max_depth": [3, 6]}),
        # deterministic + force_col_wise: LightGBM otherwise picks row- or column-wise histograms by timing both on
        # the machine at hand, and the two sum in different orders (metrics moved in the 5th digit between runs)
        "lightgbm": (lambda: _logged(LGBMRegressor(n_estimators=300, learning_rate=0.05, min_child_samples=5, n_jobs=1,
                                                   random_state=seed, verbose=-1, deterministic=True,
                                                   force_col_wise=True)),
                     {"lgbmregressor__num_leaves": [7, 31]}),
        "mlp": (lambda: _scaled(BoundedMLP(hidden_layer_sizes=(64, 64), max_iter=500, early_stopping=True,
                                           n_iter_no_change=20, random_state=seed)),
                {"boundedmlp__alpha": [1e-4, 1e-2]}),
    }


REGRESSORS: tuple[str, ...] = (
    "ridge", "lasso", "svr", "knn", "decision_tree", "random_forest", "extra_trees", "gradient_boosting", "xgboost",
    "lightgbm", "mlp",
)
# The regressors a predictor may be built from: fitted, they keep no training row, so their size and prediction
# cost stay small whatever the number of runs, and an exported predictor carries no row of a source whose terms
# forbid redistributing it (GPUMemNet). Full-depth forests (random_forest, extra_trees) grow with the rows (an
# 82 MB artifact on 3,060 runs, 1 + K CV+ models per target); svr keeps its support vectors and knn every row
# (1,000-2,000 distinct rows/s for the whole predictor). They are compared, never exported.
EXPORTABLE: tuple[str, ...] = tuple(r for r in REGRESSORS if r not in ("random_forest", "extra_trees", "svr", "knn"))
TREE_MODELS: tuple[str, ...] = ("decision_tree", "random_forest", "extra_trees", "gradient_boosting", "xgboost", "lightgbm")


def make_regressor(name: str, tune: bool = True, seed: int = 0, cv: int = 3) -> Any:
    """An unfitted regressor by name (on log1p features); with ``tune`` a small grid search inside."""
    factories = _factories(seed)
    if name not in factories:
        from gpupred.errors import GpupredError

        raise GpupredError(f"unknown regressor {name!r}; known: {', '.join(factories)}")
    factory, grid = factories[name]
    model = factory()
    if tune:
        model = GridSearchCV(model, grid, cv=KFold(cv, shuffle=True, random_state=seed),
                             scoring="neg_root_mean_squared_error", n_jobs=1)
    return model


def correction_model(seed: int = 0) -> Any:
    """The correction regressor: a small LightGBM on signed-log features (150 trees of at most 15 leaves)."""
    from lightgbm import LGBMRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    return make_pipeline(FunctionTransformer(signed_log1p), LGBMRegressor(
        n_estimators=150, learning_rate=0.05, num_leaves=15, min_child_samples=10, n_jobs=1, random_state=seed, verbose=-1))
