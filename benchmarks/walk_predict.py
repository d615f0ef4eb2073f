"""Which of gpupred's modules one ``gpupred predict FILE`` call walks through, in call order (issue 74 item 5).

It runs the command in-process twice (the first warms the caches, as a scheduler's process is warm) and traces the
second with ``sys.setprofile``: every call whose code lives in a gpupred module is one step of the walk, a step into
the module the call is already in is not counted again. It prints the modules in first-visit order and how often the
walk came back to a module it had left, leaf modules aside (``LEAVES``: shared by every package, they are entered and
left all the time). Module-level code is not part of the walk: typer evaluates every command's string annotations
in its module at each invocation.
Run: ``python benchmarks/walk_predict.py [FILE.onnx] [--gpu H100] [--batch-size 32] [--full]`` (default: the graph
store's AlexNet at 224 px; ``--full`` prints every step).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

LEAVES = ("gpupred.hardware", "gpupred.setups", "gpupred.errors", "gpupred.config", "gpupred.files", "gpupred.columnar")


def walk(argv: list[str]) -> list[str]:
    """The gpupred modules entered, in order, by ``gpupred`` with ``argv`` (consecutive repeats collapsed)."""
    from gpupred.cli import app, main

    try:  # registers the commands (and warms every cache)
        main(argv)
    except SystemExit:
        pass
    steps: list[str] = []

    def trace(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and frame.f_code.co_name != "<module>":  # not typer evaluating every command's annotations
            name = frame.f_globals.get("__name__", "")
            if name.startswith("gpupred") and (not steps or steps[-1] != name):
                steps.append(name)

    sys.setprofile(trace)
    try:
        app(args=argv, standalone_mode=False)
    finally:
        sys.setprofile(None)
    return steps


def summary(steps: list[str]) -> tuple[list[str], int]:
    """(modules in first-visit order, returns to a module left before, leaves aside: a step into a leaf and back is
    not a return to the module it left)."""
    seen: list[str] = []
    returns = 0
    previous = None
    for name in (s for s in steps if s not in LEAVES):
        if name in seen and seen[-1] != name and name != previous:
            returns += 1
        if name not in seen:
            seen.append(name)
        previous = name
    return seen, returns


def main() -> None:
    from gpupred import config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", help="an ONNX file (default: the graph store's AlexNet)")
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--batch-size", default="32")
    parser.add_argument("--full", action="store_true", help="print every step, not only the summary")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file
        if path is None:
            path = str(Path(tmp) / "alexnet.onnx")
            with gzip.open(config.GRAPHS / "alexnet.alexnet-img224.onnx.gz") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
        steps = walk(["predict", path, "--batch-size", args.batch_size, "--gpu", args.gpu])
    modules, returns = summary(steps)
    print(f"{len(modules)} modules (leaves aside: {', '.join(m.removeprefix('gpupred.') for m in LEAVES)}), "
          f"{returns} returns to a module left before, {len(steps)} steps")
    print(" -> ".join(m.removeprefix("gpupred.") for m in modules))
    if args.full:
        print(" -> ".join(s.removeprefix("gpupred.") for s in steps))


if __name__ == "__main__":
    main()
