"""The physics of the step estimator: each run's kernels, the step model's constants fitted per (GPU kind,
measurement protocol) on training rows, every row's utilization and step time under them, and how wrong physics
is where its constants were borrowed (the extrapolation widths).

The step model itself is :mod:`gpupred.step.physics` (kernels of one training step, roofline GPU times, the host's launch
timeline); this module applies it to rows of a dataset frame. Fitting constants is the expensive part (a bounded
least-squares fit per key), so :class:`PhysicsData` keeps each fit, keyed by the training rows' ids: every estimator
fitted on the same rows (physics alone, physics x correction, another weighting) shares one.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from gpupred.errors import GpupredError
from gpupred.hardware import gpu_spec
from gpupred.learn.conformal import conformal_quantile
from gpupred.step.physics.constants import ConstantsTable
from gpupred.step.physics.fit import FitRows, fit_table, predict_rows
from gpupred.step.physics.inputfeed import HOST_GUESSED_COLUMN, LOADER_TIME_COLUMNS
from gpupred.step.physics.timeline import LoaderTimes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

PHYSICS_TARGETS: dict[str, str] = {"gpu_util": "util", "sm_active": "util", "iter_time_mean_s": "step"}
HELDOUT_MIN_ROWS = 20  # a training key held out for the extrapolation width needs at least this many labelled rows
HELDOUT_MAX_ROWS = 200  # and reads at most this many of them (evenly spaced): 3,000 rows of one key cost a minute
HOLDOUT_LEVELS: tuple[str, ...] = ("key", "architecture", "protocol")  # how an unseen key is predicted: heldout_errors


def protocol_of(sampler: str) -> str:
    """The measurement protocol of a sampler name: its interval dropped (``nvml-poll-50ms`` -> ``nvml-poll``)."""
    return re.sub(r"-\d+(\.\d+)?m?s(?=$|-)", "", str(sampler))


@dataclass
class PhysicsData:
    """The step model's inputs for rows of a dataset frame: kernels, GPU, protocol, labels, the constants key, and
    each row's id (``run_id``); ``cache`` (shared by every subset) keeps fitted constants by training-row ids."""

    rows: FitRows
    keys: list[tuple[str, str]]
    ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=object))
    cache: dict[Any, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.keys):
            self.ids = np.arange(len(self.keys)).astype(str).astype(object)

    def subset(self, positions: Sequence[int] | np.ndarray) -> "PhysicsData":
        """The rows at ``positions``, sharing this data's cache of fitted constants."""
        pos = np.asarray(positions, dtype=int)
        return PhysicsData(self.rows.subset(pos), [self.keys[i] for i in pos], self.ids[pos], self.cache)

    def align(self, df: pd.DataFrame) -> "PhysicsData":
        """The rows of ``df`` (by ``run_id``), in its order; this data itself when it already is."""
        if "run_id" not in df.columns:
            if len(df) != len(self.keys):
                raise GpupredError(f"physics inputs for {len(self.keys)} rows, {len(df)} rows to predict")
            return self
        ids = df["run_id"].astype(str).to_numpy(dtype=object)
        if len(ids) == len(self.ids) and (ids == self.ids.astype(str)).all():
            return self
        import pandas as pd

        where = pd.Series(np.arange(len(self.ids)), index=self.ids.astype(str))
        missing = [i for i in ids if i not in where.index]
        if missing:
            raise GpupredError(f"no physics inputs for run {missing[0]!r}: build them with physics_data(rows)")
        return self.subset(where.loc[ids].to_numpy())


def physics_data(df: pd.DataFrame, kernels: Sequence[Any] | None = None) -> PhysicsData:
    """The step model's inputs for every row of a dataset frame: ``kernels`` (one KernelList per row), else each
    workload's (:func:`gpupred.physicstables.kernels_of`: notebook 02's table, or from its graph)."""
    if kernels is None:
        from gpupred.physicstables import kernels_of

        kernels = kernels_of(df)  # notebook 02's table when current, else from each workload's graph
    labels = {t: df[t].to_numpy(float) if t in df.columns else np.full(len(df), np.nan)
              for t in ("gpu_util", "iter_time_mean_s")}
    host = df["host_batches"].astype(bool).tolist() if "host_batches" in df.columns else [False] * len(df)
    scores = df["host_score"].to_numpy(float) if "host_score" in df.columns else None
    rows = FitRows(list(kernels), [gpu_spec(g) for g in df["gpu"]], df["precision"].tolist(), df["sync"].tolist(),
                   host, labels["gpu_util"], labels["iter_time_mean_s"], loaders_of(df), scores)
    ids = df["run_id"].astype(str).to_numpy(dtype=object) if "run_id" in df.columns else np.empty(0, dtype=object)
    return PhysicsData(rows, [(str(g), protocol_of(s)) for g, s in zip(df["gpu"], df["sampler"])], ids)


