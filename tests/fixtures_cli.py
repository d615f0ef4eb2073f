"""The ``gpupred`` command run in the test's own process, for tests that read what it prints."""

from __future__ import annotations

import pytest


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``gpupred`` with ``argv`` in this process: exit code, stdout, stderr."""
    from gpupred.cli import main

    code = 0
    try:
        main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
