"""The step estimator (gpupred.step) on FIXTURE rows: constants see training rows only, every method predicts every
outer test row, the correction is bounded and shrinkable, what is scored is what ships."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fixtures_learning import fixture_dataset, fixture_kernels, fixture_mlp

from gpupred.hardware import gpu_spec
from gpupred.learn.evaluation import splits_for
from gpupred.learn.nested import CVSettings
from gpupred.learn.summary import METHODS
from gpupred.step.physics.model import canonical_graph
from gpupred.step.physics.kernels import step_kernels
from gpupred.step.physics.fit import FitRows
from gpupred.step.estimator import StepEstimator
from gpupred.step.correction import ShrunkCorrection, correction_bounds
from gpupred.step.evaluate import evaluate_step
from gpupred.step.rowphysics import PhysicsData, fitted_physics, physics_data, protocol_of


def _physics_data(df):
    """FIXTURE kernels for each row of ``df`` as PhysicsData."""
    return physics_data(df, fixture_kernels(df))


@pytest.fixture(scope="module")
def rows():
    """FIXTURE dataset rows with FIXTURE kernels (a tiny MLP graph sized by each row's batch size and params)."""
    df = fixture_dataset(n_batch_sizes=2)
    df["iter_time_mean_s"] = df["iter_time_mean_s"].where(df["family"] != "vgg")  # some rows without a step time
    return df, _physics_data(df)


def test_fit_rows_pickle_their_kernels_packed_and_unchanged(rows) -> None:
    """An evaluation task ships its FitRows with the kernels as flat arrays: every list comes back with the same
    arrays (dtype and values), attributes and sharing (one object for rows that shared one); lists whose dtypes
    differ are pickled as they are."""
    import pickle
    from dataclasses import replace

    from gpupred.step.physics.fit import pack_kernel_lists

    _, pdata = rows
    kernels = list(pdata.rows.kernels)
    kernels[1] = kernels[0]  # two rows sharing one list
    kernels[2] = replace(kernels[2], library=None, on_tc=kernels[2].flops > 0)  # optional arrays absent or present
    fit = replace(pdata.rows, kernels=kernels)
    fit.batches["laid out"] = "a cache"
    back = pickle.loads(pickle.dumps(fit))
    assert back.batches == {} and back.kernels[0] is back.kernels[1] and back.kernels[2] is not back.kernels[0]
    for before, after in zip(kernels, back.kernels):
        assert set(vars(before)) == set(vars(after))
        for name, value in vars(before).items():
            if isinstance(value, np.ndarray):
                assert value.dtype == getattr(after, name).dtype
                np.testing.assert_array_equal(value, getattr(after, name))
            else:
                assert value == getattr(after, name), name
    mixed = [kernels[0], replace(kernels[3], tensor_core=kernels[3].tensor_core.astype(np.int64))]
    assert kernels[0].tensor_core.dtype != np.int64 and pack_kernel_lists(mixed) is None
    again = pickle.loads(pickle.dumps(replace(fit, kernels=mixed)))
    assert again.kernels[1].tensor_core.dtype == np.int64


def test_protocol_drops_the_interval() -> None:
    """The constants key is the sampler without its polling interval."""
    assert protocol_of("nvml-poll-50ms") == "nvml-poll" and protocol_of("nvidia-smi-0.2s") == "nvidia-smi"
    assert protocol_of("dcgm-1s-nonzero") == "dcgm-nonzero"


def test_constants_are_fitted_on_training_rows_only(rows) -> None:
    """Scrambling the labels of rows outside ``train`` leaves the fitted constants unchanged."""
    df, pdata = rows
    train = np.arange(0, len(df), 2)
    table, util, _ = fitted_physics(pdata, train)
    scrambled = PhysicsData(FitRows(pdata.rows.kernels, pdata.rows.gpus, pdata.rows.precisions, pdata.rows.syncs,
                                    pdata.rows.host_batches, pdata.rows.util.copy(), pdata.rows.step_s.copy()), pdata.keys,
                            pdata.ids)
    scrambled.rows.util[1::2] = 1.0
    scrambled.rows.step_s[1::2] = 10.0
    table2, util2, _ = fitted_physics(scrambled, train)
    assert table.as_records() == table2.as_records() and np.allclose(util, util2)
    assert table.fitted and all(r["source"].startswith("fitted") for r in table.as_records())


def test_every_method_predicts_every_outer_row(rows) -> None:
    """Grouped folds: each method predicts each row once; utilization stays within 0-100 and inside its interval."""
    df, pdata = rows
    splits = splits_for(df, "grouped_random", 3)
    cv = CVSettings(n_inner=2, n_cal=3, n_jobs=1)
    res = evaluate_step(df, "gpu_util", "grouped_random", splits, pdata, cv, "pooled")
    assert set(res) == set(METHODS)
    for method, r in res.items():
        p = r.predictions
        assert sorted(p["run_id"]) == sorted(df["run_id"]) and p["pred"].between(0, 100).all(), method
    corr = res["physics+correction"].predictions
    assert ((corr["low"] <= corr["pred"]) & (corr["pred"] <= corr["high"])).all()
    steps = evaluate_step(df, "iter_time_mean_s", "grouped_random", splits, pdata, cv, "per_source",
                          methods=("physics+correction",))
    assert steps["physics+correction"].predictions["pred"].gt(0).all()


def test_splits_run_in_worker_processes_as_in_one(rows) -> None:
    """Two worker processes give every method's predictions to the bit, fit a training set asked twice once, and
    hand their constants fits back to the caller's cache."""
    from gpupred.step.rowphysics import rows_key

    df, _ = rows
    splits = splits_for(df, "grouped_random", 3)
    splits = [*splits, splits[0]]  # one training set twice
    alone, apart = _physics_data(df), _physics_data(df)
    serial = evaluate_step(df, "gpu_util", "grouped_random", splits, alone, CVSettings(n_inner=2, n_cal=3, n_jobs=1))
    parallel = evaluate_step(df, "gpu_util", "grouped_random", splits, apart, CVSettings(n_inner=2, n_cal=3, n_jobs=2))
    for method in METHODS:
        pd.testing.assert_frame_equal(serial[method].predictions, parallel[method].predictions, check_exact=True)
    fits = {k for k in apart.cache if k[0] == "constants"}
    assert fits == {k for k in alone.cache if k[0] == "constants"}
    assert fits == {("constants", 0, rows_key(apart.ids[train])) for train, _, _ in splits} and len(fits) == 3


def test_out_of_fold_step_predictions_in_worker_processes_as_in_one(rows) -> None:
    from gpupred.predictor.heldout import step_oof

    df, pdata = rows
    folds = splits_for(df, "grouped_random", 3)
    step = StepEstimator(("gpu_util", "iter_time_mean_s"), "pooled", n_cal=3, n_inner=2)
    alone, apart = (step_oof(df, folds, step, _physics_data(df), n) for n in (1, 2))
    pd.testing.assert_frame_equal(alone, apart, check_exact=True)
    assert list(alone.index) == list(df.index) and alone["gpu_util"].notna().all()


def test_correction_is_bounded_and_shrinkable() -> None:
    """Bounds are the source's 2-98 % training range (all rows for a thin source); weight 0 predicts the median."""
    ratio = np.r_[np.linspace(50, 150, 50), np.linspace(5, 10, 5)]
    strata = np.array(["own"] * 50 + ["thin"] * 5)
    lo, hi = correction_bounds(ratio, strata, np.array(["own", "thin"]))
    assert lo[0] == pytest.approx(np.quantile(ratio[:50], 0.02)) and hi[0] == pytest.approx(np.quantile(ratio[:50], 0.98))
    assert lo[1] == pytest.approx(np.quantile(ratio, 0.02))
    X = np.arange(20, dtype=float).reshape(-1, 1)
    y = np.log1p(np.arange(20, dtype=float))
    from sklearn.linear_model import LinearRegression

    assert np.allclose(ShrunkCorrection(LinearRegression(), 0.0).fit(X, y).predict(X), np.median(y))
    half = ShrunkCorrection(LinearRegression(), 0.5).fit(X, y).predict(X)
    full = ShrunkCorrection(LinearRegression(), 1.0).fit(X, y).predict(X)
    assert np.allclose(half - np.median(y), 0.5 * (full - np.median(y)))


def test_the_estimator_answers_a_new_job(rows) -> None:
    """Fitted on every FIXTURE row, it predicts a new job's utilization, iteration time and throughput with bounds
    (a frame of one job, its kernels given: what the predictor's core passes)."""
    from gpupred.predictor.core import job_frame
    from gpupred.predictor.jobgraph import JobGraph
    from gpupred.setups import setup_of

    df, pdata = rows
    est = StepEstimator(("gpu_util", "iter_time_mean_s"), n_cal=3, n_inner=2).fit(df, pdata)
    kernels = step_kernels(canonical_graph(fixture_mlp(96), 32)[0], "fp32", "sgd")
    row = {k: v for k, v in df.iloc[0].items() if k not in ("gpu_util", "iter_time_mean_s", "run_id")}
    frame, physics = job_frame(JobGraph.of_parts({**row, "batch_size": 32.0}, kernels, {}, setup_of("fp32", "sgd")),
                                 "NVIDIA H100 80GB HBM3")
    out = est.predict(frame, physics).iloc[0]
    for target in ("gpu_util", "iter_time_mean_s", "samples_per_s"):
        assert 0 < out[f"{target}_low"] <= out[target] <= out[f"{target}_high"], target
    assert out["gpu_util_high"] <= 100 and out["samples_per_s"] == pytest.approx(32.0 / out["iter_time_mean_s"])
    assert est.constants_.fitted and not out["extrapolated"]  # fitted on the FIXTURE rows' (GPU kind, protocol)


def test_what_is_scored_is_what_ships(rows) -> None:
    """The comparison's physics x correction on a split is exactly the estimator fitted on its training rows (the one
    the predictor exports), and clone/get_params follow scikit-learn."""
    from sklearn.base import clone

    df, pdata = rows
    train, test = np.arange(0, len(df), 2), np.arange(1, len(df), 2)
    cv = CVSettings(n_inner=2, n_cal=3, n_jobs=1)
    res = evaluate_step(df, "gpu_util", "grouped_random", [(train, test, "FIXTURE")], pdata, cv, "per_source",
                        methods=("physics+correction",))
    est = clone(StepEstimator(("gpu_util",), n_cal=3, n_inner=2)).fit(df.iloc[train], pdata.subset(train))
    direct = est.predict(df.iloc[test], pdata.subset(test))
    scored = res["physics+correction"].predictions.set_index("run_id").loc[df["run_id"].iloc[test]]
    assert np.allclose(scored["pred"], direct["gpu_util"]) and np.allclose(scored["high"], direct["gpu_util_high"])
    assert est.get_params()["interval_groups"] == "family" and clone(est).get_params() == est.get_params()
    assert est.describe()["params"]["weighting"] == "per_source"


def test_an_unfitted_gpu_is_extrapolated_with_a_measured_width() -> None:
    """FIXTURE rows of three GPU kinds: fitted on two, the third's rows are marked extrapolated and their intervals
    reach the width measured by holding the fitted keys out."""
    df, pdata = _three_gpu_rows()
    a100 = (df["gpu"] == gpu_spec("NVIDIA A100-SXM4-80GB").name).to_numpy()
    train, test = np.flatnonzero(~a100), np.flatnonzero(a100)
    est = StepEstimator(("gpu_util",), n_cal=3, n_inner=2).fit(df.iloc[train], pdata.subset(train))
    out = est.predict(df.iloc[test], pdata.subset(test))
    width = est.widths_["gpu_util"].key
    assert out["extrapolated"].all() and np.isfinite(width)
    z = np.log1p(out["gpu_util"])
    assert (np.log1p(out["gpu_util_high"]) - z >= width - 1e-9).all() or (out["gpu_util_high"] >= 100).all()
    seen = est.predict(df.iloc[train[:5]], pdata.subset(train[:5]))
    assert not seen["extrapolated"].any()


def test_a_source_without_training_rows_gets_physics_alone_under_per_source() -> None:
    """FIXTURE rows of two GPUs from two sources: trained on one source only, the other source's rows get the
    physics unchanged (no correction learned under their protocol) and an interval around it; rows of the
    trained source still get a learned correction."""
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=1,
                         sources={"NVIDIA GeForce RTX 3090": "FIXTURE-other"})
    kernels = fixture_kernels(df)
    fit = FitRows(kernels, [gpu_spec(g) for g in df["gpu"]], df["precision"].tolist(), df["sync"].tolist(),
                  [False] * len(df), df["gpu_util"].to_numpy(float), df["iter_time_mean_s"].to_numpy(float))
    pdata = PhysicsData(fit, [(g, protocol_of(s)) for g, s in zip(df["gpu"], df["sampler"])], df["run_id"].to_numpy(object))
    own = np.flatnonzero(df["source"] == "gpupred")
    other = np.flatnonzero(df["source"] != "gpupred")
    half = own[::2]
    splits = [(half, np.r_[own[1::2], other], "FIXTURE split")]
    cv = CVSettings(n_inner=2, n_cal=3, n_jobs=1)
    res = evaluate_step(df, "gpu_util", "grouped_random", splits, pdata, cv, "per_source",
                        methods=("physics", "physics+correction"))
    phys = res["physics"].predictions.set_index("run_id")["pred"]
    corr = res["physics+correction"].predictions.set_index("run_id")
    unseen = corr["source"] != "gpupred"
    assert unseen.any() and np.allclose(corr.loc[unseen, "pred"], phys[corr.index[unseen]])
    assert (corr.loc[unseen, "low"] < corr.loc[unseen, "pred"]).all()
    assert (corr.loc[unseen, "high"] > corr.loc[unseen, "pred"]).all()
    assert not np.allclose(corr.loc[~unseen, "pred"], phys[corr.index[~unseen]])


