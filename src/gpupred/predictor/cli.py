"""``gpupred predict`` (utilization, SM activity and memory, with intervals, of an ONNX model) and ``gpupred gpus``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def register(app: Any) -> None:
    """Add ``gpupred predict`` and ``gpupred gpus`` to the CLI."""
    import typer

    @app.command("predict")
    def predict_cmd(
        model: str = typer.Argument(None, help="An ONNX model file (or a workload id, which needs torch).",
                                    show_default=False),
        batch_size: int = typer.Option(None, "--batch-size", "-b", help="Training batch size (required for an ONNX file)."),
        precision: str = typer.Option("fp32", "--precision", help="fp32, bf16 or fp16 (autocast)."),
        optimizer: str = typer.Option("sgd", "--optimizer", help="sgd or adam."),
        gpu: str = typer.Option(None, "--gpu", help="GPU name, e.g. 'H100 SXM' (`gpupred gpus` lists them; default: the "
                                                    "one it was trained on)."),
        predictor_path: str = typer.Option(None, "--predictor", help="Predictor artifact (default models/predictor.joblib)."),
        noncommercial: bool = typer.Option(False, "--noncommercial", help="Use models/predictor-noncommercial.joblib, "
                                                                          "trained with imported data (non-commercial use only)."),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
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
        from gpupred import config
        from gpupred.errors import GpupredError
        from gpupred.predictor.artifact import load_predictor
        from gpupred.workloads.spec import PRECISIONS

        named = check_model_choice(model, timm, hf, head, seq_len, image_size)
        if model is not None and looks_like_file(model) and not Path(model).is_file():  # the user's file first
            raise GpupredError(f"{model}: no such file; give the path of an .onnx model (or a catalog workload id)")
        if precision not in PRECISIONS:
            raise GpupredError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
        if noncommercial and predictor_path:
            raise GpupredError("give --predictor PATH or --noncommercial, not both")
        predictor = load_predictor(config.PREDICTOR_NONCOMMERCIAL if noncommercial else predictor_path)
        if named:  # after the predictor loads: a missing one is said before minutes of export
            from gpupred.graph.named import graph_for_options

            model = str(graph_for_options(timm, hf, head, seq_len, image_size))
        row = predictor.predict(model, batch_size=batch_size, precision=precision, optimizer=optimizer, gpu=gpu).iloc[0]
        print_prediction(predictor, row, as_json)

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


def print_prediction(predictor: Any, row: pd.Series, as_json: bool) -> None:
    """Print one prediction row: JSON, or a line per target with its interval (and the extrapolation warning)."""
    extrapolated = bool(row["extrapolated"])
    values: dict[str, Any] = {k: round(float(v), 6 if k.startswith("iter_time") else 3) for k, v in row.items()
                              if k not in ("extrapolated", "core") and pd.notna(v)}
    values.update(extrapolated=extrapolated, core=str(row.get("core", "regressor")))
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
    if extrapolated:
        print("extrapolated: no measurements on this GPU (intervals widened; see the card's 'extrapolation')")
