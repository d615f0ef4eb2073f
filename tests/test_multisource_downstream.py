"""Downstream stages on a multi-source dataset (FIXTURE frames): sources without iteration times are not simulated."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_learning import fixture_dataset
from gpupred.pipeline import MissingInput


def test_simulator_table_skips_runs_without_iteration_times() -> None:
    """GPUMemNet publishes no speed: its (here FIXTURE) rows must not become NaN iteration times in the simulator."""
    from gpupred import sim

    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA A100 40GB"), n_batch_sizes=2,
                         sources={"NVIDIA A100 40GB": "gpumemnet"})
    df.loc[df["source"] == "gpumemnet", "iter_time_mean_s"] = np.nan
    df = df.iloc[np.r_[0:10, df.index[df["source"] == "gpumemnet"]]].reset_index(drop=True)  # the no-speed GPU is the larger
    preds = df[["workload_id", "gpu_name", "gpu_util", "memory_mib"]].assign(gpu_util_high=df["gpu_util"] * 1.1,
                                                                            memory_mib_high=df["memory_mib"] * 1.1)
    table = sim.workload_table(df, preds)
    assert table.attrs["gpu_name"] == "NVIDIA H100 80GB HBM3" and len(table) == 10
    with pytest.raises(MissingInput, match="iteration time"):
        sim.workload_table(df[df["source"] == "gpumemnet"], preds)
