"""Rows whose input pipeline binds the modelled step are scored, never fitted on (fixture rows built here: one
catalog workload's kernels, fixture loader times)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.step.physics.columns import spec_kernels
from gpupred.step.physics.inputfeed import LOADER_COLUMNS
from gpupred.step.rowphysics import loader_bound, physics_data
from gpupred.workloads.spec import WorkloadSpec

WORKLOAD = "resnet.resnet50-bs64-img224-bf16-sgd"


def _rows(loaders: list[tuple[float, float, float, float, float] | None]) -> pd.DataFrame:
    nan = (np.nan,) * len(LOADER_COLUMNS)
    frame = pd.DataFrame([dict(zip(LOADER_COLUMNS, nan if lt is None else lt)) for lt in loaders])
    return frame.assign(run_id=[f"fixture-{i}" for i in range(len(loaders))], gpu="H100 SXM", precision="bf16",
                        sync="step", sampler="nvml-poll-50ms", host_batches=0)


def test_only_a_pipeline_that_lengthens_the_modelled_step_marks_its_row() -> None:
    kernels = spec_kernels(WorkloadSpec.from_record(WORKLOAD, None))
    frame = _rows([None, (1e-5, 0.0, 0.0, 1.0, 0.0), (2.0, 0.0, 0.0, 1.0, 0.0), (2.0, 1e-4, 8.0, 16.0, 0.0),
                   (0.01, 1e-4, 8.0, 16.0, 0.0)])
    bound = loader_bound(physics_data(frame, [kernels] * len(frame)))
    # resident; 10 us in line; 2 s in line; 2 s a batch over 8 workers (0.25 s, far above the step); 10 ms over 8
    assert bound.tolist() == [False, False, True, True, False]


def test_a_frame_without_pipelines_marks_nothing() -> None:
    kernels = spec_kernels(WorkloadSpec.from_record(WORKLOAD, None))
    frame = _rows([None, None]).drop(columns=list(LOADER_COLUMNS))
    assert not loader_bound(physics_data(frame, [kernels] * 2)).any()


def test_the_loader_width_is_measured_on_loader_bound_rows_or_a_factor_of_two() -> None:
    from gpupred.learn.conformal import conformal_quantile
    from gpupred.step.rowphysics import LOADER_WIDTH_UNMEASURED, MIN_LOADER_ROWS, loader_width

    physics = np.full(12, 0.1)  # FIXTURE step times (s) and measurements
    y = physics * np.exp(np.linspace(-0.3, 0.6, 12))
    few = np.arange(MIN_LOADER_ROWS - 1)
    assert loader_width(few, y, physics, True, 0.1) == (LOADER_WIDTH_UNMEASURED, MIN_LOADER_ROWS - 1)
    rows = np.arange(12)
    width, n = loader_width(rows, y, physics, True, 0.1)
    assert n == 12 and width == conformal_quantile(np.log(y / physics), 0.1) and width > 0.5
    util, pred = np.array([10.0, 20.0, 40.0, 80.0, 95.0]), np.array([12.0, 30.0, 40.0, 60.0, 99.0])  # percentages
    width, n = loader_width(np.arange(5), util, pred, False, 0.1)
    assert n == 5 and width == conformal_quantile(np.log1p(util) - np.log1p(pred), 0.1)


def test_loader_bound_rows_get_at_least_the_loader_width() -> None:
    """FIXTURE dataset rows (resident, tiny MLP kernels: none loader-bound, so the measured width is the unmeasured
    factor of 2); FIXTURE loader times make two of three copies of one row loader-bound, and a loader width set wider
    than the conformal interval shows which rows it widens."""
    from fixtures_learning import fixture_dataset, fixture_kernels
    from gpupred.step.estimator import StepEstimator
    from gpupred.step.rowphysics import LOADER_WIDTH_UNMEASURED

    df = fixture_dataset(n_batch_sizes=2)
    est = StepEstimator(("iter_time_mean_s",), n_cal=3, n_inner=2).fit(df, physics_data(df, fixture_kernels(df)))
    assert est.loader_widths_["iter_time_mean_s"] == (LOADER_WIDTH_UNMEASURED, 0)
    row = df.iloc[[0, 0, 0]].reset_index(drop=True)
    for col, values in zip(LOADER_COLUMNS, zip((np.nan, np.nan, np.nan, np.nan, np.nan), (2.0, 0.0, 0.0, 1.0, 0.0),
                                                (2.0, 1e-4, 8.0, 16.0, 0.0))):
        row[col] = values
    est.loader_widths_["iter_time_mean_s"] = (float(np.log(50.0)), 0)  # wider than any FIXTURE conformal interval
    pred = est.predict(row, physics_data(row, fixture_kernels(row)))
    point, low, high = (pred[c].to_numpy() for c in ("iter_time_mean_s", "iter_time_mean_s_low",
                                                    "iter_time_mean_s_high"))
    assert np.allclose(high[1:], point[1:] * 50.0) and np.allclose(low[1:], point[1:] / 50.0)
    assert high[0] < point[0] * 50.0 and low[0] > point[0] / 50.0  # the resident copy keeps the correction's interval
