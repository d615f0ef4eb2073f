"""``gpupred import lucid|gpumemnet|gavel|alibaba-openb [--from DIR]``: fetch published measurements at their pinned commits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def import_cmd(
    source: Annotated[str, typer.Argument(help="Which published data: lucid, gpumemnet, gavel or alibaba-openb (a scheduling trace).", show_default=False)],
    from_dir: Annotated[Optional[Path], typer.Option(
        "--from", help="Read the files from this folder (holding <source>/<file> or <file>) instead of downloading.")] = None,
) -> None:
    """Download published GPU measurements at the pinned commit (or read a local copy), check sha256, keep provenance."""
    from gpupred import importers

    folder = importers.import_source(source, from_dir=from_dir)
    record = importers.read_provenance(importers.get_source(source))
    print(f"{source}: {len(record['files'])} files from {record['upstream_repo']}@{record['commit'][:12]} -> {folder}")
    for f in record["files"]:
        print(f"  {f['name']:24s} sha256 {f['sha256'][:16]}...  ({f['obtained_from']})")
    print(f"  licence: {record['licence']}")


def register(app: typer.Typer) -> None:
    """Attach ``gpupred import`` to the main app."""
    app.command("import")(import_cmd)
