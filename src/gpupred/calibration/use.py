"""What a prediction takes from a calibration: scaled constants in place of borrowed ones, and where files are found.

The constants the predictor fits to training runs are not the readings of micro-benchmarks: a fitted launch cost
(38-46 us per forward kernel on this project's H100 and H200 runs) holds everything a training step spends per
kernel on the host (modules, hooks, autocast), where PyTorch's profiler puts a bare eager launch at 5-10 us; fitted
efficiencies hold what training-sized layers reach, not a benchmark grid's. So a calibration does not paste its
readings in. Each measured constant of a GPU without fits becomes

    calibrated = borrowed x (this GPU's reading / the reference reading)

where ``borrowed`` is what :meth:`gpupred.step.physics.constants.ConstantsTable.get` lends the GPU and the reference
reading is the same micro-benchmark's on the predictor's measured GPUs (the geometric mean over those with a committed
calibration, ``data/calibrations/``; until one is committed, the published defaults of
:mod:`gpupred.step.physics.constants` stand in: they describe eager PyTorch on a datacenter GPU at micro-benchmark
scale, which is an assumption the held-out evaluation of :mod:`gpupred.calibration.assessment` measures). The
footprint's fixed memory moves by the difference of readings (``fixed_mib``: context, libraries, workspaces; the
stand-in reference is the footprint's own ``DEFAULT_CONTEXT_MIB + WORKSPACE_MIB``), its allocator ratio by the ratio of
readings where a reference was measured. Constants no micro-benchmark measures (the per-step overhead, library launches)
keep their fits.

A GPU with fits of its own keeps them: they were fitted to its training runs under the predictor's protocol.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ContextManager

import numpy as np

from gpupred.calibration.derive import STEP_MEASURED, Derived
from gpupred.calibration.file import Calibration, read_calibration
from gpupred.errors import GpupredError
from gpupred.files import FileCache
from gpupred.hardware import GpuSpec
from gpupred.setups import InputPipeline
from gpupred.step.physics.constants import BOUNDS, DEFAULT, StepConstants, geometric_mean

STANDIN = "published defaults (no calibration of a measured GPU committed yet)"


@dataclass(frozen=True)
class Reference:
    """The micro-benchmark readings on the predictor's measured GPUs: what a calibrated GPU's readings compare with."""

    step: dict[str, float]  # per measured step constant, the reference reading
    fixed_mib: float  # the reference fixed memory (context, libraries, workspaces)
    allocator: float | None  # the reference allocator reading (None: none measured, the ratio stays borrowed)
    gpus: tuple[str, ...] = ()  # the reference GPUs; () = the stand-in (STANDIN)

    @property
    def basis(self) -> str:
        """One line on where the reference readings come from."""
        return f"calibrations of {', '.join(self.gpus)}" if self.gpus else STANDIN


def standin_reference() -> Reference:
    """The reference readings before any measured GPU has a committed calibration: the published defaults."""
    from gpupred.memory.physics import DEFAULT_CONTEXT_MIB, WORKSPACE_MIB

    return Reference({k: float(getattr(DEFAULT, k)) for k in STEP_MEASURED}, DEFAULT_CONTEXT_MIB + WORKSPACE_MIB, None)


def reference_of(calibrations: list[Calibration], measured: set[str]) -> Reference:
    """The reference readings: geometric (memory: arithmetic) means over the calibrations of GPUs in ``measured``."""
    from gpupred.hardware import gpu_spec

    refs = [(gpu_spec(c.gpu_name).name, c.derived()) for c in calibrations if c.in_table()
            and gpu_spec(c.gpu_name).name in measured]
    if not refs:
        return standin_reference()
    base = standin_reference()

    def geo(values: list[float], fallback: float | None) -> float | None:
        mean = geometric_mean(values)
        return fallback if math.isnan(mean) else mean

    step = {k: geo([d.step[k] for _, d in refs if k in d.step], base.step[k]) or base.step[k] for k in STEP_MEASURED}
    fixed = [d.memory["fixed_mib"] for _, d in refs if "fixed_mib" in d.memory]
    return Reference(step, float(np.mean(fixed)) if fixed else base.fixed_mib,
                     geo([d.memory["allocator"] for _, d in refs if "allocator" in d.memory], None),
                     tuple(sorted({g for g, _ in refs})))


@dataclass(frozen=True)
class AppliedCalibration:
    """A checked calibration as a prediction uses it: the GPU's specs and its re-derived readings."""

    calibration: Calibration
    derived: Derived
    spec: GpuSpec
    in_table: bool
    notes: list[str] = field(default_factory=list)

    @property
    def shown(self) -> str:
        """How outputs name the calibration (its path)."""
        return self.calibration.shown

    def step_constants(self, borrowed: StepConstants, ref: Reference) -> StepConstants:
        """``borrowed`` with every measured constant scaled by this GPU's reading over the reference's."""
        values = {}
        for k, reading in self.derived.step.items():  # efficiencies stay fractions; times and ratios are as scaled
            scaled = getattr(borrowed, k) * reading / ref.step[k]
            values[k] = float(np.clip(scaled, *BOUNDS[k])) if k.endswith("_eff") else float(scaled)
        return replace(borrowed, **values, source=f"calibrated by {self.shown} (readings relative to {ref.basis}); "
                                                  f"unmeasured constants: {borrowed.source}")

    def footprint(self, fitted: Any, key: str, ref: Reference) -> Any:
        """A copy of the fitted footprint (:class:`gpupred.memory.physics.Footprint`) whose constants for ``key``
        ('gpu|protocol') are the borrowed ones moved by this GPU's memory readings.

        The allocator's reading is reserved over requested bytes of a seeded pattern (256 tensors, requested peak
        0.74 GiB), so it scales the footprint's ratio where that is read: at 1 GiB of varying terms
        (:func:`gpupred.memory.physics.allocator_reserve_mib`). The fitted exponent, how the reserve grows away
        from 1 GiB, is kept."""
        ctx = fitted.context(key)  # the borrowed context, by the footprint's own rule (local memory + software share)
        alloc = fitted.constant(key, fitted.allocator, 1.0)
        mem = self.derived.memory
        if "fixed_mib" in mem:
            ctx = max(0.0, ctx + mem["fixed_mib"] - ref.fixed_mib)
        if "allocator" in mem and ref.allocator:
            alloc = float(np.clip(alloc * mem["allocator"] / ref.allocator, 0.5, 3.0))
        return replace(fitted, context_mib={**fitted.context_mib, key: ctx}, allocator={**fitted.allocator, key: alloc})

    def feeding(self, pipeline: InputPipeline) -> InputPipeline:
        """``pipeline`` run on this GPU's host, at the single-core score calibrate measured there
        (:meth:`gpupred.setups.InputPipeline.on_host`: a pipeline that names its own host keeps it)."""
        return pipeline.on_host(self.calibration.single_core_score)

    def hardware(self) -> ContextManager[None]:
        """A block in which gpupred knows this GPU by name (its measured peaks, when it is outside the table)."""
        if self.in_table:
            return nullcontext()
        from gpupred.hardware import extra_gpus

        return extra_gpus([(self.spec, "calibrated")])


