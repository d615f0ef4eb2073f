"""The notebook runner: order, skipped notebooks (missing input), failures named, HTML written."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from gpupred.errors import GpupredError
from gpupred.pipeline import notebooks, run_pipeline


def _notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("n: int = 1  # fixture parameter")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.mark.notebook
def test_pipeline_runs_in_order_and_skips_missing_input(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    _notebook(folder / "02-second.ipynb", "from gpupred.errors import MissingInput\nraise MissingInput('no runs in data/raw yet')")
    _notebook(folder / "01-first.ipynb", "print(n * 2)")
    _notebook(folder / "scratch.ipynb", "raise SystemExit(1)")  # not numbered: never run
    assert [p.name for p in notebooks(folder)] == ["01-first.ipynb", "02-second.ipynb"]

    out = tmp_path / "reports"
    results = run_pipeline(out_dir=out, folder=folder)
    assert [(r.notebook, r.status) for r in results] == [("01-first.ipynb", "ok"), ("02-second.ipynb", "skipped")]
    assert "no runs in data/raw yet" in results[1].reason
    assert (out / "01-first.html").exists() and (out / "02-second.html").exists()
    assert json.loads((out / "pipeline.json").read_text())[1]["status"] == "skipped"

    # --only reruns one notebook and keeps the others' entries, in notebook order
    _notebook(folder / "02-second.ipynb", "print('now it runs')")
    assert [r.notebook for r in run_pipeline(only=["02"], out_dir=out, folder=folder)] == ["02-second.ipynb"]
    summary = json.loads((out / "pipeline.json").read_text())
    assert [(e["notebook"], e["status"]) for e in summary] == [("01-first.ipynb", "ok"), ("02-second.ipynb", "ok")]


@pytest.mark.notebook
def test_pipeline_failure_names_the_notebook(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    _notebook(folder / "01-broken.ipynb", "raise ValueError('bad column')")
    with pytest.raises(GpupredError, match=r"01-broken.ipynb failed: ValueError: bad column"):
        run_pipeline(out_dir=tmp_path / "reports", folder=folder)


def test_a_whole_run_rebuilds_the_metrics_and_a_failed_one_keeps_the_old_keys(tmp_path: Path) -> None:
    from gpupred.pipeline import fresh_metrics
    from gpupred.reports import update_metrics

    path = tmp_path / "metrics.json"
    update_metrics({"stale": 1, "kept": 1}, path)
    with fresh_metrics(path):
        update_metrics({"kept": 2}, path)
    assert json.loads(path.read_text()) == {"kept": 2}  # a key no notebook writes any more is gone

    with pytest.raises(RuntimeError), fresh_metrics(path):
        update_metrics({"new": 3}, path)
        raise RuntimeError("notebook 05 failed")
    assert json.loads(path.read_text()) == {"kept": 2, "new": 3}  # the failed run loses nothing of the last one

    with fresh_metrics(path, enabled=False):  # a run of some notebooks (--only) merges
        update_metrics({"other": 4}, path)
    assert json.loads(path.read_text()) == {"kept": 2, "new": 3, "other": 4}
