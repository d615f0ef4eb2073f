"""What a reader sees first, generated from the figures of merit (``reports/metrics/*.json``), never typed by hand.

- each executed notebook opens with a **Results** block (:func:`results_markdown`): its headline figures, rounded,
  each with what it means, read from the metrics file the run just wrote (a markdown cell typed at the top of a
  notebook could not show values computed below it, and prose typed by hand goes stale);
- ``reports/summary.json`` carries, beside each headline figure, its meaning, unit and held-out split
  (:data:`DESCRIPTIONS`, :func:`summary_entries`);
- the README's blocks marked ``generated`` are rendered from committed files (:func:`generators`: the accuracy table
  from the same metrics and the predictor's card, the data status from ``data/raw/`` and ``plans/``, the real-size
  decoders from ``data/corpus/``) and its blocks marked ``output of`` are what their commands print (whole, or an
  excerpt); ``tests/test_readme.py`` fails when the README's copy differs (``python -m gpupred.digest --write``
  rewrites it).
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

from gpupred import config
from gpupred.reports import MetricsSchema, read_metrics, round_figures

# Where each notebook's metrics schema is defined (imported only when a reader asks for its meanings).
SCHEMAS: dict[str, str] = {
    "01-collect-profiles": "gpupred.profile.datacard:PROFILES_METRICS",
    "02-build-features": "gpupred.graph.table:FEATURES_METRICS",
    "03-compare-regressors": "gpupred.contracts:LEARNING_METRICS",
    "03-physics-first": "gpupred.contracts:ESTIMATOR_METRICS",
    "04-explain": "gpupred.learn.importance:EXPLAIN_METRICS",
    "05-memory": "gpupred.memory.evaluate:MEMORY_METRICS",
    "06-colocation": "gpupred.contracts:COLOCATION_METRICS",
    "07-scheduling-sim": "gpupred.sim.metrics:SIM_METRICS",
    "08-export-predictor": "gpupred.predictor.training:EXPORT_METRICS",
    "09-fusion-advisor": "gpupred.fusion.advisor:FUSION_METRICS",
}

# The headline figures: (summary key, notebook, its metrics key). Keys read <target>_<metric>_<split>: the shipped
# estimators' held-out figures on this project's own runs (default predictor), and each later stage's verdict.
HEADLINES: tuple[tuple[str, str, str], ...] = tuple(
    (key, "03-physics-first", key) for key in (
        "gpu_util_rmsle_within", "gpu_util_rmsle_lofo", "gpu_util_rmsle_crossgpu", "gpu_util_coverage_lofo",
        "gpu_util_width_lofo",
        "gpu_util_rmsle_lofo_baseline", "sm_active_rmsle_within", "sm_active_rmsle_lofo",
        "iter_time_mre_within", "iter_time_mre_lofo", "iter_time_mre_crossgpu", "iter_time_coverage_lofo",
        "iter_time_width_lofo",
        "memory_mre_within", "memory_mre_lofo", "memory_mre_crossgpu", "memory_coverage_lofo", "memory_width_lofo")) + (
    ("dataset_runs_all", "03-compare-regressors", "dataset_runs_all"),
    ("dataset_workloads_all", "03-compare-regressors", "dataset_workloads_all"),
    # co-location (06): held out by model group, pooled Spearman of the slowdown ranking, the prior beside adaptation
    # from k = 3 reference co-runs; scheduling (07): the goals' figures at load 1 (ours - Horus, Gavel's ratios)
    ("slowdown_spearman_lucid_nonrl_summed_util", "06-colocation", "slowdown_spearman_pooled_lucid_nonrl_sum_util_meas"),
    ("slowdown_spearman_lucid_nonrl_k3", "06-colocation", "slowdown_spearman_pooled_lucid_nonrl_adapted_k3"),
    ("slowdown_spearman_gavel_v100_prior", "06-colocation", "slowdown_spearman_pooled_gavel_v100_step_share"),
    ("slowdown_spearman_gavel_v100_k3", "06-colocation", "slowdown_spearman_pooled_gavel_v100_adapted_k3"),
    ("sim_openb_meanjct_diff_s_load1", "07-scheduling-sim", "sim_openb_goal_load1_jct_diff"),
    ("sim_gavel_p95rho_drop_load1", "07-scheduling-sim", "sim_gavel_goal_load1_p95_rho_drop"),
    ("sim_gavel_oracle_share_load1", "07-scheduling-sim", "sim_gavel_goal_load1_oracle_share"),
)



SPLITS: dict[str, str] = {
    "within": "within GPU: grouped folds over whole workloads",
    "lofo": "leave one family out (sibling families together)",
    "crossgpu": "cross GPU: trained on the other measured GPU kind, unseen workloads",
}
TARGETS: dict[str, tuple[str, str, str]] = {  # headline target -> (what, metric's unit, the shipped estimator)
    "gpu_util": ("NVML GPU utilization", "RMSLE of percent (0.15 is about 15 % relative error)",
                 "StepEstimator (step model x correction)"),
    "sm_active": ("SM activity", "RMSLE of percent", "StepEstimator (step model x correction)"),
    "iter_time": ("time per training step", "median relative error (fraction)",
                  "StepEstimator (step model x correction)"),
    "memory": ("peak GPU memory", "median relative error (fraction)", "MemoryEstimator (footprint x correction)"),
}


def _headline_description(key: str) -> tuple[str, str, str] | None:
    """(meaning, unit, split) of a ``<target>_<metric>_<split>[_baseline]`` headline of notebook 03."""
    m = re.fullmatch(r"(gpu_util|sm_active|iter_time|memory)_(rmsle|mre|coverage|width)_(within|lofo|crossgpu)(_baseline)?",
                     key)
    if not m:
        return None
    what, unit, shipped = TARGETS[m.group(1)]
    model = "the regressor baseline (features only)" if m.group(4) else f"the shipped {shipped}"
    if m.group(2) == "width":
        return (f"{what}: median width of {model}'s 90 % interval, relative to the prediction", "fraction",
                SPLITS[m.group(3)])
    if m.group(2) == "coverage":
        return (f"{what}: share of held-out runs inside {model}'s 90 % interval", "fraction (goal 0.9)",
                SPLITS[m.group(3)])
    return f"{what}: held-out error of {model} on this project's runs", unit, SPLITS[m.group(3)]


DESCRIPTIONS: dict[str, tuple[str, str, str]] = {  # summary key -> (meaning, unit, split); 03's are derived above
    "dataset_runs_all": ("training runs in the learning dataset, every source", "runs", "all rows"),
    "dataset_workloads_all": ("distinct workloads in the learning dataset, every source", "workloads", "all rows"),
    "slowdown_spearman_lucid_nonrl_summed_util": (
        "rank correlation of predicted and measured co-location slowdown, summed measured utilization as predictor "
        "(Lucid's RTX 3090 pairs, non-RL jobs)", "Spearman rho (1 = same ranking)", "held out by model group"),
    "slowdown_spearman_lucid_nonrl_k3": (
        "the same, slowdown estimator adapted on k = 3 reference co-runs per job (Lucid non-RL)",
        "Spearman rho", "held out by model group"),
    "slowdown_spearman_gavel_v100_prior": (
        "rank correlation of predicted and measured slowdown, zero-parameter prior (step share of solo step times; "
        "Gavel's V100 pairs)", "Spearman rho", "held out by model group"),
    "slowdown_spearman_gavel_v100_k3": (
        "the same, adapted on k = 3 reference co-runs per job (Gavel V100)", "Spearman rho",
        "held out by model group"),
    "sim_openb_meanjct_diff_s_load1": (
        "scheduling simulation on Alibaba's openb trace at load 1: mean job completion time of ours minus Horus's "
        "(negative: ours faster)", "seconds", "the trace's evaluation slice (policies tuned on its tuning slice)"),
    "sim_gavel_p95rho_drop_load1": (
        "simulation on the Gavel trace at load 1: relative drop of the p95 finish-time fairness (JCT / solo time) of "
        "ours against Horus's", "fraction (goal 0.10)", "the trace's evaluation slice"),
    "sim_gavel_oracle_share_load1": (
        "simulation on the Gavel trace at load 1: share of the oracle pairing's gain over random pairing that ours "
        "gets", "fraction (goal 0.25)", "the trace's evaluation slice"),
}


def describe(key: str) -> tuple[str, str, str]:
    """(meaning, unit, split) of a ``reports/summary.json`` key."""
    found = DESCRIPTIONS.get(key) or _headline_description(key)
    if found is None:
        raise KeyError(f"summary key {key!r} has no description: add it to gpupred.digest.DESCRIPTIONS")
    return found


def _described(key: str) -> bool:
    return key in DESCRIPTIONS or _headline_description(key) is not None


def summary_entries(figures: dict[str, Any], digits: int = 4) -> dict[str, dict[str, Any]]:
    """``reports/summary.json``'s content: each headline figure rounded, beside its meaning, unit and split."""
    out = {}
    for key, value in figures.items():
        meaning, unit, split = describe(key)
        out[key] = {"value": round_figures(value, digits), "meaning": meaning, "unit": unit, "split": split}
    return out


