"""Synthetic data sets for the standard loaders, written by the code (never downloaded).

Each writer fills a folder that :func:`gpupred.loader.standard.make_loader` reads with the matching kind:

- ``image-files``: ``img_00000.jpg`` (or ``.png``) at a source resolution, smoothed noise so that JPEG sizes are like
  photographs' (a 500x375 JPEG at quality 90 is tens of kB, as ImageNet's are);
- ``text-tokens``: ``tokens.npy`` (int32 ids, all samples end to end) and ``offsets.npy`` (each sample's start),
  samples of random length between a quarter of ``seq_len`` and ``seq_len``;
- ``audio-logmel``: ``wav_00000.npy``, float32 waveforms at 16 kHz of a given length;
- ``array-files``: ``arr_00000.npy``, float32 arrays of a given shape (a point cloud is 2500x3);
- ``host-tensors``: ``data.npy`` (uint8, N x 32 x 32 x 3 as CIFAR's ``data``) and ``targets.npy``, loaded in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_RATE = 16_000
IMAGE_SUFFIX = {"jpeg": ".jpg", "png": ".png"}


def smooth_image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A natural-looking RGB image (uint8, H x W x 3): coarse noise upsampled bicubically, plus fine grain."""
    from PIL import Image

    coarse = rng.integers(0, 256, size=(max(2, height // 24), max(2, width // 24), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.int16)
    grain = rng.normal(0.0, 6.0, size=(height, width, 1)).astype(np.int16)
    return np.clip(base + grain, 0, 255).astype(np.uint8)


def write_images(root: str | Path, n: int, size: tuple[int, int] = (500, 375), fmt: str = "jpeg",
                 quality: int = 90, seed: int = 0) -> Path:
    """Write ``n`` images of ``size`` (width, height) as JPEG (quality 90) or PNG into ``root``."""
    from PIL import Image

    from gpupred.errors import GpupredError

    if fmt not in IMAGE_SUFFIX:
        raise GpupredError(f"image format {fmt!r}: expected one of {sorted(IMAGE_SUFFIX)}")
    root = _folder(root)
    rng = np.random.default_rng(seed)
    for i in range(n):
        img = Image.fromarray(smooth_image(rng, int(size[0]), int(size[1])))
        path = root / f"img_{i:05d}{IMAGE_SUFFIX[fmt]}"
        img.save(path, quality=quality) if fmt == "jpeg" else img.save(path)
    return root


def write_tokens(root: str | Path, n: int, seq_len: int = 512, vocab: int = 32_000, seed: int = 0) -> Path:
    """Write ``n`` pre-tokenized samples (int32 ids, up to ``seq_len`` long) as ``tokens.npy`` and ``offsets.npy``."""
    root = _folder(root)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(1, seq_len // 4), seq_len + 1, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(root / "tokens.npy", rng.integers(1, vocab, size=int(offsets[-1]), dtype=np.int32))
    np.save(root / "offsets.npy", offsets)
    return root


def write_audio(root: str | Path, n: int, seconds: float = 10.0, seed: int = 0) -> Path:
    """Write ``n`` float32 waveforms of ``seconds`` at 16 kHz (a few tones in noise) as ``wav_*.npy``."""
    root = _folder(root)
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
    for i in range(n):
        tones = sum(np.sin(2 * np.pi * f * t, dtype=np.float32) for f in rng.uniform(100, 4000, size=3))
        wave = 0.1 * tones + rng.normal(0.0, 0.05, size=t.shape).astype(np.float32)
        np.save(root / f"wav_{i:05d}.npy", wave.astype(np.float32))
    return root


def write_arrays(root: str | Path, n: int, shape: tuple[int, ...] = (2500, 3), seed: int = 0, fmt: str = "npy") -> Path:
    """Write ``n`` float32 arrays of ``shape`` (a point cloud by default) as ``arr_*.npy``, or with ``fmt="txt"`` as
    text files of one row per point (``arr_*.txt``, as ShapeNet's ``.pts`` files are: ``np.loadtxt`` reads them)."""
    root = _folder(root)
    rng = np.random.default_rng(seed)
    for i in range(n):
        array = rng.standard_normal(shape).astype(np.float32)
        if fmt == "txt":
            np.savetxt(root / f"arr_{i:05d}.txt", array, fmt="%.5f")
        else:
            np.save(root / f"arr_{i:05d}.npy", array)
    return root


def write_host_tensors(root: str | Path, n: int, shape: tuple[int, ...] = (32, 32, 3), classes: int = 10,
                       seed: int = 0) -> Path:
    """Write ``n`` uint8 images of ``shape`` (CIFAR-like) and their labels as ``data.npy`` and ``targets.npy``."""
    root = _folder(root)
    rng = np.random.default_rng(seed)
    data = np.stack([smooth_image(rng, shape[1], shape[0]) for _ in range(n)]) if n else np.zeros((0, *shape), np.uint8)
    np.save(root / "data.npy", data)
    np.save(root / "targets.npy", rng.integers(0, classes, size=n, dtype=np.int64))
    return root


def write_kind(kind: str, root: str | Path, n: int, **params: Any) -> Path:
    """Write ``n`` samples of a standard kind's files into ``root`` (the writer's own keyword parameters)."""
    from gpupred.errors import GpupredError

    writers = {"host-tensors": write_host_tensors, "image-files": write_images, "text-tokens": write_tokens,
               "audio-logmel": write_audio, "array-files": write_arrays}
    if kind not in writers:
        raise GpupredError(f"loader kind {kind!r}: expected one of {', '.join(writers)}")
    return writers[kind](root, n, **params)


def _folder(root: str | Path) -> Path:
    """``root`` as a Path, made if missing."""
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
