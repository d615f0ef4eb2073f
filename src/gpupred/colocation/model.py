"""The slowdown model: each member's slowdown from its own and its partners' solo features.

The features of a member are symmetric group features of a per-member frame aligned with the
co-location table (own value, others' sum and max, group sum and max, own x others for the
utilization-like columns, and the summed utilization over 100). When the base holds ``busy`` (the
member's GPU-busy fraction, 0..1) they also hold ``timeshare``, the time-sharing estimate of
:mod:`gpupred.colocation.timeshare`, and the model is a *correction* on top of it: gradient boosting on
``log slowdown - log timeshare``. Which solo features go in is the caller's choice: *predicted* ones
(out-of-fold predictions plus graph features) for the model a scheduler would have, *measured* ones for
the simulator's fallback truth. Without ``busy`` the model is gradient boosting on log slowdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpupred.colocation.table import log_slowdown
from gpupred.colocation.timeshare import timeshare_slowdown
from gpupred.errors import GpupredError

PRODUCT_COLUMNS: tuple[str, ...] = ("gpu_util", "sm_active", "gmem_util")  # own x others: interference terms


def single_thread() -> Any:
    """A context that keeps OpenMP to one thread: small fits run far faster than with threads on a shared CPU."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="openmp")


def usable_base(member: pd.DataFrame, base: list[str] | tuple[str, ...]) -> list[str]:
    """The base columns present in ``member`` with at least one value."""
    return [c for c in base if c in member.columns and member[c].notna().any()]


def derive(own: np.ndarray, osum: np.ndarray, omax: np.ndarray, n_others: np.ndarray, base: list[str]) -> pd.DataFrame:
    """Symmetric group features from own, others' sum and others' max (arrays: rows x base)."""
    cols: dict[str, np.ndarray] = {"n_others": n_others.astype(float)}
    for k, name in enumerate(base):
        o, s, mx = own[:, k], osum[:, k], omax[:, k]
        cols[f"own_{name}"] = o
        cols[f"others_{name}"] = s
        cols[f"others_max_{name}"] = mx
        cols[f"sum_{name}"] = o + s
        cols[f"max_{name}"] = np.fmax(o, mx)
        if name in PRODUCT_COLUMNS:
            cols[f"prod_{name}"] = o * s
    if "gpu_util" in base:
        cols["over_100"] = np.maximum(0.0, cols["sum_gpu_util"] - 100.0)
    if "busy" in base:
        k = base.index("busy")
        cols["timeshare"] = timeshare_slowdown(own[:, k], np.minimum(1.0, osum[:, k]))
    return pd.DataFrame(cols)


def log_prior(x: pd.DataFrame) -> np.ndarray:
    """The log of the time-sharing estimate the model corrects (0 where the features have none)."""
    if "timeshare" not in x.columns:
        return np.zeros(len(x))
    return np.log(np.nan_to_num(x["timeshare"].to_numpy(float), nan=1.0))


def group_features(table: pd.DataFrame, member: pd.DataFrame, base: list[str]) -> pd.DataFrame:
    """Model inputs for each row of a co-location table from the aligned per-member frame ``member``."""
    if len(member) != len(table):
        raise GpupredError(f"member features have {len(member)} rows for a table of {len(table)}; align them first")
    vals = member[base].to_numpy(float)
    groups = table["group_id"].to_numpy()
    osum = np.zeros_like(vals)
    omax = np.full_like(vals, np.nan)
    n_others = np.zeros(len(table))
    for idx in pd.Series(np.arange(len(groups))).groupby(groups).indices.values():
        block = vals[idx]
        if len(idx) == 2:  # the common case: the partner is the other row
            osum[idx[0]], osum[idx[1]] = block[1], block[0]
            omax[idx[0]], omax[idx[1]] = block[1], block[0]
        else:
            for r, i in enumerate(idx):
                others = np.delete(block, r, axis=0)
                if len(others):
                    osum[i] = np.nansum(others, axis=0)
                    omax[i] = np.nanmax(others, axis=0)
        n_others[idx] = len(idx) - 1
    return derive(vals, osum, omax, n_others, base)


