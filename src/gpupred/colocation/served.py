"""What notebook 06 ships of its co-location study: the slowdown estimator a predictor serves, its held-out figures
and the held-out width of its interval, the file notebook 08 reads when it exports (``data/processed/
slowdown_choice.json``, ``config.SLOWDOWN_CHOICE``).

Contract, a JSON object:

- ``schema``: :data:`SCHEMA_VERSION`; ``dataset_fingerprint``: the dataset the study's predicted inputs came from
  (a reader refuses a file made from another dataset);
- ``slice``, ``label``, ``gpu``: where the choice was scored: this project's own pairs on a GPU when they exist, else
  Lucid's non-RL RTX 3090 pairs (the slices whose members are graphs, as a served job is);
- ``estimator``: the slice's adaptation prior (:attr:`gpupred.colocation.study.Slice.prior`), the zero-parameter
  time-sharing estimate from predicted utilization: ``name``, ``class``, ``column``, ``what``;
- ``correction``: in how many of the slice's cells the learned correction was kept (``kept_cells`` of ``cells``) and
  whether it ``ships`` (kept in every cell and better pooled than the prior; it never has on Lucid's pairs);
- ``heldout``: the estimator's held-out figures on the slice (:data:`gpupred.slowdown.evaluate.METRICS`, rows, jobs);
- ``interval``: ``level`` and the ``log_low``/``log_high`` quantiles of its held-out ``log(measured / predicted)``
  (the interval is ``[s exp(log_low), s exp(log_high)]``), ``rows``, and ``coverage_cross_cell``: the share of each
  cell's rows inside the width measured on the other cells (does the width transfer to unseen model groups);
- ``adaptation``: the ``noise_var``, ``sens_var`` and ``aggr_var`` of :class:`gpupred.slowdown.estimator.SlowdownModel`
  fitted on every pair of the slice (its shrinkage of a new job's co-run residuals), and ``by_k``: for ``k`` reference
  co-runs, the adapted model's held-out figures and interval quantiles, as notebook 06 scored them;
- ``other_priors``: the held-out figures of the slice's other zero-parameter priors, for comparison.

Every figure is held out by model group (:mod:`gpupred.slowdown.evaluate`); none is computed on rows a model was
fitted on, except the adaptation variances, which are fitted settings, not scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpupred import config
from gpupred.errors import GpupredError, MissingInput

SCHEMA_VERSION = 1
KEYS: tuple[str, ...] = ("schema", "dataset_fingerprint", "slice", "label", "gpu", "estimator", "correction", "heldout",
                         "interval", "adaptation", "other_priors")
PRIORS: tuple[str, ...] = ("timeshare_pred", "timeshare_phys", "sum_util_pred")  # inputs a served predictor computes


def interval_quantiles(measured: np.ndarray, predicted: np.ndarray, level: float = 0.9) -> dict[str, float]:
    """The central ``level`` quantiles of ``log(measured / predicted)`` over finite rows, and how many rows."""
    y, p = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
    ok = np.isfinite(y) & np.isfinite(p) & (y > 0) & (p > 0)
    if not ok.any():
        return {"level": level, "log_low": float("nan"), "log_high": float("nan"), "rows": 0}
    r = np.log(y[ok] / p[ok])
    lo, hi = np.quantile(r, [(1 - level) / 2, (1 + level) / 2])
    return {"level": level, "log_low": float(lo), "log_high": float(hi), "rows": int(ok.sum())}


def cross_cell_coverage(held: pd.DataFrame, column: str, level: float = 0.9) -> float:
    """The share of scored rows inside the interval whose width was measured on the other cells only."""
    inside, total = 0, 0
    for cell in np.unique(held["cell"]):
        own, rest = held[held["cell"] == cell], held[held["cell"] != cell]
        q = interval_quantiles(rest["slowdown"].to_numpy(), rest[column].to_numpy(), level)
        y, p = own["slowdown"].to_numpy(float), own[column].to_numpy(float)
        ok = np.isfinite(y) & np.isfinite(p) & (y > 0) & (p > 0)
        if not q["rows"] or not ok.any():
            continue
        r = np.log(y[ok] / p[ok])
        inside += int(((r >= q["log_low"]) & (r <= q["log_high"])).sum())
        total += int(ok.sum())
    return inside / total if total else float("nan")


def _figures(result: Any, predictor: str) -> dict[str, float]:
    """One predictor's held-out figures on all of a slice's scored rows."""
    rows = result.scores[(result.scores["predictor"] == predictor) & (result.scores["rows_kept"] == "all")]
    if rows.empty:
        return {}
    r = rows.iloc[0]
    return {k: (float(r[k]) if k in ("spearman_pooled", "spearman_cell", "spearman_job", "mae") else int(r[k]))
            for k in ("spearman_pooled", "spearman_cell", "spearman_job", "mae", "rows", "jobs")}


def choice_slice(results: list[Any]) -> Any:
    """The slice the shipped estimator is scored on: the first of this project's own, else Lucid's non-RL; None."""
    by_name = {r.name: r for r in results}
    own = sorted(n for n in by_name if n.startswith("own_"))
    name = own[0] if own else ("lucid_nonrl" if "lucid_nonrl" in by_name else None)
    return by_name.get(name) if name else None


def slowdown_choice(results: list[Any], slices: list[Any], level: float = 0.9) -> dict[str, Any] | None:
    """What a predictor ships, from notebook 06's results (:func:`gpupred.colocation.study.run_slice`) and slices;
    None when no slice of graph jobs with utilization was scored."""
    from sklearn.base import clone

    from gpupred.slowdown.estimator import SlowdownModel

    result = choice_slice(results)
    if result is None:
        return None
    sl = next(s for s in slices if s.name == result.name)
    prior = sl.predictors[sl.prior]
    held = result.heldout
    kept = int((result.chosen != "prior").sum())
    corrected, base = _figures(result, "corrected"), _figures(result, sl.prior)
    ships = bool(len(result.chosen) and kept == len(result.chosen)
                 and corrected.get("spearman_pooled", -1) > base.get("spearman_pooled", 1))
    model = SlowdownModel(clone(prior)).fit(sl.X, sl.X["slowdown"].to_numpy(float))
    ks = sorted(int(c.removeprefix("adapted_k")) for c in held.columns if c.startswith("adapted_k"))
    by_k = {str(k): {**_figures(result, f"adapted_k{k}"),
                     **interval_quantiles(held["slowdown"], held[f"adapted_k{k}"], level)} for k in ks}
    interval = interval_quantiles(held["slowdown"], held[sl.prior], level)
    interval["coverage_cross_cell"] = cross_cell_coverage(held, sl.prior, level)
    return {
        "slice": result.name, "label": result.label, "gpu": str(sl.X["gpu_name"].iloc[0]),
        "estimator": {"name": sl.prior, "class": type(prior).__name__, "column": getattr(prior, "column", ""),
                      "what": prior.what, "kind": prior.kind},
        "correction": {"kept_cells": kept, "cells": int(len(result.chosen)), "ships": ships, "heldout": corrected},
        "heldout": base, "interval": interval,
        "adaptation": {"noise_var": model.noise_var_, "sens_var": model.sens_var_, "aggr_var": model.aggr_var_,
                        "references": list(result.refs), "by_k": by_k},
        "other_priors": {p: _figures(result, p) for p in PRIORS if p != sl.prior and p in sl.predictors},
    }


def write_slowdown_choice(choice: dict[str, Any], dataset: pd.DataFrame, path: Path | None = None) -> Path:
    """Write :func:`slowdown_choice`'s object with the fingerprint of the dataset its inputs came from."""
    from gpupred.dataset import dataset_fingerprint
    from gpupred.files import atomic_write_bytes
    from gpupred.reports import json_safe

    out = {"schema": SCHEMA_VERSION, "dataset_fingerprint": dataset_fingerprint(dataset), **choice}
    check_slowdown_choice(out)
    path = Path(path) if path is not None else config.SLOWDOWN_CHOICE
    atomic_write_bytes(path, (json.dumps(json_safe(out), indent=2, sort_keys=True) + "\n").encode())
    return path


