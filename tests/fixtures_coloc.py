"""FIXTURE builders for the co-location and simulator tests. Every number here is made up for tests.

Nothing built here is a measurement: GPU names or sweep ids say FIXTURE / fixture, and the tables carry
``attrs["fixture"] = True``. No row of any published data set appears here.

The fixtures' slowdowns come from :func:`hidden_slowdown`, driven by a *latent* memory pressure ``p``
that is never a column handed to a model: models only see noisy predicted utilization and memory and a
noisy graph proxy of ``p`` (``arithmetic_intensity``), so a model can beat the additive baseline only
by learning from what a scheduler would have.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA, SCHEMA_VERSION, unit_paths

GPU = "FIXTURE-GPU (not a measurement)"
LUCID_GPU = "FIXTURE-3090 (not a measurement)"
SWEEP = "fixture-coloc"


def workload_ids(n: int) -> list[str]:
    """``n`` valid MLP workload ids (fixture workloads), half fp32 half bf16."""
    out = []
    for k in range(n):
        prec = "bf16" if k % 2 else "fp32"
        out.append(f"mlp.mlp-w{256 * (k + 1)}-d{2 + k % 3}-bs{32 * (1 + k % 4)}-in784-{prec}-sgd")
    return out


def fixture_solo(n: int = 10, seed: int = 0, ids: list[str] | None = None, gpu: str = GPU) -> pd.DataFrame:
    """Made-up solo attributes per fixture workload; ``pressure`` is the latent that drives slowdowns."""
    rng = np.random.default_rng(seed)
    util = rng.uniform(20, 95, n)
    pressure = rng.uniform(0, 1, n)
    solo = pd.DataFrame({
        "workload_id": ids if ids is not None else workload_ids(n),
        "gpu_name": gpu,
        "gpu_util": util,
        "sm_active": util * rng.uniform(0.4, 0.9, n),
        "mem_mib": rng.uniform(1_000, 10_000, n),
        "iter_time_s": rng.uniform(0.02, 0.2, n),
        "flops_train": rng.uniform(1e9, 1e12, n),
        "arithmetic_intensity": 200.0 * np.exp(-2.5 * pressure + rng.normal(0, 0.5, n)),  # a noisy proxy
        "pressure": pressure,  # LATENT: never handed to a model
    })
    solo.attrs["fixture"] = True
    return solo


def hidden_slowdown(u_own: float, u_other: float, p_own: float, p_other: float) -> float:
    """The fixtures' made-up ground truth: a memory-pressure product plus a little over-100 % utilization."""
    return 1.0 + 0.6 * p_own * p_other + 0.2 * max(0.0, (u_own + u_other - 100.0) / 100.0)


def _run_row(group_id: str, member: int, size: int, wid: str, status: str, iter_time: float, mem: float, gpu: str) -> dict:
    row = {name: None for name in RUN_SCHEMA.names}
    row.update(
        schema_version=SCHEMA_VERSION, run_id=group_id if size == 1 else f"{group_id}.m{member}", group_id=group_id,
        group_size=size, member=member, sweep_id=SWEEP, workload_id=wid, family="mlp", spec_json="{}", status=status,
        message="" if status == "ok" else "fixture failure", simulated=False, host_batches=False, gpu_name=gpu,
        gpu_uuid="GPU-fixture", gpu_sm_count=1, gpu_memory_total_mib=24_000.0, driver_version="fixture",
        cuda_version="fixture", torch_version="fixture", gpupred_version="fixture", host="fixture",
        started_at="2000-01-01T00:00:00Z", warmup_s=1.0, warmup_iters=5, window_start_s=1.0, window_end_s=11.0,
        n_iters=10, iter_times_s=[iter_time] * 10, iter_time_mean_s=iter_time, iter_time_median_s=iter_time,
        samples_per_s=1.0, torch_peak_allocated_mib=mem * 0.8, torch_peak_reserved_mib=mem, sampler_interval_ms=100.0,
        buffered_supported=False, gpm_supported=True, sync="step", mem_baseline_mib=0.0, cuda_context_mib=float("nan"),
        memory_reserved_mib=float("nan"),
    )
    return row


