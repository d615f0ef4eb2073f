"""``gpupred features``: featurize an ONNX file or a catalog workload (torch only for --workload)."""

from __future__ import annotations

import json
from pathlib import Path
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
        row = featurize(path, batch_size=spec.batch_size, precision=spec.precision, optimizer=spec.optimizer, warn=False)
        row = {"workload_id": spec.id, **row}
        title = spec.id
    else:
        row = featurize(model, batch_size=batch_size, precision=precision, optimizer=optimizer, warn=False)  # type: ignore[arg-type]
        title = f"{model} (batch {row['batch_size']}, {precision}, {optimizer})"
    _warn_incomplete(row, model or workload or "")
    if as_json:
        typer.echo(json.dumps(row))
    else:
        _print_table(title, row)


def _warn_incomplete(row: dict[str, Any], label: str) -> None:
    """One line on stderr when the featurizer could not shape or cost every node."""
    from gpupred.graph.coverage import incomplete_summary

    summary = incomplete_summary(row)
    if summary:
        typer.echo(f"warning: {label}: features are incomplete: {summary}", err=True)


def export_cmd(
    workload: Annotated[Optional[str], typer.Argument(help="A catalog workload id (its architecture is exported).", show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Where to write the .onnx (default: <arch>.onnx here).")] = None,
    store: Annotated[bool, typer.Option("--store", help="Export every catalog and Lucid architecture missing from the graph store (data/graphs/).")] = False,
    force: Annotated[bool, typer.Option("--force", help="With --store or --corpus: re-export everything, not only what is missing.")] = False,
    corpus: Annotated[bool, typer.Option("--corpus", help="Export the timm and Hugging Face corpus missing from data/corpus/ (the torch extra).")] = False,
    timm: Annotated[Optional[str], typer.Option("--timm", help="A timm model by name (random weights, no download).")] = None,
    hf: Annotated[Optional[str], typer.Option("--hf", help="A Hugging Face model: a model type (llama), a config.json "
                                              "or its folder, or a hub id (`gpupred named` lists those known offline).")] = None,
    head: Annotated[Optional[str], typer.Option("--head", help="With --hf: causal-lm, masked-lm, seq-cls, image-cls, seq2seq-lm or speech-seq2seq.")] = None,
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", help="With --hf: tokens per sample.")] = None,
    image_size: Annotated[Optional[int], typer.Option("--image-size", help="With --timm or an image --hf model: the image side.")] = None,
) -> None:
    """Write the structure-only ONNX graph (symbolic batch) the predictor expects for a catalog workload or a model by name.

    ``--timm``/``--hf`` export without weights (any size) and cache the graph. For your own torch model use the
    Python API: ``gpupred.export_model(model, example_input, "model.onnx")``.
    """
    from gpupred.graph.export import build_store, copy_graph, export_onnx

    named = timm is not None or hf is not None
    if store + corpus + (workload is not None) + named != 1:
        raise GpupredError("give one of WORKLOAD_ID, --timm NAME, --hf MODEL, --store or --corpus")
    if named:
        _export_named(timm, hf, head, seq_len, image_size, out)
        return
    if corpus:
        _export_corpus(force)
        return
    if store:
        from gpupred import importers
        from gpupred.graph.graphstore import store_specs

        importers.load_all()  # the importers register the specs of their jobs
        written = build_store(store_specs(), force=force)
        typer.echo(f"{len(written)} graphs exported into the store")
        return
    from gpupred.workloads.spec import WorkloadSpec

    spec = WorkloadSpec.from_id(workload)  # type: ignore[arg-type]
    target = out or Path(f"{spec.arch_key}.onnx")
    copy_graph(export_onnx(spec), target)
    typer.echo(f"{target} ({spec.arch_key}, symbolic batch, structure only): "
               f"gpupred predict {target} --batch-size {spec.batch_size} --precision {spec.precision}")


def _export_named(timm: str | None, hf: str | None, head: str | None, seq_len: int | None, image_size: int | None,
                  out: Path | None) -> None:
    """Export (or take from the cache) a model by name and copy its graph to ``out`` (default: the cache's name)."""
    from gpupred.graph.export import copy_graph
    from gpupred.graph.named import graph_for_options, named_info

    cached = graph_for_options(timm, hf, head, seq_len, image_size)
    target = out or Path(cached.name)
    copy_graph(cached, target)
    info = named_info(cached)
    shape = f"seq {info['seq_len']}" if info.get("seq_len") else f"image {info.get('image_size')}"
    typer.echo(f"{target} ({info.get('head')}, {shape}, {info.get('torch_params', 0):,} parameters, symbolic batch, "
               f"structure only): gpupred predict {target} --batch-size N")


def _export_corpus(force: bool) -> None:
    """Rebuild the corpus (data/corpus/) and say how many models it holds and which failed."""
    try:
        from gpupred.graph.corpus import build_corpus

        index = build_corpus(force=force)
    except ImportError as err:
        raise GpupredError(f"gpupred export --corpus needs timm and transformers ({err}); "
                           "install the torch extra: pip install -e \".[torch]\"") from None
    failed = sorted(n for n, e in index["models"].items() if "error" in e)
    typer.echo(f"{len(index['models']) - len(failed)} corpus models exported" + (f"; failed: {', '.join(failed)}" if failed else ""))


def named_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON records.")) -> None:
    """List the Hugging Face hub ids that --hf knows offline (their published configs' shapes), with their
    parameters; any other hub id needs transformers' cache or the network, and a model type or a config.json
    needs neither."""
    from gpupred.workloads.hubconfigs import published_configs

    rows = published_configs()
    if as_json:
        print(json.dumps([{"hub_id": r.hub_id, "model_type": r.model_type, "params_millions": r.params} for r in rows]))
        return
    for r in rows:
        print(f"{r.hub_id:40s} {r.model_type:10s} {r.params:>9,.0f}M")
    print("instruct and chat variants (-Instruct, -chat-hf, -it) and the hub's owner-less ids (gpt2-large) are "
          "their base's; give any other model as a config.json or a model type (--hf llama)")


def register(app: typer.Typer) -> None:
    """Attach ``gpupred features``, ``gpupred export`` and ``gpupred named`` to the main app."""
    app.command("features")(features_cmd)
    app.command("export")(export_cmd)
    app.command("named")(named_cmd)
