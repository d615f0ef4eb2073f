"""Real-world graphs through the predictor's physics: the corpus (timm, Hugging Face) and the real-size decoders.

For every model of ``data/corpus/`` (its structure-only graph and the figures torch recorded at export), torch-free:

- parameters and forward FLOPs of the featurized graph against torch's ``sum(p.numel())`` and FlopCounterMode, at
  the export batch;
- the step model's step time and utilization (:mod:`gpupred.step.physics`, with the constants fitted on the measured runs)
  and the analytic footprint (:mod:`gpupred.memory.physics`, its context and allocator fitted likewise), at a batch a
  user would train it with (:data:`REALWORLD_BATCH`), in bf16 autocast with Adam on one GPU: the predictor's core
  without its learned, bounded corrections;
- the analytic mixed-precision Adam count of Korthikanti et al. ("Reducing Activation Recomputation in Large
  Transformer Models", 2022) for the decoders whose dimensions the index records: 16 bytes per parameter (16-bit
  weights and gradients, fp32 master weights, Adam's two fp32 moments) plus, per layer, ``s b h (34 + 5 a s / h)``
  bytes of 16-bit activations saved for backward (no recomputation, GPT-style layers with dropout); without the
  attention scores (``5 a s / h``: what a fused attention kernel never stores) ``34 s b h``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

KORTHIKANTI_BYTES_PER_PARAM = 16  # fp16 weights (2) + fp16 gradients (2) + fp32 master weights (4) + Adam (8)
KORTHIKANTI_ACT_PER_SBH = 34  # bytes per layer per token per hidden unit, without the attention-score terms
KORTHIKANTI_SCORES_PER_AS2B = 5  # bytes per layer per head per (query, key) pair per sample: scores, softmax, mask
# the batch each kind of corpus model is predicted at: timm's image classifiers as a fine-tune batch, the small
# Hugging Face configs at their corpus sequence (32 tokens), the real-size decoders one sequence of 2048 per GPU
REALWORLD_BATCH: dict[str, int] = {"timm": 64, "hf": 32, "llm": 1}
PROTOCOL = "nvml-poll"  # the step model's constants of this project's measurement protocol
FOOTPRINT_SOURCE = "gpupred"  # the footprint's constants of this project's runs


def korthikanti_bytes(params: float, layers: int, hidden: int, heads: int, seq: int, batch: int,
                      scores: bool = True) -> float:
    """Mixed-precision Adam training memory of a GPT-style decoder in bytes (Korthikanti et al. 2022, no
    recomputation); ``scores=False`` leaves out the attention scores a fused attention kernel never stores."""
    per_layer = KORTHIKANTI_ACT_PER_SBH + (KORTHIKANTI_SCORES_PER_AS2B * heads * seq / hidden if scores else 0.0)
    return KORTHIKANTI_BYTES_PER_PARAM * params + layers * seq * batch * hidden * per_layer


def kind_of(name: str) -> str:
    """A corpus model's kind: ``timm``, ``hf`` (small configs) or ``llm`` (real-size decoders)."""
    return name.split("-", 1)[0]


def realworld_row(name: str, entry: dict[str, Any], gpu: str, table: Any, footprint: Any, precision: str = "bf16",
                  optimizer: str = "adam", folder: Path | None = None) -> dict[str, Any]:
    """One corpus model: its graph's parameters and FLOPs against torch's, predicted step and memory, the analytic count."""
    from gpupred.memory.physics import footprint_mib, graph_terms
    from gpupred.graph.features import featurize
    from gpupred.graph.corpus import corpus_path
    from gpupred.hardware import gpu_spec
    from gpupred.step.physics.model import kernels_for
    from gpupred.step.physics.timeline import simulate

    start = time.perf_counter()
    path = corpus_path(name, folder=folder)
    at_export = featurize(path, batch_size=entry["export_batch"], warn=False)
    kind = kind_of(name)
    batch = REALWORLD_BATCH[kind]
    features = featurize(path, batch_size=batch, precision=precision, optimizer=optimizer, warn=False)
    spec = gpu_spec(gpu)
    step = simulate(kernels_for(path, batch, precision, optimizer), spec, precision, table.get(spec.name, PROTOCOL))
    memory = footprint_mib(features, spec.name, precision, optimizer, graph_terms(path, batch), FOOTPRINT_SOURCE,
                           footprint)
    torch_params = entry["torch_params"] - entry.get("torch_params_unused", 0)
    row = {"model": name, "kind": kind, "params": at_export["params"], "torch_params": torch_params,
           "params_ratio": at_export["params"] / torch_params,
           "flops_ratio": 2 * at_export["macs_fwd"] / entry["torch_flops_fwd"] if entry["torch_flops_fwd"] else np.nan,
           "batch_size": batch, "step_s": step.step_s, "util": step.util, "kernels": step.kernels,
           "memory_gib": memory / 1024, "gpu_gib": spec.memory_gb * 1e9 / 2**30}
    dims = entry.get("dims")
    if dims:
        for scores in (True, False):
            total = korthikanti_bytes(torch_params, dims["layers"], dims["hidden"], dims["heads"], entry["seq"], batch,
                                      scores)
            row["korthikanti_gib" if scores else "korthikanti_fused_gib"] = total / 2**30
    row["seconds"] = time.perf_counter() - start
    return row


