"""The error a user can act on: one line naming the file or id and the problem."""

from __future__ import annotations


class GpupredError(Exception):
    """A user-facing error; the CLI prints ``str(err)`` on one line and exits with code 2."""

    exit_code = 2

    def __str__(self) -> str:  # keep it to one line whatever the message holds
        return " ".join(super().__str__().split())


class MissingInput(GpupredError):
    """A stage's input is not there yet; the pipeline skips the notebook that needs it and says why."""
