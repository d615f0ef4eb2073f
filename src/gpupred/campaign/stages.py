"""The campaign's queue: eight stages in priority order, each a list of parts (a plan run into a folder), each part a
list of units; what is on disk is done.

A unit is what the existing machinery already writes atomically: a calibration file (``gpupred calibrate``), a sweep
unit's runs file (:func:`gpupred.profile.store.finished_units`), a kernel trace's summary
(:func:`gpupred.traces.tracetable.trace_path`). A stage whose CPU side has not landed is skipped with one line saying
why, decided by a capability check (:func:`loader_missing`, :func:`finetune_missing`), so it turns on by itself once
the code and its plan file exist.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field, fields
from datetime import date
from pathlib import Path
from typing import Callable

from gpupred import config
from gpupred.errors import GpupredError

# the sweep folder each stage writes into, under data/raw/<gpu>/ (fixed, so every session resumes the same one)
SWEEP_IDS: dict[str, str] = {"pipelines": "2026-12-pipelines", "finetune": "2026-12-finetune",
                             "pairs": "2026-12-pairs-matrix", "realworld": "2026-12-realworld",
                             "catalog": "2026-11-catalog", "fusion": "2026-12-fusion"}
PIPELINES_PLAN = "input-pipelines.txt"  # catalog workloads fed by real DataLoaders (`pipeline=KIND` plan lines)
LAUNCH_BLOCKING_PLAN = "launch-blocking.txt"  # Lucid's families with sync=step and sync=kernel (stage 2's last part)
FINETUNE_PLAN = "finetune.txt"  # full, LoRA and QLoRA fine-tunes (plan-line setup options, gpupred.profile.units)
MARGIN_MINUTES = 1.0  # kept free at the end of a call: the tarball, and a unit that overran its estimate
SMOKE_IDS = ("mlp.mlp-w64-d2-bs8-in32-fp32-sgd", "mlp.mlp-w32-d1-bs4-in16-fp32-sgd")  # the smoke test's two units


class StageSkipped(Exception):
    """A stage cannot run on this machine or with this code; its message is the one line that says why."""


@dataclass(frozen=True)
class Layout:
    """Where the campaign reads plans and writes results (a dry run: under data/dryrun, never data/raw)."""

    root: Path  # the repository root: tarball paths are relative to it
    raw: Path  # data/raw (data/dryrun for a simulated campaign)
    calibrations: Path  # data/calibrations (data/dryrun/calibrations)
    plans: Path
    markers: Path  # the per-machine smoke-test markers (gitignored)

    @classmethod
    def default(cls, simulated: bool = False) -> "Layout":
        """The repository's own folders (``gpupred.config``)."""
        raw = config.DRYRUN if simulated else config.RAW
        cal = config.DRYRUN / "calibrations" if simulated else config.CALIBRATIONS
        return cls(config.ROOT, raw, cal, config.ROOT / "plans", config.CAMPAIGN_MARKERS)


@dataclass(frozen=True)
class Part:
    """One plan run into one folder: ``calibrate`` (a file), ``sweep`` (a sweep folder), ``traces`` (its traces/) or
    ``loader-bench`` (this machine's host profile, a file beside a sweep's runs)."""

    kind: str
    plan: str  # a plan file ("" for calibrate)
    folder: Path  # the sweep folder; for calibrate the file to write


@dataclass(frozen=True)
class Work:
    """One unit of the queue: its part, its id, its place in the part's whole plan and its estimated seconds."""

    stage: int
    part: Part
    key: str
    index: int
    seconds: float


@dataclass
class StageQueue:
    """One stage as this machine sees it: skipped (and why), or its units left and how many are done."""

    number: int
    name: str
    title: str
    skipped: str = ""
    todo: list[Work] = field(default_factory=list)
    done: int = 0

    @property
    def total(self) -> int:
        """Units in the stage's plans."""
        return self.done + len(self.todo)


def gpu_kind(name: str) -> str:
    """The data/raw folder name of a GPU (``NVIDIA H100 80GB HBM3`` -> ``h100``, ``NVIDIA H200`` -> ``h200``)."""
    from gpupred.hardware import gpu_spec

    try:
        short = gpu_spec(name).name
    except GpupredError:
        short = name.removeprefix("NVIDIA ")
    token = short.split()[0].lower() if short.split() else ""
    if not token.isalnum():
        raise GpupredError(f"GPU {name!r}: no folder name for it under data/raw; name one with --gpu")
    return token


def calibrated_kinds(folder: Path) -> set[str]:
    """The GPU kinds that have a calibration file in ``folder`` (each file's recorded ``gpu.name``)."""
    kinds = set()
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
        try:
            kinds.add(gpu_kind(str(json.loads(path.read_text())["gpu"]["name"])))
        except (ValueError, KeyError, TypeError, GpupredError):
            continue
    return kinds


def loader_missing() -> str:
    """Why stage 2 (input pipelines) cannot run yet: '' once ``gpupred.loader.standard.make_loader`` exists."""
    if importlib.util.find_spec("gpupred.loader") is None:
        return "gpupred.loader is not there yet (the input-pipeline issue writes it)"
    if importlib.util.find_spec("gpupred.loader.standard") is None:
        return "gpupred.loader.standard is not there yet (the input-pipeline issue writes it)"
    try:
        module = importlib.import_module("gpupred.loader.standard")
    except Exception as err:  # code being written: say why, and let the other stages run
        return f"gpupred.loader.standard does not import ({type(err).__name__}: {err})"
    return "" if callable(getattr(module, "make_loader", None)) else "gpupred.loader.standard has no make_loader yet"


