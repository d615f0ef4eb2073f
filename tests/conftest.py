"""Shared test helpers. Fixture data built here is made up for tests and says so; it is never data."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parent.parent
# Each test file's seconds in a recorded run (setup, call and teardown of its tests, summed), read to run the heaviest
# files first; `make test-durations` records them again (GPUPRED_RECORD_DURATIONS=1 merges a run's into the file).
DURATIONS = Path(__file__).with_name("durations.json")
_SPENT: dict[str, float] = {}  # this run's seconds per test file, where it records them


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heaviest test files first: pytest-xdist hands a worker one file at a time in collection order (the Makefile
    turns off its reordering by number of tests), so the longest files start first and the workers end together,
    rather than one of them running a notebook file alone at the end. Files the record lacks run last, as collected;
    a file's own tests keep their order."""
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    items.sort(key=lambda item: -seconds.get(item.nodeid.partition("::")[0], 0.0))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    file = report.nodeid.partition("::")[0]
    _SPENT[file] = _SPENT.get(file, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With GPUPRED_RECORD_DURATIONS set, merge this run's seconds per file into ``DURATIONS`` (in the process that
    ran the session, not in xdist's workers)."""
    if not os.environ.get("GPUPRED_RECORD_DURATIONS") or hasattr(session.config, "workerinput") or not _SPENT:
        return
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    recorded.update({file: round(seconds, 1) for file, seconds in _SPENT.items()})
    DURATIONS.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
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
