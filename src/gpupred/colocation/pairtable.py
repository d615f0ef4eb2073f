"""Measured co-located pairs, from every source, in one table (one row per member of a group).

Definitions (per job of a co-located group, same GPU kind):

- ``slowdown`` = 1 / normalized co-located speed, i.e. co-located mean iteration time over solo mean
  iteration time of the same workload on the same GPU kind. This project's own sweeps
  (``data/raw``): from the members' and their solo runs' iteration times, for members whose status is
  ``ok``. Lucid's published pairs (``gpupred.importers.lucid``): ``1 / speed_norm`` as the importer
  gives it (values slightly below 1 are measurement noise and are kept);
- ``solo_util`` / ``solo_mem_mib``: the member's *measured* solo utilization (mean NVML ``gpu_util``
  over its solo window) and memory; ``sum_util`` / ``sum_mem_mib``: their sums over the group;
- a group *failed* when any member's status is not ``ok``: the profiler then stops the whole group
  (the failed member keeps its own status, the others are ``partner_failed``), and no member of a
  failed group has a slowdown -- a survivor's window would not have been co-located;
- ``group_memory_mib``: the group's device memory as a whole (own sweeps: peak over its windows minus
  the pre-launch baseline; Lucid: the pair's combined reading).

Columns: :data:`TABLE_COLUMNS`. The per-job solo truth (measured solo utilization, memory...) is a
second table, :data:`SOLO_COLUMNS`, keyed by ``job_key`` and ``gpu_name``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpupred.dataset import SOURCE_OWN
from gpupred.errors import GpupredError
from gpupred.workloads.spec import spec_or_none

TABLE_COLUMNS: tuple[str, ...] = (
    "group_id", "group_size", "member", "source", "workload_id", "job_key", "model_group", "gpu_name", "precision",
    "status", "partners", "iter_time_coloc_s", "iter_time_solo_s", "slowdown", "solo_util", "solo_mem_mib",
    "sum_util", "sum_mem_mib", "has_solo", "group_failed", "group_memory_mib",
)
SOLO_COLUMNS: tuple[str, ...] = (
    "job_key", "workload_id", "source", "model_group", "gpu_name", "gpu_util", "mem_mib", "sm_active", "gmem_util",
    "iter_time_s", "speed",
)
# The contract of gpupred.importers.lucid (issue 13): columns of read_pairs() and read_solo().
LUCID_PAIR_COLUMNS: tuple[str, ...] = (
    "pair_id", "member", "job_key", "workload_id", "model", "dataset", "batch_size", "amp", "speed_norm", "slowdown",
    "pair_gpu_util", "pair_gmem_util", "pair_memory_mib", "gpu_name",
)
LUCID_SOLO_COLUMNS: tuple[str, ...] = (
    "job_key", "model", "dataset", "batch_size", "amp", "workload_id", "speed", "gpu_util", "gmem_util", "memory_mib",
    "gpu_name",
)


def refuse_simulated(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs, or a GpupredError naming the sweep if any row is simulated (--dry-run output)."""
    if len(runs) and runs["simulated"].astype(bool).any():
        sweep = runs.loc[runs["simulated"].astype(bool), "sweep_dir"].iloc[0] if "sweep_dir" in runs else "?"
        raise GpupredError(f"{sweep}: simulated (--dry-run) runs are not measurements; move them to data/dryrun")
    return runs


def _precision(workload_id: str) -> str:
    spec = spec_or_none(workload_id)
    return spec.precision if spec else "bf16" if "-bf16-" in workload_id else "fp32"


def _family(workload_id: str) -> str:
    spec = spec_or_none(workload_id)
    return spec.family if spec else workload_id.split(".")[0]


# --- this project's own sweeps (data/raw) -----------------------------------------------------------


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
    from gpupred.profile.labels import memory_labels_of

    w = window_means(solo, samples)
    s = solo.merge(w, on="group_id", how="left")
    labels = memory_labels_of(solo, samples)
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


