"""Slowdown served (issue 76 item 3): Predictor.slowdown / predict_many / slowdown_matrix, `gpupred colocate`, co-run
co-run files, notebook 06's choice and the README's queue example. Predictions come from the committed
models/predictor.joblib and the graph store; co-located slowdowns and co-runs here are FIXTURES (tests/fixtures_coloc.py,
or numbers written by the tests), never measurements."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpupred import config
from gpupred.errors import GpupredError

REPO = Path(__file__).resolve().parent.parent
A, B = "resnet.resnet50-bs64-img224-bf16-sgd", "mlp.mlp-w512-d2-bs256-in784-fp32-adam"
ANSWER_KEYS = {"schema", "gpu", "members", "pair", "estimator", "interval", "notes"}
MEMBER_KEYS = {"job", "model", "batch_size", "precision", "optimizer", "gpu_util", "memory_mib", "memory_mib_low",
               "memory_mib_high", "step_time_ms", "slowdown", "slowdown_low", "slowdown_high", "shared_step_time_ms",
               "adaptation_coruns"}
PAIR_KEYS = {"memory_mib", "memory_q95_mib", "capacity_mib", "headroom_mib", "oom_probability", "max_oom_risk", "fits",
             "combined_throughput"}


@pytest.fixture(scope="module")
def predictor():
    from gpupred.predictor.loading import load_predictor

    if not config.PREDICTOR.is_file():
        pytest.skip("no committed predictor")
    return load_predictor()


@pytest.fixture(scope="module")
def fixture_choice() -> dict:
    """Notebook 06's choice computed on FIXTURE Lucid-like pairs (made-up slowdowns)."""
    from fixtures_coloc import fixture_lucid, fixture_predicted_features

    from gpupred.colocation.pairtable import lucid_solo_truth, lucid_table
    from gpupred.colocation import served, study

    pairs, solo, latent = fixture_lucid(20, seed=1)
    slices = study.lucid_slices(lucid_table(pairs, solo), lucid_solo_truth(solo),
                                fixture_predicted_features(latent[latent.workload_id.notna()]))[:1]
    choice = served.slowdown_choice([study.run_slice(s, n_folds=3, ks=range(4)) for s in slices], slices)
    return {"schema": served.SCHEMA_VERSION, "dataset_fingerprint": "FIXTURE", **choice}


@pytest.fixture()
def shipped(predictor, fixture_choice):
    """The committed predictor with a FIXTURE-scored slowdown estimator attached (in memory only)."""
    from gpupred.predictor.slowdowns import attach_slowdown

    committed = predictor.__dict__.get("slowdown_")
    attach_slowdown(predictor, fixture_choice, "default")
    yield predictor
    if committed is None:
        del predictor.slowdown_
    else:
        predictor.slowdown_ = committed  # what notebook 08 attached when it exported the artifact


def test_the_committed_artifact_ships_the_prior_with_its_heldout_interval(predictor) -> None:
    d = predictor.slowdown(A, B, gpu="H100").to_dict()
    assert d["estimator"]["source"] == "artifact" and d["interval"]["level"] == pytest.approx(0.9)
    assert d["interval"]["log_low"] < d["interval"]["log_high"]
    assert "held out" in d["interval"]["basis"]


def test_an_artifact_without_a_slowdown_estimator_falls_back_to_the_prior_and_says_so(predictor) -> None:
    import copy

    from gpupred.slowdown.physics import pair_timeshare

    predictor = copy.copy(predictor)  # as exported before notebook 08 attached one
    predictor.__dict__.pop("slowdown_", None)
    answer = predictor.slowdown(A, B, gpu="H100")
    d = answer.to_dict()
    assert set(d) == ANSWER_KEYS and all(set(m) == MEMBER_KEYS for m in d["members"]) and set(d["pair"]) == PAIR_KEYS
    assert d["estimator"]["source"] == "fallback" and d["interval"]["log_low"] is None
    assert "no interval" in d["interval"]["basis"] and any("without a slowdown estimator" in n for n in d["notes"])
    u = [m["gpu_util"] / 100 for m in d["members"]]
    expected = pair_timeshare(np.array([u[0]]), np.array([u[1]]))
    assert answer.slowdowns == pytest.approx((float(expected[0][0]), float(expected[1][0])))
    assert all(1.0 <= s <= 1.0 + b for s, b in zip(answer.slowdowns, u))
    mem = sum(m["memory_mib"] for m in d["members"])
    assert d["pair"]["memory_mib"] == pytest.approx(mem) and d["pair"]["capacity_mib"] == 80 * 1024
    assert d["pair"]["fits"] and d["pair"]["memory_q95_mib"] > mem


