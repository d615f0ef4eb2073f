"""Memory estimates on FIXTURE frames (toy formula, never data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError
from gpupred.memory import (
    METHODS, OLD_METHODS, MemoryModel, analytical_bytes, evaluate_memory, horus_mib, summarize_memory,
)


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
    from gpupred.memory import FootprintModel, memory_metrics

    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=2,
                         sources={"NVIDIA GeForce RTX 3090": "lucid"})
    errors = evaluate_memory(df, schemes=("lofo",), n_folds=2, residual_model="ridge")
    metrics = memory_metrics(errors, FootprintModel().fit(df), headline_scheme="lofo")
    own = errors[(errors["source"] == "gpupred") & (errors["method"] == "footprint*correction")]
    median = own["rel_err"].median()
    assert metrics["memory_footprint_times_correction_lofo_own_median_rel_err"] == pytest.approx(median)
    assert metrics["memory_footprint_times_correction_lofo_own_coverage"] == pytest.approx(own["covered"].mean())
    assert set(metrics["memory_footprint_constants"]) == {"H100 SXM|gpupred", "RTX 3090|lucid"}
    assert errors.loc[errors["method"] != "footprint*correction", "covered"].isna().all()