def applied(cal: Calibration) -> AppliedCalibration:
    """A checked calibration made ready for predictions (its constants re-derived by this gpupred)."""
    derived = cal.derived()
    return AppliedCalibration(cal, derived, cal.gpu_spec(), cal.in_table(), list(derived.notes))


def same_gpu(a: str, b: str) -> bool:
    """Whether two GPU names are one GPU kind (the hardware table's name, else the same name)."""
    from gpupred.hardware import gpu_spec

    try:
        return gpu_spec(a).name == gpu_spec(b).name
    except GpupredError:
        return " ".join(a.lower().split()) == " ".join(b.lower().split())


@dataclass
class FolderEntry:
    """One file of a calibration folder as :func:`find_calibration` read it: its JSON (None: not a calibration file)
    and, once a prediction asked for its GPU, the file checked (:class:`Calibration`)."""

    data: dict[str, Any] | None
    checked: Calibration | None = None


def folder_entry(path: Path) -> FolderEntry:
    """A calibration folder's file, parsed (not checked: only a file of the GPU asked for is)."""
    import json

    try:
        data = json.loads(path.read_text())
        str(data["gpu"]["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return FolderEntry(None)
    return FolderEntry(data)


_FOLDER: FileCache[FolderEntry] = FileCache(64)  # per unchanged version of each file: a scheduler predicts many jobs


def find_calibration(gpu: str, folder: Path | None = None) -> Calibration | None:
    """The newest calibration of GPU ``gpu`` in ``folder`` (default: this user's, :func:`gpupred.config.calibration_dir`),
    checked; None when there is none. A file that claims this GPU but fails its checks is refused (one line). Each
    file is read and checked once while it is unchanged (it took 10 ms a prediction to read and check two files)."""
    import warnings

    from gpupred import config
    from gpupred.calibration.file import validate

    folder = config.calibration_dir() if folder is None else Path(folder)
    found: list[Calibration] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = _FOLDER.read(path, folder_entry)
        except OSError:  # gone since the listing
            continue
        if entry.data is None:
            warnings.warn(f"{path}: not a calibration file, skipped (remove it)", stacklevel=2)
            continue
        if same_gpu(str(entry.data["gpu"]["name"]), gpu):
            if entry.checked is None:
                validate(entry.data, str(path))  # a refusal keeps nothing: the next prediction refuses it again
                entry.checked = Calibration(entry.data, path)
            found.append(entry.checked)
    return max(found, key=lambda c: (str(c.data["created_at"]), str(c.path))) if found else None


def resolve_calibration(calibration: Any, gpu: str | None) -> AppliedCalibration | None:
    """The calibration a prediction uses: ``False`` none; ``None`` the newest in this user's folder for the named GPU
    (none when no GPU is named); a path or a :class:`Calibration` that one. A calibration of another GPU than the
    one named is refused, naming both."""
    if calibration is False or (calibration is None and gpu is None):
        return None
    if calibration is None:
        found = find_calibration(str(gpu))
        return applied(found) if found is not None else None
    cal = calibration if isinstance(calibration, Calibration) else read_calibration(calibration)
    if gpu is not None and not same_gpu(cal.gpu_name, gpu):
        raise GpupredError(f"{cal.shown}: a calibration of {cal.gpu_name}, not of {gpu}; predict for {cal.gpu_name}, "
                           f"or calibrate {gpu} on its machine (`gpupred calibrate`)")
    return applied(cal)


def check_gpu_known(gpu: str, calibration: Any = None) -> None:
    """Raise the one-line unknown-GPU error unless the hardware table, or the calibration a prediction for ``gpu``
    would use (``calibration`` as :func:`resolve_calibration` reads it), knows ``gpu``: a command says so before it
    spends minutes exporting a model."""
    from gpupred.hardware import gpu_spec

    cal = resolve_calibration(calibration, gpu)
    with cal.hardware() if cal is not None else nullcontext():
        gpu_spec(gpu)


def _major_minor(version: str) -> str:
    """'2.11.0+cu130' -> '2.11'."""
    return ".".join(str(version).split("+")[0].split(".")[:2])


def software_note(cal: Calibration, training: dict[str, list[str]]) -> str:
    """'' when the calibration ran the training runs' torch and CUDA (major.minor), else one line saying what differs
    (``training``: version lists by 'torch' and 'cuda'; empty when the predictor does not know them)."""
    if not training:
        return "the training runs' software is not recorded in this predictor"
    mine = {"torch": _major_minor(cal.data["software"].get("torch", "")),
            "cuda": _major_minor(cal.data["software"].get("cuda_runtime", ""))}
    differ = [f"{name} {mine[name]} (calibration) vs {', '.join(sorted({_major_minor(v) for v in training[name]}))} "
              "(training runs)" for name in ("torch", "cuda")
              if training.get(name) and mine[name] not in {_major_minor(v) for v in training[name]}]
    return ("software differs from the training runs': " + "; ".join(differ)) if differ else ""


def training_software(df: Any, raw_root: Path | None = None) -> dict[str, list[str]]:
    """The torch and CUDA versions this project's training runs in ``df`` were measured with, read from their raw run
    files (``<raw_root>/<gpu>/<sweep-id>/runs/<run>.parquet``, the dataset's ``run_id``; default root ``data/raw``);
    {} when none of them is there (imported sources, fixtures)."""
    import pyarrow.dataset as pads

    from gpupred import config

    root = config.RAW if raw_root is None else Path(raw_root)
    ids = df["run_id"].astype(str) if "run_id" in df.columns else []
    files = sorted({root / r.rsplit("/", 1)[0] / "runs" / f"{r.rsplit('/', 1)[1]}.parquet" for r in ids if r.count("/") == 2})
    files = [f for f in files if f.is_file()]
    if not files:
        return {}
    try:
        table = pads.dataset([str(f) for f in files], format="parquet").to_table(columns=["torch_version", "cuda_version"])
    except Exception:  # an unreadable raw file: the note then says the software is unknown
        return {}
    return {"torch": sorted(set(table.column("torch_version").to_pylist())),
            "cuda": sorted(set(table.column("cuda_version").to_pylist()))}


def calibration_status(cal: AppliedCalibration, by_physics: bool, measured_runs: int,
                       training: dict[str, list[str]]) -> tuple[bool, str]:
    """(whether a prediction used the calibration, the note its output carries)."""
    if not by_physics:
        return False, ("not used: this job was answered by the regressors (feature rows, or a predictor without the "
                       "physics core), which take no constants")
    if measured_runs > 0:
        return False, (f"not used: this predictor's constants for {cal.spec.name} are fitted to {measured_runs} of its "
                       "training runs")
    notes = [n for n in (software_note(cal.calibration, training),
                         "" if cal.in_table else "GPU not in the hardware table: its measured peaks stand in") if n]
    return True, "; ".join(notes)
