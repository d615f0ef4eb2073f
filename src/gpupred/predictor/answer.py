"""The answer contract, versioned: what ``gpupred predict`` prints (as JSON with ``--json``, rendered as text without)
and :meth:`gpupred.predictor.predictor.Predictor.answer` returns, for every kind of input alike.

One object (``"schema": "gpupred.prediction/4"``, :data:`ANSWER_SCHEMA`), whose keys never come and go; a figure that
does not apply is null (a feature row, answered by the baseline regressors, has no step time and no breakdowns):

- ``inputs``: the job as resolved: the model (a file, a workload id, a model by name and the class and head it built,
  or a feature row), its parameters, batch size, sequence length or image size, the whole training setup and what
  differs from the job's own, the input pipeline, the GPU's full name as the hardware table names it (``--gpu A100``
  is the 40 GB card), what answered, the calibration used and whether the answer is extrapolated;
- ``figures``: utilization, SM activity, step time (ms), throughput and memory (MiB and GiB), each with its interval;
- ``fit``: the GPU's capacity, the headroom at the point, whether the job fits and the probability that it does, from
  the memory interval (:mod:`gpupred.predictor.fits`);
- ``memory_breakdown``: the footprint's terms (:func:`gpupred.memory.physics.footprint_terms`), the CUDA context and the
  caching allocator's share, each the physics' own figure, and the learned correction as a part of its own (the
  device figure less the analytic footprint: it may be negative); the parts add up to the memory point;
  ``as_reported``: the point as torch's allocated peak and torch's reserved peak (the physics' own: the correction is
  learned on NVML's figure and applies to it alone) and NVML's device memory (:func:`as_reported`: the memory
  estimator's own figures, as a predict frame carries them);
- ``time_breakdown``: the step model's timeline (:mod:`gpupred.step.physics.timeline`) of one optimizer step: the device's
  busy time, the host's launches and synchronization the device waits on, the input pipeline's stall; the device time
  by op class and by phase (the optimizer step's share); the step time's learned correction spread over every part
  in proportion, so the parts add up to the step-time point;
- ``caveats``: the failure classes the job shows (:mod:`gpupred.step.physics.caveats`), an empty list when none.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from gpupred.columnar import is_frame
from gpupred.hardware import gpu_spec
from gpupred.loader.speed import HOST_SCORE_BAND
from gpupred.setups import InputPipeline, TrainingSetup, as_setup

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.predictor.jobgraph import JobGraph

SCHEMA_ID = "gpupred.prediction/4"
# figure -> (the prediction frame's column, unit, scale from the column's unit)
FIGURES: dict[str, tuple[str, str, float]] = {
    "gpu_util": ("gpu_util", "%", 1.0), "sm_active": ("sm_active", "%", 1.0),
    "step_time": ("iter_time_mean_s", "ms", 1000.0), "throughput": ("samples_per_s", "samples/s", 1.0),
    "memory": ("memory_mib", "MiB", 1.0),
}
# the footprint's terms (gpupred.memory.physics.TERMS) as the answer names them, then the context and the allocator
TERM_PARTS: dict[str, str] = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer_state",
                              "optimizer_step": "optimizer_step",
                              "autocast_copies": "autocast_copies", "activations": "activations",
                              "loss": "loss_logits", "inputs": "inputs", "workspace": "workspace"}
MEMORY_PARTS: tuple[str, ...] = (*TERM_PARTS.values(), "cuda_context", "allocator", "learned_correction")
REPORTED: tuple[str, ...] = ("torch_allocated_peak", "torch_reserved_peak", "device")  # memory_breakdown's as_reported
TIME_PARTS: tuple[str, ...] = ("device_busy", "host_and_sync", "input_stall")
OP_CLASSES: dict[int, str] = {1: "matmul", 2: "convolution", 3: "depthwise_convolution", 0: "cuda_core_ops"}
OP_LABELS: dict[str, str] = {"matmul": "matmuls", "convolution": "convolutions",
                             "depthwise_convolution": "depthwise convolutions",
                             "cuda_core_ops": "CUDA-core ops (elementwise, norms, pooling, casts, optimizer)"}
PEAKS: tuple[str, ...] = ("backward", "optimizer step")  # where the memory peak falls
PHASE_NAMES: tuple[str, ...] = ("forward", "backward", "optimizer", "other")  # gpupred.step.physics.kernels.PHASES
MEMORY_NOTE = ("the tensors live at the step's peak (peak: the backward's, or the optimizer step's, when the "
               "activations are freed and the gradients and the step's temporaries are live), each the physics' own "
               "figure; allocator: the caching allocator's reserve beyond the allocated terms, on the varying terms "
               "(gradients, the step's temporaries, autocast copies, activations, loss): (ratio - 1) x 1 GiB x "
               "(varying / 1 GiB) ** exponent, fitted on torch's own peaks; allocator_ratio: reserved over allocated "
               "varying terms in effect; "
               "learned_correction: the memory estimator's learned correction of NVML's figure (analytic footprint x "
               "(correction_factor - 1)), which torch's allocated and reserved peaks do not carry")
TIME_SPREAD = ("the step model's timeline of one optimizer step, every part x correction_factor (the step time's "
               "point over the timeline's step time), so the parts keep the timeline's shares and add up to the "
               "point; utilization has its own correction")


def _nullable(kind: str | list[str]) -> dict[str, Any]:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    return {"type": [*kinds, "null"]}


def _object(properties: dict[str, Any], nullable: bool = False) -> dict[str, Any]:
    """A JSON-schema object whose every key is required and no other allowed (keys never come and go)."""
    schema = {"type": ["object", "null"] if nullable else "object", "properties": properties,
              "required": list(properties), "additionalProperties": False}
    return schema


def _parts(names: tuple[str, ...] | list[str]) -> dict[str, Any]:
    return _object({n: {"type": "number"} for n in names})


def _figure_schema(gib: bool = False) -> dict[str, Any]:
    props = {"point": _nullable("number"), "low": _nullable("number"), "high": _nullable("number"),
             "unit": {"type": "string"}}
    if gib:
        props.update(point_gib=_nullable("number"), low_gib=_nullable("number"), high_gib=_nullable("number"))
    return _object(props)


def _inputs_schema() -> dict[str, Any]:
    model = _object({"kind": {"enum": ["file", "workload", "named", "features"]}, "name": {"type": "string"},
                     "class": _nullable("string"), "head": _nullable("string")})
    pipeline = _object({"kind": {"type": "string"}, "resident": {"type": "boolean"},
                        "num_workers": {"type": "integer"}, "pin_memory": {"type": "boolean"},
                        "host_cores": _nullable("number"), "host_speed": _nullable("number"),
                        "host_named_by": {"enum": ["host_speed", "host_score", "profile", None]},
                        "changes": {"type": "object"}})
    gpu = _object({"asked": _nullable("string"), "name": _nullable("string"), "memory_gib": _nullable("number"),
                   "measured_runs": _nullable("integer")})
    return _object({
        "model": model, "parameters": _nullable("integer"), "batch_size": _nullable("integer"),
        "sequence_length": _nullable("integer"),
        "image_size": {"type": ["array", "null"], "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        "setup": {"type": "object"}, "setup_changes": {"type": "object"}, "pipeline": pipeline, "gpu": gpu,
        "answered_by": {"enum": ["physics", "regressor"]}, "calibrated": _nullable("string"),
        "calibration_note": _nullable("string"), "extrapolated": {"type": "boolean"}})


def _time_schema() -> dict[str, Any]:
    top = {"type": "array", "items": _object({"op_class": {"enum": list(OP_CLASSES.values())},
                                              "ms": {"type": "number"}, "share_of_device": {"type": "number"}})}
    loader = _object({"kind": {"type": "string"}, "num_workers": {"type": "integer"},
                      "batch_make_ms": _nullable("number"), "main_process_ms": _nullable("number"),
                      "stall_ms": {"type": "number"}})
    return _object({
        "unit": {"const": "ms"}, "total": {"type": "number"}, "parts": _parts(TIME_PARTS),
        "device_by_op_class": _parts(list(OP_CLASSES.values())), "device_by_phase": _parts(PHASE_NAMES),
        "top_op_classes": top,
        "optimizer_step": _object({"device_ms": {"type": "number"}, "share_of_step": {"type": "number"}}),
        "host_busy_ms": {"type": "number"}, "input_pipeline": loader, "physics_step_ms": {"type": "number"},
        "correction_factor": {"type": "number"}, "spread": {"type": "string"}}, nullable=True)


def answer_schema() -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of an answer: every key required, none other allowed."""
    memory = _object({"unit": {"const": "MiB"}, "total": {"type": "number"}, "parts": _parts(MEMORY_PARTS),
                      "as_reported": _parts(REPORTED), "analytic_mib": {"type": "number"}, "allocator_ratio": {"type": "number"},
                      "peak": {"enum": list(PEAKS)},
                      "correction_factor": {"type": "number"}, "note": {"type": "string"}}, nullable=True)
    fit = _object({"gpu": _nullable("string"), "capacity_mib": _nullable("number"), "capacity_gib": _nullable("number"),
                   "headroom_mib": _nullable("number"), "headroom_gib": _nullable("number"),
                   "fits": _nullable("boolean"), "probability": _nullable("number")})
    figures = _object({"interval": {"type": "number"},
                       **{name: _figure_schema(gib=name == "memory") for name in FIGURES}})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "a gpupred prediction", **_object({
                "schema": {"const": SCHEMA_ID}, "inputs": _inputs_schema(), "figures": figures, "fit": fit,
                "memory_breakdown": memory, "time_breakdown": _time_schema(),
                "caveats": {"type": "array", "items": {"type": "string"}}})}


