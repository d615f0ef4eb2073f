"""Real-GPU checks of the profiler, the smoke test of every GPU sweep; skipped where NVML finds no device."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpupred.profile.nvml import probe

_NO_GPU = probe()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_NO_GPU is not None, reason=f"no NVIDIA GPU: {_NO_GPU}")]

SPEC = "resnet.resnet18-bs32-img32-fp32-sgd"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-unit sweep: one small CNN with sync=step and with sync=window."""
    from gpupred.profile.sweep import SweepOptions, harness_config, run_sweep

    root = tmp_path_factory.mktemp("gpu")
    out, plan = root / "smoke", root / "plan.txt"
    plan.write_text(f"{SPEC} sync=step\n{SPEC} sync=window\n")
    cfg = harness_config(False, window_s=2.0)
    summary = run_sweep(str(plan), out, SweepOptions(progress=False), cfg)
    assert summary.remaining == 0 and not summary.stopped, summary.line()
    return out


def _runs_and_samples(sweep: Path):  # -> (runs, samples)
    from gpupred.profile.schema import read_runs, read_samples

    runs = read_runs(sweep)
    return runs, read_samples(sweep)


def test_both_runs_ok_and_recorded(sweep: Path) -> None:
    runs, _ = _runs_and_samples(sweep)
    assert sorted(runs["sync"]) == ["step", "window"]
    assert (runs["status"] == "ok").all(), runs["message"].tolist()
    assert not runs["simulated"].any() and (runs["gpu_sm_count"] > 0).all()
    print(runs[["run_id", "iter_time_mean_s", "mem_baseline_mib", "cuda_context_mib", "memory_reserved_mib", "notes"]])


def test_utilization_in_range_and_spread_over_the_window(sweep: Path) -> None:
    runs, samples = _runs_and_samples(sweep)
    for _, run in runs.iterrows():
        s = samples[(samples["group_id"] == run["group_id"]) & (samples["metric"] == "gpu_util") & (samples["source"] == "poll")]
        win = s[s["t_s"].between(run["window_start_s"], run["window_end_s"])].sort_values("t_s")
        assert len(win) >= 10 and win["value"].between(0, 100).all()
        t = win["t_s"].to_numpy()
        assert t[0] - run["window_start_s"] < 0.25 and run["window_end_s"] - t[-1] < 0.25
        assert np.diff(t).max() < 0.5, "a gap of over 0.5 s between utilization samples"
        assert win["value"].mean() > 0, "a training loop that keeps the GPU at 0 %"


def test_gpm_sm_activity_on_hopper(sweep: Path) -> None:
    runs, samples = _runs_and_samples(sweep)
    if "H100" not in runs["gpu_name"].iloc[0] and "H200" not in runs["gpu_name"].iloc[0]:
        pytest.skip("GPM is checked on Hopper")
    assert runs["gpm_supported"].all(), runs["notes"].iloc[0]
    sm = samples[samples["metric"] == "sm_active"]["value"]
    assert len(sm) > 10 and sm.between(0, 100).all()  # NVML reports GPM SM activity in percent (0-100)
    assert sm.max() > 0


def test_memory_label_between_the_context_and_the_card(sweep: Path) -> None:
    from gpupred.profile.labels import memory_label

    runs, samples = _runs_and_samples(sweep)
    manifest = json.loads((sweep / "manifest.json").read_text())
    context = manifest["cuda_context"]["context_mib"]
    assert context is not None and 50 < context < 4096, manifest["cuda_context"]
    for _, run in runs.iterrows():
        assert run["cuda_context_mib"] == pytest.approx(context)
        assert math.isfinite(run["mem_baseline_mib"])
        memory, source, reason = memory_label(run, samples)
        assert not reason and source, reason
        assert context < memory < run["gpu_memory_total_mib"]
        # in the window the process holds what torch's allocator reserved plus the context; the lifetime peak
        # may be far higher (cuDNN autotuning's workspace, released after warm-up: 2.5 GB vs 1 GB on an H200)
        reserved = run["torch_window_reserved_mib"]
        assert math.isfinite(reserved) and 0 < reserved <= run["torch_peak_reserved_mib"]
        assert memory >= 0.9 * (reserved + context), (memory, reserved, context)


def test_iteration_time_consistent_with_throughput(sweep: Path) -> None:
    runs, _ = _runs_and_samples(sweep)
    for _, run in runs.iterrows():
        assert run["samples_per_s"] == pytest.approx(32 / run["iter_time_mean_s"], rel=1e-6)
        window = run["window_end_s"] - run["window_start_s"]
        assert sum(run["iter_times_s"]) == pytest.approx(window, rel=0.15), run["sync"]


def test_real_colocated_pair() -> None:
    from gpupred.profile.harness import HarnessConfig, run_unit
    from gpupred.profile.nvml import PynvmlBackend
    from gpupred.profile.units import Unit
    from gpupred.workloads.spec import WorkloadSpec

    specs = [WorkloadSpec.from_id("mlp.mlp-w1024-d4-bs256-in1024-fp32-sgd")] * 2
    backend = PynvmlBackend(0)
    try:
        r = run_unit(specs, backend, HarnessConfig(window_s=1.0, warmup_min_s=0.5), Unit(tuple(x.id for x in specs)).group_id)
    finally:
        backend.close()
    assert r.statuses == ["ok", "ok"], r.runs.column("message").to_pylist()
    rows = r.runs.to_pylist()
    assert all(math.isfinite(x["mem_baseline_mib"]) for x in rows)


def test_cuda_context_measurement() -> None:
    from gpupred.profile.harness import HarnessConfig, measure_cuda_context
    from gpupred.profile.nvml import PynvmlBackend

    backend = PynvmlBackend(0)
    try:
        ctx = measure_cuda_context(backend, HarnessConfig())
    finally:
        backend.close()
    print(ctx)
    assert 50 < ctx.context_mib < 4096, ctx