def test_fits_record_their_hosts_speed_and_another_protocols_rows_borrow_at_their_own() -> None:
    """FIXTURE rows of two protocols, the trained one's hosts at single-core scores 0.25 and 1.0 (geometric mean 0.5),
    the other's rows at 2.0: the fit records 0.5, and the other protocol's rows run on its launch cost moved from
    0.5 to 2.0 (a quarter), not the one fitted."""
    from gpupred.step.physics.fit import predict_rows

    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=2,
                         sources={"NVIDIA GeForce RTX 3090": "FIXTURE-other"})
    own = (df["source"] == "gpupred").to_numpy()
    df.loc[~own, "sampler"] = "FIXTURE-other-sampler"
    df["host_score"] = np.where(own, np.where(np.arange(len(df)) % 2 == 0, 0.25, 1.0), 2.0)
    pdata = _physics_data(df)
    table, util, step = fitted_physics(pdata, np.flatnonzero(own))
    (key, fit), = table.fitted.items()
    assert fit.host_score == pytest.approx(0.5)
    other = np.flatnonzero(~own)
    borrowed = table.get(*pdata.keys[other[0]], host_score=2.0)
    assert borrowed.launch_s == pytest.approx(fit.launch_s / 4)
    expected_util, expected_step = predict_rows(pdata.rows, borrowed, other)
    assert np.allclose(util[other], expected_util) and np.allclose(step[other], expected_step)


