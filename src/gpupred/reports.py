"""Where notebooks put what they show: figures under reports/figures/, figures of merit in metrics.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gpupred import config


def save_figure(fig: Any, name: str, folder: Path | None = None) -> Path:
    """Save a matplotlib/seaborn figure as ``reports/figures/<name>.png`` and return its path."""
    folder = folder or config.FIGURES
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def update_metrics(values: dict[str, Any], path: Path | None = None) -> dict[str, Any]:
    """Merge ``values`` into reports/metrics.json (keys from other notebooks are kept); return the whole."""
    path = path or config.METRICS
    path.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(path.read_text()) if path.exists() else {}
    current.update(_clean(values))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return current
