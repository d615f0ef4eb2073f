"""Real-GPU checks of the profiler; skipped where NVML finds no device."""

from __future__ import annotations

import pytest

from gpupred.profile.nvml import probe

_NO_GPU = probe()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_NO_GPU is not None, reason=f"no NVIDIA GPU: {_NO_GPU}")]


def test_real_sampler_reads_core_metrics() -> None:
    import time

    from gpupred.profile.nvml import PynvmlBackend, Sampler

    backend = PynvmlBackend(0)
    try:
        info = backend.device_info()
        assert info.name and info.uuid.startswith("GPU-") and info.memory_total_mib > 0
        s = Sampler(backend).start()
        time.sleep(1.2)
        s.stop()
    finally:
        backend.close()
    metrics = set(s.samples.metric)
    assert {"gpu_util", "mem_used_mib"} <= metrics, s.notes
    print("notes:", s.notes, "gpm:", s.gpm_supported, "buffered:", s.buffered_supported)


def test_real_solo_run_of_a_small_cnn() -> None:
    from gpupred.profile.nvml import PynvmlBackend
    from gpupred.profile.harness import HarnessConfig, run_unit
    from gpupred.workloads.spec import WorkloadSpec

    spec = WorkloadSpec.from_id("resnet.resnet18-bs32-img32-fp32-sgd")
    backend = PynvmlBackend(0)
    try:
        r = run_unit([spec], backend, HarnessConfig(window_s=1.0, warmup_min_s=0.5))
    finally:
        backend.close()
    row = r.runs.to_pylist()[0]
    assert row["status"] == "ok", row["message"]
    assert not row["simulated"] and row["gpu_sm_count"] > 0 and row["torch_peak_allocated_mib"] > 0
    metrics = set(r.samples.column("metric").to_pylist())
    assert "gpu_util" in metrics
    print(row["gpu_name"], row["iter_time_mean_s"], row["notes"], r.timings)


def test_real_colocated_pair() -> None:
    from gpupred.profile.colocate import run_colocated
    from gpupred.profile.harness import HarnessConfig
    from gpupred.profile.nvml import PynvmlBackend
    from gpupred.workloads.spec import WorkloadSpec

    specs = [WorkloadSpec.from_id("mlp.mlp-w1024-d4-bs256-in1024-fp32-sgd")] * 2
    backend = PynvmlBackend(0)
    try:
        r = run_colocated(specs, backend, HarnessConfig(window_s=1.0, warmup_min_s=0.5))
    finally:
        backend.close()
    assert r.statuses == ["ok", "ok"], r.runs.column("message").to_pylist()
