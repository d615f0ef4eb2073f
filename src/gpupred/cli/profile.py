"""``gpupred profile`` and ``gpupred sweep`` (torch is imported only by the profiled child processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

from gpupred.errors import GpupredError

EXIT_UNITS_LEFT = 3  # `gpupred sweep` stopped cleanly with units left: run the same command to resume


def _check_count(value: int | None, flag: str, least: int = 1) -> None:
    """A one-line GpupredError unless ``value`` (when given) is at least ``least``."""
    if value is not None and value < least:
        raise GpupredError(f"{flag} {value}: must be at least {least}")


def register(app: Any) -> None:
    """Add ``profile``, ``sweep``, ``datacard`` and the ``plan`` group to the CLI."""
    _register_profile(app)
    _register_sweep(app)
    _register_datacard(app)
    _register_plan(app)


def _register_datacard(app: Any) -> None:
    """Add ``datacard``: a sweep's sanity checks and its data card (pandas imported when it runs)."""
    import typer

    @app.command("datacard")
    def datacard_cmd(
        sweep_dir: Path = typer.Argument(..., help="A sweep folder, e.g. data/raw/h100/<sweep-id>."),
        write: bool = typer.Option(False, "--write", help="Write (refresh) its README.md, keeping the Notes section."),
        as_json: bool = typer.Option(False, "--json", help="Print the checks as one JSON object."),
    ) -> None:
        """Sanity-check a sweep (utilization range and steadiness, samples, memory) and draft its data card."""
        from gpupred.profile.datacard import datacard_text, sanity, write_datacard

        if not sweep_dir.is_dir():
            raise GpupredError(f"{sweep_dir}: no such sweep folder")
        checks, per_family = sanity(sweep_dir)
        if as_json:
            typer.echo(json.dumps({**checks, "per_family": json.loads(per_family.to_json(orient="index"))}))
        else:
            typer.echo(datacard_text(sweep_dir))
        if write:
            typer.echo(f"wrote {write_datacard(sweep_dir)}")


