"""Shared test helpers. Fixture data built here is made up for tests and says so; it is never data."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parent.parent
_EXPORTED: list[Path] = []  # this test process's folder of graphs the notebooks exported (made on first use)


def _exported_graphs() -> Path:
    """The folder where this process keeps the ONNX graphs that notebook runs exported (FIXTURE workloads the committed
    store lacks): an export is deterministic, so each one is made once per process, not once per notebook run."""
    if not _EXPORTED:
        _EXPORTED.append(Path(tempfile.mkdtemp(prefix="gpupred-test-exports-")))
        atexit.register(shutil.rmtree, _EXPORTED[0], True)
    return _EXPORTED[0]


def run_notebook_in(root: Path, monkeypatch: pytest.MonkeyPatch, name: str, parameters: dict[str, Any] | None = None,
                    allow_missing_input: bool = False) -> Path:
    """Run ``notebooks/<name>.ipynb`` through papermill with ``GPUPRED_ROOT`` set to the temporary tree ``root``.

    The tree gets ``pyproject.toml``, ``notebooks/`` and a copy of the committed graph store (``data/graphs``, as
    a clone has it: without it every graph the step model reads is exported with torch, half a minute per
    notebook); fixture inputs go under ``root`` (``data/raw``, ``data/processed``...) before the call. Returns the
    executed notebook.
    """
    from gpupred.pipeline import run_notebook as _run_nb

    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    if not (root / "notebooks").exists():
        shutil.copytree(REPO / "notebooks", root / "notebooks")
    if not (root / "data" / "graphs").exists():
        shutil.copytree(REPO / "data" / "graphs", root / "data" / "graphs")
    cache = root / ".cache" / "onnx"  # config.ONNX_CACHE in the tree
    shutil.copytree(_exported_graphs(), cache, dirs_exist_ok=True)
    monkeypatch.setenv("GPUPRED_ROOT", str(root))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    result = _run_nb(root / "notebooks" / f"{name}.ipynb", parameters, out_dir=root / "reports")
    if cache.is_dir():
        shutil.copytree(cache, _exported_graphs(), dirs_exist_ok=True)
    if not allow_missing_input:
        assert result.status == "ok", result
    return root / "reports" / f"{name}.ipynb"


@pytest.fixture
def run_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``run_notebook(name, parameters, allow_missing_input)``: :func:`run_notebook_in` on this test's ``tmp_path``."""

    def _run(name: str, parameters: dict[str, Any] | None = None, allow_missing_input: bool = False) -> Path:
        return run_notebook_in(tmp_path, monkeypatch, name, parameters, allow_missing_input)

    return _run


@pytest.fixture(autouse=True)
def _no_user_calibrations(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Predictions look for this user's calibrations (gpupred calibrate): tests see an empty folder of their own."""
    monkeypatch.setenv("GPUPRED_CALIBRATION_DIR", str(tmp_path_factory.mktemp("calibrations")))
