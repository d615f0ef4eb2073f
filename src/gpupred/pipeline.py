"""The notebook pipeline: run every numbered notebook through papermill into reports/, each after the notebooks that
write its inputs (:data:`STAGES`), two at once on a machine with two cores or more.

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
BLAS/OpenMP thread, a fixed hash seed and, on x86-64, numpy's and OpenBLAS's AVX2 code paths (figures independent
of the machine's core count and of its vector instructions: see :data:`PINNED_KERNELS`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.files import write_if_changed
from gpupred.learn.parallel import CORES_ENV, cores as machine_cores
from gpupred.digest import HEADLINES, summary_entries
from gpupred.reports import metrics_path, read_metrics


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


def notebook_title(nb: Any, fallback: str) -> str:
    """A notebook's title: its first markdown heading without the ``#`` marks (``fallback`` when it has none)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in str(cell.source).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def to_html(executed: Path) -> None:
    """Write the executed notebook's HTML page beside it, titled by the notebook's first heading."""
    import nbconvert
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    title = notebook_title(nb, executed.stem)
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb, resources={"metadata": {"name": title}})
    executed.with_suffix(".html").write_text(body)


SEED_TAG = "gpupred-seed"  # the seeding cell the pipeline runs first and removes from the executed copy
SEED_SOURCE = ("import random as _r, numpy as _np\n_r.seed(0); _np.random.seed(0); del _r, _np\n"
               "import gpupred.reports as _g\n_g.notebook_display(); del _g")  # and tables shown whole, rounded
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


def kernel_manager(env: dict[str, str] | None = None) -> type:
    """jupyter_client's KernelManager asking for an encrypted kernel channel where both ends offer one, starting its
    kernel with ``env`` added to this process's environment.

    ipykernel 7.4 prints a warning on every start over plain TCP ("Kernel is running over TCP without
    encryption"): eight lines of noise in ``make all``. ``auto`` encrypts when the kernel supports it and
    falls back otherwise; a jupyter_client without the setting gets plain channels. ``env`` is per kernel: the
    pipeline starts notebooks from several threads of one process, whose own environment they share.
    """
    from jupyter_client.manager import KernelManager

    encrypt = "transport_encryption" in KernelManager.class_trait_names()
    extra = dict(env or {})

    class PipelineKernelManager(KernelManager):
        def __init__(self, **kwargs: Any) -> None:
            if encrypt:
                kwargs.setdefault("transport_encryption", "auto")
            super().__init__(**kwargs)

        def start_kernel(self, **kw: Any) -> None:
            if extra:
                kw["env"] = {**kw.get("env", os.environ), **extra}
            super().start_kernel(**kw)

    return PipelineKernelManager


# The same numeric code paths on every x86-64 machine with AVX2 (nearly every one in use). numpy picks its SIMD
# kernels at run time by the CPU's features, and OpenBLAS its core type: with AVX-512, np.log, exp, log1p and power
# differ from their AVX2 results in the last bit, and dot products with OpenBLAS's SkylakeX kernels from its Haswell
# ones. The step model's constants fit stops where its trust region's steps stall on a flat, kinked objective, so
# last-bit noise in its residuals moved fitted constants by up to 3% (A100 40GB: launch_s 25.9 -> 26.6 us under
# 1e-15 relative noise) and a fresh clone's `make all` on another machine moved headline figures by up to 0.6%.
# Elsewhere (ARM, say) these names mean nothing and are not set: that machine's figures are its own.
PINNED_KERNELS: dict[str, str] = {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
                                  "OPENBLAS_CORETYPE": "Haswell"}

# What every notebook kernel inherits: no progress-bar debris in saved outputs; one BLAS/OpenMP thread and a fixed
# hash seed, so that no figure depends on the machine's core count or on the iteration order of a set of strings;
# on x86-64, PINNED_KERNELS, so that none depends on the machine's vector instructions either.
KERNEL_ENV: dict[str, str] = {"GPUPRED_PROGRESS": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                              "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
                              **(PINNED_KERNELS if platform.machine().lower() in ("x86_64", "amd64") else {})}


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


