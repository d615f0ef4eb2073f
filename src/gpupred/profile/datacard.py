"""A sweep's sanity check and data card: the figures a person needs before committing a sweep.

``sanity(sweep_dir)`` checks the measured windows (utilization within 0-100 and steady, no ok run
without samples, memory below the card's size), says where each run's memory label came from
(:mod:`gpupred.profile.labels`; runs labelled from a fallback source are named) and summarizes per
family; ``datacard_text`` turns that and the manifest into the folder's README.md draft (the facts,
the settings: synchronization, measured CUDA context; the person who ran the sweep adds what was
unusual under "Notes").
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from gpupred.errors import GpupredError
from gpupred import config
from gpupred.files import atomic_write_bytes, project_path
from gpupred.profile.coloc_card import coloc_checks, coloc_lines, pipeline_of
from gpupred.profile.labels import FALLBACK_SOURCES, memory_labels_of, transient_excess
from gpupred.profile.schema import read_runs, read_samples, run_setups
from gpupred.profile.store import latest_manifest_path, manifest_paths, read_manifest, window_samples
from gpupred.reports import MetricsSchema

NOTES_HEADING = "## Notes"
CARD = "README.md"
TRANSIENT_FLAG = 0.1  # torch's lifetime peak this far above the label is reported (warm-up's autotuning workspace)


def memory_labels(runs: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Per run (index ``run_id``): its memory label, the label's source, when it has none why not, and how far
    torch's lifetime peak exceeds the label (:func:`gpupred.profile.labels.transient_excess`)."""
    rows = [(memory, source, reason, transient_excess(run, memory) if not reason else float("nan"))
            for (memory, source, reason), (_, run) in zip(memory_labels_of(runs, samples), runs.iterrows())]
    return pd.DataFrame(rows, columns=["memory_mib", "memory_source", "memory_reason", "memory_transient_excess"],
                        index=runs["run_id"])


def run_table(sweep_dir: Path) -> pd.DataFrame:
    """One row per job of the sweep: window statistics (utilization mean and CV, samples, peak memory) and its
    memory label with the label's source."""
    runs = read_runs(sweep_dir)
    if runs.empty:
        raise GpupredError(f"{sweep_dir}: no finished runs (runs/*.parquet) to check")
    samples = read_samples(sweep_dir, sorted(set(runs["group_id"])))
    s = window_samples(runs, samples)
    util = s[(s["metric"] == "gpu_util") & (s["source"] == "poll")].groupby("run_id")["value"]
    stats = pd.DataFrame({
        "n_util_samples": util.size(), "util_mean": util.mean(), "util_min": util.min(), "util_max": util.max(),
        "util_std": util.std(ddof=0),
        "device_mem_peak_mib": s[s["metric"] == "mem_used_mib"].groupby("run_id")["value"].max(),
        "proc_mem_peak_mib": s[s["metric"] == "proc_mem_mib"].groupby("run_id")["value"].max(),
    }).reindex(runs["run_id"])
    stats["n_util_samples"] = stats["n_util_samples"].fillna(0).astype(int)
    stats["util_cv"] = (stats["util_std"] / stats["util_mean"]).where(stats["util_mean"] > 0)
    table = runs[["run_id", "group_id", "member", "workload_id", "family", "status", "group_size", "gpu_name", "sync"]].assign(
        memory_total_mib=runs["gpu_memory_total_mib"], torch_reserved_mib=runs["torch_peak_reserved_mib"],
        iter_time_mean_s=runs["iter_time_mean_s"], simulated=runs["simulated"].astype(bool))
    return table.join(stats.drop(columns="util_std"), on="run_id").join(memory_labels(runs, samples), on="run_id")


def _batches_text(runs: pd.DataFrame, settings: dict[str, Any]) -> str:
    """How the sweep's batches reached the GPU: fed by input pipelines (runs with a ``pipeline``), copied from the
    host, or resident on it."""
    piped = pipeline_of(runs).str.len().gt(0)
    if piped.any():
        return (f"fed by real input pipelines in {int(piped.sum())} of {len(runs)} runs (the runs' `pipeline`: kind, "
                "workers, pin_memory; the host profile beside them)")
    return "copied from host" if settings.get("host_batches") else "resident on the GPU"


