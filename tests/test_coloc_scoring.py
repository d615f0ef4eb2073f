"""Slowdown estimators, held-out scoring by model group, adaptation from reference co-runs, failures (FIXTURE data:
tests/fixtures_gavel.py plants an additive truth; nothing here is a measurement)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixtures_gavel import fixture_throughputs
from sklearn.base import clone

from gpupred.colocation.failures import FailureModel
from gpupred.colocation.gavelpairs import cross_gpu_busy
from gpupred.colocation.matrix import ordered_pairs
from gpupred.slowdown.estimator import (
    CorrectedSlowdown, SlowdownModel, StepShare, SummedUtilization, TimeSharing, pair_frame,
)
from gpupred.colocation import study
from gpupred.slowdown import evaluate as scoring
from gpupred.colocation.matrix import heldout_matrices
from gpupred.errors import GpupredError
from gpupred.importers.gavel import tables_from_json


@pytest.fixture(scope="module")
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    return tables_from_json(fixture_throughputs(), "FIXTURE.json")


@pytest.fixture(scope="module")
def v100(frames) -> study.Slice:
    return study.gavel_slice(*frames, "v100")


def test_pair_frame_pairs_members_and_drops_larger_groups() -> None:
    table = pd.DataFrame({"group_id": ["a", "a", "b", "b", "c", "c", "c"], "member": [1, 0, 0, 1, 0, 1, 2],
                          "job_key": ["x", "y", "x", "x", "x", "y", "z"], "model_group": ["X", "Y", "X", "X", "X", "Y", "Z"],
                          "gpu_name": "FIXTURE", "slowdown": [1.5, 1.2, 1.1, 1.1, 2.0, 2.0, 2.0], "group_failed": False})
    member = pd.DataFrame({"u": [10.0, 20.0, 30.0, 30.0, 1.0, 2.0, 3.0]})
    X = pair_frame(table, member, ["u"])
    assert len(X) == 4 and set(X.group_id) == {"a", "b"}
    a = X[X.group_id == "a"].set_index("member")
    assert a.loc[0, "job_key"] == "y" and a.loc[0, "partner_key"] == "x" and a.loc[0, "partner_group"] == "X"
    assert a.loc[0, "own_u"] == 20.0 and a.loc[0, "partner_u"] == 10.0 and a.loc[1, "slowdown"] == 1.5


def test_priors_are_their_formulas_and_sklearn_estimators() -> None:
    X = pd.DataFrame({"own_u": [30.0, 80.0], "partner_u": [40.0, 70.0], "own_t": [1.0, 3.0], "partner_t": [1.0, 1.0]})
    assert SummedUtilization("u").predict(X).tolist() == pytest.approx([1.0, 1.5])
    assert StepShare("t").predict(X).tolist() == pytest.approx([1.5, 1.25])
    est = CorrectedSlowdown(StepShare("t"), ("u",), margin=0.1)
    twin = clone(est)
    assert twin.get_params()["margin"] == 0.1 and twin.prior is not est.prior
    d = est.describe()
    assert d["kind"] == "learned" and d["params"]["prior"] == "StepShare" and d["what"]
    with pytest.raises(GpupredError, match="pair frame lacks"):
        TimeSharing("busy").predict(X)


def test_cells_hold_out_whole_model_groups_and_never_score_a_reference(v100: study.Slice) -> None:
    X = v100.X
    refs = study.reference_choice(v100, 3)
    cells = scoring.group_cells(X, n_folds=3, seed=1, fixed=refs)
    scored = np.zeros(len(X), dtype=int)
    for c in cells:
        train_jobs = set(X.job_key.iloc[c.train]) | set(X.partner_key.iloc[c.train])
        assert not train_jobs & set(c.heldout)  # no pair of a held-out job is a training pair
        tested = X.iloc[c.test]
        assert tested.job_key.isin(c.heldout).all() and tested.partner_key.isin(c.heldout).all()
        held_groups = set(X.model_group[X.job_key.isin(c.heldout)])
        assert not (set(X.model_group.iloc[c.train]) & held_groups) - set(X.model_group[X.job_key.isin(refs)])
        scored[c.test] += 1
    assert scored.max() == 1
    with_ref = X.job_key.isin(refs) | X.partner_key.isin(refs)
    assert (scored[with_ref.to_numpy()] == 0).all() and (scored[~with_ref.to_numpy()] == 1).all()


def test_adaptation_recovers_new_jobs_effects_and_k0_is_the_prior(v100: study.Slice) -> None:
    X = v100.X
    held = sorted(j for j in set(X.job_key) if j.startswith(("FixC", "FixE")))
    refs = [j for j in sorted(set(X.job_key)) if j not in held][:5]
    train = X[~X.job_key.isin(held) & ~X.partner_key.isin(held)]
    model = SlowdownModel(StepShare("step_s")).fit(train, train.slowdown.to_numpy())
    test = X[X.job_key.isin(held) & X.partner_key.isin(held)]  # pairs of two new jobs, as scoring holds them out
    for job in held:
        model.adapt(job, scoring.coruns_with(X, job, []))
    np.testing.assert_allclose(model.predict(test), StepShare("step_s").predict(test))  # k = 0: the prior itself
    for job in held:
        model.adapt(job, scoring.coruns_with(X, job, refs))
    assert all(model.adapted_[job] == 5 for job in held)
    err = np.abs(np.log(model.predict(test)) - np.log(test.slowdown.to_numpy()))
    prior_err = np.abs(np.log(StepShare("step_s").predict(test)) - np.log(test.slowdown.to_numpy()))
    assert err.mean() < 0.35 * prior_err.mean()


def test_run_slice_scores_adaptation_above_the_prior_on_a_planted_truth(v100: study.Slice) -> None:
    r = study.run_slice(v100, n_folds=3, seed=0, ks=range(4))
    s = r.scores[r.scores.rows_kept == "all"].set_index("predictor")
    assert set(s.index) >= {"step_share", "timeshare_xgpu", "corrected", "adapted_k0", "adapted_k3"}
    for m in scoring.METRICS:
        assert s.loc["adapted_k0", m] == pytest.approx(s.loc["step_share", m])  # no co-run: the prior
    assert s.loc["adapted_k3", "spearman_pooled"] > s.loc["step_share", "spearman_pooled"] + 0.3
    assert s.loc["adapted_k3", "spearman_cell"] > s.loc["adapted_k1", "spearman_cell"]
    assert s["rows"].nunique() == 1 and r.heldout.cell.ge(0).all()  # every predictor on the same rows
    metrics = study.slice_metrics(r)
    assert "slowdown_spearman_cell_gavel_v100_adapted_k3" in metrics and not any("." in k for k in metrics)
    k3 = r.coruns[r.coruns.k == 3]
    assert (k3.coruns[k3.job_key != "FixHuge"] == 3).all()  # a failed co-run (FixHuge's) adapts nothing
    assert (k3.coruns[k3.job_key == "FixHuge"] < 3).all()


def test_correction_is_kept_only_where_it_beats_the_prior() -> None:
    rng = np.random.default_rng(0)
    jobs = pd.DataFrame({"job_key": [f"j{k}" for k in range(24)], "model_group": [f"g{k % 6}" for k in range(24)],
                         "f": rng.uniform(0, 1, 24), "t": rng.uniform(0.1, 1, 24)})
    X = ordered_pairs(jobs, ["f", "t"])
    prior = StepShare("t")
    exact = prior.predict(X)
    useful = exact * np.exp(0.8 * X.own_f.to_numpy() * X.partner_f.to_numpy())  # a feature product the prior misses
    kept = CorrectedSlowdown(prior, ("f",)).fit(X, useful)
    assert kept.chosen_ != "prior"
    same = CorrectedSlowdown(prior, ("f",)).fit(X, exact * np.exp(rng.normal(0, 1e-3, len(X))))
    assert same.chosen_ == "prior"
    np.testing.assert_allclose(same.predict(X), exact)


def test_solo_baseline_check_flags_a_job_faster_than_alone() -> None:
    X = pd.DataFrame({"job_key": ["a"] * 10 + ["b"] * 10, "slowdown": [1.2] * 10 + [0.9] * 10})
    flags = scoring.solo_baseline_flags(X, noise_sd=0.03).set_index("job_key")
    assert not flags.loc["a", "flagged"] and flags.loc["b", "flagged"]
    assert flags.loc["b", "threshold"] == pytest.approx(-2 * 0.03 / np.sqrt(10))
    assert not scoring.solo_baseline_flags(X, noise_sd=float("nan"))["flagged"].any()  # no noise estimate: no flag


def test_reference_jobs_start_at_the_medoid_and_are_nested() -> None:
    f = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0, 10.0], "y": [0.0, 0.0, 0.0, 0.0, 0.0]}, index=list("abcde"))
    refs = scoring.reference_jobs(f, 3)
    assert refs[0] in ("b", "c") and refs[1] == "e" and refs == scoring.reference_jobs(f, 4)[:3]
    assert "e" not in scoring.reference_jobs(f, 2, candidates=list("abcd"))
    with pytest.raises(GpupredError, match="candidates"):
        scoring.reference_jobs(f, 3, candidates=["a"])


def test_failure_rule_reads_measured_outcomes_then_reference_co_runs() -> None:
    rows = [("r", "a", False), ("r", "big", True), ("a", "b", False), ("r2", "a", False)]
    X = pd.DataFrame([{"job_key": a, "partner_key": b, "failed": f} for a, b, f in rows])
    m = FailureModel(refs=("r", "r2")).fit(X)
    assert m.large_ == {"big"} and m.base_rate_ == 0.0
    new = pd.DataFrame({"job_key": ["n", "n"], "partner_key": ["r", "r2"], "failed": [True, False]})
    m.adapt("n", new)
    q = pd.DataFrame({"job_key": ["n", "n", "a", "a"], "partner_key": ["r", "a", "b", "r"]})
    assert m.predict_proba(q).tolist() == [1.0, 1.0, 0.0, 0.0]  # measured; large; measured; measured
    m.adapt("n", new.assign(failed=False))
    assert m.predict_proba(q.iloc[1:2]).tolist() == [0.0]


def test_heldout_matrix_never_reads_the_pair_it_predicts(v100: study.Slice) -> None:
    X = v100.X.copy()
    refs = study.reference_choice(v100, 3)
    jobs = X.drop_duplicates("job_key")[["job_key", "model_group", "own_step_s"]].rename(columns={"own_step_s": "step_s"})
    jobs = jobs.sort_values("job_key").reset_index(drop=True)
    make = lambda: SlowdownModel(StepShare("step_s"))  # noqa: E731
    a, b = [j for j in jobs.job_key if j not in refs and j.startswith("FixA")][0], "FixD (batch size 64)"
    before = heldout_matrices(X, jobs, ["step_s"], make, refs, 3, n_folds=3, seed=0)
    pair = ((X.job_key == a) & (X.partner_key == b)) | ((X.job_key == b) & (X.partner_key == a))
    X.loc[pair, "slowdown"] *= 5.0
    after = heldout_matrices(X, jobs, ["step_s"], make, refs, 3, n_folds=3, seed=0)
    i, j = jobs.index[jobs.job_key == a][0], jobs.index[jobs.job_key == b][0]
    assert np.isfinite(before.point).all() and (before.high >= before.point).all()
    assert after.point[i, j] == pytest.approx(before.point[i, j]) and after.point[j, i] == pytest.approx(before.point[j, i])


def test_cross_gpu_busy_recovers_a_planted_split() -> None:
    from gpupred.colocation.gavelpairs import time_factor

    u = time_factor("p100")
    assert u == pytest.approx(np.sqrt(15.7 / 9.3 * 900 / 732))  # V100 16 GB over P100, datasheet peaks
    host, gpu = np.array([0.0, 0.05, 0.1, 0.3]), np.array([0.2, 0.1, 0.1, 0.05])
    steps = pd.DataFrame({"job_key": list("abcd"), "step_s_k80": 9.0, "step_s_p100": host + gpu * u, "step_s_v100": host + gpu})
    busy = cross_gpu_busy(steps).set_index("job_key")
    np.testing.assert_allclose(busy["busy_v100"], gpu / (host + gpu), atol=1e-9)
    assert "busy_k80" not in busy  # the K80 is not in the hardware table: its steps are not read


def test_repeated_inner_splits_deal_groups_differently() -> None:
    jobs = pd.DataFrame({"job_key": [f"j{k}" for k in range(12)], "model_group": [f"g{k}" for k in range(12)],
                         "t": np.linspace(0.1, 1.0, 12)})
    X = ordered_pairs(jobs, ["t"])
    from gpupred.slowdown.correction import group_folds

    first, again, other = group_folds(X, 3), group_folds(X, 3), group_folds(X, 3, shuffle=1)
    tests = lambda folds: [frozenset(X.model_group.to_numpy()[te]) for _, te in folds]  # noqa: E731
    assert tests(first) == tests(again) and tests(first) != tests(other)
    for tr, te in other:  # still whole groups: no test job in a training pair
        held = set(X.model_group.to_numpy()[te])
        assert not held & (set(X.model_group.to_numpy()[tr]) | set(X.partner_group.to_numpy()[tr]))
    assert CorrectedSlowdown(StepShare("t")).get_params()["repeats"] == 3


def test_a_cells_gap_has_a_bootstrap_standard_error() -> None:
    """FIXTURE pairs: a predictor equal to its prior has no gap and no spread; a noisy one has a spread."""
    rng = np.random.default_rng(0)
    n = 40
    held = pd.DataFrame({"cell": np.repeat([0, 1], n), "group_id": np.repeat(np.arange(n), 2),
                         "slowdown": rng.uniform(1.0, 2.0, 2 * n)})
    held["prior"] = held["slowdown"] + rng.normal(0, 0.2, 2 * n)
    held["same"] = held["prior"]
    held["noisy"] = held["prior"] + rng.normal(0, 0.5, 2 * n)
    assert (scoring.cell_gap_se(held, "same", "prior") == 0).all()
    se = scoring.cell_gap_se(held, "noisy", "prior")
    assert list(se.index) == [0, 1] and (se > 0.01).all()
