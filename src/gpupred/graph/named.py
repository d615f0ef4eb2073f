"""The graph of a model by name (:mod:`gpupred.workloads.hubmodels`): exported without weights
(:mod:`gpupred.graph.weightless`) once, then cached under ``config.ONNX_CACHE`` by (name, config hash, input shape),
so a scheduler that asks twice pays once and a cached graph is predicted without importing torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpupred.errors import GpupredError
from gpupred.files import atomic_write_bytes
from gpupred.workloads.hubmodels import NamedModel, build_named


# ---------------------------------------------------------------- the cached graph


def named_graph(named: NamedModel, refresh: bool = False) -> Path:
    """The structure-only graph of a named model: from the cache (no torch imported), else exported without weights."""
    path = named.cache_path()
    if path.is_file() and not refresh:
        return path
    from gpupred.graph.adapter import positional
    from gpupred.graph.weightless import export_weightless
    from gpupred.reports import progress_bar

    with progress_bar(total=2, desc=f"{named.source} {named.label}", unit="step", leave=False) as bar:
        built = build_named(named)
        bar.update()
        adapter, tensors, names = positional(built.model, built.example)  # as gpupred.export_model takes them
        export_weightless(adapter, tensors, path, names, [0] * len(tensors))
        bar.update()
    info = {"key": named.cache_key(), "head": built.head, "seq_len": built.seq_len, "image_size": built.image_size,
            "torch_params": built.params, "config": built.config}
    atomic_write_bytes(path.with_suffix(".json"), (json.dumps(info, indent=1, default=str) + "\n").encode())
    return path


def named_info(path: Path) -> dict[str, Any]:
    """What :func:`named_graph` recorded beside a cached graph: its key, head, input shape and torch's parameters."""
    side = Path(path).with_suffix(".json")
    return json.loads(side.read_text()) if side.is_file() else {}


def graph_for_options(timm: str | None, hf: str | None, head: str | None, seq_len: int | None,
                      image_size: int | None, attention: str | None = None) -> Path:
    """The cached graph the CLI's ``--timm NAME`` or ``--hf MODEL`` (with ``--head``, ``--seq-len``, ``--image-size``)
    names; ``attention`` ``eager`` (``--attention eager``) builds a Hugging Face model with eager attention, any other
    with transformers' default (SDPA where the model supports it)."""
    if (timm is None) == (hf is None):
        raise GpupredError("give one of --timm NAME or --hf MODEL")
    if timm is not None:
        if seq_len is not None:
            raise GpupredError(f"--timm {timm}: --seq-len is for text models; give --image-size")
        return named_graph(NamedModel("timm", timm, head, None, image_size))
    eager = "eager" if attention == "eager" else None
    return named_graph(NamedModel("hf", str(hf), head, seq_len, image_size, attention=eager))