def setups_line(runs: pd.DataFrame) -> str:
    """A card line on the runs trained under setup options (fine-tunes: the runs' ``setup``), '' when there are none:
    how many, by recipe, and that the dataset leaves them out of the catalog's labels."""
    from gpupred.setups import setup_from_json

    setups = [setup_from_json(t) for t in run_setups(runs) if t]
    if not setups:
        return ""
    shown = {"full": "full", "lora": "LoRA", "qlora": "QLoRA"}
    recipes = pd.Series([shown[s.recipe] for s in setups]).value_counts()
    return (f"- trained under setup options in {len(setups)} of {len(runs)} runs (the runs' `setup`: "
            + ", ".join(f"{k} {v}" for k, v in sorted(recipes.items()))
            + "); the dataset leaves them out of the catalog's labels, notebook 05 compares them with predictions")


def host_overhead_line(sweep_dir: Path) -> str:
    """A card line on the layers' host-overhead measurements beside the units (the fine-tune preflight's,
    ``host-overhead/*.json``: :func:`gpupred.profile.hostoverhead.host_overhead`), '' when there are none."""
    import json

    found = sorted((Path(sweep_dir) / "host-overhead").glob("host-overhead-*.json"))
    if not found:
        return ""
    per = [json.loads(p.read_text())["per_layer_s"] for p in found]
    us = "; ".join(f"QLoRA over LoRA {d['qlora_over_lora'] * 1e6:.0f} us, LoRA over plain "
                   f"{d['lora_over_plain'] * 1e6:.0f} us" for d in per)
    return (f"- host overhead per layer and training step, measured by the fine-tune preflight on tiny layers "
            f"(`host-overhead/`, {len(found)} file{'s' * (len(found) > 1)}): {us}")


def gpu_seconds_per_unit(manifest: dict[str, Any] | None) -> float:
    """Wall time of the sweep's sessions over the units they ran (the GPU time one profile costs)."""
    seconds, units = 0.0, 0
    for session in (manifest or {}).get("sessions", []):
        try:
            dt = datetime.fromisoformat(session["ended"]) - datetime.fromisoformat(session["started"])
        except (KeyError, TypeError, ValueError):
            continue
        seconds += dt.total_seconds()
        units += int(session.get("units_run", 0))
    return seconds / units if units else float("nan")


def sanity(sweep_dir: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The sweep's checks (dict of figures, with :func:`gpupred.profile.coloc_card.coloc_checks`'s) and its per-family
    summary of ok solo runs."""
    table = run_table(sweep_dir)
    checks, per_family = table_sanity(table, read_manifest(sweep_dir))
    return {**checks, **coloc_checks(sweep_dir, table)}, per_family


def table_sanity(table: pd.DataFrame, manifest: dict[str, Any] | None) -> tuple[dict[str, Any], pd.DataFrame]:
    """:func:`sanity` of an already-read :func:`run_table` and manifest."""
    ok = table[table["status"] == "ok"]
    solo = ok[ok["group_size"] == 1]
    checks = {
        "runs": len(table),
        "status_counts": {str(k): int(v) for k, v in table["status"].value_counts().items()},
        "families": int(table["family"].nunique()),
        "simulated": bool(table["simulated"].any()),
        "ok_runs_without_samples": int((ok["n_util_samples"] == 0).sum()),
        "util_out_of_range": int(((ok["util_min"] < 0) | (ok["util_max"] > 100)).sum()),
        "util_cv_median": float(ok["util_cv"].median()),
        "util_cv_p90": float(ok["util_cv"].quantile(0.9)),
        "util_cv_max": float(ok["util_cv"].max()),
        "memory_above_card": int((ok["device_mem_peak_mib"] > ok["memory_total_mib"]).sum()),
        "memory_sources": {str(k): int(v) for k, v in ok.loc[ok["memory_reason"] == "", "memory_source"].value_counts().items()},
        "memory_fallback_runs": sorted(ok.loc[(ok["memory_reason"] == "") & ok["memory_source"].isin(FALLBACK_SOURCES), "run_id"]),
        "memory_unlabelled_runs": sorted(ok.loc[ok["memory_reason"] != "", "run_id"]),
        "memory_transient_runs": int((ok["memory_transient_excess"] > TRANSIENT_FLAG).sum()),
        "memory_transient_max": float(ok["memory_transient_excess"].max()),
        "sync_counts": {str(k): int(v) for k, v in table["sync"].value_counts().items()},
        "gpu_seconds_per_unit": gpu_seconds_per_unit(manifest),
    }
    labelled = solo[solo["memory_reason"] == ""]
    per_family = solo.groupby("family").agg(
        runs=("run_id", "size"),
        util_median=("util_mean", "median"), util_min=("util_mean", "min"), util_max=("util_mean", "max"),
    ).join(labelled.groupby("family").agg(
        mem_median_mib=("memory_mib", "median"), mem_min_mib=("memory_mib", "min"), mem_max_mib=("memory_mib", "max"),
    ))
    return checks, per_family


def _markdown(df: pd.DataFrame) -> str:
    """A DataFrame as a GitHub markdown table (index first)."""
    head = [df.index.name or "", *map(str, df.columns)]
    rows = [[str(i), *(str(v) for v in row)] for i, row in zip(df.index, df.itertuples(index=False))]
    return "\n".join("| " + " | ".join(r) + " |" for r in [head, ["---"] * len(head), *rows])


def _context_text(manifest: dict[str, Any]) -> str:
    """The sweep's measured bare CUDA context, as the manifest records it."""
    ctx = manifest.get("cuda_context") or {}
    if ctx.get("context_mib") is None:
        return f"CUDA context: {ctx.get('note') or 'not recorded'}"
    return f"CUDA context: {ctx['context_mib']:.0f} MiB measured (a child that only initializes CUDA)"


