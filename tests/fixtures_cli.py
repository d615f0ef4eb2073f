"""The ``gpupred`` command run in the test's own process, for tests that read what it prints; and in a fresh
interpreter, for what forks DataLoader workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILDREN_MARK = "__gpupred_children_alive__="

FRESH_CLI = f"""
import multiprocessing, sys
from gpupred.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as stop:
    code = int(stop.code or 0)
print("\\n{CHILDREN_MARK}" + str(len(multiprocessing.active_children())))
sys.exit(code)
"""


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


def run_python_fresh(code: str, argv: list[str] | None = None, cwd: Path | None = None,
                     env: dict[str, str] | None = None, timeout: float = 150.0) -> tuple[int, str, str]:
    """Run ``code`` in a fresh interpreter (this one's ``sys.executable``): exit code, stdout, stderr.

    For what forks DataLoader workers: a test process carries the threads of every test before it (pyarrow's
    jemalloc, a notebook client's event loop, tqdm's monitor), and a fork taken while one of them holds a lock can
    hang in C, where no signal reaches it. A fresh interpreter forks with none of them; ``timeout`` ends a hang as a
    failure of its test.
    """
    full_env = {**os.environ, **(env or {})}
    # a hang shows where it is: every thread's stack goes to stderr (and the child exits) a little before the timeout
    dump_at = max(timeout - 10.0, 0.9 * timeout)  # a short timeout keeps nine tenths of itself for the child
    watch = f"import faulthandler; faulthandler.dump_traceback_later({dump_at:g}, exit=True)\n"
    try:
        done = subprocess.run([sys.executable, "-c", watch + code, *(argv or [])], capture_output=True, text=True,
                              cwd=cwd, env=full_env, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"a fresh interpreter ran past {timeout:g} s (a hang?); stdout: {_text(err.stdout)[-1000:]}; "
                    f"stderr: {_text(err.stderr)[-3000:]}")
    if "Timeout (0:" in done.stderr and "Thread 0x" in done.stderr:  # faulthandler's dump: the child hung
        pytest.fail(f"a fresh interpreter hung for {dump_at:g} s; stdout: {done.stdout[-1000:]}; "
                    f"its threads: {done.stderr[-6000:]}")
    return done.returncode, done.stdout, done.stderr


def _text(data: str | bytes | None) -> str:
    """What a timed-out child wrote, as text (subprocess hands it back as bytes even in text mode)."""
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def run_cli_fresh(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
                  timeout: float = 150.0) -> tuple[int, str, str, int]:
    """Run ``gpupred`` with ``argv`` in a fresh interpreter (:func:`run_python_fresh`): exit code, stdout, stderr
    and how many of its child processes were still alive when the command returned."""
    code, out, err = run_python_fresh(FRESH_CLI, argv, cwd=cwd, env=env, timeout=timeout)
    out, mark, alive = out.rpartition("\n" + CHILDREN_MARK)
    assert mark, f"the command did not return (exit {code}): {err[-2000:]}"
    return code, out, err, int(alive.strip())
