"""Nested cross-validation: the model is chosen inside each outer fold's training rows, scored on its test rows.

For each outer fold (grouped random or leave-one-family-out, :func:`gpupred.learn.evaluation.splits_for`):

1. **select** — every candidate regressor is scored by grouped K-fold CV on the outer *training* rows only
   (groups: workloads, or sibling families under ``lofo``); the lowest inner RMSLE wins;
2. **predict** — a CV+ conformal regressor (:class:`gpupred.learn.intervals.ConformalRegressor`) with the
   winner is fitted on the outer training rows and predicts every outer test row (point and interval).

Reported figures come from step 2 only: the outer rows were never seen by selection or fitting, so the
RMSLE and the interval coverage are honest estimates of the *whole procedure*, winner choice included.
The inner RMSLE that picked a winner is kept in :attr:`NestedResult.folds` for inspection and must not be
reported as performance. Optionally every candidate is also scored on the outer folds (``compare``): a
table of how each regressor does on unseen workloads, which is information, not a second selection.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

import numpy as np
import pandas as pd
from sklearn.base import clone

from gpupred.errors import GpupredError
from gpupred.learn.evaluation import Split, fold_groups, rmsle, splits_for
from gpupred.learn.folds import inner_splits
from gpupred.learn.intervals import ConformalRegressor
from gpupred.learn.parallel import jobs, one_thread, parallel_map
from gpupred.learn.regressors import make_regressor


@dataclass
class NestedResult:
    """What a nested cross-validation produced for one target and split scheme."""

    target: str
    scheme: str
    predictions: pd.DataFrame  # one row per dataset row in an outer test fold: keys, fold, y, pred, low, high, model
    folds: pd.DataFrame  # one row per outer fold: chosen model, its inner RMSLE (selection only), outer RMSLE, coverage
    comparison: pd.DataFrame  # one row per (outer fold, candidate): outer RMSLE of each candidate (when compare)

    def rmsle(self, by: str | None = None) -> float | dict[str, float]:
        """Outer-fold RMSLE over every labelled row (pooled), or per value of column ``by`` (e.g. source)."""
        p = self.predictions[self.predictions["y"].notna()]
        if by is None:
            return rmsle(p["y"], p["pred"])
        return {str(k): rmsle(g["y"], g["pred"]) for k, g in p.groupby(by)}

    def chosen(self) -> str:
        """The models the inner CVs chose, with how many outer folds each won: ``"lightgbm×3, ridge×2"``."""
        return ", ".join(f"{m}×{n}" for m, n in self.folds["model"].value_counts().items())

    def coverage(self, by: str | None = None) -> float | dict[str, float]:
        """Share of labelled outer rows whose interval holds the measured value (pooled, or per ``by``)."""
        p = self.predictions[self.predictions["y"].notna()]
        inside = (p["y"] >= p["low"]) & (p["y"] <= p["high"])
        if by is None:
            return float(inside.mean())
        return {str(k): float(v) for k, v in inside.groupby(p[by]).mean().items()}


def make_candidates(models: Iterable[str] | dict[str, Any], tune: bool = False, seed: int = 0) -> dict[str, Any]:
    """Unfitted candidates by name: names go through make_regressor, a dict passes estimators as they are."""
    if isinstance(models, dict):
        return dict(models)
    return {name: make_regressor(name, tune=tune, seed=seed) for name in models}


def _fit_predict(model: Any, X: np.ndarray, z: np.ndarray, train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Fit a clone on log1p targets of ``train`` rows; predictions (original scale) for ``test`` rows.

    One BLAS/OpenMP thread, also in a joblib worker (which does not inherit the parent's limit): a fit's
    floating-point summation order, and so its figures, must not depend on the machine's core count.
    """
    with one_thread():
        return _predict_original(clone(model).fit(X[train], z[train]), X, test)


def _predict_original(fitted: Any, X: np.ndarray, test: np.ndarray) -> np.ndarray:
    """A model fitted on log1p targets: its predictions (original scale, at least 0) for ``test`` rows, on one
    BLAS/OpenMP thread (as :func:`_fit_predict` fits)."""
    with one_thread():
        return np.clip(np.expm1(np.asarray(fitted.predict(X[test]), dtype=float)), 0, None)


