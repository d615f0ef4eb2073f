"""The step estimator and its baselines on the same outer splits: what notebook 03 scores and notebook 04 explains.

Splits (:func:`comparison_splits`): within each GPU kind (grouped folds over its own workloads), leave one family
out (sibling groups), cross-GPU (another kind's rows, or all other kinds', to a kind; ``twins``: one kind to
another with their shared workloads kept). Methods (:data:`METHODS`), each an estimator fitted on the split's
training rows only and asked about its test rows: the constant baseline, the current regressor (HotCloud/Horus
features, no step model), physics alone (the step model with constants fitted on the training rows), and the
shipped :class:`gpupred.step.estimator.StepEstimator` (physics x correction). Every method's predictions of every outer
test row come back as a :class:`gpupred.learn.nested.NestedResult`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from gpupred.dataset import SOURCE_OWN
from gpupred.errors import GpupredError
from gpupred.learn.baselines import ConstantBaseline, RegressorBaseline
from gpupred.learn.evaluation import Split
from gpupred.learn.nested import CVSettings, NestedResult, prediction_frame, result_from_frames
from gpupred.learn.parallel import parallel_map
from gpupred.learn.summary import METHODS, comparison_table
from gpupred.learn.regressors import correction_model
from gpupred.step.correction import CORRECTION_FEATURES, WEIGHTINGS
from gpupred.step.estimator import MIN_LABELLED, StepEstimator
from gpupred.step.rowphysics import (PHYSICS_TARGETS, PhysicsData, fitted_constants, fitted_physics, physics_data,
                                     rows_key)



def candidates(targets: tuple[str, ...], cv: CVSettings, weighting: str = "per_source", interval_groups: str = "family",
               methods: tuple[str, ...] = METHODS) -> dict[str, dict[str, Any]]:
    """The unfitted estimators the comparison scores, by method and target (every one calibrated alike): one step
    estimator answers every target of ``targets`` (its constants are fitted once), a baseline one target each."""
    step = StepEstimator(tuple(targets), weighting, interval_groups, True, cv.alpha, cv.n_cal, cv.n_inner, cv.seed)
    every = {"constant": {t: ConstantBaseline(t, cv.alpha) for t in targets},
             "regressor": {t: RegressorBaseline(t, "lightgbm", None, interval_groups, cv.alpha, cv.n_cal, cv.seed)
                           for t in targets},
             "physics": {"*": clone(step).set_params(correct=False)}, "physics+correction": {"*": step}}
    unknown = [m for m in methods if m not in every]
    if unknown:
        raise GpupredError(f"unknown method {unknown[0]!r}; known: {', '.join(METHODS)}")
    return {m: every[m] for m in methods}


def comparison_splits(df: pd.DataFrame, n_within: int = 5, seed: int = 0) -> dict[str, list[Split]]:
    """The splits of the comparison over ``df``'s rows, by scheme (see the module docstring)."""
    from gpupred.learn.crossgpu import REST, WITHIN, transfer_splits
    from gpupred.learn.evaluation import splits_for

    transfer = transfer_splits(df, n_within, seed)
    within = [s.as_split() for s in transfer if s.train_gpus == WITHIN]
    if not within:  # one GPU kind: grouped folds over its workloads
        within = splits_for(df, "grouped_random", n_within, seed)
    cross = [s.as_split() for s in transfer if s.train_gpus != WITHIN and s.workloads == "unseen"]
    twins = [s.as_split() for s in transfer if s.train_gpus not in (WITHIN, REST) and s.workloads == "twins"]
    out = {"within": within, "lofo": splits_for(df, "lofo")}
    if cross:
        out["cross_gpu"] = cross
    if twins:
        out["cross_gpu_twins"] = twins
    return out


