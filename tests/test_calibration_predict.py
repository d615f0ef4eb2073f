"""Predictions with a calibration: its constants replace the borrowed ones (scaled by the reference readings), only
those it measures, only on a GPU without fits; the output says `calibrated by <file>`; refusals are one line.

The artifact is trained on FIXTURE rows (toy labels) and the calibrations are FIXTURE recordings
(tests/fixtures_calibration.py); no figure here is a measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import numpy as np
import pytest

from fixtures_calibration import write_fixture_calibration
from fixtures_learning import fixture_dataset
from gpupred.calibration.file import read_calibration
from gpupred.calibration.derive import STEP_MEASURED
from gpupred.calibration.use import applied, resolve_calibration, standin_reference
from gpupred.errors import GpupredError
from gpupred.step.physics.constants import DEFAULT
from gpupred.predictor.answer import render_text
from gpupred.predictor.loading import load_predictor
from gpupred.predictor.training import export_predictor, train_predictor
from fixtures_cli import run_cli

H100 = "NVIDIA H100 80GB HBM3"
JOB = "resnet.resnet18-bs16-img128-fp32-sgd"  # its graph is in the committed store
# readings equal to the stand-in reference (the published defaults; fixed memory 619 + 64 MiB): "an average GPU"
AS_REFERENCE = {"step": {k: getattr(DEFAULT, k) for k in STEP_MEASURED}, "memory": {"fixed_mib": 683.0}}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FIXTURE artifact with the physics core, trained on H100 rows only, with no committed calibration in view (the
    published defaults are its reference readings, whatever data/calibrations/ holds)."""
    from gpupred import config

    df = fixture_dataset(gpus=(H100,), n_batch_sizes=2)
    df = df[df["family"].isin(["resnet", "vgg"])].reset_index(drop=True)
    from gpupred.step.physics.columns import spec_step_columns
    from gpupred.workloads.spec import WorkloadSpec

    steps = [spec_step_columns(WorkloadSpec.from_id(w), g) for w, g in zip(df["workload_id"], df["gpu"])]
    df = df.assign(**pd.DataFrame(steps, index=df.index))
    saved, config.CALIBRATIONS = config.CALIBRATIONS, tmp_path_factory.mktemp("no-calibrations")
    try:
        predictor = train_predictor(df, models="ridge", tune=False, n_folds=3, physics=True)
    finally:
        config.CALIBRATIONS = saved
    return export_predictor(predictor, df, tmp_path_factory.mktemp("models") / "predictor.joblib")


@pytest.fixture(scope="module")
def cals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """FIXTURE calibrations: an L4 whose host is 3x slower and whose context is 400 MiB larger than the reference, an
    L4 that reads exactly like the reference, and an H100."""
    folder = tmp_path_factory.mktemp("cals")
    slow = {**AS_REFERENCE["step"], "launch_s": 3 * DEFAULT.launch_s}
    return {"slow": write_fixture_calibration(folder / "l4-slow.json", gpu_name="NVIDIA L4", step=slow,
                                              memory={"fixed_mib": 1083.0}),
            "same": write_fixture_calibration(folder / "l4-same.json", gpu_name="NVIDIA L4", **AS_REFERENCE),
            "h100": write_fixture_calibration(folder / "h100.json", gpu_name=H100, uuid="GPU-abcdef01-0000")}


def test_a_calibration_replaces_the_borrowed_constants_and_the_output_says_so(artifact: Path, cals: dict) -> None:
    p = load_predictor(artifact)
    before = p.predict(JOB, gpu="L4", calibration=False).iloc[0]
    after = p.predict(JOB, gpu="L4", calibration=cals["slow"]).iloc[0]
    assert before["extrapolated"] and "calibrated" not in before and "calibration_note" not in before
    assert not after["extrapolated"] and after["calibrated"] == str(cals["slow"])
    assert after["iter_time_mean_s"] != before["iter_time_mean_s"]
    # 400 MiB more context, times the learned correction, which multiplies the whole footprint
    factor = p.answer(JOB, gpu="L4", calibration=False)["memory_breakdown"]["correction_factor"]
    assert after["memory_mib"] == pytest.approx(before["memory_mib"] + 400.0 * factor, rel=0.02, abs=5.0)
    for t in ("gpu_util", "iter_time_mean_s", "memory_mib"):
        assert after[f"{t}_low"] <= after[t] <= after[f"{t}_high"], t