def _write(sweep: Path, group_id: str, rows: list[dict], samples: pd.DataFrame) -> None:
    runs_path, samples_path = unit_paths(sweep, group_id)
    runs_path.parent.mkdir(parents=True, exist_ok=True)
    samples_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(samples, schema=SAMPLE_SCHEMA, preserve_index=False), samples_path)
    pq.write_table(pa.Table.from_pylist(rows, schema=RUN_SCHEMA), runs_path)


def _samples(group_id: str, util: float, sm: float, mem: float) -> pd.DataFrame:
    t = np.arange(0.0, 12.0, 0.5)
    # outside the window [1, 11] the fixture reads 0 % so window filtering matters
    u = np.where((t >= 1.0) & (t <= 11.0), util, 0.0)
    frames = [
        pd.DataFrame({"t_s": t, "metric": "gpu_util", "value": u, "source": "poll"}),
        pd.DataFrame({"t_s": t, "metric": "sm_active", "value": np.where(u > 0, sm, 0.0), "source": "gpm"}),
        pd.DataFrame({"t_s": t, "metric": "mem_used_mib", "value": np.where(u > 0, mem, 100.0), "source": "poll"}),
    ]
    s = pd.concat(frames, ignore_index=True)
    s["group_id"] = group_id
    s["member"] = -1
    return s[SAMPLE_SCHEMA.names]


def write_raw_tree(raw: Path, solo: pd.DataFrame, pairs: list[tuple[int, int]], failed: list[tuple[int, int]] = (),
                   simulated: bool = False, partner_failed: list[tuple[int, int]] = ()) -> Path:
    """A FIXTURE sweep under ``raw``: each workload's solo run, co-located pairs slowed by :func:`hidden_slowdown`.

    ``failed`` pairs: both members oom. ``partner_failed`` pairs: the second member oom after the first had
    measured a window (its row keeps an iteration time, as the profiler writes it, status partner_failed).
    """
    sweep = raw / "fixture-gpu" / SWEEP
    gpu = str(solo["gpu_name"].iloc[0])
    for k, r in solo.iterrows():
        gid = f"solo{k:03d}"
        row = _run_row(gid, 0, 1, r.workload_id, "ok", r.iter_time_s, r.mem_mib, gpu)
        row["simulated"] = simulated
        _write(sweep, gid, [row], _samples(gid, r.gpu_util, r.sm_active, r.mem_mib))
    for n, (a, b) in enumerate(pairs):
        gid = f"pair{n:03d}"
        ra, rb = solo.iloc[a], solo.iloc[b]
        rows = []
        for m, (own, other) in enumerate(((ra, rb), (rb, ra))):
            s = hidden_slowdown(own.gpu_util, other.gpu_util, own.pressure, other.pressure)
            rows.append(_run_row(gid, m, 2, own.workload_id, "ok", own.iter_time_s * s, own.mem_mib, gpu))
        _write(sweep, gid, rows, _samples(gid, min(100.0, ra.gpu_util + rb.gpu_util), 50.0, ra.mem_mib + rb.mem_mib))
    for n, (a, b) in enumerate(failed):
        gid = f"fail{n:03d}"
        rows = [_run_row(gid, m, 2, solo.iloc[i].workload_id, "oom", float("nan"), solo.iloc[i].mem_mib, gpu)
                for m, i in enumerate((a, b))]
        _write(sweep, gid, rows, _samples(gid, 0.0, 0.0, 100.0))
    for n, (a, b) in enumerate(partner_failed):
        gid = f"partner{n:03d}"
        ra, rb = solo.iloc[a], solo.iloc[b]
        rows = [_run_row(gid, 0, 2, ra.workload_id, "partner_failed", ra.iter_time_s * 1.01, ra.mem_mib, gpu),
                _run_row(gid, 1, 2, rb.workload_id, "oom", float("nan"), rb.mem_mib, gpu)]
        _write(sweep, gid, rows, _samples(gid, 50.0, 25.0, ra.mem_mib + rb.mem_mib))
    return sweep


