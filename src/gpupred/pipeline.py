"""The notebook pipeline: run every numbered notebook in order through papermill into reports/.

A notebook whose input does not exist yet (no real measurements in data/raw, say) raises
:class:`gpupred.errors.MissingInput` in its first cells; the pipeline records it as skipped, with the reason, and
goes on. Its executed copy then shows one line (``Skipped: <reason>``) where papermill would leave an
exception banner and a traceback. Any other failure stops the pipeline with the notebook's name and
the error.

Re-running on unchanged inputs changes nothing that is committed: every notebook starts from the same
random state (a seeding cell is run first and removed from the executed copy, so jittered plots redraw
identically), :func:`gpupred.reports.save_figure` leaves a figure file alone when its bytes would not
change, and ``reports/pipeline.json`` holds statuses and reasons with paths relative to the project
root (no timings: they differ on every run; the console line shows them). Kernels run with
:data:`KERNEL_ENV`: progress bars off (``GPUPRED_PROGRESS=0``, so saved outputs hold no bar debris), one
BLAS/OpenMP thread and a fixed hash seed (figures independent of the machine's core count).
"""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.files import write_if_changed
from gpupred.reports import update_metrics


@dataclass
class NotebookResult:
    """What happened to one notebook."""

    notebook: str
    status: str  # "ok", "skipped" or "failed"
    seconds: float
    reason: str = ""

    def summary(self) -> dict[str, str]:
        """What ``reports/pipeline.json`` keeps: name, status, reason (no timing, which differs on every run)."""
        return {"notebook": self.notebook, "status": self.status, "reason": self.reason}


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


SEED_TAG = "gpupred-seed"  # the seeding cell the pipeline runs first and removes from the executed copy
SEED_SOURCE = "import random as _r, numpy as _np\n_r.seed(0); _np.random.seed(0); del _r, _np"
PAPERMILL_ERROR_TAG = "papermill-error-cell-tag"


def relative_paths(text: str) -> str:
    """``text`` with absolute paths under the project root written relative to it."""
    root = str(config.ROOT)
    return text.replace(root + os.sep, "").replace(root, ".")


def _seeded(path: Path) -> Any:
    """The notebook with a seeding cell in front (tagged, removed again after execution)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cell = nbformat.v4.new_code_cell(SEED_SOURCE)
    cell.metadata["tags"] = [SEED_TAG]
    nb.cells.insert(0, cell)
    return nb


def _tidy(executed: Path, reason: str | None) -> None:
    """Drop the seeding cell; for a skipped notebook, replace papermill's banners and traceback by one line."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    cells = []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if SEED_TAG in tags or (reason is not None and PAPERMILL_ERROR_TAG in tags):
            continue
        if reason is not None and cell.cell_type == "code":
            outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "error"]
            if len(outputs) != len(cell.get("outputs", [])):
                outputs.append(nbformat.v4.new_output("stream", name="stdout", text=f"Skipped: {reason}\n"))
                cell.outputs = outputs
        cells.append(cell)
    nb.cells = cells
    nbformat.write(nb, executed)


def kernel_manager() -> type:
    """jupyter_client's KernelManager asking for an encrypted kernel channel where both ends offer one.

    ipykernel 7.4 prints a warning on every start over plain TCP ("Kernel is running over TCP without
    encryption"): eight lines of noise in ``make all``. ``auto`` encrypts when the kernel supports it and
    falls back otherwise; a jupyter_client without the setting gets its plain manager.
    """
    from jupyter_client.manager import KernelManager

    if "transport_encryption" not in KernelManager.class_trait_names():
        return KernelManager

    class EncryptedKernelManager(KernelManager):
        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport_encryption", "auto")
            super().__init__(**kwargs)

    return EncryptedKernelManager


# What every notebook kernel inherits: no progress-bar debris in saved outputs; one BLAS/OpenMP thread and a fixed
# hash seed, so that no figure depends on the machine's core count or on the iteration order of a set of strings.
KERNEL_ENV: dict[str, str] = {"GPUPRED_PROGRESS": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                              "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


@contextmanager
def kernel_environment() -> Iterator[None]:
    """Set :data:`KERNEL_ENV` in this process's environment (a kernel started inside inherits it), then restore it."""
    saved = {k: os.environ.get(k) for k in KERNEL_ENV}
    os.environ.update(KERNEL_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_notebook(path: Path, parameters: dict[str, Any] | None = None, out_dir: Path | None = None) -> NotebookResult:
    """Execute one notebook with papermill into ``out_dir`` (.ipynb and .html)."""
    import logging

    import papermill as pm

    # papermill logs a warning per typed parameter line it cannot parse for --help (harmless): keep the console readable
    logging.getLogger("papermill").setLevel(logging.ERROR)
    out_dir = out_dir or config.REPORTS
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = out_dir / path.name
    start = time.perf_counter()
    try:
        with kernel_environment():
            pm.execute_notebook(
                _seeded(path), str(executed), parameters=parameters or {}, cwd=str(path.parent), progress_bar=False,
                kernel_name="python3", kernel_manager_class=kernel_manager(),
            )
        status, reason = "ok", ""
    except pm.PapermillExecutionError as err:
        if err.ename != "MissingInput":
            _tidy(executed, None)
            _to_html(executed)
            raise GpupredError(f"{path.name} failed: {err.ename}: {err.evalue} (executed copy: {executed})") from None
        status, reason = "skipped", relative_paths(str(err.evalue))
    _tidy(executed, reason if status == "skipped" else None)
    _to_html(executed)
    return NotebookResult(path.name, status, round(time.perf_counter() - start, 2), reason)


@contextmanager
def fresh_metrics(path: Path, enabled: bool = True) -> Iterator[None]:
    """Start ``path`` (the metrics file) empty for the block; if the block fails, merge the old keys back under the
    new ones (nothing of the last good run is lost to a failed one)."""
    old = path.read_bytes() if enabled and path.exists() else None
    if old is not None:
        path.unlink()
    try:
        yield
    except BaseException:
        if old is not None:
            new = json.loads(path.read_text()) if path.exists() else {}
            update_metrics({**json.loads(old), **new}, path)  # the failed run's keys win over the old ones
        raise


def run_pipeline(
    only: list[str] | None = None, out_dir: Path | None = None, folder: Path | None = None
) -> list[NotebookResult]:
    """Run the numbered notebooks (or those whose names start with one of ``only``) in order.

    ``reports/pipeline.json`` gets one entry per notebook run; with ``only``, the other notebooks' entries
    from the last run are kept. A whole run rebuilds ``metrics.json`` in ``out_dir`` from nothing, so a key no
    notebook writes any more does not linger; if a notebook fails, the old keys it did not rewrite come back.
    """
    out_dir = out_dir or config.REPORTS
    results = []
    found = notebooks(folder)
    order = [nb.name for nb in found]
    with fresh_metrics(out_dir / "metrics.json", enabled=not only):
        for nb in found:
            if only and not any(nb.name.startswith(o) for o in only):
                continue
            result = run_notebook(nb, out_dir=out_dir)
            print(f"{result.notebook:32s} {result.status:8s} {result.seconds:7.1f} s  {result.reason}", flush=True)
            results.append(result)
    summary = out_dir / "pipeline.json"
    entries = {r.notebook: r.summary() for r in results}
    if only and summary.exists():
        kept = {e["notebook"]: e for e in json.loads(summary.read_text()) if e.get("notebook") in order}
        entries = {name: entries.get(name) or kept[name] for name in order if name in entries or name in kept}
    write_if_changed(summary, (json.dumps(list(entries.values()), indent=2) + "\n").encode())
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
