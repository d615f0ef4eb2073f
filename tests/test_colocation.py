"""gpupred.colocation on FIXTURE raw trees and FIXTURE Lucid-contract frames (made-up numbers, never measurements)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures_coloc import (
    GPU,
    all_pairs,
    fixture_lucid,
    fixture_predicted_features,
    fixture_solo,
    hidden_slowdown,
    write_raw_tree,
)
from scipy.stats import spearmanr

from gpupred.colocation.effects import job_effects, monotone_ceiling, partner_rows, self_pair_noise
from gpupred.colocation.members import align, baseline_slowdown, predicted_features, usable_groups
from gpupred.colocation.pairtable import (
    SOLO_COLUMNS, TABLE_COLUMNS, colocation_table, failed_groups, load_colocation, load_pair_sources, lucid_table,
    pair_slowdown_matrix,
)
from gpupred.slowdown.estimator import pair_frame
from gpupred.colocation import pairtable as co_table
from gpupred.errors import GpupredError
from gpupred.errors import MissingInput


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    raw = tmp_path_factory.mktemp("fixture") / "data" / "raw"
    solo = fixture_solo(10)
    write_raw_tree(raw, solo, all_pairs(10), failed=[(0, 1)], partner_failed=[(2, 3)])
    return raw, solo


@pytest.fixture(scope="module")
def lucid() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return fixture_lucid(30, seed=0)


def test_join_slowdown_sums_and_failed(tree: tuple[Path, pd.DataFrame]) -> None:
    raw, solo = tree
    table, measured = load_colocation(raw)
    # solo utilization is the window mean (fixture samples read 0 % outside the window)
    m = measured.set_index("workload_id")
    np.testing.assert_allclose(m.loc[solo.workload_id, "gpu_util"], solo.gpu_util)
    np.testing.assert_allclose(m.loc[solo.workload_id, "mem_mib"], solo.mem_mib)
    np.testing.assert_allclose(m.loc[solo.workload_id, "sm_active"], solo.sm_active)
    ok = table[table.group_id == "pair001"].sort_values("member")  # workloads 0 and 1
    a, b = solo.iloc[0], solo.iloc[1]
    assert ok.slowdown.iloc[0] == pytest.approx(hidden_slowdown(a.gpu_util, b.gpu_util, a.pressure, b.pressure))
    assert ok.sum_util.iloc[0] == pytest.approx(a.gpu_util + b.gpu_util)
    assert ok.sum_mem_mib.iloc[1] == pytest.approx(a.mem_mib + b.mem_mib)
    assert ok.partners.iloc[0] == b.workload_id and ok.partners.iloc[1] == a.workload_id
    assert set(table.precision) == {"fp32", "bf16"} and set(table.source) == {"gpupred"}
    assert (table.job_key == table.workload_id).all() and set(table.model_group) == {"mlp"}
    failed = failed_groups(table)
    assert list(failed.group_id) == ["fail000", "partner000"] and failed.statuses.iloc[0] == "oom;oom"
    assert table.loc[table.group_id == "fail000", "slowdown"].isna().all()
    assert not table.loc[~table.group_id.isin(["fail000", "partner000"]), "group_failed"].any()
    # a member whose partner failed measured a window, but never a co-located one: no slowdown from it
    part = table[table.group_id == "partner000"]
    assert part.group_failed.all() and part.slowdown.isna().all() and part.iter_time_coloc_s.notna().iloc[0]
    # the group's own device memory: peak over the window minus its pre-launch baseline (0 in the fixture)
    assert part.group_memory_mib.iloc[0] == pytest.approx(solo.mem_mib.iloc[2] + solo.mem_mib.iloc[3])


def test_refuses_simulated(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_raw_tree(raw, fixture_solo(2), [(0, 1)], simulated=True)
    with pytest.raises(GpupredError, match="simulated"):
        load_colocation(raw)


def test_missing_solo_leaves_slowdown_nan(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    solo = fixture_solo(3)
    write_raw_tree(raw, solo, [(0, 1)])
    _, measured = load_colocation(raw)
    runs = pd.concat([pd.read_parquet(p) for p in sorted((raw / "fixture-gpu" / "fixture-coloc" / "runs").glob("pair*.parquet"))])
    table2 = colocation_table(runs.assign(sweep_dir=""), measured[measured.workload_id != solo.workload_id[1]])
    assert table2.has_solo.tolist() == [True, False]
    assert np.isfinite(table2.slowdown.iloc[0]) and np.isnan(table2.slowdown.iloc[1])


def test_lucid_table_follows_the_contract(lucid: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> None:
    pairs, solo, _ = lucid
    bad = pairs.copy()
    bad.loc[bad.pair_id == 3, "speed_norm"] = 0.0  # a member that did not run
    table = lucid_table(bad, solo)
    assert list(table.columns) == list(TABLE_COLUMNS) and len(table) == len(pairs)
    first = table[table.group_id == "lucid-1"]  # jobs 0 and 1
    np.testing.assert_allclose(first.slowdown, pairs[pairs.pair_id == 1].slowdown)
    assert first.sum_util.iloc[0] == pytest.approx(solo.gpu_util[0] + solo.gpu_util[1])
    assert first.partners.tolist() == [solo.job_key[1], solo.job_key[0]]
    assert first.precision.tolist() == ["fp32", "fp16"] and (first.source == "lucid").all()
    failed = table[table.group_id == "lucid-3"]
    assert failed.group_failed.all() and failed.slowdown.isna().all() and "error" in set(failed.status)
    assert table.workload_id.isna().any()  # jobs not rebuilt keep no workload id


@pytest.mark.parametrize(("edit", "match"), [
    (lambda p, s: (p.drop(columns="speed_norm"), s), "Lucid pairs: missing columns \\['speed_norm'\\]"),
    (lambda p, s: (p, s.drop(columns="gmem_util")), "Lucid solo jobs: missing columns"),
    (lambda p, s: (p[p.job_key != s.job_key[0]].iloc[1:], s), "has 1 members"),
    (lambda p, s: (p, s[s.job_key != s.job_key[5]]), "has no solo run"),
])
def test_lucid_table_bad_frames_named(lucid, edit, match: str) -> None:
    pairs, solo, _ = lucid
    with pytest.raises(GpupredError, match=match) as err:
        lucid_table(*edit(pairs, solo))
    assert "\n" not in str(err.value)


def test_load_pair_sources_says_what_is_missing(tmp_path: Path, tree, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(co_table, "lucid_frames", lambda: "Lucid importer (gpupred.importers.lucid) not installed")
    with pytest.raises(MissingInput, match="no measured co-located pairs: no co-located runs under .*; Lucid importer") as err:
        load_pair_sources(tmp_path / "empty")
    assert "\n" not in str(err.value)
    table, solo, notes = load_pair_sources(tree[0])  # our own sweeps alone still work
    assert set(table.source) == {"gpupred"} and len(solo) == 10 and notes == ["Lucid importer (gpupred.importers.lucid) not installed"]


def test_load_pair_sources_joins_both(tree, lucid, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs, solo, _ = lucid
    monkeypatch.setattr(co_table, "lucid_frames", lambda: (pairs, solo))
    table, truth, notes = load_pair_sources(tree[0])
    assert set(table.source) == {"gpupred", "lucid"} and not notes
    assert set(truth.source) == {"gpupred", "lucid"} and list(truth.columns) == list(SOLO_COLUMNS)


def test_fixture_hides_its_generating_variable(lucid) -> None:
    """The slowdown is driven by a latent the model never gets; what it gets is noisy (unlike the old fixture)."""
    _, _, latent = lucid
    feats = fixture_predicted_features(latent[latent.workload_id.notna()], seed=1)
    assert "pressure" not in feats.columns
    lat = latent.set_index("workload_id").loc[feats.workload_id]
    for col in feats.select_dtypes("number").columns:
        rho = spearmanr(feats[col], lat["pressure"], nan_policy="omit").statistic
        assert not abs(rho) > 0.9, f"feature {col} nearly equals the latent that generates the slowdowns"
    assert abs(np.corrcoef(feats.gpu_util, lat.gpu_util)[0, 1]) < 0.999  # predicted, not measured, utilization


def test_failed_pairs_are_not_usable(tree: tuple[Path, pd.DataFrame]) -> None:
    raw, solo = tree
    table, _ = load_colocation(raw)
    member = align(table, fixture_predicted_features(solo))
    keep = usable_groups(table, member)
    assert not keep[table.group_id.isin(["fail000", "partner000"]).to_numpy()].any() and keep.sum() > 0
    X = pair_frame(table[keep], member[keep], ["gpu_util"])
    assert not set(X.group_id) & {"fail000", "partner000"} and np.isfinite(X.slowdown).all()


def test_predicted_features_from_oof() -> None:
    ds = pd.DataFrame({"run_id": ["r1", "r2", "r3"], "workload_id": ["w1", "w1", "w2"], "gpu_name": GPU,
                       "flops_train": [1.0, 1.0, 2.0], "arithmetic_intensity": [5.0, 5.0, 9.0]})
    oof = pd.DataFrame({"run_id": ["r1", "r2", "r3"], "workload_id": ["w1", "w1", "w2"], "gpu": "g", "source": "fixture",
                        "fold": [0, 0, 1], "gpu_util": [40.0, 60.0, 10.0], "gpu_util_low": 0.0, "gpu_util_high": 99.0,
                        "memory_mib": [100.0, 300.0, 5.0], "memory_mib_low": 1.0, "memory_mib_high": 900.0})
    f = predicted_features(ds, oof).set_index("workload_id")
    assert f.loc["w1", "gpu_util"] == 50.0 and f.loc["w1", "mem_mib"] == 200.0 and f.loc["w2", "mem_mib_high"] == 900.0
    assert f.loc["w2", "arithmetic_intensity"] == 9.0
    with pytest.raises(GpupredError, match="gpu_util and memory_mib"):
        predicted_features(ds, oof.drop(columns=["memory_mib"]))
    with pytest.raises(GpupredError, match="not in the dataset"):
        predicted_features(ds.iloc[:2], oof)


def test_pair_slowdown_matrix(lucid) -> None:
    pairs, solo, _ = lucid
    table = lucid_table(pairs[pairs.pair_id.isin([1, 2])], solo)  # (0, 1) and (0, 2)
    keys = solo.job_key[:4].tolist()
    mat = pair_slowdown_matrix(table, keys)
    s = pairs.set_index(["pair_id", "member"]).slowdown
    assert mat[0, 1] == pytest.approx(s[1, 0]) and mat[1, 0] == pytest.approx(s[1, 1]) and mat[2, 0] == pytest.approx(s[2, 1])
    assert np.isnan(mat[0, 3]) and np.isnan(mat[1, 2]) and np.isfinite(mat).sum() == 4


def test_baseline() -> None:
    np.testing.assert_allclose(baseline_slowdown([50, 150, 230]), [1.0, 1.5, 2.3])
    assert GPU.startswith("FIXTURE")


# --- job effects: the additive ceiling, the monotone ceiling and the self-pair noise ------------------------


def additive_pairs(n: int = 12, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """FIXTURE pairs whose log slowdown is exactly c + sensitivity(own) + aggressiveness(partner), both linear in two
    made-up member features; returns (table, aligned member features, per-job truth)."""
    rng = np.random.default_rng(seed)
    jobs = pd.DataFrame({"job_key": [f"fixture-j{k}" for k in range(n)], "f1": rng.uniform(0, 1, n),
                         "f2": rng.uniform(0, 1, n), "model_group": [f"g{k % 4}" for k in range(n)]})
    jobs["sens"], jobs["aggr"] = 0.3 * jobs.f1 - 0.1 * jobs.f2, 0.2 * jobs.f2 + 0.05 * jobs.f1
    rows = []
    for pid, (a, b) in enumerate(all_pairs(n)):
        for own, other in ((a, b), (b, a)):
            rows.append({"group_id": f"p{pid}", "job_key": jobs.job_key[own], "model_group": jobs.model_group[own],
                         "slowdown": float(np.exp(0.1 + jobs.sens[own] + jobs.aggr[other]))})
    table = pd.DataFrame(rows)
    member = table[["job_key"]].merge(jobs[["job_key", "f1", "f2"]], on="job_key", how="left")
    return table, member, jobs


def test_job_effects_recover_a_planted_additive_truth() -> None:
    table, _, jobs = additive_pairs()
    effects, fit = job_effects(table, alpha=1e-6)
    assert fit["r2"] > 0.999 and fit["spearman"] > 0.99 and 0 < fit["r2_own"] < 1
    e = effects.merge(jobs, on="job_key")
    assert spearmanr(e.sensitivity, e.sens).statistic > 0.99 and spearmanr(e.aggressiveness, e.aggr).statistic > 0.99
    assert (e.pairs == len(jobs) + 1).all()  # every other job once, itself twice (both rows of its self-pair)
    with pytest.raises(GpupredError, match="pairs"):
        job_effects(pd.concat([table, table.iloc[:1]]))


def monotone_pairs(n: int = 10, seed: int = 1) -> tuple[pd.DataFrame, np.ndarray]:
    """FIXTURE pairs (self-pairs included) whose log slowdown is exactly a sum of two increasing functions of a made-up
    per-job utilization: own util cubed and partner util squared; returns (table, aligned utilization)."""
    util = np.random.default_rng(seed).uniform(5, 100, n)
    rows = []
    for pid, (a, b) in enumerate(all_pairs(n)):
        for own, other in ((a, b), (b, a)):
            rows.append({"group_id": f"p{pid}", "job_key": f"fixture-j{own}", "util": util[own],
                         "slowdown": float(np.exp(0.2 * (util[own] / 100) ** 3 + 0.3 * (util[other] / 100) ** 2))})
    table = pd.DataFrame(rows)
    return table, table["util"].to_numpy()


def test_monotone_ceiling_reaches_a_monotone_truth_and_not_a_reversed_one() -> None:
    table, util = monotone_pairs()
    fit = monotone_ceiling(table, util)
    assert fit["spearman"] > 0.99 and fit["r2"] > 0.99
    falling = monotone_ceiling(table.assign(slowdown=1.0 / table["slowdown"]), util)  # falls with both utils
    assert falling["r2"] < 0.05 and falling["spearman"] == 0.0  # nothing monotone to fit: a constant
    with pytest.raises(GpupredError, match="utilizations"):
        monotone_ceiling(table, util[:-1])


def test_self_pair_noise_reads_the_two_members_of_a_job_with_itself() -> None:
    table, _ = monotone_pairs(6)
    keys = table["job_key"].to_numpy()
    partner = keys[partner_rows(table)]
    selfish = keys == partner
    bump = np.where(selfish & (np.arange(len(table)) % 2 == 0), np.exp(0.1), 1.0)  # first member of each self-pair +0.1
    noise = self_pair_noise(table.assign(slowdown=table["slowdown"] * bump))
    assert noise["pairs"] == 6 and noise["both_faster"] == 0  # monotone_pairs' slowdowns are all above 1
    assert noise["noise_sd"] == pytest.approx(0.0)  # the same +0.1 in every self-pair: no spread, so no noise
    bump[np.flatnonzero(selfish)[:2]] = [np.exp(0.3), 1.0]
    assert self_pair_noise(table.assign(slowdown=table["slowdown"] * bump))["noise_sd"] > 0.05
    faster = np.where(selfish, 0.9, 1.0)  # every self-pair's two members ran 10 % faster than alone
    assert self_pair_noise(table.assign(slowdown=faster))["both_faster"] == 6
    with pytest.raises(GpupredError, match="itself"):
        self_pair_noise(table[~selfish].reset_index(drop=True))
