"""Notebook 02 on a tiny catalog slice (two small MLP specs) in a temporary GPUPRED_ROOT."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from gpupred.graph import FEATURE_KEYS


@pytest.mark.notebook
def test_notebook_02_builds_feature_table(run_notebook: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPRED_CACHE", str(tmp_path / "cache"))
    run_notebook("02-build-features", {"limit": 2, "families": "mlp", "workers": 1})
    df = pd.read_parquet(tmp_path / "data" / "processed" / "graph_features.parquet")
    assert len(df) == 2 and set(df["family"]) == {"mlp"}
    assert set(FEATURE_KEYS) <= set(df.columns) and (df["flops_train"] > 0).all()
    assert (tmp_path / "reports" / "figures" / "02-graph-features-by-family.png").exists()
