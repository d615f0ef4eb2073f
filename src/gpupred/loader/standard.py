"""The standard input pipelines, as torch, torchvision and transformers build them by default.

``make_loader(kind, root, batch_size, ...)`` returns a ``torch.utils.data.DataLoader`` over a folder that
:mod:`gpupred.loader.synth` wrote (or any folder laid out the same way). The kinds:

- ``host-tensors``: CIFAR-10 as torchvision's ``CIFAR10`` serves it: ``Image.fromarray`` of an in-memory uint8 array,
  ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize`` (torchvision's CIFAR recipe);
- ``image-files``: ``ImageFolder``'s PIL loader and torchvision's ImageNet training transforms,
  ``RandomResizedCrop(image_size)``, ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize`` (``transforms="v1"``), or
  the ``transforms.v2`` recipe its documentation recommends (``transforms="v2"``: ``torchvision.io.decode_jpeg`` /
  ``decode_image`` of the file's bytes, ``ToImage``, ``RandomResizedCrop(antialias=True)``, flip,
  ``ToDtype(float32, scale=True)``, ``Normalize``);
- ``text-tokens``: pre-tokenized ids padded to ``seq_len`` (``pad_id`` 0) and collated with an attention mask, as
  ``DataCollatorWithPadding(padding="max_length")`` gives them: ``{"input_ids", "attention_mask"}``, int64;
- ``audio-logmel``: Whisper's log-mel features per sample, computed by transformers' ``WhisperFeatureExtractor()``
  (its defaults: 80 mels, n_fft 400, hop 160, padded to 30 s; torch's STFT where torch is installed, as transformers
  chooses), ``{"input_features": (B, 80, 3000)}``;
- ``array-files``: ``np.load`` of one ``.npy`` file per sample (a point cloud), or ``np.loadtxt`` of one text file
  (``.txt``, as ShapeNet's ``.pts``), ``(array, label)``; ``text_parser="legacy"`` parses the text as numpy before
  1.23 did, in Python (:func:`gpupred.loader.legacytext.loadtxt_legacy`).

The loader options are torch's, with torch's defaults: ``num_workers=0``, ``pin_memory=False``, ``prefetch_factor``
None (torch's 2 per worker when ``num_workers > 0``); ``shuffle=True`` as a training loader has. torch, torchvision and
transformers are imported only when a loader is made or a sample is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpupred.errors import GpupredError
from gpupred.loader.hostprofile import KINDS

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class HostTensorSet:
    """CIFAR-like in-memory uint8 images (``data.npy``, ``targets.npy``) through a PIL transform, as ``CIFAR10``."""

    def __init__(self, root: Path, transform: Any, length: int | None = None) -> None:
        self.data = np.load(root / "data.npy")
        self.targets = np.load(root / "targets.npy")
        self.transform, self.length = transform, length or len(self.data)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        i = index % len(self.data)
        return self.transform(Image.fromarray(self.data[i])), int(self.targets[i])


class ImageFileSet:
    """Image files read per sample: PIL (``ImageFolder``'s loader) for v1, torchvision.io decoding for v2."""

    def __init__(self, files: list[Path], transform: Any, version: str, length: int | None = None) -> None:
        self.files, self.transform, self.version = files, transform, version
        self.length = length or len(files)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path = self.files[index % len(self.files)]
        if self.version == "v1":
            from PIL import Image

            with open(path, "rb") as fh:
                img = Image.open(fh).convert("RGB")
        else:
            from torchvision.io import ImageReadMode, decode_image, decode_jpeg, read_file

            data = read_file(str(path))
            jpeg = path.suffix.lower() in (".jpg", ".jpeg")
            img = decode_jpeg(data, mode=ImageReadMode.RGB) if jpeg else decode_image(data, mode=ImageReadMode.RGB)
        return self.transform(img), 0


class TokenSet:
    """Pre-tokenized samples sliced from ``tokens.npy`` by ``offsets.npy`` (memory-mapped), cut at ``seq_len``."""

    def __init__(self, root: Path, seq_len: int, length: int | None = None) -> None:
        self.tokens = np.load(root / "tokens.npy", mmap_mode="r")
        self.offsets = np.load(root / "offsets.npy")
        self.seq_len, self.length = seq_len, length or len(self.offsets) - 1

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> np.ndarray:
        i = index % (len(self.offsets) - 1)
        return np.array(self.tokens[self.offsets[i]:self.offsets[i + 1]][: self.seq_len], dtype=np.int64)


class PadCollate:
    """Pads id arrays to ``seq_len`` with ``pad_id`` and adds the attention mask (int64 tensors)."""

    def __init__(self, seq_len: int, pad_id: int = 0) -> None:
        self.seq_len, self.pad_id = seq_len, pad_id

    def __call__(self, samples: list[np.ndarray]) -> dict[str, Any]:
        import torch

        ids = torch.full((len(samples), self.seq_len), self.pad_id, dtype=torch.int64)
        mask = torch.zeros((len(samples), self.seq_len), dtype=torch.int64)
        for row, sample in enumerate(samples):
            ids[row, : len(sample)] = torch.from_numpy(sample)
            mask[row, : len(sample)] = 1
        return {"input_ids": ids, "attention_mask": mask}


class AudioSet:
    """Waveforms (``wav_*.npy``, 16 kHz) to Whisper log-mel features, one sample at a time."""

    def __init__(self, files: list[Path], length: int | None = None) -> None:
        self.files, self.length = files, length or len(files)
        self.extractor: Any = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self.extractor is None:
            self.extractor = whisper_extractor()
        wave = np.load(self.files[index % len(self.files)])
        feats = self.extractor(wave, sampling_rate=16_000, return_tensors="np")["input_features"][0]
        return {"input_features": feats}


TEXT_PARSERS: tuple[str, ...] = ("numpy", "legacy")  # np.loadtxt as installed; as numpy before 1.23 parsed text


class ArrayFileSet:
    """One array per sample, read with ``np.load`` (``.npy``) or parsed from text (``.txt``: ``np.loadtxt``, or with
    ``text_parser="legacy"`` as numpy before 1.23 parsed it): a point cloud and a label."""

    def __init__(self, files: list[Path], length: int | None = None, text_parser: str = "numpy") -> None:
        if text_parser not in TEXT_PARSERS:
            raise GpupredError(f"text parser {text_parser!r}: expected one of {', '.join(TEXT_PARSERS)}")
        self.files, self.length, self.text_parser = files, length or len(files), text_parser

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        path = self.files[index % len(self.files)]
        if path.suffix == ".txt":  # a text file of one row per point, as ShapeNet's .pts (np.loadtxt)
            if self.text_parser == "legacy":
                from gpupred.loader.legacytext import loadtxt_legacy

                return loadtxt_legacy(path).astype(np.float32), 0
            return np.loadtxt(path).astype(np.float32), 0
        return np.load(path), 0


def whisper_extractor() -> Any:
    """transformers' ``WhisperFeatureExtractor()`` with its defaults (no download: its constructor needs no hub)."""
    try:
        from transformers import WhisperFeatureExtractor
    except ImportError as err:
        raise GpupredError(f"audio-logmel needs transformers ({err}); install gpupred[torch]") from None
    return WhisperFeatureExtractor()


def image_transform(version: str, image_size: int) -> Any:
    """torchvision's ImageNet training transforms, v1 (PIL, ``ToTensor``) or v2 (tensors, ``ToDtype``)."""
    if version == "v1":
        from torchvision import transforms as T

        return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    if version != "v2":
        raise GpupredError(f"image transforms {version!r}: expected 'v1' or 'v2'")
    import torch
    from torchvision.transforms import v2

    return v2.Compose([v2.ToImage(), v2.RandomResizedCrop(size=(image_size, image_size), antialias=True),
                       v2.RandomHorizontalFlip(p=0.5), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD)])


