"""The gpupred command: every stage's commands attached; usage and user errors exit 2 without a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _gpupred(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpupred.cli", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_stage() -> None:
    out = _gpupred("--help")
    assert out.returncode == 0
    for command in ("zoo", "features", "profile", "sweep", "predict", "pipeline"):
        assert command in out.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (("predict",), "give MODEL (an .onnx file or a workload id), or --timm NAME, or --hf MODEL"),  # GpupredError
        (("predict", "--no-such-flag"), "No such option"),  # usage error (typer's vendored click)
        (("no-such-command",), "No such command"),
        (("features", "--workload", "nope"), "not a workload id: 'nope'"),  # GpupredError
    ],
)
def test_errors_exit_2_without_traceback(args: tuple[str, ...], needle: str) -> None:
    out = _gpupred(*args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


LIGHT_CLI_FORBIDDEN = ("numpy", "pandas", "sklearn", "scipy", "lightgbm", "xgboost", "onnx", "torch", "matplotlib",
                       "rich.markdown")


def test_cli_starts_light() -> None:
    """Parsing the command line (every stage's commands registered, --help rendered) imports none of the heavy
    libraries: each command imports what it needs when it runs (`gpupred --help` goal: <= 0.5 s, benchmarks/bench_cli.py)."""
    code = ("import sys, contextlib, io\n"
            "from gpupred import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        cli.main(['--help'])\n    except SystemExit:\n        pass\n"
            f"heavy = sorted({{m for m in sys.modules if m in {LIGHT_CLI_FORBIDDEN!r} or m.split('.')[0] in {LIGHT_CLI_FORBIDDEN!r}}})\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"`gpupred --help` imported {out.stdout.strip()}"