def select_model(X: np.ndarray, y: np.ndarray, groups: np.ndarray, candidates: dict[str, Any], n_inner: int = 3,
                 seed: int = 0, n_jobs: int = 1) -> tuple[str, dict[str, float]]:
    """(winner, mean inner-fold RMSLE per candidate) by grouped K-fold CV on the rows given (and only those)."""
    z = np.log1p(y)
    folds = inner_splits(groups, n_inner, seed)
    tasks = [(name, tr, te) for name in candidates for tr, te in folds]
    preds = parallel_map(_fit_predict, [(candidates[n], X, z, tr, te) for n, tr, te in tasks], n_jobs, progress=False)
    per_fold: dict[str, list[float]] = {n: [] for n in candidates}
    for (name, _, te), pred in zip(tasks, preds):
        per_fold[name].append(rmsle(y[te], pred))
    # the mean over inner folds weighs each held-out group equally (a 3,000-run family does not drown the rest)
    scores = {n: float(np.mean(v)) for n, v in per_fold.items()}
    return min(scores, key=lambda n: (scores[n], n)), scores


@dataclass(frozen=True)
class CVSettings:
    """How a nested cross-validation runs: fold counts, interval level, tuning, seed and parallel fits."""

    n_outer: int = 5  # outer grouped-random folds (when no splits are given)
    n_inner: int = 3  # inner grouped folds that choose the model
    alpha: float = 0.1  # 1 - nominal interval coverage
    n_cal: int = 5  # CV+ calibration folds inside each outer training side
    tune: bool = False  # small grid search inside every fit
    seed: int = 0  # fold assignment and model seeds
    n_jobs: int = 0  # processes for parallel fits (0: one per core this process is given, learn.parallel.cores)


@dataclass
class FoldData:
    """The arrays every outer fold reads: features, label, which rows are labelled, groups and calibration strata."""

    X: np.ndarray
    y: np.ndarray
    labelled: np.ndarray
    groups: np.ndarray
    strata: np.ndarray | None
    percent: bool = False  # the label is a percentage: predictions and intervals are clipped to [0, 100]


def _outer_fold(data: FoldData, split: Split, candidates: dict[str, Any], compare: dict[str, Any],
                cv: CVSettings) -> dict[str, Any]:
    """Select on the outer training rows, then fit CV+ with the winner and predict the outer test rows."""
    X, y, labelled, groups, strata = data.X, data.y, data.labelled, data.groups, data.strata
    train, test, label = split
    train = train[labelled[train]]
    chosen, inner = select_model(X[train], y[train], groups[train], candidates, cv.n_inner, cv.seed, cv.n_jobs)
    cr = ConformalRegressor(clone(candidates[chosen]), cv.alpha, cv.n_cal, cv.seed)
    cr.fit(X[train], y[train], groups=groups[train], strata=None if strata is None else strata[train])
    point, low, high = cr.predict(X[test], None if strata is None else strata[test])
    if data.percent:  # a utilization is at most 100 %: so are its prediction and interval
        point, low, high = (np.clip(a, 0, 100) for a in (point, low, high))
    others: dict[str, float] = {}
    if compare:
        z = np.log1p(y)
        scored = test[labelled[test]]
        for name, model in compare.items():
            if len(scored):  # the winner's fit on these rows is the CV+ regressor's full model: not fitted again
                others[name] = rmsle(y[scored], _predict_original(cr.full_model_, X, scored)
                                     if model is candidates[chosen] else _fit_predict(model, X, z, train, scored))
    return {"label": label, "train": train, "test": test, "chosen": chosen, "inner": inner, "point": point,
            "low": low, "high": high, "compare": others}


def nested_cv(
    df: pd.DataFrame,
    target: str,
    models: Iterable[str] | dict[str, Any],
    scheme: str = "grouped_random",
    cv: CVSettings | None = None,
    splits: list[Split] | None = None,
    compare: bool | Iterable[str] = True,
    features: list[str] | None = None,
    mondrian: str | None = "source",
) -> NestedResult:
    """Nested CV of ``target``: per outer fold, choose a model by inner CV, predict the fold with CV+ intervals.

    ``splits`` (default ``splits_for(df, scheme, cv.n_outer, cv.seed)``) are over all rows of ``df``; models train
    on the labelled rows of each training side and predict every row of the test side, labelled or not.
    ``mondrian`` names the column whose values get their own interval calibration (default the source).
    ``compare``: score each candidate (True), these regressors (a list: may hold more than the candidates), or
    none on the outer folds, for a comparison table that selects nothing.
    """
    from gpupred.dataset import PERCENT_LABELS, feature_columns

    cv = cv or CVSettings()
    cols = features or feature_columns(df)
    y = df[target].to_numpy(float)
    labelled = ~np.isnan(y)
    if labelled.sum() < 10:
        raise GpupredError(f"only {int(labelled.sum())} rows with label {target!r}: too few for nested cross-validation")
    strata = df[mondrian].astype(str).to_numpy() if mondrian and mondrian in df.columns else None
    data = FoldData(df[cols].to_numpy(float), y, labelled, fold_groups(df, scheme), strata, target in PERCENT_LABELS)
    splits = splits if splits is not None else splits_for(df, scheme, cv.n_outer, cv.seed)
    candidates = make_candidates(models, cv.tune, cv.seed)
    compared = candidates if compare is True else make_candidates(compare, cv.tune, cv.seed) if compare else {}
    if compare is not True and not isinstance(models, dict) and not isinstance(compare, dict):
        # both by name, one construction: a candidate compared is the candidate itself, so an outer fold knows
        # its winner's fit (``_outer_fold``)
        compared = {name: candidates.get(name, model) for name, model in compared.items()}
    used = [split for split in splits if labelled[split[0]].any()]
    # the outer folds side by side, each fit inside them one after another; one fold alone selects on cv.n_jobs
    inner = replace(cv, n_jobs=1) if min(jobs(cv.n_jobs), len(used)) > 1 else cv
    outs = parallel_map(_outer_fold, [(data, split, candidates, compared, inner) for split in used], cv.n_jobs,
                        f"nested CV {target} ({scheme})", leave=False)
    return _collect(df, target, scheme, y, outs)


