"""Featurize speed against onnx-tool, a weights-included legacy export, and the whole catalog's feature table.

Prints, for ResNet-50, VGG-16, MobileNetV2 and ViT-B/16 exported once here (random weights):
our featurize time on (a) the exporter's usual layout, weights in an external data file, and (b) our
structure-only cache file; onnx-tool's load + shape_infer + profile time on (a) (it needs weights:
on (b) it cannot run); and the ratio (goal: >= 10x on every model). Then the cold build of the
whole catalog's feature table from the committed graph store (no torch, no export).

Legacy export: ResNet-50 as ``torch.onnx.export(model.eval(), x, f, dynamo=False)`` writes it by default
(weights inline, about 102 MB, batch fixed at 1, BatchNorm folded), featurized cold at its own batch and
at batch 64 (re-batched); goal <= 150 ms. ``onnx.load`` of the same file is shown for reference: parsing
the weight bytes is what featurize no longer does.

"cold" featurize times clear featurize's in-process cache of inferred graphs before every call, so
each call loads, checks, infers and featurizes the file; they are the figures compared with onnx-tool.
"warm" is a repeat call on the same file and batch size (a cache hit: only the feature pass runs), shown
for reference, never used in the ratio. Every timing is a median after one untimed warm-up call.
"+map" is (a) with :func:`gpupred.graph.shapemap.store_batch_shapes` applied (the per-tensor batch shape map
in the metadata, which lets featurize skip ONNX shape inference), when the exporter has not stored it.

    python benchmarks/bench_featurize.py [--skip-catalog] [--skip-models] [--repeats N]

The machine may be shared: the load average is printed first; figures taken under load are noisy.
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


def _time(fn, repeats: int, before=None) -> float:  # type: ignore[no-untyped-def]
    """Median wall time of ``fn``; ``before`` (untimed) runs before each call, e.g. to clear a cache."""
    fn()  # warm-up (imports)
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
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


def with_shape_map(ext: Path) -> tuple[Path, bool]:
    """``ext`` itself if its export stored a batch shape map, else a copy beside it with one (weights stay external)."""
    from gpupred.graph.fold import SHAPES_KEY
    from gpupred.graph.shapemap import store_batch_shapes

    proto = onnx.load(str(ext), load_external_data=False)
    if any(p.key == SHAPES_KEY for p in proto.metadata_props):
        return ext, True
    mapped = ext.with_name(f"{ext.stem}-map.onnx")
    onnx.save(store_batch_shapes(proto), mapped)
    return mapped, False


def onnx_tool_profile(path: Path) -> None:
    """onnx-tool's load + shape_infer + profile at batch 1."""
    import onnx_tool

    with contextlib.redirect_stdout(io.StringIO()):
        model = onnx_tool.Model(str(path))
        model.graph.shape_infer({"x": np.zeros((1, 3, 224, 224), np.float32)})
        model.graph.profile()


def bench_models(repeats: int) -> None:
    from gpupred.graph.features import featurize
    from gpupred.graph.features import clear_cache

    with tempfile.TemporaryDirectory() as tmp:
        files = export_models(Path(tmp))
        print(f"{'model':14s} {'ours ext-data':>14s} {'ours stripped':>14s} {'onnx-tool':>11s} {'ratio':>7s} "
              f"{'ext .data MB':>12s} {'stripped kB':>11s} {'ours warm':>10s} {'ours +map':>10s} {'ratio':>7s}")
        print(f"{'':14s} {'(cold)':>14s} {'(cold)':>14s} {'':>11s} {'(cold)':>7s} {'':>12s} {'':>11s} {'(cached)':>10s} "
              f"{'(cold)':>10s} {'+map':>7s}")
        for name, (ext, stripped) in files.items():
            mapped, exported_map = with_shape_map(ext)
            ours_ext = _time(lambda: featurize(ext, batch_size=1), repeats, before=clear_cache)
            ours_str = _time(lambda: featurize(stripped, batch_size=1), repeats, before=clear_cache)
            warm = _time(lambda: featurize(ext, batch_size=1), repeats)
            ours_map = _time(lambda: featurize(mapped, batch_size=1), repeats, before=clear_cache)
            theirs = _time(lambda: onnx_tool_profile(ext), max(1, repeats // 3))
            try:
                onnx_tool_profile(stripped)
                stripped_note = ""
            except Exception as err:  # expected: the weights are not there
                stripped_note = f"  (onnx-tool on the stripped file: {type(err).__name__})"
            data_mb = (ext.parent / f"{name}.onnx.data").stat().st_size / 1e6
            print(f"{name:14s} {ours_ext * 1e3:11.2f} ms {ours_str * 1e3:11.2f} ms {theirs * 1e3:8.0f} ms "
                  f"{theirs / ours_ext:6.1f}x {data_mb:12.0f} {stripped.stat().st_size / 1e3:11.0f} {warm * 1e3:7.2f} ms"
                  f" {ours_map * 1e3:7.2f} ms {theirs / ours_map:6.1f}x{stripped_note}")
        print("+map: " + ("the exporter stores the shape map" if exported_map else
                          "shape map added here with shapemap.store_batch_shapes (the exporter does not store it yet)"))


def bench_legacy(repeats: int) -> None:
    """ResNet-50 as torch's legacy exporter writes it by default: weights inline (~102 MB), batch fixed at 1."""
    import warnings

    import torch
    import torchvision

    from gpupred.graph.features import featurize
    from gpupred.graph.features import clear_cache

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet50-legacy.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(1, 3, 224, 224),), str(path), dynamo=False)
        size = path.stat().st_size / 1e6
        load = _time(lambda: onnx.load(str(path)), max(1, repeats // 3))
        for bs in (None, 64):
            took = _time(lambda: featurize(path, batch_size=bs), repeats, before=clear_cache)
            label = "its own batch 1" if bs is None else f"batch {bs} (re-batched)"
            print(f"resnet50 legacy export ({size:.0f} MB, weights inline) at {label}: featurize {took * 1e3:.1f} ms cold "
                  f"(goal <= 150 ms); onnx.load alone {load * 1e3:.0f} ms")


CATALOG_SCRIPT = """
import time
from gpupred.workloads.catalog import catalog
from gpupred.graph.table import build_feature_table
specs = catalog()
start = time.perf_counter()
df = build_feature_table(specs, workers=2, progress=False)
took = time.perf_counter() - start
print(f"{len(df)} specs, {df['arch_key'].nunique()} architectures, unknown ops {int(df['unknown_ops'].sum())}: "
      f"{took:.1f} s from the graph store")
"""


def bench_catalog() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GPUPRED_CACHE": cache}
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CATALOG_SCRIPT], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        print(out.stdout.strip() or out.stderr.strip()[-2000:])
        print(f"catalog feature table from the committed graph store, including process start: {wall:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-catalog", action="store_true", help="Leave out the catalog feature table.")
    parser.add_argument("--skip-models", action="store_true", help="Leave out the onnx-tool comparison.")
    parser.add_argument("--repeats", type=int, default=9, help="Timed repeats per measurement (median).")
    args = parser.parse_args()
    print(f"CPU cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} (shared machine: figures under load "
          "are noisy); timings are medians")
    bench_legacy(args.repeats)
    if not args.skip_models:
        bench_models(args.repeats)
    if not args.skip_catalog:
        bench_catalog()


if __name__ == "__main__":
    main()
