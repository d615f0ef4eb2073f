"""The fusion-count advisor (issue 41 item 3): how many copies F of a model to fuse into one job, with no GPU.

Hydro (OSDI'23) fuses F hyper-parameter trials of one model into one job (:mod:`gpupred.workloads.fused`) and picks
F by memory: the largest F that fits. The advisor asks the exported predictor (:func:`gpupred.load_predictor`, its
physics core: the step model x a learned correction, the memory footprint x a bounded one) for each F of
``counts`` and picks by throughput:

- per F: step time, utilization, SM activity and memory, each with the predictor's 90 % interval; trials/s
  = F / step time (each of the F trials advances one step per fused step) and samples/s = F x batch / step time;
- it fits when the upper end of its memory interval is at most the card's memory (``memory_gb`` x 1024 MiB of
  :mod:`gpupred.hardware`, as the simulator counts it), or ``memory_mib`` when given;
- **the advisor's F**: the smallest F that fits whose trials/s reaches ``1 - tolerance`` of the best fitting F's
  (past it more copies cost memory and each trial's wall time, and buy at most ``tolerance`` more throughput); its
  interval runs from the smallest F whose trials/s could reach that bar (the upper ends of the trials/s intervals
  against the best lower end) to the smallest F that surely does (lower ends against the best upper end; the largest
  fitting F when none surely does);
- **Hydro's F**: the largest F that fits, by the same memory test.

The step of a fused job is modelled two ways (``step``): ``vmap`` (default: one copy's kernels each doing F times the
work, as torch.func.vmap runs them, :func:`gpupred.step.physics.vmapped.fused_kernels`) or ``graph`` (the stored fused graph's
kernels: F copies launched one after another, which is what the predictor does with a fused workload id as it
stands). Memory and the correction's graph features come from the fused graph either way (F copies of weights,
gradients, optimizer state and activations). Both are predictions for a job no committed run has measured; notebook
09 compares them with the measured knee once ``data/raw`` holds fused runs.

MODEL is a workload id whose architecture has fused graphs in the store (``data/graphs``): the five base models of
:func:`gpupred.workloads.catalog.fused_catalog` (resnet18 and mobilenet_v2 at 32 px, mlp-w1024-d4 at 784 inputs,
lstm-v10000-e256-h512-l2 at 64 tokens, bert-v8192-m256-h4-l4 at 128 tokens) at any batch size, precision (fp32,
bf16) and optimizer; a fused id (``...-x8``) stands for its base. Any other workload id works where the torch extra is
installed (its fused graphs are exported on first use, structure only, and cached); without torch it is refused in
one line naming the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import pandas as pd

from gpupred.errors import GpupredError
from gpupred.fusion.rules import STEP_MODELS, TOLERANCE
from gpupred.reports import MetricsSchema
from gpupred.workloads.catalog import FUSED_COUNTS
from gpupred.workloads.spec import WorkloadSpec

RECURRENT_FAMILIES: dict[str, str] = {"lstm": "lstm", "gru": "gru"}  # family -> gpupred.step.physics.vmapped cell
CURVE_COLUMNS: tuple[str, ...] = (
    "F", "workload_id", "iter_time_mean_s", "iter_time_mean_s_low", "iter_time_mean_s_high", "gpu_util",
    "gpu_util_low", "gpu_util_high", "sm_active", "sm_active_low", "sm_active_high", "memory_mib", "memory_mib_low",
    "memory_mib_high", "trials_per_s", "trials_per_s_low", "trials_per_s_high", "samples_per_s", "samples_per_s_low",
    "samples_per_s_high", "fits", "extrapolated",
)


@dataclass
class FusionAdvice:
    """The advisor's answer for one model on one GPU: the curve over F and the choices made on it."""

    model: str  # the base workload id (F = 1)
    gpu: str  # the hardware-table name
    card_mib: float  # the memory F must fit in
    step: str  # how the fused step was modelled (STEP_MODELS)
    tolerance: float
    curve: pd.DataFrame  # one row per F, columns CURVE_COLUMNS
    f: int | None  # the advisor's F (None: not even F = 1 fits)
    f_low: int | None
    f_high: int | None
    hydro_f: int | None  # the largest F that fits
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The choices as plain values (what ``--json`` prints besides the curve)."""
        row = self.curve.set_index("F").loc[self.f] if self.f is not None else None
        return {"model": self.model, "gpu": self.gpu, "card_mib": self.card_mib, "step": self.step,
                "tolerance": self.tolerance, "f": self.f, "f_low": self.f_low, "f_high": self.f_high,
                "hydro_f": self.hydro_f,
                "trials_per_s": None if row is None else float(row["trials_per_s"]),
                "trials_per_s_low": None if row is None else float(row["trials_per_s_low"]),
                "trials_per_s_high": None if row is None else float(row["trials_per_s_high"]),
                "extrapolated": bool(self.curve["extrapolated"].any()), "notes": list(self.notes)}


def base_spec(model: str) -> WorkloadSpec:
    """The F = 1 spec of a MODEL argument (a workload id; a fused id stands for its base)."""
    spec = WorkloadSpec.from_id(model)  # a one-line error naming the id's grammar when it is not one
    if spec.precision == "fp16":
        raise GpupredError(f"{model}: fused copies train in fp32 or bf16, not fp16; use the -fp32- or -bf16- id")
    if spec.family == "dcgan":
        raise GpupredError(f"{model}: fused copies are not supported for dcgan (two optimizers per step)")
    return replace(spec, fused=1)


def card_mib(gpu: str) -> float:
    """The memory a fused job must fit in on ``gpu``: its datasheet memory in GB counted as GiB (MiB units)."""
    from gpupred.hardware import gpu_spec

    return float(gpu_spec(gpu).memory_gb) * 1024.0


def choose_f(curve: pd.DataFrame, tolerance: float = TOLERANCE) -> tuple[int | None, int | None, int | None, int | None]:
    """(advisor's F, its interval's low and high ends, Hydro's F) on a curve with ``F``, ``fits`` and
    ``trials_per_s`` (``_low``, ``_high``) columns; None where no F fits."""
    if not 0 <= tolerance < 1:
        raise GpupredError(f"tolerance {tolerance}: must be at least 0 and below 1 (0.05: within 5 % of the best)")
    fit = curve[curve["fits"].astype(bool)].sort_values("F")
    if fit.empty:
        return None, None, None, None
    bar = 1.0 - tolerance
    f_best = int(fit["F"][fit["trials_per_s"] >= bar * fit["trials_per_s"].max()].iloc[0])
    could = fit["F"][fit["trials_per_s_high"] >= bar * fit["trials_per_s_low"].max()]
    surely = fit["F"][fit["trials_per_s_low"] >= bar * fit["trials_per_s_high"].max()]
    f_low = int(could.iloc[0]) if len(could) else f_best
    f_high = int(surely.iloc[0]) if len(surely) else int(fit["F"].iloc[-1])
    return f_best, min(f_low, f_best), max(f_high, f_best), int(fit["F"].iloc[-1])


def _check(step: str, counts: tuple[int, ...]) -> None:
    if step not in STEP_MODELS:
        raise GpupredError(f"unknown step model {step!r}; use one of {', '.join(STEP_MODELS)}")
    if not counts or any(int(f) < 1 for f in counts):
        raise GpupredError(f"fused counts {list(counts)}: give positive whole numbers, e.g. 1,2,4,8,16,32,64")


def _gpu_name(predictor: Any, gpu: str | None) -> str:
    """The hardware-table name of the GPU to advise for (the predictor's only GPU when it knows one)."""
    from gpupred.hardware import gpu_spec

    return gpu_spec(predictor.default_gpu() if gpu is None else gpu).name


def advise_fusion(model: str, gpu: str | None = None, counts: tuple[int, ...] = FUSED_COUNTS,
                  tolerance: float = TOLERANCE, step: str = "vmap", memory_mib: float | None = None,
                  predictor: Any = None) -> FusionAdvice:
    """The F of fused copies of ``model`` that maximizes trials/s and fits ``gpu``'s memory, beside Hydro's F."""
    from gpupred.predictor.loading import load_predictor
    from gpupred.reports import progress_bar

    _check(step, tuple(counts))
    base = base_spec(model)
    predictor = predictor if predictor is not None else load_predictor()
    if predictor.core is None:
        raise GpupredError("this predictor has no physics core (step model and footprint): re-export it with "
                           "notebook 08 (`gpupred pipeline --only 08`)")
    name = _gpu_name(predictor, gpu)
    card = float(memory_mib) if memory_mib is not None else card_mib(name)
    fs = sorted({int(f) for f in counts})
    rows = [_predict_f(predictor, base, f, name, step)
            for f in progress_bar(iterable=fs, desc=f"F of {base.id} on {name}", unit="F", leave=False)]
    curve = pd.DataFrame(rows)
    curve["fits"] = curve["memory_mib_high"] <= card
    curve = curve[list(CURVE_COLUMNS)]
    f, f_low, f_high, hydro = choose_f(curve, tolerance)
    notes = [] if f is not None else [f"not even F = {int(curve['F'].min())} fits in {card:.0f} MiB"]
    if curve["extrapolated"].any():
        notes.append(f"{name} has no measurements in this predictor: every figure is extrapolated (intervals widened)")
    return FusionAdvice(base.id, name, card, step, tolerance, curve, f, f_low, f_high, hydro, notes)


def _predict_f(predictor: Any, base: WorkloadSpec, f: int, gpu: str, step: str) -> dict[str, Any]:
    """One row of the curve: the predictor's answer for ``f`` fused copies of ``base`` on ``gpu``."""
    from gpupred.predictor.jobgraph import JobGraph

    spec = replace(base, fused=f)
    job = _graph_inputs(spec.id)
    graph = JobGraph.of_parts(job.row, _kernels(base, spec, job, step), job.terms, job.setup, label=spec.id)
    out = predictor.core.predict(graph, gpu)
    it, lo, hi = out["iter_time_mean_s"], out["iter_time_mean_s_low"], out["iter_time_mean_s_high"]
    per = f * spec.batch_size
    figures = {k: float(v) for k, v in out.items()
               if not k.startswith("samples_per_s") and k not in ("extrapolated", "caveats")}
    return {"F": f, "workload_id": spec.id, **figures,
            "trials_per_s": f / it, "trials_per_s_low": f / hi, "trials_per_s_high": f / lo,
            "samples_per_s": per / it, "samples_per_s_low": per / hi, "samples_per_s_high": per / lo,
            "extrapolated": bool(out.get("extrapolated", gpu not in predictor.measured_gpus)),
            "caveats": str(out.get("caveats", ""))}


@lru_cache(maxsize=64)
def _graph_inputs(workload_id: str) -> Any:
    """The predictor's job of a spec (its graph from the store, or exported where torch is installed); its feature
    row and footprint terms are kept on it (both step models and every GPU read them)."""
    from gpupred.predictor.jobs import JobOptions, resolve_graph

    return resolve_graph(workload_id, JobOptions())


def _kernels(base: WorkloadSpec, spec: WorkloadSpec, job: Any, step: str) -> Any:
    """The fused step's kernels under the chosen step model."""
    from gpupred.step.physics.vmapped import fused_kernels

    if step == "graph" or spec.fused == 1:
        return job.kernels  # the fused graph's own (or the base's)
    one = _graph_inputs(base.id)
    return fused_kernels(one.kernels, spec.fused, spec.optimizer, float(one.row["params"]),
                         RECURRENT_FAMILIES.get(base.family))


def advise_table(advice: list[FusionAdvice]) -> pd.DataFrame:
    """One row per advice: model, GPU, step model, the advisor's F with its interval and trials/s, Hydro's F."""
    return pd.DataFrame([{k: v for k, v in a.summary().items() if k != "notes"} for a in advice])


def curve_long(advice: list[FusionAdvice]) -> pd.DataFrame:
    """Every advice's curve stacked, with its model, GPU and step model (for plotting)."""
    frames = [a.curve.assign(model=a.model, gpu=a.gpu, step=a.step, card_mib=a.card_mib) for a in advice]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*CURVE_COLUMNS, "model", "gpu"])


def catalog_models() -> list[str]:
    """The F = 1 ids of the fused catalog (issue 41's models, fp32 and bf16): what notebook 09 advises by default."""
    from gpupred.workloads.catalog import fused_catalog

    return [s.id for s in fused_catalog() if s.fused == 1]


FUSION_METRICS = MetricsSchema("09-fusion-advisor", (
    (r"fusion_advisor", "per model and GPU: the advised F, its interval and Hydro's F; the share of measured knees "
                        "inside the advised interval once fused runs exist"),
))