def realworld_table(gpu: str, table: Any, footprint: Any, precision: str = "bf16", optimizer: str = "adam",
                    folder: Path | None = None, names: list[str] | None = None, progress: bool = True,
                    n_jobs: int = 1) -> pd.DataFrame:
    """:func:`realworld_row` for every model of the corpus (``data/corpus/``; only ``names`` if given), one row each,
    on ``n_jobs`` processes (the figures do not depend on how many; ``seconds`` is each model's own wall time)."""
    from gpupred.graph.corpus import read_corpus_index
    from gpupred.learn.parallel import parallel_map

    models = {n: e for n, e in read_corpus_index(folder)["models"].items()
              if "error" not in e and (names is None or n in names)}
    rows = parallel_map(realworld_row, [(name, entry, gpu, table, footprint, precision, optimizer, folder)
                                        for name, entry in models.items()], n_jobs, "real-world graphs", progress,
                        unit="model")
    return pd.DataFrame(rows).set_index("model")


def plot_realworld_steps(df: pd.DataFrame, rw: pd.DataFrame, gpu: str) -> Any:
    """The catalog's measured step times on ``gpu`` per family (grey) beside the predicted ones of the real-world
    graphs per kind (colour), on one log axis."""
    import matplotlib.pyplot as plt

    from gpupred.hardware import gpu_spec

    kind = gpu_spec(gpu).name
    measured = df[(df["gpu"].map(lambda g: gpu_spec(str(g)).name) == kind) & df["iter_time_mean_s"].notna()]
    groups = [(f, g["iter_time_mean_s"].to_numpy()) for f, g in measured.groupby("family")]
    groups += [(f"{k} (predicted)", g["step_s"].to_numpy()) for k, g in rw.groupby("kind")]
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(groups) + 1.5))
    for y, (label, values) in enumerate(groups):
        colour = "tab:red" if label.endswith("(predicted)") else "0.5"
        ax.scatter(values, np.full(len(values), y) + np.random.default_rng(y).uniform(-0.2, 0.2, len(values)),
                   s=8, color=colour, alpha=0.7)
    ax.set_yticks(range(len(groups)), [label for label, _ in groups])
    ax.set_xscale("log")
    ax.set_xlabel(f"step time on {kind} (s): catalog measured (grey), real-world graphs predicted (red)")
    fig.tight_layout()
    return fig


def realworld_metrics(rw: pd.DataFrame, gpu: str) -> dict[str, Any]:
    """Figures of merit of the real-world section: agreement with torch's counts, and the decoders' predictions."""
    llms = rw[rw["kind"] == "llm"]
    out: dict[str, Any] = {
        "realworld_gpu": gpu, "realworld_models": int(len(rw)),
        "realworld_params_exact_share": float((rw["params"] == rw["torch_params"]).mean()),
        "realworld_flops_within_2pct_share": float(((rw["flops_ratio"] - 1).abs() <= 0.02).mean()),
    }
    if len(llms):
        out["realworld_llm"] = {
            name: {"params": int(r["params"]), "memory_gib": round(float(r["memory_gib"]), 2),
                   "korthikanti_fused_gib": round(float(r.get("korthikanti_fused_gib", np.nan)), 2),
                   "korthikanti_gib": round(float(r.get("korthikanti_gib", np.nan)), 2),
                   "step_s": round(float(r["step_s"]), 4)}
            for name, r in llms.iterrows()}
    return out