def _register_profile(app: Any) -> None:
    """Add ``profile``: one workload on this machine's GPU, summary printed."""
    import typer

    @app.command("profile")
    def profile_cmd(
        workload_id: str = typer.Argument(..., help="Workload id, e.g. resnet.resnet50-bs64-img224-bf16-sgd, optionally "
                                          "with a plan line's pipeline options: 'ID pipeline=image-files workers=8 pin=1'."),
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


def _register_sweep(app: Any) -> None:
    """Add ``sweep``: run or resume a sweep plan into a sweep folder."""
    import typer

    @app.command("sweep")
    def sweep_cmd(
        plan: str = typer.Option(..., "--plan", help="catalog, catalog:N, catalog:family=a,b, fused[:N] or a file of ids / 'id + id' groups."),
        out: Optional[Path] = typer.Option(None, "--out", help="Sweep folder: data/raw/<gpu>/<sweep-id> (dry runs: data/dryrun/...)."),
        max_minutes: Optional[float] = typer.Option(None, "--max-minutes", help="Stop cleanly before this many minutes."),
        executor: str = typer.Option("local", "--executor", help="local or ray."),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (ray executor)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="CPU and fake NVML: output is simulated, never data."),
        window_s: Optional[float] = typer.Option(None, "--window-s", help="Measured window in seconds."),
        limit: Optional[int] = typer.Option(None, "--limit", help="Only the plan's first N units (N >= 1)."),
        host_batches: bool = typer.Option(False, "--host-batches", help="Copy a host batch to the GPU every step."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
    ) -> None:
        """Run or resume a sweep: each finished unit is written atomically; finished units are skipped.

        Exit codes: 0 every planned unit is finished;
        3 stopped cleanly with units left (time budget, SIGTERM, SIGINT): run the same command to resume;
        2 bad input (one line on stderr).
        """
        from gpupred.profile.sweep import SweepOptions, harness_config, run_sweep

        _check_count(limit, "--limit")
        if max_minutes is not None and not max_minutes > 0:
            raise GpupredError(f"--max-minutes {max_minutes:g}: must be more than 0 (leave it out for no time budget)")
        options = SweepOptions(dry_run=dry_run, max_minutes=max_minutes, limit=limit, executor=executor,
                               address=address)
        summary = run_sweep(plan, out, options, harness_config(dry_run, window_s, host_batches))
        if as_json:
            print(json.dumps({"out": str(summary.out), "planned": summary.planned, "already_done": summary.already_done,
                              "done_now": summary.done_now, "statuses": dict(summary.statuses),
                              "stopped": summary.stopped, "remaining": summary.remaining}))
        else:
            print(summary.line())
        if summary.remaining > 0:  # exit 0 means every planned unit is finished, nothing less
            why = f" ({' '.join(summary.stopped.split())})" if summary.stopped else ""
            print(f"gpupred: sweep stopped{why}: {summary.remaining} units left; run the same command to resume",
                  file=sys.stderr)
            raise typer.Exit(EXIT_UNITS_LEFT)


def _register_plan(app: Any) -> None:
    """Add the ``plan`` command group: plan files for sweeps, some chosen from earlier solo runs."""
    from gpupred import config
    from gpupred.cliapp import new_app

    plan_app = new_app("plan", "Write sweep plan files (plans/*.txt) for `gpupred sweep --plan FILE`.")
    app.add_typer(plan_app, name="plan")
    plans_dir = config.ROOT / "plans"
    for add in (_plan_pairs, _plan_subset, _plan_solo, _plan_sync, _plan_fused, _plan_fusion_coloc, _plan_estimate,
                _plan_realworld):
        add(plan_app, plans_dir)


def _plan_pairs(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan pairs`` (and its ``--matrix`` form)."""
    import typer

    @plan_app.command("pairs")
    def pairs_cmd(
        source: Path = typer.Option(..., "--from", help="Solo sweep of one GPU kind, e.g. data/raw/h100/<sweep-id>."),
        matrix: bool = typer.Option(False, "--matrix", help="The pair matrix (issue 59): reference jobs x jobs, all "
                                                            "pairs among a few, repeats, fresh solo runs."),
        n: int = typer.Option(110, "--n", help="Number of 2-job pairs (not with --matrix)."),
        groups: int = typer.Option(6, "--groups", help="Number of 3- and 4-job groups, alternating (not with --matrix)."),
        jobs: int = typer.Option(30, "--jobs", help="--matrix: jobs besides the 4 references."),
        all_pairs: int = typer.Option(8, "--all", help="--matrix: jobs whose every pair is measured."),
        repeated: int = typer.Option(10, "--repeated", help="--matrix: reference pairs measured again."),
        repeats: int = typer.Option(3, "--repeats", help="--matrix: measurements of each repeated pair in all."),
        probes: int = typer.Option(2, "--probes", help="--matrix: memory probes (scaled-up heavy jobs; 0: none)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the (deterministic) choice."),
        out: Optional[Path] = typer.Option(None, "--out", help="Plan file to write (default plans/h100-pairs.txt; "
                                                               "with --matrix plans/<gpu>-pairs-matrix.txt)."),
    ) -> None:
        """Co-located pairs from solo runs: spanning summed utilization with 3-4 job groups, or the pair matrix."""
        if matrix:
            from gpupred.profile.pair_matrix import MatrixSettings

            for value, flag, least in ((jobs, "--jobs", 1), (all_pairs, "--all", 0), (repeated, "--repeated", 0),
                                       (repeats, "--repeats", 1), (probes, "--probes", 0)):
                _check_count(value, flag, least)
            settings = MatrixSettings(jobs, all_pairs, repeated, repeats, probes, seed=seed)
            _write_matrix(source, settings, out or plans_dir / f"{_gpu_folder(source)}-pairs-matrix.txt")
            return
        from gpupred.profile.plans import build_pairs, write_plan

        _check_count(n, "--n")
        _check_count(groups, "--groups", 0)
        out = out or plans_dir / "h100-pairs.txt"
        built = build_pairs(source, n, groups, seed)
        write_plan(out, built.lines, [
            "Co-located pairs and 3-4 job groups (issue 5 item 1): `gpupred sweep --plan <this file>`.",
            f"`gpupred plan pairs --from {source} --n {n} --groups {groups} --seed {seed}`",
            built.summary,
            "annotations: sum_util = summed solo mean polled gpu_util (%), mem = summed peak solo memory / card memory",
        ])
        print(f"{out}: {built.summary}")


def _gpu_folder(source: Path) -> str:
    """The GPU folder of a sweep under data/raw (``data/raw/h200/<sweep-id>`` -> ``h200``), else ``gpu``."""
    parts = Path(source).resolve().parts
    return parts[-2] if len(parts) >= 3 and parts[-3] == "raw" else "gpu"


def _shown(path: Path) -> str:
    """A path as a command in a plan's header shows it: relative to the repository root when it lies under it."""
    from gpupred import config

    try:
        return str(Path(path).resolve().relative_to(config.ROOT))
    except ValueError:
        return str(path)


def _write_matrix(source: Path, settings: Any, out: Path) -> None:
    """Build, write and describe the pair-matrix plan (its GPU time from the source sweep's manifests)."""
    from gpupred.profile.pair_matrix import build_matrix, reference_notes
    from gpupred.profile.plans import plan_cost, write_plan

    built = build_matrix(source, settings)
    cost = plan_cost(len(built.lines), source)
    first = plan_cost(int(built.details["matrix_units"]), source)
    s = settings
    command = (f"`gpupred plan pairs --matrix --from {_shown(source)} --jobs {s.n_jobs} --all {s.n_all} --repeated "
               f"{s.n_repeated} --repeats {s.repeats} --probes {s.memory_probes} --seed {s.seed} --out {_shown(out)}`")
    write_plan(out, built.lines, [
        "Pair matrix (issue 59 item 1): `gpupred sweep --plan <this file> --out data/raw/<gpu>/<sweep-id> --max-minutes 8`,",
        "in chunks (docs/remote-sweeps.md). Regenerate with",
        command,
        built.summary,
        *reference_notes(source, settings),
        f"GPU time: {cost.line()}; the reference matrix (first {first.units} units): {first.minutes:.0f} minutes, "
        f"{first.chunks()} chunks",
        "Solo lines measure each member again in this sweep, just before its pairs (the solo sweep's runs are the",
        "earlier baseline: `gpupred datacard` compares them); `repeat=K` is the K-th measurement of the same unit.",
        "annotations: sum_util = summed solo mean polled gpu_util (%), mem = summed solo memory / card memory; a memory",
        "probe's memory is extrapolated linearly in the batch from its job's solo run (an upper estimate)",
    ])
    print(f"{_shown(out)}: {built.summary}")
    print(f"GPU time: {cost.line()}")
    print(f"the reference matrix (first {first.units} units): {first.minutes:.0f} GPU minutes, {first.chunks()} chunks")


def _plan_subset(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan subset``."""
    import typer

    @plan_app.command("subset")
    def subset_cmd(
        source: Path = typer.Option(..., "--from", help="Solo sweep of one GPU kind, e.g. data/raw/h100/<sweep-id>."),
        n: int = typer.Option(90, "--n", help="Number of solo specs."),
        seed: int = typer.Option(0, "--seed", help="Seed of the (deterministic) choice."),
        out: Path = typer.Option(plans_dir / "h200-subset.txt", "--out", help="Plan file to write."),
    ) -> None:
        """Solo specs with ok runs, round-robin over every family, to rerun on another GPU kind."""
        from gpupred.profile.plans import build_subset, write_plan

        _check_count(n, "--n")
        built = build_subset(source, n, seed)
        write_plan(out, built.lines, [
            "Solo subset to rerun on another GPU kind, paired with the source (issue 5 item 2).",
            f"`gpupred plan subset --from {source} --n {n} --seed {seed}`",
            built.summary,
        ])
        print(f"{out}: {built.summary}")


def _plan_solo(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan solo``."""
    import typer

    @plan_app.command("solo")
    def solo_cmd(
        n: int = typer.Option(180, "--n", help="The first N catalog specs."),
        out: Path = typer.Option(plans_dir / "h100-solo.txt", "--out", help="Plan file to write."),
    ) -> None:
        """The first N catalog ids in catalog order (the units of ``catalog:N``), for the solo sweep."""
        from gpupred.profile.plans import solo_plan, write_plan

        _check_count(n, "--n")
        lines = solo_plan(n)
        write_plan(out, lines, [
            f"Solo sweep of the catalog (issue 4): the same units as `--plan catalog:{n}`, in catalog order.",
            f"Why {n}: issue 4 needs >= 150 ok solo runs over every family and some specs will OOM or fail, so spares.",
            "The catalog is round-robin over its families, so any prefix (a sweep cut short) stays balanced.",
            f"`gpupred plan solo --n {n}`",
        ])
        print(f"{out}: {len(lines)} solo specs over {len({x.split('.', 1)[0] for x in lines})} families")


def _plan_realworld(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan realworld``."""
    import typer

    @plan_app.command("realworld")
    def realworld_cmd(
        out: Path = typer.Option(plans_dir / "realworld-solo.txt", "--out", help="Plan file to write."),
    ) -> None:
        """Every real-world spec (timm and Hugging Face architectures; not in the catalog), for a solo sweep."""
        from gpupred.profile.plans import realworld_plan, write_plan

        lines = realworld_plan()
        write_plan(out, lines, [
            "Solo sweep of the real-world architectures (issue 40): timm and Hugging Face models built by name from",
            "code and configs (gpupred.workloads.realworld), each at 3-4 batch sizes in fp32 and bf16, Adam for",
            "transformers. Interleaved over architectures, so any prefix (a sweep cut short) stays balanced; the",
            "largest batches may run out of memory on an 80 GB card, and such runs are kept as such.",
            "`gpupred plan realworld`",
        ])
        print(f"{out}: {len(lines)} solo specs over {len({x.split('.', 1)[0] for x in lines})} families")


def _plan_sync(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan sync`` and ``plan launch-blocking``."""
    import typer

    @plan_app.command("sync")
    def sync_cmd(
        n: int = typer.Option(180, "--n", help="The solo plan's size (specs are chosen from the first N)."),
        out: Path = typer.Option(plans_dir / "sync.txt", "--out", help="Plan file to write."),
    ) -> None:
        """Small and large specs of every kind of family, each with sync=step and sync=window."""
        from gpupred.profile.plans import sync_plan

        _check_count(n, "--n")
        _write_paired(out, sync_plan(n), [
            "Synchronization comparison (profiler correctness issue, item 2): each spec with sync=step (a loop that",
            "reads its loss every step) and sync=window (CUDA-event timing, one synchronize per window).",
            "Run it into the solo sweep's folder: its sync=step units are the solo sweep's own and are skipped there.",
            f"`gpupred plan sync --n {n}`",
        ])

    @plan_app.command("launch-blocking")
    def launch_blocking_cmd(
        n: int = typer.Option(180, "--n", help="The solo plan's size (specs are chosen from the first N)."),
        out: Path = typer.Option(plans_dir / "launch-blocking.txt", "--out", help="Plan file to write."),
    ) -> None:
        """Small and large specs of Lucid's families, each with sync=step and sync=kernel (CUDA_LAUNCH_BLOCKING=1)."""
        from gpupred.profile.plans import launch_blocking_plan

        _check_count(n, "--n")
        _write_paired(out, launch_blocking_plan(n), [
            "Launch blocking (the input-pipeline issue's Lucid goals): the families of Lucid's published runs, each",
            "spec with sync=step and sync=kernel (CUDA_LAUNCH_BLOCKING=1, Lucid's protocol), so that the step model's",
            "kernel protocol is fitted on this project's own runs. Run it into the solo sweep's folder: its sync=step",
            f"units are the solo sweep's own and are skipped there. `gpupred plan launch-blocking --n {n}`",
        ])


def _write_paired(out: Path, lines: list[str], header: list[str]) -> None:
    """Write a plan of specs each in two sync modes, and say how many units it holds."""
    from gpupred.profile.plans import write_plan

    write_plan(out, lines, header)
    print(f"{out}: {len(lines)} units ({len(lines) // 2} specs x 2 sync modes)")


def _plan_fused(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan fused``."""
    import typer

    @plan_app.command("fused")
    def fused_cmd(
        out: Path = typer.Option(plans_dir / "fusion.txt", "--out", help="Plan file to write."),
    ) -> None:
        """Every fused catalog spec (the units of ``fused``), for the inter-trial fusion sweep."""
        from gpupred.profile.plans import fused_plan, write_plan

        lines = fused_plan()
        write_plan(out, lines, [
            "Fused hyper-parameter trials (issue 41 item 1, first filed as issue 8): every fused catalog spec, the same",
            "units as `--plan fused`: resnet18 and mobilenet_v2 at 32x32, an MLP, an LSTM language model and a small",
            "Transformer encoder (bert), x F in 1,2,4,8,16,32,64 x fp32/bf16, F ascending, models interleaved (any prefix",
            "covers every model); a large F may run out of memory (kept as such, status oom).",
            "Then plans/fusion-coloc.txt into the same sweep folder. GPU time: `gpupred plan estimate <this file> --from",
            "data/raw/<gpu>/<solo sweep>`. Regenerate with `gpupred plan fused`",
        ])
        print(f"{out}: {len(lines)} fused specs")


def _plan_fusion_coloc(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan fusion-coloc``."""
    import typer

    @plan_app.command("fusion-coloc")
    def fusion_coloc_cmd(
        out: Path = typer.Option(plans_dir / "fusion-coloc.txt", "--out", help="Plan file to write."),
    ) -> None:
        """Each fused model's F=1 spec co-located F times (F = 2..4), to compare fusion with plain co-location."""
        from gpupred.profile.plans import fusion_colocation_plan, write_plan

        lines = fusion_colocation_plan()
        fs = sorted({len(x.split("#")[0].split("+")) for x in lines})
        summary = f"{len(lines)} co-located groups (" + ", ".join(
            f"F={f}: {sum(len(x.split('#')[0].split('+')) == f for x in lines)}" for f in fs) + ")"
        write_plan(out, lines, [
            "Fusion vs plain co-location (issue 41 item 1, first filed as issue 8): F copies of a fused model's F=1 spec",
            "as F processes sharing the GPU; only F = 2 and 4 exist in the fused catalog up to the 4-job limit (no F = 3).",
            "Run it into the fused sweep's folder after plans/fusion.txt (whose F=1 runs are the solo baselines).",
            "GPU time: `gpupred plan estimate <this file> --from data/raw/<gpu>/<solo sweep>`. Regenerate with",
            "`gpupred plan fusion-coloc`",
            summary,
        ])
        print(f"{out}: {summary}")


def _plan_estimate(plan_app: Any, plans_dir: Path) -> None:
    """Add ``plan estimate``."""
    import typer

    @plan_app.command("estimate")
    def estimate_cmd(
        plan: str = typer.Argument(..., help="A plan: a file of ids / groups, catalog[:N] or fused[:N]."),
        source: Path = typer.Option(..., "--from", help="A real sweep of the GPU kind it will run on (its manifests "
                                                        "say how long a unit took), e.g. data/raw/h100/<sweep-id>."),
        done: Optional[Path] = typer.Option(None, "--out", help="The sweep folder it will run into: units already "
                                                                "finished there are not counted."),
    ) -> None:
        """The GPU time and 8-minute chunks a plan needs, at the per-unit time of an earlier sweep of that GPU kind."""
        from gpupred.profile.plans import plan_cost
        from gpupred.profile.store import finished_units
        from gpupred.profile.units import load_plan

        units = load_plan(plan)
        finished = finished_units(done) if done is not None else set()
        left = [u for u in units if u.group_id not in finished]
        cost = plan_cost(len(left), source)
        already = f" ({len(units) - len(left)} of {len(units)} already in {done})" if finished else ""
        print(f"{plan}: {cost.line()}{already}")


def main(argv: list[str] | None = None) -> None:
    """``python -m gpupred.cli.profile``: the profiler's commands alone (same one-line errors, exit 2)."""
    from gpupred.cliapp import new_app, run_app

    app = new_app("gpupred-profile")
    register(app)
    run_app(app, argv)


if __name__ == "__main__":
    main()
