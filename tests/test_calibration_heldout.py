"""The calibrated-GPU evaluation: a measured GPU held out and predicted with borrowed, calibrated and raw constants;
the interval width it measures, and the predictor core that keeps it.

The runs are a FIXTURE dataset (toy labels on two GPU kinds, graphs from the committed store) and the calibrations
FIXTURE recordings: the figures mean nothing; what is checked is the procedure (no GPU has recorded a calibration yet).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fixtures_calibration import write_fixture_calibration
from fixtures_learning import fixture_dataset
from gpupred.calibration.file import read_calibration
from gpupred.calibration.assessment import (METHODS, CalibratedCore, calibrated_core, committed_calibrations,
                                         equal_weight_quantile, heldout_errors)
from gpupred.calibration.use import STANDIN
from gpupred.learn.conformal import conformal_quantile

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture(scope="module")
def runs() -> tuple[pd.DataFrame, object, object, pd.DataFrame]:
    """FIXTURE runs on an H100 and an H200 (ResNets and VGGs), their step-model inputs, fitted table, footprint terms."""
    from gpupred.memory.physics import footprint_columns
    from gpupred.step.rowphysics import fitted_physics, physics_data

    df = fixture_dataset(gpus=(H100, H200), n_batch_sizes=2)
    df = df[df["family"].isin(["resnet", "vgg"])].reset_index(drop=True)
    pdata = physics_data(df)
    table, _, _ = fitted_physics(pdata, np.arange(len(df)))
    return df, pdata, table, footprint_columns(df)


def _cals(folder: Path, h100: dict | None = None, h200: dict | None = None) -> list:
    return [read_calibration(write_fixture_calibration(folder / "h100.json", gpu_name=H100, **(h100 or {}))),
            read_calibration(write_fixture_calibration(folder / "h200.json", gpu_name=H200, uuid="GPU-feedbeef-0000",
                                                       **(h200 or {})))]


def test_each_measured_gpu_is_held_out_and_scored_three_ways(runs: tuple, tmp_path: Path) -> None:
    df, pdata, table, frame = runs
    errors = heldout_errors(df, pdata, table, _cals(tmp_path, h100={"step": {"launch_s": 30e-6}}), frame)
    keys = {(e["gpu"], e["target"], e["method"]) for e in errors}
    assert keys == {(g, t, m) for g in ("H100 SXM", "H200") for t in ("gpu_util", "iter_time_mean_s", "memory_mib")
                    for m in METHODS}
    n_h100 = int(((df["gpu"] == "H100 SXM") & df["gpu_util"].notna()).sum())
    assert all(len(e["errors"]) == n_h100 for e in errors if e["gpu"] == "H100 SXM")
    assert all(e["reference"] == "calibrations of H200" for e in errors if e["gpu"] == "H100 SXM")
    by = {(e["gpu"], e["target"], e["method"]): e["errors"] for e in errors}
    # the H100 reads a 30 us launch against the H200's 6.5 us: its calibrated step times move, the borrowed do not
    assert not np.allclose(by[("H100 SXM", "iter_time_mean_s", "calibrated")], by[("H100 SXM", "iter_time_mean_s", "borrowed")])


def test_a_gpu_reading_like_its_reference_scores_as_borrowed(runs: tuple, tmp_path: Path) -> None:
    """Both FIXTURE GPUs read the same: calibrated = borrowed x 1, for every target (memory included)."""
    df, pdata, table, frame = runs
    by = {(e["gpu"], e["target"], e["method"]): e["errors"] for e in heldout_errors(df, pdata, table, _cals(tmp_path), frame)}
    for gpu in ("H100 SXM", "H200"):
        for target in ("gpu_util", "iter_time_mean_s", "memory_mib"):
            assert np.allclose(by[(gpu, target, "calibrated")], by[(gpu, target, "borrowed")], atol=1e-3), (gpu, target)


def test_the_width_pools_the_calibrated_errors_with_each_gpu_weighing_the_same(runs: tuple, tmp_path: Path) -> None:
    df, pdata, table, frame = runs
    cals = _cals(tmp_path, h100={"step": {"launch_s": 30e-6}})
    core = calibrated_core(df, pdata, table, frame, 0.1, cals)
    errors = heldout_errors(df, pdata, table, cals, frame)
    for target in ("gpu_util", "iter_time_mean_s", "memory_mib"):
        expected = equal_weight_quantile([e["errors"] for e in errors if e["target"] == target
                                          and e["method"] == "calibrated"], 0.1)
        assert core.widths[target] == pytest.approx(expected) and core.widths[target] > 0
    assert "sm_active" not in core.widths  # not scored: a calibrated GPU keeps the extrapolated width there
    assert core.reference.gpus == ("H100 SXM", "H200")
    summary = pd.DataFrame(core.heldout)
    assert len(summary) == 2 * 3 * len(METHODS) and (summary["n"] > 0).all()
    assert core.describe()["interval_log_width"]["gpu_util"] == round(core.widths["gpu_util"], 4)


def test_equal_weights_do_not_let_the_larger_gpu_decide() -> None:
    small, large = np.full(20, 0.5), np.full(2000, 0.01)
    assert equal_weight_quantile([small, large], 0.1) == 0.5  # pooled by rows, the small GPU would vanish
    assert conformal_quantile(np.concatenate([small, large]), 0.1) == 0.01
    assert np.isnan(equal_weight_quantile([], 0.1))


def test_without_calibrations_nothing_is_measured_and_the_card_says_so(runs: tuple) -> None:
    df, pdata, table, frame = runs
    core = calibrated_core(df, pdata, table, frame, 0.1, [])
    assert core.widths == {} and core.heldout == [] and core.reference.basis == STANDIN
    assert "not measured yet" in CalibratedCore().describe()["interval_log_width"]
    assert committed_calibrations(Path("/nonexistent")) == []


def test_the_predictor_core_uses_the_measured_width_for_a_calibrated_gpu(runs: tuple, tmp_path: Path) -> None:
    from gpupred.calibration.use import applied
    from gpupred.predictor.core import PhysicsCore
    from gpupred.predictor.jobs import JobOptions, resolve_graph

    df = runs[0].assign(**pd.DataFrame([_steps(w, g) for w, g in zip(runs[0]["workload_id"], runs[0]["gpu"])],
                                       index=runs[0].index))
    cals = _cals(tmp_path, h100={"step": {"launch_s": 30e-6}})
    core = PhysicsCore(0.1, 0, calibrations=cals).fit(df)
    assert set(core.calibration_.widths) == {"gpu_util", "iter_time_mean_s", "memory_mib"}
    job = resolve_graph("resnet.resnet18-bs16-img128-fp32-sgd", JobOptions())
    l4 = applied(read_calibration(write_fixture_calibration(tmp_path / "l4.json", gpu_name="NVIDIA L4")))
    out = core.predict(job, "L4", l4)
    width = core.calibration_.widths["memory_mib"]
    assert out["memory_mib_high"] == pytest.approx(out["memory_mib"] * np.exp(width))
    plain = core.predict(job, "L4")
    assert plain["memory_mib_high"] != pytest.approx(out["memory_mib_high"])


def _steps(workload_id: str, gpu: str) -> dict[str, float]:
    from gpupred.step.physics.columns import spec_step_columns
    from gpupred.workloads.spec import WorkloadSpec

    return spec_step_columns(WorkloadSpec.from_id(workload_id), gpu)


def test_a_width_is_taken_only_from_errors_scored_against_the_reference_predictions_use() -> None:
    """One measured GPU calibrated: held out, it is compared with the published defaults, while predictions compare
    with its readings. Those errors measure another rule, so no width is taken from them (fixture errors)."""
    from gpupred.calibration.assessment import calibrated_widths
    from gpupred.calibration.use import Reference, standin_reference

    errors = [{"gpu": "H200", "target": "gpu_util", "method": m, "errors": np.array([0.1, -0.5, 0.9]),
               "reference": STANDIN} for m in ("borrowed", "calibrated", "raw")]
    own = Reference(dict(standin_reference().step), 700.0, 1.03, ("H200",))
    assert calibrated_widths(errors, own, 0.1) == {}
    assert set(calibrated_widths(errors, standin_reference(), 0.1)) == {"gpu_util"}
    second = [{**e, "gpu": "H100 SXM", "reference": "calibrations of H200"} for e in errors]
    assert set(calibrated_widths(errors + second, own, 0.1)) == {"gpu_util"}
