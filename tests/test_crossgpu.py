"""Cross-GPU evaluation (gpupred.learn.crossgpu) on FIXTURE frames: split bookkeeping, figures, twin ratios."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fixtures_learning import fixture_dataset
from gpupred.hardware import gpu_spec
from gpupred.learn.crossgpu import cross_gpu_evaluation, transfer_splits, twin_gpu_pairs, twin_ratios
from gpupred.learn.nested import CVSettings

H100, A100, RTX = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 3090"
S_H100, S_A100, S_RTX = (gpu_spec(g).name for g in (H100, A100, RTX))  # the dataset's short ``gpu`` names


def _renamed(df: pd.DataFrame, suffix: str) -> pd.DataFrame:
    """The same FIXTURE rows under other workload ids (a GPU kind sharing no workload with the others)."""
    out = df.copy()
    out["workload_id"] = out["workload_id"] + suffix
    out["run_id"] = out["run_id"] + suffix
    return out


@pytest.fixture(scope="module")
def two_kinds() -> pd.DataFrame:
    """FIXTURE: every workload on an H100 and an RTX 3090 (each workload has a twin on the other kind)."""
    return fixture_dataset(gpus=(H100, RTX), n_batch_sizes=1)


def test_within_folds_cover_each_gpu_once_and_keep_to_it(two_kinds: pd.DataFrame) -> None:
    splits = transfer_splits(two_kinds, n_within=3)
    gpu = two_kinds["gpu"].to_numpy()
    for kind in sorted(set(gpu)):
        within = [s for s in splits if s.train_gpus == "within" and s.test_gpu == kind]
        assert len(within) == 3
        tested = np.concatenate([s.test for s in within])
        assert sorted(tested) == sorted(np.flatnonzero(gpu == kind))
        for s in within:
            assert set(gpu[s.train]) == {kind}
            assert not set(two_kinds["workload_id"].iloc[s.train]) & set(two_kinds["workload_id"].iloc[s.test])


def test_unseen_drops_twins_and_twins_keeps_them(two_kinds: pd.DataFrame) -> None:
    splits = {s.label: s for s in transfer_splits(two_kinds, n_within=3, min_workloads=1)}
    w = two_kinds["workload_id"].to_numpy()
    twins = splits[f"{S_H100}->{S_RTX} (twins)"]
    assert sorted(twins.train) == sorted(np.flatnonzero(two_kinds["gpu"] == S_H100))
    assert set(w[twins.train]) == set(w[twins.test])  # every workload is measured on both kinds here
    # every H100 workload has a twin on the RTX 3090, so nothing is left to train on without them: no unseen split
    assert f"{S_H100}->{S_RTX} (unseen)" not in splits and f"rest->{S_RTX} (twins)" not in splits


def test_three_kinds_add_rest_and_unseen_splits(two_kinds: pd.DataFrame) -> None:
    third = _renamed(fixture_dataset(gpus=(A100,), n_batch_sizes=1), "-a100only")
    df = pd.concat([two_kinds, third], ignore_index=True)
    splits = {s.label: s for s in transfer_splits(df, n_within=3)}
    assert {f"{S_A100}->{S_H100} (unseen)", f"{S_RTX}->{S_H100} (twins)", f"rest->{S_H100} (unseen)",
            f"rest->{S_H100} (twins)"} <= set(splits)
    rest = splits[f"rest->{S_H100} (unseen)"]
    assert set(df["gpu"].iloc[rest.train]) == {S_A100}  # the RTX 3090 rows are all twins of H100 ones
    assert len(splits[f"rest->{S_H100} (twins)"].train) == (df["gpu"] != S_H100).sum()


def test_a_kind_with_too_few_workloads_is_not_tested(two_kinds: pd.DataFrame) -> None:
    few = _renamed(fixture_dataset(gpus=(A100,), n_batch_sizes=1).head(4), "-few")
    splits = transfer_splits(pd.concat([two_kinds, few], ignore_index=True), n_within=3, min_workloads=6)
    assert S_A100 not in {s.test_gpu for s in splits} and S_A100 not in {s.train_gpus for s in splits}
    assert any(s.train_gpus == "rest" for s in splits)  # its rows still count in "rest"


def test_evaluation_table_on_fixture(two_kinds: pd.DataFrame) -> None:
    table, res = cross_gpu_evaluation(two_kinds, "gpu_util", ["ridge", "knn"], CVSettings(n_cal=3, n_jobs=1),
                                      n_within=3)
    assert res is not None
    assert set(zip(table["test_gpu"], table["train"], table["workloads"])) == {
        (S_H100, "within", "unseen"), (S_H100, S_RTX, "twins"), (S_RTX, "within", "unseen"), (S_RTX, S_H100, "twins")}
    per_gpu = two_kinds.groupby("gpu").size()
    assert (table["n_test"] == table["test_gpu"].map(per_gpu)).all()
    assert table["rmsle"].between(0, 5).all() and table["coverage"].between(0, 1).all()
    within = table[table["train"] == "within"].set_index("test_gpu")
    p = res.predictions[res.predictions["fold_label"].str.startswith(f"within {S_H100} ")]
    from gpupred.learn.evaluation import rmsle

    assert within.loc[S_H100, "rmsle"] == pytest.approx(rmsle(p["y"], p["pred"]))


def test_one_kind_gives_an_empty_table() -> None:
    one_kind = fixture_dataset(gpus=(H100,), n_batch_sizes=1)
    table, res = cross_gpu_evaluation(one_kind, "gpu_util", ["ridge"], CVSettings(n_jobs=1))
    assert res is None and table.empty and "rmsle" in table.columns


def _hand_frame() -> pd.DataFrame:
    """FIXTURE: two workloads of family f and one of g on kinds X and Y, one workload on X only."""
    rows = [("f.a", "f", "X", 50.0, 1000.0, 0.10), ("f.a", "f", "Y", 60.0, 1000.0, 0.09),
            ("f.b", "f", "X", 40.0, 2000.0, 0.20), ("f.b", "f", "Y", 60.0, 3000.0, 0.16),
            ("g.a", "g", "X", 80.0, 500.0, 0.05), ("g.a", "g", "Y", 40.0, 500.0, 0.10), ("g.x", "g", "X", 10.0, 100.0, 1.0)]
    columns = ["workload_id", "family", "gpu", "gpu_util", "memory_mib", "iter_time_mean_s"]
    return pd.DataFrame(rows, columns=columns).assign(sync="step")


def test_twin_ratios_by_hand() -> None:
    r = twin_ratios(_hand_frame(), "Y", "X").set_index("family")
    assert r.loc["f", "twins"] == 2 and r.loc["g", "twins"] == 1 and r.loc["all", "twins"] == 3
    assert r.loc["f", "gpu_util_ratio_median"] == pytest.approx((1.2 + 1.5) / 2)
    assert (r.loc["f", "gpu_util_ratio_min"], r.loc["f", "gpu_util_ratio_max"]) == (1.2, 1.5)
    assert r.loc["f", "memory_mib_ratio_median"] == pytest.approx(1.25)
    assert r.loc["g", "gpu_util_ratio_median"] == 0.5 and r.loc["all", "gpu_util_ratio_median"] == 1.2
    assert r.loc["f", "iter_time_mean_s_ratio_median"] == pytest.approx((0.9 + 0.8) / 2)
    assert r.loc["g", "iter_time_mean_s_ratio_median"] == pytest.approx(2.0)
    assert "sm_active_ratio_median" not in r.columns


def test_twins_need_the_same_sync_and_pairs_are_listed() -> None:
    df = _hand_frame()
    assert twin_gpu_pairs(df) == [("X", "Y", 3)]
    df.loc[df["gpu"] == "Y", "sync"] = "window"
    assert twin_ratios(df, "Y", "X").empty