def schema_of(notebook: str) -> MetricsSchema | None:
    """The metrics schema of a notebook (``NN-name``), or None for one that writes none."""
    where = SCHEMAS.get(notebook)
    if where is None:
        return None
    module, name = where.split(":")
    return getattr(importlib.import_module(module), name)


# Each notebook's headline figures for its Results block: metrics keys (a missing one is left out).
RESULT_KEYS: dict[str, tuple[str, ...]] = {
    "01-collect-profiles": ("profiles_runs", "profiles_ok", "profiles_simulated"),
    "02-build-features": ("graph_features_rows", "graph_features_unknown_ops"),
    "03-compare-regressors": ("regressors_gpu_util_rmsle_grouped_random", "regressors_gpu_util_rmsle_lofo",
                              "dataset_runs_all"),
    "03-physics-first": ("gpu_util_rmsle_within", "gpu_util_rmsle_lofo", "gpu_util_rmsle_crossgpu",
                         "gpu_util_coverage_lofo", "iter_time_mre_within", "iter_time_mre_lofo",
                         "iter_time_coverage_lofo", "memory_mre_within", "memory_mre_lofo", "memory_coverage_lofo"),
    "04-explain": ("gpu_util_top_features_permutation",),
    "05-memory": ("memory_footprint_times_correction_lofo_own_median_rel_err",
                  "memory_footprint_times_correction_lofo_own_p90_rel_err",
                  "memory_footprint_times_correction_lofo_own_coverage", "memory_horus_lofo_own_median_rel_err"),
    "06-colocation": ("slowdown_spearman_pooled_lucid_nonrl_sum_util_meas",
                      "slowdown_spearman_pooled_lucid_nonrl_adapted_k3",
                      "slowdown_spearman_pooled_gavel_v100_step_share",
                      "slowdown_spearman_pooled_gavel_v100_adapted_k3"),
    "07-scheduling-sim": ("sim_openb_goal_load1_jct_diff", "sim_gavel_goal_load1_p95_rho_drop",
                          "sim_gavel_goal_load1_oracle_share"),
    "08-export-predictor": ("predictor_models", "predictor_sha256"),
    "09-fusion-advisor": ("fusion_advisor",),
}