def _three_gpu_rows():
    """FIXTURE rows of three GPU kinds (one FIXTURE protocol), with FIXTURE kernels."""
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-80GB"),
                         n_batch_sizes=2)
    return df, _physics_data(df)


def test_extrapolation_width_comes_from_held_out_training_keys_only() -> None:
    """FIXTURE: with one GPU kind's rows held out of training, the width is the same whatever their labels are;
    each training key's errors come from the other keys' fits (its own fit never enters them) and are physics'
    errors under exactly that borrowing; every held-out key weighs the same in the width."""
    from gpupred.learn.conformal import conformal_quantile
    from gpupred.step.rowphysics import HELDOUT_MIN_ROWS, extrapolation_width, heldout_errors
    from gpupred.step.physics.constants import ConstantsTable
    from gpupred.step.physics.fit import predict_rows

    df, pdata = _three_gpu_rows()
    gpu = df["gpu"].to_numpy()
    test = np.flatnonzero(gpu == gpu_spec("NVIDIA A100-SXM4-80GB").name)
    train = np.setdiff1d(np.arange(len(df)), test)
    assert (df["gpu"].iloc[train].value_counts() >= HELDOUT_MIN_ROWS).all()
    table, _, _ = fitted_physics(pdata, train)
    y = df["gpu_util"].to_numpy(float)
    width = extrapolation_width(pdata, table, train, y, False, 0.1)
    scrambled = y.copy()
    scrambled[test] = 1.0  # the held-out GPU's labels: never read
    assert np.isfinite(width) and width == extrapolation_width(pdata, table, train, scrambled, False, 0.1)
    errors = heldout_errors(pdata, table, train, y, False)
    assert set(errors) == set(table.fitted) and len(errors) == 2 and not set(errors) & {pdata.keys[i] for i in test}
    m = min(len(e) for e in errors.values())  # each key weighs the same: m quantiles of each, m its fewest rows
    levels = (np.arange(m) + 0.5) / m
    pooled = np.concatenate([np.quantile(np.abs(e), levels, method="inverted_cdf") for e in errors.values()])
    assert width == conformal_quantile(pooled, 0.1)
    h100 = train[gpu[train] == gpu_spec("NVIDIA H100 80GB HBM3").name]
    key = pdata.keys[h100[0]]
    others = ConstantsTable({k: c for k, c in table.fitted.items() if k != key})
    util, _ = predict_rows(pdata.rows, others.get(*key), h100)
    assert np.allclose(errors[key], np.log1p(y[h100]) - np.log1p(util))
    broken = ConstantsTable({**table.fitted, key: table.fitted[key].with_fitted({"launch_s": 1.0}, "FIXTURE")})
    assert np.allclose(heldout_errors(pdata, broken, h100, y, False)[key], errors[key])  # its own fit does not enter
    other_key = next(k for k in table.fitted if k != key)
    moved = ConstantsTable({**table.fitted, other_key: table.fitted[other_key].with_fitted({"launch_s": 1.0}, "FIXTURE")})
    assert not np.allclose(heldout_errors(pdata, moved, h100, y, False)[key], errors[key])  # the others' fits do
    assert extrapolation_width(pdata, table, h100, y, False, 0.1) == conformal_quantile(errors[key], 0.1)  # one key
    assert np.isnan(extrapolation_width(pdata, table, h100[:HELDOUT_MIN_ROWS - 1], y, False, 0.1))


