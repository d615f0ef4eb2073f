"""Each notebook has one source: ``notebooks/NN-name.py`` (jupytext percent); its committed ``.ipynb`` must match it.

The ``.ipynb`` files are kept for analysts and papermill batch jobs, so a pair that drifts apart (a fix made in the
``.ipynb`` only, which the next ``jupytext`` sync silently undoes) fails here. Regenerate a pair with
``jupytext --update --to ipynb notebooks/NN-name.py``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from gpupred import config

SOURCES = sorted(config.NOTEBOOKS.glob("[0-9][0-9]-*.py"))


def cells(nb: nbformat.NotebookNode) -> list[tuple[str, str, list[str]]]:
    """(type, source, sorted tags) of every cell: what a pair must agree on."""
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]


def test_every_notebook_has_a_source_and_a_pair() -> None:
    pairs = {p.stem for p in config.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")}
    assert SOURCES and {p.stem for p in SOURCES} == pairs


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_ipynb_matches_its_py_source(source: Path) -> None:
    import jupytext

    py, ipynb = jupytext.read(source), nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    want, have = cells(py), cells(ipynb)
    differ = [i for i, (a, b) in enumerate(zip(want, have)) if a != b]
    assert len(want) == len(have) and not differ, (
        f"{source.with_suffix('.ipynb').name} differs from {source.name} (cells {differ or 'count'}): "
        f"run `jupytext --update --to ipynb {source.relative_to(config.ROOT)}`")
    assert not any(c.get("outputs") for c in ipynb.cells), f"{source.with_suffix('.ipynb').name} is committed with outputs"
