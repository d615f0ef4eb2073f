"""Fit the step model's constants to measured runs of one (GPU kind, measurement protocol) (torch-free).

The fit minimizes, by bounded robust least squares (scipy, soft-L1 loss), the log errors of the analytic
utilization (``log((phys + 1) / (measured + 1))``) and of the step time (``log(phys / measured)``) where a run
recorded it, plus a weak pull of each constant's logarithm towards its published default (weight
``PRIOR_WEIGHT``), so a handful of runs cannot drive a constant to a bound it does not inform. The callers
(:mod:`gpupred.step.rowphysics`) pass training rows only.

Runs under ``CUDA_LAUNCH_BLOCKING=1`` (``sync="kernel"``) pay ``blocking_s`` once per kernel, and nothing else tells
it apart from the launch cost; where a key also has runs of another protocol (the catalog's launch-blocking twins of
runs it measured with a sync per step), the seven constants are fitted on those others alone and ``blocking_s`` then
on the launch-blocking runs, the seven held (:func:`fit_blocking`). A key with too few of either keeps the joint fit
of the seven over all its runs and the default ``blocking_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from gpupred.hardware import GpuSpec
from gpupred.step.physics.constants import BOUNDS, DEFAULT, FITTED, ConstantsTable, StepConstants, geometric_mean
from gpupred.step.physics.kernels import KernelList
from gpupred.step.physics.timeline import LoaderTimes

PRIOR_WEIGHT = 0.05  # per constant, in log units: a 1 % pull of a 2x departure against ~400 run residuals
MAX_FIT_ROWS = 250  # runs per (GPU kind, protocol) the fit reads (a deterministic sample of larger groups)
MIN_FIT_ROWS = 8  # fewer labelled runs than this: the defaults stay
MIN_BLOCKING_ROWS = 8  # labelled launch-blocking runs (beside MIN_FIT_ROWS of others) blocking_s is fitted on
BLOCKING_BOUNDS = (1e-6, 200e-6)  # s: a host's wait for a finished kernel, from a spin-poll to a slow interrupt


@dataclass
class FitRows:
    """What the fit reads for each run: its kernels, GPU, precision, protocol, input feeding and labels."""

    kernels: Sequence[KernelList]
    gpus: Sequence[GpuSpec]
    precisions: Sequence[str]
    syncs: Sequence[str]
    host_batches: Sequence[bool]
    util: np.ndarray  # measured utilization, percent (NaN: not recorded)
    step_s: np.ndarray  # measured step time, s (NaN: not recorded)
    loaders: Sequence[LoaderTimes | None] | None = None  # each run's host input pipeline (None: resident batches)
    host_scores: np.ndarray | None = None  # each run's host single-core score (gpupred.loader.speed; NaN: unknown)
    batches: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)  # laid-out kernels per row set

    def __len__(self) -> int:
        return len(self.kernels)

    def __getstate__(self) -> dict[str, Any]:
        """The state with the kernels packed into flat arrays (:func:`pack_kernel_lists`) and no laid-out row
        sets (a cache, rebuilt where needed)."""
        state = dict(vars(self), batches={})
        packed = pack_kernel_lists(self.kernels)
        if packed is not None:
            state["kernels"], state["kernels_packed"] = packed, True
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The state :meth:`__getstate__` gave, its kernels unpacked."""
        if state.pop("kernels_packed", False):
            state["kernels"] = unpack_kernel_lists(state["kernels"])
        self.__dict__.update(state)

    def subset(self, idx: Sequence[int]) -> "FitRows":
        """The runs at ``idx``, in that order (no laid-out kernels carried over)."""
        pick = (lambda seq: [seq[i] for i in idx])
        return FitRows(pick(self.kernels), pick(self.gpus), pick(self.precisions), pick(self.syncs),
                       pick(self.host_batches), self.util[list(idx)], self.step_s[list(idx)],
                       None if self.loaders is None else pick(self.loaders),
                       None if self.host_scores is None else self.host_scores[list(idx)])

    def host_score(self, idx: Sequence[int] | None = None) -> float:
        """The geometric mean of the known host scores of the runs ``idx`` (default all); NaN when none is known."""
        if self.host_scores is None:
            return float("nan")
        return geometric_mean(self.host_scores if idx is None else self.host_scores[np.asarray(idx, dtype=int)])


