"""Exit codes a script can trust: 0 every planned unit finished, 3 stopped with units left, 2 bad input.

Counts (``catalog:N``, ``fused:N``, ``--limit``, ``plan ... --n``) must be positive: a zero or negative one is
refused with one line and exit 2, never read as "every unit" or as a slice from the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import typer

from gpupred.cliapp import run_app
from gpupred.errors import GpupredError
from gpupred.cli import profile as profile_cli
from gpupred.profile import sweep
from gpupred.profile.units import load_plan
from gpupred.profile.sweep import SweepSummary

from profile_faults import tiny_config, tiny_ids


def _gpupred(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the profiler's commands as ``gpupred`` runs them (run_app's error mapping): (exit code, stdout, stderr)."""
    app = typer.Typer(name="gpupred", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    profile_cli.register(app)
    capsys.readouterr()
    try:
        run_app(app, list(args))
        code = 0
    except SystemExit as err:
        code = int(err.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line_error(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpupred: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_sweep(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """run_sweep replaced by a recorder that fails the test if bad input ever reaches it."""
    calls: list[tuple[Any, ...]] = []

    def fake(plan: str, out: Any = None, *args: Any, **kw: Any) -> SweepSummary:
        calls.append((plan, out, args, kw))
        raise AssertionError("run_sweep must not be reached with bad input")

    monkeypatch.setattr(sweep, "run_sweep", fake)
    return calls


# ------------------------------------------------------------------------------------ counts: Python API


@pytest.mark.parametrize("plan", ["catalog:-5", "catalog:0", "fused:-1", "fused:0"])
def test_load_plan_refuses_zero_or_negative_plan_counts(plan: str) -> None:
    with pytest.raises(GpupredError, match="at least 1") as info:
        load_plan(plan)
    assert plan in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("limit", [-3, 0])
def test_load_plan_refuses_zero_or_negative_limit(limit: int) -> None:
    with pytest.raises(GpupredError, match="at least 1") as info:
        load_plan("catalog:4", limit)
    assert f"limit {limit}" in str(info.value)


def test_load_plan_positive_counts_still_work() -> None:
    assert len(load_plan("catalog:3")) == 3 and len(load_plan("fused:2")) == 2
    assert len(load_plan("catalog:3", 2)) == 2 and len(load_plan("catalog:3", None)) == 3
    assert len(load_plan("catalog:3", 10)) == 3


# ------------------------------------------------------------------------------------ counts: the CLI


@pytest.mark.parametrize("plan", ["catalog:-5", "catalog:0", "fused:-1", "fused:0"])
def test_sweep_cli_refuses_zero_or_negative_plan_counts(plan: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data" / "dryrun" / "cpu" / "bad"
    # a budget below one unit's hard timeout: were the count taken, the sweep would stop at once (exit 3), not run
    code, stdout, err = _gpupred(capsys, "sweep", "--plan", plan, "--out", str(out), "--dry-run",
                                 "--max-minutes", "0.05")
    assert code == 2 and plan in _one_line_error(err) and "at least 1" in err
    assert not out.exists() and stdout == ""


@pytest.mark.parametrize("limit", ["-3", "0"])
def test_sweep_cli_refuses_zero_or_negative_limit(limit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  no_sweep: list[tuple[Any, ...]]) -> None:
    out = tmp_path / "data" / "dryrun" / "cpu" / "bad"
    code, _, err = _gpupred(capsys, "sweep", "--plan", "catalog:2", "--out", str(out), "--dry-run", "--limit", limit)
    assert code == 2 and f"--limit {limit}" in _one_line_error(err) and not no_sweep


@pytest.mark.parametrize("minutes", ["0", "-1"])
def test_sweep_cli_refuses_a_time_budget_that_is_not_positive(minutes: str, capsys: pytest.CaptureFixture[str],
                                                              no_sweep: list[tuple[Any, ...]]) -> None:
    code, _, err = _gpupred(capsys, "sweep", "--plan", "catalog:2", "--dry-run", "--max-minutes", minutes)
    assert code == 2 and "--max-minutes" in _one_line_error(err) and not no_sweep


@pytest.mark.parametrize("args, flag", [
    (("pairs", "--from", "nowhere", "--n", "0"), "--n 0"),
    (("pairs", "--from", "nowhere", "--n", "-2"), "--n -2"),
    (("pairs", "--from", "nowhere", "--groups", "-1"), "--groups -1"),
    (("subset", "--from", "nowhere", "--n", "0"), "--n 0"),
    (("subset", "--from", "nowhere", "--n", "-4"), "--n -4"),
    (("solo", "--n", "0"), "--n 0"),
    (("solo", "--n", "-3"), "--n -3"),
    (("sync", "--n", "0"), "--n 0"),
])
def test_plan_commands_refuse_zero_or_negative_counts(args: tuple[str, ...], flag: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "plan.txt"
    code, _, err = _gpupred(capsys, "plan", *args, "--out", str(target))
    assert code == 2 and flag in _one_line_error(err) and not target.exists()


def test_plan_pairs_accepts_zero_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _gpupred(capsys, "plan", "pairs", "--from", str(tmp_path / "nowhere"), "--groups", "0",
                            "--out", str(tmp_path / "plan.txt"))
    assert code == 2 and "--groups" not in err  # past the count checks: fails on the missing source instead


def test_plan_solo_positive_n_writes_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "plan.txt"
    code, stdout, _ = _gpupred(capsys, "plan", "solo", "--n", "3", "--out", str(target))
    assert code == 0 and "3 solo specs" in stdout
    assert [u.workload_ids for u in load_plan(str(target))] == [u.workload_ids for u in load_plan("catalog:3")]


# ------------------------------------------------------------------------------------ sweep exit codes


def _stopped_sweep(monkeypatch: pytest.MonkeyPatch, stopped: str, remaining: int) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fake(plan: str, out: Any = None, options: Any = None, harness: Any = None) -> SweepSummary:
        calls.append({"plan": plan, "out": out, "options": options, "harness": harness})
        return SweepSummary(out=Path("data/raw/h100/fixture"), planned=6, already_done=1, done_now=2,
                            statuses=Counter(ok=2), stopped=stopped, remaining=remaining)

    monkeypatch.setattr(sweep, "run_sweep", fake)
    return calls


@pytest.mark.parametrize("stopped", ["time budget reached", "SIGTERM", "interrupted (SIGINT)"])
def test_sweep_stopped_with_units_left_exits_3(stopped: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    calls = _stopped_sweep(monkeypatch, stopped, remaining=3)
    code, stdout, err = _gpupred(capsys, "sweep", "--plan", "catalog:6", "--out", "data/raw/h100/fixture")
    assert code == 3 and len(calls) == 1
    assert "3 units left" in stdout  # the summary line
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "3 units left" in lines[0] and stopped in lines[0]


def test_sweep_json_keeps_the_exit_code(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _stopped_sweep(monkeypatch, "time budget reached", remaining=3)
    code, stdout, err = _gpupred(capsys, "sweep", "--plan", "catalog:6", "--out", "data/raw/h100/fixture", "--json")
    assert code == 3 and json.loads(stdout)["remaining"] == 3 and "3 units left" in err
    _stopped_sweep(monkeypatch, "", remaining=0)
    code, stdout, err = _gpupred(capsys, "sweep", "--plan", "catalog:6", "--out", "data/raw/h100/fixture", "--json")
    assert code == 0 and json.loads(stdout)["remaining"] == 0 and err == ""


def test_sweep_with_units_left_exits_3_even_without_a_stop_reason(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _stopped_sweep(monkeypatch, "", remaining=2)
    code, _, err = _gpupred(capsys, "sweep", "--plan", "catalog:6", "--out", "data/raw/h100/fixture")
    assert code == 3 and "2 units left" in err


def test_finished_dry_sweep_exits_0_and_a_rerun_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sweep, "harness_config", lambda *a, **kw: tiny_config())  # sub-second CPU units
    plan = tmp_path / "plan.txt"
    plan.write_text("\n".join(tiny_ids(1)) + "\n")
    out = tmp_path / "data" / "dryrun" / "cpu" / "done"
    args = ("sweep", "--plan", str(plan), "--out", str(out), "--dry-run", "--json")
    code, stdout, err = _gpupred(capsys, *args)
    assert code == 0, err
    assert json.loads(stdout)["remaining"] == 0 and json.loads(stdout)["done_now"] == 1
    code, stdout, _ = _gpupred(capsys, *args)  # nothing left to run: still finished
    assert code == 0 and json.loads(stdout)["already_done"] == 1


def test_sweep_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "data" / "dryrun" / "cpu" / "bad"
    code, _, err = _gpupred(capsys, "sweep", "--plan", str(tmp_path / "missing.txt"), "--out", str(out), "--dry-run")
    assert code == 2 and "not a file" in _one_line_error(err)
    code, _, err = _gpupred(capsys, "sweep", "--plan", "catalog:2", "--dry-run", "--executor", "slurm")
    assert code == 2 and "unknown executor" in _one_line_error(err)


def test_gpupred_command_documents_and_uses_the_exit_codes(tmp_path: Path) -> None:
    def gpupred(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpupred.cli", *args], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)

    help_text = " ".join(gpupred("sweep", "--help").stdout.split())
    assert "Exit codes" in help_text and "3" in help_text and "units left" in help_text
    bad = gpupred("sweep", "--plan", "catalog:-5", "--out", str(tmp_path / "data" / "dryrun" / "x"), "--dry-run",
                  "--max-minutes", "0.05")
    assert bad.returncode == 2 and "catalog:-5" in _one_line_error(bad.stderr)
