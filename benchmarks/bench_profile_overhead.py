"""Profiler overhead: the sampler's CPU cost per second and the fixed cost per run; projects 150 solo profiles.

Usage: python benchmarks/bench_profile_overhead.py [--workload ID] [--sampler-s S]
Runs on whatever is present: the real NVML backend and CUDA if NVML finds a GPU, else the fake backend
and the CPU (figures then say so and are CPU figures, not GPU ones).
"""

from __future__ import annotations

import argparse
import time

from gpupred.profile.fake import FakeBackend
from gpupred.profile.harness import HarnessConfig, Launcher, run_unit
from gpupred.profile.nvml import PynvmlBackend, Sampler, probe
from gpupred.workloads.spec import WorkloadSpec

GOAL_MIN, N_PROFILES = 25.0, 150


def main() -> None:
    """Print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", default="mlp.mlp-w64-d2-bs8-in32-fp32-sgd")
    ap.add_argument("--sampler-s", type=float, default=5.0)
    args = ap.parse_args()
    why = probe()
    gpu = why is None
    make_backend = (lambda: PynvmlBackend(0)) if gpu else FakeBackend
    where = "GPU (real NVML backend, CUDA)" if gpu else f"CPU (fake NVML backend; no GPU: {why})"
    print(f"device: {where}")

    # 1. sampler CPU cost
    backend = make_backend()
    s = Sampler(backend).start()
    time.sleep(args.sampler_s)
    s.stop()
    backend.close()
    frac = s.cpu_time_s / max(s.wall_time_s, 1e-9)
    print(f"sampler: interval {s.interval_s * 1e3:.0f} ms, {s.ticks} ticks in {s.wall_time_s:.1f} s, "
          f"CPU {s.cpu_time_s * 1e3:.1f} ms -> {frac * 100:.2f}% of one core per wall second "
          f"({s.cpu_time_s / max(s.ticks, 1) * 1e3:.2f} ms per tick), {len(s.samples)} samples; notes: {s.notes or 'none'}")

    # 2. fixed cost per run, default warm-up/window
    spec = WorkloadSpec.from_id(args.workload)
    cfg = HarnessConfig(device="cuda" if gpu else "cpu")
    results = {}
    for label, spare in (("cold child", False), ("pre-started child", True)):
        backend = make_backend()
        launcher = Launcher(spares=1 if spare else 0)
        if spare:
            launcher.prefill(1)
            launcher._spares[0].rx.poll(120)  # wait until it has imported torch (as during the previous unit)
        try:
            r = run_unit([spec], backend, cfg, launcher=launcher if spare else None)
        finally:
            launcher.close()
            backend.close()
        row = r.runs.to_pylist()[0]
        t = r.timings[0] if r.timings else {}
        window = (row["window_end_s"] - row["window_start_s"]) if row["n_iters"] else float("nan")
        fixed = r.wall_s - window - (row["warmup_s"] or 0.0)
        results[label] = (r.wall_s, fixed, row["warmup_s"], window)
        print(f"run ({label}, {spec.id}, status {row['status']}): wall {r.wall_s:.2f} s = fixed {fixed:.2f} s "
              f"[torch import {t.get('import_s', float('nan')):.2f} s (0 on the critical path when pre-started), "
              f"CUDA init {t.get('cuda_init_s', float('nan')):.2f} s, build {t.get('build_s', float('nan')):.2f} s, "
              f"python start {t.get('python_start_s', float('nan')):.2f} s, stop after window "
              f"{t.get('after_window_s', float('nan')):.2f} s, child exit {t.get('teardown_s', float('nan')):.2f} s] + warm-up {row['warmup_s']:.2f} s ({row['warmup_iters']} it) "
              f"+ window {window:.2f} s ({row['n_iters']} it)")

    # 3. projection
    print(f"defaults: warm-up >= {cfg.warmup_min_s} s and {cfg.warmup_min_iters} it (<= {cfg.warmup_max_s} s); "
          f"window >= {cfg.window_s} s and {cfg.min_iters} it (<= {cfg.max_window_s} s)")
    for label, (wall, fixed, warm, window) in results.items():
        per = fixed + max(cfg.warmup_min_s, warm) + max(cfg.window_s, window)
        total = per * N_PROFILES / 60
        verdict = "fits" if total <= GOAL_MIN else "does NOT fit"
        print(f"projection ({label}): {per:.1f} s per solo profile -> {N_PROFILES} profiles in {total:.1f} min "
              f"({verdict} the {GOAL_MIN:.0f}-minute goal){'' if gpu else '  [CPU figures, not GPU]'}")
    print("note: iterations slower than the defaults' bounds (large models) lengthen warm-up/window up to their maxima")


if __name__ == "__main__":
    main()
