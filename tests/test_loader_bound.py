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
