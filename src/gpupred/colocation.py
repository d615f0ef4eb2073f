"""Co-location: join co-located runs to their members' solo runs, and learn each job's slowdown.

Definitions (per job of a co-located group, same GPU kind):

- ``slowdown`` = co-located mean iteration time / solo mean iteration time of the same workload id on the
  same GPU kind (mean over repeated solo runs), for members whose status is ``ok``;
- ``sum_util`` / ``sum_mem_mib``: the group's summed solo utilization (mean NVML ``gpu_util``, polled,
  over each solo run's measured window) and summed solo memory (each solo run's memory label, see
  :mod:`gpupred.profile.labels`, else ``torch_peak_reserved_mib``);
- a group *failed* when any member's status is not ``ok``: the profiler then stops the whole group
  (the failed member keeps its own status, the others are ``partner_failed``), and no member of a
  failed group has a slowdown — a survivor's window would not have been co-located;
- ``group_memory_mib``: the group's device memory, peak over its windows minus the pre-launch
  baseline (the only memory figure of a group as a whole; members' own figures are in their rows).

The slowdown model predicts each job's slowdown from all members' solo features *as the predictor gives
them before running* (a per-workload feature frame: predicted util / SM activity / memory plus graph
features), with symmetric group features (own, others' sum and max, group sum and max, own x others),
by gradient boosting on log slowdown. It is compared with the baseline ``max(1, sum_util / 100)`` on
groups whose workloads were all held out of training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError

BASE_FEATURES: tuple[str, ...] = ("gpu_util", "sm_active", "mem_mib", "flops_train", "arithmetic_intensity")
_PRODUCT = ("gpu_util", "sm_active")  # own x others' sum: the interference terms


def refuse_simulated(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs, or a GpupredError naming the sweep if any row is simulated (--dry-run output)."""
    if len(runs) and runs["simulated"].astype(bool).any():
        sweep = runs.loc[runs["simulated"].astype(bool), "sweep_dir"].iloc[0] if "sweep_dir" in runs else "?"
        raise GpupredError(f"{sweep}: simulated (--dry-run) runs are not measurements; move them to data/dryrun")
    return runs


def _precision(workload_id: str) -> str:
    from gpupred.workloads.spec import WorkloadSpec

    try:
        return WorkloadSpec.from_id(workload_id).precision
    except GpupredError:
        return "bf16" if "-bf16-" in workload_id else "fp32"


def window_means(runs: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per run unit: mean polled gpu_util and sm_active, peak mem_used_mib, within its measured window."""
    win = runs[["group_id", "window_start_s", "window_end_s"]].drop_duplicates("group_id")
    s = samples[(samples["member"] == -1) & samples["metric"].isin(["gpu_util", "sm_active", "mem_used_mib"])]
    s = s[(s["source"] == "poll") | (s["metric"] == "sm_active")]
    s = s.merge(win, on="group_id")
    s = s[(s["t_s"] >= s["window_start_s"]) & (s["t_s"] <= s["window_end_s"])]
    mean = s[s["metric"] != "mem_used_mib"].pivot_table(index="group_id", columns="metric", values="value", aggfunc="mean")
    peak = s[s["metric"] == "mem_used_mib"].groupby("group_id")["value"].max().rename("mem_used_mib")
    out = pd.DataFrame(index=win["group_id"]).join(mean).join(peak)
    for c in ("gpu_util", "sm_active", "mem_used_mib"):
        if c not in out:
            out[c] = np.nan
    return out.reset_index()


def solo_measurements(runs: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload_id, gpu_name) of ok solo runs: iter_time_s, gpu_util, sm_active, mem_mib, n_runs."""
    refuse_simulated(runs)
    solo = runs[(runs["group_size"] == 1) & (runs["status"] == "ok")]
    cols = ["workload_id", "gpu_name", "iter_time_s", "gpu_util", "sm_active", "mem_mib", "n_runs"]
    if solo.empty:
        return pd.DataFrame(columns=cols)
    from gpupred.profile.labels import memory_label

    w = window_means(solo, samples)
    s = solo.merge(w, on="group_id", how="left")
    labels = [memory_label(run, samples) for _, run in solo.iterrows()]
    s["mem_mib"] = [m if not why else np.nan for m, _, why in labels]
    s["mem_mib"] = s["mem_mib"].fillna(s["torch_peak_reserved_mib"])
    g = s.groupby(["workload_id", "gpu_name"], as_index=False).agg(
        iter_time_s=("iter_time_mean_s", "mean"), gpu_util=("gpu_util", "mean"), sm_active=("sm_active", "mean"),
        mem_mib=("mem_mib", "mean"), n_runs=("run_id", "count"),
    )
    return g[cols]


def read_solo_samples(runs: pd.DataFrame) -> pd.DataFrame:
    """The samples of every ok solo run in ``runs`` (read from each run's sweep folder)."""
    from gpupred.profile.schema import SAMPLE_SCHEMA, read_samples

    solo = runs[(runs["group_size"] == 1) & (runs["status"] == "ok")]
    frames = [read_samples(Path(sweep), sorted(g["group_id"].unique())) for sweep, g in solo.groupby("sweep_dir")]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SAMPLE_SCHEMA.names)


