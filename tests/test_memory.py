"""Memory estimates on FIXTURE frames (toy formula, never data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError
from gpupred.memory.evaluate import METHODS, OLD_METHODS, evaluate_memory, summarize_memory
from gpupred.memory.baselines import MemoryModel, analytical_bytes, horus_mib


def test_analytical_by_hand() -> None:
    row = pd.DataFrame([{"param_bytes": 400.0, "params": 100.0, "activation_bytes": 1000.0, "precision": "bf16",
                         "optimizer": "adam"}])
    # weights 400 + grads 400 + adam 2x400 + autocast's 16-bit weight copies 200 + activations (already sized
    # for bf16 by gpupred.graph)
    assert analytical_bytes(row)[0] == 400 + 400 + 800 + 200 + 1000
    row["precision"] = "fp16"
    assert analytical_bytes(row)[0] == 400 + 400 + 800 + 200 + 1000
    row["optimizer"], row["precision"] = "sgd", "fp32"
    assert analytical_bytes(row)[0] == 400 + 400 + 400 + 1000
    assert horus_mib(row)[0] == pytest.approx((400 + 1000) / 2**20)
    with pytest.raises(GpupredError, match="param_bytes"):
        analytical_bytes(row.drop(columns=["param_bytes"]))


def test_memory_model_fits_overhead_and_residual() -> None:
    df = fixture_dataset(n_batch_sizes=2)
    model = MemoryModel(residual_model="ridge").fit(df)
    assert 400 < model.overhead_["H100 SXM"] < 700  # the fixture formula's 520 MiB constant
    est = model.predict(df)
    assert list(est.columns) == list(OLD_METHODS)
    rel = np.abs(est["analytical"] - df["memory_mib"]) / df["memory_mib"]
    assert np.median(rel) < 0.05


def test_evaluate_memory_table() -> None:
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=2,
                         sources={"NVIDIA GeForce RTX 3090": "lucid"})
    errors = evaluate_memory(df, n_folds=2)
    table = summarize_memory(errors)
    assert set(errors["method"]) == set(METHODS) and set(errors["source"]) == {"gpupred", "lucid"}
    assert ("median", "lofo") in table.columns and ("p90", "grouped_random") in table.columns
    assert table.loc["analytical", ("median", "grouped_random")] < table.loc["horus", ("median", "grouped_random")]
    by = summarize_memory(errors, by_source=True)
    assert ("analytical+residual", "lucid") in by.index and by[("n", "grouped_random")].sum() == len(METHODS) * len(df)
    # every run is estimated exactly once per scheme, by a model that did not see its workload
    assert errors[errors["method"] == "horus"].groupby("scheme")["run_id"].nunique().to_dict() == {
        "grouped_random": len(df), "lofo": len(df)}


def test_memory_metrics_keys() -> None:
    from gpupred.memory.estimator import MemoryEstimator
    from gpupred.memory.evaluate import memory_metrics

    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=2,
                         sources={"NVIDIA GeForce RTX 3090": "lucid"})
    errors = evaluate_memory(df, schemes=("lofo",), n_folds=2, residual_model="ridge")
    metrics = memory_metrics(errors, MemoryEstimator().fit(df), headline_scheme="lofo")
    own = errors[(errors["source"] == "gpupred") & (errors["method"] == "footprint*correction")]
    median = own["rel_err"].median()
    assert metrics["memory_footprint_times_correction_lofo_own_median_rel_err"] == pytest.approx(median)
    assert metrics["memory_footprint_times_correction_lofo_own_coverage"] == pytest.approx(own["covered"].mean())
    assert set(metrics["memory_footprint_constants"]) == {"H100 SXM|gpupred", "RTX 3090|lucid"}
    assert errors.loc[errors["method"] != "footprint*correction", "covered"].isna().all()


def test_torch_figures_are_scored_on_own_runs_with_a_torch_peak() -> None:
    """A FIXTURE errors frame (hand-made rows, not an evaluation): only the best method's own rows with a measured
    peak are scored, and the 16-bit figures keep the 16-bit runs alone."""
    from gpupred.memory.evaluate import BEST, torch_figure_metrics

    rows = pd.DataFrame({
        "scheme": "lofo", "method": [BEST] * 5 + ["footprint"], "source": ["gpupred"] * 4 + ["lucid", "gpupred"],
        "precision": ["bf16", "bf16", "fp32", "fp32", "bf16", "bf16"],
        "allocated_mib": [110.0, 95.0, 50.0, 100.0, 1.0, 1.0],
        "allocated_measured_mib": [100.0, 100.0, 100.0, np.nan, 100.0, 100.0],
        "reserved_mib": 100.0, "reserved_measured_mib": 100.0})
    m = torch_figure_metrics(rows)
    assert m["memory_torch_allocated_lofo_own_rows"] == 3 and m["memory_torch_allocated_lofo_16bit_own_rows"] == 2
    assert m["memory_torch_allocated_lofo_own_median_rel_err"] == pytest.approx(0.1)
    assert m["memory_torch_allocated_lofo_16bit_own_median_rel_err"] == pytest.approx(0.075)
    assert m["memory_torch_reserved_lofo_own_p90_rel_err"] == 0.0


TWO_GPUS = {"gpus": ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), "n_batch_sizes": 2,
            "sources": {"NVIDIA GeForce RTX 3090": "lucid"}}


def test_one_optimizer_table() -> None:
    import gpupred.memory.baselines as baselines
    from gpupred.memory.physics import OPTIMIZER_STATES

    assert not hasattr(baselines, "OPTIMIZER_STATES")  # one table: gpupred.memory.physics's
    df = fixture_dataset(n_batch_sizes=1).head(2).assign(optimizer=["adamw", "sgd_nomomentum"], precision="fp32")
    p, act = df["param_bytes"].to_numpy(float), df["activation_bytes"].to_numpy(float)
    expected = p * (2.0 + np.array([OPTIMIZER_STATES["adamw"], OPTIMIZER_STATES["sgd_nomomentum"]])) + act
    np.testing.assert_allclose(analytical_bytes(df), expected)


def test_halfwidths_take_the_one_conformal_rule() -> None:
    from gpupred.learn.conformal import conformal_quantile
    from gpupred.memory.correction import COVERAGE, lofo_halfwidths

    rng = np.random.default_rng(0)
    res = np.concatenate([rng.normal(0, 0.1, 40), rng.normal(0, 0.3, 25), [np.nan] * 3, rng.normal(0, 1, 5)])
    src = np.array(["a"] * 40 + ["b"] * 28 + ["c"] * 5)
    out = lofo_halfwidths(res, src)
    assert set(out) == {"a", "b"}  # c has fewer than 10 residuals
    assert out["a"] == conformal_quantile(res[:40], 1 - COVERAGE)
    assert out["b"] == conformal_quantile(res[40:65], 1 - COVERAGE)  # NaN (not held out) rows left out


def test_selection_score_weighs_sources_equally() -> None:
    from gpupred.memory.correction import selection_score

    res = np.array([0.1] * 90 + [0.5] * 10 + [np.nan])
    src = np.array(["big"] * 90 + ["small"] * 10 + ["big"])
    assert selection_score(res, src) == pytest.approx(0.3)


def test_inner_residuals_never_see_the_held_out_family() -> None:
    """A row's inner prediction (log measured - residual) does not move when its own family's labels do."""
    from gpupred.memory.correction import CORRECTION_GRID, inner_lofo_residuals

    df = fixture_dataset(**TWO_GPUS).reset_index(drop=True)
    grid = CORRECTION_GRID[:3] + CORRECTION_GRID[-3:]
    res, seen = inner_lofo_residuals(df, grid)
    fam = df["family"] == df["family"].iloc[0]
    moved = df.assign(memory_mib=np.where(fam, df["memory_mib"] * 3.0, df["memory_mib"]))
    res2, _ = inner_lofo_residuals(moved, grid)
    logy, logy2 = np.log(df["memory_mib"].to_numpy()), np.log(moved["memory_mib"].to_numpy())
    np.testing.assert_allclose((logy - res)[:, fam], (logy2 - res2)[:, fam], rtol=1e-9)
    assert seen.all() and np.isfinite(res).all()
    assert not np.allclose(res2[:, ~fam], res[:, ~fam])  # other families' fits did see the moved labels


def test_nested_selection_and_every_baseline_use_training_rows_only() -> None:
    """Every method's outer prediction of a held-out family is unchanged when that family's labels change: the
    constant, the regressor, the footprint's constants, the correction's setting and its calibration all come
    from the training rows (FIXTURE)."""
    from gpupred.memory.evaluate import COMPARISON_METHODS
    from gpupred.learn.nested import CVSettings
    from gpupred.memory.evaluate import compare_memory

    df = fixture_dataset(**TWO_GPUS)
    fam = df["family"] == "resnet"
    moved = df.assign(memory_mib=np.where(fam, df["memory_mib"] * 5.0, df["memory_mib"]))
    cv = CVSettings(n_cal=3, n_jobs=1)
    a = compare_memory(df, cv, n_within=2, schemes=("lofo",))["lofo"]
    b = compare_memory(moved, cv, n_within=2, schemes=("lofo",))["lofo"]
    assert set(a) == set(COMPARISON_METHODS) == {"constant", "regressor", "physics", "physics+correction"}
    for method in a:
        pa, pb = a[method].predictions, b[method].predictions
        held = pa["family"] == "resnet"
        assert held.sum() == fam.sum() and (pa["run_id"] == pb["run_id"]).all()
        np.testing.assert_allclose(pa.loc[held, ["pred", "low", "high"]], pb.loc[held, ["pred", "low", "high"]])
        assert not np.allclose(pa.loc[~held, "pred"], pb.loc[~held, "pred"]) or method == "physics"


def test_compare_memory_schemes_and_constant_baseline() -> None:
    from gpupred.learn.nested import CVSettings
    from gpupred.learn.summary import comparison_table
    from gpupred.memory.evaluate import compare_memory

    df = fixture_dataset(**TWO_GPUS)
    res = compare_memory(df, CVSettings(n_cal=3, n_jobs=1), n_within=2)
    assert set(res) == {"within", "lofo"}  # every FIXTURE workload runs on both GPUs: no unseen cross-GPU split
    within = res["within"]["constant"].predictions
    for (gpu, fold), part in within.groupby(["gpu", "fold"]):  # the constant is the training rows' mean of log1p
        train = df[(df["gpu"] == gpu) & ~df["run_id"].isin(part["run_id"])]
        assert part["pred"].nunique() == 1
        assert part["pred"].iloc[0] == pytest.approx(np.expm1(np.log1p(train["memory_mib"]).mean()))
    table = comparison_table({"memory_mib": res})
    assert table.groupby("scheme")["n"].sum().to_dict() == {"leave one family out": 4 * len(df),
                                                           "within GPU (grouped)": 4 * len(df)}
    best = table[(table["method"] == "physics+correction")]
    assert (best["coverage"] >= 0.8).all() and (best["median_rel_err"] < 0.1).all()


def test_selection_keeps_a_correction_that_carries_to_unseen_families() -> None:
    """The FIXTURE formula has no autocast weight copies, so the footprint over-counts bf16 jobs by the same factor in
    every family: a correction learned on the other families carries, and the inner selection keeps one."""
    from gpupred.memory.correction import CORRECTION_GRID
    from gpupred.memory.estimator import MemoryEstimator

    model = MemoryEstimator().fit(fixture_dataset(**TWO_GPUS))
    off = min(v for s, v in model.selection_.items() if s.clip == 0)
    assert len(model.selection_) == len(CORRECTION_GRID) and model.setting_.clip > 0
    assert model.selection_[model.setting_] < off
    card = model.describe()
    assert card["correction_clip_log"] == model.setting_.clip and "15 settings" in card["correction_selection"]
    assert set(card["interval_halfwidth_log"]) == {"gpupred", "lucid"}


def test_one_family_group_keeps_the_default_setting() -> None:
    from gpupred.memory.correction import DEFAULT_SETTING
    from gpupred.memory.estimator import MemoryEstimator

    df = fixture_dataset(**TWO_GPUS)
    model = MemoryEstimator().fit(df[df["family"] == "resnet"])
    assert model.setting_ == DEFAULT_SETTING and model.selection_ == {} and model.halfwidth_ == {}
    assert "default" in model.describe()["correction_selection"]