def _split_predictions(df: pd.DataFrame, targets: tuple[str, ...], split: Split, pdata: PhysicsData,
                       models: dict[str, dict[str, Any]]) -> dict[str, dict[str, tuple[np.ndarray, ...]]]:
    """Every method's (point, low, high) per target on the test rows of one outer split, each estimator fitted on the
    split's training rows (a target's baseline on those labelled with it)."""
    train, test, _ = split
    train_rows, test_rows = df.iloc[train], df.iloc[test]
    fitted_constants(pdata, train)  # one constants fit per split, shared by the physics methods (pdata's cache)
    out: dict[str, dict[str, tuple[np.ndarray, ...]]] = {}
    for method, per_target in models.items():
        out[method] = {}
        for key, model in per_target.items():
            if key != "*" and train_rows[key].notna().sum() < MIN_LABELLED:
                continue
            fitted = clone(model)
            if key == "*":  # the step estimator: corrections only for the sources the test rows come from
                fitted.fit(train_rows, pdata.subset(train), asked=sorted(set(test_rows["source"].astype(str))))
            else:
                fitted.fit(train_rows, pdata.subset(train))
            pred = fitted.predict(test_rows, pdata.subset(test))
            for t in (targets if key == "*" else (key,)):
                if t in pred.columns:
                    out[method][t] = tuple(pred[c].to_numpy(float) for c in (t, f"{t}_low", f"{t}_high"))
    return out


SplitPredictions = dict[str, dict[str, tuple[np.ndarray, ...]]]  # method -> target -> (point, low, high)


def split_task(df: pd.DataFrame, targets: tuple[str, ...], splits: list[Split], pdata: PhysicsData,
               models: dict[str, dict[str, Any]]) -> tuple[list[SplitPredictions], dict[Any, Any]]:
    """:func:`_split_predictions` of each of ``splits`` (one training set: one constants fit), and the fits it added
    to ``pdata``'s cache (a worker process's cache is its own: the caller keeps them)."""
    before = set(pdata.cache)
    predictions = [_split_predictions(df, targets, split, pdata, models) for split in splits]
    return predictions, {k: v for k, v in pdata.cache.items() if k not in before}


def same_training(splits: list[Split], pdata: PhysicsData) -> list[list[int]]:
    """The positions of ``splits`` grouped by training rows (several cross-GPU splits train on one GPU kind's), the
    largest training set first."""
    groups: dict[str, list[int]] = {}
    for k, (train, _, _) in enumerate(splits):
        groups.setdefault(rows_key(pdata.ids[train]), []).append(k)
    return sorted(groups.values(), key=lambda g: -len(splits[g[0]][0]))


def evaluate_step(df: pd.DataFrame, targets: str | tuple[str, ...], scheme: str, splits: list[Split],
                  pdata: PhysicsData | None = None, cv: CVSettings | None = None, weighting: str = "per_source",
                  interval_groups: str = "family", methods: tuple[str, ...] = METHODS) -> dict[str, dict[str, NestedResult]]:
    """Each method's outer-fold predictions of each target on ``splits`` (rows of ``df``), as NestedResults:
    ``{target: {method: result}}`` (a single target name gives ``{method: result}``).

    ``pdata`` (default: built from ``df``) describes the rows of ``df`` in order. The splits run on ``cv.n_jobs``
    processes, each fit on one BLAS thread: the results do not depend on how many.
    """
    names = (targets,) if isinstance(targets, str) else tuple(targets)
    unknown = [t for t in names if t not in PHYSICS_TARGETS]
    if unknown:
        raise GpupredError(f"no physics for target {unknown[0]!r}; known: {', '.join(PHYSICS_TARGETS)}")
    if weighting not in WEIGHTINGS:
        raise GpupredError(f"unknown weighting {weighting!r}; known: {', '.join(WEIGHTINGS)}")
    cv = cv or CVSettings()
    pdata = pdata.align(df) if pdata is not None else physics_data(df)
    models = candidates(names, cv, weighting, interval_groups, methods)
    parts: dict[str, dict[str, list[pd.DataFrame]]] = {t: {m: [] for m in methods} for t in names}
    groups = same_training(splits, pdata)
    tasks = [(df, names, [splits[k] for k in g], pdata, models) for g in groups]
    kept: dict[Any, Any] = {}
    by_split: dict[int, SplitPredictions] = {}
    for group, (predictions, fitted) in zip(groups, parallel_map(split_task, tasks, cv.n_jobs, f"step ({scheme})",
                                                                 leave=False)):
        kept.update(fitted)
        by_split.update(zip(group, predictions))
    for k, split in enumerate(splits):
        for method, per_target in by_split[k].items():
            for t, bounds in per_target.items():
                parts[t][method].append(prediction_frame(df, split[1], k, split[2], df[t].to_numpy(float)[split[1]],
                                                         bounds, method))
    pdata.cache.update(kept)  # the workers' constants fits, kept as in-process splits keep theirs (not while pickling)
    out = {t: {m: result_from_frames(t, scheme, p) for m, p in per.items()} for t, per in parts.items()}
    return out[names[0]] if isinstance(targets, str) else out


