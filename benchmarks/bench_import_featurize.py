"""Cold featurizing of every imported published workload (goal: <= 3 minutes on 2 cores).

Runs in a fresh subprocess (cold: nothing imported, no in-process graph cache) and prints, per source,
how many workloads were featurized and how long it took: GPUMemNet's networks built with onnx.helper,
Lucid's jobs from the committed structure-only graphs (data/graphs/). With ``--export`` the Lucid graphs
are instead exported from torch into an empty temporary cache (what it costs without the committed store).
Needs the sources imported (`gpupred import lucid|gpumemnet`); a source that is not is reported and skipped.

    python benchmarks/bench_import_featurize.py [--export]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time
t0 = time.perf_counter()
from gpupred import importers
from gpupred.importers import graphs
export = sys.argv[1] == "1"
if export:
    from gpupred import config
    config.GRAPHS = config.GRAPHS / "__none__"  # ignore the committed graphs: export everything from torch
total = 0
for name in ("gpumemnet", "lucid"):
    if not importers.is_imported(importers.get_source(name)):
        print(f"{name:10s} not imported (gpupred import {name}): skipped")
        continue
    t = time.perf_counter()
    specs = graphs.imported_specs([name])
    rows = graphs.feature_rows(specs, progress=False)
    dt = time.perf_counter() - t
    total += len(rows)
    print(f"{name:10s} {len(rows):5d} workloads, {rows['arch_key'].nunique():5d} graphs  {dt:7.1f} s  "
          f"({1000 * dt / max(len(rows), 1):.1f} ms each)")
print(f"{'all':10s} {total:5d} workloads                 {time.perf_counter() - t0:7.1f} s "
      f"(cold process, imports included; goal <= 180 s on 2 cores){' torch' if 'torch' in sys.modules else ', no torch'}")
"""


def main() -> None:
    """Run the cold featurizing in a subprocess and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", action="store_true", help="export Lucid graphs from torch instead of the committed store")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GPUPRED_CACHE": cache, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
        subprocess.run([sys.executable, "-c", CHILD, "1" if args.export else "0"], env=env, check=True)


if __name__ == "__main__":
    main()