def all_pairs(n: int) -> list[tuple[int, int]]:
    """Every unordered pair of ``n`` workloads (including a workload with itself)."""
    return [(a, b) for a in range(n) for b in range(a, n)]


def fixture_predicted_features(solo: pd.DataFrame, seed: int = 1, util_sd: float = 4.0) -> pd.DataFrame:
    """Made-up out-of-fold predictions per workload (colocation.predicted_features columns): noisy, no latent."""
    rng = np.random.default_rng(seed)
    n = len(solo)
    util = np.clip(solo["gpu_util"].to_numpy() + rng.normal(0, util_sd, n), 0, 100)
    mem = solo["mem_mib"].to_numpy() * rng.uniform(0.9, 1.1, n)
    p = pd.DataFrame({
        "workload_id": solo["workload_id"].to_numpy(), "gpu_name": solo["gpu_name"].to_numpy(), "gpu_util": util,
        "gpu_util_low": np.clip(util - 10, 0, 100), "gpu_util_high": np.clip(util + 10, 0, 100),
        "sm_active": np.clip(solo["sm_active"].to_numpy() + rng.normal(0, 4, n), 0, 100),
        "sm_active_low": np.nan, "sm_active_high": np.nan,
        "mem_mib": mem, "mem_mib_low": mem * 0.8, "mem_mib_high": mem * 1.2,
        "flops_train": solo["flops_train"].to_numpy(), "arithmetic_intensity": solo["arithmetic_intensity"].to_numpy(),
    })
    p.attrs["fixture"] = True
    return p


