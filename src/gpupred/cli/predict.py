"""``gpupred predict`` (utilization, SM activity and memory, with intervals, of an ONNX model) and ``gpupred gpus``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def looks_like_file(text: str) -> bool:
    """Whether a MODEL argument names a file rather than a workload id (ids have no slash and no .onnx)."""
    return text.endswith(".onnx") or "/" in text or "\\" in text


def gpu_table() -> pd.DataFrame:
    """The hardware table with, per GPU, how many runs each committed predictor was trained on (0: extrapolated)."""
    from gpupred import config
    from gpupred.errors import GpupredError
    from gpupred.hardware import known_gpus
    from gpupred.predictor.artifact import read_card

    table = known_gpus()
    for column, path in (("runs_default", config.PREDICTOR), ("runs_noncommercial", config.PREDICTOR_NONCOMMERCIAL)):
        try:
            measured = read_card(path).get("measured_gpus", {}) if path.is_file() else {}
        except GpupredError:
            measured = {}
        table[column] = table["name"].map(lambda name: int(measured.get(name, 0)))
    return table


def check_model_choice(model: str | None, timm: str | None, hf: str | None, head: str | None, seq_len: int | None,
                       image_size: int | None) -> bool:
    """Whether ``predict`` was given a model by name (--timm/--hf); one line when the choice is not exactly one."""
    from gpupred.errors import GpupredError

    named = timm is not None or hf is not None
    if named == (model is not None):
        raise GpupredError("give MODEL (an .onnx file or a workload id), or --timm NAME, or --hf MODEL")
    if not named and (head, seq_len, image_size) != (None, None, None):
        raise GpupredError("--head, --seq-len and --image-size go with --timm or --hf")
    return named


def job_setup(model: str | None, batch_size: int | None, precision: str | None, optimizer: str | None,
              options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The training setup ``predict``'s options ask for, and what differs from the job's own (a workload id's batch,
    precision and optimizer; else fp32 and SGD): every option applies, none is dropped (see
    :class:`gpupred.predictor.artifact.JobOptions`)."""
    from gpupred.predictor.artifact import job_defaults
    from gpupred.setups import setup_of

    from gpupred.errors import GpupredError

    own_batch, own_precision, own_optimizer = job_defaults(model) if model is not None else (None, "fp32", "sgd")
    try:
        setup = setup_of(precision or own_precision, optimizer or own_optimizer, **options)
    except GpupredError as err:
        raise GpupredError(f"{model}: {err}" if model is not None else str(err)) from None
    own = setup_of(own_precision, own_optimizer).as_dict()
    changes = {k: v for k, v in setup.as_dict().items() if v != own[k]}
    if own_batch is not None and batch_size is not None and batch_size != own_batch:
        changes = {"batch_size": batch_size, **changes}
    return setup, changes


def register(app: Any) -> None:
    """Add ``gpupred predict`` and ``gpupred gpus`` to the CLI."""
    _register_predict(app)
    _register_gpus(app)


def run_predict(model: str | None, setup: Any, batch_size: int | None, gpu: str | None, predictor_path: str | None,
                noncommercial: bool, calibration: str | None, no_calibration: bool, as_json: bool,
                named: tuple[Any, ...] | None = None, changes: dict[str, Any] | None = None) -> None:
    """``gpupred predict``'s work, once its options are read: checks, the predictor, one prediction printed.
    ``named``: --timm, --hf, --head, --seq-len and --image-size, when the model is given by name; ``changes``: the
    options that differ from the job's own (printed; default: the setup's changes from the sweeps')."""
    from gpupred import config
    from gpupred.errors import GpupredError
    from gpupred.predictor.artifact import load_predictor

    if named and batch_size is None:  # before minutes of export
        raise GpupredError(f"{'--timm ' + named[0] if named[0] is not None else '--hf ' + str(named[1])}: give the "
                           "training batch size (-b N)")
    if noncommercial and predictor_path:
        raise GpupredError("give --predictor PATH or --noncommercial, not both")
    if calibration and no_calibration:
        raise GpupredError("give --calibration FILE or --no-calibration, not both")
    predictor = load_predictor(config.PREDICTOR_NONCOMMERCIAL if noncommercial else predictor_path)
    if named:  # after the predictor loads: a missing one is said before minutes of export
        import sys

        from gpupred.graph.named import describe_named, graph_for_options

        model = str(graph_for_options(*named))
        print(describe_named(Path(model)), file=sys.stderr if as_json else sys.stdout)  # what was built
    row = predictor.predict(model, batch_size=batch_size, precision=setup.precision, optimizer=setup.optimizer,
                            gpu=gpu, setup=setup, calibration=False if no_calibration else calibration).iloc[0]
    print_prediction(predictor, row, as_json, setup.changes() if changes is None else changes)