def cifar_transform() -> Any:
    """torchvision's CIFAR-10 training transforms."""
    from torchvision import transforms as T

    return T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(CIFAR_MEAN, CIFAR_STD)])


def make_dataset(kind: str, root: str | Path, image_size: int = 224, transforms: str = "v1", seq_len: int = 512,
                 length: int | None = None, text_parser: str = "numpy") -> tuple[Any, Any]:
    """The dataset of a standard kind over ``root`` and its collate function (None: torch's default)."""
    root = Path(root)
    if kind not in KINDS:
        raise GpupredError(f"loader kind {kind!r}: expected one of {', '.join(KINDS)}")
    if not root.is_dir():
        raise GpupredError(f"{root}: no such folder for loader kind {kind!r}; gpupred.loader.synth writes one")
    if kind == "host-tensors":
        return HostTensorSet(root, cifar_transform(), length), None
    if kind == "text-tokens":
        return TokenSet(root, seq_len, length), PadCollate(seq_len)
    pattern = {"image-files": "img_*", "audio-logmel": "wav_*.npy", "array-files": "arr_*"}[kind]
    files = sorted(root.glob(pattern))
    if not files:
        raise GpupredError(f"{root}: no {pattern} files for loader kind {kind!r}")
    if kind == "image-files":
        return ImageFileSet(files, image_transform(transforms, image_size), transforms, length), None
    return (AudioSet(files, length) if kind == "audio-logmel" else ArrayFileSet(files, length, text_parser)), None


def make_loader(kind: str, root: str | Path, batch_size: int, num_workers: int = 0, pin_memory: bool = False,
                prefetch_factor: int | None = None, **params: Any) -> Any:
    """A torch DataLoader of a standard kind over ``root`` with torch's defaults (see the module's docstring).

    ``params``: ``image_size`` (224) and ``transforms`` ("v1") for images, ``seq_len`` (512) for text, ``text_parser``
    ("numpy"; "legacy": as numpy before 1.23) for text array files, ``length``
    (samples per epoch; default the files' count, cycled when larger), ``shuffle`` (True), ``drop_last`` (False),
    ``timeout`` (0).
    """
    from torch.utils.data import DataLoader

    loader_opts = {k: params.pop(k) for k in ("shuffle", "drop_last", "timeout") if k in params}
    dataset, collate = make_dataset(kind, root, **params)
    return DataLoader(dataset, batch_size=batch_size, shuffle=loader_opts.get("shuffle", True),
                      num_workers=num_workers, pin_memory=pin_memory, collate_fn=collate,
                      drop_last=loader_opts.get("drop_last", False), timeout=loader_opts.get("timeout", 0),
                      prefetch_factor=prefetch_factor if num_workers > 0 else None)
