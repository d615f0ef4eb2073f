"""``gpupred trace``: record kernel-trace summaries of catalog specs, summarize a trace, compare the step model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

EXIT_UNITS_LEFT = 3  # as `gpupred sweep`: stopped cleanly with specs left; run the same command to resume


def register(app: Any) -> None:
    """Add ``gpupred trace run|summarize|compare`` to the CLI."""
    import typer

    trace_app = typer.Typer(help="Kernel traces of training steps (torch.profiler) and the step model against them.",
                            no_args_is_help=True)
    app.add_typer(trace_app, name="trace")
    _register_run(trace_app)
    _register_summarize(trace_app)
    _register_compare(trace_app)


def _register_run(trace_app: Any) -> None:
    import typer

    from gpupred.traces.runner import DEFAULT_STEPS, DEFAULT_WARMUP

    @trace_app.command("run")
    def run_cmd(
        plan: str = typer.Option(..., "--plan", help="Solo specs: a plan file (e.g. plans/traces.txt) or catalog:N."),
        out: Path = typer.Option(..., "--out", help="The GPU's sweep folder: data/raw/<gpu>/<sweep-id> (traces/ inside)."),
        steps: int = typer.Option(DEFAULT_STEPS, "--steps", help="Profiled steps per spec."),
        warmup: int = typer.Option(DEFAULT_WARMUP, "--warmup", help="Unprofiled steps before them."),
        max_minutes: float = typer.Option(None, "--max-minutes", help="Stop cleanly before this many minutes."),
        limit: int = typer.Option(None, "--limit", help="Only the plan's first N specs."),
    ) -> None:
        """Profile each spec's training steps on the GPU and write their summaries (resumes; exit 3: specs left)."""
        from gpupred.errors import GpupredError
        from gpupred.profile.units import load_plan
        from gpupred.traces.runner import run_traces

        units = load_plan(plan, limit)
        groups = [u.label for u in units if len(u.specs) != 1]
        if groups:
            raise GpupredError(f"{plan}: kernel traces are of solo specs; {groups[0]!r} is a co-located group")
        summary = run_traces([u.specs[0] for u in units], out, steps, warmup, max_minutes=max_minutes)
        print(summary.line())
        if summary.planned > summary.done + summary.skipped:
            print(f"gpupred: trace stopped: {summary.planned - summary.done - summary.skipped} specs left; run the "
                  "same command to resume", file=sys.stderr)
            raise typer.Exit(EXIT_UNITS_LEFT)


def _register_summarize(trace_app: Any) -> None:
    import typer

    @trace_app.command("summarize")
    def summarize_cmd(
        trace: Path = typer.Argument(..., help="A Chrome trace (.json or .json.gz) from torch.profiler."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON records."),
    ) -> None:
        """Per profiled step: kernels, GPU-busy and host time, and per op class kernels and time."""
        import pandas as pd

        from gpupred.traces.tracetable import summarize_trace

        frame = pd.DataFrame(summarize_trace(trace))
        print(frame.to_json(orient="records") if as_json else frame.T.to_string())


def _register_compare(trace_app: Any) -> None:
    import typer

    @trace_app.command("compare")
    def compare_cmd(
        root: Path = typer.Argument(..., help="A sweep folder with traces/ (or a tree of them, e.g. data/raw)."),
        calibration: Path = typer.Option(None, "--calibration", help="Predict with this calibration's constants "
                                                                     "(default: the published defaults)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """The step model's kernel count, GPU-busy and host time against the traces: per family, per op-class group."""
        from gpupred.errors import GpupredError
        from gpupred.traces.compare import compare_traces, error_table, group_table
        from gpupred.traces.tracetable import read_traces

        traces = read_traces(root)
        if traces.empty:
            raise GpupredError(f"{root}: no kernel-trace summaries (traces/*.parquet) there; `gpupred trace run` "
                               "records them on a GPU")
        constants = None
        if calibration is not None:
            from gpupred.calibration.file import read_calibration

            constants = read_calibration(calibration).derived().constants()
        comparison = compare_traces(traces, constants)
        errors, groups = error_table(comparison), group_table(comparison)
        if as_json:
            print(json.dumps({"families": errors.to_dict("records"), "groups": groups.to_dict("records")}))
            return
        print(errors.to_string(index=False, float_format="%.3f"))
        print()
        print(groups.to_string(index=False, float_format="%.3f"))
        print("errors: log(predicted / measured); median_abs and p90_abs of their absolute values, median signed")
