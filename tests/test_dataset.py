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
from gpupred.errors import MissingInput


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
    assert gpu_spec("NVIDIA GeForce RTX 3090").name == "RTX 3090" and gpu_spec("NVIDIA A100 40GB").mem_bw_gbs == 1555


def test_fp16_peak_rates() -> None:
    """fp16 autocast runs on FP16 tensor cores: as fast as BF16 from Ampere on, far faster than FP32 on V100/T4."""
    v100 = hardware_features("Tesla V100-SXM2-16GB", "fp16")
    assert v100["gpu_tflops_peak"] == 125.0 and v100["gpu_tflops_bf16"] == 15.7
    assert hardware_features("T4", "fp16")["gpu_tflops_peak"] == 65.0
    rtx = hardware_features("NVIDIA GeForce RTX 3090", "fp16")
    assert rtx["gpu_tflops_peak"] == rtx["gpu_tflops_bf16"] == 71.0 and rtx["gpu_tflops_fp16"] == 71.0
    assert hardware_features("NVIDIA GeForce RTX 3090", "fp32")["gpu_tflops_peak"] == 35.6


def test_unknown_gpu_names_it() -> None:
    with pytest.raises(GpupredError, match="Voodoo 5"):
        gpu_spec("3dfx Voodoo 5")


def test_build_from_fixture_raw_tree(tmp_path: Path) -> None:
    feats = fixture_features(n_batch_sizes=1)
    ids = feats["workload_id"].tolist()[:4]
    write_fixture_raw_tree(tmp_path / "raw", ids)
    out = tmp_path / "dataset.parquet"
    with pytest.warns(UserWarning, match="simulated"):
        df, excl = ds.build_dataset(tmp_path / "raw", features=feats, out=out, sources=())
    assert out.exists() and len(df) == 4
    assert sorted(df["workload_id"]) == sorted(ids)
    reasons = excl.groupby("reason").size().to_dict()
    assert reasons["status oom"] == 1
    assert reasons["simulated (dry-run output, never data)"] == 1
    assert reasons["co-located member"] == 2
    assert reasons["no gpu_util samples in window"] == 1
    assert reasons["no graph features for workload"] == 1
    row = df.set_index("run_id").loc["h100-fixture/FIXTURE/fixture-001"]
    assert row["gpu_util"] == pytest.approx(51.0)
    assert row["sm_active"] == pytest.approx(0.8 * 51.0)
    # samples begin 0.5 s before the window, memory already allocated: the label comes from the pre-launch
    # baseline the harness recorded, never from the samples (which would give ~0 MiB)
    assert row["memory_mib"] == pytest.approx(1010.0)
    assert row["memory_source"] == "device-minus-baseline"
    assert df.set_index("run_id").loc["h100-fixture/FIXTURE/fixture-000", "memory_source"] == "nvml-process"
    assert np.isnan(row["gpu_util_buffered"])
    assert row["gpu"] == "H100 SXM" and row["gpu_sm_count"] == 132
    assert ds.feature_columns(df)[:2] == ["flops_fwd", "flops_train"] or "flops_fwd" in ds.feature_columns(df)
    pd.testing.assert_frame_equal(ds.load_dataset(out), df)


def test_twins_on_two_gpu_kinds_keep_distinct_run_ids(tmp_path: Path) -> None:
    """One FIXTURE sweep copied under a second GPU folder: the profiler's run ids repeat, the dataset's do not."""
    import shutil

    feats = fixture_features(n_batch_sizes=1)
    sweep = write_fixture_raw_tree(tmp_path / "raw", feats["workload_id"].tolist()[:3], extras=False)
    shutil.copytree(sweep, tmp_path / "raw" / "h200-fixture" / sweep.name)
    df, excl = ds.build_dataset(tmp_path / "raw", features=feats, write=False, sources=())
    assert len(df) == 6 and df["run_id"].is_unique and excl.empty
    folders = df.assign(folder=df["run_id"].str.split("/").str[0]).groupby("workload_id")["folder"].apply(set)
    assert all(f == {"h100-fixture", "h200-fixture"} for f in folders)
    assert ds.own_run_id(sweep, "fixture-001") == "h100-fixture/FIXTURE/fixture-001"


def test_own_rows_keeps_this_projects_source_only() -> None:
    """Fixture frame: one own row among imported ones; own_rows keeps it, with its index."""
    df = pd.DataFrame({"source": ["lucid", ds.SOURCE_OWN, "gpumemnet"], "x": [1, 2, 3]})
    own = ds.own_rows(df)
    assert own["x"].tolist() == [2] and own.index.tolist() == [1]
    assert ds.own_rows(df[df["source"] != ds.SOURCE_OWN]).empty


