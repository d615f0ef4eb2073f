"""The one base of gpupred's estimators (:class:`Estimator`): scikit-learn's estimator protocol without importing
scikit-learn, the pickling-apart of fitted library models, and ``describe()``.

``get_params`` and ``set_params`` read the constructor's arguments as :class:`sklearn.base.BaseEstimator` does, so
``sklearn.base.clone`` treats these estimators as its own, while an exported predictor unpickles them without
importing scikit-learn (about a second of a cold ``gpupred predict`` on a 2-core machine). Every estimator of the
package derives from :class:`Estimator`: the step, memory and slowdown estimators, the failure model, the
corrections, the conformal regressor and the baselines.
"""

from __future__ import annotations

import inspect
import pickle
import zlib
from typing import Any

PAYLOAD_LEVEL = 3  # zlib level of a payload (as joblib's compress=3): 32 MB of models in 0.12 s out, 0.47 s in


def pack_payload(obj: Any) -> bytes:
    """``obj`` pickled and compressed on its own: a payload that an artifact carries without reading it.

    The artifact's own compression then passes over bytes that are already compressed (a few ms), so loading it
    costs little until the payload is unpacked (:func:`unpack_payload`), on first use."""
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), PAYLOAD_LEVEL)


def unpack_payload(data: bytes) -> Any:
    """The object :func:`pack_payload` packed."""
    return pickle.loads(zlib.decompress(data))


class Params:
    """The constructor's arguments as parameters: ``get_params`` (nested ``<name>__<param>`` with ``deep``),
    ``set_params`` and a readable ``repr``."""

    @classmethod
    def param_names(cls) -> list[str]:
        """The constructor's named arguments, sorted (as scikit-learn lists them)."""
        params = inspect.signature(cls.__init__).parameters.values()
        return sorted(p.name for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Each parameter's value; with ``deep``, also those of parameters that have parameters."""
        out: dict[str, Any] = {}
        for name in self.param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update({f"{name}__{k}": v for k, v in value.get_params().items()})
            out[name] = value
        return out

    def set_params(self, **params: Any) -> Any:
        """Set parameters (``<name>__<param>`` sets a nested one); an unknown name is refused."""
        valid = set(self.param_names())
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid: {sorted(valid)}")
            if sub:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, sub_params in nested.items():
            getattr(self, name).set_params(**sub_params)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params(deep=False).items())
        return f"{type(self).__name__}({args})"


class PickledApart:
    """Fitted library models pickled apart when a numpy forest stands in for them.

    The attributes named in ``APART`` (scikit-learn, LightGBM or XGBoost objects) are packed as one payload
    (:func:`pack_payload`) when the attribute named ``FOREST`` holds a forest, and unpacked on first access: an
    object that answers a few rows from its forest then unpickles without importing those libraries (about a second
    of a cold start).

    The forest is built when the object is pickled, or at its ``FOREST_AFTER``-th answer of a few rows
    (:meth:`few_rows_forest`; :meth:`build_forest`, after ``fit`` calls :meth:`forest_pending`): an evaluation's many
    fits, which answer their held-out rows once each, never convert their trees (a LightGBM model's JSON dump costs
    more than the library's answer), and what answers from a forest answers from the same one.
    """

    APART: tuple[str, ...] = ()
    FOREST = "forest_"
    FOREST_AFTER = 2  # answers of a few rows the libraries give a fresh fit before its forest is built

    def build_forest(self) -> Any:
        """The numpy forest of the fitted library models, or None (a subclass with ``APART`` says how)."""
        return None

    def forest_pending(self) -> None:
        """Forget the forest of an earlier fit: the next read of ``FOREST`` builds it from the models just fitted."""
        self.__dict__.pop(self.FOREST, None)
        self.__dict__.pop("few_row_answers_", None)
        self.__dict__["forest_pending_"] = True

    def few_rows_forest(self) -> Any:
        """The forest that answers a few rows, or None where the libraries answer: the forest an unpickled object
        carries, and a fresh fit's from its ``FOREST_AFTER``-th answer of a few rows on (built then). Both give the
        same numbers."""
        if self.__dict__.get("forest_pending_"):
            answers = self.__dict__.get("few_row_answers_", 0) + 1
            self.__dict__["few_row_answers_"] = answers
            if answers < self.FOREST_AFTER:
                return None
        return getattr(self, self.FOREST)

    def __getstate__(self) -> dict[str, Any]:
        """The state, with the ``APART`` attributes as one payload where a forest stands in for them."""
        if self.__dict__.get("forest_pending_"):
            getattr(self, self.FOREST)
        state = dict(self.__dict__)
        if state.get(self.FOREST) is not None and all(name in state for name in self.APART):
            apart = tuple(state.pop(name) for name in self.APART)
            state["apart_payload_"] = pack_payload(apart)
        return state

    def __getattr__(self, name: str) -> Any:
        """An ``APART`` attribute, unpacked on first use; the forest, built on first use."""
        if name in type(self).APART and "apart_payload_" in self.__dict__:
            self.__dict__.update(zip(type(self).APART, unpack_payload(self.__dict__.pop("apart_payload_"))))
            return self.__dict__[name]
        if name == type(self).FOREST and self.__dict__.get("forest_pending_"):
            self.__dict__[name] = self.build_forest()
            del self.__dict__["forest_pending_"]
            self.__dict__.pop("few_row_answers_", None)
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class Estimator(PickledApart, Params):
    """The base of every estimator here: :class:`Params`' parameter protocol, :class:`PickledApart`'s pickling (nothing
    apart unless a subclass names ``APART``), and :meth:`describe`, what a card says of it."""

    def describe(self) -> dict[str, Any]:
        """Its class and parameters (estimators that a card describes say more)."""
        return {"name": type(self).__name__, "params": self.get_params(deep=False)}
