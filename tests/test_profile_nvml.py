"""The NVML layer: sampler over the fake backend, guarded metrics, the no-GPU probe."""

from __future__ import annotations

import os
import time

import pytest

from gpupred.profile.fake import FakeBackend
from gpupred.profile.nvml import NvmlUnavailable, PynvmlBackend, Sampler, probe, require_gpu
from gpupred.profile.schema import METRICS


def _run(backend: FakeBackend, seconds: float = 0.6, members: dict[int, int] | None = None) -> Sampler:
    s = Sampler(backend, interval_ms=20).start()
    if members:
        s.set_members(members)
    time.sleep(seconds)
    s.stop()
    return s


def test_sampler_records_every_metric_with_sources() -> None:
    s = _run(FakeBackend(), members={os.getpid(): 0})  # the fake attributes memory only to live pids
    got = set(zip(s.samples.metric, s.samples.source))
    assert {m for m, _ in got} == set(METRICS)
    assert ("gpu_util", "buffered") in got and ("sm_active", "gpm") in got and ("gpu_util", "poll") in got
    assert all(m == 0 for m, metric in zip(s.samples.member, s.samples.metric) if metric == "proc_mem_mib")
    assert s.gpm_supported and s.buffered_supported and s.notes == []
    assert s.cpu_time_s > 0 and s.wall_time_s >= 0.5


def test_unsupported_and_flaky_metrics_are_dropped_with_a_note() -> None:
    s = _run(FakeBackend(gpm=False, buffered=False, processes=False, unsupported=("power",), flaky=("temperature",)),
             members={1: 0})
    metrics = set(s.samples.metric)
    assert "power_w" not in metrics and "temp_c" not in metrics and "sm_active" not in metrics
    assert "gpu_util" in metrics and "mem_used_mib" in metrics
    text = " ".join(s.notes)
    assert "power: dropped" in text and "temperature: dropped" in text and "gpm:" in text and "buffered" in text
    assert "proc_mem" in text
    assert not s.gpm_supported and not s.buffered_supported


def test_sampler_survives_a_backend_whose_setup_raises() -> None:
    class Broken(FakeBackend):
        def poll_groups(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("driver fell over")

        def gpm_support(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("no gpm")

    s = _run(Broken(), 0.2)
    assert any("driver fell over" in n for n in s.notes) and not s.gpm_supported


def test_no_gpu_probe_and_one_line_error() -> None:
    msg = probe()
    if msg is None:
        pytest.skip("NVML finds a GPU here")
    with pytest.raises(NvmlUnavailable) as err:
        require_gpu()
    assert str(err.value).startswith("no NVIDIA GPU/driver found (") and "\n" not in str(err.value)
    with pytest.raises(NvmlUnavailable):
        PynvmlBackend(0)
