"""Notebook 01 on a small dry-run sweep built here (a fixture: simulated, never data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profile_faults import tiny_config, tiny_ids


@pytest.mark.notebook
def test_notebook_01_summarizes_a_fixture_sweep(run_notebook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpupred.profile.sweep import SweepOptions, run_sweep

    plan = tmp_path / "plan.txt"
    ids = tiny_ids(2)
    plan.write_text(f"{ids[0]}\n{ids[1]}\n{ids[0]} + {ids[1]}\n")
    sweep = tmp_path / "data" / "dryrun" / "cpu" / "fixture"
    run_sweep(str(plan), sweep, SweepOptions(dry_run=True, progress=False), tiny_config())
    run_notebook("01-collect-profiles", {"raw_dir": str(tmp_path / "data" / "dryrun"), "include_simulated": True})
    figures = {p.name for p in (tmp_path / "reports" / "figures").glob("*.png")}
    assert {"01-runs-per-family.png", "01-utilization-timelines.png", "01-distributions.png"} <= figures


@pytest.mark.notebook
def test_notebook_01_without_raw_data_reports_missing_input(run_notebook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    executed = run_notebook("01-collect-profiles", allow_missing_input=True)
    assert "no runs in data/raw yet" in executed.read_text()
