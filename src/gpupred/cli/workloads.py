"""``gpupred zoo``: list the workload catalog (torch-free)."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from gpupred.cliapp import new_app
from gpupred.errors import GpupredError
from gpupred.workloads.catalog import by_family, catalog, check_family, fused_catalog
from gpupred.workloads.spec import WorkloadSpec

zoo = new_app(help="The workload catalog (the sweep plan).")


def spec_row(spec: WorkloadSpec) -> dict[str, object]:
    """The JSON row ``gpupred zoo list --json`` prints for one spec."""
    return {
        "id": spec.id,
        "family": spec.family,
        "arch": spec.arch,
        "batch_size": spec.batch_size,
        "input_size": spec.input_size,
        "precision": spec.precision,
        "optimizer": spec.optimizer,
        "fused": spec.fused,
    }


@zoo.command("list")
def list_cmd(
    family: Annotated[Optional[str], typer.Option("--family", "-f", help="Only this family.")] = None,
    fused: Annotated[bool, typer.Option("--fused", help="The inter-trial fusion sweep instead of the catalog.")] = False,
    realworld: Annotated[bool, typer.Option("--realworld", help="The real-world architectures (timm, Hugging Face) "
                                                               "instead of the catalog.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of specs.")] = False,
) -> None:
    """List the catalog's workload specs (or the fused or real-world ones), optionally one family's."""
    if fused and realworld:
        raise GpupredError("give --fused or --realworld, not both")
    from gpupred.workloads.realworld import realworld_catalog

    specs = fused_catalog() if fused else realworld_catalog() if realworld else catalog()
    if family is not None:
        specs = by_family(specs).get(check_family(family), [])
    if as_json:
        typer.echo(json.dumps([spec_row(s) for s in specs]))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(specs)} workloads" + (f" in family {family}" if family else ""))
    for col in ("id", "family", "batch", "input", "precision", "optimizer", "fused"):
        table.add_column(col, justify="right" if col in ("batch", "input", "fused") else "left",
                         no_wrap=col == "id", overflow="ellipsis")
    for s in specs:
        table.add_row(s.id, s.family, str(s.batch_size), str(s.input_size), s.precision, s.optimizer, str(s.fused))
    Console(width=max(Console().width, 120)).print(table)


def register(app: typer.Typer) -> None:
    """Attach ``gpupred zoo`` to the main app."""
    app.add_typer(zoo, name="zoo")
