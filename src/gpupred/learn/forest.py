"""Several fitted tree-ensemble regressors evaluated together in numpy: the same numbers as their libraries, faster
for a few rows.

A CV+ predictor calls 1 + K models per target; through XGBoost's, LightGBM's or scikit-learn's own predict each
call costs 0.2-0.9 ms of fixed overhead, 10-20 ms for one row over three targets. Here every tree of every model
becomes rows of flat node arrays, and all trees descend one level per numpy step (a few hundred
microseconds for one row, whatever the number of models). Each library's arithmetic is reproduced, node by
node and model by model, so models of different libraries share one forest:

- XGBoost (``gbtree``, ``reg:squarederror``, numerical splits): features as float32, ``x < split`` goes left,
  a missing value (NaN) follows ``default_left``; the prediction is ``base_score`` plus each tree's leaf, summed
  in float32 in tree order.
- LightGBM (regression, numerical ``<=`` splits): features as float64, ``x <= threshold`` goes left, missing
  values as its ``missing_type`` says; leaves summed in float64 in tree order.
- scikit-learn ``DecisionTreeRegressor`` and ``GradientBoostingRegressor`` (squared error, mean init): features
  as float32, ``x <= threshold`` (float64) goes left; a decision tree sends NaN where ``missing_go_to_left``
  says, gradient boosting refuses NaN as its library does; the prediction is the init constant plus
  ``learning_rate`` times each tree's leaf, summed in float64 in stage order.

A model that says it is an affine pull of another towards a constant (``forest_parts()`` returning ``(inner,
center, weight)``: it predicts ``center + weight * (inner(x) - center)``, e.g. the step correction's
``ShrunkCorrection``) is converted as its inner model, the pull applied to the summed trees with the same arithmetic.

Anything else (other boosters, objectives with a link function, categorical splits, other estimators) is
not converted: :meth:`Forest.from_models` returns None and callers use ``predict``. Tests check equality
with the libraries' own predictions. Large batches go to the libraries, whose compiled traversal is faster
per row than numpy's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

_LEAF = -1
FOREST_MAX_ROWS = 32  # up to this many rows the numpy forest beats the libraries' per-call overhead


@dataclass
class _Trees:
    """Flat node arrays of a list of trees (one model): children, split feature and value, default direction, leaf
    value; and the model's arithmetic: features rounded to float32 (``x32``), ``<`` rather than ``<=``
    (``strict``), leaves summed in float32 (``sum32``), NaN accepted (``nan_ok``)."""

    left: list[np.ndarray]
    right: list[np.ndarray]
    feature: list[np.ndarray]
    threshold: list[np.ndarray]
    default_left: list[np.ndarray]
    value: list[np.ndarray]
    base: float
    x32: bool = False
    strict: bool = False
    sum32: bool = False
    nan_ok: bool = True


def _xgboost_trees(model: Any) -> _Trees | None:
    raw = json.loads(model.get_booster().save_raw("json"))
    learner = raw["learner"]
    booster = learner["gradient_booster"]
    if booster.get("name") != "gbtree" or learner["objective"]["name"] != "reg:squarederror":
        return None
    params = learner["learner_model_param"]
    if int(params.get("num_target", 1)) != 1 or int(params.get("num_class", 0)) not in (0, 1):
        return None
    if getattr(model, "best_iteration", None) is not None:
        return None  # early stopping: predict would use a prefix of the trees
    base = float(str(params["base_score"]).strip("[]"))
    out = _Trees([], [], [], [], [], [], base, x32=True, strict=True, sum32=True)
    for tree in booster["model"]["trees"]:
        if any(tree["split_type"]) or int(tree["tree_param"].get("size_leaf_vector", 1)) > 1:
            return None
        left = np.asarray(tree["left_children"], dtype=np.int64)
        cond = np.asarray(tree["split_conditions"], dtype=np.float32)
        is_leaf = left == -1
        out.left.append(np.where(is_leaf, _LEAF, left))
        out.right.append(np.where(is_leaf, _LEAF, np.asarray(tree["right_children"], dtype=np.int64)))
        out.feature.append(np.where(is_leaf, 0, np.asarray(tree["split_indices"], dtype=np.int64)))
        out.threshold.append(cond)
        out.default_left.append(np.asarray(tree["default_left"], dtype=bool))
        out.value.append(np.where(is_leaf, cond, 0).astype(np.float32))
    return out


def _lightgbm_trees(model: Any) -> _Trees | None:
    dump = model.booster_.dump_model()
    if dump.get("num_class", 1) != 1 or dump.get("num_tree_per_iteration", 1) != 1:
        return None
    if not str(dump.get("objective", "")).startswith("regression"):
        return None
    if getattr(model, "best_iteration_", None):
        return None
    out = _Trees([], [], [], [], [], [], 0.0)
    for info in dump["tree_info"]:
        nodes: list[dict[str, Any]] = []
        left: list[int] = []
        right: list[int] = []

        def walk(node: dict[str, Any]) -> int:
            idx = len(nodes)
            nodes.append(node)
            left.append(_LEAF)
            right.append(_LEAF)
            if "leaf_value" not in node:
                if node.get("decision_type") != "<=" or node.get("missing_type", "None") not in ("None", "NaN"):
                    raise ValueError("unsupported split")
                left[idx] = walk(node["left_child"])
                right[idx] = walk(node["right_child"])
            return idx

        try:
            walk(info["tree_structure"])
        except (ValueError, KeyError):
            return None
        out.left.append(np.asarray(left, dtype=np.int64))
        out.right.append(np.asarray(right, dtype=np.int64))
        out.feature.append(np.asarray([n.get("split_feature", 0) for n in nodes], dtype=np.int64))
        out.threshold.append(np.asarray([n.get("threshold", 0.0) for n in nodes], dtype=np.float64))
        # LightGBM sends NaN by default_left where missing_type is NaN; where it is None it reads NaN as 0, which
        # goes left exactly when 0 <= threshold: each node's NaN direction, so one tree may mix both kinds
        out.default_left.append(np.asarray([bool(n.get("default_left")) if n.get("missing_type") == "NaN"
                                            else 0.0 <= n.get("threshold", 0.0) for n in nodes]))
        out.value.append(np.asarray([n.get("leaf_value", 0.0) for n in nodes], dtype=np.float64))
    return out


def _sklearn_trees(model: Any) -> _Trees | None:
    """A scikit-learn DecisionTreeRegressor or GradientBoostingRegressor (squared error, mean init), else None."""
    kind = type(model).__name__
    if kind == "DecisionTreeRegressor":
        if model.n_outputs_ != 1:
            return None
        estimators, scale, base, nan_ok = [model], 1.0, 0.0, True
    elif kind == "GradientBoostingRegressor":
        init = model.init_
        if model.loss != "squared_error" or type(init).__name__ != "DummyRegressor" or init.strategy != "mean":
            return None
        estimators, scale, nan_ok = list(model.estimators_[:, 0]), float(model.learning_rate), False
        base = float(np.asarray(init.constant_, dtype=np.float64).ravel()[0])
    else:
        return None
    out = _Trees([], [], [], [], [], [], base, x32=True, nan_ok=nan_ok)
    for est in estimators:
        tree = est.tree_
        is_leaf = tree.children_left == -1
        out.left.append(np.where(is_leaf, _LEAF, tree.children_left).astype(np.int64))
        out.right.append(np.where(is_leaf, _LEAF, tree.children_right).astype(np.int64))
        out.feature.append(np.where(is_leaf, 0, tree.feature).astype(np.int64))
        out.threshold.append(np.asarray(tree.threshold, dtype=np.float64))
        out.default_left.append(np.asarray(getattr(tree, "missing_go_to_left", np.zeros(tree.node_count)), dtype=bool))
        out.value.append(scale * np.asarray(tree.value[:, 0, 0], dtype=np.float64))  # scale * leaf, as predict_stages
    return out


_CONVERTERS: dict[str, Callable[[Any], "_Trees | None"]] = {
    "XGBRegressor": _xgboost_trees, "LGBMRegressor": _lightgbm_trees,
    "DecisionTreeRegressor": _sklearn_trees, "GradientBoostingRegressor": _sklearn_trees,
}


def leading_functions(model: Any) -> list[Callable[[np.ndarray], np.ndarray]]:
    """The functions of the FunctionTransformer steps that open a (grid-searched) Pipeline, in order."""
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer

    inner = getattr(model, "best_estimator_", model)
    funcs: list[Callable[[np.ndarray], np.ndarray]] = []
    for _, step in inner.steps[:-1] if isinstance(inner, Pipeline) else []:
        if not isinstance(step, FunctionTransformer) or step.func is None or step.kw_args:
            break
        funcs.append(step.func)
    return funcs


def _split_pipeline(model: Any) -> tuple[list[Callable[[np.ndarray], np.ndarray]], Any] | None:
    """The FunctionTransformer steps and the final estimator of a (grid-searched) pipeline, or None."""
    from sklearn.pipeline import Pipeline

    inner = getattr(model, "best_estimator_", model)
    steps = [s for _, s in inner.steps] if isinstance(inner, Pipeline) else [inner]
    funcs = leading_functions(inner)
    return (funcs, steps[-1]) if len(funcs) == len(steps) - 1 else None


class Forest:
    """Every tree of several models (same input transform), evaluated level by level for all rows at once."""

    def __init__(self, transform: list[Callable[[np.ndarray], np.ndarray]], models: list[_Trees]) -> None:
        self.transform = transform
        self.n_models = len(models)
        lefts, rights, feats, thrs, defaults, values, roots, owner, x32, strict = [], [], [], [], [], [], [], [], [], []
        offset = 0
        for k, trees in enumerate(models):
            for left, right, feat, thr, dflt, val in zip(trees.left, trees.right, trees.feature, trees.threshold,
                                                         trees.default_left, trees.value):
                roots.append(offset)
                owner.append(k)
                lefts.append(np.where(left == _LEAF, np.arange(len(left)) + offset, left + offset))
                rights.append(np.where(right == _LEAF, np.arange(len(right)) + offset, right + offset))
                feats.append(feat)
                thrs.append(np.asarray(thr, dtype=np.float64))  # float32 splits are exact in float64
                defaults.append(dflt)
                values.append(np.asarray(val, dtype=np.float64))
                x32.append(np.full(len(left), trees.x32))
                strict.append(np.full(len(left), trees.strict))
                offset += len(left)
        def joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:  # no tree at all: constant models only
            return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)

        self.left, self.right = joined(lefts, np.int64), joined(rights, np.int64)
        self.feature, self.threshold = joined(feats, np.int64), joined(thrs, np.float64)
        self.default_left, self.value = joined(defaults, bool), joined(values, np.float64)
        self.x32, self.strict = joined(x32, bool), joined(strict, bool)
        self.roots = np.asarray(roots, dtype=np.int64)
        self.owner = np.asarray(owner, dtype=np.int64)
        self.bounds = np.searchsorted(self.owner, np.arange(self.n_models + 1))  # trees of model k: bounds[k]:bounds[k+1]
        self.base = np.asarray([m.base for m in models], dtype=np.float64)
        self.sum32 = np.asarray([m.sum32 for m in models], dtype=bool)
        self.nan_ok = all(m.nan_ok for m in models)
        self.max_depth = self._depth()

    def _depth(self) -> int:
        """The longest root-to-leaf path over all trees (leaves point to themselves)."""
        index = np.arange(len(self.left))
        frontier, depth = self.roots, 0
        while True:
            inner = frontier[self.left[frontier] != index[frontier]]
            if not len(inner):
                return depth
            frontier = np.concatenate([self.left[inner], self.right[inner]])
            depth += 1

    @classmethod
    def from_models(cls, models: list[Any]) -> "Forest | None":
        """A Forest of fitted regressors (XGBoost, LightGBM, scikit-learn trees; bare or after FunctionTransformers;
        or an affine pull of one, see the module docstring), or None."""
        if not models:
            return None
        pulls = [m.forest_parts() if hasattr(m, "forest_parts") else (m, np.nan, 1.0) for m in models]
        parts = [None if inner is None else _split_pipeline(inner) for inner, _, _ in pulls]
        if any(p is None and inner is not None for p, (inner, _, _) in zip(parts, pulls)):
            return None
        funcs = next((p[0] for p in parts if p is not None), [])  # the input transform; constants read no input
        if any(p is not None and p[0] != funcs for p in parts):  # type: ignore[index]
            return None
        trees: list[_Trees | None] = []
        for p, (_, center, _) in zip(parts, pulls):
            if p is None:  # a pull at weight 0 has no inner model: the constant centre, no trees
                trees.append(_Trees([], [], [], [], [], [], float(center)))
                continue
            convert = _CONVERTERS.get(type(p[1]).__name__)
            trees.append(convert(p[1]) if convert is not None else None)
        if any(t is None for t in trees):
            return None
        forest = cls(funcs, trees)  # type: ignore[arg-type]
        forest.pull = np.asarray([[c, w] for _, c, w in pulls], dtype=np.float64)  # (center, weight); NaN center: none
        return forest

    @classmethod
    def combine(cls, forests: list["Forest"]) -> "Forest | None":
        """One forest holding the models of several (same input transform), in order; None if the transforms differ."""
        first = forests[0] if forests else None
        if first is None or any(f.transform != first.transform for f in forests):
            return None
        out = cls.__new__(cls)
        out.transform = first.transform
        out.n_models = sum(f.n_models for f in forests)
        nodes = np.cumsum([0] + [len(f.left) for f in forests[:-1]])
        models = np.cumsum([0] + [f.n_models for f in forests[:-1]])
        out.left = np.concatenate([f.left + o for f, o in zip(forests, nodes)])
        out.right = np.concatenate([f.right + o for f, o in zip(forests, nodes)])
        for name in ("feature", "threshold", "default_left", "value", "x32", "strict", "base", "sum32"):
            setattr(out, name, np.concatenate([getattr(f, name) for f in forests]))
        out.pull = np.concatenate([f.pulls() for f in forests])
        out.nan_ok = all(f.nan_ok for f in forests)
        out.roots = np.concatenate([f.roots + o for f, o in zip(forests, nodes)])
        out.owner = np.concatenate([f.owner + o for f, o in zip(forests, models)])
        out.bounds = np.searchsorted(out.owner, np.arange(out.n_models + 1))
        out.max_depth = max(f.max_depth for f in forests)
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions of every model, shape (models, rows)."""
        Z = np.asarray(X, dtype=float)
        for f in self.transform:
            Z = f(Z)
        Z = np.ascontiguousarray(Z, dtype=np.float64)
        has_nan = bool(np.isnan(Z).any())
        if has_nan and not self.nan_ok:
            raise ValueError("Input X contains NaN: a gradient-boosting model of this forest does not accept missing values")
        m, width = Z.shape
        flat64 = Z.ravel()
        flat32 = flat64.astype(np.float32).astype(np.float64) if self.x32.any() else flat64
        base_index = (np.arange(m) * width)[:, None] if m > 1 else 0
        child = self._children()
        node = np.broadcast_to(self.roots, (m, len(self.roots))).copy() if m > 1 else self.roots.copy()
        mixed_x, mixed_op = not (self.x32.all() or not self.x32.any()), not (self.strict.all() or not self.strict.any())
        for _ in range(self.max_depth):
            at = base_index + self.feature.take(node)
            x = np.where(self.x32.take(node), flat32.take(at), flat64.take(at)) if mixed_x else \
                (flat32 if self.x32[0] else flat64).take(at)
            thr = self.threshold.take(node)
            if mixed_op:
                go_left = np.where(self.strict.take(node), x < thr, x <= thr)
            else:
                go_left = x < thr if self.strict[0] else x <= thr
            if has_nan:
                go_left |= np.isnan(x) & self.default_left.take(node)
            node = child.take(2 * node + 1 - go_left)
        return self._pulled(self._sums(self.value.take(node).reshape(m, -1)))

    def pulls(self) -> np.ndarray:
        """Each model's (center, weight) of its affine pull, NaN centre where it has none: shape (models, 2)."""
        pull = self.__dict__.get("pull")  # a forest pickled before pulls existed has none
        return pull if pull is not None else np.tile([np.nan, 1.0], (self.n_models, 1))

    def _pulled(self, out: np.ndarray) -> np.ndarray:
        """Each pulled model's ``center + weight * (sum - center)``, as the pulling model computes it."""
        pull = self.pulls()
        for k in np.flatnonzero(np.isfinite(pull[:, 0])):
            center, weight = pull[k]
            out[k] = center + weight * (out[k] - center)
        return out

    def _sums(self, leaves: np.ndarray) -> np.ndarray:
        """Each model's base plus its trees' leaves, summed in tree order in the model's precision: (models, rows)."""
        m = leaves.shape[0]
        out = np.empty((self.n_models, m), dtype=np.float64)
        for k in range(self.n_models):
            a, b = self.bounds[k], self.bounds[k + 1]
            dtype = np.float32 if self.sum32[k] else np.float64
            acc = np.empty((m, b - a + 1), dtype=dtype)
            acc[:, 0] = self.base[k]
            acc[:, 1:] = leaves[:, a:b]
            out[k] = np.add.accumulate(acc, axis=1, dtype=dtype)[:, -1]  # in tree order, as the library sums
        return out

    def _children(self) -> np.ndarray:
        """Left and right child of every node interleaved (2i: left, 2i + 1: right), built once."""
        child = self.__dict__.get("_child")
        if child is None:
            child = self.__dict__["_child"] = np.stack([self.left, self.right], axis=1).ravel()
        return child