def test_a_gpu_that_reads_like_the_reference_is_predicted_as_borrowed(artifact: Path, cals: dict) -> None:
    """calibrated = borrowed x reading / reference: equal readings leave every prediction as it was."""
    p = load_predictor(artifact)
    before = p.predict(JOB, gpu="L4", calibration=False).iloc[0]
    same = p.predict(JOB, gpu="L4", calibration=cals["same"]).iloc[0]
    assert same["calibrated"] == str(cals["same"])
    for t in ("gpu_util", "sm_active", "iter_time_mean_s", "memory_mib"):
        assert same[t] == pytest.approx(before[t], rel=1e-3), t  # efficiencies re-fitted to 1e-4 in log


def test_only_the_measured_constants_change(artifact: Path, cals: dict) -> None:
    """The slow FIXTURE reads the reference everywhere but the launch cost: that alone moves (x3); the constants no
    micro-benchmark measures are the borrowed ones exactly."""
    p = load_predictor(artifact)
    borrowed = p.core.step_.constants_.get("L4", "nvml-poll")
    calibrated = applied(read_calibration(cals["slow"])).step_constants(borrowed, standin_reference())
    for name in set(borrowed.__dataclass_fields__) - {"source", "launch_s"}:
        if name in STEP_MEASURED:  # re-derived from timings: equal to the fit's tolerance
            assert getattr(calibrated, name) == pytest.approx(getattr(borrowed, name), rel=1e-3), name
        else:
            assert getattr(calibrated, name) == getattr(borrowed, name) or (
                np.isnan(getattr(calibrated, name)) and np.isnan(getattr(borrowed, name))), name
    assert calibrated.launch_s == pytest.approx(3 * borrowed.launch_s)
    assert "calibrated by" in calibrated.source and borrowed.source in calibrated.source