def run_notebook(path: Path, parameters: dict[str, Any] | None = None, out_dir: Path | None = None,
                 cores: int | None = None) -> NotebookResult:
    """Execute one notebook with papermill into ``out_dir`` (.ipynb and .html); ``cores``: what its kernel may use
    (:data:`gpupred.learn.parallel.CORES_ENV`; every core when None)."""
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
                kernel_name="python3", kernel_manager_class=kernel_manager({CORES_ENV: str(cores)} if cores else None),
            )
        status, reason = "ok", ""
    except pm.PapermillExecutionError as err:
        if err.ename != "MissingInput":
            _tidy(executed, None)
            to_html(executed)
            raise GpupredError(f"{path.name} failed: {err.ename}: {err.evalue} (executed copy: {executed})") from None
        status, reason = "skipped", relative_paths(str(err.evalue))
    _tidy(executed, reason if status == "skipped" else None)
    add_results(executed, out_dir / "metrics", reason if status == "skipped" else None)
    to_html(executed)
    return NotebookResult(path.name, status, round(time.perf_counter() - start, 2), reason)


@dataclass(frozen=True)
class Stage:
    """What one notebook reads and writes between stages: names of :mod:`gpupred.config` paths. ``optional``: inputs
    it reads when they are there and does without otherwise (it runs after their writer, which need not succeed);
    ``seconds``: about how long it runs on the 2-core reference machine, two notebooks at once (a fresh clone's
    ``make all`` on 2026-12-01: 613 s in all, the light install included), only to start long chains first."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    seconds: float = 60.0


# Each numbered notebook's inputs and outputs (tests/test_pipeline.py checks every notebook has one). A notebook's
# figures of merit (reports/metrics/<notebook>.json) and figures are reports, never another stage's input.
STAGES: dict[str, Stage] = {
    "01-collect-profiles": Stage(("RAW",), seconds=19),
    "02-build-features": Stage(("RAW", "GRAPHS"), ("GRAPH_FEATURES", "DATASET", "JOB_KERNELS", "JOB_TERMS"), seconds=46),
    "03-compare-regressors": Stage(("DATASET", "JOB_KERNELS"), ("OOF_PREDICTIONS",), seconds=322),
    "03-physics-first": Stage(("DATASET", "JOB_KERNELS", "JOB_TERMS"), ("MODEL_CHOICE",), seconds=305),
    "04-explain": Stage(("DATASET", "MODEL_CHOICE", "JOB_KERNELS"), seconds=93),
    "05-memory": Stage(("DATASET", "JOB_TERMS"), seconds=40),
    "06-colocation": Stage(("DATASET", "OOF_PREDICTIONS"), ("SLOWDOWN_CHOICE",), seconds=72),
    "07-scheduling-sim": Stage(("DATASET", "OOF_PREDICTIONS"), seconds=124),
    "08-export-predictor": Stage(("DATASET", "MODEL_CHOICE", "JOB_KERNELS", "JOB_TERMS"),
                                 ("PREDICTOR", "PREDICTOR_NONCOMMERCIAL"), ("SLOWDOWN_CHOICE", "OOF_PREDICTIONS"),
                                 seconds=38),
    "09-fusion-advisor": Stage(("PREDICTOR", "GRAPHS", "RAW"), seconds=21),
}


def stage_of(notebook: str) -> Stage:
    """The declared inputs and outputs of a notebook (``NN-name`` or ``NN-name.ipynb``)."""
    name = notebook.removesuffix(".ipynb")
    if name not in STAGES:
        raise GpupredError(f"{name}: no inputs and outputs declared; add it to gpupred.pipeline.STAGES")
    return STAGES[name]


def producers() -> dict[str, str]:
    """Which notebook writes each declared output (a config name)."""
    return {out: nb for nb, stage in STAGES.items() for out in stage.outputs}


def needed(names: list[str]) -> list[str]:
    """``names`` and, before each, the notebooks that write an input of it that is not on disk yet, in order."""
    made_by = producers()
    wanted: set[str] = set()

    def visit(name: str) -> None:
        if name in wanted:
            return
        wanted.add(name)
        for key in STAGES.get(name, Stage(())).inputs:
            if key in made_by and not getattr(config, key).exists():
                visit(made_by[key])

    for name in names:
        visit(name)
    return sorted(wanted)


def check_inputs(notebook: str) -> None:
    """Refuse, in one line, a notebook whose declared input is still missing after what writes it has run."""
    made_by = producers()
    for key in stage_of(notebook).inputs:
        path = getattr(config, key)
        if key in made_by and not path.exists():
            raise GpupredError(f"{notebook} needs {relative_paths(str(path))}, which {made_by[key]} writes and has not "
                               f"(it was skipped or failed): see reports/pipeline.json")


@contextmanager
def fresh_metrics(notebook: str, folder: Path | None = None) -> Iterator[None]:
    """A notebook's metrics file starts empty for its run (no figure of an earlier run lingers); if the run fails,
    the old file comes back (nothing of the last good run is lost to a failed one)."""
    path = metrics_path(notebook, folder)
    old = path.read_bytes() if path.exists() else None
    path.unlink(missing_ok=True)
    try:
        yield
    except BaseException:
        if old is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(old)
        raise


def write_summary(folder: Path | None = None, path: Path | None = None) -> dict[str, Any]:
    """``reports/summary.json``: every headline figure (``HEADLINES``) from its notebook's metrics, ``None`` where
    that notebook has not written it (skipped for want of input), rounded to four significant digits beside its
    meaning, unit and held-out split (:func:`gpupred.digest.summary_entries`)."""
    summary = summary_entries({key: read_metrics(notebook, folder).get(metric) for key, notebook, metric in HEADLINES})
    write_if_changed(Path(path or config.SUMMARY), (json.dumps(summary, indent=2, ensure_ascii=False) + "\n").encode())
    return summary


def add_results(executed: Path, metrics_folder: Path, skipped: str | None = None) -> None:
    """Open the executed notebook with its Results block (:func:`gpupred.digest.results_markdown`), after its title."""
    import nbformat

    from gpupred.digest import results_markdown

    nb = nbformat.read(executed, as_version=4)
    cell = nbformat.v4.new_markdown_cell(results_markdown(executed.stem, metrics_folder, skipped))
    first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    nb.cells.insert(first + 1, cell)
    nbformat.write(nb, executed)


def waits_for(chosen: list[str]) -> dict[str, set[str]]:
    """Per notebook of ``chosen`` (stems, in numbered order), the chosen notebooks it must run after: those writing
    one of its inputs, required or optional. A notebook without a declared stage runs after every earlier one, and
    every later one after it."""
    made_by = producers()
    out: dict[str, set[str]] = {}
    for i, name in enumerate(chosen):
        stage = STAGES.get(name)
        if stage is None:
            out[name] = set(chosen[:i])
            continue
        keys = (*stage.inputs, *stage.optional)
        out[name] = {made_by[k] for k in keys if made_by.get(k) in chosen[:i]}
        out[name] |= {n for n in chosen[:i] if n not in STAGES}
    return out


def critical_seconds(chosen: list[str], after: dict[str, set[str]]) -> dict[str, float]:
    """Per notebook, its ``Stage.seconds`` plus the longest chain of chosen notebooks that wait on it."""
    longest: dict[str, float] = {}
    for name in reversed(chosen):
        below = [longest[n] for n in chosen if name in after[n]]
        longest[name] = STAGES.get(name, Stage(())).seconds + max(below, default=0.0)
    return longest


def _run_one(nb: Path, out_dir: Path, check: bool, cores: int | None = None) -> NotebookResult:
    """One notebook, its metrics file rebuilt from nothing (``check``: refuse it first if an input is missing), its
    kernel given ``cores``."""
    if check and nb.stem in STAGES:
        check_inputs(nb.stem)
    with fresh_metrics(nb.stem, out_dir / "metrics"):
        result = run_notebook(nb, out_dir=out_dir, cores=cores)
    print(f"{result.notebook:32s} {result.status:8s} {result.seconds:7.1f} s  {result.reason}", flush=True)
    return result


def core_share(cores: int, running: int) -> int:
    """The cores a notebook started now may use while ``running`` notebooks (itself included) run: an equal share,
    at least one. Two notebooks on two cores get one each, so that neither spreads its fits over processes that only
    take turns on the other's core (on the 2-core machine the notebooks after 02 ran 1,217 s in all against 1,419 s
    with two processes each, a fresh clone's ``make all`` each)."""
    return max(1, cores // max(1, running))


def run_stages(chosen: list[Path], out_dir: Path, jobs: int = 1, check: bool = False) -> list[NotebookResult]:
    """Run ``chosen`` (numbered order) on ``jobs`` notebooks at once, each as soon as what it waits for
    (:func:`waits_for`) has run, the longest remaining chain first, its kernel given its share of the cores at its
    start (:func:`core_share`); results in numbered order. The first failure starts nothing more, lets the running
    notebooks finish, and is raised."""
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    names = [nb.stem for nb in chosen]
    by_name = dict(zip(names, chosen))
    after = waits_for(names)
    rank = critical_seconds(names, after)
    done: dict[str, NotebookResult] = {}
    running: dict[Future[NotebookResult], str] = {}
    failure: BaseException | None = None
    with kernel_environment(), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        while True:
            started = set(done) | set(running.values())
            ready = sorted((n for n in names if n not in started and after[n] <= set(done)),
                           key=lambda n: (-rank[n], names.index(n)))
            starting = min(len(ready), max(1, jobs) - len(running)) if failure is None else 0
            share = core_share(machine_cores(), len(running) + starting)
            for name in ready[:max(0, starting)]:
                running[pool.submit(_run_one, by_name[name], out_dir, check, share)] = name
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                name = running.pop(future)
                try:
                    done[name] = future.result()
                except BaseException as err:  # noqa: BLE001 - raised below, once the running notebooks are done
                    failure = failure or err
    if failure is not None:
        raise failure
    return [done[n] for n in names]


def run_pipeline(
    only: list[str] | None = None, out_dir: Path | None = None, folder: Path | None = None, jobs: int = 1
) -> list[NotebookResult]:
    """Run the numbered notebooks (:func:`run_stages`: ``jobs`` at once, each after what writes its inputs); with
    ``only`` (name prefixes), those and what they need first (:func:`needed`: the notebooks writing an input of theirs
    that is not on disk), refusing in one line one whose input is still missing.

    ``reports/pipeline.json`` gets one entry per notebook run; with ``only``, the other notebooks' entries from the
    last run are kept. Each notebook's metrics file is rebuilt from nothing by its run (kept as it was if the run
    fails); ``reports/summary.json`` is rewritten after a whole run. The figures do not depend on ``jobs``: every
    notebook reads only what the notebooks it waits for wrote, with one BLAS thread (:data:`KERNEL_ENV`).
    """
    out_dir = out_dir or config.REPORTS
    found = notebooks(folder)
    order = [nb.name for nb in found]
    chosen = [nb for nb in found if not only or any(nb.name.startswith(o) for o in only)]
    if only:
        wanted = set(needed([nb.stem for nb in chosen]))
        chosen = [nb for nb in found if nb.stem in wanted]
    results = run_stages(chosen, out_dir, jobs, check=bool(only))
    summary = out_dir / "pipeline.json"
    entries = {r.notebook: r.summary() for r in results}
    if only and summary.exists():
        kept = {e["notebook"]: e for e in json.loads(summary.read_text()) if e.get("notebook") in order}
        entries = {name: entries.get(name) or kept[name] for name in order if name in entries or name in kept}
    write_if_changed(summary, (json.dumps(list(entries.values()), indent=2) + "\n").encode())
    if not only:
        write_summary(out_dir / "metrics", out_dir / "summary.json")
    return results


def default_jobs() -> int:
    """Notebooks at once by default: one per core, at most two (the cores are shared among those running: see
    :func:`core_share`)."""
    return max(1, min(2, os.cpu_count() or 1))


def register(app: Any) -> None:
    """Add ``gpupred pipeline`` to the CLI."""
    import typer

    @app.command("pipeline")
    def pipeline_cmd(
        only: list[str] = typer.Option(None, "--only", help="Run only notebooks whose names start with this (repeatable)."),
        jobs: int = typer.Option(0, "--jobs", "-j", min=0,
                                 help="Notebooks at once, each after what writes its inputs (0: one per core, at most 2)."),
    ) -> None:
        """Run every numbered notebook through papermill into reports/ (executed .ipynb and HTML), each after the
        notebooks that write its inputs."""
        results = run_pipeline(only=only, jobs=jobs or default_jobs())
        skipped = [r for r in results if r.status == "skipped"]
        print(f"{len(results) - len(skipped)} notebooks ran, {len(skipped)} skipped (missing input); summary in reports/pipeline.json")