def loaders_of(df: pd.DataFrame) -> list[LoaderTimes | None] | None:
    """Each row's host input pipeline from its ``LOADER_COLUMNS`` (None where absent or NaN: resident batches); None
    when no row has one."""
    if not set(LOADER_TIME_COLUMNS) <= set(df.columns):
        return None
    values = df[list(LOADER_TIME_COLUMNS)].to_numpy(float)
    if np.isnan(values[:, 0]).all():
        return None
    guessed = (df[HOST_GUESSED_COLUMN].to_numpy(float) == 1 if HOST_GUESSED_COLUMN in df.columns  # a frame from
               else np.zeros(len(df), bool))  # before the flag: every host as named
    return [None if np.isnan(v[0]) else LoaderTimes(float(v[0]), float(v[1]), int(v[2]), float(v[3]), float(v[4]),
                                                    bool(g)) for v, g in zip(values, guessed)]


def rows_key(ids: np.ndarray | Sequence[Any], ordered: bool = False) -> str:
    """A cache key for a set of row ids (``ordered``: a sequence of them): a 128-bit digest, not the ids themselves,
    so that a cache stays small to pickle into worker processes and quick to look up."""
    names = [str(i) for i in ids]
    return hashlib.blake2b("\x00".join(names if ordered else sorted(names)).encode(), digest_size=16).hexdigest()


def fitted_constants(pdata: PhysicsData, train: np.ndarray, seed: int = 0) -> ConstantsTable:
    """The constants fitted per (GPU kind, protocol) on the rows ``train`` of ``pdata`` (kept in its cache)."""
    key = ("constants", seed, rows_key(pdata.ids[train]))
    if key not in pdata.cache:
        sub = pdata.subset(train)
        pdata.cache[key] = fit_table(sub.rows, sub.keys, seed)
    return pdata.cache[key]


def row_physics(pdata: PhysicsData, table: ConstantsTable) -> tuple[np.ndarray, np.ndarray]:
    """(utilization %, step s) of every row of ``pdata`` under the constants ``table`` (each key's own or borrowed)."""
    util, step = np.empty(len(pdata.keys)), np.empty(len(pdata.keys))
    keys = np.array([f"{g}\x00{p}" for g, p in pdata.keys], dtype=object)
    for k in sorted(set(keys)):
        idx = np.flatnonzero(keys == k)
        util[idx], step[idx] = predict_rows(pdata.rows, table.get(*k.split("\x00"), pdata.rows.host_score(idx)), idx)
    return util, step


def fitted_physics(pdata: PhysicsData, train: np.ndarray, seed: int = 0) -> tuple[ConstantsTable, np.ndarray, np.ndarray]:
    """(constants fitted on the rows ``train``, utilization % and step s of every row under them)."""
    table = fitted_constants(pdata, train, seed)
    key = ("physics", seed, rows_key(pdata.ids[train]), rows_key(pdata.ids, ordered=True))
    if key not in pdata.cache:
        pdata.cache[key] = row_physics(pdata, table)
    util, step = pdata.cache[key]
    return table, util, step


LOADER_BOUND_SHARE = 0.05  # a fed row whose pipeline lengthens the modelled step by more than this trains nothing


def loader_bound(pdata: PhysicsData, share: float = LOADER_BOUND_SHARE) -> np.ndarray:
    """Per row, whether its input pipeline lengthens the step model's step (default constants) by more than
    ``share`` over the same step with its batch resident. Such a row's measured step is the loader's as much as the
    device's, and neither the constants nor the correction (which does not see the loader) can tell which part a
    residual belongs to: the step estimator scores these rows and never fits on them."""
    from gpupred.step.physics.constants import DEFAULT
    from gpupred.step.physics.timeline import simulate

    rows = pdata.rows
    out = np.zeros(len(pdata.keys), dtype=bool)
    if rows.loaders is None:
        return out
    for i, loader in enumerate(rows.loaders):
        if loader is None:
            continue
        args = (rows.kernels[i], rows.gpus[i], rows.precisions[i], DEFAULT, rows.syncs[i], rows.host_batches[i])
        out[i] = simulate(*args, loader).step_s > (1.0 + share) * simulate(*args, None).step_s
    return out