def _register_predict(app: Any) -> None:
    """Add ``gpupred predict``."""
    import typer

    @app.command("predict")
    def predict_cmd(
        model: str = typer.Argument(None, help="An ONNX model file (or a workload id, which needs torch).",
                                    show_default=False),
        batch_size: int = typer.Option(None, "--batch-size", "-b", help="Training batch size (required for an ONNX "
                                                                        "file or a model by name; default: a workload "
                                                                        "id's)."),
        precision: str = typer.Option(None, "--precision", help="fp32; bf16 or fp16 (autocast; fp16 with GradScaler); "
                                                                "bf16-pure (bf16 weights, no autocast) (default: a "
                                                                "workload id's, else fp32).", show_default=False),
        optimizer: str = typer.Option(None, "--optimizer", help="sgd (momentum 0.9), adam or adamw (default: a "
                                                                "workload id's, else sgd).", show_default=False),
        optimizer_impl: str = typer.Option(None, "--optimizer-impl", help="foreach (torch's default on CUDA), fused "
                                                                          "or forloop."),
        no_momentum: bool = typer.Option(False, "--no-momentum", help="SGD without momentum (torch's default)."),
        weight_decay: float = typer.Option(None, "--weight-decay", help="Weight decay (default: torch's: 0, AdamW 0.01)."),
        tf32: bool = typer.Option(None, "--tf32/--no-tf32", help="fp32 matmuls and convolutions on TF32 tensor cores "
                                                                  "(default: torch's: matmuls off, convolutions on)."),
        checkpointing: bool = typer.Option(False, "--checkpointing", help="Activation (gradient) checkpointing of "
                                                                         "every repeated block."),
        accumulation: int = typer.Option(1, "--accumulation", help="Gradient accumulation: micro-batches of "
                                                                   "--batch-size per optimizer step."),
        attention: str = typer.Option(None, "--attention", help="auto (as exported), eager, sdpa or flash."),
        channels_last: bool = typer.Option(False, "--channels-last", help="Convolutions in channels_last (NHWC)."),
        gpu: str = typer.Option(None, "--gpu", help="GPU name, e.g. 'H100 SXM' (`gpupred gpus` lists them; default: the "
                                                    "one it was trained on)."),
        predictor_path: str = typer.Option(None, "--predictor", help="Predictor artifact (default models/predictor.joblib)."),
        noncommercial: bool = typer.Option(False, "--noncommercial", help="Use models/predictor-noncommercial.joblib, "
                                                                          "trained with imported data (non-commercial use only)."),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
        calibration: str = typer.Option(None, "--calibration", help="A file `gpupred calibrate` wrote for the GPU "
                                                                    "(default: the newest of this user's for --gpu)."),
        no_calibration: bool = typer.Option(False, "--no-calibration", help="Use no calibration, not even this "
                                                                            "user's."),
        timm: str = typer.Option(None, "--timm", help="A timm model by name instead of MODEL (random weights, no "
                                                      "download; exported once, then cached)."),
        hf: str = typer.Option(None, "--hf", help="A Hugging Face model instead of MODEL: a model type (llama, bert, "
                                                  "gpt2...), a config.json or its folder, or a hub id."),
        head: str = typer.Option(None, "--head", help="With --hf: causal-lm, masked-lm, seq-cls, image-cls, seq2seq-lm "
                                                      "or speech-seq2seq (default: the config's)."),
        seq_len: int = typer.Option(None, "--seq-len", help="With --hf: tokens per sample (default: the model's longest "
                                                            "position, at most 2048)."),
        image_size: int = typer.Option(None, "--image-size", help="With --timm or an image --hf model: the image side."),
    ) -> None:
        """Predict GPU utilization, SM activity and memory of a training job from its ONNX graph (or a model by name)."""
        from gpupred.errors import GpupredError

        named = check_model_choice(model, timm, hf, head, seq_len, image_size)  # then the user's file, if any
        if model is not None and looks_like_file(model) and not Path(model).is_file():
            raise GpupredError(f"{model}: no such file; give the path of an .onnx model (or a catalog workload id)")
        setup, changes = job_setup(model, batch_size, precision, optimizer, dict(
            optimizer_impl=optimizer_impl, sgd_momentum=False if no_momentum else None, weight_decay=weight_decay,
            tf32_matmul=tf32, tf32_conv=tf32, checkpointing=checkpointing, accumulation=accumulation,
            attention=attention, channels_last=channels_last))
        run_predict(model, setup, batch_size, gpu, predictor_path, noncommercial, calibration, no_calibration, as_json,
                    named=(timm, hf, head, seq_len, image_size) if named else None, changes=changes)