def fixture_lucid(n: int = 16, seed: int = 0, pairs: list[tuple[int, int]] | None = None,
                  noise: float = 0.02) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """FIXTURE frames in the gpupred.importers.lucid contract: (read_pairs(), read_solo(), the latent solo table).

    Made-up jobs ``FIXTURE-m<k>/fixture/bs32/amp0`` on :data:`LUCID_GPU`; every fifth job has no workload id
    (not rebuilt); slowdowns from :func:`hidden_slowdown` with multiplicative noise.
    """
    latent = fixture_solo(n, seed, ids=[f"fixture.job{k:02d}" for k in range(n)], gpu=LUCID_GPU)
    keys = [f"FIXTURE-m{k % 5}/fixture/bs{32 * (1 + k // 5)}/amp{k % 2}" for k in range(n)]
    wids = [None if k % 5 == 4 else w for k, w in enumerate(latent["workload_id"])]
    latent["workload_id"] = wids
    solo = pd.DataFrame({
        "job_key": keys, "model": [f"FIXTURE-m{k % 5}" for k in range(n)], "dataset": "fixture",
        "batch_size": [32 * (1 + k // 5) for k in range(n)], "amp": [k % 2 for k in range(n)], "workload_id": wids,
        "speed": latent["iter_time_s"].rdiv(1.0).to_numpy(), "gpu_util": latent["gpu_util"].to_numpy(),
        # measured memory-controller activity tracks the latent: only the simulator's truth side reads it
        "gmem_util": 20.0 + 60.0 * latent["pressure"].to_numpy(), "memory_mib": latent["mem_mib"].to_numpy(),
        "gpu_name": LUCID_GPU,
    })
    rng = np.random.default_rng(seed + 7)
    rows = []
    for pid, (a, b) in enumerate(pairs if pairs is not None else all_pairs(n)):
        for m, (own, other) in enumerate(((a, b), (b, a))):
            s = hidden_slowdown(latent.gpu_util[own], latent.gpu_util[other], latent.pressure[own], latent.pressure[other])
            s *= float(np.exp(rng.normal(0, noise)))
            rows.append({"pair_id": pid, "member": m, "job_key": keys[own], "workload_id": wids[own],
                         "model": solo.model[own], "dataset": "fixture", "batch_size": solo.batch_size[own],
                         "amp": solo.amp[own], "speed_norm": 1.0 / s, "slowdown": s, "pair_gpu_util": 50.0,
                         "pair_gmem_util": 40.0, "pair_memory_mib": solo.memory_mib[a] + solo.memory_mib[b],
                         "gpu_name": LUCID_GPU})
    pairs_df = pd.DataFrame(rows)
    for df in (pairs_df, solo, latent):
        df.attrs["fixture"] = True
    return pairs_df, solo, latent


def fixture_workload_table(n: int = 6, seed: int = 0) -> pd.DataFrame:
    """A FIXTURE per-workload table for the simulator (gpupred.sim.arrivals.WORKLOAD_COLUMNS)."""
    s = fixture_solo(n, seed)
    p = fixture_predicted_features(s, seed + 1)
    t = pd.DataFrame({
        "workload_id": s["workload_id"], "iter_time_s": s["iter_time_s"], "true_util": s["gpu_util"],
        "true_mem_mib": s["mem_mib"], "pred_util": p["gpu_util"], "pred_util_high": p["gpu_util_high"],
        "pred_mem_mib": p["mem_mib"], "pred_mem_mib_high": p["mem_mib_high"],
    })
    t.attrs["fixture"] = True
    return t


def write_notebook_tree(root: Path, pairs: bool = True, stale_oof: bool = False, n: int = 10) -> list[str]:
    """A FIXTURE GPUPRED_ROOT for notebooks 06/07: raw co-located sweep, dataset and its out-of-fold predictions.

    The dataset is :func:`fixtures_learning.fixture_dataset` (made up); ``n`` of its workloads also get FIXTURE
    solo and co-located runs under ``data/raw`` on the dataset's GPU name. ``stale_oof`` writes predictions
    computed from another dataset (labels shifted), which readers must refuse. Returns the co-located ids.
    """
    from fixtures_learning import fixture_dataset

    from gpupred.dataset import load_dataset
    from gpupred.learn.oof import write_oof_predictions

    processed = root / "data" / "processed"
    processed.mkdir(parents=True, exist_ok=True)
    fixture_dataset().to_parquet(processed / "dataset.parquet", index=False)
    ds = load_dataset(processed / "dataset.parquet")
    ids = sorted(ds["workload_id"].unique())[:: max(1, ds["workload_id"].nunique() // n)][:n]
    solo = fixture_solo(n, seed=3, ids=ids, gpu=str(ds["gpu_name"].iloc[0]))
    write_raw_tree(root / "data" / "raw", solo, all_pairs(n) if pairs else [], failed=[(0, 1)] if pairs else [])
    rng = np.random.default_rng(5)
    util = ds["workload_id"].map(solo.set_index("workload_id")["gpu_util"]).fillna(ds["gpu_util"]).to_numpy()
    util = np.clip(util + rng.normal(0, 4, len(ds)), 0, 100)
    mem = ds["workload_id"].map(solo.set_index("workload_id")["mem_mib"]).fillna(ds["memory_mib"]).to_numpy()
    mem = mem * rng.uniform(0.9, 1.1, len(ds))
    oof = pd.DataFrame({"run_id": ds["run_id"], "workload_id": ds["workload_id"], "gpu": ds["gpu"], "source": "gpupred",
                        "fold": np.arange(len(ds)) % 5, "gpu_util": util, "gpu_util_low": np.clip(util - 12, 0, 100),
                        "gpu_util_high": np.clip(util + 12, 0, 100), "memory_mib": mem, "memory_mib_low": mem * 0.8,
                        "memory_mib_high": mem * 1.25})
    source = ds.assign(gpu_util=ds["gpu_util"] + 1.0) if stale_oof else ds
    write_oof_predictions(oof, source, processed / "oof_predictions.parquet")
    return ids