def _sessions_text(sweep_dir: Path, manifest: dict[str, Any]) -> str:
    """How many sweep sessions the card covers, and the manifest file it describes."""
    latest = latest_manifest_path(sweep_dir)
    return f"sweep sessions: {len(manifest.get('sessions', []))} (`{latest.name}`)" if latest else "no manifest"


def _memory_lines(checks: dict[str, Any], n_ok: int) -> list[str]:
    """Where the ok runs' memory labels came from, naming the runs labelled from a fallback source."""
    fallback, unlabelled = checks["memory_fallback_runs"], checks["memory_unlabelled_runs"]
    sources = ", ".join(f"{k} {v}" for k, v in sorted(checks["memory_sources"].items())) or "none"
    named = "; ".join(fallback[:20]) + (f"; ... {len(fallback) - 20} more" if len(fallback) > 20 else "")
    lines = [f"- memory labels by source (gpupred.profile.labels): {sources}",
             f"- memory from a fallback source: {len(fallback)} of {n_ok} ok runs" + (f" ({named})" if fallback else "")]
    if unlabelled:
        lines.append(f"- ok runs without a usable memory label (not in the dataset): {'; '.join(unlabelled[:20])}")
    top = checks["memory_transient_max"]
    lines.append(f"- torch's lifetime peak reserved + context above the label by more than {TRANSIENT_FLAG:.0%} "
                 f"(memory held only before the window, e.g. cuDNN autotuning's workspace): "
                 f"{checks['memory_transient_runs']} of {n_ok} ok runs" + (f", at most {1 + top:.2f}x" if top == top else ""))
    return lines