def test_no_ok_runs_is_missing_input(tmp_path: Path) -> None:
    with pytest.raises(MissingInput, match="no ok solo runs"):
        ds.build_dataset(tmp_path / "raw", features=fixture_features(1), write=False, sources=())


def test_only_simulated_is_missing_input(tmp_path: Path) -> None:
    feats = fixture_features(n_batch_sizes=1)
    sweep = write_fixture_raw_tree(tmp_path / "raw", feats["workload_id"].tolist()[:1])
    for p in (sweep / "runs").glob("*.parquet"):
        if p.stem != "fixture-sim":
            p.unlink()
    with pytest.warns(UserWarning), pytest.raises(MissingInput):
        ds.build_dataset(tmp_path / "raw", features=feats, write=False, sources=())


def test_missing_features_file_is_missing_input(tmp_path: Path) -> None:
    write_fixture_raw_tree(tmp_path / "raw", fixture_features(1)["workload_id"].tolist()[:1], extras=False)
    with pytest.raises(MissingInput, match="graph features"):
        ds.build_dataset(tmp_path / "raw", features=tmp_path / "nope.parquet", write=False, sources=())


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


def _imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Import FIXTURE Lucid and GPUMemNet files (made up, repinned) into a temporary data/external."""
    from fixtures_external import FIXTURE_GPUMEMNET, FIXTURE_LICENSE, FIXTURE_LUCID_PAIRS, FIXTURE_LUCID_SOLO, repin
    from fixtures_external import write_local_copy

    from gpupred import config, importers
    from gpupred.importers.source import import_source

    monkeypatch.setattr(config, "EXTERNAL", tmp_path / "external")
    files = {"lucid": {"single_data.csv": FIXTURE_LUCID_SOLO, "colocate_info.csv": FIXTURE_LUCID_PAIRS,
                       "LICENSE.txt": FIXTURE_LICENSE},
             "gpumemnet": {"mlp_data_step1.csv": FIXTURE_GPUMEMNET}}
    for name, module in (("lucid", importers.lucid), ("gpumemnet", importers.gpumemnet)):
        src = repin(module.SOURCE, files[name])
        monkeypatch.setattr(module, "SOURCE", src)
        monkeypatch.setitem(importers.SOURCES, name, src)
        import_source(src, from_dir=write_local_copy(tmp_path / "copy", src, files[name]))


def test_build_from_every_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Own FIXTURE runs + FIXTURE Lucid and GPUMemNet imports: one dataset with source, sampler, sync and encodings."""
    from gpupred.importers import graphs

    _imports(tmp_path, monkeypatch)
    feats = fixture_features(n_batch_sizes=1)
    own_ids = feats["workload_id"].tolist()[:2]
    write_fixture_raw_tree(tmp_path / "raw", own_ids, extras=False)
    imported = graphs.feature_rows(graphs.imported_specs(), progress=False)  # committed graphs + onnx.helper: no torch
    assert len(imported) == 4 and set(imported["family"]) == {"resnet", "bert", "fcnet"}
    df, excl = ds.build_dataset(tmp_path / "raw", features=pd.concat([feats, imported]), out=tmp_path / "d.parquet")
    assert df.groupby("source").size().to_dict() == {"gpumemnet": 1, "gpupred": 2, "lucid": 3}
    by = df.set_index("run_id")
    lucid = by.loc["lucid:ResNet18/CIFAR-10/bs64/amp1"]
    assert (lucid["gpu"], lucid["precision"], lucid["sync"], lucid["sampler"]) == ("RTX 3090", "fp16", "kernel", "nvidia-smi-0.2s")
    assert lucid["is_fp16"] == 1 and lucid["is_bf16"] == 0 and lucid["sync_kernel"] == 1 and lucid["host_batches"] == 1
    assert lucid["gpu_tflops_peak"] == 71.0 and lucid["memory_mib"] == 2100.0 and np.isnan(lucid["sm_active"])
    gmn = by.loc["gpumemnet:input:8_output:2_depth:2_arch:pyramid_batch:16"]
    assert gmn["gpu"] == "A100 40GB" and gmn["util_nonzero_only"] == 1 and gmn["sync_kernel"] == 0 and gmn["sm_active"] == 20.0
    phys = df[["phys_step_s", "phys_gpu_busy_s", "phys_host_s", "phys_util", "phys_kernels"]]
    assert phys.notna().all().all() and (phys > 0).all().all() and (df["phys_util"] <= 100).all()  # every source
    assert (df["phys_step_s"] >= df["phys_gpu_busy_s"]).all()
    assert not set(phys.columns) & set(ds.feature_columns(df))  # not regressor inputs: a featurize row has no GPU
    assert lucid["phys_step_s"] >= lucid["phys_gpu_busy_s"] + lucid["phys_host_s"]  # CUDA_LAUNCH_BLOCKING: no overlap
    own = df[df["source"] == "gpupred"]
    assert set(own["sampler"]) == {"nvml-poll-100ms"} and (own[["sync_kernel", "util_nonzero_only", "is_fp16"]] == 0).all().all()
    reasons = excl.groupby("reason").size()
    assert any("reinforcement" in r for r in reasons.index) and any("width rule" in r for r in reasons.index)
    loaded = ds.load_dataset(tmp_path / "d.parquet")
    assert len(loaded) == 6 and len(ds.load_dataset(tmp_path / "d.parquet", sources=["lucid"])) == 3
    assert ds.summarize(df)["sources"] == ["gpumemnet", "gpupred", "lucid"] and ds.summarize(df)["n_workloads"] == 6


