"""``gpupred colocate A B --gpu X``: how much each of two training jobs slows down beside the other on one GPU, with
intervals, and whether the pair fits in the GPU's memory (``--json``: the object of
:meth:`gpupred.predictor.pairing.PairSlowdown.to_dict`)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

Member = Annotated[str, typer.Argument(help="An .onnx file, a workload id, or timm:NAME / hf:NAME (a model by name).",
                                       show_default=False)]
Batch = Optional[int]
Text = Optional[str]


def job_of(text: str, batch: int | None, precision: str | None, optimizer: str | None) -> Any:
    """The :class:`gpupred.predictor.pairing.Job` of a command-line member (``timm:``/``hf:`` name a model)."""
    from gpupred.predictor.pairing import Job

    model: Any = text
    if text.startswith(("timm:", "hf:")):
        from gpupred.workloads.hubmodels import hf_model, timm_model

        kind, name = text.split(":", 1)
        model = timm_model(name) if kind == "timm" else hf_model(name)
    return Job(model, batch, precision, optimizer, name=text)


def mib(v: float | None) -> str:
    """MiB in readable units."""
    if v is None:
        return "?"
    return f"{v / 1024:.1f} GiB" if v >= 1024 else f"{v:.0f} MiB"


def render(answer: dict[str, Any]) -> str:
    """The text answer: each member's slowdown and interval, the pair's memory against the GPU's."""
    lines = [f"GPU: {answer['gpu']}   estimator: {answer['estimator']['name']} ({answer['estimator']['source']}"
             f"{', adapted by ' + answer['estimator']['coruns_file'] if answer['estimator']['adapted'] else ''})"]
    for m in answer["members"]:
        bounds = "no interval" if m["slowdown_low"] is None else f"{m['slowdown_low']:.2f}-{m['slowdown_high']:.2f}"
        lines.append(f"  {m['job']}: slowdown x{m['slowdown']:.2f} ({bounds}); step {m['step_time_ms']:.1f} ms alone, "
                     f"{m['shared_step_time_ms']:.1f} ms shared; util {m['gpu_util']:.0f}%, memory {mib(m['memory_mib'])}"
                     + (f"; adapted on {m['adaptation_coruns']} co-runs" if m["adaptation_coruns"] else ""))
    p = answer["pair"]
    verdict = "fits" if p["fits"] else "does NOT fit"
    lines.append(f"  pair: memory {mib(p['memory_mib'])} (95%: {mib(p['memory_q95_mib'])}) of {mib(p['capacity_mib'])}, "
                 f"headroom {mib(p['headroom_mib'])}; P(out of memory) {p['oom_probability']:.1%}: {verdict}; combined "
                 f"throughput x{p['combined_throughput']:.2f} of one job alone")
    lines.append(f"  interval: {answer['interval']['basis']}")
    lines += [f"  note: {n}" for n in answer["notes"]]
    return "\n".join(lines)


def colocate_cmd(a: Member, b: Member,
                 gpu: Annotated[str, typer.Option("--gpu", "-g", help="The GPU the pair shares (gpupred gpus).")],
                 batch_size_a: Annotated[Batch, typer.Option("--batch-size-a", help="A's batch size (needed for a file).")] = None,
                 batch_size_b: Annotated[Batch, typer.Option("--batch-size-b", help="B's batch size (needed for a file).")] = None,
                 precision_a: Annotated[Text, typer.Option("--precision-a", help="A's precision.")] = None,
                 precision_b: Annotated[Text, typer.Option("--precision-b", help="B's precision.")] = None,
                 optimizer_a: Annotated[Text, typer.Option("--optimizer-a", help="A's optimizer.")] = None,
                 optimizer_b: Annotated[Text, typer.Option("--optimizer-b", help="B's optimizer.")] = None,
                 coruns: Annotated[Text, typer.Option("--coruns", help="A file of reference co-runs "
                                                      "(gpupred-coruns/1 JSON) that adapts A's and B's effects.")] = None,
                 predictor_path: Annotated[Text, typer.Option("--predictor", help="A predictor artifact (default: "
                                                              "models/predictor.joblib).")] = None,
                 noncommercial: Annotated[bool, typer.Option("--noncommercial", help="The non-commercial predictor.")] = False,
                 as_json: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False) -> None:
    """How much each of two jobs slows down beside the other on one GPU, and whether they fit together."""
    from gpupred import config
    from gpupred.errors import GpupredError
    from gpupred.predictor.loading import load_predictor

    if noncommercial and predictor_path:
        raise GpupredError("give --predictor PATH or --noncommercial, not both")
    predictor = load_predictor(config.PREDICTOR_NONCOMMERCIAL if noncommercial else predictor_path)
    answer = predictor.slowdown(job_of(a, batch_size_a, precision_a, optimizer_a),
                                job_of(b, batch_size_b, precision_b, optimizer_b), gpu=gpu,
                                coruns=coruns).to_dict()
    print(json.dumps(answer) if as_json else render(answer))


def register(app: Any) -> None:
    """Add ``gpupred colocate`` to the CLI."""
    app.command("colocate")(colocate_cmd)