def check_slowdown_choice(choice: dict[str, Any], source: str = "slowdown choice") -> dict[str, Any]:
    """The choice, checked against the contract (keys, schema, a time-sharing or step-share prior)."""
    missing = [k for k in KEYS if k not in choice]
    if missing:
        raise GpupredError(f"{source}: missing keys {missing} of the slowdown-choice contract "
                           "(gpupred.colocation.served); re-run notebook 06")
    if choice["schema"] != SCHEMA_VERSION:
        raise GpupredError(f"{source}: schema {choice['schema']!r}, expected {SCHEMA_VERSION}; re-run notebook 06")
    if choice["estimator"].get("class") not in ("TimeSharing", "SummedUtilization"):
        raise GpupredError(f"{source}: estimator {choice['estimator'].get('class')!r} is not one a predictor serves")
    return choice


def read_slowdown_choice(dataset: pd.DataFrame, path: Path | None = None) -> dict[str, Any]:
    """Notebook 06's choice for ``dataset`` (checked); MissingInput if absent, GpupredError if stale."""
    from gpupred.dataset import dataset_fingerprint
    from gpupred.files import read_json_object

    path = Path(path) if path is not None else config.SLOWDOWN_CHOICE
    if not path.is_file():
        raise MissingInput(f"no slowdown choice at {path}: run notebook 06-colocation first")
    choice = check_slowdown_choice(read_json_object(path, "re-run notebook 06"), str(path))
    if choice["dataset_fingerprint"] != dataset_fingerprint(dataset):
        raise GpupredError(f"{path}: made from another dataset than the current one (stale); re-run notebook 06")
    return choice