def test_imported_sources_alone_make_a_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No run in data/raw: the imported sources are enough (the fresh-clone-with-published-data case)."""
    from gpupred.importers import graphs

    _imports(tmp_path, monkeypatch)
    df, _ = ds.build_dataset(tmp_path / "raw", features=graphs.feature_rows(graphs.imported_specs(), progress=False),
                             write=False)
    assert set(df["source"]) == {"lucid", "gpumemnet"}
    with pytest.raises(MissingInput, match="gpupred import lucid"):
        ds.build_dataset(tmp_path / "raw", features=fixture_features(1), write=False, sources=())


def test_a_pipeline_run_reaches_the_dataset_with_its_machines_host_profile(tmp_path: Path) -> None:
    """A FIXTURE run fed by image files (its row's ``pipeline`` JSON, as the harness writes it) gets the loader columns,
    read with the host profile recorded beside the runs for its machine; resident rows keep NaN."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpupred import config
    from gpupred.loader.hostprofile import write_host_profile
    from gpupred.loader.speed import GPU_HOST_SCORE
    from gpupred.step.physics.inputfeed import LOADER_COLUMNS
    from gpupred.profile.store import host_profile_path

    feats = fixture_features(n_batch_sizes=1)
    sweep = write_fixture_raw_tree(tmp_path / "raw", feats["workload_id"].tolist()[:2], extras=False)
    path = sweep / "runs" / "fixture-001.parquet"
    table = pq.read_table(path)
    pipe = json.dumps({"kind": "image-files", "num_workers": 2, "host_cores": 16.0})
    pq.write_table(table.set_column(table.schema.get_field_index("pipeline"), "pipeline",
                                    pa.array([pipe], pa.string())), path)
    df, _ = ds.build_dataset(tmp_path / "raw", features=feats, write=False, sources=())
    reference = df.set_index("run_id").loc["h100-fixture/FIXTURE/fixture-001"]
    # this machine's profile beside the runs (FIXTURE: the reference's costs made 3x slower, sealed again)
    slower = json.loads(config.HOST_PROFILE.read_text())
    for variants in slower["kinds"].values():
        for entry in variants.values():
            for point in entry["points"]:
                point["per_sample_s"] *= 3.0
    write_host_profile(slower, host_profile_path(sweep, "fixture"))  # the fixture rows' host is "fixture"
    df, _ = ds.build_dataset(tmp_path / "raw", features=feats, write=False, sources=())
    rows = df.set_index("run_id")
    fed, resident = rows.loc["h100-fixture/FIXTURE/fixture-001"], rows.loc["h100-fixture/FIXTURE/fixture-000"]
    assert fed["loader_produce_s"] > 0 and fed["loader_workers"] == 2 and fed["loader_cores"] == 16
    # a worker's making = its samples (3x slower) + its handing the batch over (the receive figures, unchanged); the
    # reference row names no host, so its costs were moved to a measured GPU server's speed, the fed row's are its own
    handoff = reference["loader_main_s"]
    unnamed = GPU_HOST_SCORE / slower["single_core"]["score"]
    assert fed["loader_produce_s"] == pytest.approx(
        unnamed * (3.0 * (reference["loader_produce_s"] - handoff) + handoff), rel=1e-6)
    assert all(np.isnan(resident[c]) for c in LOADER_COLUMNS)
    # the host's single-core score reaches every row of the GPU kind whose sweep recorded it; none recorded: unknown
    assert np.isnan(reference["host_score"])
    assert (rows["host_score"] == slower["single_core"]["score"]).all()
