"""Reading the raw-data contract: FIXTURE sweep folders (made up here, never data) written before and after a
column was added."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures_learning import fixture_features, write_fixture_raw_tree

from gpupred.errors import GpupredError
from gpupred.profile.schema import ADDED_RUN_COLUMNS, RUN_SCHEMA, read_runs


def _sweep(tmp_path: Path) -> Path:
    return write_fixture_raw_tree(tmp_path / "raw", fixture_features(1)["workload_id"].tolist()[:2], extras=False)


def _drop(path: Path, column: str) -> None:
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([column]), path)


def test_a_file_written_before_an_added_column_reads_it_as_missing(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    old, new = sorted((sweep / "runs").glob("*.parquet"))[:2]
    table = pq.read_table(new)
    i = table.schema.get_field_index("torch_window_reserved_mib")
    pq.write_table(table.set_column(i, "torch_window_reserved_mib", pa.array([1234.0] * len(table))), new)
    for column in ADDED_RUN_COLUMNS:
        _drop(old, column)
    runs = read_runs(sweep)
    assert list(runs.columns) == [*RUN_SCHEMA.names, "sweep_dir"]
    assert runs["torch_window_reserved_mib"].isna().sum() == len(runs) - 1
    assert (runs["torch_window_reserved_mib"] == 1234.0).sum() == 1


def test_a_file_missing_a_required_column_names_the_file_and_the_column(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    path = sorted((sweep / "runs").glob("*.parquet"))[0]
    _drop(path, "torch_peak_reserved_mib")
    with pytest.raises(GpupredError, match=rf"{path.name}: missing columns \['torch_peak_reserved_mib'\]"):
        read_runs(sweep)
