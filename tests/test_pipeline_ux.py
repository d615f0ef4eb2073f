"""What an analyst sees after `make all`: one readable line for a skipped notebook, a pipeline.json without absolute
paths or timings, figures not rewritten when nothing changed, no progress-bar debris or warnings in saved outputs,
and the layout a fresh clone promises. The notebooks here are FIXTURES written by the tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import nbformat
import pytest

from gpupred import config
from gpupred.pipeline import run_pipeline

REPO = Path(__file__).resolve().parent.parent


def _notebook(path: Path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("n: int = 1  # fixture parameter")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *(nbformat.v4.new_code_cell(s) for s in sources)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _outputs(nb_path: Path) -> list[dict]:
    nb = nbformat.read(nb_path, as_version=4)
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


@pytest.mark.notebook
def test_skipped_notebook_shows_one_line_and_summary_is_stable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(config, "ROOT", tmp_path)
    folder = tmp_path / "nb"
    folder.mkdir()
    missing = tmp_path / "data" / "raw"
    _notebook(folder / "01-needs-data.ipynb", "from gpupred.errors import MissingInput",
              f"raise MissingInput('no runs in data/raw yet ({missing})')", "print('never here')")
    out = tmp_path / "reports"
    results = run_pipeline(out_dir=out, folder=folder)
    assert results[0].status == "skipped" and results[0].reason == "no runs in data/raw yet (data/raw)"
    nb = nbformat.read(out / "01-needs-data.ipynb", as_version=4)
    outputs = _outputs(out / "01-needs-data.ipynb")
    assert not [o for o in outputs if o["output_type"] == "error"]  # no traceback
    assert not [c for c in nb.cells if "papermill-error-cell-tag" in c.get("metadata", {}).get("tags", [])]  # no banner
    assert [o["text"] for o in outputs if o["output_type"] == "stream"] == ["Skipped: no runs in data/raw yet (data/raw)\n"]
    html = (out / "01-needs-data.html").read_text()
    assert "Traceback" not in html and "An Exception was encountered" not in html
    summary = json.loads((out / "pipeline.json").read_text())
    assert summary == [{"notebook": "01-needs-data.ipynb", "status": "skipped", "reason": "no runs in data/raw yet (data/raw)"}]
    assert str(tmp_path) not in (out / "pipeline.json").read_text()
    assert "without encryption" not in capfd.readouterr().err  # the kernel's start leaves the console quiet


@pytest.mark.notebook
def test_rerun_rewrites_no_figure_and_draws_no_progress_bars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A figure with random jitter (as seaborn's stripplot draws) is the same file after a second run."""
    monkeypatch.setenv("GPUPRED_ROOT", str(tmp_path))
    folder = tmp_path / "nb"
    folder.mkdir()
    _notebook(folder / "01-plot.ipynb",
              "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
              "from gpupred import reports",
              "for _ in reports.progress_bar(iterable=range(3)):\n    pass\n"
              "fig, ax = plt.subplots()\nax.scatter(np.random.uniform(size=50), np.random.uniform(size=50))\n"
              f"reports.save_figure(fig, 'fixture-jitter', folder=__import__('pathlib').Path({str(tmp_path / 'figs')!r}))")
    out = tmp_path / "reports"
    run_pipeline(out_dir=out, folder=folder)
    figure = tmp_path / "figs" / "fixture-jitter.png"
    first = (figure.read_bytes(), figure.stat().st_mtime_ns)
    run_pipeline(out_dir=out, folder=folder)
    assert (figure.read_bytes(), figure.stat().st_mtime_ns) == first
    assert not [o for o in _outputs(out / "01-plot.ipynb") if o.get("name") == "stderr"]  # no bar debris
    cells = nbformat.read(out / "01-plot.ipynb", as_version=4).cells
    assert "gpupred-seed" not in json.dumps([c.get("metadata") for c in cells])  # the seeding cell is not shown


@pytest.mark.notebook
def test_notebook_02_output_has_no_debris_or_warnings(run_notebook: Callable[..., Path], tmp_path: Path) -> None:
    shutil.copytree(REPO / "data" / "graphs", tmp_path / "data" / "graphs")
    executed = run_notebook("02-build-features", {"limit": 4, "families": "mlp", "workers": 1})
    streams = [o for o in _outputs(executed) if o["output_type"] == "stream"]
    assert not [o for o in streams if o["name"] == "stderr"], [o["text"] for o in streams if o["name"] == "stderr"]
    text = "".join(o["text"] for o in streams)
    assert "Warning" not in text and "it/s" not in text and "\r" not in text


def test_fresh_clone_has_data_folders_with_readmes() -> None:
    for folder in ("raw", "processed"):
        readme = REPO / "data" / folder / "README.md"
        assert readme.is_file() and len(readme.read_text().splitlines()) >= 3
        if (REPO / ".git").exists():  # tracked, not ignored (data/processed/ is otherwise ignored)
            ignored = subprocess.run(["git", "check-ignore", "-q", str(readme)], cwd=REPO)
            assert ignored.returncode == 1, f"{readme} is ignored by .gitignore"
    probe = REPO / "data" / "processed" / "graph_features.parquet"
    assert subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=REPO).returncode == 0
