"""Sweep sanity checks and data cards, on a FIXTURE raw tree (made up here, never data)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fixtures_learning import write_fixture_raw_tree

from gpupred.profile.datacard import NOTES_HEADING, card_path, revisions, run_table, sanity, write_datacard
from gpupred.profile.store import write_manifest

IDS = ["mlp.mlp-w64-d2-bs8-in32-fp32-sgd", "mlp.mlp-w64-d2-bs16-in32-bf16-adam"]


def test_sanity_counts_what_is_wrong(tmp_path: Path) -> None:
    sweep = write_fixture_raw_tree(tmp_path / "raw", IDS)  # ok, oom, simulated, a pair, no-window, alexnet runs
    table = run_table(sweep)
    assert len(table) == 8 and table.loc[table["run_id"] == "fixture-001", "util_mean"].item() == 51.0
    checks, per_family = sanity(sweep)
    assert checks["status_counts"] == {"ok": 7, "oom": 1}
    assert checks["ok_runs_without_samples"] == 1  # fixture-nowin: nothing inside its window
    assert checks["simulated"] is True  # fixture-sim is flagged, so the card says SIMULATED
    assert checks["util_out_of_range"] == 0 and checks["memory_above_card"] == 0
    assert checks["util_cv_max"] == 0.0  # fixture utilization is flat inside the window
    assert per_family.loc["mlp", "runs"] == 4 and per_family.loc["alexnet", "runs"] == 1  # solo ok runs only
    assert per_family.loc["mlp", "util_min"] == 50.0 and per_family.loc["mlp", "util_max"] == 51.0


def test_datacard_keeps_the_notes_a_person_wrote(tmp_path: Path) -> None:
    sweep = write_fixture_raw_tree(tmp_path / "raw", IDS, extras=False)
    path = write_datacard(sweep)
    text = path.read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "runs: 2 (ok 2)" in text and "SIMULATED" not in text
    path.write_text(text.split(NOTES_HEADING)[0] + NOTES_HEADING + "\n\n- fan noise at 03:00\n")
    assert "- fan noise at 03:00" in write_datacard(sweep).read_text()


def test_a_grown_sweep_gets_a_new_card_and_keeps_the_committed_one(tmp_path: Path) -> None:
    """FIXTURE manifests: session 1's manifest.json and card, then a session 3 that resumed the sweep."""
    sweep = write_fixture_raw_tree(tmp_path / "raw", IDS, extras=False)
    write_manifest(sweep, {"plan": "a.txt", "plans": ["a.txt"], "sessions": [{"started": "x"}]})
    first = write_datacard(sweep)
    assert first == sweep / "README.md" and "sweep sessions: 1 (`manifest.json`)" in first.read_text()
    first.write_text(first.read_text().replace("- (the person who ran the sweep: anything unusual)", "- fan noise"))
    committed = first.read_bytes()
    write_manifest(sweep, {"plan": "a.txt", "plans": ["a.txt", "b.txt"], "sessions": [{"started": "x"}] * 3})
    assert (sweep / "manifest-003.json").exists() and card_path(sweep) == sweep / "README-003.md"
    text = write_datacard(sweep).read_text()
    assert first.read_bytes() == committed  # the committed card is left as it was
    assert "sweep sessions: 3 (`manifest-003.json`)" in text and "`a.txt`, `b.txt`" in text and "- fan noise" in text


def test_a_correction_is_a_revision_card_and_the_next_card_starts_from_it(tmp_path: Path) -> None:
    """FIXTURE: session 1's committed card corrected by README-r1.md; a resumed session's card keeps the correction."""
    sweep = write_fixture_raw_tree(tmp_path / "raw", IDS, extras=False)
    write_manifest(sweep, {"plan": "a.txt", "plans": ["a.txt"], "sessions": [{"started": "x"}]})
    first = write_datacard(sweep)
    first.write_text(first.read_text().replace("- (the person who ran the sweep: anything unusual)", "- shift: median +5"))
    committed = first.read_bytes()
    (sweep / "README-r2.md").write_text(first.read_text().replace("median +5", "mean +5, median +3"))
    (sweep / "README-r10.md").write_text(first.read_text().replace("median +5", "mean +5, median +2.7"))
    assert revisions(first) == [sweep / "README-r2.md", sweep / "README-r10.md"]  # numeric order, not text order
    write_manifest(sweep, {"plan": "a.txt", "plans": ["a.txt"], "sessions": [{"started": "x"}] * 2})
    text = write_datacard(sweep).read_text()
    assert first.read_bytes() == committed and "- shift: mean +5, median +2.7" in text


def test_cli_json_and_one_line_error(tmp_path: Path) -> None:
    sweep = write_fixture_raw_tree(tmp_path / "raw", IDS, extras=False)
    cmd = [sys.executable, "-m", "gpupred.cli", "datacard"]
    out = subprocess.run([*cmd, str(sweep), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["per_family"]["mlp"]["runs"] == 2
    bad = subprocess.run([*cmd, str(tmp_path / "nope")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such sweep folder" in bad.stderr


def test_memory_from_fallback_sources_is_flagged(tmp_path: Path) -> None:
    """FIXTURE: fixture-000 has per-process NVML memory, fixture-001 only the device total (like a container)."""
    sweep = write_fixture_raw_tree(tmp_path / "raw", IDS, extras=False)
    table = run_table(sweep)
    assert list(table["memory_source"]) == ["nvml-process", "device-minus-baseline"]
    assert list(table["memory_mib"]) == [1000.0, 1010.0]  # the label, not the device total and not ~0
    checks, per_family = sanity(sweep)
    assert checks["memory_sources"] == {"device-minus-baseline": 1, "nvml-process": 1}
    assert checks["memory_fallback_runs"] == ["fixture-001"] and checks["memory_unlabelled_runs"] == []
    assert per_family.loc["mlp", "mem_median_mib"] == 1005.0  # both runs, whatever their source
    text = write_datacard(sweep).read_text()
    assert "memory from a fallback source: 1 of 2" in text and "fixture-001 (device-minus-baseline)" in text
    # the fixture's torch peak reserved (1000) + context (500) stands for warm-up's autotuning workspace
    assert checks["memory_transient_runs"] == 2 and round(checks["memory_transient_max"], 2) == 0.5
    assert "by more than 10% (memory held only before the window" in text and "2 of 2 ok runs, at most 1.50x" in text
    assert "sync: step 2" in text and "CUDA context" in text


def test_a_run_without_window_samples_falls_back_to_torch_and_is_flagged(tmp_path: Path) -> None:
    sweep = write_fixture_raw_tree(tmp_path / "raw", IDS)  # fixture-nowin has no sample inside its window
    table = run_table(sweep).set_index("run_id")
    assert table.loc["fixture-nowin", "memory_source"] == "torch-reserved-plus-context"
    assert table.loc["fixture-nowin", "memory_mib"] == 1500.0  # reserved 1000 + measured context 500
    assert "fixture-nowin" in sanity(sweep)[0]["memory_fallback_runs"]
