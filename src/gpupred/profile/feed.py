"""A unit's input pipeline in the harness child: a real torch DataLoader over synthetic files feeding the training step.

A plan line's ``pipeline=KIND`` (:mod:`gpupred.profile.units`) reaches the child as the JSON of its
:class:`gpupred.setups.InputPipeline`. The child writes the kind's synthetic files once per machine into the loader
cache (``config.LOADER_CACHE``, gitignored, never under data/raw; :func:`gpupred.loader.synth.write_kind`), builds the
standard loader (:func:`gpupred.loader.standard.make_loader`: torch's DataLoader with the pipeline's workers,
``pin_memory`` and ``prefetch_factor``, ``shuffle=True``, ``drop_last=True``) at the workload's batch size, and hands
the step a :class:`gpupred.workloads.batches.FeedBatches` that takes each batch from the loader's iterator and moves
it to the GPU (``non_blocking=pin_memory``). The sample's shape follows the workload's synthetic input: the image side
and the sequence length are read from it, the token ids are drawn below the model's vocabulary; labels are the
loader's where it yields them in the target's shape (images: class 0), else the workload's random ones.

Imports torch (through the loader and the builders) only inside functions: the parent never calls them.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from gpupred.errors import GpupredError

EPOCH_BATCHES = 10_000  # samples per epoch = this x the batch: a measured window never crosses an epoch's end
MAX_FILES: dict[str, int] = {"image-files": 256, "audio-logmel": 32, "text-tokens": 4096, "host-tensors": 1024}


def file_count(kind: str, batch_size: int) -> int:
    """How many synthetic samples a kind's folder holds: two batches' worth, at least 16, at most :data:`MAX_FILES`."""
    cap = MAX_FILES.get(kind)
    if cap is None:
        raise GpupredError(f"input pipeline {kind!r}: the harness feeds {', '.join(MAX_FILES)} only")
    return max(16, min(cap, 2 * batch_size)) if kind not in ("text-tokens", "host-tensors") else cap


def synthetic_folder(kind: str, params: dict[str, Any], n: int, cache: Path) -> tuple[Path, float]:
    """The folder of ``n`` synthetic samples of ``kind`` written with ``params`` (written now if this machine has none,
    atomically: a temporary folder renamed into place); (its path, seconds spent writing)."""
    from gpupred.loader.synth import write_kind

    name = "-".join([kind, f"n{n}", *(f"{k}={v}" for k, v in sorted(params.items()))])
    folder = Path(cache) / re.sub(r"[^A-Za-z0-9.=-]+", "_", name)
    if folder.is_dir():
        return folder, 0.0
    t0 = time.monotonic()
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    write_kind(kind, tmp, n, **params)
    try:
        os.rename(tmp, folder)
    except OSError:  # another member wrote the same folder first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return folder, time.monotonic() - t0


def _vocab(built: Any) -> int:
    """The vocabulary the workload's token ids are drawn below (the catalog's ``v`` knob, or the model's config)."""
    v = built.spec.knob.get("v") if isinstance(built.spec.knob, dict) else None
    inner = getattr(built.model, "model", built.model)
    v = v or getattr(getattr(inner, "config", None), "vocab_size", None)
    if not v:
        raise GpupredError(f"workload {built.spec.id!r}: no vocabulary size to draw text-tokens ids below")
    return int(v)


def loader_options(built: Any, kind: str, pipeline: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the synthetic writer's parameters, the loader's) of ``kind`` for a built workload, read off its synthetic
    input: the image side of ``images`` / ``pixel_values``, the length of ``tokens`` / ``input_ids``."""
    first = built.export_inputs[0]
    if kind in ("image-files", "host-tensors"):
        if first.dim() != 4 or first.shape[-1] != first.shape[-2]:
            raise GpupredError(f"workload {built.spec.id!r}: input of shape {tuple(first.shape)} is not square images")
        side = int(first.shape[-1])
        if kind == "host-tensors":
            if side != 32:
                raise GpupredError(f"workload {built.spec.id!r}: host-tensors yields 32x32 CIFAR images, it takes {side}")
            return {}, {}
        return ({"size": (pipeline.image_width, pipeline.image_height), "fmt": pipeline.image_format},
                {"image_size": side, "transforms": pipeline.transforms})
    if kind == "text-tokens":
        seq = int(first.shape[1])
        return {"seq_len": seq, "vocab": _vocab(built)}, {"seq_len": seq}
    if kind == "audio-logmel":
        return {"seconds": float(pipeline.audio_s)}, {}
    raise GpupredError(f"input pipeline {kind!r}: the harness feeds {', '.join(MAX_FILES)} only")


def loader_feed(built: Any, pipeline: Any, device: str, cache: Path, result: dict[str, Any]) -> Any:
    """The batch source of a built workload fed by ``pipeline``'s standard DataLoader (its iterator started, so its
    workers are up before the warm-up); ``result`` gains ``files_s`` (writing the synthetic files, 0 when cached)
    and ``host_cores`` (the CPU cores this process may run on)."""
    from gpupred.loader.standard import make_loader
    from gpupred.workloads.batches import FeedBatches

    batch = int(built.export_inputs[0].shape[0])
    write, load = loader_options(built, pipeline.kind, pipeline)
    folder, result["files_s"] = synthetic_folder(pipeline.kind, write, file_count(pipeline.kind, batch), cache)
    loader = make_loader(pipeline.kind, folder, batch, num_workers=pipeline.num_workers,
                         pin_memory=pipeline.pin_memory, prefetch_factor=pipeline.prefetch_factor,
                         length=batch * EPOCH_BATCHES, drop_last=True, **load)
    result["host_cores"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return FeedBatches(loader, tuple(built.export_inputs) + tuple(built.targets), built.input_names, device,
                       non_blocking=bool(pipeline.pin_memory))
