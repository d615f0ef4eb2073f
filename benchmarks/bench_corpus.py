"""The corpus (data/corpus/) against torch: per model the shaped-node share, parameter difference, FLOP agreement,
re-batching agreement and featurize time; then the median and worst featurize time per graph.

Times are cold (featurize's in-process cache cleared before each call): load, shape inference (with folding),
canonical form and the cost pass, on the symbolic export at the export batch (2) and at batch 8, and the
fixed-batch-1 export re-batched to 8. ``--markdown PATH`` also writes the table as Markdown (docs/corpus.md).

    python benchmarks/bench_corpus.py [--markdown docs/corpus.md]

The machine may be shared: the load average is printed first; figures taken under load are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from gpupred.graph.corpus import agreement, read_corpus_index

PEGASUS = (
    "The one FLOP exception, hf-pegasus-x-labels (0.959): torch counts 3,604,480 FLOPs (batch 2) that no graph "
    "shows. The encoder's last layer also updates its global tokens (their q projection, global attention, out "
    "projection and feed-forward), and the encoder then drops them (PegasusXEncoder returns the local tokens only). "
    "Eager torch runs that dead branch; the exporter prunes it. Every einsum of the block-local attention equals the "
    "bmm torch runs for it (checked einsum by einsum, layer by layer), so the Einsum cost rule counts what the GPU "
    "executes and stays as it is. For GPU time the graph undercounts an eager step's forward by the dead branch "
    "(4.1% of its forward FLOPs here); a compiled step (torch.compile) prunes it as the exporter does. "
    "tests/test_graph_corpus.py lists it in FLOP_EXCEPTIONS, which fails once it agrees."
)
HEADER = ["model", "source", "shaped", "params (torch)", "param diff", "FLOPs / torch", "re-batch diff", "featurize s"]


def rows() -> list[dict]:
    """Every corpus model's agreement, with its source."""
    out = []
    for name, entry in sorted(read_corpus_index()["models"].items()):
        a = agreement(name, entry)
        a["source"] = entry.get("timm_module", entry.get("hf_class", ""))
        if entry.get("weightless"):  # the real-size decoders: exported without weights, no fixed-batch export
            a["source"] += f" (weightless, seq {entry['seq']})"
            a["rebatch_diff"] = ["n/a"]
        a["torch_params"] = entry["torch_params"]
        out.append(a)
    return out


def markdown(table: list[dict], summary: str) -> str:
    """The table as Markdown."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for a in table:
        lines.append(f"| {a['name']} | {a['source']} | {a['shaped']:.3f} | {a['torch_params']:,} | {a['params_diff']} | "
                     f"{a['flops_ratio']:.4f} | {', '.join(a['rebatch_diff']) or '-'} | {a['seconds'][0]:.2f} |")
    return "\n".join(lines) + "\n\n" + summary + "\n"


def main() -> None:
    """Print the table and the featurize times; optionally write the Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    print(load)
    table = rows()
    for a in table:
        print(f"{a['name']:42s} shaped {a['shaped']:.3f} param diff {a['params_diff']:>6} FLOPs/torch {a['flops_ratio']:.4f} "
              f"re-batch {','.join(a['rebatch_diff']) or '-'} {' '.join(f'{s:.2f}' for s in a['seconds'])} s")
    first = [a["seconds"][0] for a in table]
    every = [s for a in table for s in a["seconds"]]
    within = sum(abs(a["flops_ratio"] - 1) <= 0.02 for a in table)
    worst = max(table, key=lambda a: a["seconds"][0])
    summary = (f"{len(table)} models; FLOPs within 2% of torch's counter: {within}; exact parameters: "
               f"{sum(a['params_diff'] == 0 for a in table)}; featurize (cold, export batch): median {statistics.median(first):.2f} s, "
               f"worst {max(first):.2f} s ({worst['name']}); every call (two batches and the re-batch): median "
               f"{statistics.median(every):.2f} s, worst {max(every):.2f} s (wall times, {load} at the start: a shared "
               "machine's load inflates them)")
    print(summary)
    if args.markdown:
        args.markdown.write_text("# The corpus against torch\n\nWritten by `python benchmarks/bench_corpus.py --markdown "
                                 "docs/corpus.md` (see its docstring). `shaped`: share of nodes with every output shaped; `param diff`: "
                                 "featurized minus torch's sum(p.numel()) (less parameters no forward reads); `FLOPs / torch`: "
                                 "2 x macs_fwd over torch's FlopCounterMode; `re-batch diff`: features of the fixed-batch-1 "
                                 "export re-batched to 8 that differ from the symbolic export's by over 2% (a fixed-batch "
                                 "export that re-batching cannot place the batch in is refused, never featurized as one "
                                 "sample; n/a for the real-size decoders, exported without weights and only with a "
                                 "symbolic batch).\n\n" + PEGASUS + "\n\n" + markdown(table, summary))


if __name__ == "__main__":
    main()