def _register_gpus(app: Any) -> None:
    """Add ``gpupred gpus``."""
    import typer

    @app.command("gpus")
    def gpus_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON records.")) -> None:
        """List the GPUs gpupred knows (vendor specs) and how many measured runs each committed predictor has on them."""
        table = gpu_table()
        if as_json:
            print(table.to_json(orient="records"))
            return
        print(table.to_string(index=False))
        print("runs_*: measured runs in each predictor's training data; 0 = predictions there are extrapolated")


UNITS: dict[str, tuple[str, str]] = {  # target -> (label, unit) in the order a person reads them
    "gpu_util": ("gpu_util", "%"), "sm_active": ("sm_active", "%"), "memory_mib": ("memory", "MiB"),
    "iter_time_mean_s": ("iter_time", "s"), "samples_per_s": ("throughput", "samples/s"),
}


def print_prediction(predictor: Any, row: pd.Series, as_json: bool, setup: dict[str, Any] | None = None) -> None:
    """Print one prediction row: JSON, or a line per target with its interval (and the extrapolation warning);
    ``setup``: the training-setup options that differ from the sweeps' (printed when there are any)."""
    extrapolated = bool(row["extrapolated"])
    text = ("extrapolated", "core", "calibrated", "calibration_note", "caveats")
    values: dict[str, Any] = {k: round(float(v), 6 if k.startswith("iter_time") else 3) for k, v in row.items()
                              if k not in text and v == v and v is not None}
    values.update(extrapolated=extrapolated, core=str(row.get("core", "regressor")),
                  calibrated=str(row.get("calibrated", "")) or None, calibration_note=str(row.get("calibration_note", "")))
    caveats = [c for c in str(row.get("caveats", "") or "").split(",") if c and c != "nan"]
    if caveats:
        values["caveats"] = caveats
    if setup:
        values["setup"] = setup
    if as_json:
        print(json.dumps(values))
        return
    for target, (label, unit) in UNITS.items():
        if target in values:
            fmt = ".4f" if unit == "s" else ".1f"
            print(f"{label:12s} {values[target]:12{fmt}} {unit:9s} [{values[target + '_low']:{fmt}}, "
                  f"{values[target + '_high']:{fmt}}]  ({1 - predictor.alpha:.0%} interval)")
    print(f"answered by: {values['core']}" + (" (step model x correction, footprint x correction)"
                                               if values["core"] == "physics" else ""))
    if values["calibrated"]:
        print(f"calibrated: {values['calibrated']}" + (f" ({values['calibration_note']})" if values["calibration_note"] else ""))
    elif values["calibration_note"]:
        print(f"calibration {values['calibration_note']}")
    if setup:
        print("setup: " + ", ".join(f"{k}={v}" for k, v in setup.items()) + " (the rest as the job's own, or as the "
              "sweeps ran; iter_time is one optimizer step)")
    if caveats:
        print(f"caveats: {', '.join(caveats)} (failure classes the step model does not model whole: intervals "
              "widened; see the card's core.failure_classes)")
    if extrapolated:
        print("extrapolated: no measurements on this GPU (intervals widened; see the card's 'extrapolation')")
