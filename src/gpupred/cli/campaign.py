"""``gpupred campaign next|plan|unpack|carry``: the measurement campaign's queue on a lent GPU (docs/remote-sweeps.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional


def register(app: Any) -> None:
    """Add the ``campaign`` command group to the CLI."""
    from gpupred.cliapp import new_app

    campaign_app = new_app("campaign", "One prioritized queue of GPU measurements, run a call at a time on a lent GPU.")
    app.add_typer(campaign_app, name="campaign")
    for add in (_register_next, _register_plan, _register_unpack, _register_carry):
        add(campaign_app)


def _gpu(gpu: Optional[str]) -> str:
    """The GPU kind: ``--gpu``, else the visible GPU's (NVML); a one-line GpupredError without either."""
    from gpupred.campaign.stages import gpu_kind

    if gpu:
        return gpu_kind(gpu) if not gpu.isalnum() else gpu.lower()
    from gpupred.campaign.executors import DeviceExecutor
    from gpupred.errors import GpupredError
    from gpupred.profile.nvml import probe

    why = probe()
    if why is not None:
        raise GpupredError(f"no GPU here ({why}); name its kind with --gpu h100 or --gpu h200")
    return gpu_kind(DeviceExecutor().identity()[0])


def _register_next(campaign_app: Any) -> None:
    import typer

    from gpupred.campaign.stages import MARGIN_MINUTES

    @campaign_app.command("next")
    def next_cmd(
        minutes: float = typer.Option(..., "--minutes", help="This call's time budget; it stops cleanly before it."),
        out: Path = typer.Option(..., "--out", help="Where the tarball and the summary go (on a lent GPU: $OUT)."),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="The GPU kind (default: the visible GPU's, by NVML)."),
        margin: float = typer.Option(MARGIN_MINUTES, "--margin-minutes", help="Minutes kept free at the end."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Simulated units on the CPU under data/dryrun "
                                                              "(never data); needs --gpu."),
    ) -> None:
        """Run the queue's next units: a smoke test on a machine's first call, then each stage in priority order
        while units fit; every unit written atomically; one tarball in OUT and one summary line per stage."""
        from gpupred.campaign.execute import run_next
        from gpupred.campaign.executors import DeviceExecutor, SimulatedExecutor
        from gpupred.campaign.stages import Layout
        from gpupred.errors import GpupredError

        if dry_run:
            if not gpu:
                raise GpupredError("--dry-run needs --gpu (h100 or h200): a simulated campaign has no GPU to ask")
            executor: Any = SimulatedExecutor.from_env(_gpu(gpu))
        else:
            from gpupred.profile.nvml import require_gpu

            require_gpu()
            executor = DeviceExecutor()
        outcome = run_next(executor, _gpu(gpu), Layout.default(simulated=dry_run), minutes, out, margin)
        print("\n".join(outcome.lines))


def _register_plan(campaign_app: Any) -> None:
    import typer

    from gpupred.campaign.stages import MARGIN_MINUTES

    @campaign_app.command("plan")
    def plan_cmd(
        gpu: Optional[str] = typer.Option(None, "--gpu", help="The GPU kind (default: the visible GPU's, by NVML)."),
        minutes: float = typer.Option(8.0, "--minutes", help="The next call's budget, for its planned units."),
        margin: float = typer.Option(MARGIN_MINUTES, "--margin-minutes", help="Minutes kept free at the end."),
        smoke: bool = typer.Option(True, "--smoke/--no-smoke", help="Count the smoke test of a fresh machine."),
        list_units: bool = typer.Option(False, "--list", help="Also list the next call's units."),
        dry_run: bool = typer.Option(False, "--dry-run", help="The dry-run campaign's queue (data/dryrun)."),
    ) -> None:
        """The queue, no GPU needed: each stage's units left and estimated minutes, or why it is skipped."""
        from gpupred.campaign.execute import queue_report
        from gpupred.campaign.stages import Layout

        lines, planned = queue_report(_gpu(gpu), Layout.default(simulated=dry_run), minutes, margin, smoke)
        print("\n".join(lines))
        if list_units:
            for w in planned:
                print(f"  {w.stage} {w.part.kind:9s} {w.key}  ~{w.seconds:.0f} s")


def _register_unpack(campaign_app: Any) -> None:
    import typer

    @campaign_app.command("unpack")
    def unpack_cmd(
        tarball: Path = typer.Argument(..., help="A tarball `campaign next` wrote (from the device tool's files_at)."),
    ) -> None:
        """Put a campaign tarball's files under data/raw and data/calibrations; nothing is ever overwritten
        (exit 2 when a file there differs: it is left as it is)."""
        from gpupred import config
        from gpupred.campaign.pack import unpack
        from gpupred.errors import GpupredError

        done = unpack(tarball, config.ROOT)
        print(f"{tarball}: {done.line()}")
        if done.conflicts:
            raise GpupredError(f"{tarball}: {len(done.conflicts)} files differ from those already here and were not "
                               f"overwritten (first: {done.conflicts[0]})")


def _register_carry(campaign_app: Any) -> None:
    @campaign_app.command("carry")
    def carry_cmd() -> None:
        """Here, before the device call (needs pip's registry): fetch what the GPU image lacks (jsonschema,
        platformdirs, bitsandbytes for stage 3) and unpack it into .carry/site for the call's carry."""
        from gpupred import config
        from gpupred.campaign.carry import CARRY_DIR, prepare

        site, size = prepare(config.ROOT)
        print(f"{site}: {size / 2**20:.1f} MiB unpacked; in the device call: carry [\"{CARRY_DIR}\"] and "
              f"export PYTHONPATH=$PWD/{CARRY_DIR}/site:$PWD/src")
