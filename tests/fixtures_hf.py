"""FIXTURE Hugging Face config files for the memory tests, with a private graph cache while they are in use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def config_files(root: Path, configs: dict[str, dict[str, Any]]) -> Iterator[dict[str, Path]]:
    """Write each config as ``root/<name>/config.json`` and yield their paths by name; ``gpupred.config.ONNX_CACHE``
    points under ``root`` until the generator is closed (a module fixture's ``yield from``)."""
    from gpupred import config

    saved = config.ONNX_CACHE
    config.ONNX_CACHE = root / "cache"
    paths = {}
    for name, values in configs.items():
        (root / name).mkdir()
        paths[name] = root / name / "config.json"
        paths[name].write_text(json.dumps(values))
    try:
        yield paths
    finally:
        config.ONNX_CACHE = saved
