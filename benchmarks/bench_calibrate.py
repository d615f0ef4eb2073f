"""`gpupred calibrate` speed: the whole run (goal: under a minute on the GPU at the default --seconds 40, set-up and
cuDNN autotuning included) and each benchmark's share; and the CPU side a prediction pays (re-deriving a file's
constants, goal < 1 s; a graph job predicted with and without a calibration).

On a machine without an NVIDIA GPU the measuring part says so and is skipped. The CPU part replays a GPU-recorded
calibration from data/calibrations/ when one is committed, else a THROWAWAY FIXTURE recording (tests/
fixtures_calibration.py: made-up timings; only the speed is measured). The machine may be shared: the load average
is printed; figures taken under load are noisy.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def measure_on_gpu(seconds: float) -> None:
    """Run the real calibration into a temporary file and print its wall time per benchmark."""
    from gpupred.calibration.run import calibrate
    from gpupred.calibration.file import read_calibration
    from gpupred.calibration.torch_backend import no_gpu_message

    why = no_gpu_message()
    if why is not None:
        print(f"calibrate on the GPU: skipped ({why})")
        return
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = calibrate(Path(tmp) / "cal.json", seconds=seconds, progress=False)
        total = time.perf_counter() - t0
        data = read_calibration(path).data
    per: dict[str, float] = defaultdict(float)
    for r in data["results"]:
        per[r["bench"]] += r["wall_s"]
    print(f"calibrate on {data['gpu']['name']}: {total:.1f} s in all (budget {seconds:g} s; goal < 60 s)")
    for bench, wall in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {bench:12s} {wall:6.1f} s")


def cpu_side() -> None:
    """Time re-deriving a calibration and predicting a graph job with it."""
    from gpupred import config
    from gpupred.calibration.file import read_calibration

    recorded = sorted(config.CALIBRATIONS.glob("*.json")) if config.CALIBRATIONS.is_dir() else []
    with tempfile.TemporaryDirectory() as tmp:
        if recorded:
            path = recorded[0]
            print(f"recording: {path}")
        else:
            from fixtures_calibration import write_fixture_calibration

            path = write_fixture_calibration(Path(tmp) / "l4.json", gpu_name="NVIDIA L4")
            print("recording: THROWAWAY FIXTURE (made-up timings: only the speed is measured)")
        from gpupred.calibration.derive import derive

        cal = read_calibration(path)
        t0 = time.perf_counter()
        for _ in range(3):
            derive(cal.data["gpu"], cal.data["results"])
        print(f"derive constants: {(time.perf_counter() - t0) / 3 * 1e3:.0f} ms (goal < 1000 ms; once per file and "
              "process)")
        if not config.PREDICTOR.exists():
            print("predict with a calibration: skipped (no models/predictor.joblib)")
            return
        from gpupred.predictor.loading import load_predictor

        p = load_predictor()
        job = "resnet.resnet50-bs64-img224-bf16-sgd"
        gpu = cal.gpu_name
        p.predict(job, gpu=gpu, calibration=False)  # warm the graph's caches
        for label, c in (("without", False), ("with", path)):
            t0 = time.perf_counter()
            for _ in range(3):
                p.predict(job, gpu=gpu, calibration=c)
            print(f"predict {job} on {gpu} {label} a calibration: {(time.perf_counter() - t0) / 3 * 1e3:.0f} ms")


def main() -> None:
    """Print the figures."""
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
    measure_on_gpu(seconds)
    cpu_side()


if __name__ == "__main__":
    main()
