"""gpupred.colocation on FIXTURE raw trees (made-up numbers, never measurements)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures_coloc import GPU, all_pairs, fixture_predictions, fixture_solo, hidden_slowdown, write_raw_tree
from gpupred import colocation as co
from gpupred.errors import GpupredError


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    raw = tmp_path_factory.mktemp("fixture") / "data" / "raw"
    solo = fixture_solo(10)
    write_raw_tree(raw, solo, all_pairs(10), failed=[(0, 1)], partner_failed=[(2, 3)])
    return raw, solo


def test_join_slowdown_sums_and_failed(tree: tuple[Path, pd.DataFrame]) -> None:
    raw, solo = tree
    table, measured = co.load_colocation(raw)
    # solo utilization is the window mean (fixture samples read 0 % outside the window)
    m = measured.set_index("workload_id")
    np.testing.assert_allclose(m.loc[solo.workload_id, "gpu_util"], solo.gpu_util)
    np.testing.assert_allclose(m.loc[solo.workload_id, "mem_mib"], solo.mem_mib)
    np.testing.assert_allclose(m.loc[solo.workload_id, "sm_active"], solo.sm_active)
    ok = table[table.group_id == "pair001"].sort_values("member")  # workloads 0 and 1
    a, b = solo.iloc[0], solo.iloc[1]
    assert ok.slowdown.iloc[0] == pytest.approx(hidden_slowdown(a.gpu_util, b.gpu_util, a.sm_active, b.sm_active))
    assert ok.sum_util.iloc[0] == pytest.approx(a.gpu_util + b.gpu_util)
    assert ok.sum_mem_mib.iloc[1] == pytest.approx(a.mem_mib + b.mem_mib)
    assert ok.partners.iloc[0] == b.workload_id and ok.partners.iloc[1] == a.workload_id
    assert set(table.precision) == {"fp32", "bf16"}
    failed = co.failed_groups(table)
    assert list(failed.group_id) == ["fail000", "partner000"] and failed.statuses.iloc[0] == "oom;oom"
    assert table.loc[table.group_id == "fail000", "slowdown"].isna().all()
    assert not table.loc[~table.group_id.isin(["fail000", "partner000"]), "group_failed"].any()
    # a member whose partner failed measured a window, but never a co-located one: no slowdown from it
    part = table[table.group_id == "partner000"]
    assert part.group_failed.all() and part.slowdown.isna().all() and part.iter_time_coloc_s.notna().iloc[0]
    assert "partner000" in set(co.failed_groups(table).group_id)
    # the group's own device memory: peak over the window minus its pre-launch baseline (0 in the fixture)
    assert part.group_memory_mib.iloc[0] == pytest.approx(solo.mem_mib.iloc[2] + solo.mem_mib.iloc[3])


def test_refuses_simulated(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_raw_tree(raw, fixture_solo(2), [(0, 1)], simulated=True)
    with pytest.raises(GpupredError, match="simulated"):
        co.load_colocation(raw)


def test_missing_solo_leaves_slowdown_nan(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    solo = fixture_solo(3)
    write_raw_tree(raw, solo, [(0, 1)])
    table, measured = co.load_colocation(raw)
    table2 = co.colocation_table(
        pd.concat([pd.read_parquet(p) for p in sorted((raw / "fixture-gpu" / "fixture-coloc" / "runs").glob("pair*.parquet"))]).assign(sweep_dir=""),
        measured[measured.workload_id != solo.workload_id[1]],
    )
    assert table2.has_solo.tolist() == [True, False]
    assert np.isfinite(table2.slowdown.iloc[0]) and np.isnan(table2.slowdown.iloc[1])


def test_heldout_splits_never_leak(tree: tuple[Path, pd.DataFrame]) -> None:
    table, _ = co.load_colocation(tree[0])
    rows = table[np.isfinite(table.slowdown)].reset_index(drop=True)
    tested = 0
    for tr, te in co.heldout_splits(rows, n_splits=3, seed=4):
        train_w = set(rows.workload_id.iloc[tr])
        test = rows.iloc[te]
        assert not train_w & set(test.workload_id)
        assert not set(rows.group_id.iloc[tr]) & set(test.group_id)
        # whole groups only
        assert (test.groupby("group_id").size() == 2).all()
        tested += len(te)
    assert tested > 0


def test_model_beats_baseline_on_fixture(tree: tuple[Path, pd.DataFrame]) -> None:
    raw, solo = tree
    table, _ = co.load_colocation(raw)
    feats = co.predicted_features(solo, fixture_predictions(solo))
    metrics, preds = co.evaluate_heldout(table, feats, n_splits=2, seed=0)
    assert set(metrics) >= {"slowdown_spearman_heldout", "slowdown_mae_heldout", "baseline_slowdown_spearman_heldout",
                            "baseline_slowdown_mae_heldout"}
    assert (preds.predicted >= 1).all() and len(preds) == metrics["slowdown_heldout_jobs"]
    # the fixture's hidden slowdown is not additive in util; the model should do better than the baseline
    assert metrics["slowdown_mae_heldout"] < metrics["baseline_slowdown_mae_heldout"]


def test_pair_matrix_matches_predict(tree: tuple[Path, pd.DataFrame]) -> None:
    raw, solo = tree
    table, _ = co.load_colocation(raw)
    feats = co.predicted_features(solo, fixture_predictions(solo))
    model = co.SlowdownModel.fit(table, feats)
    mat = model.pair_matrix(feats)
    assert mat.shape == (10, 10) and (mat >= 1).all()
    rows = table[table.group_id == "pair001"].sort_values("member")
    got = model.predict(rows, feats)
    idx = {w: i for i, w in enumerate(feats.workload_id)}
    i, j = idx[rows.workload_id.iloc[0]], idx[rows.workload_id.iloc[1]]
    np.testing.assert_allclose(got, [mat[i, j], mat[j, i]], rtol=1e-9)


def test_missing_features_named(tree: tuple[Path, pd.DataFrame]) -> None:
    raw, solo = tree
    table, _ = co.load_colocation(raw)
    feats = co.predicted_features(solo, fixture_predictions(solo)).iloc[1:]
    with pytest.raises(GpupredError, match="no solo features for workload"):
        co.SlowdownModel.fit(table, feats)


def test_baseline() -> None:
    np.testing.assert_allclose(co.baseline_slowdown([50, 150, 230]), [1.0, 1.5, 2.3])
    assert GPU.startswith("FIXTURE")