ANSWER_SCHEMA: dict[str, Any] = answer_schema()


def validate_answer(answer: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``answer`` keeps the contract (:data:`ANSWER_SCHEMA`)."""
    import jsonschema

    jsonschema.validate(answer, ANSWER_SCHEMA, cls=jsonschema.Draft202012Validator)


# ---------------------------------------------------------------- building an answer from a prediction


def build_answer(predictor: Any, done: Any) -> dict[str, Any]:
    """The answer of one predicted job (:class:`gpupred.predictor.jobs.PredictedJob`) by ``predictor``."""
    row = done.first_row()
    kind = str(done.kinds[0]) if len(done.kinds) else ""
    physics = row.get("core") == "physics" and done.graph is not None
    figures = {"interval": round(1.0 - float(predictor.alpha), 6),
               **{name: _figure(row, column, unit, scale) for name, (column, unit, scale) in FIGURES.items()}}
    mem = figures["memory"]
    mem.update({f"{k}_gib": None if mem[k] is None else mem[k] / 1024.0 for k in ("point", "low", "high")})
    return {
        "schema": SCHEMA_ID,
        "inputs": resolved_inputs(predictor, done, row, kind),
        "figures": figures,
        "fit": fit_section(predictor, row, kind),
        "memory_breakdown": memory_breakdown(done.memory) if physics else None,
        "time_breakdown": (time_breakdown(predictor.core, done, kind, float(row["iter_time_mean_s"]))
                           if physics and _number(row, "iter_time_mean_s") is not None else None),
        "caveats": [c for c in str(row.get("caveats", "") or "").split(",") if c and c != "nan"],
    }


def _number(row: Mapping[str, Any], column: str) -> float | None:
    """A finite number of the row, else None."""
    value = row.get(column)
    if value is None or isinstance(value, str):
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def _figure(row: Mapping[str, Any], column: str, unit: str, scale: float) -> dict[str, Any]:
    values = {k: _number(row, column + suffix) for k, suffix in (("point", ""), ("low", "_low"), ("high", "_high"))}
    return {**{k: None if v is None else v * scale for k, v in values.items()}, "unit": unit}


def fit_section(predictor: Any, row: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Capacity, headroom and the fit on the job's GPU (computed here for a regressor's row; null without a GPU)."""
    from gpupred.predictor.fits import fit_columns

    point, low, high = (_number(row, f"memory_mib{s}") for s in ("", "_low", "_high"))
    if "fit_probability" in row and _number(row, "fit_probability") is not None:
        fit = {k: row[k] for k in ("fits", "fit_probability", "capacity_mib", "headroom_mib")}
    elif kind and None not in (point, low, high):
        fit = fit_columns(point, low, high, kind, predictor.alpha)
    else:
        return {"gpu": kind or None, **dict.fromkeys(("capacity_mib", "capacity_gib", "headroom_mib", "headroom_gib",
                                                      "fits", "probability"))}
    cap, head = float(fit["capacity_mib"]), float(fit["headroom_mib"])
    return {"gpu": kind, "capacity_mib": cap, "capacity_gib": cap / 1024.0, "headroom_mib": head,
            "headroom_gib": head / 1024.0, "fits": bool(fit["fits"]), "probability": float(fit["fit_probability"])}


def resolved_inputs(predictor: Any, done: Any, row: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The job as the prediction resolved it (see the module notes)."""
    graph: JobGraph | None = done.graph
    model, sizes = resolved_model(done.x, graph)
    features = graph.features if graph is not None else _feature_row(done.x)
    setup = graph.setup if graph is not None else done.job.training(str(features.get("precision") or "fp32"),
                                                                     str(features.get("optimizer") or "sgd"))
    batch = graph.batch_size if graph is not None else features.get("batch_size")
    calibrated = str(row.get("calibrated", "") or "") or None
    note = str(row.get("calibration_note", "") or "") or None
    return {"model": model, "parameters": _int(features.get("params")), "batch_size": _int(batch),
            "sequence_length": sizes[0], "image_size": sizes[1], "setup": _plain(setup.as_dict()),
            "setup_changes": setup_changes(setup, _int(batch), done.own), "pipeline": pipeline_section(done.pipeline),
            "gpu": gpu_section(predictor, done.job.gpu, kind), "answered_by": str(row.get("core", "regressor")),
            "calibrated": calibrated, "calibration_note": note, "extrapolated": bool(row["extrapolated"])}


def _int(value: Any) -> int | None:
    try:
        return None if value is None or value != value else int(value)
    except (TypeError, ValueError):
        return None


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready values (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def _feature_row(x: Any) -> dict[str, Any]:
    """The one feature row given (a featurize dict, or a one-row DataFrame)."""
    if is_frame(x):
        return x.iloc[0].to_dict() if len(x) else {}
    return dict(x) if isinstance(x, dict) else {}


def setup_changes(setup: TrainingSetup, batch: int | None, own: tuple[int | None, TrainingSetup] | None) -> dict[str, Any]:
    """The options that differ from the job's own (a workload id's batch, precision and optimizer; else the sweeps'
    setup of fp32 and SGD)."""
    own_batch, own_setup = own if own is not None else (None, as_setup(None, "fp32", "sgd"))
    base = own_setup.as_dict()
    changes = {k: v for k, v in _plain(setup.as_dict()).items() if v != _plain(base).get(k)}
    if own_batch is not None and batch is not None and batch != own_batch:
        changes = {"batch_size": batch, **changes}
    return changes


def pipeline_section(pipeline: InputPipeline) -> dict[str, Any]:
    """How batches reach the GPU: resident, or a host pipeline's kind, workers, cores, the host's single-core speed
    relative to its profile's as the costs were moved (given, or the default the job got), which option named the
    host (:attr:`gpupred.setups.InputPipeline.host_named_by`; None: a GPU server as measured) and every option it
    changes."""
    speed = None
    if not pipeline.resident:
        from gpupred.step.physics.inputfeed import host_costs, job_host_speed

        speed = job_host_speed(pipeline, host_costs(pipeline))
    return {"kind": pipeline.kind, "resident": bool(pipeline.resident), "num_workers": int(pipeline.num_workers),
            "pin_memory": bool(pipeline.pin_memory), "host_cores": None if pipeline.resident else float(pipeline.cores),
            "host_speed": speed, "host_named_by": pipeline.host_named_by, "changes": _plain(pipeline.changes())}


def gpu_section(predictor: Any, asked: str | None, kind: str) -> dict[str, Any]:
    """The GPU as asked and as the hardware table names it, its memory and the runs measured on it."""
    if not kind:
        return {"asked": asked, "name": None, "memory_gib": None, "measured_runs": None}
    return {"asked": asked, "name": kind, "memory_gib": float(gpu_spec(kind).memory_gb),
            "measured_runs": int(predictor.measured_gpus.get(kind, 0))}


def resolved_model(x: Any, graph: "JobGraph | None") -> tuple[dict[str, Any], tuple[int | None, list[int] | None]]:
    """(the model as resolved: kind, name, class and head, (sequence length, image size)) of a job as given."""
    from gpupred.graph.named import info_label, named_info
    from gpupred.workloads.hubmodels import NamedModel

    if graph is None:
        name = "feature row"
        if is_frame(x) and "workload_id" in x.columns and len(x):
            name = f"feature row of {x['workload_id'].iloc[0]}"
        return {"kind": "features", "name": name, "class": None, "head": None}, (None, None)
    sizes = input_sizes(graph)
    info = named_info(graph.graph) if isinstance(graph.graph, str) and graph.graph.endswith(".onnx") else {}
    if isinstance(x, NamedModel) or info.get("key"):
        config = info.get("config", {})
        # a cached graph: the name it was built by
        name = f"{x.source} {x.shown}" if isinstance(x, NamedModel) else info_label(info) or str(graph.label)
        image = info.get("image_size")
        sizes = (_int(info.get("seq_len")) or sizes[0],
                 [int(image), int(image)] if isinstance(image, (int, float)) and image else sizes[1])
        return {"kind": "named", "name": name, "class": config.get("class") or config.get("timm_name"),
                "head": info.get("head")}, sizes
    kind = "file" if str(graph.graph) == str(graph.label) else "workload"
    return {"kind": kind, "name": str(graph.label), "class": None, "head": None}, sizes


def input_sizes(graph: "JobGraph") -> tuple[int | None, list[int] | None]:
    """(sequence length, [height, width]) of a job's graph inputs: a 2-D integer input's length (tokens), a 4-D or
    5-D float input's last two sides (an image, a video's frames); None where the graph has neither."""
    from gpupred.predictor.jobs import FLOAT_INPUTS, TOKEN_INPUTS

    seq, image = None, None
    for _name, elem, dims in graph.inputs:
        if elem in TOKEN_INPUTS and len(dims) == 2 and seq is None:
            seq = dims[1]
        elif elem in FLOAT_INPUTS and len(dims) in (4, 5) and image is None:
            image = [dims[-2], dims[-1]]
    return seq, image


def memory_parts(memory: Any, graph: "JobGraph", kind: str) -> dict[str, Any]:
    """:func:`memory_breakdown` of one job on one GPU kind by a fitted memory estimator
    (:class:`gpupred.memory.estimator.MemoryEstimator`), estimated here (an answer reads the prediction's own)."""
    import pandas as pd

    from gpupred.predictor.core import memory_row

    return memory_breakdown(memory.explain(pd.DataFrame([memory_row(graph, kind)])))


def memory_breakdown(explained: Any) -> dict[str, Any]:
    """The memory point as its parts: each footprint term, the CUDA context and the allocator's reserve (the physics'
    own figures) and the learned correction (the point less the analytic footprint), in MiB; they add up to the
    point. ``explained``: the first row of a :class:`gpupred.memory.estimator.MemoryParts` (the prediction's, kept by
    the core)."""
    estimate = {k: float(v[0]) for k, v in explained.figures.items()}
    terms = {k: float(v[0]) for k, v in explained.term_values.items()}
    context, ratio = float(explained.context[0]), float(explained.ratio[0])
    analytic, total = float(estimate["footprint"]), float(estimate["footprint*correction"])
    factor = total / analytic if analytic > 0 else 1.0
    varying = float(explained.varying[0])
    parts = {TERM_PARTS[t]: float(terms[t]) for t in TERM_PARTS}
    parts.update(cuda_context=context, allocator=(ratio - 1.0) * varying)
    parts["learned_correction"] = total - sum(parts.values())
    return {"unit": "MiB", "total": total, "parts": parts, "as_reported": as_reported(estimate),
            "analytic_mib": analytic, "allocator_ratio": ratio,
            "peak": PEAKS[0] if explained.at_backward[0] else PEAKS[1], "correction_factor": factor,
            "note": MEMORY_NOTE}


def as_reported(estimate: Mapping[str, float]) -> dict[str, float]:
    """The memory point as the three figures users compare it with (MiB), from the memory estimator's row
    (:meth:`gpupred.memory.estimator.MemoryEstimator.predict`, the same figures a predict frame's
    ``memory_allocated_mib`` and ``memory_reserved_mib`` carry): torch's allocated peak
    (``torch.cuda.max_memory_allocated()``, what training frameworks log), torch's reserved peak
    (``max_memory_reserved()``) and the device memory NVML shows (the point: the reserved peak, the CUDA context and
    paged optimizer states, which live in CUDA unified memory outside torch's allocator)."""
    return {"torch_allocated_peak": float(estimate["allocated"]), "torch_reserved_peak": float(estimate["reserved"]),
            "device": float(estimate["footprint*correction"])}


def time_breakdown(core: Any, done: Any, kind: str, step_s: float) -> dict[str, Any]:
    """The step-time point as its parts (device busy, host and synchronization, input stall), the device time by op
    class and by phase, the optimizer step's share and the input pipeline, in ms (see the module notes)."""
    from gpupred.step.physics.timeline import kernel_times, simulate
    from gpupred.predictor.core import job_loader

    graph: JobGraph = done.graph
    kl, spec, precision = graph.kernels, gpu_spec(kind), graph.setup.precision
    constants, _ = core.models_for(kind, done.calibration)
    loader = job_loader(graph, done.pipeline)
    fed = simulate(kl, spec, precision, constants, "step", loader is not None, loader)
    resident = simulate(kl, spec, precision, constants, "step") if loader is not None else fed
    times = kernel_times(kl, spec, precision, constants)
    factor = step_s / fed.step_s if fed.step_s > 0 else 1.0
    ms = 1000.0 * factor
    by_class = {name: float(times[kl.tensor_core == code].sum()) * ms for code, name in OP_CLASSES.items()}
    by_phase = {name: float(times[kl.phase == p].sum()) * ms for p, name in enumerate(PHASE_NAMES)}
    busy = float(times.sum()) * ms
    parts = {"device_busy": busy, "host_and_sync": (resident.step_s - float(times.sum())) * ms,
             "input_stall": (fed.step_s - resident.step_s) * ms}
    top = [{"op_class": k, "ms": v, "share_of_device": v / busy if busy > 0 else 0.0}
           for k, v in sorted(by_class.items(), key=lambda kv: -kv[1]) if v > 0]
    piped = {"kind": done.pipeline.kind, "num_workers": int(done.pipeline.num_workers),
             "batch_make_ms": None if loader is None else 1000.0 * loader.produce_s,
             "main_process_ms": None if loader is None else 1000.0 * loader.main_s, "stall_ms": parts["input_stall"]}
    return {"unit": "ms", "total": step_s * 1000.0, "parts": parts, "device_by_op_class": by_class,
            "device_by_phase": by_phase, "top_op_classes": top,
            "optimizer_step": {"device_ms": by_phase["optimizer"], "share_of_step": by_phase["optimizer"] / (ms * fed.step_s)},
            "host_busy_ms": fed.host_s * ms, "input_pipeline": piped, "physics_step_ms": fed.step_s * 1000.0,
            "correction_factor": factor, "spread": TIME_SPREAD}


def point_columns(answer: dict[str, Any]) -> dict[str, float]:
    """Each figure's point that applies, under :meth:`gpupred.predictor.predictor.Predictor.predict`'s column name and
    unit (``iter_time_mean_s`` in seconds)."""
    figures = answer["figures"]
    return {column: figures[name]["point"] / scale for name, (column, _, scale) in FIGURES.items()
            if figures[name]["point"] is not None}


def answer_json(answer: dict[str, Any]) -> str:
    """The answer as one line of JSON (what ``gpupred predict --json`` prints)."""
    return json.dumps(answer)


# ---------------------------------------------------------------- the answer as text

SECTIONS: tuple[str, ...] = ("inputs", "figures", "fit", "memory breakdown", "time breakdown", "caveats")
FIGURE_LABELS: dict[str, str] = {"gpu_util": "gpu_util", "sm_active": "sm_active", "step_time": "step time",
                                 "throughput": "throughput", "memory": "memory"}


def render_text(answer: dict[str, Any]) -> str:
    """The answer for a person: whether it fits first, then one section per part of the contract, every section
    always there."""
    lines = [_verdict(answer["fit"]), f"[answer {answer['schema']}]"]
    for title, render in zip(SECTIONS, (_text_inputs, _text_figures, _text_fit, _text_memory, _text_time,
                                        _text_caveats)):
        lines += [f"{title}:", *("  " + line for line in render(answer))]
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _options(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={'/'.join(map(str, v)) or 'none' if isinstance(v, list) else v}"
                     for k, v in values.items()) or "none"


def _wrapped(label: str, text: str, width: int = 100) -> list[str]:
    """``label`` and ``text`` as lines of at most ``width`` characters, the continuations indented under the text."""
    import textwrap

    return textwrap.wrap(text, width, initial_indent=label, subsequent_indent=" " * len(label)) or [label]


def _text_inputs(answer: dict[str, Any]) -> list[str]:
    i = answer["inputs"]
    model, gpu, pipe = i["model"], i["gpu"], i["pipeline"]
    built = "".join(f", {k} {model[k]}" for k in ("class", "head") if model[k])
    size = (f"sequence length {i['sequence_length']}" if i["sequence_length"] else
            f"image {i['image_size'][0]}x{i['image_size'][1]}" if i["image_size"] else "input size n/a")
    params = "n/a" if i["parameters"] is None else f"{i['parameters']:,} ({i['parameters'] / 1e6:.1f}M)"
    changes = pipe["changes"]
    named_by = pipe["host_named_by"]
    server = ("" if named_by in ("host_speed", "profile") else  # the job names its host's speed or its profile
              f" (a host of score {changes['host_score']:.2f})" if named_by == "host_score" else  # or calibrated
              f" (a GPU server as measured; the intervals span hosts scoring {HOST_SCORE_BAND[0]:.2f}-"
              f"{HOST_SCORE_BAND[1]:.2f}: --host-score or --loader-profile narrows them)")  # none named: GPU_HOST_SCORE
    feed = ("resident (batches already on the GPU, as the sweeps ran)" if pipe["resident"] else
            f"{pipe['kind']}, {pipe['num_workers']} workers, {pipe['host_cores']:g} host cores at "
            f"{pipe['host_speed']:.2f}x the host profile's single-core speed{server} ({_options(changes)})")
    asked = f" (asked: {gpu['asked']})" if gpu["asked"] and gpu["asked"] != gpu["name"] else ""
    card = ("n/a" if gpu["name"] is None else f"{gpu['name']}{asked}, {gpu['memory_gib']:g} GiB, "
            f"{gpu['measured_runs']} measured runs")
    status = "measured"
    if i["extrapolated"]:  # runs measured by others (Lucid's launch-blocking loops, GPUMemNet's DCGM) lend no constants
        where = "this GPU under this project's protocol" if gpu["measured_runs"] else "this GPU"
        status = f"extrapolated (no measurements on {where}: intervals widened)"
    if i["calibrated"]:
        status = f"calibrated by {i['calibrated']}"
    note = f" ({i['calibration_note']})" if i["calibration_note"] else ""
    return [f"model        {model['kind']} {model['name']}{built}",
            f"parameters   {params}", f"batch        {_fmt(i['batch_size'], 0)}, {size}",
            *_wrapped("setup        ", _options(i["setup"])),
            f"changed      {_options(i['setup_changes'])} (from the job's own)",
            *_wrapped("pipeline     ", feed), f"gpu          {card}", f"answered by  {i['answered_by']}",
            f"standing     {status}{note}"]


def _text_figures(answer: dict[str, Any]) -> list[str]:
    f = answer["figures"]
    lines = [f"({f['interval']:.0%} intervals)"]
    for name, label in FIGURE_LABELS.items():
        fig = f[name]
        digits = 2 if fig["unit"] == "ms" else 1
        text = (f"{label:12s} {_fmt(fig['point'], digits):>12s} {fig['unit']:9s} "
                f"[{_fmt(fig['low'], digits)}, {_fmt(fig['high'], digits)}]")
        if name == "memory" and fig["point"] is not None:
            text += f"  = {fig['point_gib']:.2f} GiB [{fig['low_gib']:.2f}, {fig['high_gib']:.2f}]"
        lines.append(text if fig["point"] is not None else f"{label:12s} {'n/a':>12s} (not predicted for this input)")
    return lines


def _verdict(fit: dict[str, Any]) -> str:
    if fit["fits"] is None:
        return "fits: n/a (no GPU named, or no memory figure)"
    return (f"fits: {'yes' if fit['fits'] else 'NO'} (P(memory <= {fit['capacity_mib']:.0f} MiB) = "
            f"{fit['probability']:.3f}) on {fit['gpu']}")


def _text_fit(answer: dict[str, Any]) -> list[str]:
    fit = answer["fit"]
    if fit["fits"] is None:
        return ["n/a (no GPU named, or no memory figure)"]
    return [f"{'fits' if fit['fits'] else 'does NOT fit'} on {fit['gpu']}: probability {fit['probability']:.3f} "
            "(the memory interval read as a log-normal's)",
            f"capacity {fit['capacity_mib']:,.0f} MiB ({fit['capacity_gib']:.1f} GiB), headroom at the point "
            f"{fit['headroom_mib']:,.0f} MiB ({fit['headroom_gib']:.1f} GiB)"]


def _text_memory(answer: dict[str, Any]) -> list[str]:
    mem = answer["memory_breakdown"]
    if mem is None:
        return ["n/a (answered by the regressors from a feature row: no footprint terms)"]
    lines = [f"{name:16s} {value:12,.1f} MiB  {value / mem['total']:6.1%}" for name, value in mem["parts"].items()]
    seen = mem["as_reported"]
    return [*lines, f"{'peak':16s} at the {mem['peak']}",
            f"{'as reported':16s} torch allocated {seen['torch_allocated_peak']:,.0f} MiB, torch reserved "
            f"{seen['torch_reserved_peak']:,.0f} MiB, device (NVML) {seen['device']:,.0f} MiB",
            f"{'total':16s} {mem['total']:12,.1f} MiB  (analytic {mem['analytic_mib']:,.1f} MiB x correction "
            f"{mem['correction_factor']:.3f}, the learned_correction part; allocator ratio "
            f"{mem['allocator_ratio']:.3f})"]


def _text_time(answer: dict[str, Any]) -> list[str]:
    t = answer["time_breakdown"]
    if t is None:
        return ["n/a (no step time: a feature row has no kernels for the step model)"]
    lines = [f"{name:16s} {value:12,.2f} ms  {value / t['total']:6.1%}" for name, value in t["parts"].items()]
    lines.append(f"{'step':16s} {t['total']:12,.2f} ms  (timeline {t['physics_step_ms']:,.2f} ms x correction "
                 f"{t['correction_factor']:.3f}, spread over every part)")
    top = ", ".join(f"{OP_LABELS[c['op_class']]} {c['ms']:,.2f} ms ({c['share_of_device']:.0%})"
                    for c in t["top_op_classes"][:3])
    lines.append(f"device by op  {top or 'none'}")
    lines.append("device by phase " + ", ".join(f"{k} {v:,.2f} ms" for k, v in t["device_by_phase"].items()))
    opt = t["optimizer_step"]
    lines.append(f"optimizer step {opt['device_ms']:,.2f} ms on the device ({opt['share_of_step']:.1%} of the step); "
                 f"host busy {t['host_busy_ms']:,.2f} ms per step")
    pipe = t["input_pipeline"]
    lines.append("input pipeline none (resident batches)" if pipe["batch_make_ms"] is None else
                 f"input pipeline {pipe['kind']}, {pipe['num_workers']} workers: one batch made in "
                 f"{pipe['batch_make_ms']:,.2f} ms, stall {pipe['stall_ms']:,.2f} ms per step")
    return lines


def _text_caveats(answer: dict[str, Any]) -> list[str]:
    if not answer["caveats"]:
        return ["none"]
    return [", ".join(answer["caveats"]) + " (failure classes the step model does not model whole: intervals "
            "widened; see the card's core.failure_classes)"]