def compare_targets(df: pd.DataFrame, targets: tuple[str, ...], cv: CVSettings | None = None,
                    weighting: str = "per_source", n_within: int = 5, pdata: PhysicsData | None = None,
                    schemes: tuple[str, ...] = ("within", "lofo", "cross_gpu"), methods: tuple[str, ...] = METHODS,
                    interval_groups: str = "family") -> dict[str, dict[str, dict[str, NestedResult]]]:
    """Each of ``methods`` on the comparison's splits of the rows labelled with any of ``targets``, every target
    scored on the rows labelled with it: ``{target: {scheme: {method: result}}}``."""
    cv = cv or CVSettings()
    data = df[df[list(targets)].notna().any(axis=1)].reset_index(drop=True)
    pdata = pdata.align(data) if pdata is not None else physics_data(data)
    per_scheme = {name: evaluate_step(data, tuple(targets), name, sp, pdata, cv, weighting, interval_groups, methods)
                  for name, sp in comparison_splits(data, n_within, cv.seed).items() if name in schemes}
    return {t: {name: res[t] for name, res in per_scheme.items()} for t in targets}


def compare_methods(df: pd.DataFrame, target: str, cv: CVSettings | None = None, weighting: str = "per_source",
                    n_within: int = 5, pdata: PhysicsData | None = None,
                    schemes: tuple[str, ...] = ("within", "lofo", "cross_gpu"), methods: tuple[str, ...] = METHODS,
                    interval_groups: str = "family") -> dict[str, dict[str, NestedResult]]:
    """Each of ``methods`` on the comparison's splits of the rows labelled with ``target``, by scheme."""
    return compare_targets(df, (target,), cv, weighting, n_within, pdata, schemes, methods, interval_groups)[target]


def weighting_effect(df: pd.DataFrame, targets: list[str], cv: CVSettings | None = None, n_within: int = 5,
                     pdata: PhysicsData | None = None, schemes: tuple[str, ...] = ("within", "lofo"),
                     weightings: tuple[str, ...] = WEIGHTINGS) -> pd.DataFrame:
    """Physics x correction under each of ``weightings`` (which training rows the correction learns from) on the
    comparison's splits: one :func:`comparison_table` row per (target, weighting, scheme, tested GPU). The step
    model's constants are fitted once per split and shared by the weightings (they do not depend on it)."""
    pdata = pdata or physics_data(df)
    tables = []
    for weighting in weightings:
        res = compare_targets(df, tuple(targets), cv, weighting, n_within, pdata, schemes, ("physics+correction",))
        tables.append(comparison_table(res).assign(weighting=weighting))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def correction_frame(df: pd.DataFrame, target: str, pdata: PhysicsData, seed: int = 0) -> pd.DataFrame:
    """Per labelled row: the fitted physics, the measured value and log(measured / physics) (constants fitted on
    every row: an explanation, not an evaluation), with the correction's features."""
    _, util, step = fitted_physics(pdata.align(df), np.arange(len(df)), seed)
    base = step if PHYSICS_TARGETS[target] == "step" else util
    out = df[["run_id", "family", "source", "gpu", *[c for c in CORRECTION_FEATURES if c in df.columns]]].copy()
    out["fit_phys_util"], out["fit_phys_step_s"], out["physics"], out["measured"] = util, step, base, df[target]
    out["log_correction"] = np.log(out["measured"] / out["physics"])
    return out[out["measured"].notna()].reset_index(drop=True)