def results_markdown(notebook: str, folder: Path | None = None, skipped: str | None = None) -> str:
    """The Results block that opens an executed notebook: its headline figures from its metrics file, rounded."""
    if skipped:
        return f"**Results of this run:** skipped ({skipped})."
    values = read_metrics(notebook, folder)
    keys = [k for k in RESULT_KEYS.get(notebook, ()) if k in values]
    if not keys:
        return "**Results of this run:** this notebook wrote no headline figures (see its cells)."
    schema = schema_of(notebook)
    lines = [f"**Results of this run** (from `reports/metrics/{notebook}.json`, rounded; the cells below show how):",
             "", "| figure | value | meaning |", "|---|---|---|"]
    for key in keys:
        summary_key = next((k for k, n, metric in HEADLINES if n == notebook and metric == key), key)
        meaning = "{} ({}); {}".format(*describe(summary_key)) if _described(summary_key) else next(
            (m for p, m in schema.keys if re.fullmatch(p, key)), "") if schema else ""
        value = round_figures(values[key])
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        if isinstance(shown, dict):
            shown = "; ".join(f"{k}: {v}" for k, v in list(shown.items())[:6])
        lines.append(f"| `{key}` | {shown} | {meaning.replace('|', '/')} |")
    return "\n".join(lines)


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * v:.0f} %"


def _err(v: Any) -> str:
    return "—" if v is None else f"{v:.3f}"


def predictor_card(card: Path | None = None) -> dict[str, Any]:
    """The shipped default predictor's card (``models/predictor.json``; ``card``: another artifact or its card), {}
    when there is none."""
    import json

    path = Path(card or config.PREDICTOR).with_suffix(".json")
    return json.loads(path.read_text()) if path.exists() else {}