KEY_COLUMNS: tuple[str, ...] = ("run_id", "workload_id", "family", "gpu", "source")  # row keys a prediction keeps


def prediction_frame(df: pd.DataFrame, test: np.ndarray, fold: int, label: str, y: np.ndarray,
                     bounds: tuple[np.ndarray, np.ndarray, np.ndarray], model: str) -> pd.DataFrame:
    """One outer fold's predictions of its ``test`` rows of ``df``: their keys (``KEY_COLUMNS`` present), ``fold``,
    ``fold_label``, the measured ``y``, ``pred``, ``low``, ``high`` (``bounds``) and the ``model`` that made them."""
    frame = df.iloc[test][[c for c in KEY_COLUMNS if c in df.columns]].copy()
    frame["fold"], frame["fold_label"], frame["y"] = fold, label, y
    frame["pred"], frame["low"], frame["high"], frame["model"] = *bounds, model
    return frame


def result_from_frames(target: str, scheme: str, parts: list[pd.DataFrame]) -> NestedResult:
    """A NestedResult from one method's :func:`prediction_frame` parts (one row per outer fold in ``folds``:
    labelled rows and outer RMSLE); no inner selection, so ``comparison`` is empty."""
    preds = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    folds = []
    for (k, label), p in preds.groupby(["fold", "fold_label"], sort=True) if len(preds) else []:
        lab = p[p["y"].notna()]
        folds.append({"fold": k, "fold_label": label, "n_test": len(lab), "model": p["model"].iloc[0],
                      "outer_rmsle": rmsle(lab["y"], lab["pred"]) if len(lab) else np.nan})
    return NestedResult(target, scheme, preds, pd.DataFrame(folds), pd.DataFrame())


def _collect(df: pd.DataFrame, target: str, scheme: str, y: np.ndarray, outs: list[dict[str, Any]]) -> NestedResult:
    """Assemble per-row predictions, per-fold choices and the comparison table."""
    preds, folds, comp = [], [], []
    for k, o in enumerate(outs):
        t = o["test"]
        preds.append(prediction_frame(df, t, k, o["label"], y[t], (o["point"], o["low"], o["high"]), o["chosen"]))
        lab = ~np.isnan(y[t])
        inside = (y[t][lab] >= o["low"][lab]) & (y[t][lab] <= o["high"][lab])
        folds.append({"fold": k, "fold_label": o["label"], "n_train": len(o["train"]), "n_test": int(lab.sum()),
                      "model": o["chosen"], "inner_rmsle_of_choice": o["inner"][o["chosen"]],
                      "outer_rmsle": rmsle(y[t][lab], o["point"][lab]) if lab.any() else np.nan,
                      "coverage": float(inside.mean()) if lab.any() else np.nan})
        comp += [{"fold": k, "fold_label": o["label"], "model": m, "outer_rmsle": v} for m, v in o["compare"].items()]
    predictions = pd.concat(preds, ignore_index=True) if preds else pd.DataFrame()
    return NestedResult(target, scheme, predictions, pd.DataFrame(folds), pd.DataFrame(comp))


def choose_for_export(df: pd.DataFrame, target: str, models: Iterable[str] | dict[str, Any],
                      cv: CVSettings | None = None) -> str:
    """The model a predictor trained on every row should use: grouped inner CV over all labelled rows.

    The score that picks it is a selection score, not an estimate of the exported model's error (the
    nested outer-fold figures are).
    """
    from gpupred.dataset import feature_columns

    cv = cv or CVSettings()
    data = df[df[target].notna()].reset_index(drop=True)
    with one_thread():
        chosen, _ = select_model(data[feature_columns(data)].to_numpy(float), data[target].to_numpy(float),
                                 fold_groups(data, "grouped_random"), make_candidates(models, cv.tune, cv.seed),
                                 cv.n_inner, cv.seed, cv.n_jobs)
    return chosen


