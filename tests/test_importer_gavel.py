"""The Gavel importer on FIXTURE files (made up in Gavel's layout by tests/fixtures_gavel.py; not the published matrix)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixtures_external import repin, write_local_copy
from fixtures_gavel import GPUS, fixture_jobs, fixture_throughput_text, fixture_throughputs

from gpupred import config, importers
from gpupred.colocation.gavelpairs import gavel_table
from gpupred.errors import GpupredError, MissingInput
from gpupred.importers import gavel
from gpupred.importers.source import import_source

LICENSE = "FIXTURE licence\n"


@pytest.fixture
def imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(config, "EXTERNAL", tmp_path / "external")
    monkeypatch.setattr(config, "EXTERNAL_LOCAL", None)
    files = {gavel.THROUGHPUT_FILE: fixture_throughput_text(), "LICENSE": LICENSE}
    src = repin(gavel.SOURCE, files)
    monkeypatch.setattr(gavel, "SOURCE", src)
    import_source(src, from_dir=write_local_copy(tmp_path / "copy", src, files))
    return fixture_throughputs()


def test_reads_solo_and_pairs_of_scale_factor_one(imported: dict) -> None:
    solo, pairs = gavel.read_tables()
    jobs = fixture_jobs()
    n = len(jobs)
    assert list(solo.columns) == list(gavel.SOLO_COLUMNS) and list(pairs.columns) == list(gavel.PAIR_COLUMNS)
    assert len(solo) == 3 * n and set(solo["gpu"]) == set(GPUS)  # the scale-factor-2 entries are left out
    assert len(pairs) == 3 * n * (n + 1)  # every unordered pair once, two member rows each
    assert (pairs.groupby("pair_id").size() == 2).all()
    first = pairs[(pairs.gpu == "v100")].iloc[:2]
    key_a, key_b = f"('{first.job_key.iloc[0]}', 1)", f"('{first.partner_key.iloc[0]}', 1)"
    own, other = imported["v100"][key_a][key_b]
    assert first.coloc_tput.tolist() == pytest.approx([own, other])
    assert first.slowdown.iloc[0] == pytest.approx(imported["v100"][key_a]["null"] / own)


def test_failed_pairs_have_no_slowdown_and_none_is_faster_than_alone(imported: dict) -> None:
    _, pairs = gavel.read_tables()
    failed = pairs[pairs.failed]
    assert len(failed) and failed.slowdown.isna().all() and (failed.job_key.eq("FixHuge") | failed.partner_key.eq("FixHuge")).all()
    assert (pairs.loc[~pairs.failed, "slowdown"] >= 1.0 - 1e-12).all()
    table = gavel_table(pairs, "v100")
    assert table.group_failed.sum() == (pairs.failed & (pairs.gpu == "v100")).sum()
    assert set(table.loc[table.group_failed, "status"]) == {"error"} and table.loc[~table.group_failed, "status"].eq("ok").all()
    assert set(table.model_group) == {"FixA", "FixB", "FixC", "FixD", "FixE", "FixF", "FixHuge"}


def test_job_fields_and_bad_keys() -> None:
    assert gavel.job_fields("ResNet-18 (batch size 16)") == ("ResNet-18", 16.0)
    model, bs = gavel.job_fields("A3C")
    assert model == "A3C" and np.isnan(bs)
    with pytest.raises(GpupredError, match="not \"\\('<job type>', <scale factor>\\)\"") as err:
        gavel.parse_job("ResNet-18")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: {k: v for k, v in d.items() if k != "p100"}, "no GPU kinds \\['p100'\\]"),
    (lambda d: {**d, "k80": {"('FixA (batch size 16)', 1)": {"('FixA (batch size 16)', 1)": [1.0, 1.0]}}}, "no solo throughput"),
])
def test_bad_files_are_named(edit, match: str) -> None:
    with pytest.raises(GpupredError, match=match) as err:
        gavel.tables_from_json(edit(fixture_throughputs()), "fixture.json")
    assert "fixture.json" in str(err.value) and "\n" not in str(err.value)


def test_missing_input_until_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "EXTERNAL", tmp_path / "none")
    with pytest.raises(MissingInput, match="gpupred import gavel"):
        gavel.read_solo()


def test_registered_as_a_colocation_source_not_a_dataset_source() -> None:
    assert importers.get_source("gavel").repo == "stanford-futuredata/gavel"
    assert "gavel" in importers.COLOCATION and "gavel" not in importers.SOURCES
    with pytest.raises(GpupredError, match="co-location matrix, not a source of learning rows"):
        importers.module("gavel")


def test_the_pinned_file_is_the_local_copy() -> None:
    """The pin matches the local copy of the published file when this machine has one (skipped elsewhere)."""
    path = config.EXTERNAL_LOCAL / "gavel" / gavel.THROUGHPUT_FILE if config.EXTERNAL_LOCAL else None
    if path is None or not path.is_file():
        pytest.skip(f"no local copy at {path}")
    import hashlib

    assert hashlib.sha256(path.read_bytes()).hexdigest() == gavel.SOURCE.file(gavel.THROUGHPUT_FILE).sha256
    json.loads(path.read_text())  # it parses
