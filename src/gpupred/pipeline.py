"""The notebook pipeline: run every numbered notebook in order through papermill into reports/.

A notebook whose input does not exist yet (no real measurements in data/raw, say) raises
:class:`MissingInput` in its first cells; the pipeline records it as skipped, with the reason, and
goes on. Any other failure stops the pipeline with the notebook's name and the error.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpupred import config
from gpupred.errors import GpupredError


class MissingInput(GpupredError):
    """A notebook's input is not there yet; the pipeline skips the notebook and says why."""


@dataclass
class NotebookResult:
    """What happened to one notebook."""

    notebook: str
    status: str  # "ok", "skipped" or "failed"
    seconds: float
    reason: str = ""


def notebooks(folder: Path | None = None) -> list[Path]:
    """The numbered notebooks (``NN-name.ipynb``) in numeric order."""
    folder = folder or config.NOTEBOOKS
    return sorted(p for p in folder.glob("*.ipynb") if re.match(r"^\d\d-", p.name))


def _to_html(executed: Path) -> None:
    import nbconvert
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    executed.with_suffix(".html").write_text(body)


def run_notebook(path: Path, parameters: dict[str, Any] | None = None, out_dir: Path | None = None) -> NotebookResult:
    """Execute one notebook with papermill into ``out_dir`` (.ipynb and .html)."""
    import papermill as pm

    out_dir = out_dir or config.REPORTS
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = out_dir / path.name
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            str(path), str(executed), parameters=parameters or {}, cwd=str(path.parent), progress_bar=False,
            kernel_name="python3",
        )
        status, reason = "ok", ""
    except pm.PapermillExecutionError as err:
        if err.ename != "MissingInput":
            _to_html(executed)
            raise GpupredError(f"{path.name} failed: {err.ename}: {err.evalue} (executed copy: {executed})") from None
        status, reason = "skipped", str(err.evalue)
    _to_html(executed)
    return NotebookResult(path.name, status, round(time.perf_counter() - start, 2), reason)


def run_pipeline(
    only: list[str] | None = None, out_dir: Path | None = None, folder: Path | None = None
) -> list[NotebookResult]:
    """Run the numbered notebooks (or those whose names start with one of ``only``) in order."""
    out_dir = out_dir or config.REPORTS
    results = []
    for nb in notebooks(folder):
        if only and not any(nb.name.startswith(o) for o in only):
            continue
        result = run_notebook(nb, out_dir=out_dir)
        print(f"{result.notebook:32s} {result.status:8s} {result.seconds:7.1f} s  {result.reason}", flush=True)
        results.append(result)
    summary = out_dir / "pipeline.json"
    summary.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return results


def register(app: Any) -> None:
    """Add ``gpupred pipeline`` to the CLI."""
    import typer

    @app.command("pipeline")
    def pipeline_cmd(
        only: list[str] = typer.Option(None, "--only", help="Run only notebooks whose names start with this (repeatable)."),
    ) -> None:
        """Run every numbered notebook in order through papermill into reports/ (executed .ipynb and HTML)."""
        results = run_pipeline(only=only)
        skipped = [r for r in results if r.status == "skipped"]
        print(f"{len(results) - len(skipped)} notebooks ran, {len(skipped)} skipped (missing input); summary in reports/pipeline.json")