def oof_frame(results: dict[str, NestedResult], dataset: pd.DataFrame) -> pd.DataFrame:
    """The out-of-fold predictions file (gpupred.learn.oof contract) from grouped nested CV results per target.

    Every result must cover every dataset row exactly once, with the same folds for every target.
    """
    from gpupred.learn.oof import KEY_COLUMNS

    base: pd.DataFrame | None = None
    for target, res in results.items():
        p = res.predictions
        if len(p) != len(dataset) or p["run_id"].duplicated().any() or set(p["run_id"]) != set(dataset["run_id"]):
            raise GpupredError(f"{target}: out-of-fold predictions must cover every dataset row once "
                               f"({len(p)} predictions for {len(dataset)} rows)")
        p = p.set_index("run_id")
        if base is None:
            base = dataset[["run_id", "workload_id", "gpu", "source"]].copy()
            base["fold"] = p.loc[base["run_id"], "fold"].to_numpy().astype(int)
        elif not np.array_equal(p.loc[base["run_id"], "fold"].to_numpy(), base["fold"].to_numpy()):
            raise GpupredError(f"{target}: folds differ from the other targets'; use the same splits for every target")
        base[target] = p.loc[base["run_id"], "pred"].to_numpy()
        base[f"{target}_low"] = p.loc[base["run_id"], "low"].to_numpy()
        base[f"{target}_high"] = p.loc[base["run_id"], "high"].to_numpy()
        base[f"{target}_model"] = p.loc[base["run_id"], "model"].to_numpy()
    if base is None:
        raise GpupredError("no nested CV results to write")
    return base[[*KEY_COLUMNS, *(c for c in base.columns if c not in KEY_COLUMNS)]].reset_index(drop=True)


OUTER_SCHEMES: dict[str, str] = {"grouped_random": "grouped random folds (unseen workloads)",
                                 "lofo": "leave one family out (unseen families)"}


def plot_outer(results: dict[str, NestedResult], title: str = "") -> Any:
    """Measured vs out-of-fold predicted values per scheme (log axes), coloured by source, with intervals; each
    panel names its held-out split, its pooled RMSLE and coverage, and the models its inner CVs chose."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 4.6), squeeze=False)
    sources = sorted({s for r in results.values() for s in r.predictions.get("source", [])})
    palette = dict(zip(sources, sns.color_palette(n_colors=max(len(sources), 1))))
    for ax, (name, res) in zip(axes[0], results.items()):
        p = res.predictions[res.predictions["y"].notna()]
        ax.errorbar(p["y"], p["pred"], yerr=[p["pred"] - p["low"], p["high"] - p["pred"]], fmt="none", ecolor="0.85",
                    lw=0.6, zorder=0)
        sns.scatterplot(data=p, x="y", y="pred", hue="source", hue_order=sources, palette=palette, s=14, alpha=0.7, ax=ax,
                        linewidth=0)
        lo, hi = max(0.5, float(p[["y", "pred"]].min().min())), float(p[["y", "pred"]].max().max()) * 1.1
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
        unit = {"gpu_util": " (%)", "sm_active": " (%)", "memory_mib": " (MiB)"}.get(res.target, "")
        ax.set(xscale="log", yscale="log", xlabel=f"measured {res.target}{unit}",
               ylabel=f"out-of-fold prediction{unit}")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_title(f"{OUTER_SCHEMES.get(name, name)}\nRMSLE {res.rmsle():.3f}, 90 % interval coverage "
                     f"{res.coverage():.0%}; chosen: {res.chosen()}", fontsize=9.5)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_comparison(results: dict[str, NestedResult], title: str = "") -> Any:
    """Each candidate's outer-fold RMSLE per scheme (mean and spread over folds): a table of information."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    frames = [r.comparison.assign(scheme=name) for name, r in results.items() if len(r.comparison)]
    data = pd.concat(frames, ignore_index=True)
    order = data.groupby("model")["outer_rmsle"].mean().sort_values().index
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(order) + 1.5))
    sns.pointplot(data=data, y="model", x="outer_rmsle", hue="scheme", order=order, errorbar="sd",
                  dodge=0.4 if data["scheme"].nunique() > 1 else False, linestyle="none", ax=ax)
    ax.set_xlabel("RMSLE on outer folds (mean ± sd over folds)")
    ax.set_title(title)
    fig.tight_layout()
    return fig