def datacard_text(sweep_dir: Path, notes: str = "- (the person who ran the sweep: anything unusual)") -> str:
    """The README.md of a sweep folder: what ran where, with which settings, and the sanity figures."""
    manifest = read_manifest(sweep_dir) or {}
    table = run_table(sweep_dir)
    checks, per_family = table_sanity(table, manifest)
    checks.update(coloc_checks(sweep_dir, table))
    sources = table.set_index("run_id")["memory_source"]
    checks["memory_fallback_runs"] = [f"{r} ({sources[r]})" for r in checks["memory_fallback_runs"]]
    runs = read_runs(sweep_dir)
    first = runs.iloc[0]
    settings = manifest.get("settings", {})
    software = manifest.get("software", {})
    dates = sorted(runs["started_at"].astype(str))
    plans = ", ".join(f"`{project_path(p, config.ROOT)}`" for p in manifest.get("plans") or [manifest.get("plan", "?")])
    title = f"# Sweep `{sweep_dir.name}`" + (" — SIMULATED (dry run), never data" if checks["simulated"] else "")
    lines = [
        title, "",
        f"- GPU: {', '.join(sorted(set(runs['gpu_name'])))} ({int(first.gpu_sm_count)} SMs, "
        f"{first.gpu_memory_total_mib:.0f} MiB), driver {first.driver_version}, CUDA {first.cuda_version}",
        f"- software: torch {first.torch_version}, gpupred {first.gpupred_version}, "
        + ", ".join(f"{k} {v}" for k, v in sorted(software.items()) if k not in ("torch", "gpupred", "host")),
        f"- collected: {dates[0][:19]} to {dates[-1][:19]} UTC, plan {plans}; {_sessions_text(sweep_dir, manifest)}",
        f"- window: >= {settings.get('window_s')} s and {settings.get('min_iters')} iterations (<= {settings.get('max_window_s')} s); "
        f"warm-up >= {settings.get('warmup_min_s')} s and {settings.get('warmup_min_iters')} iterations (<= {settings.get('warmup_max_s')} s); "
        f"sampler every {settings.get('interval_ms')} ms; batches {_batches_text(runs, settings)}",
        f"- sync: {', '.join(f'{k} {v}' for k, v in sorted(checks['sync_counts'].items()))} runs "
        "(step: the loss is read every step; window: CUDA events, one synchronization per window); "
        + _context_text(manifest),
        f"- runs: {checks['runs']} ({', '.join(f'{k} {v}' for k, v in sorted(checks['status_counts'].items()))}), "
        f"{checks['families']} families; GPU time per unit {checks['gpu_seconds_per_unit']:.1f} s",
        *[line for line in (setups_line(runs), host_overhead_line(sweep_dir)) if line],
        "",
        "## Sanity checks (ok runs, measured window)", "",
        f"- runs without samples: {checks['ok_runs_without_samples']}; utilization outside 0-100: {checks['util_out_of_range']}; "
        f"device memory above the card: {checks['memory_above_card']}",
        f"- utilization coefficient of variation per run: median {checks['util_cv_median']:.3f}, "
        f"p90 {checks['util_cv_p90']:.3f}, max {checks['util_cv_max']:.3f}",
        *_memory_lines(checks, int((table["status"] == "ok").sum())),
        "",
        *coloc_lines(checks),
        "## Per family (ok solo runs)", "",
        _markdown(per_family.round(1)) if len(per_family) else "(none)",
        "",
        NOTES_HEADING, "",
        notes,
        "",
    ]
    return "\n".join(lines)


def card_of(manifest: Path) -> Path:
    """The data card of one manifest file: ``README.md`` beside ``manifest.json``, ``README-NNN.md`` beside
    ``manifest-NNN.json``."""
    return manifest.with_name(manifest.name.replace("manifest", "README", 1).removesuffix(".json") + ".md")


def card_path(sweep_dir: Path) -> Path:
    """Where the card of the sweep's newest manifest goes; a card written for an earlier session is left as it was,
    like that session's manifest (:func:`gpupred.profile.store.manifest_path`)."""
    latest = latest_manifest_path(sweep_dir)
    return card_of(latest) if latest else sweep_dir / CARD


def revisions(card: Path) -> list[Path]:
    """The corrections of a committed card, oldest first: ``README-008-r1.md``, ``-r2``... beside ``README-008.md``.

    A committed card is never edited; a correction is a whole new card named after it, saying at its top what it
    corrects, and the newest revision is the card in force.
    """
    pattern = re.compile(rf"{re.escape(card.stem)}-r(\d+)\.md")
    found = [(int(m.group(1)), p) for p in card.parent.glob(f"{card.stem}-r*.md") if (m := pattern.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def _newest_card(sweep_dir: Path) -> Path | None:
    """The newest data card already in the folder (the one whose notes a new card starts from), revisions included."""
    cards = [sweep_dir / CARD, *map(card_of, manifest_paths(sweep_dir))]
    newest = next((c for c in reversed(cards) if c.exists()), None)
    return [newest, *revisions(newest)][-1] if newest is not None else None


def write_datacard(sweep_dir: Path) -> Path:
    """Write (or refresh) the card of the sweep's newest manifest (:func:`card_path`), starting from whatever a person
    wrote under the Notes heading of the newest card already there."""
    path, newest = card_path(sweep_dir), _newest_card(sweep_dir)
    notes = None
    if newest is not None:
        old = newest.read_text()
        if NOTES_HEADING in old:
            notes = old.split(NOTES_HEADING, 1)[1].strip("\n") or None
    text = datacard_text(sweep_dir, notes) if notes else datacard_text(sweep_dir)
    atomic_write_bytes(path, text.encode())
    return path


PROFILES_METRICS = MetricsSchema("01-collect-profiles", (
    (r"profiles_(runs|ok|simulated)", "runs in data/raw, those ok, and simulated (dry-run) ones"),
))