FINETUNE_RANK = 16  # the LoRA rank of the fine-tuning recipes (peft's examples and the QLoRA paper's range)


def finetune_recipes() -> dict[str, Any]:
    """The fine-tuning recipes people run on one GPU, as training setups (:mod:`gpupred.setups`): a full fine-tune
    in bf16 autocast with fused AdamW (the Trainer's default), LoRA on a bf16 base, and QLoRA (4-bit NF4 base, 16-bit
    compute, paged 8-bit AdamW as the QLoRA paper trains); each with gradient checkpointing, as such fine-tunes run."""
    from gpupred.setups import setup_of

    return {"full": setup_of("bf16", "adamw", optimizer_impl="fused", checkpointing=True),
            "lora": setup_of("bf16-pure", "adamw", lora_rank=FINETUNE_RANK, checkpointing=True),
            "qlora": setup_of("bf16", "paged_adamw8bit", lora_rank=FINETUNE_RANK, qlora=True, checkpointing=True)}


def state_count_gib(recipe: str, params: float, trainable: float) -> float:
    """The hand count of weights, gradients and optimizer state (GiB): full mixed-precision AdamW 16 bytes per
    parameter (Korthikanti et al.), LoRA 2 bytes per frozen bf16 weight, QLoRA about 0.52 (NF4 with double
    quantization), plus 16 bytes per trainable adapter parameter (fp32 weight, gradient and AdamW's two moments)."""
    frozen = {"full": 0.0, "lora": 2.0, "qlora": 0.516}[recipe]
    per_trainable = KORTHIKANTI_BYTES_PER_PARAM
    trained = params if recipe == "full" else trainable
    return (frozen * (params - trained) + per_trainable * trained) / 2**30


def finetune_row(path: Any, name: str, recipe: str, setup: Any, estimator: Any, gpus: list[str], alpha: float,
                 batch: int) -> dict[str, Any]:
    """One decoder under one recipe: the memory estimator's answer on the first GPU, the hand count of its states,
    and every GPU of ``gpus`` it fits on with probability at least ``FIT_THRESHOLD`` (of those the recipe runs on:
    no bf16 recipe runs before compute capability 8.0, :func:`gpupred.predictor.jobs.check_setup_on_gpu`)."""
    from gpupred.predictor.core import memory_row
    from gpupred.predictor.fits import FIT_THRESHOLD, capacity_mib, fit_probability
    from gpupred.predictor.jobgraph import job_graph
    from gpupred.predictor.jobs import setup_runs_on

    job = job_graph(str(path), name, batch, setup)
    rows = pd.DataFrame([memory_row(job, gpu) for gpu in gpus])
    mem = estimator.predict(rows)
    probs = [fit_probability(float(m), float(lo), float(hi), capacity_mib(g), alpha)
             for g, m, lo, hi in zip(gpus, mem["footprint*correction"], mem["low"], mem["high"])]
    from gpupred.finetune import ADAPTER_BYTES

    params = float(job.row["params"])  # adapters train in fp32: their gradients' bytes count them
    trainable = job.terms["grad_bytes"] / ADAPTER_BYTES if setup.lora else params
    return {"model": name, "recipe": recipe, "params": params, "trainable": trainable,
            "memory_gib": float(mem["footprint*correction"].iloc[0]) / 1024,
            "memory_low_gib": float(mem["low"].iloc[0]) / 1024, "memory_high_gib": float(mem["high"].iloc[0]) / 1024,
            "states_count_gib": state_count_gib(recipe, params, trainable),
            "fits_on": ", ".join(g for g, p in zip(gpus, probs) if p >= FIT_THRESHOLD and setup_runs_on(setup, g))
            or "none"}


def finetune_table(estimator: Any, gpus: list[str], alpha: float = 0.1, batch: int = 1, folder: Path | None = None,
                   names: list[str] | None = None) -> pd.DataFrame:
    """The corpus's real-size decoders under :func:`finetune_recipes`, one row per (model, recipe): predicted memory
    (``estimator``: a fitted :class:`gpupred.memory.estimator.MemoryEstimator`) on ``gpus[0]`` with its interval, the
    hand count of its states, and the GPUs it fits on."""
    from gpupred.graph.corpus import corpus_path, read_corpus_index

    models = [n for n, e in read_corpus_index(folder)["models"].items()
              if kind_of(n) == "llm" and "error" not in e and (names is None or n in names)]
    rows = [finetune_row(corpus_path(n, folder=folder), n, recipe, setup, estimator, gpus, alpha, batch)
            for n in models for recipe, setup in finetune_recipes().items()]
    return pd.DataFrame(rows).set_index(["model", "recipe"]) if rows else pd.DataFrame()