def test_the_calibrated_constants_are_the_ones_the_step_model_runs_with(artifact: Path, cals: dict,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The physics core simulates the step with the calibrated constants (a 3x slower host: every launch costs 3x, the
    GPU's work is unchanged); the learned correction on top is a FIXTURE's and is not what is checked here."""
    from gpupred.step.estimator import StepEstimator

    seen: list = []
    real = StepEstimator.predict_columns  # what the core calls

    def spy(self, X, physics=None, constants=None, widths=None):
        from gpupred.step.physics.timeline import launch_costs, simulate

        r = physics.rows
        c = constants if constants is not None else self.constants_.get(*physics.keys[0])
        seen.append((simulate(r.kernels[0], r.gpus[0], r.precisions[0], c, r.syncs[0], r.host_batches[0]),
                     launch_costs(r.kernels[0], c)))
        return real(self, X, physics, constants, widths)

    monkeypatch.setattr(StepEstimator, "predict_columns", spy)
    p = load_predictor(artifact)
    p.predict(JOB, gpu="L4", calibration=False)
    p.predict(JOB, gpu="L4", calibration=cals["slow"])
    (borrowed, launches), (calibrated, launches_after) = seen
    assert launches_after.sum() == pytest.approx(3 * launches.sum(), rel=1e-3)  # every launch costs 3x
    assert calibrated.host_s - borrowed.host_s == pytest.approx(2 * launches.sum(), rel=1e-2)  # the rest is as it was
    assert calibrated.gpu_busy_s == pytest.approx(borrowed.gpu_busy_s, rel=1e-3)


def test_a_calibration_of_another_gpu_is_refused_naming_both(artifact: Path, cals: dict) -> None:
    p = load_predictor(artifact)
    with pytest.raises(GpupredError, match=r"a calibration of NVIDIA L4, not of A10"):
        p.predict(JOB, gpu="A10", calibration=cals["slow"])


def test_without_a_gpu_named_the_calibrations_gpu_is_predicted(artifact: Path, cals: dict) -> None:
    row = load_predictor(artifact).predict(JOB, calibration=cals["slow"]).iloc[0]
    assert row["calibrated"] == str(cals["slow"]) and not row["extrapolated"]


def test_a_measured_gpu_keeps_its_fits_and_says_the_calibration_was_not_used(artifact: Path, cals: dict) -> None:
    p = load_predictor(artifact)
    plain = p.predict(JOB, gpu="H100 SXM", calibration=False).iloc[0]
    row = p.predict(JOB, gpu="H100 SXM", calibration=cals["h100"]).iloc[0]
    assert row["calibrated"] == "" and "not used" in row["calibration_note"] and "fitted to" in row["calibration_note"]
    assert row["gpu_util"] == plain["gpu_util"] and row["memory_mib"] == plain["memory_mib"]


def test_feature_rows_are_not_calibrated_and_say_why(artifact: Path, cals: dict) -> None:
    p = load_predictor(artifact)
    rows = fixture_dataset(gpus=(H100,), n_batch_sizes=1).head(2)[p.graph_features]
    out = p.predict(rows, gpu="L4", calibration=cals["slow"])
    assert (out["calibrated"] == "").all() and out["calibration_note"].str.contains("regressors").all()
    assert out["extrapolated"].all()


@pytest.mark.filterwarnings("ignore:.*not a calibration file")  # after the first, checked below
def test_the_users_folder_is_searched_for_the_named_gpu(artifact: Path, cals: dict, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "l4.json").write_text(cals["slow"].read_text())
    (folder / "notes.json").write_text("not json at all")  # unrelated junk is skipped with a warning
    monkeypatch.setenv("GPUPRED_CALIBRATION_DIR", str(folder))
    p = load_predictor(artifact)
    with pytest.warns(UserWarning, match="not a calibration file"):
        row = p.predict(JOB, gpu="L4").iloc[0]
    assert row["calibrated"] == str(folder / "l4.json")
    assert "calibrated" not in p.predict(JOB, gpu="L4", calibration=False).columns
    assert "calibrated" not in p.predict(JOB, gpu="A10").columns  # no A10 calibration there
    data = json.loads((folder / "l4.json").read_text())
    data["derived"]["step"]["launch_s"] = 1e-6
    (folder / "l4.json").write_text(json.dumps(data))
    for _ in range(2):  # read again once changed, and refused every time (a refusal is not kept)
        with pytest.raises(GpupredError, match=rf"{folder / 'l4.json'}: checksum does not match"):
            p.predict(JOB, gpu="L4")


def test_other_software_is_used_and_said(artifact: Path, tmp_path: Path) -> None:
    p = load_predictor(artifact)
    p.core.calibration_.software = {"torch": ["2.11.0+cu130"], "cuda": ["13.0"]}
    older = write_fixture_calibration(tmp_path / "old.json", gpu_name="NVIDIA L4", torch_version="2.9.1+cu128",
                                      cuda="12.8")
    row = p.predict(JOB, gpu="L4", calibration=older).iloc[0]
    assert row["calibrated"] == str(older)
    assert row["calibration_note"] == ("software differs from the training runs': torch 2.9 (calibration) vs 2.11 "
                                       "(training runs); cuda 12.8 (calibration) vs 13.0 (training runs)")
    same = write_fixture_calibration(tmp_path / "same.json", gpu_name="NVIDIA L4")
    assert p.predict(JOB, gpu="L4", calibration=same).iloc[0]["calibration_note"] == ""


def test_a_gpu_outside_the_table_is_predicted_on_its_measured_peaks(artifact: Path, tmp_path: Path) -> None:
    name = "NVIDIA RTX PRO 6000 FIXTURE"
    cal = write_fixture_calibration(tmp_path / "new.json", gpu_name=name, peaks_of="NVIDIA L4")
    p = load_predictor(artifact)
    with pytest.raises(GpupredError, match="unknown GPU"):
        p.predict(JOB, gpu=name, calibration=False)
    row = p.predict(JOB, calibration=cal).iloc[0]
    assert row["calibrated"] == str(cal) and "measured peaks stand in" in row["calibration_note"]
    assert 0 < row["gpu_util"] <= 100 and row["iter_time_mean_s"] > 0 and row["memory_mib"] > 0
    with pytest.raises(GpupredError, match="unknown GPU"):  # known only inside that prediction
        p.predict(JOB, gpu=name, calibration=False)


def test_a_measured_calibrated_width_replaces_the_extrapolated_one(artifact: Path, cals: dict) -> None:
    p = load_predictor(artifact)
    wide = p.predict(JOB, gpu="L4", calibration=cals["slow"]).iloc[0]
    p.core.calibration_.widths = {"gpu_util": 0.01, "iter_time_mean_s": 0.01, "memory_mib": 0.05}  # as if measured
    narrow = p.predict(JOB, gpu="L4", calibration=cals["slow"]).iloc[0]
    p.core.calibration_.widths = {"gpu_util": 3.0, "iter_time_mean_s": 3.0, "memory_mib": 0.05}  # as if measured
    broad = p.predict(JOB, gpu="L4", calibration=cals["slow"]).iloc[0]
    assert narrow["iter_time_mean_s"] == wide["iter_time_mean_s"] == broad["iter_time_mean_s"]
    ratio = lambda r, t: r[f"{t}_high"] / r[f"{t}_low"]  # noqa: E731
    # the measured width is the floor the step model's interval is widened to, in place of the extrapolated one: a
    # narrow one leaves the correction's own interval, a broad one reaches exp(+-3)
    assert ratio(narrow, "iter_time_mean_s") <= ratio(wide, "iter_time_mean_s")
    assert ratio(broad, "iter_time_mean_s") == pytest.approx(np.exp(6.0), rel=1e-6)
    assert narrow["memory_mib_high"] == pytest.approx(narrow["memory_mib"] * 1.0513, rel=1e-3)
    card = p.core.describe()["calibrated_gpus"]
    assert card["interval_log_width"]["memory_mib"] == 0.05


def test_resolve_needs_a_named_gpu_to_search(cals: dict) -> None:
    assert resolve_calibration(None, None) is None and resolve_calibration(False, "L4") is None
    assert resolve_calibration(cals["slow"], None).spec.name == "L4"


_cli = run_cli  # gpupred in this process: exit code, stdout, stderr


def test_cli_predict_with_a_calibration(artifact: Path, cals: dict, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", JOB, "--predictor", str(artifact)]
    code, out, _ = _cli([*base, "--gpu", "L4", "--calibration", str(cals["slow"])], capsys)
    assert code == 0 and f"calibrated by {cals['slow']}" in out and "extrapolated" not in out
    code, out, _ = _cli([*base, "--gpu", "L4", "--calibration", str(cals["slow"]), "--json"], capsys)
    values = json.loads(out)["inputs"]  # the answer contract (gpupred.predictor.answer)
    assert values["calibrated"] == str(cals["slow"]) and values["extrapolated"] is False
    code, out, _ = _cli([*base, "--gpu", "L4", "--json"], capsys)
    assert json.loads(out)["inputs"]["calibrated"] is None and json.loads(out)["inputs"]["extrapolated"] is True
    code, _, err = _cli([*base, "--gpu", "A10", "--calibration", str(cals["slow"])], capsys)
    assert code == 2 and err.count("\n") == 1 and "not of A10" in err
    code, _, err = _cli([*base, "--calibration", str(cals["slow"]), "--no-calibration"], capsys)
    assert code == 2 and "not both" in err
    bad = cals["slow"].parent / "bad.json"
    bad.write_text(cals["slow"].read_text().replace('"launch_s": 2.4e-05', '"launch_s": 2.5e-05', 1))
    code, _, err = _cli([*base, "--calibration", str(bad)], capsys)
    assert code == 2 and err.count("\n") == 1 and "checksum does not match" in err


def test_the_training_runs_software_is_read_from_their_raw_files(tmp_path: Path) -> None:
    from fixtures_learning import write_fixture_raw_tree
    from gpupred.calibration.use import training_software

    write_fixture_raw_tree(tmp_path, ["resnet.resnet18-bs16-img128-fp32-sgd"], extras=False)
    ids = pd.DataFrame({"run_id": ["h100-fixture/FIXTURE/fixture-000", "lucid:job-1", "h100-fixture/FIXTURE/absent"]})
    assert training_software(ids, tmp_path) == {"torch": ["fixture"], "cuda": ["fixture"]}  # the FIXTURE runs' own
    assert training_software(ids.iloc[1:], tmp_path) == {}


def test_a_fed_job_runs_its_loader_on_the_calibrated_hosts_speed(artifact: Path, tmp_path: Path) -> None:
    """A calibration records its GPU host's single-core score: a job fed by a host pipeline that names no host of its
    own runs its loader at that score; one that names its host keeps it (FIXTURE calibrations of an L4)."""
    from gpupred.loader.hostprofile import default_host_profile
    from gpupred.loader.speed import GPU_HOST_SCORE
    from gpupred.setups import InputPipeline

    p = load_predictor(artifact)
    fast = write_fixture_calibration(tmp_path / "l4-fast-host.json", gpu_name="NVIDIA L4", host_score=1.2)
    slow = write_fixture_calibration(tmp_path / "l4-slow-host.json", gpu_name="NVIDIA L4", host_score=0.3)
    images = InputPipeline("image-files", num_workers=2)

    def made(cal: Path | bool, pipe: InputPipeline = images) -> float:
        answer = p.answer(JOB, gpu="L4", calibration=cal, pipeline=pipe)
        return answer["inputs"]["pipeline"]["host_speed"]

    reference = default_host_profile().single_core_score
    assert made(False) == pytest.approx(GPU_HOST_SCORE / reference)  # no calibration: a measured GPU server
    assert made(fast) == pytest.approx(1.2 / reference) and made(slow) == pytest.approx(0.3 / reference)
    own = InputPipeline("image-files", num_workers=2, host_speed=2.0)
    assert made(slow, own) == 2.0  # the job's own word stands
    steps = [p.predict(JOB, gpu="L4", calibration=c, pipeline=images).iloc[0]["iter_time_mean_s"] for c in (fast, slow)]
    assert steps[1] > steps[0]  # the slower host makes and receives each batch more slowly
    answer = p.answer(JOB, gpu="L4", calibration=slow, pipeline=images)
    assert answer["inputs"]["pipeline"]["changes"]["host_score"] == 0.3
    assert answer["inputs"]["pipeline"]["host_named_by"] == "host_score"
    assert "single-core speed (a host of score 0.30)" in " ".join(render_text(answer).split())  # wrapped or not
