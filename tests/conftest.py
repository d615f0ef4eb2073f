"""Shared test helpers. Fixture data built here is made up for tests and says so; it is never data."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def run_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Run ``notebooks/<name>.ipynb`` through papermill with ``GPUPRED_ROOT`` set to a temporary tree.

    The tree starts with ``pyproject.toml`` and ``notebooks/``; a test writes its fixture inputs under
    ``tmp_path`` (``data/raw``, ``data/processed``...) before calling. Returns the executed notebook.
    """

    def _run(name: str, parameters: dict[str, Any] | None = None, allow_missing_input: bool = False) -> Path:
        from gpupred.pipeline import run_notebook as _run_nb

        shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
        if not (tmp_path / "notebooks").exists():
            shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")
        monkeypatch.setenv("GPUPRED_ROOT", str(tmp_path))
        monkeypatch.setenv("MPLBACKEND", "Agg")
        result = _run_nb(tmp_path / "notebooks" / f"{name}.ipynb", parameters, out_dir=tmp_path / "reports")
        if not allow_missing_input:
            assert result.status == "ok", result
        return tmp_path / "reports" / f"{name}.ipynb"

    return _run