def test_a_gpu_of_an_unfitted_architecture_gets_the_architecture_width() -> None:
    """FIXTURE: held out at the architecture level, a key borrows its protocol's host constants and none of its kin's
    device constants (the published defaults), as a GPU of an unfitted architecture is predicted; rows are told apart
    as a new GPU of a fitted architecture, of an unfitted one, and of an unfitted protocol, and each gets its width."""
    from dataclasses import replace

    from gpupred.step.physics.constants import DEFAULT, DEVICE_CONSTANTS, HOST_CONSTANTS, ConstantsTable, geometric_means
    from gpupred.step.physics.fit import predict_rows
    from gpupred.step.rowphysics import ExtrapolationWidths, heldout_errors, rows_unfitted

    df, pdata = _three_gpu_rows()
    table, _, _ = fitted_physics(pdata, np.arange(len(df)))
    y = df["gpu_util"].to_numpy(float)
    a100 = np.flatnonzero(df["gpu"].to_numpy() == gpu_spec("NVIDIA A100-SXM4-80GB").name)
    key = pdata.keys[a100[0]]
    others = [c for k, c in table.fitted.items() if k != key]
    unkin = replace(DEFAULT, **geometric_means(others, HOST_CONSTANTS))
    util, _ = predict_rows(pdata.rows, unkin, a100)
    arch = heldout_errors(pdata, table, a100, y, False, "architecture")[key]
    assert np.allclose(arch, np.log1p(y[a100]) - np.log1p(util))
    kin = heldout_errors(pdata, table, a100, y, False, "key")[key]  # the RTX 3090's device constants: another answer
    assert not np.allclose(kin, arch)
    assert all(getattr(ConstantsTable(dict(table.fitted)).borrowed("L4", key[1], kin=False), n) == getattr(DEFAULT, n)
               for n in DEVICE_CONSTANTS)

    h100_3090 = ConstantsTable({k: c for k, c in table.fitted.items() if k != key})
    keys = [key, ("L4", key[1]), ("L4", "FIXTURE-other"), pdata.keys[0]]
    unfitted, new_arch, new_protocol = rows_unfitted(keys, h100_3090)
    assert unfitted.tolist() == [True, True, True, False]  # an A100 beside a fitted RTX 3090 is no new architecture
    assert new_arch.tolist() == [False, True, True, False] and new_protocol.tolist() == [False, False, True, False]
    widths = ExtrapolationWidths(key=0.1, protocol=0.9, fallback=0.5, architecture=0.4)
    assert widths.for_rows(new_protocol, new_arch).tolist() == [0.1, 0.4, 0.9, 0.1]
    assert ExtrapolationWidths(0.1, 0.9, 0.5).for_rows(new_protocol, new_arch).tolist() == [0.1, 0.5, 0.9, 0.1]
    narrow = ExtrapolationWidths(key=0.3, protocol=0.9, fallback=0.5, architecture=0.2)  # never below the key width
    assert narrow.for_rows(new_protocol, new_arch).tolist() == [0.3, 0.3, 0.9, 0.3]