def test_shipped_estimator_gives_its_heldout_interval(shipped, fixture_choice) -> None:
    d = shipped.slowdown(A, B, gpu="H100").to_dict()
    lo, hi = fixture_choice["interval"]["log_low"], fixture_choice["interval"]["log_high"]
    assert d["estimator"]["source"] == "artifact" and d["interval"]["level"] == 0.9
    for m in d["members"]:
        assert m["slowdown_low"] == pytest.approx(m["slowdown"] * np.exp(lo))
        assert m["slowdown_high"] == pytest.approx(m["slowdown"] * np.exp(hi))
    assert "held-out" in d["interval"]["basis"] and any("not on this GPU" in n for n in d["notes"])


def test_rows_of_predict_many_answer_as_the_jobs_do(predictor) -> None:
    calls = []
    original = predictor.predict_records

    def counted(*args, **kwargs):
        calls.append([job[0] for job in args[0]])
        return original(*args, **kwargs)

    predictor.predict_records = counted
    try:
        rows = predictor.predict_many([A, B, A, "mlp.mlp-w512-d2-bs256-in784-fp32-adam"], gpu="H100")
    finally:
        del predictor.predict_records
    assert calls == [[A, B]] and list(rows["job"]) == [A, B, f"{A}#2", f"{B}#2"]  # each distinct job once, together
    for job, row in ((A, rows.iloc[0]), (B, rows.iloc[1]), (A, rows.iloc[2])):  # as each job alone answers
        alone = predictor.predict(job, gpu="H100").iloc[0]
        for column, value in alone.items():
            if isinstance(value, (float, np.floating)):
                assert row[column] == pytest.approx(value, rel=1e-9, nan_ok=True), column
            else:
                assert row[column] == value, column
    by_rows = predictor.slowdown(rows.iloc[0], rows.iloc[1]).to_dict()
    by_jobs = predictor.slowdown(A, B, gpu="H100").to_dict()
    assert by_rows["members"][0]["slowdown"] == pytest.approx(by_jobs["members"][0]["slowdown"])
    m = predictor.slowdown_matrix(rows.iloc[:2], gpu="H100")
    assert m.slowdown.loc[A, B] == pytest.approx(by_jobs["members"][0]["slowdown"])
    assert m.slowdown.loc[B, A] == pytest.approx(by_jobs["members"][1]["slowdown"])
    assert (m.low <= m.slowdown).all().all() and (m.slowdown <= m.high).all().all()  # its held-out interval
    with pytest.raises(GpupredError, match="name the GPU"):
        predictor.slowdown(A, B)
    with pytest.raises(GpupredError, match="asked about"):
        predictor.slowdown(rows.iloc[0], rows.iloc[1], gpu="A100")


def test_a_queue_answers_each_setup_and_pipeline_as_the_job_alone_and_names_a_bad_job(predictor, tmp_path) -> None:
    """predict_many runs the core's estimators once over the queue (Predictor.predict_records): each row is the job's
    own answer, whatever its setup and input pipeline, and an error names the job it belongs to."""
    from gpupred.predictor.pairing import Job
    from gpupred.setups import pipeline_of, setup_of

    fed = pipeline_of("image-files", num_workers=2)
    jobs = [Job(A, setup=setup_of("bf16", "sgd", checkpointing=True)), Job(A, batch_size=32, name="fed", pipeline=fed),
            Job(B, setup=setup_of("fp32", "adam", optimizer_impl="fused")), Job(B, batch_size=8)]
    rows = predictor.predict_many(jobs, gpu="H100")
    assert rows["iter_time_mean_s"].nunique() == 4  # four different answers
    for job, (_, row) in zip(jobs, rows.iterrows()):
        alone = predictor.predict(job.model, batch_size=job.batch_size, setup=job.setup, pipeline=job.pipeline,
                                  gpu="H100").iloc[0]
        for column, value in alone.items():
            assert row[column] == (pytest.approx(value, rel=1e-9, nan_ok=True)
                                   if isinstance(value, (float, np.floating)) else value), (job.label, column)
    with pytest.raises(GpupredError, match=r"^job no\.such-id: 'no\.such-id' is neither"):
        predictor.predict_many([A, "no.such-id"], gpu="H100")
    missing = pipeline_of("image-files", num_workers=2, profile=str(tmp_path / "none.json"))
    with pytest.raises(GpupredError, match=r"^job lost: .*none\.json"):  # raised where the queue runs together
        predictor.predict_many([A, Job(B, name="lost", pipeline=missing)], gpu="H100")


def test_cli_json_and_text_agree_with_the_api(predictor) -> None:
    from gpupred.cli import colocate

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        colocate.colocate_cmd(A, B, gpu="H100", batch_size_a=128, as_json=True)
    cli = json.loads(out.getvalue())
    api = json.loads(json.dumps(predictor.slowdown(A, B, gpu="H100", batch_size_a=128).to_dict()))
    assert cli["members"][0]["batch_size"] == 128
    for side in (0, 1):  # the CLI names jobs as typed; every figure is the API's
        cli["members"][side].pop("job"), api["members"][side].pop("job")
    assert cli == api
    text = colocate.render(api | {"members": [dict(m, job="x") for m in api["members"]]})
    assert "GiB" in text and "fits" in text and "x" + f"{api['members'][0]['slowdown']:.2f}" in text