def guessed_hosts(pdata: PhysicsData) -> np.ndarray:
    """Per row, whether a host pipeline feeds it whose job named no host of its own
    (:attr:`gpupred.step.physics.timeline.LoaderTimes.host_guessed`): its loader was priced on a GPU server as measured
    (:data:`gpupred.loader.speed.GPU_HOST_SCORE`), a guess :func:`host_band_physics` spreads."""
    loaders = pdata.rows.loaders or [None] * len(pdata.keys)
    return np.array([loader is not None and loader.host_guessed for loader in loaders], dtype=bool)


def host_band_physics(pdata: PhysicsData, rows: np.ndarray,
                      physics: Callable[[PhysicsData], tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, ...]]:
    """(utilization %, step s) by ``physics`` of the ``rows`` of ``pdata`` with their host pipelines moved from
    :data:`gpupred.loader.speed.GPU_HOST_SCORE`, where they were priced, to each end of
    :data:`gpupred.loader.speed.HOST_SCORE_BAND` (a host's times go as one over its single-core score): what a job
    that names no host gives on the slowest and the fastest host it may run on."""
    from dataclasses import replace

    from gpupred.loader.speed import GPU_HOST_SCORE, HOST_SCORE_BAND

    sub = pdata.subset(rows)
    out = []
    for score in HOST_SCORE_BAND:
        f = GPU_HOST_SCORE / score
        loaders = [None if lt is None else replace(lt, produce_s=lt.produce_s * f, main_s=lt.main_s * f,
                                                   pin_s=lt.pin_s * f) for lt in sub.rows.loaders or ()]
        moved = replace(sub.rows, loaders=loaders, batches={})
        out.append(physics(PhysicsData(moved, sub.keys, sub.ids)))
    return out


def spread_over_hosts(lo: np.ndarray, hi: np.ndarray, base: np.ndarray, rows: np.ndarray,
                      ends: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Bounds ``lo``/``hi`` whose ``rows`` reach, besides their own, their bounds moved by physics at each end of the
    host band over physics as priced (``ends`` of the rows, ``base`` of every row): each such row's interval covers
    the job on every host of the band."""
    lo, hi = lo.copy(), hi.copy()
    for end in ends:
        ratio = end / np.maximum(base[rows], 1e-12)
        lo[rows] = np.minimum(lo[rows], lo[rows] * ratio)
        hi[rows] = np.maximum(hi[rows], hi[rows] * ratio)
    return lo, hi


LOADER_WIDTH_UNMEASURED = float(np.log(2.0))  # no loader-bound training rows: a factor of 2 either way
MIN_LOADER_ROWS = 5  # loader-bound training rows a measured loader width needs


def loader_width(rows: np.ndarray, y: np.ndarray, physics: np.ndarray, step: bool, alpha: float) -> tuple[float, int]:
    """(the half-width a loader-bound row's interval reaches at least, the rows it was measured on): the conformal
    quantile of the fitted step model's error (log for a time, log1p for a percentage) on the loader-bound training
    ``rows``, which no fit saw; :data:`LOADER_WIDTH_UNMEASURED` with fewer than :data:`MIN_LOADER_ROWS` of them. The
    correction learned on device-bound rows says nothing of a loader's error (a host moved by a speed ratio, workers
    contending for the host), so this is the only honest width such a row has."""
    ok = rows[np.isfinite(y[rows]) & (physics[rows] > 0) & (y[rows] >= 0)]
    if len(ok) < MIN_LOADER_ROWS:
        return LOADER_WIDTH_UNMEASURED, int(len(ok))
    err = np.log(y[ok] / physics[ok]) if step else np.log1p(y[ok]) - np.log1p(physics[ok])
    return conformal_quantile(err, alpha), int(len(ok))


def default_columns(pdata: PhysicsData) -> pd.DataFrame:
    """The step model's ``STEP_COLUMNS`` of every row under the default constants (what the dataset's ``phys_*``
    columns hold, for rows that do not carry them: a new job)."""
    import pandas as pd

    return pd.DataFrame(default_rows_columns(pdata.rows))


def default_rows_columns(rows: FitRows) -> list[dict[str, float]]:
    """Each row's ``STEP_COLUMNS`` under the default constants (the rows of :func:`default_columns`): each its own
    :func:`gpupred.step.physics.timeline.simulate`'s, priced in one pass (:func:`~gpupred.step.physics.timeline.simulate_many`)."""
    from gpupred.step.physics.constants import DEFAULT
    from gpupred.step.physics.timeline import simulate_many

    return [est.columns() for est in simulate_many(rows.kernels, rows.gpus, rows.precisions, DEFAULT, rows.syncs,
                                                   rows.host_batches, rows.loaders)]