def test_weighting_effect_scores_every_weighting_on_shared_constants(rows) -> None:
    """Each weighting is scored on the same splits, and the constants of a split are fitted once for all of them."""
    from gpupred.learn.summary import weighting_metrics
    from gpupred.step.correction import WEIGHTINGS
    from gpupred.step.evaluate import weighting_effect

    df, pdata = rows
    fresh = PhysicsData(pdata.rows, pdata.keys, pdata.ids)
    cv = CVSettings(n_cal=3, n_jobs=1)
    effect = weighting_effect(df, ["gpu_util"], cv, n_within=2, pdata=fresh, schemes=("lofo",), weightings=("pooled",))
    fits = len(fresh.cache)
    effect = weighting_effect(df, ["gpu_util"], cv, n_within=2, pdata=fresh, schemes=("lofo",))
    assert len(fresh.cache) == fits > 0  # the other weightings reuse the fitted constants
    assert set(effect["weighting"]) == set(WEIGHTINGS) and (effect["method"] == "physics+correction").all()
    per = effect.groupby("weighting")[["tested", "n"]].apply(lambda f: tuple(map(tuple, f.to_numpy())))
    assert per.nunique() == 1  # the same rows scored under every weighting
    metrics = weighting_metrics(effect.assign(error=effect["rmsle"]))
    assert set(metrics["gpu_util"]["leave one family out"][effect["tested"].iloc[0]]) == set(WEIGHTINGS)


