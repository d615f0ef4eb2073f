"""Rows as the estimators read them: a pandas DataFrame, or :class:`Columns` (equal-length numpy arrays by name, the
rows of a job or a queue's batch of jobs without pandas), and the readers both share.

A one-row DataFrame costs about 15 µs a column read and a millisecond to build; a warm prediction of one job reads
some sixty columns, so the predictor's physics core hands its estimators :class:`Columns` instead. The readers give
what the same rows read from ``pd.DataFrame(records)`` give: :meth:`Columns.from_records` infers each column's
type as pandas does for the values a job's row holds (str, bool, int, float, None).

Nothing here imports pandas until a DataFrame is read or built: a job's answer, which reads :class:`Columns` only,
never loads it (:func:`is_frame` tells a frame apart without importing it).
"""

from __future__ import annotations

import sys
from numbers import Number
from typing import TYPE_CHECKING, Any, Iterable, Union

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


class Columns:
    """Equal-length numpy columns by name: what the estimators read of rows, without a DataFrame. ``len`` is the
    number of rows and ``columns`` the names, as a DataFrame's."""

    __slots__ = ("data", "n")

    def __init__(self, data: dict[str, np.ndarray], n: int) -> None:
        self.data = data
        self.n = n

    @classmethod
    def from_records(cls, records: list[dict[str, Any]]) -> "Columns":
        """The columns of ``records`` (one dict per row; a key absent from a row is missing there), each typed as
        ``pd.DataFrame(records)`` types it."""
        names: dict[str, None] = {}
        for record in records:
            names.update(dict.fromkeys(record))
        return cls({name: column_array([r.get(name) for r in records]) for name in names}, len(records))

    @property
    def columns(self) -> Any:
        """The column names (a view of the keys)."""
        return self.data.keys()

    @property
    def index(self) -> range:
        """The rows' index, as ``pd.DataFrame(records)`` numbers them (a frame given it gets a ``RangeIndex``)."""
        return range(self.n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def assign(self, **arrays: np.ndarray) -> "Columns":
        """These columns with ``arrays`` added (or replaced)."""
        return Columns({**self.data, **{k: np.asarray(v) for k, v in arrays.items()}}, self.n)


Rows = Union["pd.DataFrame", Columns]


def is_frame(x: Any) -> bool:
    """Whether ``x`` is a pandas DataFrame, without importing pandas (a process that has not imported it holds none)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(x, pd.DataFrame)


def is_series(x: Any) -> bool:
    """Whether ``x`` is a pandas Series (as :func:`is_frame`)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(x, pd.Series)


def column_array(values: list[Any]) -> np.ndarray:
    """One column of records as ``pd.DataFrame`` types it: bool, int64 or float64 where every value is one (None
    becoming NaN among numbers), else an object array (str and mixed columns)."""
    arr = np.asarray(values) if values else np.empty(0)
    if arr.dtype.kind in "biuf":
        return arr
    if arr.dtype.kind == "O" and any(v is None for v in values) and all(
            v is None or (isinstance(v, Number) and not isinstance(v, (bool, np.bool_))) for v in values):
        return np.asarray(values, dtype=float)  # numbers with gaps: float64 with NaN
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def values(rows: Rows, name: str) -> np.ndarray:
    """Column ``name`` as its numpy array."""
    return rows.data[name] if isinstance(rows, Columns) else rows[name].to_numpy()


def floats(rows: Rows, name: str) -> np.ndarray:
    """Column ``name`` as float64 (missing values NaN)."""
    return np.asarray(rows.data[name], dtype=float) if isinstance(rows, Columns) else rows[name].to_numpy(float)


def numeric(rows: Rows, name: str) -> np.ndarray:
    """A numeric column as float64, zeros where it is absent or missing."""
    if name not in rows.columns:
        return np.zeros(len(rows))
    raw = values(rows, name)
    if raw.dtype.kind in "fiub":  # a numpy column (pandas' na_value path costs 3x as much on a job's one row)
        raw = raw.astype(float)
        return np.where(np.isnan(raw), 0.0, raw)
    if isinstance(rows, Columns):
        return np.asarray([0.0 if _missing(v) else float(v) for v in raw], dtype=float)
    return rows[name].to_numpy(float, na_value=0.0)


def text(rows: Rows, name: str) -> np.ndarray:
    """A column as an object array of str, as ``Series.astype(str)`` gives it (without its cost where every value is
    a str already: a job's row)."""
    raw = values(rows, name)
    if raw.dtype == object and all(type(v) is str for v in raw):
        return raw
    import pandas as pd

    return pd.Series(raw).astype(str).to_numpy() if isinstance(rows, Columns) else rows[name].astype(str).to_numpy()


def equal(rows: Rows, name: str, value: Any) -> np.ndarray:
    """Per row, whether column ``name`` equals ``value`` (``rows[name] == value``)."""
    if isinstance(rows, Columns):
        return np.asarray(rows.data[name] == value, dtype=bool)
    return (rows[name] == value).to_numpy()


def notna(rows: Rows, name: str) -> np.ndarray:
    """Per row, whether column ``name`` has a value there (all False where the column is absent)."""
    if name not in rows.columns:
        return np.zeros(len(rows), bool)
    if not isinstance(rows, Columns):
        return rows[name].notna().to_numpy()
    raw = rows.data[name]
    if raw.dtype.kind == "f":
        return ~np.isnan(raw)
    if raw.dtype.kind == "O":
        return np.asarray([not _missing(v) for v in raw], dtype=bool)
    return np.ones(len(raw), bool)


def matrix(rows: Rows, names: Iterable[str], fill: float = 0.0) -> np.ndarray:
    """The columns ``names`` as one float matrix (rows x names), ``fill`` where a column is absent: what
    ``df.reindex(columns=names, fill_value=fill).to_numpy(float)`` gives."""
    names = list(names)
    if not isinstance(rows, Columns):
        return rows.reindex(columns=names, fill_value=fill).to_numpy(float)
    cols = [floats(rows, n) if n in rows.data else np.full(rows.n, fill) for n in names]
    return np.column_stack(cols) if cols else np.empty((rows.n, 0))


def frame_values(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Float columns as the (rows x columns) array ``pd.DataFrame(columns).to_numpy(float)`` gives, in the same memory
    layout (column-major), so that numpy's reductions over it add in the same order."""
    return np.stack([np.asarray(v, dtype=float) for v in columns.values()]).T


def row_sums(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Each row's sum of float columns as ``pd.DataFrame(columns).sum(axis=1)`` adds it (NaN counted as 0), to the
    bit: numpy's sum over :func:`frame_values` where no value is missing (the same additions in the same order), the
    frame's own where one is."""
    table = frame_values(columns)
    if np.isnan(table).any():
        import pandas as pd

        return pd.DataFrame(columns).sum(axis=1).to_numpy(float)
    return table.sum(axis=1)


def _missing(v: Any) -> bool:
    """Whether one value of an object column is missing (None or NaN), as ``pd.isna`` says of a scalar."""
    pd = sys.modules.get("pandas")
    return v is None or (isinstance(v, float) and v != v) or (pd is not None and v is pd.NA)