def _coruns(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "coruns.json"
    path.write_text(json.dumps(data))
    return path


GOOD = {"format": "gpupred-coruns/1", "gpu": "H100",
        "jobs": {"mine": {"model": A}, "r1": {"model": B}, "r2": {"model": "neumf.neumf-u162541-i59047-e8-l3-bs256-bf16-sgd"}},
        "coruns": [{"a": "mine", "b": "r1", "slowdown_a": 1.6, "slowdown_b": 1.3},  # FIXTURE numbers, not measured
                   {"a": "r2", "b": "mine", "slowdown_a": 1.4, "slowdown_b": 1.5}]}


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(format="v0"), "format"),
    (lambda d: d.update(gpu="RTX 9999"), "RTX 9999"),
    (lambda d: d["jobs"].pop("r2") and d["jobs"].pop("r1"), "at least two"),
    (lambda d: d["coruns"][0].update(b="nobody"), "nobody"),
    (lambda d: d["coruns"][0].update(slowdown_a=-1), "slowdown_a"),
    (lambda d: d["coruns"][0].update(b="mine"), "itself"),
    (lambda d: d["jobs"]["mine"].update(batch=3), "unknown keys"),
])
def test_malformed_corun_file_is_refused_in_one_line(tmp_path: Path, edit, match: str) -> None:
    from gpupred.predictor.coruns import read_coruns

    data = json.loads(json.dumps(GOOD))
    edit(data)
    with pytest.raises(GpupredError, match=match) as err:
        read_coruns(_coruns(tmp_path, data))
    assert "\n" not in str(err.value) and "coruns.json" in str(err.value)


def test_corun_file_adapts_the_job_it_names(shipped, tmp_path: Path) -> None:
    path = _coruns(tmp_path, GOOD)
    plain = shipped.slowdown(A, B, gpu="H100").to_dict()
    cal = shipped.slowdown(A, B, gpu="H100", coruns=path).to_dict()
    assert cal["estimator"]["adapted"] and cal["members"][0]["adaptation_coruns"] == 2
    assert cal["members"][1]["adaptation_coruns"] == 1  # B is the file's r1: one co-run, with A
    other = shipped.slowdown(A, "dcgan.dcgan-z64-g128-k64-bs128-img32-bf16-adam", gpu="H100", coruns=path).to_dict()
    assert [m["adaptation_coruns"] for m in other["members"]] == [2, 0]  # a job not in the file keeps the prior
    assert other["interval"]["basis"].startswith("central 90% of held-out") and "the prior" in other["interval"]["basis"]
    assert cal["members"][0]["slowdown"] != pytest.approx(plain["members"][0]["slowdown"])
    with pytest.raises(GpupredError, match="measured on H100"):
        shipped.slowdown(A, B, gpu="A100", coruns=path)


def readme_queue_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Co-location: slowdown for a scheduler", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]


def test_readme_queue_example_places_every_job_within_memory(predictor) -> None:
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(readme_queue_block(), "README.md", "exec"), namespace)
    placement, m, queue = namespace["placement"], namespace["m"], namespace["queue"]
    placed = [j for pair in placement for j in pair if j is not None]
    assert sorted(placed) == sorted(queue)  # every job placed once
    for a, b in placement:
        if b is not None:
            assert m.fits.loc[a, b] and m.oom_probability.loc[a, b] <= 0.05
            api = predictor.slowdown(a, b, gpu="H100")  # the API agrees with the matrix the example read
            assert api.slowdowns == pytest.approx((m.slowdown.loc[a, b], m.slowdown.loc[b, a]))
            assert api.to_dict()["pair"]["fits"]
    assert len(out.getvalue().strip().splitlines()) == len(placement)


def test_card_describes_the_slowdown_and_the_choice_contract(fixture_choice, tmp_path: Path) -> None:
    import pickle

    from gpupred.colocation.served import check_slowdown_choice
    from gpupred.predictor.slowdowns import served_slowdown

    served = pickle.loads(pickle.dumps(served_slowdown(fixture_choice, "default")))
    card = served.describe()
    assert card["heldout"]["rows"] > 0 and card["interval"]["level"] == 0.9
    assert 0 <= card["interval"]["coverage_cross_cell"] <= 1 and "nothing" in card["trained_on"]
    assert served.width(3) is not None and served.width(0) == (card["interval"]["log_low"], card["interval"]["log_high"])
    with pytest.raises(GpupredError, match="missing keys"):
        check_slowdown_choice({"schema": 1})