def finetune_metrics(table: pd.DataFrame) -> dict[str, float]:
    """Notebook 05's fine-tuning figures: per decoder and recipe, predicted memory and the states' hand count (GiB)."""
    out: dict[str, float] = {}
    for (model, recipe), row in table.iterrows():
        key = model.replace("-", "_").replace(".", "_")
        for col in ("memory_gib", "states_count_gib"):
            out[f"memory_finetune_{key}_{recipe}_{col}"] = round(float(row[col]), 2)
    return out


MEASURED_FIGURES: dict[str, str] = {"torch_allocated_peak": "torch_peak_allocated_mib",
                                    "torch_reserved_peak": "torch_peak_reserved_mib", "device": "memory_mib"}


def finetune_runs(raw_root: Path | None = None) -> pd.DataFrame:
    """This project's measured fine-tune runs: solo run rows under ``raw_root`` (data/raw) trained under setup
    options (the campaign's stage 3, ``setup`` not empty), with their NVML memory label (``memory_mib``, the dataset's
    label rule: :func:`gpupred.profile.labels.memory_label`) and their window's mean utilization (``gpu_util``, as
    the dataset labels a run: :func:`gpupred.dataset.window_labels`; NaN without samples); none where no such sweep
    was measured yet."""
    from gpupred import config
    from gpupred.dataset import window_labels
    from gpupred.profile.labels import memory_label
    from gpupred.profile.schema import read_runs, read_samples, run_setups

    runs = read_runs(Path(raw_root) if raw_root is not None else config.RAW)
    runs = runs[(run_setups(runs) != "") & ~runs["simulated"].astype(bool) & (runs["group_size"] == 1)].copy()
    memory, util = {}, {}
    for sweep_dir, group in runs.groupby("sweep_dir", sort=True):
        samples = read_samples(Path(sweep_dir), sorted(set(group["group_id"])))
        for i, run in group.iterrows():
            memory[i] = memory_label(run, samples)[0]
            util[i] = window_labels(run, samples)[0].get("gpu_util", np.nan)
    runs["memory_mib"], runs["gpu_util"] = pd.Series(memory, dtype=float), pd.Series(util, dtype=float)
    return runs.reset_index(drop=True)


def finetune_job(run: dict[str, Any], gpu: str) -> tuple[dict[str, Any], Any]:
    """A measured fine-tune run's columns (its group, ``gpu`` as the caller labels it, model, sequence, batch, recipe,
    status, and an empty note) and its job graph from the store: None, the note saying why, where the store lacks
    the graph. What :func:`finetune_measured` and :func:`finetune_steps` compare."""
    from gpupred.graph.export import stored_graph
    from gpupred.predictor.jobgraph import job_graph
    from gpupred.setups import setup_from_json
    from gpupred.workloads.spec import WorkloadSpec

    spec, setup = WorkloadSpec.from_id(run["workload_id"]), setup_from_json(run["setup"])
    row = {"group_id": run["group_id"], "gpu": gpu, "model": spec.arch, "seq_len": spec.input_size,
           "batch": spec.batch_size, "recipe": setup.recipe, "status": run["status"], "note": ""}
    graph = stored_graph(spec)
    if graph is None:
        return {**row, "note": f"no stored graph of {spec.arch_key}: `gpupred export --store` adds it"}, None
    return row, job_graph(str(graph), spec.id, spec.batch_size, setup)


def finetune_measured(estimator: Any, runs: pd.DataFrame) -> pd.DataFrame:
    """Each measured fine-tune run (:func:`finetune_runs`) beside the memory estimator's prediction of it, in the
    three figures users read (:func:`gpupred.predictor.answer.as_reported`: torch's allocated and reserved peaks,
    NVML's device memory), with the log error of each; a run whose graph the store lacks is kept with its reason."""
    from gpupred.predictor.answer import memory_parts

    rows = []
    for run in runs.to_dict("records"):
        row, job = finetune_job(run, run["gpu_name"])
        if job is None:
            rows.append(row)
            continue
        predicted = memory_parts(estimator, job, run["gpu_name"])
        for figure, column in MEASURED_FIGURES.items():
            measured, guess = float(run.get(column, np.nan)), float(predicted["as_reported"][figure])
            row.update({f"{figure}_measured_mib": measured, f"{figure}_predicted_mib": guess,
                        f"{figure}_log_error": np.log(guess / measured) if measured > 0 else np.nan})
        rows.append(row)
    return pd.DataFrame(rows)


