"""``gpupred loader bench|measure``: what input pipelines cost on this host's CPU (the host profile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def profile_lines(profile: Any) -> list[str]:
    """What ``gpupred loader`` prints about a host profile: the host, each kind's points, IPC, copy, measured loader."""
    data = profile.data
    lines = [f"host {profile.cpu}: {profile.logical_cores} logical, {profile.physical_cores} physical, {profile.cores} "
             f"usable cores; single-core score {profile.single_core_score:.3f} (1.0 = the reference host)"]
    for kind, variants in data["kinds"].items():
        for variant, entry in variants.items():
            points = ", ".join(f"{p['scale']:g}: {p['per_sample_s'] * 1e3:.3f} ms" for p in entry["points"])
            lines.append(f"{kind:13s} {variant:8s} per sample at {entry['scale_unit']}: {points}")
    if profile.ipc_per_batch_s is not None:
        lines.append(f"ipc: {profile.ipc_per_batch_s * 1e3:.3f} ms per batch + {profile.ipc_per_byte_s * 1e9:.3f} ms "
                     f"per MB (main process, one worker)")
    if profile.copy_gbs is not None:
        lines.append(f"copy into a fresh tensor: {profile.copy_gbs:.2f} GB/s ({profile.copy_kind})")
    if profile.measured is not None:
        m = profile.measured
        for w, entry in m["workers"].items():
            lines.append(f"{m['factory']} at {w} workers: {entry['per_batch_s'] * 1e3:.2f} ms per batch, "
                         f"{entry['per_sample_s'] * 1e3:.3f} ms per sample ({entry['batches']} batches; first "
                         f"{entry['first_batch_s']:.2f} s)")
        lines.append(f"one worker's cost per sample: {m['single_worker_per_sample_s'] * 1e3:.3f} ms "
                     f"(from {m['single_worker_from']}); batch {m['batch_size']} samples, {m['batch_bytes']} bytes")
    return lines


def register(app: Any) -> None:
    """Add ``gpupred loader bench`` and ``gpupred loader measure`` to the CLI."""
    import typer

    from gpupred.cliapp import new_app
    from gpupred.loader.hostbench import DEFAULT_SECONDS
    from gpupred.loader.measure import DEFAULT_BATCHES, DEFAULT_TIMEOUT_S

    loader_app = new_app("loader", "Input pipelines' host cost on this machine's CPU (no GPU needed).")
    app.add_typer(loader_app, name="loader")

    @loader_app.command("bench")
    def bench_cmd(
        out: str = typer.Option(None, "--out", help="Where to write the host profile (default: this user's host "
                                                    "folder)."),
        seconds: float = typer.Option(DEFAULT_SECONDS, "--seconds", help="The timing budget in seconds (writing the "
                                                                         "synthetic files comes on top)."),
    ) -> None:
        """Measure the standard input pipelines' cost per sample on this host (synthetic files, never a download)."""
        import time

        from gpupred.loader.hostbench import bench
        from gpupred.loader.hostprofile import read_host_profile

        t0 = time.monotonic()
        path = bench(out, seconds)
        print("\n".join([f"wrote {path}", *profile_lines(read_host_profile(path)),
                         f"loader bench took {time.monotonic() - t0:.1f} s"]))

    @loader_app.command("measure")
    def measure_cmd(
        target: str = typer.Argument(..., help="module:factory (or path/to/file.py:factory): a function of no "
                                               "arguments returning your torch DataLoader."),
        batches: int = typer.Option(DEFAULT_BATCHES, "--batches", help="Batches timed per worker count."),
        workers: str = typer.Option("0,1,2", "--workers", help="Worker counts, comma-separated."),
        timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", help="Seconds one batch may take."),
        out: str = typer.Option(None, "--out", help="Where to write the profile (default: this user's host folder)."),
    ) -> None:
        """Time your own DataLoader at several worker counts on the CPU and write its host profile."""
        import time

        from gpupred.errors import GpupredError
        from gpupred.loader.measure import load_factory, measure_loader

        try:
            counts = [int(w) for w in workers.split(",") if w.strip()]
        except ValueError:
            raise GpupredError(f"--workers {workers!r}: expected comma-separated integers, e.g. 0,1,2") from None
        t0 = time.monotonic()
        profile = measure_loader(load_factory(target), batches, counts, timeout, out, name=target)
        print("\n".join([f"wrote {Path(str(profile.path))}", *profile_lines(profile),
                         f"loader measure took {time.monotonic() - t0:.1f} s"]))