def _group_sums(co: pd.DataFrame) -> pd.DataFrame:
    """Fill group_failed, slowdown masking, sums and partners of a per-member frame (grouped by group_id)."""
    grp = co.groupby("group_id")
    co["group_failed"] = grp["status"].transform(lambda s: bool((s != "ok").any()))
    co["sum_util"] = grp["solo_util"].transform(lambda s: s.sum(min_count=len(s)))
    co["sum_mem_mib"] = grp["solo_mem_mib"].transform(lambda s: s.sum(min_count=len(s)))
    co["group_size"] = grp["member"].transform("count")
    keys = grp["job_key"].agg(list)
    pos = grp.cumcount().to_numpy()
    co["partners"] = [";".join(str(w) for k, w in enumerate(keys[g]) if k != p) for g, p in zip(co["group_id"], pos)]
    return co


def colocation_table(runs: pd.DataFrame, solo: pd.DataFrame, group_memory: pd.Series | None = None) -> pd.DataFrame:
    """One row per member of every co-located group of our own sweeps, joined to its solo run (same GPU kind).

    ``group_memory`` (group_id -> MiB, from :func:`gpupred.profile.labels.group_device_memory_mib`) fills
    ``group_memory_mib``; NaN without it.
    """
    refuse_simulated(runs)
    co = runs[runs["group_size"] > 1].sort_values(["group_id", "member"]).copy()
    if co.empty:
        return pd.DataFrame(columns=list(TABLE_COLUMNS))
    co = co.merge(solo[["workload_id", "gpu_name", "iter_time_s", "gpu_util", "mem_mib"]], on=["workload_id", "gpu_name"], how="left")
    co = co.rename(columns={"iter_time_mean_s": "iter_time_coloc_s", "iter_time_s": "iter_time_solo_s",
                            "gpu_util": "solo_util", "mem_mib": "solo_mem_mib"})
    co["has_solo"] = co["iter_time_solo_s"].notna()
    co["source"] = SOURCE_OWN
    co["job_key"] = co["workload_id"]
    co["model_group"] = co["workload_id"].map(_family)
    co["precision"] = co["workload_id"].map(_precision)
    co = _group_sums(co)
    ok = (co["status"] == "ok") & co["has_solo"] & ~co["group_failed"]
    co["slowdown"] = np.where(ok, co["iter_time_coloc_s"] / co["iter_time_solo_s"], np.nan)
    co["group_memory_mib"] = co["group_id"].map(group_memory) if group_memory is not None else np.nan
    return co[list(TABLE_COLUMNS)].sort_values(["group_id", "member"]).reset_index(drop=True)


def failed_groups(table: pd.DataFrame) -> pd.DataFrame:
    """One row per co-located group that failed (any member not ok): GPU, workloads, statuses, summed memory."""
    f = table[table["group_failed"].astype(bool)]
    return f.groupby("group_id", as_index=False).agg(
        gpu_name=("gpu_name", "first"), workloads=("job_key", ";".join), statuses=("status", ";".join),
        sum_mem_mib=("sum_mem_mib", "first"),
    )


