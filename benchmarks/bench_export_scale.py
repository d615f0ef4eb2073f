"""Weightless export at real scale: export time and peak resident memory per model size, then featurize + predict.

Each model is exported by name (:mod:`gpupred.graph.named`: built on the meta device, traced with fake tensors,
written structure-only) in a child process of its own, into an empty cache, so its peak resident memory
(``ru_maxrss``) is the export's alone; the child runs under an address-space cap (``--cap-gib``, default 8) so that
a regression cannot take a shared machine down. The models are the corpus's real-size decoders
(``gpupred.graph.corpus.LLM_MODELS``: GPT-2-large, OPT-1.3B, LLaMA-7B (LlamaConfig's defaults) and LLaMA-13B) at
sequence 2048, and LLaMA-7B again at ``--lengths`` (default 1024 and 4096) to show that the memory does not grow
with the square of the sequence. Then the 7B graph is featurized and predicted cold (featurize's cache cleared;
the predictor, models/predictor.joblib, loaded beforehand). Goals on the project's 2-core machine: each export
at most 4 GB peak and 2 minutes; featurize + predict of the 7B graph at most 2 s.

    python benchmarks/bench_export_scale.py [--models llm-llama-7b ...] [--lengths 1024 4096] [--cap-gib 8]

The machine may be shared: the load average is printed first; wall times taken under load are inflated (CPU time is
printed beside them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any


def _export_child(named: Any, cache: str, cap_gib: float, out: Any) -> None:
    """In a fresh process: cap the address space, export one named model into an empty cache, report figures."""
    cap = int(cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    os.environ["GPUPRED_CACHE"] = cache
    from gpupred import config

    config.ONNX_CACHE = Path(cache) / "onnx"
    from gpupred.graph.named import named_graph, named_info

    wall, cpu = time.perf_counter(), time.process_time()
    try:
        path = named_graph(named)
    except Exception as err:  # noqa: BLE001 (the parent prints it)
        out.put({"error": f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"})
        return
    out.put({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
             "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
             "graph_kb": path.stat().st_size / 1e3, "params": named_info(path)["torch_params"], "path": str(path)})


def export_figures(named: Any, cache: str, cap_gib: float) -> dict[str, Any]:
    """Export time, CPU time, peak resident memory and graph size of one named model, exported in a child process."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_export_child, args=(named, cache, cap_gib, queue))
    child.start()
    child.join()
    if child.exitcode != 0:
        return {"error": f"exit code {child.exitcode} (killed past the {cap_gib} GiB address-space cap?)"}
    return queue.get()


def predict_figures(path: str, gpu: str, repeats: int = 3) -> dict[str, float]:
    """Cold featurize and cold predict (featurize's cache cleared each time) of one graph: best of ``repeats``."""
    import gpupred
    from gpupred.graph.features import clear_cache

    predictor = gpupred.load_predictor()
    featurize, predict = [], []
    for _ in range(repeats):
        clear_cache()
        start = time.perf_counter()
        gpupred.featurize(path, batch_size=4, precision="bf16", optimizer="adam")
        featurize.append(time.perf_counter() - start)
        clear_cache()
        start = time.perf_counter()
        predictor.predict(path, batch_size=4, precision="bf16", optimizer="adam", gpu=gpu)
        predict.append(time.perf_counter() - start)
    return {"featurize_s": min(featurize), "featurize_predict_s": min(predict)}


def main() -> None:
    """Print the figures (and with --json, write them)."""
    from gpupred.graph.corpus import LLM_MODELS, LLM_SEQ

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(LLM_MODELS))
    parser.add_argument("--lengths", nargs="*", type=int, default=[1024, 4096], help="LLaMA-7B again at these")
    parser.add_argument("--cap-gib", type=float, default=8.0)
    parser.add_argument("--gpu", default="H100 SXM", help="the GPU the 7B graph is predicted on")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    runs = [(name, LLM_MODELS[name]) for name in args.models]
    runs += [(f"llm-llama-7b@{n}", dataclasses.replace(LLM_MODELS["llm-llama-7b"], seq_len=n)) for n in args.lengths]
    print(f"{'model':22s} {'seq':>5s} {'params':>14s} {'export s':>9s} {'cpu s':>7s} {'peak GB':>8s} {'graph kB':>9s}")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, named in runs:
            f = figures[label] = {"seq": named.seq_len, **export_figures(named, f"{tmp}/{len(figures)}", args.cap_gib)}
            if "error" in f:
                print(f"{label:22s} {named.seq_len:5d} {f['error']}")
                continue
            print(f"{label:22s} {named.seq_len:5d} {f['params']:14,d} {f['wall_s']:9.1f} {f['cpu_s']:7.1f} "
                  f"{f['peak_gb']:8.2f} {f['graph_kb']:9.0f}", flush=True)
        seven = figures.get("llm-llama-7b", {})
        if "path" in seven:
            p = figures["llm-llama-7b"]["predict"] = predict_figures(seven["path"], args.gpu)
            print(f"LLaMA-7B at {LLM_SEQ}: featurize {p['featurize_s']:.2f} s; featurize + predict "
                  f"{p['featurize_predict_s']:.2f} s (cold, batch 4, bf16, Adam, {args.gpu})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
