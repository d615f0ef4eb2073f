"""Predictor speed: predictions per second from feature rows (goal >= 10,000/s) and ONNX-file-to-prediction
latency for ResNet-50 (goal <= 100 ms).

It trains a THROWAWAY predictor on a FIXTURE frame (tests/fixtures_learning.py, toy formula): its
predictions are meaningless; only the speed is measured. The committed models/predictor.joblib is
used instead when it exists.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def _predictor():  # -> Predictor
    from gpupred import config
    from gpupred.predictor import export_predictor, load_predictor, train_predictor

    if config.PREDICTOR.exists():
        print(f"predictor: {config.PREDICTOR}")
        return load_predictor()
    from fixtures_learning import fixture_dataset

    print("predictor: THROWAWAY, trained on a FIXTURE frame — its predictions are meaningless; only speed is measured")
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3",), n_batch_sizes=5)
    p = train_predictor(df, models="xgboost", tune=False)
    path = export_predictor(p, df, Path(tempfile.mkdtemp()) / "predictor.joblib")
    return load_predictor(path)


def main() -> None:
    """Print both figures."""
    from fixtures_learning import fixture_dataset

    predictor = _predictor()
    rows = fixture_dataset(n_batch_sizes=5)
    for n in (1, 1_000, 10_000, 100_000):
        batch = pd.concat([rows] * (n // len(rows) + 1), ignore_index=True).head(n)
        predictor.predict(batch)
        reps = 20 if n <= 1000 else 3
        start = time.perf_counter()
        for _ in range(reps):
            predictor.predict(batch)
        dt = (time.perf_counter() - start) / reps
        print(f"feature rows: batch {n:>7,d}: {dt * 1e3:9.2f} ms per call, {n / dt:12,.0f} predictions/s")

    from gpupred.graph.export import export_onnx
    from gpupred.workloads.spec import WorkloadSpec

    spec = WorkloadSpec.from_id("resnet.resnet50-bs64-img224-fp32-sgd")
    t0 = time.perf_counter()
    onnx_path = export_onnx(spec)
    print(f"resnet50 ONNX export (torch, once, cached): {time.perf_counter() - t0:.1f} s -> {onnx_path}")
    predictor.predict(onnx_path, batch_size=64, gpu="h100")
    times = []
    for _ in range(10):
        t = time.perf_counter()
        predictor.predict(onnx_path, batch_size=64, gpu="h100")
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"resnet50 ONNX file -> prediction: median {times[len(times) // 2] * 1e3:.1f} ms, min {times[0] * 1e3:.1f} ms (goal <= 100 ms)")


if __name__ == "__main__":
    main()