def load_colocation(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(co-location table, solo measurements) from every sweep under ``root`` (real runs only)."""
    from gpupred.profile.labels import group_device_memory_mib
    from gpupred.profile.schema import read_runs, read_samples

    runs = refuse_simulated(read_runs(root))
    solo = solo_measurements(runs, read_solo_samples(runs))
    co = runs[runs["group_size"] > 1]
    memory = [group_device_memory_mib(g, read_samples(Path(sweep), sorted(g["group_id"].unique())))
              for sweep, g in co.groupby("sweep_dir")]
    group_memory = pd.concat(memory) if memory else None
    return colocation_table(runs, solo, group_memory), solo


def own_solo_truth(solo: pd.DataFrame) -> pd.DataFrame:
    """The solo truth table (:data:`SOLO_COLUMNS`) of our own sweeps' solo measurements."""
    out = pd.DataFrame({
        "job_key": solo["workload_id"], "workload_id": solo["workload_id"], "source": SOURCE_OWN,
        "model_group": solo["workload_id"].map(_family), "gpu_name": solo["gpu_name"], "gpu_util": solo["gpu_util"],
        "mem_mib": solo["mem_mib"], "sm_active": solo["sm_active"], "gmem_util": np.nan,
        "iter_time_s": solo["iter_time_s"], "speed": np.nan,
    })
    return out[list(SOLO_COLUMNS)].reset_index(drop=True)


# --- Lucid's published pairs (through gpupred.importers.lucid) ----------------------------------------


def _check_columns(df: pd.DataFrame, need: tuple[str, ...], source: str) -> None:
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise GpupredError(f"{source}: missing columns {missing} of the gpupred.importers.lucid contract")


def lucid_solo_truth(solo: pd.DataFrame) -> pd.DataFrame:
    """The solo truth table (:data:`SOLO_COLUMNS`) of Lucid's solo jobs (``read_solo()``)."""
    _check_columns(solo, LUCID_SOLO_COLUMNS, "Lucid solo jobs")
    if solo["job_key"].duplicated().any():
        raise GpupredError(f"Lucid solo jobs: duplicate job_key {solo.loc[solo['job_key'].duplicated(), 'job_key'].iloc[0]!r}")
    out = pd.DataFrame({
        "job_key": solo["job_key"], "workload_id": solo["workload_id"], "source": "lucid", "model_group": solo["model"],
        "gpu_name": solo["gpu_name"], "gpu_util": solo["gpu_util"].astype(float),
        "mem_mib": solo["memory_mib"].astype(float), "sm_active": np.nan, "gmem_util": solo["gmem_util"].astype(float),
        "iter_time_s": np.nan, "speed": solo["speed"].astype(float),
    })
    return out[list(SOLO_COLUMNS)].reset_index(drop=True)


def lucid_table(pairs: pd.DataFrame, solo: pd.DataFrame) -> pd.DataFrame:
    """The co-location table (:data:`TABLE_COLUMNS`) of Lucid's measured pairs (``read_pairs()``, ``read_solo()``)."""
    _check_columns(pairs, LUCID_PAIR_COLUMNS, "Lucid pairs")
    truth = lucid_solo_truth(solo).set_index("job_key")
    unknown = sorted(set(pairs["job_key"]) - set(truth.index))
    if unknown:
        raise GpupredError(f"Lucid pairs: job {unknown[0]!r} has no solo run in read_solo() ({len(unknown)} such jobs)")
    sizes = pairs.groupby("pair_id")["member"].count()
    if (sizes != 2).any():
        raise GpupredError(f"Lucid pairs: pair {sizes.index[int(np.argmax(sizes.to_numpy() != 2))]!r} has "
                           f"{int(sizes[sizes != 2].iloc[0])} members; expected 2 rows per pair")
    co = pairs.sort_values(["pair_id", "member"]).reset_index(drop=True).copy()
    speed = co["speed_norm"].astype(float)
    co["group_id"] = "lucid-" + co["pair_id"].astype(str)
    co["source"] = "lucid"
    co["model_group"] = co["model"]
    co["precision"] = np.where(co["amp"].astype(int) == 1, "fp16", "fp32")
    co["status"] = np.where(np.isfinite(speed) & (speed > 0), "ok", "error")
    co["iter_time_coloc_s"] = np.nan
    co["iter_time_solo_s"] = np.nan
    co["solo_util"] = co["job_key"].map(truth["gpu_util"])
    co["solo_mem_mib"] = co["job_key"].map(truth["mem_mib"])
    co["has_solo"] = True
    co["group_memory_mib"] = co["pair_memory_mib"].astype(float)
    co = _group_sums(co)
    co["slowdown"] = np.where((co["status"] == "ok") & ~co["group_failed"], co["slowdown"].astype(float), np.nan)
    return co[list(TABLE_COLUMNS)].reset_index(drop=True)


def lucid_frames() -> tuple[pd.DataFrame, pd.DataFrame] | str:
    """(pairs, solo) from gpupred.importers.lucid, or one line saying why they are not there."""
    from gpupred.errors import MissingInput

    from gpupred.importers import lucid

    try:
        return lucid.read_pairs(), lucid.read_solo()
    except MissingInput as err:
        return str(err)


def load_pair_sources(raw: Path | None = None, lucid: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(co-location table, solo truth, notes) over our own sweeps under ``raw`` and Lucid's imported pairs.

    Raises MissingInput (one line, saying what is missing) when no source holds a measured pair.
    """
    from gpupred import config
    from gpupred.errors import MissingInput

    raw = Path(raw) if raw is not None else config.RAW
    tables, solos, notes = [], [], []
    own, own_solo = load_colocation(raw)
    if len(own):
        tables.append(own)
        solos.append(own_solo_truth(own_solo))
    else:
        notes.append(f"no co-located runs under {raw}")
    if lucid:
        frames = lucid_frames()
        if isinstance(frames, str):
            notes.append(frames)
        else:
            tables.append(lucid_table(*frames))
            solos.append(lucid_solo_truth(frames[1]))
    if not tables:
        raise MissingInput("no measured co-located pairs: " + "; ".join(notes))
    table = pd.concat(tables, ignore_index=True)
    solo = pd.concat(solos, ignore_index=True) if solos else pd.DataFrame(columns=list(SOLO_COLUMNS))
    return table, solo, notes


def pair_slowdown_matrix(table: pd.DataFrame, keys: list[str], key: str = "job_key") -> np.ndarray:
    """Measured slowdown of ``keys[i]`` sharing a GPU with ``keys[j]`` (mean over repeats); NaN where never measured.

    Only pairs (groups of two) that did not fail count; larger groups say nothing about one partner.
    """
    index = {k: i for i, k in enumerate(keys)}
    t = table[(table["group_size"] == 2) & ~table["group_failed"].astype(bool)]
    t = t[np.isfinite(t["slowdown"].astype(float))]
    t = t[t.groupby("group_id")["member"].transform("count") == 2].sort_values(["group_id", "member"])
    own = t[key].to_numpy()
    partner = own.reshape(-1, 2)[:, ::-1].ravel()
    pairs = pd.DataFrame({"a": own, "b": partner, "s": t["slowdown"].to_numpy(float)})
    pairs = pairs[pairs["a"].isin(index) & pairs["b"].isin(index)]
    mean = pairs.groupby(["a", "b"], as_index=False)["s"].mean()
    out = np.full((len(keys), len(keys)), np.nan)
    out[mean["a"].map(index).to_numpy(int), mean["b"].map(index).to_numpy(int)] = mean["s"].to_numpy()
    return out


def source_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per source and GPU kind: groups, failed groups, members with a measured slowdown, its median and range."""
    rows = []
    for (source, gpu), t in table.groupby(["source", "gpu_name"], sort=True):
        s = t["slowdown"].astype(float)
        rows.append({"source": source, "gpu_name": gpu, "groups": t["group_id"].nunique(),
                     "failed_groups": t.loc[t["group_failed"].astype(bool), "group_id"].nunique(),
                     "measured_members": int(np.isfinite(s).sum()), "slowdown_median": s.median(),
                     "slowdown_min": s.min(), "slowdown_max": s.max()})
    return pd.DataFrame(rows)


def log_slowdown(table: pd.DataFrame) -> np.ndarray:
    """The log of each row's ``slowdown``, floored at 1e-3 (NaN where unmeasured): what every slowdown model fits."""
    return np.log(np.maximum(table["slowdown"].to_numpy(float), 1e-3))
