"""``gpupred advise-fusion``: how many copies of a model to fuse into one job on a GPU, from predictions alone."""

from __future__ import annotations

import json
from typing import Any

from gpupred.errors import GpupredError


def parse_counts(text: str) -> tuple[int, ...]:
    """Fused counts from ``1,2,4,8`` (a one-line GpupredError for anything else)."""
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise GpupredError(f"--counts {text!r}: give whole numbers separated by commas, e.g. 1,2,4,8,16,32,64") from None
    if not counts or min(counts) < 1:
        raise GpupredError(f"--counts {text!r}: give whole numbers of at least 1, e.g. 1,2,4,8,16,32,64")
    return counts


def print_advice(advice: Any) -> None:
    """The curve (one line per F) and the two choices, for a person."""
    print(f"{advice.model} on {advice.gpu} ({advice.card_mib:.0f} MiB), fused step modelled as {advice.step}; "
          f"90% intervals in brackets")
    print(f"{'F':>3s} {'step ms':>21s} {'gpu_util %':>18s} {'memory MiB':>24s} {'fits':>5s} {'trials/s':>22s}")
    for r in advice.curve.itertuples():
        print(f"{r.F:3d} {1e3 * r.iter_time_mean_s:7.2f} [{1e3 * r.iter_time_mean_s_low:5.2f}, "
              f"{1e3 * r.iter_time_mean_s_high:5.2f}] {r.gpu_util:5.1f} [{r.gpu_util_low:4.1f}, {r.gpu_util_high:5.1f}] "
              f"{r.memory_mib:7.0f} [{r.memory_mib_low:6.0f}, {r.memory_mib_high:6.0f}] {'yes' if r.fits else 'no':>5s} "
              f"{r.trials_per_s:7.1f} [{r.trials_per_s_low:6.1f}, {r.trials_per_s_high:6.1f}]")
    if advice.f is None:
        print(f"advised F: none ({'; '.join(advice.notes)})")
        return
    s = advice.summary()
    print(f"advised F = {advice.f} (interval {advice.f_low} to {advice.f_high}): {s['trials_per_s']:.1f} trials/s "
          f"[{s['trials_per_s_low']:.1f}, {s['trials_per_s_high']:.1f}], the smallest F within "
          f"{100 * advice.tolerance:g}% of the best that fits")
    print(f"Hydro's memory-only rule (the largest F that fits): F = {advice.hydro_f}")
    for note in advice.notes:
        print(f"note: {note}")


def register(app: Any) -> None:
    """Add ``gpupred advise-fusion`` to the CLI."""
    import typer

    from gpupred.fusion.rules import STEP_MODELS, TOLERANCE

    @app.command("advise-fusion")
    def advise_fusion_cmd(
        model: str = typer.Argument(..., help="A workload id, e.g. resnet.resnet18-bs128-img32-fp32-sgd (the fused "
                                              "catalog's bases need no torch; a -xF id stands for its base)."),
        gpu: str = typer.Option(None, "--gpu", help="GPU name, e.g. 'H100 SXM' (`gpupred gpus`; default: the "
                                                    "predictor's only one)."),
        counts: str = typer.Option("1,2,4,8,16,32,64", "--counts", help="The fused counts F to consider."),
        tolerance: float = typer.Option(TOLERANCE, "--tolerance", help="Advise the smallest F within this share of "
                                                                      "the best trials/s."),
        step: str = typer.Option("vmap", "--step", help=f"How the fused step is modelled: {' or '.join(STEP_MODELS)}."),
        memory_mib: float = typer.Option(None, "--memory-mib", help="Memory F must fit in (default: the GPU's)."),
        predictor_path: str = typer.Option(None, "--predictor", help="Predictor artifact (default models/predictor.joblib)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object: the choices and the curve."),
    ) -> None:
        """Advise how many copies F of a model to fuse into one job (Hydro-style): the F that maximizes trials/s and
        fits the GPU's memory, with its interval, beside Hydro's memory-only rule (no GPU, no torch)."""
        from gpupred.fusion.advisor import advise_fusion
        from gpupred.predictor.loading import load_predictor

        if memory_mib is not None and not memory_mib > 0:
            raise GpupredError(f"--memory-mib {memory_mib:g}: must be more than 0 (leave it out for the GPU's memory)")
        advice = advise_fusion(model, gpu, parse_counts(counts), tolerance, step, memory_mib,
                               load_predictor(predictor_path))
        if as_json:
            print(json.dumps({**advice.summary(), "curve": json.loads(advice.curve.to_json(orient="records"))}))
        else:
            print_advice(advice)
