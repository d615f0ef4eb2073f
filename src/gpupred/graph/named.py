"""The graph of a model by name (:mod:`gpupred.workloads.hubmodels`): exported without weights
(:mod:`gpupred.graph.weightless`) once, then cached under ``config.ONNX_CACHE`` by (name, config hash, input shape),
so a scheduler that asks twice pays once and a cached graph is predicted without importing torch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from gpupred.errors import GpupredError
from gpupred.files import atomic_write_bytes
from gpupred.workloads.hubmodels import NamedModel, build_named, check_name


# ---------------------------------------------------------------- the cached graph


def named_graph(named: NamedModel, refresh: bool = False) -> Path:
    """The structure-only graph of a named model: from the cache (no torch imported), else exported without weights."""
    path = named.cache_path()
    if path.is_file() and not refresh:
        return path
    check_name(named)  # an unknown name: refused before torch is imported
    from gpupred.graph.adapter import positional
    from gpupred.graph.weightless import export_weightless
    from gpupred.reports import progress_bar

    with quiet_libraries():  # on the meta device: seconds, and a wrong choice (head, shape) is refused here, in
        built = build_named(named)  # one line, before any progress is drawn
    took = "a few minutes" if built.params > 2e10 else "up to a minute"  # on 2 cores: Llama-2-70B's took 2.4 min
    print(f"gpupred: exporting {named.source} {named.shown} ({type(built.model).__name__}, head {built.head}) "
          f"once: {took}; cached for the next time", file=sys.stderr, flush=True)
    with progress_bar(total=1, desc=f"{named.source} {named.label}", unit="export", leave=False) as bar, \
            quiet_libraries():
        adapter, tensors, names = positional(built.model, built.example)  # as gpupred.export_model takes them
        export_weightless(adapter, tensors, path, names, [0] * len(tensors))
        bar.update()
    info = {"key": named.cache_key(), "label": named.shown, "head": built.head, "seq_len": built.seq_len,
            "image_size": built.image_size, "torch_params": built.params, "config": built.config}
    atomic_write_bytes(path.with_suffix(".json"), (json.dumps(info, indent=1, default=str) + "\n").encode())
    return path


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Keep the libraries' warnings and info logs (transformers', timm's, torch.export's) off the user's screen."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in ("transformers", "timm", "torch")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def describe_named(path: Path) -> str:
    """One line of what a cached named graph is: the class built, its head, parameters and input shape."""
    info = named_info(path)
    config = info.get("config", {})
    built = config.get("class") or config.get("timm_name") or Path(path).stem
    shape = f"seq_len {info['seq_len']}" if info.get("seq_len") else f"image {info.get('image_size')}"
    params = info.get("torch_params")
    return (f"model: {built}, head {info.get('head')}, "
            f"{'' if params is None else f'{params / 1e6:.1f}M parameters, '}{shape}")


def named_info(path: Path) -> dict[str, Any]:
    """What :func:`named_graph` recorded beside a cached graph: its key, head, input shape and torch's parameters."""
    side = Path(path).with_suffix(".json")
    return json.loads(side.read_text()) if side.is_file() else {}


@functools.lru_cache(maxsize=256)
def real_folder(folder: Path) -> Path:
    """A folder's resolved path, worked out once per process (every prediction of a file asks for its folder's)."""
    return folder.resolve()


def named_label(path: str | Path) -> str | None:
    """How a cached named graph was asked for (``hf gpt2-large``, ``timm resnet50``), what errors call it; None for
    any other file."""
    from gpupred import config

    if real_folder(Path(path).parent) != real_folder(config.ONNX_CACHE / "named"):
        return None
    return info_label(named_info(Path(path)))


def info_label(info: dict[str, Any]) -> str | None:
    """The name a named graph's sidecar (:func:`named_info`) says it was built by (``hf gpt2-large``): the hub id or
    model type as typed, else its config's identity; None without one."""
    key = info.get("key") if isinstance(info.get("key"), dict) else {}
    name = info.get("label") or key.get("config")
    return f"{key['source']} {name}" if key.get("source") and name else None


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