def finetune_measured_metrics(table: pd.DataFrame) -> dict[str, float]:
    """Notebook 05's figures of the measured fine-tunes: runs compared, and per figure the median and 90th percentile
    of the absolute relative error (|predicted / measured - 1|) over the ok runs."""
    ok = table[table["status"] == "ok"] if len(table) else table
    out: dict[str, float] = {"memory_finetune_measured_runs": float(len(ok))}
    for figure in MEASURED_FIGURES:
        column = f"{figure}_log_error"
        err = np.abs(np.expm1(ok[column].dropna().to_numpy(float))) if column in ok.columns else np.array([])
        out[f"memory_finetune_measured_{figure}_median_error"] = float(np.median(err)) if len(err) else float("nan")
        out[f"memory_finetune_measured_{figure}_p90_error"] = float(np.quantile(err, 0.9)) if len(err) else float("nan")
    return out


def finetune_steps(table: Any, runs: pd.DataFrame) -> pd.DataFrame:
    """Each measured fine-tune run (:func:`finetune_runs`) beside the step model's step time and utilization of it
    under the constants ``table`` (a :class:`gpupred.step.physics.constants.ConstantsTable`: its GPU kind's fit under
    this project's protocol, physics alone as the rest of the real-world section), with the step time's log error
    and the utilization's error in points; a run whose graph the store lacks is kept with its reason."""
    from gpupred.hardware import gpu_spec
    from gpupred.predictor.core import PROTOCOL
    from gpupred.step.physics.timeline import simulate

    rows = []
    for run in runs.to_dict("records"):
        gpu = gpu_spec(run["gpu_name"])
        row, job = finetune_job(run, gpu.name)
        row.update(step_measured_s=float(run["iter_time_mean_s"]), util_measured=float(run.get("gpu_util", np.nan)))
        if job is None:
            rows.append(row)
            continue
        est = simulate(job.kernels, gpu, job.setup.precision, table.get(gpu.name, PROTOCOL), str(run["sync"]))
        rows.append({**row, "step_predicted_s": est.step_s, "util_predicted": est.util,
                     "step_log_error": float(np.log(est.step_s / row["step_measured_s"])),
                     "util_error_points": est.util - row["util_measured"]})
    return pd.DataFrame(rows)


def finetune_step_metrics(table: pd.DataFrame) -> dict[str, float]:
    """Notebook 03's figures of the measured fine-tunes' step times: runs compared, the median and 90th percentile of
    the step time's absolute relative error, per recipe its median, and the utilization's median absolute error in
    points, over the ok runs."""
    ok = table[(table["status"] == "ok") & table["step_log_error"].notna()] if "step_log_error" in table else table[:0]
    err = np.abs(np.expm1(ok["step_log_error"].to_numpy(float))) if len(ok) else np.array([])
    out: dict[str, float] = {"realworld_finetune_runs": float(len(ok))}
    if not len(err):
        return out
    out["realworld_finetune_step_median_error"] = float(np.median(err))
    out["realworld_finetune_step_p90_error"] = float(np.quantile(err, 0.9))
    out["realworld_finetune_util_mae_points"] = float(np.median(np.abs(ok["util_error_points"].to_numpy(float))))
    for recipe, part in ok.groupby("recipe"):
        part_err = np.abs(np.expm1(part["step_log_error"].to_numpy(float)))
        out[f"realworld_finetune_step_{recipe}_median_error"] = float(np.median(part_err))
    return out


# What notebook 03 writes of the real-world section (gpupred.contracts assembles its contract).
REALWORLD_METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (r"realworld_(gpu|models|params_exact_share|flops_within_2pct_share|llm)",
     "the real-world section (gpupred.predictor.realworld_report): corpus graphs against torch's counts, the decoders' "
     "predictions"),
    (r"realworld_finetune_(runs|step_\w+|util_\w+)",
     "the measured fine-tunes' step time and utilization against the step model (gpupred.predictor.realworld_report."
     "finetune_steps)"),
)