def measured_gpus(card: Path | None = None) -> dict[str, int]:
    """The GPU kinds the shipped default predictor was trained on, with their runs (its card's ``measured_gpus``)."""
    return predictor_card(card).get("measured_gpus", {})


def readme_table(folder: Path | None = None, card: Path | None = None) -> str:
    """The README's held-out accuracy table: what ships per target, its error per held-out split, the coverage and
    width of its 90 % intervals, the regressor baseline beside, from notebook 03's metrics and the default
    predictor's card (the GPUs measured)."""
    m = read_metrics("03-physics-first", folder)
    gpus = ", ".join(f"{g} ({n} runs)" for g, n in measured_gpus(card).items()) or "—"
    rows = ["| target | what ships | error metric | within GPU | unseen family | other GPU kind | "
            "coverage of the 90 % interval (unseen family) | its median width (unseen family) | "
            "regressor baseline (unseen family) |", "|---|---|---|---|---|---|---|---|---|"]
    for target, (what, _, shipped) in TARGETS.items():
        metric = "mre" if target in ("iter_time", "memory") else "rmsle"
        name = "median relative error" if metric == "mre" else "RMSLE (of %)"
        rows.append(f"| {what} | {shipped} | {name} | {_err(m.get(f'{target}_{metric}_within'))} | "
                    f"{_err(m.get(f'{target}_{metric}_lofo'))} | {_err(m.get(f'{target}_{metric}_crossgpu'))} | "
                    f"{_pct(m.get(f'{target}_coverage_lofo'))} | {_pct(m.get(f'{target}_width_lofo'))} | "
                    f"{_err(m.get(f'{target}_{metric}_lofo_baseline'))} |")
    return "\n".join(rows) + (
        f"\n\nGPUs measured (the default predictor's training runs): {gpus}. Every figure is held out: "
        "*within GPU*, grouped folds over whole workloads; *unseen family*, leave one family out (sibling families "
        "together); *other GPU kind*, trained on the other measured kind without the tested workloads. "
        "A width of 50 % means the interval spans half the predicted value; — marks a figure the last pipeline run "
        "did not write.")


def calibration_heldout(card: Path | None = None) -> str:
    """The README's held-out account of calibrations, from the default predictor's card (``core.calibrated_gpus``):
    per measured GPU with a committed calibration, its runs predicted by physics with its fit removed, from borrowed,
    calibrated and raw constants (median and 90 % |log error|), and what reference predictions now use."""
    from gpupred.calibration.use import STANDIN

    account = predictor_card(card).get("core", {}).get("calibrated_gpus", {})
    records = account.get("heldout", [])
    if not records:
        return "No GPU-recorded calibration of a measured GPU is committed: nothing is held out yet."
    names = {"gpu_util": "utilization", "iter_time_mean_s": "iteration time", "memory_mib": "memory"}
    rows = ["| GPU held out | target | runs | borrowed | calibrated | raw readings | compared with |",
            "|---|---|---|---|---|---|---|"]
    by = {(r["gpu"], r["target"], r["method"]): r for r in records}
    for gpu, target in sorted({(r["gpu"], r["target"]) for r in records}):
        cells = [by.get((gpu, target, m)) for m in ("borrowed", "calibrated", "raw")]
        shown = " | ".join("—" if c is None else f"{c['median_abs_log_error']:.3f} ({c['q_abs_log_error']:.3f})"
                           for c in cells)
        first = next(c for c in cells if c is not None)
        basis = "the published defaults" if first["reference"] == STANDIN else first["reference"]
        rows.append(f"| {gpu} | {names.get(target, target)} | {first['n']} | {shown} | {basis} |")
    width = account.get("interval_log_width")
    width_text = (", ".join(f"{names.get(t, t)} {w:.3f}" for t, w in width.items()) if isinstance(width, dict)
                  else str(width))
    return "\n".join(rows) + (
        "\n\nEach cell: median |log error| (its 90 % conformal quantile) of physics alone on the GPU's own runs, its "
        "fitted constants removed. Predictions on a calibrated GPU now compare its readings with "
        f"{account.get('reference_readings', '—')}. A calibrated GPU's interval log width: {width_text}.")