def correction_shap(frame: pd.DataFrame, source: str | None = SOURCE_OWN, seed: int = 0, max_rows: int = 500) -> Any:
    """A ``shap.Explanation`` of the correction model fitted on ``frame`` (one source's rows by default)."""
    import warnings

    from gpupred.learn.transform import signed_log1p

    with warnings.catch_warnings():  # shap imports tqdm.auto, which warns in a kernel without ipywidgets
        warnings.simplefilter("ignore")
        import shap

    rows = frame if source is None else frame[frame["source"] == source]
    cols = [c for c in (*CORRECTION_FEATURES, "fit_phys_util", "fit_phys_step_s") if c in rows.columns]
    X = rows[cols].to_numpy(float)
    model = correction_model(seed).fit(X, rows["log_correction"].to_numpy(float))
    sample = rows.sample(min(max_rows, len(rows)), random_state=seed)
    explanation = shap.TreeExplainer(model[-1])(pd.DataFrame(signed_log1p(sample[cols].to_numpy(float)), columns=cols))
    explanation.feature_names = cols
    return explanation


def without_pipelines(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every row's host input pipeline dropped (its ``LOADER_COLUMNS`` NaN): the step model as it was
    before pipelines, each fed row only copying its batch (the "before" of notebook 03's pipeline section)."""
    from gpupred.step.physics.inputfeed import LOADER_COLUMNS

    out = df.copy()
    for c in LOADER_COLUMNS:
        out[c] = np.nan
    return out


def source_heldout(df: pd.DataFrame, source: str, train_sources: tuple[str, ...] = (SOURCE_OWN,), alpha: float = 0.1,
                   seed: int = 0) -> pd.DataFrame:
    """The shipped step estimator fitted on ``train_sources``' rows (the default, licence-clean predictor's: this
    project's own runs) and asked about every row of ``source`` (never trained on): per row its family, batch,
    pipeline, measured and predicted utilization and step time, and the step model's own (uncorrected) figures."""
    train = df[df["source"].isin(train_sources)]
    test = df[df["source"] == source]
    if train.empty or test.empty:
        raise GpupredError(f"held-out source {source!r}: {len(train)} training rows, {len(test)} rows to predict")
    return heldout_rows(train, test, alpha, seed)


def pipeline_fed(df: pd.DataFrame) -> pd.Series:
    """Which rows were fed by a host input pipeline (their ``loader_produce_s`` set; resident rows have NaN)."""
    if "loader_produce_s" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["loader_produce_s"].notna()


def own_pipeline_heldout(df: pd.DataFrame, alpha: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """This project's own pipeline-fed runs (the campaign's stage 2), predicted by the shipped step estimator fitted
    on every other own run (all resident): no run fed by a pipeline is trained on, so what the estimator knows of
    pipelines is the physics' timeline alone. Rows as :func:`source_heldout`'s; empty without such runs."""
    own = df[df["source"] == SOURCE_OWN]
    fed = pipeline_fed(own)
    if not fed.any():
        return pd.DataFrame()
    return heldout_rows(own[~fed], own[fed], alpha, seed)


def heldout_rows(train: pd.DataFrame, test: pd.DataFrame, alpha: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """The shipped step estimator fitted on ``train`` and asked about ``test``: per test row its family, batch,
    pipeline, measured and predicted utilization and step time (with intervals), and the uncorrected physics."""
    targets = tuple(t for t in ("gpu_util", "iter_time_mean_s") if train[t].notna().sum() >= MIN_LABELLED)
    est = StepEstimator(targets, alpha=alpha, seed=seed).fit(train)
    pred = est.predict(test)
    util, step = est.physics(test)
    cols = [c for c in ("run_id", "workload_id", "family", "batch_size", "precision", "gpu_util", "iter_time_mean_s")
            if c in test.columns]
    out = test[cols].reset_index(drop=True)
    for c in ("loader_produce_s", "loader_workers"):  # NaN: resident (a dataset from before pipelines has neither)
        out[c] = test[c].to_numpy(float) if c in test.columns else np.nan
    for t in targets:
        out[f"pred_{t}"], out[f"pred_{t}_low"], out[f"pred_{t}_high"] = (pred[c].to_numpy(float)
                                                                         for c in (t, f"{t}_low", f"{t}_high"))
    out["physics_gpu_util"], out["physics_iter_time_mean_s"] = util, step
    return out


def own_pipeline_metrics(rows: pd.DataFrame) -> dict[str, float]:
    """Notebook 03's figures of :func:`own_pipeline_heldout`: utilization RMSLE (corrected and physics alone), its
    Spearman rank correlation, median absolute error in points, interval coverage, and the step time's median
    relative error (``STEP_METRIC_KEYS``' ``pipeline_own_*`` keys; empty without rows)."""
    from gpupred.learn.evaluation import interval_coverage, median_abs_error, median_rel_error, rmsle, spearman

    if rows.empty:
        return {}
    util, pred = rows["gpu_util"].to_numpy(float), rows["pred_gpu_util"].to_numpy(float)
    return {"pipeline_own_runs": float(len(rows)), "pipeline_own_gpu_util_rmsle": rmsle(util, pred),
            "pipeline_own_gpu_util_rmsle_physics": rmsle(util, rows["physics_gpu_util"].to_numpy(float)),
            "pipeline_own_gpu_util_spearman": spearman(util, pred),
            "pipeline_own_gpu_util_mae_points": median_abs_error(util, pred),
            "pipeline_own_gpu_util_coverage": interval_coverage(util, rows["pred_gpu_util_low"],
                                                                rows["pred_gpu_util_high"]),
            "pipeline_own_iter_time_mre": median_rel_error(rows["iter_time_mean_s"], rows["pred_iter_time_mean_s"])}


def source_figures(rows: pd.DataFrame) -> dict[str, Any]:
    """Utilization RMSLE (all rows and per family), step-time median relative error, and per-row hits of a held-out
    source's predictions (:func:`source_heldout`)."""
    from gpupred.learn.evaluation import median_rel_error, rmsle

    util, pred = rows["gpu_util"].to_numpy(float), rows["pred_gpu_util"].to_numpy(float)
    out: dict[str, Any] = {"runs": int(len(rows)), "gpu_util_rmsle": rmsle(util, pred),
                           "gpu_util_rmsle_by_family": {f: rmsle(g["gpu_util"], g["pred_gpu_util"])
                                                        for f, g in rows.groupby("family", sort=True)}}
    if "pred_iter_time_mean_s" in rows.columns:
        rel = rows["pred_iter_time_mean_s"] / rows["iter_time_mean_s"] - 1.0
        out["iter_time_mre"] = median_rel_error(rows["iter_time_mean_s"], rows["pred_iter_time_mean_s"])
        out["iter_time_rel_error_by_family"] = {f: float(np.nanmedian(g)) for f, g in rel.groupby(rows["family"])}
    return out


def pipeline_table(fed: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per family of a held-out source, utilization RMSLE and median step-time error of the step estimator without
    (``before``) and with (``after``) the jobs' input pipelines (:func:`source_heldout` of each)."""
    from gpupred.learn.evaluation import median_rel_error, rmsle

    parts = []
    for when, rows in fed.items():
        for family, g in rows.groupby("family", sort=True):
            parts.append({"family": family, "when": when, "runs": len(g),
                          "gpu_util_rmsle": rmsle(g["gpu_util"], g["pred_gpu_util"]),
                          "iter_time_mre": median_rel_error(g["iter_time_mean_s"], g["pred_iter_time_mean_s"])})
    return pd.DataFrame(parts).pivot_table(index="family", columns="when", values=["gpu_util_rmsle", "iter_time_mre"])


def pipeline_metrics(fed: dict[str, pd.DataFrame], source: str) -> dict[str, float]:
    """Notebook 03's pipeline figures of a held-out source: utilization RMSLE and median step-time error over all its
    runs and per family, without and with the input pipelines (``STEP_METRIC_KEYS``' ``pipeline_*`` keys)."""
    out: dict[str, float] = {}
    for when, rows in fed.items():
        fig = source_figures(rows)
        out[f"pipeline_{source}_gpu_util_rmsle_{when}"] = fig["gpu_util_rmsle"]
        out[f"pipeline_{source}_iter_time_mre_{when}"] = fig["iter_time_mre"]
        for family, value in fig["gpu_util_rmsle_by_family"].items():
            out[f"pipeline_{source}_{family}_gpu_util_rmsle_{when}"] = value
    return out


def plot_pipelines(fed: dict[str, pd.DataFrame], source: str) -> Any:
    """Measured against predicted utilization of a held-out source's runs, without and with their pipelines."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(fed), figsize=(5.5 * len(fed), 4.5), sharex=True, sharey=True)
    for ax, (when, rows) in zip(np.atleast_1d(axes), fed.items()):
        for family, g in rows.groupby("family", sort=True):
            ax.scatter(g["gpu_util"], g["pred_gpu_util"], s=18, label=family)
        ax.plot([0, 100], [0, 100], color="grey", lw=0.8)
        ax.set(title=f"{source}, held out: {'with' if when == 'after' else 'without'} input pipelines",
               xlabel="measured utilization (%)", ylabel="predicted utilization (%)", xlim=(0, 102), ylim=(0, 102))
    np.atleast_1d(axes)[-1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


# What notebook 03 writes of the step estimator (its contract is assembled in gpupred.contracts): its held-out
# figures on this project's runs, on pipeline-fed runs and on a held-out source, and the comparison it leads.
STEP_METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (r"pipeline_own_(runs|gpu_util_(rmsle|rmsle_physics|spearman|mae_points|coverage)|iter_time_mre)",
     "this project's own pipeline-fed runs (real DataLoaders on a lent GPU) predicted by the step estimator fitted on "
     "every other own run (no pipeline-fed run among them): utilization RMSLE (corrected; _physics: the timeline "
     "alone), Spearman, median absolute error in points, 90 % interval coverage, median relative step-time error "
     "(gpupred.step.evaluate.own_pipeline_metrics)"),
    (r"pipeline_\w+_(gpu_util_rmsle|iter_time_mre)_(before|after)",
     "a held-out source (never trained on) predicted by the step estimator fitted on this project's runs, without "
     "(before) and with (after) its jobs' input pipelines: utilization RMSLE and median relative step-time error, "
     "over all its runs and per family (gpupred.step.evaluate.pipeline_metrics)"),
    (r"(gpu_util|sm_active|iter_time)_(rmsle|mre)_(within|lofo|crossgpu)(_baseline)?",
     "the shipped estimators' held-out error on this project's runs (with _baseline: the regressor baseline's)"),
    (r"(gpu_util|sm_active|iter_time)_coverage_lofo", "their 90 % intervals' coverage, leave one family out"),
    (r"(gpu_util|sm_active|iter_time)_width_lofo",
     "their 90 % intervals' median width relative to the prediction, (high - low) / prediction, leave one family out"),
    (r"comparison_\w+",
     "every method on the comparison's splits (comparison_splits; gpupred.learn.summary.comparison_metrics)"),
    (r"step_constants|step_weighting", "the step model's constants fitted on every row; the correction's weighting"),
)
