"""Where notebooks put what they show: figures under reports/figures/, figures of merit under reports/metrics/.

Each notebook writes its figures of merit to ``reports/metrics/<notebook>.json`` through :func:`write_metrics`,
against a :class:`MetricsSchema` owned by the module that computes them: a key the schema does not declare, or a
key with a ".", is refused, so the file is a contract a reader can rely on. No notebook reads another's metrics
(inputs between stages are typed files under ``data/processed``); ``reports/summary.json`` gathers the headline
figures of every notebook for a reader (:func:`gpupred.pipeline.write_summary`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class MetricsSchema:
    """The keys one notebook writes to ``reports/metrics/<notebook>.json``: (regular expression, what it is) pairs."""

    notebook: str  # e.g. "03-compare-regressors"
    keys: tuple[tuple[str, str], ...]

    def check(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` made JSON-safe, after refusing a key with a "." or one no pattern of the schema declares."""
        from gpupred.errors import GpupredError

        dotted = sorted(k for k in values if "." in str(k))
        if dotted:
            raise GpupredError(f"{self.notebook} metrics: keys may not contain '.': {dotted[:3]}")
        unknown = sorted(k for k in values if not any(re.fullmatch(p, str(k)) for p, _ in self.keys))
        if unknown:
            raise GpupredError(f"{self.notebook} metrics: keys {unknown[:5]} are not in its schema; declare them where "
                               "the schema is defined")
        return json_safe(values)

    def describe(self) -> dict[str, str]:
        """Pattern -> meaning, for a reader of the metrics file."""
        return dict(self.keys)

    @classmethod
    def assemble(cls, notebook: str, *groups: tuple[tuple[str, str], ...]) -> "MetricsSchema":
        """One notebook's schema from the key groups of the modules whose figures it writes (each estimator's
        ``evaluate`` module declares its own); a pattern declared by two groups is refused."""
        from gpupred.errors import GpupredError

        keys = tuple(k for group in groups for k in group)
        patterns = [p for p, _ in keys]
        twice = sorted({p for p in patterns if patterns.count(p) > 1})
        if twice:
            raise GpupredError(f"{notebook} metrics: patterns {twice} are declared by more than one key group")
        return cls(notebook, keys)


def metrics_path(notebook: str, folder: Path | None = None) -> Path:
    """Where a notebook's figures of merit live: ``reports/metrics/<notebook>.json``."""
    return Path(folder or config.METRICS_DIR) / f"{notebook}.json"


def read_metrics(notebook: str, folder: Path | None = None) -> dict[str, Any]:
    """A notebook's figures of merit ({} when it has written none): for reports and tests, never a stage's input."""
    path = metrics_path(notebook, folder)
    return json.loads(path.read_text()) if path.exists() else {}


METRIC_DIGITS = 6  # significant digits a metrics file keeps: a figure's real moves (1e-4 of an RMSLE), not float noise


def write_metrics(schema: MetricsSchema, values: dict[str, Any], folder: Path | None = None) -> dict[str, Any]:
    """Merge ``values`` (checked against ``schema``, every float at ``METRIC_DIGITS`` significant digits) into the
    notebook's metrics file; return the whole file."""
    path = metrics_path(schema.notebook, folder)
    old = path.read_text() if path.exists() else ""
    current = json.loads(old) if old else {}
    current.update(round_figures(schema.check(values), METRIC_DIGITS))
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


def round_figures(value: Any, digits: int = 3) -> Any:
    """``value`` with every float rounded to ``digits`` significant digits, recursively (for people, not stages)."""
    value = json_safe(value)
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if value else 0.0
    if isinstance(value, dict):
        return {k: round_figures(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [round_figures(v, digits) for v in value]
    return value


def metrics_table(values: dict[str, Any], schema: MetricsSchema | None = None, digits: int = 3) -> Any:
    """Figures of merit as a table for a notebook: key, value (rounded; nested values as compact JSON) and, with
    ``schema``, what the key means."""
    import pandas as pd

    rows = []
    for key, value in sorted(values.items()):
        shown = round_figures(value, digits)
        if isinstance(shown, (dict, list)):
            shown = json.dumps(shown, separators=(", ", ": "))
        row = {"key": key, "value": shown}
        if schema is not None:
            row["meaning"] = next((m for p, m in schema.keys if re.fullmatch(p, key)), "")
        rows.append(row)
    return pd.DataFrame(rows).set_index("key") if rows else pd.DataFrame(columns=["key", "value"]).set_index("key")


WHOLE_TABLES: dict[str, Any] = {"display.max_rows": 5000, "display.max_columns": 200, "display.width": 250,
                                "display.max_colwidth": 200, "display.precision": 3}


def show_table(frame: Any, digits: int = 3) -> None:
    """Display a table whole (no "82 rows x 4 columns" cut) with its floats rounded to ``digits`` decimals."""
    import pandas as pd
    from IPython.display import display

    with pd.option_context(*[x for kv in WHOLE_TABLES.items() for x in kv]):
        display(frame.round(digits) if hasattr(frame, "round") else frame)


def notebook_display() -> None:
    """Show every table of this kernel whole and with three decimals (the pipeline calls it before each notebook)."""
    import pandas as pd

    for key, value in WHOLE_TABLES.items():
        pd.set_option(key, value)
