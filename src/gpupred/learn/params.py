"""scikit-learn's estimator protocol without importing scikit-learn.

``get_params`` and ``set_params`` read the constructor's arguments as :class:`sklearn.base.BaseEstimator` does, so
``sklearn.base.clone`` treats these estimators as its own, while an exported predictor unpickles them without
importing scikit-learn (about a second of a cold ``gpupred predict`` on a 2-core machine).
"""

from __future__ import annotations

import inspect
from typing import Any


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
