"""``gpupred profile`` and ``gpupred sweep`` (torch is imported only by the profiled child processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional


def register(app: Any) -> None:
    """Add ``profile`` and ``sweep`` to the CLI."""
    import typer

    @app.command("profile")
    def profile_cmd(
        workload_id: str = typer.Argument(..., help="Workload id, e.g. resnet.resnet50-bs64-img224-bf16-sgd."),
        window_s: Optional[float] = typer.Option(None, "--window-s", help="Measured window in seconds (default 4; 0.5 dry)."),
        host_batches: bool = typer.Option(False, "--host-batches", help="Copy a host batch to the GPU every step."),
        dry_run: bool = typer.Option(False, "--dry-run", help="CPU and fake NVML: output is simulated, never data."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Profile one workload on this machine's GPU and print a summary (nothing is written)."""
        from gpupred.profile.sweep import profile_one

        summary = profile_one(workload_id, window_s, dry_run, host_batches)
        if as_json:
            print(json.dumps(summary))
            return
        for key, value in summary.items():
            if value not in (None, ""):
                print(f"{key:26s} {value}")

    @app.command("sweep")
    def sweep_cmd(
        plan: str = typer.Option(..., "--plan", help="catalog, catalog:N, catalog:family=a,b, fused[:N] or a file of ids / 'id + id' groups."),
        out: Optional[Path] = typer.Option(None, "--out", help="Sweep folder: data/raw/<gpu>/<sweep-id> (dry runs: data/dryrun/...)."),
        max_minutes: Optional[float] = typer.Option(None, "--max-minutes", help="Stop cleanly before this many minutes."),
        executor: str = typer.Option("local", "--executor", help="local or ray."),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (ray executor)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="CPU and fake NVML: output is simulated, never data."),
        window_s: Optional[float] = typer.Option(None, "--window-s", help="Measured window in seconds."),
        limit: Optional[int] = typer.Option(None, "--limit", help="Only the plan's first N units."),
        host_batches: bool = typer.Option(False, "--host-batches", help="Copy a host batch to the GPU every step."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
    ) -> None:
        """Run or resume a sweep: each finished unit is written atomically; finished units are skipped."""
        from gpupred.profile.sweep import run_sweep

        summary = run_sweep(plan, out, max_minutes=max_minutes, executor=executor, address=address, dry_run=dry_run,
                            window_s=window_s, limit=limit, host_batches=host_batches)
        if as_json:
            print(json.dumps({"out": str(summary.out), "planned": summary.planned, "already_done": summary.already_done,
                              "done_now": summary.done_now, "statuses": dict(summary.statuses),
                              "stopped": summary.stopped, "remaining": summary.remaining}))
        else:
            print(summary.line())


def main(argv: list[str] | None = None) -> None:
    """``python -m gpupred.profile.cli``: the profiler's commands alone (same one-line errors, exit 2)."""
    import typer

    from gpupred.cli import run_app

    app = typer.Typer(name="gpupred-profile", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    register(app)
    run_app(app, argv)


if __name__ == "__main__":
    main()