def test_twin_splits_keep_the_test_workloads_measured_on_the_training_kind() -> None:
    """FIXTURE: every workload on two kinds. ``cross_gpu`` (unseen) has no training rows to give; the twins do."""
    from gpupred.step.evaluate import comparison_splits

    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=1)
    splits = comparison_splits(df)
    assert "cross_gpu" not in splits  # every test workload is also on the training kind: nothing unseen to train on
    twins = splits["cross_gpu_twins"]
    assert sorted(label for *_, label in twins) == [
        "H100 SXM->RTX 3090 (twins)", "RTX 3090->H100 SXM (twins)"]
    for train, test, label in twins:
        assert df["gpu"].iloc[train].nunique() == 1 and df["gpu"].iloc[test].nunique() == 1
        assert df["gpu"].iloc[train].iloc[0] == label.split("->")[0]
        assert set(df["workload_id"].iloc[test]) <= set(df["workload_id"].iloc[train])
    one_kind = comparison_splits(fixture_dataset(n_batch_sizes=1))
    assert "cross_gpu_twins" not in one_kind


def test_a_steps_kernels_are_in_the_same_order_in_every_process() -> None:
    """The store's GPT (12 decoder layers, each summing gradients of tensors that several ops read): its kernels,
    order included, are the same whatever the string hash seed; the backward's gradient sums followed the order a set of
    each node's inputs iterated in, which moved a step's modelled time by 0.08% and its SM activity by 1%."""
    import os
    import subprocess
    import sys

    code = ("import hashlib\n"
            "from gpupred import config\n"
            "from gpupred.graph.loader import load_graph\n"
            "from gpupred.setups import setup_of\n"
            "from gpupred.step.physics.kernels import step_kernels\n"
            "g = load_graph(config.GRAPHS / 'gpt.gpt-v8192-m256-h4-l12-seq128.onnx.gz', 8)[0].form(True)\n"
            "kl = step_kernels(g, setup=setup_of('fp32', 'sgd'))\n"
            "print(hashlib.sha256(b''.join(a.tobytes() for a in (kl.flops, kl.bytes, kl.tensor_core, kl.phase)))"
            ".hexdigest())\n")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(seen) == 1