MAX_BATCHES = 64  # row sets a FitRows keeps laid out (each the size of its rows' kernels)
KERNEL_ARRAYS: tuple[str, ...] = ("flops", "bytes", "tensor_core", "phase", "sync_after", "library", "on_tc")


def pack_kernel_lists(lists: Sequence[KernelList]) -> dict[str, Any] | None:
    """``lists`` as a few flat arrays (each array field concatenated, with each list's length), the lists that are
    one object kept one: what an evaluation task pickles to its worker in milliseconds rather than 0.4 s for
    3,000 runs. None where a field's dtype differs between lists (they are then pickled as they are)."""
    position: dict[int, int] = {}
    index = np.fromiter((position.setdefault(id(k), len(position)) for k in lists), np.int64, len(lists))
    distinct = list({id(k): k for k in lists}.values())  # in order of first appearance, as ``position`` counts
    packed: dict[str, Any] = {"index": index, "lengths": np.array([len(k) for k in distinct], dtype=np.int64)}
    for name in KERNEL_ARRAYS:
        present = [getattr(k, name) for k in distinct if getattr(k, name) is not None]
        if len({a.dtype for a in present}) > 1:
            return None
        packed[name] = (np.array([getattr(k, name) is not None for k in distinct]),
                        np.concatenate(present) if present else None)
    packed["others"] = [{f: v for f, v in vars(k).items() if f not in KERNEL_ARRAYS} for k in distinct]
    return packed


def unpack_kernel_lists(packed: dict[str, Any]) -> list[KernelList]:
    """The lists :func:`pack_kernel_lists` packed: the same arrays (as views of the flat ones) and attributes."""
    ends = np.cumsum(packed["lengths"]).tolist()
    starts = [0, *ends[:-1]]
    fields: list[dict[str, Any]] = [dict(others) for others in packed["others"]]
    for name in KERNEL_ARRAYS:
        has, flat = packed[name]
        at = np.cumsum(np.where(has, packed["lengths"], 0)).tolist()
        for j, (f, a, b) in enumerate(zip(fields, starts, ends)):
            f[name] = flat[at[j] - (b - a):at[j]] if has[j] else None
    distinct = [object.__new__(KernelList) for _ in fields]
    for k, f in zip(distinct, fields):
        k.__dict__.update(f)
    return [distinct[j] for j in packed["index"].tolist()]


