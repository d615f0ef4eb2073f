"""Featurize speed against onnx-tool, and the cold build time of the whole catalog's feature table.

Prints, for ResNet-50, VGG-16, MobileNetV2 and ViT-B/16 exported once here (random weights):
our featurize time on (a) the exporter's usual layout, weights in an external data file, and (b) our
structure-only cache file; onnx-tool's load + shape_infer + profile time on (a) (it needs weights:
on (b) it cannot run); and the ratio (goal: >= 10x on every model). Then the cold build of the
whole catalog's feature table on 2 worker processes with an empty temporary cache (goal: <= 3 min).

    python benchmarks/bench_featurize.py [--skip-catalog] [--repeats N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

MODELS = ["resnet50", "vgg16", "mobilenet_v2", "vit_b_16"]


def _time(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm-up (imports, caches)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def export_models(folder: Path) -> dict[str, tuple[Path, Path]]:
    """Each model twice: with weights in external data, and our stripped cache form."""
    import torch
    import torchvision

    from gpupred.graph.export import export_module

    torch.set_num_threads(1)
    out = {}
    for name in MODELS:
        model = getattr(torchvision.models, name)().eval()
        x = torch.randn(2, 3, 224, 224)
        full = export_module(model, (x,), folder / f"{name}-full.onnx", ["x"], [0], keep_weights=True)
        proto = onnx.load(str(full))
        ext = folder / f"{name}.onnx"
        onnx.save(proto, ext, save_as_external_data=True, all_tensors_to_one_file=True, location=f"{name}.onnx.data")
        full.unlink()
        stripped = export_module(model, (x,), folder / f"{name}-stripped.onnx", ["x"], [0])
        out[name] = (ext, stripped)
    return out


def onnx_tool_profile(path: Path) -> None:
    """onnx-tool's load + shape_infer + profile at batch 1."""
    import onnx_tool

    with contextlib.redirect_stdout(io.StringIO()):
        model = onnx_tool.Model(str(path))
        model.graph.shape_infer({"x": np.zeros((1, 3, 224, 224), np.float32)})
        model.graph.profile()


def bench_models(repeats: int) -> None:
    from gpupred.graph import featurize

    with tempfile.TemporaryDirectory() as tmp:
        files = export_models(Path(tmp))
        print(f"{'model':14s} {'ours ext-data':>14s} {'ours stripped':>14s} {'onnx-tool':>11s} {'ratio':>7s} "
              f"{'ext .data MB':>12s} {'stripped kB':>11s}")
        for name, (ext, stripped) in files.items():
            ours_ext = _time(lambda: featurize(ext, batch_size=1), repeats)
            ours_str = _time(lambda: featurize(stripped, batch_size=1), repeats)
            theirs = _time(lambda: onnx_tool_profile(ext), max(1, repeats // 3))
            try:
                onnx_tool_profile(stripped)
                stripped_note = ""
            except Exception as err:  # expected: the weights are not there
                stripped_note = f"  (onnx-tool on the stripped file: {type(err).__name__})"
            data_mb = (ext.parent / f"{name}.onnx.data").stat().st_size / 1e6
            print(f"{name:14s} {ours_ext * 1e3:11.1f} ms {ours_str * 1e3:11.1f} ms {theirs * 1e3:8.0f} ms "
                  f"{theirs / ours_ext:6.1f}x {data_mb:12.0f} {stripped.stat().st_size / 1e3:11.0f}{stripped_note}")


CATALOG_SCRIPT = """
import time
from gpupred.workloads.catalog import catalog
from gpupred.graph import build_feature_table
specs = catalog()
start = time.perf_counter()
df = build_feature_table(specs, workers=2, progress=False)
took = time.perf_counter() - start
print(f"{len(df)} specs, {df['arch_key'].nunique()} architectures, unknown ops {int(df['unknown_ops'].sum())}: "
      f"{took:.1f} s cold on 2 workers")
"""


def bench_catalog() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GPUPRED_CACHE": cache}
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CATALOG_SCRIPT], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        print(out.stdout.strip() or out.stderr.strip()[-2000:])
        print(f"catalog feature table, cold, including process start: {wall:.1f} s (goal <= 180 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-catalog", action="store_true", help="Only the per-model comparison.")
    parser.add_argument("--repeats", type=int, default=9, help="Timed repeats per measurement (median).")
    args = parser.parse_args()
    print(f"CPU cores: {os.cpu_count()}; timings are medians")
    bench_models(args.repeats)
    if not args.skip_catalog:
        bench_catalog()


if __name__ == "__main__":
    main()