def prior_scale(target: np.ndarray, prior: np.ndarray) -> float:
    """The least-squares k in ``log slowdown ~ k * log timeshare`` (0 without a prior), clipped to [0, 2]."""
    denom = float(np.dot(prior, prior))
    return float(np.clip(np.dot(prior, target) / denom, 0.0, 2.0)) if denom > 0 else 0.0


SHRINK: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0)  # weights of the boosted residual tried in the inner CV


def fit_residual(x: pd.DataFrame, target: np.ndarray, prior: np.ndarray, seed: int,
                 params: dict[str, Any]) -> tuple[float, Any]:
    """(k, boosted model of ``target - k * prior``) on the rows of ``x``."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    settings: dict[str, Any] = {
        "max_iter": 100, "learning_rate": 0.08, "max_leaf_nodes": 7, "l2_regularization": 1.0, "random_state": seed,
        "min_samples_leaf": max(2, min(40, len(x) // 20)),
    }
    settings.update(params)
    scale = prior_scale(target, prior)
    with single_thread():
        return scale, HistGradientBoostingRegressor(**settings).fit(x, target - scale * prior)


def inner_folds(table: pd.DataFrame, n_folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row positions per fold of whole model groups: test rows are the fold's groups' jobs, train
    rows the pairs with no member in the fold (so a test job is in no training pair)."""
    groups = table["model_group"].astype(str).to_numpy()
    fold_of = {g: k % n_folds for k, g in enumerate(sorted(set(groups)))}
    fold = np.array([fold_of[g] for g in groups])
    codes = pd.factorize(table["group_id"])[0]
    out = []
    for k in range(n_folds):
        touched = np.bincount(codes, weights=(fold == k).astype(float), minlength=codes.max() + 1) > 0
        out.append((np.flatnonzero(~touched[codes]), np.flatnonzero(fold == k)))
    return out


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok]).statistic) if ok.sum() > 2 and np.ptp(a[ok]) > 0 else -1.0


def choose_candidate(table: pd.DataFrame, member: pd.DataFrame, x: pd.DataFrame, base: list[str], target: np.ndarray,
                     prior: np.ndarray, seed: int, params: dict[str, Any], n_folds: int = 3) -> tuple[str, float]:
    """(kind, shrink) of the candidate with the highest inner Spearman over folds of whole model groups.

    Candidates, fixed before any evaluation: ``boosted`` with each residual weight of :data:`SHRINK` (0: the
    calibrated time-sharing prior alone) and, on tables of pairs, ``effects`` (prior plus
    :class:`gpupred.colocation.effects.EffectsModel`). Ranking-aware: the pooled inner-fold Spearman decides.
    """
    from gpupred.colocation.effects import EffectsModel, partner_rows

    if "model_group" not in table.columns or table["model_group"].nunique() < n_folds:
        return "boosted", 1.0
    pairs = bool((table.groupby("group_id")["group_id"].transform("size") == 2).all())
    partner = partner_rows(table) if pairs else None
    pred = {("boosted", w): np.full(len(x), np.nan) for w in SHRINK}
    if pairs:
        pred[("effects", 0.0)] = np.full(len(x), np.nan)
    for tr, te in inner_folds(table, n_folds):
        if len(tr) < 8 or not len(te):
            continue
        scale, model = fit_residual(x.iloc[tr], target[tr], prior[tr], seed, params)
        with single_thread():
            resid = model.predict(x.iloc[te])
        for w in SHRINK:
            pred[("boosted", w)][te] = scale * prior[te] + w * resid
        if partner is not None:
            eff = EffectsModel.fit(table.iloc[tr], member.iloc[tr], base, target[tr] - scale * prior[tr])
            pred[("effects", 0.0)][te] = scale * prior[te] + eff.predict(member.iloc[te], member.iloc[partner[te]])
    score = {k: _spearman(v, target) for k, v in pred.items()}
    kind, shrink = max(score, key=lambda k: (score[k], -SHRINK.index(k[1]) if k[0] == "boosted" else 0))
    return kind, float(shrink)


