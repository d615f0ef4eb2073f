"""``gpupred predict``: utilization, SM activity and memory (with intervals) of an ONNX model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def looks_like_file(text: str) -> bool:
    """Whether a MODEL argument names a file rather than a workload id (ids have no slash and no .onnx)."""
    return text.endswith(".onnx") or "/" in text or "\\" in text


def register(app: Any) -> None:
    """Add ``gpupred predict`` to the CLI."""
    import typer

    @app.command("predict")
    def predict_cmd(
        model: str = typer.Argument(..., help="An ONNX model file (or a workload id, which needs torch)."),
        batch_size: int = typer.Option(None, "--batch-size", "-b", help="Training batch size (required for an ONNX file)."),
        precision: str = typer.Option("fp32", "--precision", help="fp32, bf16 or fp16 (autocast)."),
        optimizer: str = typer.Option("sgd", "--optimizer", help="sgd or adam."),
        gpu: str = typer.Option(None, "--gpu", help="GPU name, e.g. 'H100 SXM' (default: the one it was trained on)."),
        predictor_path: str = typer.Option(None, "--predictor", help="Predictor artifact (default models/predictor.joblib)."),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
    ) -> None:
        """Predict GPU utilization, SM activity and memory of a training job from its ONNX graph."""
        from gpupred.errors import GpupredError
        from gpupred.predictor.artifact import load_predictor

        from gpupred.workloads.spec import PRECISIONS

        if looks_like_file(model) and not Path(model).is_file():  # the user's file first, before the predictor
            raise GpupredError(f"{model}: no such file; give the path of an .onnx model (or a catalog workload id)")
        if precision not in PRECISIONS:
            raise GpupredError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
        predictor = load_predictor(predictor_path)
        row = predictor.predict(model, batch_size=batch_size, precision=precision, optimizer=optimizer, gpu=gpu).iloc[0]
        values = {k: round(float(v), 3) for k, v in row.items()}
        if as_json:
            print(json.dumps(values))
            return
        for target in predictor.targets:
            unit = "MiB" if target == "memory_mib" else "%"
            print(f"{target:12s} {values[target]:10.1f} {unit:3s}  [{values[target + '_low']:.1f}, {values[target + '_high']:.1f}]"
                  f"  ({1 - predictor.alpha:.0%} interval)")
