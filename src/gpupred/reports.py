"""Where notebooks put what they show: figures under reports/figures/, figures of merit in metrics.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gpupred import config
from gpupred.files import atomic_write_bytes, write_if_changed


def save_figure(fig: Any, name: str, folder: Path | None = None) -> Path:
    """Save a matplotlib/seaborn figure as ``reports/figures/<name>.png`` (left alone if unchanged); return its path."""
    import io

    path = (folder or config.FIGURES) / f"{name}.png"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})  # no version stamp
    write_if_changed(path, buf.getvalue())
    return path


def json_safe(value: Any) -> Any:
    """``value`` made JSON-safe: numpy scalars to Python, NaN/inf to None, recursively."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def update_metrics(values: dict[str, Any], path: Path | None = None) -> dict[str, Any]:
    """Merge ``values`` into reports/metrics.json (keys from other notebooks are kept); return the whole."""
    path = path or config.METRICS
    old = path.read_text() if path.exists() else ""
    current = json.loads(old) if old else {}
    current.update(json_safe(values))
    text = json.dumps(current, indent=2, sort_keys=True) + "\n"
    if text != old:
        atomic_write_bytes(path, text.encode())
    return current


def progress_enabled() -> bool:
    """Whether to draw progress bars: ``GPUPRED_PROGRESS`` (0/1) when set, else only on a terminal.

    ``gpupred pipeline`` sets it to 0 for the notebooks it runs, so saved notebooks hold no bar debris.
    """
    import os
    import sys

    value = os.environ.get("GPUPRED_PROGRESS")
    if value is not None:
        return value.strip() not in ("", "0", "false", "no")
    stream = sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)()) or "ipykernel" in sys.modules


def progress_bar(**kwargs: Any) -> Any:
    """A tqdm bar: a widget in a notebook that can draw one, text on a terminal, nothing when progress is off.

    Unlike ``tqdm.auto`` it never warns (``TqdmWarning: IProgress not found``) in a kernel without ipywidgets.
    """
    import importlib.util
    import sys

    enabled = progress_enabled()
    if enabled and "ipykernel" in sys.modules and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(**kwargs) if enabled else tqdm(**{**kwargs, "disable": True})
