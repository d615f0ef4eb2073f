"""Notebook 02 on a tiny catalog slice (two small MLP specs) in a temporary GPUPRED_ROOT."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from gpupred.graph.features import FEATURE_KEYS


@pytest.mark.notebook
def test_notebook_02_builds_feature_table(run_notebook: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPRED_CACHE", str(tmp_path / "cache"))
    run_notebook("02-build-features", {"limit": 2, "families": "mlp", "workers": 1, "published": ""})
    df = pd.read_parquet(tmp_path / "data" / "processed" / "graph_features.parquet")
    assert len(df) == 2 and set(df["family"]) == {"mlp"}
    assert set(FEATURE_KEYS) <= set(df.columns) and (df["flops_train"] > 0).all()
    assert (tmp_path / "reports" / "figures" / "02-graph-features-by-family.png").exists()


@pytest.mark.notebook
def test_notebook_02_builds_dataset_from_measured_workloads(
    run_notebook: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workloads measured in data/raw (here a FIXTURE raw tree) are featurized and joined into the dataset."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from fixtures_learning import write_fixture_raw_tree

    measured = ["mlp.mlp-w64-d2-bs8-in32-fp32-sgd", "mlp.mlp-w64-d2-bs16-in32-bf16-adam"]
    write_fixture_raw_tree(tmp_path / "data" / "raw", measured, extras=False)
    monkeypatch.setenv("GPUPRED_CACHE", str(tmp_path / "cache"))
    run_notebook("02-build-features", {"limit": 1, "families": "mlp", "workers": 1, "published": ""})
    features = pd.read_parquet(tmp_path / "data" / "processed" / "graph_features.parquet")
    assert set(measured) <= set(features["workload_id"]) and len(features) == 3
    dataset = pd.read_parquet(tmp_path / "data" / "processed" / "dataset.parquet")
    assert sorted(dataset["workload_id"]) == sorted(measured)
    assert dataset["gpu_util"].between(0, 100).all()


@pytest.mark.notebook
def test_notebook_02_offline_without_a_local_copy_skips_the_published_data(
    run_notebook: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh clone offline with no local copy: 02 says why each source is skipped, builds no dataset, and passes."""
    monkeypatch.setenv("GPUPRED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GPUPRED_EXTERNAL_BASE_URL", "http://127.0.0.1:9")  # the discard port: nothing answers
    monkeypatch.setenv("GPUPRED_EXTERNAL_TIMEOUT_S", "2")
    monkeypatch.delenv("GPUPRED_EXTERNAL_LOCAL", raising=False)
    out = run_notebook("02-build-features", {"limit": 1, "families": "mlp", "workers": 1})
    text = out.read_text()
    assert "lucid: skipped: cannot download" in text and "gpumemnet: skipped: cannot download" in text
    assert "dataset not built" in text and "gpupred import lucid" in text
    assert not (tmp_path / "data" / "external" / "lucid").exists()
    assert not (tmp_path / "data" / "processed" / "dataset.parquet").exists()