def physics_log_error(y: np.ndarray, pred: np.ndarray, step: bool) -> np.ndarray:
    """The log error of physics' predictions: ``log(y / pred)`` for a step time (``pred`` floored at 1e-12),
    ``log1p y - log1p pred`` for a utilization (a percentage)."""
    y, pred = np.asarray(y, dtype=float), np.asarray(pred, dtype=float)
    return np.log(y / np.maximum(pred, 1e-12)) if step else np.log1p(y) - np.log1p(pred)


def default_log_error(df: pd.DataFrame, target: str) -> np.ndarray:
    """Per row of ``df``, :func:`physics_log_error` of the default-constants step model (its ``phys_step_s`` or
    ``phys_util`` column) against the measured ``target`` (NaN where unlabelled)."""
    step = PHYSICS_TARGETS[target] == "step"
    return physics_log_error(df[target], df["phys_step_s" if step else "phys_util"], step)


def heldout_errors(pdata: PhysicsData, table: ConstantsTable, rows: np.ndarray, y: np.ndarray, step: bool,
                   level: str = "key") -> dict[tuple[str, str], np.ndarray]:
    """Per fitted (GPU kind, protocol) key with at least ``HELDOUT_MIN_ROWS`` labelled ``rows``, the log errors
    (log1p for utilization, log for step time) of physics alone on those rows, predicted as an unseen key is: with
    that key's fit (``level="key"``) or every fit of its protocol (``level="protocol"``) removed from ``table``, the
    rest borrowed by :meth:`ConstantsTable.get`; or as a GPU of an architecture without fits (``level=
    "architecture"``): that key's fit removed and nothing borrowed from its architecture's other fits
    (:meth:`ConstantsTable.borrowed` with ``kin=False``: the host constants of its protocol's other fits, the device
    constants the published defaults).

    ``table`` must be fitted on rows that include ``rows`` (:func:`gpupred.step.physics.fit.fit_table` fits each key on
    its own rows only, so dropping a key's fit is refitting the constants on the other keys' rows); nothing outside
    ``rows`` is read.
    """
    if level not in HOLDOUT_LEVELS:
        raise GpupredError(f"unknown hold-out level {level!r}; known: {', '.join(HOLDOUT_LEVELS)}")
    rows = rows[np.isfinite(y[rows])]
    keys = [pdata.keys[i] for i in rows]
    errors = {}
    for key in sorted(set(keys) & set(table.fitted)):
        idx = rows[np.array([k == key for k in keys])]
        if len(idx) < HELDOUT_MIN_ROWS:
            continue
        idx = idx[np.unique(np.linspace(0, len(idx) - 1, min(len(idx), HELDOUT_MAX_ROWS)).round().astype(int))]
        util, step_s = heldout_physics(pdata, table, idx, key, level)
        err = physics_log_error(y[idx], step_s if step else util, step)
        errors[key] = err[np.isfinite(err)]
    return errors


