"""The launch-blocking wait (``blocking_s``): fitted where a GPU kind has launch-blocking runs beside runs of another
protocol, borrowed by keys that have none (issue 77: Lucid's runs all ran under ``CUDA_LAUNCH_BLOCKING=1``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from fixtures_learning import fixture_dataset, fixture_kernels

from gpupred.hardware import gpu_spec
from gpupred.step.physics.constants import DEFAULT, ConstantsTable
from gpupred.step.physics.fit import MIN_BLOCKING_ROWS, FitRows, fit_constants, labelled_rows, predict_rows

TRUE_BLOCKING_S = 40e-6  # FIXTURE: the wait the fixture's launch-blocking labels are made with
TRUE = replace(DEFAULT, launch_s=20e-6, step_overhead_s=300e-6, blocking_s=TRUE_BLOCKING_S)  # FIXTURE constants


def _rows(blocking: bool = True, step: bool = True) -> FitRows:
    """FIXTURE rows on one GPU kind: each workload once with a sync per step and once under launch blocking (as the
    catalog's launch-blocking twins), labelled by the step model under :data:`TRUE` (a recovery test of the fit,
    not a measurement)."""
    df = fixture_dataset(n_batch_sizes=3)
    kernels = fixture_kernels(df)
    syncs = (["step"] if step else []) + (["kernel"] if blocking else [])
    runs = [(k, p, s) for k, p in zip(kernels, df["precision"]) for s in syncs]
    gpu = gpu_spec("H200")
    nan = np.full(len(runs), np.nan)
    rows = FitRows([k for k, _, _ in runs], [gpu] * len(runs), [p for _, p, _ in runs], [s for _, _, s in runs],
                   [False] * len(runs), nan.copy(), nan.copy())
    rows.util, rows.step_s = predict_rows(rows, TRUE)
    rows.batches.clear()
    return rows


def test_the_wait_is_fitted_on_the_launch_blocking_twins_and_the_seven_on_the_others() -> None:
    """FIXTURE: the seven constants are those of a fit on the sync-per-step runs alone (bit for bit), and ``blocking_s``
    comes back from the launch-blocking runs within 5% of the wait that made their labels, with their count; the
    sync-per-step runs' answers are the same under both fits."""
    rows = _rows()
    others, blocking = labelled_rows(rows)
    assert len(blocking) >= MIN_BLOCKING_ROWS and len(others) == len(blocking)
    fit = fit_constants(rows)
    alone = fit_constants(rows.subset(others))
    assert all(getattr(fit, k) == getattr(alone, k) for k in ("compute_eff", "tensor_eff", "memory_eff", "launch_s",
                                                              "step_overhead_s", "min_kernel_s", "depthwise_eff"))
    assert alone.blocking_s == DEFAULT.blocking_s and alone.blocking_runs == 0
    assert fit.blocking_s == pytest.approx(TRUE_BLOCKING_S, rel=0.05) and fit.blocking_runs == len(blocking)
    assert "launch-blocking" in fit.source
    for a, b in zip(predict_rows(rows, fit, others), predict_rows(rows, alone, others)):  # it prices launch blocking
        assert np.array_equal(a, b)  # alone: the sync-per-step runs' answers do not move


def test_a_key_with_only_launch_blocking_runs_keeps_the_default_wait() -> None:
    """FIXTURE: with no runs of another protocol the wait cannot be told from the launch cost: the seven are fitted
    jointly over every run, as before, and ``blocking_s`` stays the published default."""
    fit = fit_constants(_rows(step=False))
    assert fit.blocking_s == DEFAULT.blocking_s and fit.blocking_runs == 0 and fit is not DEFAULT


def test_the_wait_is_borrowed_from_the_fits_that_measured_it_and_moved_by_host_speed() -> None:
    """FIXTURE fits: an H200 whose wait was fitted (20 us on hosts of score 0.4) and an H100 whose was not. The same
    protocol borrows the measured one alone; another protocol gets it moved to its host (0.4 / 2.0 of it) or to the
    reference host; with no measured wait anywhere, the default."""
    h200 = replace(DEFAULT, blocking_s=20e-6, blocking_runs=16, host_score=0.4, source="FIXTURE")
    h100 = replace(DEFAULT, blocking_s=90e-6, host_score=0.5, source="FIXTURE")
    table = ConstantsTable({("H200", "FIXTURE-p"): h200, ("H100 SXM", "FIXTURE-p"): h100})
    assert table.get("A100 80GB", "FIXTURE-p").blocking_s == pytest.approx(20e-6)
    assert table.get("RTX 3090", "FIXTURE-q", host_score=2.0).blocking_s == pytest.approx(20e-6 * 0.4 / 2.0)
    assert table.get("RTX 3090", "FIXTURE-q").blocking_s == pytest.approx(20e-6 * 0.4)
    unmeasured = ConstantsTable({("H100 SXM", "FIXTURE-p"): h100})
    assert unmeasured.get("RTX 3090", "FIXTURE-q").blocking_s == DEFAULT.blocking_s
    assert unmeasured.get("A100 80GB", "FIXTURE-p").blocking_s == DEFAULT.blocking_s