def finetune_missing() -> str:
    """Why stage 3 (fine-tuning) cannot run here: '' once TrainingSetup has LoRA and QLoRA fields and peft and
    bitsandbytes import (:mod:`gpupred.workloads.finetuning` builds the units with them)."""
    from gpupred.setups import TrainingSetup

    names = [f.name for f in fields(TrainingSetup)]
    if not any("lora" in n and "qlora" not in n for n in names) or not any("qlora" in n for n in names):
        return "gpupred.setups.TrainingSetup has no LoRA/QLoRA setups yet (the fine-tuning issue adds them)"
    for package in ("peft", "bitsandbytes"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed here (carry its wheel, docs/remote-sweeps.md)"
    return ""


def _plan_file(layout: Layout, name: str, why: str) -> str:
    path = layout.plans / name
    if not path.is_file():
        raise StageSkipped(f"no plans/{name} ({why})")
    return str(path)


def calibration_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 1: one calibration per GPU kind, into data/calibrations/<gpu>-<date>.json."""
    return [Part("calibrate", "", layout.calibrations / f"{gpu}-{date.today().isoformat()}.json")]


def input_pipeline_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 2: this machine's host profile (``gpupred loader bench``, once per machine, beside the runs), then catalog
    families fed by real DataLoaders (plans/input-pipelines.txt: ``pipeline=KIND`` lines), then Lucid's families with
    and without ``CUDA_LAUNCH_BLOCKING=1`` (plans/launch-blocking.txt, where it exists) into the catalog sweep's folder,
    where most of their ``sync=step`` units are measured already: what the step model's ``kernel`` protocol is fitted
    on before it predicts Lucid's runs, the same issue's goals; skipped (StageSkipped) until gpupred.loader and the
    pipeline plan exist."""
    import platform

    from gpupred.profile.store import host_profile_path

    why = loader_missing()
    if why:
        raise StageSkipped(why)
    plan = _plan_file(layout, PIPELINES_PLAN, "the input-pipeline issue writes it with its harness option")
    folder = layout.raw / gpu / SWEEP_IDS["pipelines"]
    parts = [Part("loader-bench", "", host_profile_path(folder, platform.node())), Part("sweep", plan, folder)]
    if (layout.plans / LAUNCH_BLOCKING_PLAN).is_file():
        parts.append(Part("sweep", str(layout.plans / LAUNCH_BLOCKING_PLAN), layout.raw / gpu / SWEEP_IDS["catalog"]))
    return parts


def finetune_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 3: small decoders fine-tuned in full, with LoRA and QLoRA; skipped (StageSkipped) until the setups and
    their plan (plans/finetune.txt) exist."""
    why = finetune_missing()
    if why:
        raise StageSkipped(why)
    plan = _plan_file(layout, FINETUNE_PLAN, "the fine-tuning issue writes it with its setups")
    return [Part("sweep", plan, layout.raw / gpu / SWEEP_IDS["finetune"])]


def pair_matrix_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 4: the pair matrix of this GPU kind (plans/<gpu>-pairs-matrix.txt)."""
    plan = _plan_file(layout, f"{gpu}-pairs-matrix.txt", f"`gpupred plan pairs --matrix --from data/raw/{gpu}/...`")
    return [Part("sweep", plan, layout.raw / gpu / SWEEP_IDS["pairs"])]


def realworld_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 5: the real-world architectures solo (plans/realworld-solo.txt)."""
    plan = _plan_file(layout, "realworld-solo.txt", "`gpupred plan realworld`")
    return [Part("sweep", plan, layout.raw / gpu / SWEEP_IDS["realworld"])]


def trace_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 6: kernel traces (plans/traces.txt) into the solo sweep's folder, where those specs were measured."""
    plan = _plan_file(layout, "traces.txt", "`gpupred plan subset --n 72`")
    return [Part("traces", plan, layout.raw / gpu / SWEEP_IDS["catalog"])]


def twin_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 7: the rest of the H100 solo plan, then the sync plan, into data/raw/h100/2026-11-catalog (H100 only)."""
    if gpu != "h100":
        raise StageSkipped(f"H100 only (this is an {gpu})")
    folder = layout.raw / "h100" / SWEEP_IDS["catalog"]
    return [Part("sweep", _plan_file(layout, name, f"`gpupred plan {cmd}`"), folder)
            for name, cmd in (("h100-solo.txt", "solo"), ("sync.txt", "sync"))]


def fused_parts(gpu: str, layout: Layout) -> list[Part]:
    """Stage 8: fused trials, then their co-located twins, into one sweep folder."""
    folder = layout.raw / gpu / SWEEP_IDS["fusion"]
    return [Part("sweep", _plan_file(layout, name, f"`gpupred plan {cmd}`"), folder)
            for name, cmd in (("fusion.txt", "fused"), ("fusion-coloc.txt", "fusion-coloc"))]


STAGES: tuple[tuple[str, str, Callable[[str, Layout], list[Part]]], ...] = (
    ("calibrate", "calibrate the GPU kind", calibration_parts),
    ("pipelines", "input pipelines", input_pipeline_parts),
    ("finetune", "fine-tuning", finetune_parts),
    ("pairs", "pair matrix", pair_matrix_parts),
    ("realworld", "real-world solo", realworld_parts),
    ("traces", "kernel traces", trace_parts),
    ("twins", "H100 twins' remainder", twin_parts),
    ("fused", "fused trials", fused_parts),
)
