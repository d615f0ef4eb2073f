"""Dataset builder and hardware table, on FIXTURE raw trees (made up in tmp folders, never data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures_learning import fixture_dataset, fixture_features, write_fixture_raw_tree
from gpupred import dataset as ds
from gpupred.errors import GpupredError
from gpupred.hardware import HARDWARE_COLUMNS, gpu_spec, hardware_features
from gpupred.pipeline import MissingInput


def test_hardware_names() -> None:
    assert gpu_spec("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert gpu_spec("NVIDIA H100 PCIe").sm_count == 114
    assert gpu_spec("NVIDIA H200").memory_gb == 141
    assert gpu_spec("NVIDIA A100-SXM4-80GB").mem_bw_gbs == 2039
    assert gpu_spec("Tesla V100-SXM2-16GB").tflops_bf16 == gpu_spec("Tesla V100-SXM2-16GB").tflops_fp32
    assert gpu_spec("NVIDIA GeForce RTX 4090").sm_count == 128
    assert gpu_spec("NVIDIA L4").name == "L4"
    hw = hardware_features("h100", "bf16")
    assert set(hw) == set(HARDWARE_COLUMNS) and hw["gpu_tflops_peak"] == hw["gpu_tflops_bf16"]


def test_unknown_gpu_names_it() -> None:
    with pytest.raises(GpupredError, match="Voodoo 5"):
        gpu_spec("3dfx Voodoo 5")


def test_build_from_fixture_raw_tree(tmp_path: Path) -> None:
    feats = fixture_features(n_batch_sizes=1)
    ids = feats["workload_id"].tolist()[:4]
    write_fixture_raw_tree(tmp_path / "raw", ids)
    out = tmp_path / "dataset.parquet"
    with pytest.warns(UserWarning, match="simulated"):
        df, excl = ds.build_dataset(tmp_path / "raw", features=feats, out=out)
    assert out.exists() and len(df) == 4
    assert sorted(df["workload_id"]) == sorted(ids)
    reasons = excl.groupby("reason").size().to_dict()
    assert reasons["status oom"] == 1
    assert reasons["simulated (dry-run output, never data)"] == 1
    assert reasons["co-located member"] == 2
    assert reasons["no gpu_util samples in window"] == 1
    assert reasons["no graph features for workload"] == 1
    row = df.set_index("run_id").loc["fixture-001"]
    assert row["gpu_util"] == pytest.approx(51.0)
    assert row["sm_active"] == pytest.approx(0.8 * 51.0)
    # samples begin 0.5 s before the window, memory already allocated: the label comes from the pre-launch
    # baseline the harness recorded, never from the samples (which would give ~0 MiB)
    assert row["memory_mib"] == pytest.approx(1010.0)
    assert row["memory_source"] == "device-minus-baseline"
    assert df.set_index("run_id").loc["fixture-000", "memory_source"] == "nvml-process"
    assert np.isnan(row["gpu_util_buffered"])
    assert row["gpu"] == "H100 SXM" and row["gpu_sm_count"] == 132
    assert ds.feature_columns(df)[:2] == ["flops_fwd", "flops_train"] or "flops_fwd" in ds.feature_columns(df)
    pd.testing.assert_frame_equal(ds.load_dataset(out), df)


def test_no_ok_runs_is_missing_input(tmp_path: Path) -> None:
    with pytest.raises(MissingInput, match="no ok solo runs"):
        ds.build_dataset(tmp_path / "raw", features=fixture_features(1), write=False)


def test_only_simulated_is_missing_input(tmp_path: Path) -> None:
    feats = fixture_features(n_batch_sizes=1)
    sweep = write_fixture_raw_tree(tmp_path / "raw", feats["workload_id"].tolist()[:1])
    for p in (sweep / "runs").glob("*.parquet"):
        if p.stem != "fixture-sim":
            p.unlink()
    with pytest.warns(UserWarning), pytest.raises(MissingInput):
        ds.build_dataset(tmp_path / "raw", features=feats, write=False)


def test_missing_features_file_is_missing_input(tmp_path: Path) -> None:
    write_fixture_raw_tree(tmp_path / "raw", fixture_features(1)["workload_id"].tolist()[:1], extras=False)
    with pytest.raises(MissingInput, match="graph features"):
        ds.build_dataset(tmp_path / "raw", features=tmp_path / "nope.parquet", write=False)


def test_validate_refuses_broken_frames(tmp_path: Path) -> None:
    df = fixture_dataset()
    ds.validate_dataset(df)
    with pytest.raises(GpupredError, match="missing columns"):
        ds.validate_dataset(df.drop(columns=["gpu_util"]))
    bad = df.copy()
    bad.loc[0, "memory_mib"] = np.nan
    with pytest.raises(GpupredError, match="memory_mib"):
        ds.validate_dataset(bad)
    with pytest.raises(MissingInput):
        ds.load_dataset(tmp_path / "absent.parquet")
    assert ds.summarize(df)["n_families"] == 5
