"""The predictor's physics-first core: the step model x a learned correction, the memory footprint x a bounded one.

For a job given as a graph (an ONNX file, or a workload id whose graph is in the store), the exported predictor
answers from physics (:mod:`gpupred.perf`, :mod:`gpupred.footprint`) with learned corrections on top
(:class:`gpupred.learn.physics.PhysicsPredictor`, :class:`gpupred.memory.FootprintModel`), so its answers scale
with the model and the GPU instead of stopping at the largest training label. Targets:

- ``gpu_util`` and ``sm_active``: the step model's analytic utilization x a CV+ correction;
- ``iter_time_mean_s`` (seconds per step) and ``samples_per_s`` (batch size / step time): the step model's step
  time x a CV+ correction;
- ``memory_mib``: the analytic footprint x a bounded correction (its clip, at most x0.61..x1.65, and size chosen by a
  leave-one-family-out of the training rows), intervals calibrated on
  leave-one-family-out residuals.

A new job is predicted as this project's sweeps measure it (a sync per step, device-resident batches, NVML
polling). On a GPU kind without measurements the step model borrows what the measured GPUs can lend
(:meth:`gpupred.perf.ConstantsTable.get`): the host constants the same protocol was fitted to, and the device
constants of the same architecture (else the published defaults); the prediction is marked extrapolated; the
intervals of the step-model targets are widened to at least the extrapolation width of
:func:`gpupred.learn.physics.extrapolation_width`: each measured (GPU kind, protocol) held out in turn, predicted as
an unmeasured one borrows, the conformal quantile of physics' log error on their rows, each key weighing the same
(how wrong physics is when its constants were not fitted to the GPU, by the rule that predicts); the footprint's
intervals widen by its own rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpupred.dataset import SOURCE_OWN
from gpupred.hardware import gpu_spec
from gpupred.learn.conformal import conformal_quantile, widen
from gpupred.perf.caveats import CAVEATS, widest
from gpupred.setups import FRAMEWORK_DEFAULTS

STEP_TARGETS: tuple[str, ...] = ("gpu_util", "sm_active", "iter_time_mean_s")
CORE_TARGETS: tuple[str, ...] = (*STEP_TARGETS, "samples_per_s", "memory_mib")
PROTOCOL = "nvml-poll"  # how this project's sweeps measure: what a new job is predicted as


def default_physics_width(df: pd.DataFrame, target: str, alpha: float) -> float:
    """The conformal 1 - alpha quantile of |log error| of the default-constant step model on ``df``'s labelled rows
    (log1p scale for utilization targets, log scale for step time)."""
    from gpupred.learn.physics import default_log_error

    err = default_log_error(df, target)
    return conformal_quantile(err[np.isfinite(err)], alpha)


def extrapolated_width(df: pd.DataFrame, pdata: Any, table: Any, target: str, alpha: float) -> float:
    """The log width an unmeasured GPU's ``target`` interval reaches: :func:`gpupred.learn.physics.extrapolation_width`
    over ``df``'s labelled rows, holding out keys when ``PROTOCOL`` has a fit (a new GPU borrows its host constants),
    whole protocols when it has none; :func:`default_physics_width` when no key has enough rows to hold out."""
    from gpupred.learn.physics import PHYSICS_TARGETS, extrapolation_width

    y = df[target].to_numpy(float)
    rows = np.flatnonzero(np.isfinite(y))
    level = "key" if any(p == PROTOCOL for _, p in table.fitted) else "protocol"
    width = extrapolation_width(pdata, table, rows, y, PHYSICS_TARGETS[target] == "step", alpha, level)
    return default_physics_width(df.iloc[rows], target, alpha) if np.isnan(width) else width


@dataclass
class JobGraph:
    """One job given as a graph: its feature row, the step's kernels and the footprint's graph terms, under its
    training setup (:class:`gpupred.setups.TrainingSetup`)."""

    row: dict[str, float]
    kernels: Any
    terms: dict[str, float]
    precision: str
    optimizer: str
    setup: Any = None  # gpupred.setups.TrainingSetup; None: the sweeps' setup of precision and optimizer


def job_graph(graph: Any, row: dict[str, Any]) -> JobGraph:
    """The kernels and footprint terms of a :class:`gpupred.predictor.artifact.GraphJob`, beside its feature row."""
    from gpupred.dataset import encode
    from gpupred.footprint import graph_terms
    from gpupred.perf import kernels_for

    setup = graph.training()
    kernels = kernels_for(graph.graph, graph.batch_size, setup.precision, setup.optimizer, key=graph.key,
                          recipe=graph.recipe, setup=setup)
    return JobGraph({**row, **encode(setup.job_precision, setup.job_optimizer)}, kernels,
                    graph_terms(graph.graph, graph.batch_size, setup), setup.precision, setup.optimizer, setup)


class PhysicsCore:
    """Physics x correction for every core target, fitted on a dataset frame (see the module docstring)."""

    def __init__(self, alpha: float = 0.1, seed: int = 0) -> None:
        self.alpha = alpha
        self.seed = seed

    def fit(self, df: pd.DataFrame) -> "PhysicsCore":
        """Fit the step model's constants and corrections, and the memory footprint model, on every labelled row."""
        from gpupred.footprint import footprint_columns
        from gpupred.learn.nested import CVSettings
        from gpupred.learn.physics import fit_physics_predictor, physics_data
        from gpupred.memory import FootprintModel

        targets = tuple(t for t in STEP_TARGETS if t in df.columns and df[t].notna().sum() >= 10)
        pdata = physics_data(df)
        self.physics_ = fit_physics_predictor(df, targets, pdata, CVSettings(alpha=self.alpha, seed=self.seed))
        self.memory_ = FootprintModel(seed=self.seed).fit(footprint_columns(df))
        self.widths_ = {t: extrapolated_width(df, pdata, self.physics_.constants, t, self.alpha)
                        for t in self.physics_.corrections}
        self.measured_ = sorted({str(g) for g in df["gpu"]})
        return self

    def predict(self, job: JobGraph, gpu: str) -> dict[str, float]:
        """Each core target's point and ``_low``/``_high`` bounds for one job on one GPU."""
        from gpupred.footprint import setup_columns
        from gpupred.perf import DEFAULT, simulate
        from gpupred.setups import as_setup

        setup = as_setup(job.setup, job.precision, job.optimizer)
        spec = gpu_spec(gpu)
        default = simulate(job.kernels, spec, setup.precision, DEFAULT, "step", False)
        row = {**job.row, **default.columns()}
        out = self.physics_.predict_row(row, job.kernels, spec.name, setup.precision, protocol=PROTOCOL)
        samples = float(job.row.get("batch_size") or 0.0) * setup.accumulation  # samples of one optimizer step
        caveats = self.caveats(job, spec.name)
        least = {t: max(widest(caveats), w if spec.name not in self.measured_ else 0.0) for t, w in self.widths_.items()}
        if any(w > 0 for w in least.values()):
            self._widen(out, least)
        if samples and "iter_time_mean_s" in out:  # throughput: the samples of one optimizer step over its time
            out.update(samples_per_s=samples / out["iter_time_mean_s"], samples_per_s_low=samples / out[
                "iter_time_mean_s_high"], samples_per_s_high=samples / out["iter_time_mean_s_low"])
        frame = pd.DataFrame([{**row, **job.terms, **setup_columns(setup), "gpu": spec.name, "source": SOURCE_OWN}])
        mem = self.memory_.predict(frame).iloc[0]
        out.update({"memory_mib": float(mem["footprint*correction"]), "memory_mib_low": float(mem["low"]),
                    "memory_mib_high": float(mem["high"])})
        out["caveats"] = ",".join(caveats)  # type: ignore[assignment]
        return out

    def _widen(self, out: dict[str, float], least: dict[str, float]) -> None:
        """Widen the step-model targets' bounds in ``out`` to at least ``least[target]`` (an extrapolated GPU's width,
        a failure class's: :mod:`gpupred.perf.caveats`)."""
        for target, width in least.items():
            if target not in out or width <= 0:
                continue
            pt, low, high = out[target], out[f"{target}_low"], out[f"{target}_high"]
            # iteration time in log, utilization in log1p (as their widths were measured), capped at 100 %
            step = target == "iter_time_mean_s"
            lo, hi = (float(v[0]) for v in widen(np.array([pt]), np.array([low]), np.array([high]), width,
                                                 np.array([True]), log1p=not step))
            hi = hi if step else min(100.0, hi)
            out[f"{target}_low"], out[f"{target}_high"] = lo, hi

    def caveats(self, job: JobGraph, gpu: str) -> list[str]:
        """The failure classes the job shows on a GPU kind (:func:`gpupred.perf.caveats.job_caveats`), its kernels timed
        with the constants its prediction uses."""
        from gpupred.hardware import architecture
        from gpupred.perf.caveats import job_caveats, time_shares
        from gpupred.perf.kernels import DEPTHWISE, MATMUL
        from gpupred.perf.timeline import kernel_times, on_tensor_cores

        kl, table = job.kernels, self.physics_.constants
        times = kernel_times(kl, gpu_spec(gpu), kl.precision, table.get(gpu, PROTOCOL))
        shares = time_shares(times, kl.tensor_core == DEPTHWISE, (kl.tensor_core == MATMUL) & ~on_tensor_cores(kl, kl.precision))
        fitted = any(architecture(g) == architecture(gpu) for g, _ in table.fitted)
        return job_caveats(getattr(kl, "traits", {}), shares, fitted)

    def describe(self) -> dict[str, Any]:
        """What the card says of the core: fitted constants, correction inputs, extrapolation widths."""
        return {
            "step_model": {"constants": self.physics_.constants.as_records(),
                           "defaults": "an unfitted (GPU, protocol) borrows as gpupred.perf.ConstantsTable.get says "
                                       "(host constants of its protocol, device constants of its architecture, the "
                                       "launch cost alone across protocols), else DEFAULT (published figures)",
                           "correction_features": self.physics_.feature_names,
                           "targets": sorted(self.physics_.corrections)},
            "memory": self.memory_.describe(),
            "extrapolated_width": {t: {"log_width": w, "basis": "conformal quantile of physics' log error on each "
                                                                "measured (GPU, protocol) held out in turn, predicted "
                                                                "as an unmeasured GPU borrows, each key weighing the "
                                                                "same"} for t, w in self.widths_.items()},
            "measured_gpus": self.measured_,
            "failure_classes": {"rule": "a job showing one of these classes gets step-model intervals at least "
                                        "log_width wide (log of the step time, log1p of utilization) and names it in "
                                        "its prediction's 'caveats' (gpupred.perf.caveats)",
                                **{n: c.describe() for n, c in CAVEATS.items()}},
            "training_setup": {"modelled": "precision (fp32 with TF32 flags, bf16/fp16 autocast, pure bf16), SGD/Adam/"
                                           "AdamW foreach/fused/forloop, activation checkpointing, gradient "
                                           "accumulation, attention auto/eager/sdpa/flash, channels_last: in the "
                                           "step model and the footprint (gpupred.setups); the corrections were "
                                           "trained on the sweeps' setup only",
                               "defaults": FRAMEWORK_DEFAULTS},
        }
