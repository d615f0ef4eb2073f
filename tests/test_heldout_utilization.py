"""Lucid's pairs scored with a predictor that never trained on Lucid (notebook 06, issue 77): the held-out
utilization replaces the out-of-fold one for its runs only, and its figures are reported under their own name."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.colocation.members import with_utilization
from gpupred.colocation.study import SliceResult, heldout_metrics
from gpupred.slowdown.evaluate import METRICS


def test_the_heldout_answers_replace_the_out_of_fold_ones_for_their_runs_alone() -> None:
    oof = pd.DataFrame({"run_id": ["FIXTURE-a", "FIXTURE-b", "FIXTURE-c"], "gpu_util": [10.0, 20.0, 30.0],
                        "gpu_util_low": [5.0, 15.0, 25.0], "gpu_util_high": [15.0, 25.0, 35.0],
                        "memory_mib": [1.0, 2.0, 3.0]})
    held = pd.DataFrame({"run_id": ["FIXTURE-c", "FIXTURE-a"], "pred_gpu_util": [33.0, 11.0],
                         "pred_gpu_util_low": [30.0, 9.0], "pred_gpu_util_high": [36.0, 13.0]})
    out = with_utilization(oof, held)
    assert out["gpu_util"].tolist() == [11.0, 20.0, 33.0]
    assert out["gpu_util_low"].tolist() == [9.0, 15.0, 30.0] and out["gpu_util_high"].tolist() == [13.0, 25.0, 36.0]
    assert out["memory_mib"].tolist() == [1.0, 2.0, 3.0] and oof["gpu_util"].tolist() == [10.0, 20.0, 30.0]


def test_the_heldout_figures_are_the_summed_utilizations_renamed() -> None:
    """FIXTURE scores of two predictors, all rows and without flagged jobs: only summed predicted utilization's
    all-rows figures come back, each under ``sum_util_heldout``."""
    scores = pd.DataFrame([{"predictor": p, "rows_kept": kept, "rows": 10, **{m: float(i) for i, m in enumerate(METRICS)}}
                           for p in ("sum_util_pred", "timeshare_pred") for kept in ("all", "unflagged")])
    empty = pd.DataFrame()
    result = SliceResult("lucid_nonrl", "FIXTURE", [], scores, empty, pd.DataFrame({"flagged": [False]}), empty,
                         pd.Series(dtype=object), empty)
    figures = heldout_metrics(result)
    assert figures == {f"slowdown_{m}_lucid_nonrl_sum_util_heldout": float(i) for i, m in enumerate(METRICS)}
    assert np.isfinite(list(figures.values())).all()