def heldout_physics(pdata: PhysicsData, table: ConstantsTable, idx: np.ndarray, key: tuple[str, str],
                    level: str) -> tuple[np.ndarray, np.ndarray]:
    """(utilization %, step s) of the rows ``idx`` of ``key`` under ``table`` without that key's fit (``key``,
    ``architecture``: nothing borrowed from its kin either) or its protocol's fits (``protocol``), the rest borrowed;
    kept in ``pdata``'s cache (every target of a fit reads it)."""
    cache_key = ("heldout", level, key, tuple(sorted(table.fitted.items())), rows_key(pdata.ids[idx], ordered=True))
    if cache_key not in pdata.cache:
        drop = (lambda k: k[1] == key[1]) if level == "protocol" else (lambda k: k == key)
        others = ConstantsTable({k: c for k, c in table.fitted.items() if not drop(k)})
        score = pdata.rows.host_score(idx)
        constants = (others.borrowed(*key, kin=False, host_score=score) if level == "architecture"
                     else others.get(*key, host_score=score))
        pdata.cache[cache_key] = predict_rows(pdata.rows, constants, idx)
    return pdata.cache[cache_key]


def extrapolation_width(pdata: PhysicsData, table: ConstantsTable, rows: np.ndarray, y: np.ndarray, step: bool,
                        alpha: float, level: str = "key") -> float:
    """The log width an unseen key's interval needs: the conformal 1 - alpha quantile of :func:`heldout_errors`'
    |log error| pooled with every held-out key weighing the same (a new GPU or protocol is one more key, not 3,000
    more rows of the largest one): each key enters as ``m`` evenly spaced quantiles of its |log error|, ``m`` the
    fewest rows a held-out key has (the smallest key's own errors; no key counts more rows than it has). NaN when no
    key could be held out."""
    errors = [np.abs(e) for e in heldout_errors(pdata, table, rows, y, step, level).values() if len(e)]
    if not errors:
        return float("nan")
    m = min(len(e) for e in errors)
    levels = (np.arange(m) + 0.5) / m
    return conformal_quantile(np.concatenate([np.quantile(e, levels, method="inverted_cdf") for e in errors]), alpha)


@dataclass(frozen=True)
class ExtrapolationWidths:
    """How far an interval must reach (log1p for utilization, log for step time) on a row whose (GPU kind, protocol)
    had no training rows: a new GPU of a fitted architecture under a fitted protocol (``key``), a GPU of an
    architecture no fit of its protocol shares (``architecture``: its device constants are the published defaults),
    a protocol never fitted (``protocol``); the default-constant physics' error on the training rows where no key
    could be held out (``fallback``)."""

    key: float
    protocol: float
    fallback: float
    architecture: float = float("nan")  # NaN in an artifact from before this width: ``fallback`` stands in

    def for_rows(self, new_protocol: np.ndarray, new_architecture: np.ndarray) -> np.ndarray:
        """Per row, its width: ``protocol`` where the row's protocol has no fit, else ``architecture`` where no fit of
        the protocol shares its GPU's architecture (at least ``key``: a GPU of an unfitted architecture is known no
        better than a new one of a fitted architecture), else ``key`` (each ``fallback`` if NaN)."""
        key, protocol, arch = (self.fallback if np.isnan(w) else w for w in (self.key, self.protocol, self.architecture))
        arch = max(arch, key)
        return np.where(np.asarray(new_protocol, dtype=bool), protocol,
                        np.where(np.asarray(new_architecture, dtype=bool), arch, key))


def extrapolation_widths(pdata: PhysicsData, table: ConstantsTable, rows: np.ndarray, y: np.ndarray, step: bool,
                         alpha: float, default_error: np.ndarray) -> ExtrapolationWidths:
    """The :class:`ExtrapolationWidths` measured on the training ``rows`` alone (``default_error``: each row's
    default-constant log error, :func:`default_log_error`)."""
    err = np.abs(np.asarray(default_error, dtype=float)[rows])
    fallback = conformal_quantile(err[np.isfinite(err)], alpha)
    key, protocol, arch = (extrapolation_width(pdata, table, rows, y, step, alpha, level)
                           for level in ("key", "protocol", "architecture"))
    return ExtrapolationWidths(key, protocol, fallback, arch)


def rows_unfitted(keys: Sequence[tuple[str, str]], table: ConstantsTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: its (GPU kind, protocol) has no fit (its constants are borrowed), no fit of its protocol shares its
    GPU's architecture, and its protocol has none at all."""
    protocols = {p for _, p in table.fitted}
    unfitted = np.array([tuple(k) not in table.fitted for k in keys], dtype=bool)
    new_arch = {k: table.new_architecture(*k) for k in set(map(tuple, keys))}
    return (unfitted, np.array([new_arch[tuple(k)] for k in keys], dtype=bool),
            np.array([k[1] not in protocols for k in keys], dtype=bool))
