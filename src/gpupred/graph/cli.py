"""``gpupred features``: featurize an ONNX file or a catalog workload (torch only for --workload)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

from gpupred.errors import GpupredError


def _print_table(title: str, row: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("feature")
    table.add_column("value", justify="right")
    for key, value in row.items():
        if isinstance(value, float):
            text = f"{value:.4g}"
        elif isinstance(value, int) and abs(value) >= 10_000:
            text = f"{value:,} ({value:.3g})"
        else:
            text = str(value)
        table.add_row(key, text)
    Console().print(table)


def features_cmd(
    model: Annotated[Optional[str], typer.Argument(help="An ONNX file (weights are never read).", show_default=False)] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Batch size for a symbolic batch axis.")] = None,
    precision: Annotated[str, typer.Option("--precision", help="fp32, bf16 or fp16 (autocast).")] = "fp32",
    optimizer: Annotated[str, typer.Option("--optimizer", help="sgd (momentum) or adam.")] = "sgd",
    workload: Annotated[Optional[str], typer.Option("--workload", "-w", help="A catalog workload id instead of a file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Graph features (FLOPs, bytes, op mix, depth...) of an ONNX file at a batch size, or of a workload id."""
    from gpupred.graph.features import featurize

    if (model is None) == (workload is None):
        raise GpupredError("give either MODEL.onnx or --workload ID (not both, not neither)")
    if workload is not None:
        from gpupred.workloads.spec import WorkloadSpec

        spec = WorkloadSpec.from_id(workload)
        from gpupred.graph.export import export_onnx  # torch, only here

        path = export_onnx(spec)
        row = featurize(path, batch_size=spec.batch_size, precision=spec.precision, optimizer=spec.optimizer)
        row = {"workload_id": spec.id, **row}
        title = spec.id
    else:
        row = featurize(model, batch_size=batch_size, precision=precision, optimizer=optimizer)  # type: ignore[arg-type]
        title = f"{model} (batch {row['batch_size']}, {precision}, {optimizer})"
    if as_json:
        typer.echo(json.dumps(row))
    else:
        _print_table(title, row)


def register(app: typer.Typer) -> None:
    """Attach ``gpupred features`` to the main app."""
    app.command("features")(features_cmd)
