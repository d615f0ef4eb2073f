"""``gpupred calibrate``: measure the local GPU's constants (about a minute) and write its calibration file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpupred.calibration.bench import DEFAULT_SECONDS


def summary_lines(data: dict[str, Any], path: Path) -> list[str]:
    """What ``gpupred calibrate`` prints: the file, the GPU, the time taken, and each reading beside its default."""
    from gpupred.calibration.derive import NOT_MEASURED
    from gpupred.step.physics.constants import DEFAULT

    derived = data["derived"]
    lines = [f"wrote {path}",
             f"GPU {data['gpu']['name']} ({data['gpu']['uuid'] or 'no UUID'}), torch {data['software']['torch']}, "
             f"CUDA {data['software']['cuda_runtime']}, driver {data['software']['driver']}; "
             f"{len(data['results'])} cases in {data['wall_s']:.0f} s; peaks: {derived['peaks']['source']}",
             f"{'constant':24s} {'reading':>12s} {'default':>12s}"]
    if data["host"].get("single_core_score") is not None:
        lines.insert(2, f"host {data['host']['cpu']}: single-core score {data['host']['single_core_score']:.3f} "
                        "(gpupred.loader.speed; 1.0 = the reference host)")
    for name, value in derived["step"].items():
        lines.append(f"{name:24s} {value:12.4g} {getattr(DEFAULT, name):12.4g}")
    for name, value in derived["memory"].items():
        lines.append(f"{name:24s} {value:12.4g} {'':>12s}")
    lines += [f"note: {n}" for n in derived["notes"]]
    lines.append("not measured (the predictor keeps its own): " + ", ".join(NOT_MEASURED))
    return lines


def register(app: Any) -> None:
    """Add ``gpupred calibrate`` to the CLI."""
    import typer

    @app.command("calibrate")
    def calibrate_cmd(
        out: str = typer.Option(None, "--out", help="Where to write the file (default: this user's calibration folder, "
                                                    "where `gpupred predict` looks)."),
        seconds: float = typer.Option(DEFAULT_SECONDS, "--seconds", help="The measuring budget in seconds (set-up and "
                                                                         "cuDNN autotuning come on top)."),
        replay: str = typer.Option(None, "--replay", help="Re-derive a recorded calibration file instead of "
                                                          "measuring (no GPU needed)."),
        as_json: bool = typer.Option(False, "--json", help="Print the written file's derived constants as JSON."),
    ) -> None:
        """Measure this machine's GPU (launch cost, minimum kernel time, achieved rates, CUDA context and workspaces)
        so that predictions on it use its own constants."""
        from gpupred.calibration.file import read_calibration
        from gpupred.calibration.run import calibrate

        backend = None
        if replay:
            from gpupred.calibration.replay import FakeBackend

            backend = FakeBackend.from_file(replay)
        path = calibrate(out, seconds, backend)
        data = read_calibration(path).data
        if as_json:
            print(json.dumps({"path": str(path), "gpu": data["gpu"], "derived": data["derived"]}))
            return
        print("\n".join(summary_lines(data, path)))