def colocation_table(runs: pd.DataFrame, solo: pd.DataFrame, group_memory: pd.Series | None = None) -> pd.DataFrame:
    """One row per member of every co-located group, joined to its solo run (same workload, same GPU kind).

    ``group_memory`` (group_id -> MiB, from :func:`gpupred.profile.labels.group_device_memory_mib`) fills
    ``group_memory_mib``; NaN without it.
    """
    refuse_simulated(runs)
    co = runs[runs["group_size"] > 1].sort_values(["group_id", "member"]).copy()
    cols = ["group_id", "group_size", "member", "workload_id", "gpu_name", "precision", "status", "partners",
            "iter_time_coloc_s", "iter_time_solo_s", "slowdown", "solo_util", "solo_mem_mib", "sum_util",
            "sum_mem_mib", "has_solo", "group_failed", "group_memory_mib"]
    if co.empty:
        return pd.DataFrame(columns=cols)
    co = co.merge(solo[["workload_id", "gpu_name", "iter_time_s", "gpu_util", "mem_mib"]], on=["workload_id", "gpu_name"], how="left")
    co = co.rename(columns={"iter_time_mean_s": "iter_time_coloc_s", "iter_time_s": "iter_time_solo_s",
                            "gpu_util": "solo_util", "mem_mib": "solo_mem_mib"})
    co["has_solo"] = co["iter_time_solo_s"].notna()
    grp = co.groupby("group_id")
    co["group_failed"] = grp["status"].transform(lambda s: bool((s != "ok").any()))
    ok = (co["status"] == "ok") & co["has_solo"] & ~co["group_failed"]
    co["slowdown"] = np.where(ok, co["iter_time_coloc_s"] / co["iter_time_solo_s"], np.nan)
    co["sum_util"] = grp["solo_util"].transform(lambda s: s.sum(min_count=len(s)))
    co["sum_mem_mib"] = grp["solo_mem_mib"].transform(lambda s: s.sum(min_count=len(s)))
    co["group_memory_mib"] = co["group_id"].map(group_memory) if group_memory is not None else np.nan
    ids = grp["workload_id"].agg(list)
    pos = grp.cumcount().to_numpy()
    co["partners"] = [";".join(w for k, w in enumerate(ids[g]) if k != p) for g, p in zip(co["group_id"], pos)]
    co["precision"] = co["workload_id"].map(_precision)
    return co[cols].sort_values(["group_id", "member"]).reset_index(drop=True)


def failed_groups(table: pd.DataFrame) -> pd.DataFrame:
    """One row per co-located group that failed (any member not ok): GPU, workloads, statuses, summed memory."""
    f = table[table["group_failed"].astype(bool)]
    return f.groupby("group_id", as_index=False).agg(
        gpu_name=("gpu_name", "first"), workloads=("workload_id", ";".join), statuses=("status", ";".join),
        sum_mem_mib=("sum_mem_mib", "first"),
    )


