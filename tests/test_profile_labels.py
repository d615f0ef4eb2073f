"""Memory labels from FIXTURE runs and samples (made up here, never data), timed as the harness keeps them."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpupred.profile.labels import group_device_memory_mib, memory_label, transient_excess

WINDOW = (2.0, 6.0)  # the harness keeps samples from 0.5 s before the window to 0.5 s after it


def _run(**kw: object) -> dict:
    row = {"group_id": "g", "group_size": 1, "member": 0, "window_start_s": WINDOW[0], "window_end_s": WINDOW[1],
           "mem_baseline_mib": 600.0, "cuda_context_mib": 480.0, "torch_peak_reserved_mib": 2000.0}
    row.update(kw)
    return row


def _samples(device_mib: float, proc: dict[int, float] | None = None) -> pd.DataFrame:
    rows = []
    for i in range(15, 66):  # t = 1.5 .. 6.5 s: the job allocated long before the first kept sample
        t = i * 0.1
        rows.append(("g", t, "mem_used_mib", device_mib, -1, "poll"))
        for member, mib in (proc or {}).items():
            rows.append(("g", t, "proc_mem_mib", mib, member, "poll"))
    return pd.DataFrame(rows, columns=["group_id", "t_s", "metric", "value", "member", "source"])


def test_per_process_nvml_comes_first() -> None:
    assert memory_label(_run(), _samples(3200.0, {0: 2500.0})) == (2500.0, "nvml-process", "")


def test_solo_device_peak_minus_the_pre_launch_baseline() -> None:
    memory, source, reason = memory_label(_run(), _samples(3200.0))
    assert (memory, source, reason) == (2600.0, "device-minus-baseline", "")


def test_colocated_member_uses_torch_reserved_plus_context() -> None:
    # the device total is shared by the group: never a member's label
    memory, source, reason = memory_label(_run(group_size=2, member=1), _samples(6000.0))
    assert (memory, source, reason) == (2480.0, "torch-reserved-plus-context", "")


def test_solo_without_baseline_falls_back_to_torch_plus_context() -> None:
    memory, source, _ = memory_label(_run(mem_baseline_mib=math.nan), _samples(3200.0))
    assert source == "torch-reserved-plus-context" and memory == 2480.0


def test_label_below_the_context_is_an_error_with_a_reason() -> None:
    memory, source, reason = memory_label(_run(mem_baseline_mib=3150.0), _samples(3200.0))
    assert source == "device-minus-baseline" and memory == 50.0
    assert "below the measured CUDA context 480 MiB" in reason


def test_no_source_at_all_is_a_reason() -> None:
    run = _run(group_size=2, cuda_context_mib=math.nan)
    assert memory_label(run, _samples(3200.0))[2].startswith("no memory source")


def test_group_device_memory_is_peak_minus_baseline() -> None:
    runs = pd.DataFrame([_run(group_size=2, member=m) for m in (0, 1)])
    assert group_device_memory_mib(runs, _samples(6000.0))["g"] == 5400.0


def test_torch_fallback_prefers_what_the_allocator_held_in_the_window() -> None:
    # the lifetime peak (2000) also counts warm-up's autotuning workspace; the window's figure is the label
    run = _run(group_size=2, member=1, torch_window_reserved_mib=1500.0)
    assert memory_label(run, _samples(6000.0)) == (1980.0, "torch-reserved-plus-context", "")


def test_transient_excess_is_the_lifetime_peak_over_the_label() -> None:
    assert transient_excess(_run(), 1240.0) == pytest.approx(1.0)  # (2000 + 480) / 1240 - 1
    assert transient_excess(_run(), 4000.0) == 0.0
    assert math.isnan(transient_excess(_run(cuda_context_mib=math.nan), 1240.0))


def test_labels_of_many_runs_are_each_runs_label_from_its_own_groups_samples() -> None:
    """FIXTURE: three groups with different device peaks and one run whose group has no samples; the labels of all
    runs at once equal each run's label from all the samples."""
    from gpupred.profile.labels import memory_labels_of

    samples = pd.concat([_samples(peak).assign(group_id=g) for g, peak in (("a", 3200.0), ("b", 4100.0),
                                                                           ("c", 5000.0))], ignore_index=True)
    runs = pd.DataFrame([_run(group_id="b"), _run(group_id="a"), _run(group_id="none"),
                         _run(group_id="c", group_size=2, member=1)])
    labels = memory_labels_of(runs, samples)
    assert labels == [memory_label(run, samples) for _, run in runs.iterrows()]
    assert [m for m, _, _ in labels[:2]] == [3500.0, 2600.0] and labels[2][1] == "torch-reserved-plus-context"