def _size(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M"


def sweep_line(sweep: Path, runs: Any, families: int) -> str:
    """One bullet of the README's data status: a sweep folder's GPU, runs, families, and how far each plan it ran got
    (its newest manifest), linked to its data card in force."""
    from gpupred.files import project_path
    from gpupred.hardware import gpu_spec
    from gpupred.profile.datacard import card_path, revisions
    from gpupred.profile.store import finished_units, read_manifest
    from gpupred.profile.units import load_plan

    manifest = read_manifest(sweep) or {}
    card = card_path(sweep)
    card = [card, *revisions(card)][-1] if card.exists() else None
    where = sweep.relative_to(config.ROOT).as_posix()
    link = f"[`{where}`]({card.relative_to(config.ROOT).as_posix()})" if card else f"`{where}`"
    counts = manifest.get("counts", {})
    if counts.get("finished", 0) < counts.get("planned", 0):
        link += ", **unfinished** (a later session resumes it)"
    done = finished_units(sweep)
    shown = [project_path(p, config.ROOT) for p in manifest.get("plans", [])]  # a device checkout's: this one's
    plans = [(p, load_plan(str(config.ROOT / p))) for p in shown]
    plan_text = ", ".join(f"`{p}` {sum(u.group_id in done for u in units)} of its {len(units)} units"
                          for p, units in plans)
    gpu = str(runs["gpu_name"].iloc[0])
    status = ", ".join(f"{s} {n}" for s, n in runs["status"].value_counts().sort_index().items())
    sync = ", ".join(f"sync={s} {n}" for s, n in runs["sync"].value_counts().sort_index().items())
    return (f"- {link}: {gpu} ({gpu_spec(gpu).memory_gb:g} GB in the hardware table), {len(runs)} runs ({status}; "
            f"{sync}) over {runs['family'].nunique()} of the catalog's {families} families; {plan_text}.")


def data_status(root: Path | None = None) -> str:
    """The README's list of the committed sweeps (``data/raw/``): one bullet per sweep folder (:func:`sweep_line`),
    after a line that says how many there are and whether any co-located group has been measured."""
    from gpupred.profile.schema import read_runs, sweep_dirs
    from gpupred.workloads.catalog import by_family, catalog

    sweeps = sweep_dirs(Path(root or config.RAW))
    families = len(by_family(catalog()))
    runs = read_runs(Path(root or config.RAW))
    grouped = runs[runs["group_size"] > 1] if len(runs) else runs
    groups = (f"{grouped['group_id'].nunique()} co-located groups" if len(grouped)
              else "solo runs only: **no co-located group has been measured yet**")
    lines = [f"Committed so far, {len(sweeps)} sweeps ({groups}):", ""]
    lines += [sweep_line(s, runs[runs["sweep_dir"] == str(s)], families) for s in sweeps]
    return "\n".join(lines)


def export_scale_table(folder: Path | None = None) -> str:
    """The README's real-size decoders (``gpupred.graph.corpus.LLM_MODELS``) as the corpus index records them:
    torch's parameter count, the sequence, the committed graph's size and the export's time."""
    import gzip

    from gpupred.graph.corpus import LLM_MODELS, corpus_path, read_corpus_index

    index = read_corpus_index(folder)["models"]
    rows = ["| model (`data/corpus/`) | transformers class | parameters | sequence | graph, MB (gzipped kB) | "
            "export, s |", "|---|---|---|---|---|---|"]
    for name in LLM_MODELS:
        entry, path = index[name], corpus_path(name, folder=folder)
        plain = len(gzip.decompress(path.read_bytes()))
        rows.append(f"| `{name}` | {entry['hf_class']} | {_size(entry['torch_params'])} | {entry['seq']} | "
                    f"{plain / 1e6:.1f} ({path.stat().st_size / 1e3:.0f}) | {entry['export_seconds']:.0f} |")
    return "\n".join(rows)


GENERATED_MARK = re.compile(  # the body (each line ending in a newline) never runs past another block's marks
    r"<!-- generated: gpupred\.digest\.(?P<name>\w+) \(python -m gpupred\.digest --write\) -->\n"
    r"(?P<body>(?:(?!<!-- (?:end )?generated)[^\n]*\n)*?)<!-- end generated -->")


def generators() -> dict[str, Any]:
    """What renders each README block marked ``<!-- generated: gpupred.digest.NAME ... -->``, by NAME."""
    return {"readme_table": readme_table, "data_status": data_status, "export_scale_table": export_scale_table,
            "calibration_heldout": calibration_heldout}


def readme_generated(text: str) -> list[tuple[str, str]]:
    """The README's generated blocks: (the name of what renders it, the text shown)."""
    return [(m.group("name"), m.group("body").removesuffix("\n")) for m in GENERATED_MARK.finditer(text)]


def readme_with_generated(text: str) -> str:
    """``text`` (the README) with every generated block rendered anew (a name not in :func:`generators` raises)."""
    render = generators()

    def fresh(m: re.Match) -> str:
        if m.group("name") not in render:
            raise ValueError(f"README block generated by unknown gpupred.digest.{m.group('name')}")
        start, end = m.span("body")
        return m.string[m.start():start] + render[m.group("name")]() + "\n" + m.string[end:m.end()]

    return GENERATED_MARK.sub(fresh, text)


OUTPUT_MARK = re.compile(r"<!-- output of: gpupred (?P<args>[^>]*?)(?: \(excerpt: (?P<sections>[\w ,]+)\))? -->\n"
                         r"```text\n(?P<out>.*?)```", re.S)


class ShownOutput(NamedTuple):
    """A README block marked ``<!-- output of: gpupred ARGS [(excerpt: SECTION, ...)] -->``."""

    args: str  # the gpupred arguments
    sections: tuple[str, ...]  # an excerpt's sections (none: the whole output)
    shown: str  # the text the README shows


def _shown(m: re.Match) -> ShownOutput:
    sections = tuple(s.strip() for s in (m.group("sections") or "").split(",") if s.strip())
    return ShownOutput(m.group("args"), sections, m.group("out"))


def readme_outputs(text: str) -> list[ShownOutput]:
    """The README's command outputs, each marked ```text block."""
    return [_shown(m) for m in OUTPUT_MARK.finditer(text)]


PROGRESS_LINES = ("gpupred: exporting",)  # a first export's progress line: shown once, then the graph is cached


@functools.lru_cache(maxsize=None)
def command_output(args: str) -> str:
    """What ``gpupred <args>`` prints (stdout and stderr, as a user's terminal shows them, without a first export's
    progress line), run from the project (once per process: the same arguments give the same text)."""
    import shlex
    import subprocess

    done = subprocess.run([sys.executable, "-m", "gpupred.cli", *shlex.split(args)], capture_output=True, text=True,
                          cwd=config.ROOT, timeout=600)
    shown = [line for line in (done.stderr + done.stdout).splitlines(keepends=True)
             if not line.startswith(PROGRESS_LINES)]
    return "".join(shown)


def excerpt(text: str, sections: tuple[str, ...]) -> str:
    """``text`` (an answer as ``gpupred predict`` prints it) cut to its opening lines (before ``[answer``) and the
    named sections (an unindented ``name:`` line and the indented lines under it), each cut marked ``...``."""
    if not sections:
        return text
    kept: list[str] = []
    keep, dropped, opening = True, False, True
    for line in text.splitlines(keepends=True):
        opening = opening and not line.startswith("[answer")
        if not line.startswith(" "):  # a section's heading (or an opening line)
            keep = opening or line.rstrip().rstrip(":") in sections
        if not keep:
            dropped = True
            continue
        if dropped:
            kept.append("...\n")
            dropped = False
        kept.append(line)
    return "".join(kept) + ("...\n" if dropped else "")


def shown_output(block: ShownOutput) -> str:
    """What a marked output block should show now: the command's output, or its excerpt."""
    return excerpt(command_output(block.args), block.sections)


def readme_with_outputs(text: str) -> str:
    """``text`` with every marked output block replaced by what its command prints now (or its excerpt)."""
    def fresh(m: re.Match) -> str:
        start, end = m.span("out")
        return text[m.start():start] + shown_output(_shown(m)) + text[end:m.end()]

    return OUTPUT_MARK.sub(fresh, text)


def main(argv: list[str] | None = None) -> int:
    """``python -m gpupred.digest [--write]``: print the README's table, or rewrite it and the README's command
    outputs in README.md."""
    argv = sys.argv[1:] if argv is None else argv
    readme = config.ROOT / "README.md"
    if "--write" in argv:
        readme.write_text(readme_with_outputs(readme_with_generated(readme.read_text())))
    else:
        print(readme_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
