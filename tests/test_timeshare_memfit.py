"""The time-sharing slowdown estimate and the pair memory-fit probability (hand-computed values; no data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpupred.colocation.members import with_busy
from gpupred.colocation.memfit import fits_together, group_memory_fit, pair_memory_quantile, pair_oom_probability
from gpupred.slowdown.estimator import TimeSharing
from gpupred.slowdown.physics import busy_fraction, group_timeshare, pair_timeshare, timeshare_slowdown


def test_timeshare_limits_and_hand_value() -> None:
    sa, sb = pair_timeshare(np.array([1.0, 0.0, 0.5, 0.3]), np.array([1.0, 0.9, 0.5, 0.0]))
    assert sa[0] == pytest.approx(2.0) and sb[0] == pytest.approx(2.0)  # both always busy: half speed each
    assert sa[1] == pytest.approx(1.0)  # a job that never waits for the GPU is never slowed
    assert sb[3] == pytest.approx(1.0)  # nor is one whose partner never uses it
    # b = 0.5 each: q solves q^2 + q - 1 = 0, s = 1 + q / 2
    q = (np.sqrt(5) - 1) / 2
    assert sa[2] == pytest.approx(1 + 0.5 * q) and sb[2] == pytest.approx(sa[2])


def test_timeshare_monotone_and_bounded() -> None:
    grid = np.linspace(0, 1, 11)
    a, b = np.meshgrid(grid, grid, indexing="ij")
    s = timeshare_slowdown(a.ravel(), b.ravel()).reshape(a.shape)
    assert (np.diff(s, axis=0) >= -1e-12).all() and (np.diff(s, axis=1) >= -1e-12).all()
    assert (s >= 1).all() and (s <= 1 + a + 1e-12).all()
    assert np.isnan(timeshare_slowdown(np.array([np.nan]), np.array([0.5])))[0]


def test_busy_fraction_prefers_the_step_model() -> None:
    f = pd.DataFrame({"gpu_util": [50.0, 80.0], "phys_gpu_busy_s": [0.03, np.nan], "phys_step_s": [0.1, 0.2]})
    assert busy_fraction(f).tolist() == pytest.approx([0.3, 0.8])  # phys first, util where missing
    assert busy_fraction(f, "util").tolist() == pytest.approx([0.5, 0.8])
    assert busy_fraction(pd.DataFrame({"gpu_util": [50.0]})).tolist() == [0.5]
    assert busy_fraction(pd.DataFrame({"phys_util": [20.0]}), "phys").tolist() == [0.2]
    b = with_busy(f)
    assert b["busy_util"].tolist() == pytest.approx([0.5, 0.8])
    assert np.isnan(b["busy_phys"].iloc[1]) and b["busy_phys"].iloc[0] == pytest.approx(0.3)


def test_group_timeshare_pairs_rows() -> None:
    t = pd.DataFrame({"group_id": ["g1", "g1", "g2", "g2"]})
    s = group_timeshare(t, np.array([1.0, 1.0, 0.2, 0.0]))
    assert s.tolist() == pytest.approx([2.0, 2.0, 1.0, 1.0])


def test_time_sharing_estimator_is_the_estimate_on_a_pair_frame() -> None:
    X = pd.DataFrame({"own_busy": [0.5, 1.0], "partner_busy": [0.5, 1.0]})
    assert TimeSharing("busy").predict(X).tolist() == pytest.approx([1 + 0.5 * (np.sqrt(5) - 1) / 2, 2.0])


def test_oom_probability_point_and_spread() -> None:
    # no spread: the point sum decides
    p = pair_oom_probability(np.array([10.0, 13.0]), np.array([10.0, 13.0]), np.array([10.0, 13.0]),
                             np.array([10.0, 13.0]), 24.0)
    assert p.tolist() == [0.0, 1.0]
    # a point sum that fits with room, but a wide interval above it: risky, refused
    risky = pair_oom_probability(np.array([10.0]), np.array([20.0]), np.array([10.0]), np.array([20.0]), 24.0)
    assert 0.05 < risky[0] < 0.5
    assert not fits_together(np.array([10.0]), np.array([20.0]), np.array([10.0]), np.array([20.0]), 24.0)[0]
    assert fits_together(np.array([10.0]), np.array([11.0]), np.array([10.0]), np.array([11.0]), 24.0)[0]


def test_sum_quantile_matches_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    pa, ha, pb, hb = 4000.0, 6000.0, 8000.0, 9000.0
    sa, sb = np.log(ha / pa) / 1.6449, np.log(hb / pb) / 1.6449
    draws = pa * np.exp(rng.normal(0, sa, 200_000)) + pb * np.exp(rng.normal(0, sb, 200_000))
    q = pair_memory_quantile(np.array([pa]), np.array([ha]), np.array([pb]), np.array([hb]), q=0.95)[0]
    assert q == pytest.approx(np.quantile(draws, 0.95), rel=0.02)
    p = pair_oom_probability(np.array([pa]), np.array([ha]), np.array([pb]), np.array([hb]), 15000.0)[0]
    assert p == pytest.approx((draws > 15000).mean(), abs=0.01)


def test_group_memory_fit_table() -> None:
    t = pd.DataFrame({"group_id": ["g1", "g1", "g2", "g2"], "group_size": 2, "group_memory_mib": [9000.0] * 2 + [30000.0] * 2,
                      "status": ["ok", "ok", "oom", "partner_failed"]})
    m = pd.DataFrame({"mem_mib": [4000.0, 4000.0, 12000.0, 11000.0], "mem_mib_high": [5000.0, 5000.0, 16000.0, 15000.0]})
    out = group_memory_fit(t, m, 24576.0)
    assert out["group_id"].tolist() == ["g1", "g2"] and out["point_sum_mib"].tolist() == [8000.0, 23000.0]
    assert out["place"].tolist() == [True, False] and out["failed"].tolist() == [False, True]