@dataclass
class SlowdownModel:
    """Log slowdown from symmetric group features: ``k log timeshare`` plus a shrunk boosted residual (or boosting
    alone), or plus job effects (:class:`gpupred.colocation.effects.EffectsModel`)."""

    base: list[str]
    columns: list[str]
    model: Any = field(repr=False)  # the boosted residual (None when kind is "effects")
    scale: float = 0.0  # the fitted exponent k of the prior: the model corrects k * log(timeshare)
    shrink: float = 1.0  # weight of the boosted residual (chosen in an inner cross-validation)
    kind: str = "boosted"  # the candidate the inner cross-validation chose: "boosted" or "effects"
    effects: Any = field(default=None, repr=False)  # the EffectsModel when kind is "effects"

    @classmethod
    def fit(cls, table: pd.DataFrame, member: pd.DataFrame, base: list[str] | tuple[str, ...], seed: int = 0,
            **params: Any) -> SlowdownModel:
        """Train on every row of ``table`` (finite slowdowns, whole groups) with its aligned ``member`` features.

        With a time-sharing prior, the candidate (boosted residual shrunk by a factor of :data:`SHRINK`, 0: the
        calibrated prior alone; or job effects) is chosen by :func:`choose_candidate` in an inner
        cross-validation over the training rows' model groups.
        """
        y = table["slowdown"].to_numpy(float)
        if len(table) < 4 or not np.isfinite(y).all():
            raise GpupredError(f"{len(table)} co-located jobs, {int((~np.isfinite(y)).sum())} without a slowdown: "
                               "fit on at least 4 jobs with measured slowdowns")
        use = usable_base(member, base)
        if not use:
            raise GpupredError(f"none of the features {list(base)} has a value; nothing to fit the slowdown on")
        x = group_features(table, member, use)
        target, prior = log_slowdown(table), log_prior(x)
        t, m = table.reset_index(drop=True), member.reset_index(drop=True)
        kind, shrink = "boosted", 1.0
        if "timeshare" in x.columns and "model_group" in table.columns:
            kind, shrink = choose_candidate(t, m, x, use, target, prior, seed, params)
        if kind == "effects":  # the prior's exponent and the job effects on top: no boosted residual to fit
            from gpupred.colocation.effects import EffectsModel

            scale = prior_scale(target, prior)
            effects = EffectsModel.fit(t, m, use, target - scale * prior)
            return cls(use, list(x.columns), None, scale, shrink, kind, effects)
        scale, model = fit_residual(x, target, prior, seed, params)
        return cls(use, list(x.columns), model, scale, shrink, kind)

    def _log_value(self, x: pd.DataFrame, own: pd.DataFrame, partner: pd.DataFrame | None) -> np.ndarray:
        """Log slowdown: ``k log timeshare`` plus the chosen candidate's part (shrunk boosting or job effects)."""
        if self.effects is not None:
            return self.scale * log_prior(x) + self.effects.predict(own, partner)
        with single_thread():
            return self.shrink * self.model.predict(x) + self.scale * log_prior(x)

    def predict(self, table: pd.DataFrame, member: pd.DataFrame) -> np.ndarray:
        """Predicted slowdown of each row of a co-location table (aligned ``member`` features)."""
        x = group_features(table, member, self.base)[self.columns]
        partner = None
        if self.effects is not None:
            from gpupred.colocation.effects import partner_rows

            member = member.reset_index(drop=True)
            partner = member.iloc[partner_rows(table.reset_index(drop=True))].reset_index(drop=True)
        return np.exp(self._log_value(x, member, partner))

    def pair_values(self, rows: pd.DataFrame, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Slowdowns of workload ``rows[a[k]]`` sharing a GPU with ``rows[b[k]]`` (rows: per-workload features)."""
        v = rows[self.base].to_numpy(float)
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        if len(a) == 0:
            return np.empty(0)
        x = derive(v[a], v[b], v[b], np.ones(len(a)), self.base)[self.columns]
        own = rows[self.base].iloc[a].reset_index(drop=True)
        return np.exp(self._log_value(x, own, rows[self.base].iloc[b].reset_index(drop=True)))

    def pair_matrix(self, rows: pd.DataFrame) -> np.ndarray:
        """Slowdown of workload ``rows[i]`` sharing a GPU with ``rows[j]``, for every ordered pair."""
        w = len(rows)
        return self.pair_values(rows, np.repeat(np.arange(w), w), np.tile(np.arange(w), w)).reshape(w, w)
