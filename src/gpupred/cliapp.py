"""Run a typer app as the ``gpupred`` command does: a GpupredError is one line on stderr and exit 2.

Below every module of :mod:`gpupred.cli`, so a stage's own entry point
(``python -m gpupred.cli.profile``) runs its commands the same way without importing the whole command.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from gpupred.errors import GpupredError


def new_app(name: str | None = None, help: str | None = None, **options: Any) -> typer.Typer:
    """A typer app (or command group) as every ``gpupred`` command makes one: plain help (no rich rendering, which
    costs half a second of imports on every call), no shell completion, no pretty tracebacks."""
    settings: dict[str, Any] = {"no_args_is_help": True, "add_completion": False, "pretty_exceptions_enable": False,
                                "rich_markup_mode": None}
    return typer.Typer(name=name, help=help, **{**settings, **options})


def run_app(typer_app: typer.Typer, argv: list[str] | None = None) -> None:
    """Run a typer app, turning a :class:`GpupredError` into one line on stderr and exit 2."""
    try:
        code = typer_app(args=argv, standalone_mode=False)
    except GpupredError as err:
        print(f"gpupred: error: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    except typer.Abort:
        print("gpupred: aborted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as err:  # usage errors (click's, or the copy typer vendors) carry their own exit code
        if any(c.__name__ == "ClickException" for c in type(err).__mro__):
            err.show()  # type: ignore[attr-defined]
            raise SystemExit(err.exit_code) from None  # type: ignore[attr-defined]
        raise
    if isinstance(code, int) and code:
        raise SystemExit(code)
