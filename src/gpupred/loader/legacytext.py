"""``np.loadtxt`` as numpy parsed text before 1.23: line by line and value by value in Python.

numpy 1.23 replaced ``loadtxt``'s Python parser with one in C, 10-20 times faster on files of numbers. Jobs pinned to
an older numpy (Lucid's workloads pin numpy 1.21.5) pay the old parser's cost in every DataLoader worker, and a host
profile measured on today's numpy cannot see it. :func:`loadtxt_legacy` takes the old parser's steps for the plain
case a point-cloud loader uses (float values, whitespace-separated, ``#`` comments): per line, decode, cut the comment
with a regular expression, strip, split; per value, a converter call around ``float``; per row, the values packed
into nested tuples; per chunk of rows, one ``np.array``; at the end a squeeze. ``gpupred loader bench`` times it as
the ``array-files`` variant ``txt-legacy``.

On the development machine it ran at 0.87x numpy 1.21.5's own ``loadtxt`` on the same interpreter (Python 3.10.13:
9.1 ms against 10.5 ms for a ShapeNet-sized ``.pts`` of 2,500 x 3 values and ``.seg`` of 2,500 values), so what the
bench measures of it is, if anything, a little cheap. It is a timing stand-in, not a general reader: no ``dtype``,
``usecols``, ``delimiter`` or converter options.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

CHUNK_ROWS = 50_000  # rows per np.array call (numpy's _loadtxt_chunksize)
_COMMENT = re.compile(re.escape("#"))


def float_value(text: str) -> float:
    """One value as the old parser converted it: ``float``, and hexadecimal on its failure."""
    try:
        return float(text)
    except ValueError:
        if "0x" in text:
            return float.fromhex(text)
        raise


class Recursive:
    """A function that receives itself as its first argument (the old parser packed rows through such a wrapper)."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def __call__(self, *args: Any) -> Any:
        return self.func(self, *args)


@Recursive
def pack_items(self: Recursive, items: list[float], packing: Any) -> Any:
    """A row's converted values packed by the dtype's nesting: one value, a tuple, or tuples of packed parts."""
    if packing is None:
        return items[0]
    if packing is tuple:
        return tuple(items)
    out, start = [], 0
    for length, sub in packing:
        out.append(self(items[start:start + length], sub))
        start += length
    return tuple(out)


def split_line(line: str | bytes) -> list[str]:
    """A line's values: decoded, its comment cut, stripped and split at whitespace."""
    text = line.decode("latin1") if type(line) is bytes else line
    text = _COMMENT.split(text, maxsplit=1)[0].strip("\r\n")
    return text.split(None) if text else []


def read_rows(lines: Iterator[str], first: str, width: int, path: Path) -> Iterator[list[Any]]:
    """Chunks of packed rows, the first line included; a row of another width is refused, naming its line."""
    converters = [float_value for _ in range(width)]
    packing = [(width, tuple)] if width > 1 else None
    rows: list[Any] = []
    for i, line in enumerate(itertools.islice(itertools.chain([first], lines), None)):
        values = split_line(line)
        if len(values) == 0:
            continue
        if len(values) != width:
            raise ValueError(f"{path}: wrong number of columns at line {i + 1}")
        rows.append(pack_items([conv(value) for (conv, value) in zip(converters, values)], packing))
        if len(rows) > CHUNK_ROWS:
            yield rows
            rows = []
    if rows:
        yield rows


def loadtxt_legacy(path: str | Path) -> np.ndarray:
    """A text file of numbers as ``np.loadtxt(path)`` returned it, parsed as numpy before 1.23 parsed it."""
    path = Path(path)
    with path.open() as handle:
        lines = iter(handle)
        first, values = "", []
        for first in lines:
            values = split_line(first)
            if values:
                break
        out: np.ndarray | None = None
        for rows in read_rows(lines, first, len(values), path) if values else ():
            part = np.array(rows, np.float64)
            out = part if out is None else np.concatenate([out, part])
    return np.squeeze(out) if out is not None else np.array([], np.float64)