def predict_rows(rows: FitRows, c: StepConstants, idx: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(analytic utilization %, step time s) of the runs ``idx`` (default all) under constants ``c``: the timeline of
    :func:`gpupred.step.physics.timeline.simulate`, every run at once (:class:`gpupred.step.physics.batched.BatchedRuns`, laid out once
    per row set and kept)."""
    from gpupred.step.physics.batched import BatchedRuns

    idx = list(range(len(rows)) if idx is None else np.asarray(idx, dtype=int).tolist())
    inputs = ([rows.kernels[i] for i in idx], [rows.gpus[i] for i in idx], [rows.precisions[i] for i in idx],
              [rows.syncs[i] for i in idx], [rows.host_batches[i] for i in idx])
    key = tuple(idx)
    if key not in rows.batches:
        if len(rows.batches) >= MAX_BATCHES:
            rows.batches.pop(next(iter(rows.batches)))
        rows.batches[key] = BatchedRuns.build(*inputs)
    loaders = None if rows.loaders is None else [rows.loaders[i] for i in idx]
    return rows.batches[key].simulate(c, *inputs, loaders=loaders)


def _log_errors(rows: FitRows, c: StepConstants, idx: np.ndarray) -> np.ndarray:
    """The log errors of utilization (``log((phys + 1) / (measured + 1))``) and step time of the runs ``idx`` under
    ``c``, where each was measured."""
    util, step = predict_rows(rows, c, idx)
    mu, ms = rows.util[idx], rows.step_s[idx]
    return np.concatenate([np.log((util + 1) / (mu + 1))[~np.isnan(mu)], np.log(step / ms)[~np.isnan(ms)]])


def _residuals(theta: np.ndarray, rows: FitRows, idx: np.ndarray, base: StepConstants) -> np.ndarray:
    c = base.with_fitted(dict(zip(FITTED, np.exp(theta))), base.source)
    prior = PRIOR_WEIGHT * (theta - np.log([getattr(DEFAULT, k) for k in FITTED]))
    return np.concatenate([_log_errors(rows, c, idx), prior])


def labelled_rows(rows: FitRows) -> tuple[np.ndarray, np.ndarray]:
    """(labelled runs of any protocol but launch blocking, labelled launch-blocking runs): positions in ``rows``."""
    labelled = ~np.isnan(rows.util) | ~np.isnan(rows.step_s)
    blocking = np.array([s == "kernel" for s in rows.syncs], dtype=bool)
    return np.flatnonzero(labelled & ~blocking), np.flatnonzero(labelled & blocking)


def fit_constants(rows: FitRows, base: StepConstants = DEFAULT, source: str = "fitted", seed: int = 0) -> StepConstants:
    """Constants fitted to ``rows`` (one GPU kind and protocol); the defaults when too few runs are labelled. With
    enough launch-blocking runs beside enough others, the seven on the others and ``blocking_s`` on them (module
    notes)."""
    others, blocking = labelled_rows(rows)
    if len(blocking) >= MIN_BLOCKING_ROWS and len(others) >= MIN_FIT_ROWS:
        return fit_blocking(rows, blocking, _fit_seven(rows, others, base, source, seed))
    return _fit_seven(rows, np.sort(np.concatenate([others, blocking])), base, source, seed)


def _fit_seven(rows: FitRows, labelled: np.ndarray, base: StepConstants, source: str, seed: int) -> StepConstants:
    """The ``FITTED`` constants fitted on the runs ``labelled`` (a deterministic sample of ``MAX_FIT_ROWS`` of more)."""
    from scipy.optimize import least_squares

    if len(labelled) < MIN_FIT_ROWS:
        return base
    if len(labelled) > MAX_FIT_ROWS:
        labelled = np.sort(np.random.default_rng(seed).choice(labelled, MAX_FIT_ROWS, replace=False))
    lo = np.log([BOUNDS[k][0] if BOUNDS[k][0] > 0 else 1e-9 for k in FITTED])
    hi = np.log([BOUNDS[k][1] for k in FITTED])
    theta0 = np.clip(np.log([max(getattr(base, k), 1e-9) for k in FITTED]), lo + 1e-6, hi - 1e-6)
    fit = least_squares(_residuals, theta0, bounds=(lo, hi), args=(rows, labelled, base), loss="soft_l1", f_scale=0.3,
                        diff_step=0.02, max_nfev=40)
    return base.with_fitted(dict(zip(FITTED, np.exp(fit.x))), source)


def fit_blocking(rows: FitRows, blocking: np.ndarray, c: StepConstants) -> StepConstants:
    """``c`` with ``blocking_s`` fitted on the launch-blocking runs ``blocking`` (the same robust loss and pull to the
    default as the seven), the others held."""
    from scipy.optimize import least_squares

    def residuals(theta: np.ndarray) -> np.ndarray:
        errors = _log_errors(rows, replace(c, blocking_s=float(np.exp(theta[0]))), blocking)
        return np.append(errors, PRIOR_WEIGHT * (theta[0] - np.log(DEFAULT.blocking_s)))

    lo, hi = np.log(BLOCKING_BOUNDS)
    fit = least_squares(residuals, [np.log(DEFAULT.blocking_s)], bounds=([lo], [hi]), loss="soft_l1", f_scale=0.3,
                        diff_step=0.02, max_nfev=40)
    return replace(c, blocking_s=float(np.exp(fit.x[0])), blocking_runs=len(blocking),
                   source=f"{c.source}; blocking_s on {len(blocking)} launch-blocking runs")


def fit_table(rows: FitRows, keys: Sequence[tuple[str, str]], seed: int = 0) -> ConstantsTable:
    """Constants per (GPU kind, protocol) key of each run, each fitted on that key's runs only."""
    keys_arr = np.array([f"{g}\x00{p}" for g, p in keys])
    fitted: dict[tuple[str, str], StepConstants] = {}
    for key in sorted(set(keys_arr)):
        idx = np.flatnonzero(keys_arr == key)
        sub = rows.subset(idx)
        gpu, protocol = key.split("\x00")
        c = fit_constants(sub, source=f"fitted on {len(idx)} runs ({gpu}, {protocol})", seed=seed)
        if c is not DEFAULT:
            fitted[(gpu, protocol)] = replace(c, host_score=sub.host_score())
    return ConstantsTable(fitted)
