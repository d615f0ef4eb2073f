"""How close ``gpupred.loader.legacytext.loadtxt_legacy`` comes to the ``np.loadtxt`` of numpy before 1.23.

Writes a ShapeNet-sized sample (a ``.pts`` of 2,500 x 3 values, ``%.5f``, and a ``.seg`` of 2,500 integers) into a
temporary folder and prints the best of 7 rounds of 10 reads, in milliseconds, of: this interpreter's ``np.loadtxt``
and ``loadtxt_legacy``; and, with ``--python`` naming an interpreter that has numpy < 1.23 (for instance a Python 3.10
venv with ``numpy==1.21.5``), that interpreter's ``np.loadtxt`` and ``loadtxt_legacy`` (the ratio that says how
faithful the stand-in is, on one interpreter).

    python benchmarks/bench_loadtxt_legacy.py [--python /path/to/python-with-old-numpy]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
TIMER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from gpupred.loader.legacytext import loadtxt_legacy
pts, seg = sys.argv[2], sys.argv[3]
def best(read):
    read(pts); read(seg)
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(10):
            read(pts); read(seg)
        rounds.append((time.perf_counter() - t0) / 10 * 1e3)
    return min(rounds)
print(json.dumps({"python": sys.version.split()[0], "numpy": np.__version__,
                  "np_loadtxt_ms": best(np.loadtxt), "loadtxt_legacy_ms": best(loadtxt_legacy)}))
"""


def write_sample(folder: Path) -> tuple[Path, Path]:
    """A ShapeNet-sized .pts and .seg pair (fixture values, seeded)."""
    rng = np.random.default_rng(0)
    pts, seg = folder / "sample.pts", folder / "sample.seg"
    np.savetxt(pts, rng.uniform(-0.5, 0.5, size=(2500, 3)), fmt="%.5f")
    np.savetxt(seg, rng.integers(1, 5, size=2500), fmt="%d")
    return pts, seg


def timings(python: str, pts: Path, seg: Path) -> dict[str, object]:
    """The timer's figures under one interpreter (its own numpy)."""
    out = subprocess.run([python, "-c", TIMER, str(SRC), str(pts), str(seg)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="an interpreter with numpy < 1.23, to time its own loadtxt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpupred-loadtxt-") as tmp:
        pts, seg = write_sample(Path(tmp))
        for python in [sys.executable] + ([args.python] if args.python else []):
            t = timings(python, pts, seg)
            print(f"Python {t['python']}, numpy {t['numpy']}: np.loadtxt {t['np_loadtxt_ms']:.2f} ms, loadtxt_legacy "
                  f"{t['loadtxt_legacy_ms']:.2f} ms per sample (legacy / np.loadtxt = "
                  f"{t['loadtxt_legacy_ms'] / t['np_loadtxt_ms']:.2f})")


if __name__ == "__main__":
    main()