def load_colocation(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(co-location table, solo measurements) from every sweep under ``root`` (real runs only)."""
    from gpupred.profile.schema import read_runs

    from gpupred.profile.labels import group_device_memory_mib
    from gpupred.profile.schema import read_samples

    runs = refuse_simulated(read_runs(root))
    solo = solo_measurements(runs, read_solo_samples(runs))
    co = runs[runs["group_size"] > 1]
    memory = [group_device_memory_mib(g, read_samples(Path(sweep), sorted(g["group_id"].unique())))
              for sweep, g in co.groupby("sweep_dir")]
    group_memory = pd.concat(memory) if memory else None
    return colocation_table(runs, solo, group_memory), solo


def baseline_slowdown(sum_util: np.ndarray | pd.Series) -> np.ndarray:
    """The additive baseline: ``max(1, summed solo utilization / 100)``."""
    return np.maximum(1.0, np.asarray(sum_util, dtype=float) / 100.0)


# --- the learned model ---------------------------------------------------------------------------------


def predicted_features(dataset: pd.DataFrame, predictions: pd.DataFrame) -> pd.DataFrame:
    """Per (workload_id, gpu_name): the predictor's util / SM activity / memory plus graph features from the dataset."""
    keys = ["workload_id", "gpu_name"]
    graph = [c for c in ("flops_train", "arithmetic_intensity") if c in dataset.columns]
    g = dataset[keys + graph].groupby(keys, as_index=False).first()
    p = predictions.rename(columns={"memory_mib": "mem_mib"})
    pcols = [c for c in ("gpu_util", "sm_active", "mem_mib") if c in p.columns]
    if "gpu_util" not in pcols or "mem_mib" not in pcols:
        raise GpupredError("predictions need gpu_util and memory_mib columns (gpupred.predictor output)")
    pk = [k for k in keys if k in p.columns]
    p = p[pk + pcols].groupby(pk, as_index=False).mean()
    return g.merge(p, on=pk, how="inner")


def _group_frame(table: pd.DataFrame, features: pd.DataFrame, base: list[str]) -> pd.DataFrame:
    """Each member's own base features, keyed like the table (group_id, member)."""
    keys = ["workload_id", "gpu_name"]
    f = features[keys + base].drop_duplicates(keys)
    m = table[["group_id", "member", *keys]].merge(f, on=keys, how="left")
    if m[base].isna().all(axis=1).any():
        wid = m.loc[m[base].isna().all(axis=1), "workload_id"].iloc[0]
        raise GpupredError(f"no solo features for workload {wid!r}; the feature frame must cover every co-located workload")
    return m


def _derive(own: np.ndarray, osum: np.ndarray, omax: np.ndarray, n_others: np.ndarray, base: list[str]) -> pd.DataFrame:
    """Symmetric group features from own, others' sum and others' max (arrays: rows x base)."""
    cols: dict[str, np.ndarray] = {"n_others": n_others.astype(float)}
    for k, name in enumerate(base):
        o, s, mx = own[:, k], osum[:, k], omax[:, k]
        cols[f"own_{name}"] = o
        cols[f"others_{name}"] = s
        cols[f"others_max_{name}"] = mx
        cols[f"sum_{name}"] = o + s
        cols[f"max_{name}"] = np.fmax(o, mx)
        if name in _PRODUCT:
            cols[f"prod_{name}"] = o * s
    if "gpu_util" in base:
        cols["over_100"] = np.maximum(0.0, cols["sum_gpu_util"] - 100.0)
    return pd.DataFrame(cols)


def group_features(table: pd.DataFrame, features: pd.DataFrame, base: list[str] | None = None) -> pd.DataFrame:
    """Model inputs for each row of a co-location table (same order), from the per-workload feature frame."""
    base = list(base or [c for c in BASE_FEATURES if c in features.columns])
    m = _group_frame(table, features, base)
    vals = m[base].to_numpy(float)
    n = m.groupby("group_id")["member"].transform("count").to_numpy()
    osum = np.zeros_like(vals)
    omax = np.full_like(vals, np.nan)
    for idx in m.groupby("group_id").indices.values():  # others' sum and max per member (groups are tiny)
        block = vals[idx]
        for r, i in enumerate(idx):
            others = np.delete(block, r, axis=0)
            if len(others):
                osum[i] = np.nansum(others, axis=0) if len(others) > 1 else others[0]
                omax[i] = np.nanmax(others, axis=0) if len(others) > 1 else others[0]
    return _derive(vals, osum, omax, n - 1, base)


@dataclass
class SlowdownModel:
    """A gradient-boosted model of log slowdown from symmetric group features."""

    base: list[str]
    columns: list[str]
    model: Any = field(repr=False)

    @classmethod
    def fit(cls, table: pd.DataFrame, features: pd.DataFrame, base: list[str] | None = None, seed: int = 0,
            **params: Any) -> "SlowdownModel":
        """Train on the rows of ``table`` with a finite slowdown."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        rows = table[np.isfinite(table["slowdown"].astype(float))]
        if len(rows) < 4:
            raise GpupredError(f"only {len(rows)} co-located jobs with a measured slowdown; need at least 4 to fit")
        base = list(base or [c for c in BASE_FEATURES if c in features.columns])
        x = group_features(rows, features, base)
        y = np.log(np.maximum(rows["slowdown"].to_numpy(float), 1e-3))
        settings = dict(max_iter=200, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=max(2, min(20, len(rows) // 10)),
                        l2_regularization=1.0, random_state=seed)
        settings.update(params)
        model = HistGradientBoostingRegressor(**settings).fit(x, y)
        return cls(base, list(x.columns), model)

    def predict(self, table: pd.DataFrame, features: pd.DataFrame) -> np.ndarray:
        """Predicted slowdown (>= 1) for each row of a co-location table."""
        x = group_features(table, features, self.base)[self.columns]
        return np.maximum(1.0, np.exp(self.model.predict(x)))

    def pair_matrix(self, features: pd.DataFrame) -> np.ndarray:
        """Slowdown of workload i sharing a GPU with workload j, for every pair of the frame's rows (in order)."""
        v = features[self.base].to_numpy(float)
        w = len(v)
        own = np.repeat(v, w, axis=0)
        other = np.tile(v, (w, 1))
        x = _derive(own, other, other, np.ones(w * w), self.base)[self.columns]
        return np.maximum(1.0, np.exp(self.model.predict(x))).reshape(w, w)


def _workload_folds(workloads: np.ndarray, n_splits: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    w = np.array(sorted(set(workloads)))
    rng.shuffle(w)
    return {wid: k % n_splits for k, wid in enumerate(w)}


def heldout_splits(table: pd.DataFrame, n_splits: int = 3, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Group-aware folds: (train rows, test rows); a test group's workloads appear in no training group."""
    fold = _workload_folds(table["workload_id"].to_numpy(), n_splits, seed)
    f = table["workload_id"].map(fold)
    gmin = f.groupby(table["group_id"]).transform("min")
    gmax = f.groupby(table["group_id"]).transform("max")
    has = table["group_id"].map({g: set(s) for g, s in f.groupby(table["group_id"])})
    out = []
    for k in range(n_splits):
        test = ((gmin == k) & (gmax == k)).to_numpy()
        train = (~has.map(lambda s, k=k: k in s)).to_numpy()
        out.append((np.flatnonzero(train), np.flatnonzero(test)))
    return out


def evaluate_heldout(table: pd.DataFrame, features: pd.DataFrame, n_splits: int = 3, seed: int = 0,
                     **params: Any) -> tuple[dict[str, float], pd.DataFrame]:
    """Spearman and MAE of the model and the baseline on held-out-workload groups; and the per-job predictions."""
    from scipy.stats import spearmanr

    rows = table[np.isfinite(table["slowdown"].astype(float)) & np.isfinite(table["sum_util"].astype(float))]
    rows = rows.reset_index(drop=True)
    preds = []
    for k, (tr, te) in enumerate(heldout_splits(rows, n_splits, seed)):
        if len(te) == 0 or len(tr) < 4:
            continue
        train, test = rows.iloc[tr], rows.iloc[te]
        assert not set(train["workload_id"]) & set(test["workload_id"]), "held-out workload leaked into training"
        model = SlowdownModel.fit(train, features, seed=seed, **params)
        preds.append(test.assign(fold=k, predicted=model.predict(test, features), baseline=baseline_slowdown(test["sum_util"])))
    if not preds:
        raise GpupredError(f"no held-out fold has both training and test groups ({len(rows)} jobs); need more co-located runs")
    p = pd.concat(preds, ignore_index=True)

    def rho(a: pd.Series, b: pd.Series) -> float:
        return float(spearmanr(a, b).statistic) if len(a) > 2 and a.nunique() > 1 and b.nunique() > 1 else float("nan")

    metrics = {
        "slowdown_spearman_heldout": rho(p["slowdown"], p["predicted"]),
        "slowdown_mae_heldout": float(np.mean(np.abs(p["slowdown"] - p["predicted"]))),
        "baseline_slowdown_spearman_heldout": rho(p["slowdown"], p["baseline"]),
        "baseline_slowdown_mae_heldout": float(np.mean(np.abs(p["slowdown"] - p["baseline"]))),
        "slowdown_heldout_jobs": int(len(p)),
    }
    return metrics, p
