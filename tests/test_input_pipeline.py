"""The input pipeline as part of a job (issue 77): options, per-batch times from a host profile, the timeline, and
the predictor's answer (fixtures: host costs written here, the committed predictor and graph store)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from gpupred.errors import GpupredError
from gpupred.loader.speed import GPU_HOST_SCORE
from gpupred.step.physics.inputfeed import job_host_speed, loader_columns, loader_times, variant_of
from gpupred.step.physics.timeline import LoaderTimes, loader_arrays, with_loader
from gpupred.setups import RESIDENT, InputPipeline, pipeline_from_json, pipeline_of

WORKLOAD = "resnet.resnet50-bs64-img224-bf16-sgd"
GPU = "H100 SXM"


@dataclass
class FixtureCosts:
    """Fixture host costs: 2 ms per sample of every kind, 0.5 ms + 1 ns/byte to receive, 4 GB/s copies, measured on
    a host that scores as a GPU server (so a job that names no host runs at these costs: speed 1)."""

    ipc_per_batch_s: float = 5e-4
    ipc_per_byte_s: float = 1e-9
    copy_gbs: float = 4.0
    single_core_score: float = GPU_HOST_SCORE

    def per_sample_s(self, kind: str, scale: float, variant: str | None = None) -> float:
        return 2e-3


def _step(loader: LoaderTimes, step: float = 0.1, busy: float = 0.08, host: float = 0.02,
          sync: str = "step") -> tuple[float, float]:
    s, h = with_loader(np.array([step]), np.array([busy]), np.array([host]), np.array([sync], dtype=object),
                       loader_arrays([loader], 1))
    return float(s[0]), float(h[0])


def test_in_line_loading_adds_the_batch_to_the_step() -> None:
    assert _step(LoaderTimes(0.05)) == pytest.approx((0.15, 0.07))
    assert _step(LoaderTimes(0.05), sync="window")[0] == pytest.approx(0.1)  # the host hides behind the GPU


def test_workers_bound_the_period_by_the_slowest_of_step_making_and_cpu() -> None:
    assert _step(LoaderTimes(0.05, 0.01, 2, 8.0))[0] == pytest.approx(0.11)  # step-bound: only the receive adds
    assert _step(LoaderTimes(0.6, 0.01, 2, 8.0))[0] == pytest.approx(0.3)  # loader-bound: 0.6 s a batch over 2
    # 2 cores for 9 processes: the batch's making and the main thread's whole step (0.1 s + the receive: it spins
    # while the device runs), not only its 0.03 s of launches and receiving
    assert _step(LoaderTimes(0.6, 0.01, 8, 2.0))[0] == pytest.approx((0.6 + 0.11) / 2)
    assert _step(LoaderTimes(0.05, 0.01, 2, 8.0, 0.2))[0] == pytest.approx(0.2)  # the pin-memory thread binds


def test_the_main_thread_waits_its_turn_where_processes_outnumber_cores() -> None:
    from gpupred.step.physics.timeline import main_thread_stretch

    assert main_thread_stretch(2, 2.0, 0.5) == pytest.approx(0.75 * 1.0 + 0.25 * 1.5)  # both workers running: 2/3 core
    assert main_thread_stretch(1, 2.0, 1.0) == 1.0 and main_thread_stretch(4, 2.0, 0.0) == 1.0
    step, _ = with_loader(np.array([0.1]), np.array([0.08]), np.array([0.02]), np.array(["step"], dtype=object),
                          loader_arrays([LoaderTimes(0.1, 0.01, 2, 2.0)], 1))
    period = 0.11  # step + receive; the workers make a batch each 0.05 s: busy 0.1 / (2 x 0.11) of the time
    assert float(step[0]) == pytest.approx(0.11 + (main_thread_stretch(2, 2.0, 0.1 / (2 * period)) - 1) * 0.03)


def test_resident_rows_keep_their_step() -> None:
    loaders = loader_arrays([None, LoaderTimes(1.0, 0.0, 1, 4.0)], 2)
    step, host = with_loader(np.array([0.1, 0.1]), np.array([0.05, 0.05]), np.array([0.02, 0.02]),
                             np.array(["step", "step"], dtype=object), loaders)
    assert step.tolist() == pytest.approx([0.1, 1.0]) and host.tolist() == pytest.approx([0.02, 0.02])


def test_loader_times_from_host_costs() -> None:
    batch_bytes = 64 * 3 * 224 * 224 * 4
    inline = loader_times(InputPipeline("image-files", pin_memory=True), 64, batch_bytes, FixtureCosts())
    assert inline == LoaderTimes(64 * 2e-3 + batch_bytes / 4e9, 0.0, 0, 1.0, host_guessed=True)  # no host named
    workers = loader_times(InputPipeline("image-files", num_workers=4, host_speed=2.0), 64, batch_bytes, FixtureCosts())
    handoff = 5e-4 + 1e-9 * batch_bytes  # a worker's putting a batch, as costly as the main process's receiving it
    assert workers == LoaderTimes((64 * 2e-3 + handoff) / 2, handoff / 2, 4, 5.0)
    pinned = loader_times(InputPipeline("image-files", num_workers=4, pin_memory=True), 64, batch_bytes, FixtureCosts())
    assert pinned == LoaderTimes(64 * 2e-3 + handoff, 5e-4, 4, 5.0, 1e-9 * batch_bytes + batch_bytes / 4e9, True)
    assert loader_times(RESIDENT, 64, batch_bytes, FixtureCosts()) is None
    assert np.isnan(list(loader_columns(None).values())).all()


def test_a_job_that_names_no_host_runs_on_a_measured_gpu_server() -> None:
    from gpupred import config
    from gpupred.loader.hostprofile import default_host_profile, measured_gpu_host_score, measured_gpu_host_scores
    from gpupred.loader.speed import HOST_SCORE_BAND

    reference = FixtureCosts(single_core_score=0.97)  # costs measured on a host as fast as the reference
    image = InputPipeline("image-files", num_workers=4)
    assert job_host_speed(image, reference) == pytest.approx(GPU_HOST_SCORE / 0.97)
    assert job_host_speed(InputPipeline("image-files", host_speed=1.5), reference) == 1.5  # as the job says
    assert job_host_speed(InputPipeline("image-files", profile="mine.json"), reference) == 1.0  # its own host's
    both = InputPipeline("image-files", host_score=0.6, profile="mine.json")  # a score says more than a profile
    assert job_host_speed(both, reference) == pytest.approx(0.6 / 0.97) and both.host_named_by == "host_score"
    assert both.on_host(0.3) is both and image.host_named_by is None
    slow = loader_times(image, 64, 1e6, reference)
    fast = loader_times(InputPipeline("image-files", num_workers=4, host_speed=1.0), 64, 1e6, reference)
    assert slow.produce_s == pytest.approx(fast.produce_s * 0.97 / GPU_HOST_SCORE)
    # the constant is what the committed GPU hosts' profiles say, and the reference host is about twice as fast
    assert measured_gpu_host_score(config.RAW) == pytest.approx(GPU_HOST_SCORE, abs=5e-4)
    assert min(measured_gpu_host_scores(config.RAW).values()) == pytest.approx(HOST_SCORE_BAND[0], abs=5e-4)
    assert 1.8 < default_host_profile().single_core_score / GPU_HOST_SCORE < 2.3


def test_the_host_band_moves_a_guessed_hosts_loader_to_each_end() -> None:
    """FIXTURE rows: a guessed host's loader times go as GPU_HOST_SCORE over each end of HOST_SCORE_BAND, and the
    bounds of those rows alone reach what each end gives."""
    from gpupred.loader.speed import HOST_SCORE_BAND
    from gpupred.step.physics.fit import FitRows
    from gpupred.step.rowphysics import PhysicsData, guessed_hosts, host_band_physics, spread_over_hosts

    loaders = [LoaderTimes(1.0, 0.5, 2, 3.0, 0.1, True), None, LoaderTimes(1.0, 0.5, 2, 3.0, 0.1)]
    rows = FitRows([None] * 3, [None] * 3, ["fp32"] * 3, ["step"] * 3, [True, False, True], np.full(3, np.nan),
                   np.full(3, np.nan), loaders)
    pdata = PhysicsData(rows, [("H100 SXM", "nvml-poll")] * 3)
    assert guessed_hosts(pdata).tolist() == [True, False, False]  # resident, and a host named, are not guesses
    seen: list[LoaderTimes] = []
    ends = host_band_physics(pdata, np.array([0]), lambda p: (seen.extend(p.rows.loaders), (np.ones(1), np.ones(1)))[1])
    assert len(ends) == 2
    assert [t.produce_s for t in seen] == pytest.approx([GPU_HOST_SCORE / s for s in HOST_SCORE_BAND])
    assert [t.pin_s / t.main_s for t in seen] == pytest.approx([0.2, 0.2]) and {t.workers for t in seen} == {2}
    lo, hi = spread_over_hosts(np.array([1.0, 1.0]), np.array([2.0, 2.0]), np.array([1.0, 1.0]), np.array([0]),
                               [np.array([0.5]), np.array([1.5])])
    assert lo.tolist() == [0.5, 1.0] and hi.tolist() == [3.0, 2.0]
    assert HOST_SCORE_BAND[0] < GPU_HOST_SCORE < HOST_SCORE_BAND[1]
    import pandas as pd

    from gpupred.step.rowphysics import loaders_of

    frame = pd.DataFrame([loader_columns(t) for t in loaders])  # the dataset's columns of these rows
    assert loaders_of(frame) == loaders
    assert [t and t.host_guessed for t in loaders_of(frame.drop(columns="loader_host_guessed"))] == [False, None, False]


def test_options_are_checked_in_one_line() -> None:
    for bad in ({"kind": "tfrecord"}, {"kind": "image-files", "num_workers": -1},
                {"kind": "image-files", "prefetch_factor": 4}, {"kind": "image-files", "host_speed": 0},
                {"kind": "measured"}, {"num_workers": 4}):
        with pytest.raises(GpupredError) as err:
            pipeline_of(**bad)
        assert "\n" not in str(err.value)
    for kind, source in (("host-tensors", {"image_width": 4000}), ("array-files", {"transforms": "v2"}),
                         ("image-files", {"array_format": "txt-legacy"}), ("text-tokens", {"audio_s": 10.0})):
        with pytest.raises(GpupredError, match=f"describes the sources of an .* pipeline; an? {kind} pipeline reads "
                                               "none of it"):  # accepted and ignored before
            pipeline_of(kind, **source)
    assert variant_of(InputPipeline("image-files", image_format="png", transforms="v2")) == "png-v2"
    assert variant_of(InputPipeline("array-files", array_format="txt")) == "txt"


def test_a_pipeline_round_trips_through_json() -> None:
    pipe = InputPipeline("array-files", num_workers=2, array_bytes=40_000, array_format="txt")
    assert pipeline_from_json(json.dumps(pipe.changes())) == pipe
    assert pipeline_from_json("") == RESIDENT and pipeline_from_json(float("nan")) == RESIDENT
    with pytest.raises(GpupredError, match="not a JSON object"):
        pipeline_from_json("{kind")


@pytest.fixture(scope="module")
def predictor():
    import gpupred

    return gpupred.load_predictor()


def _answer(predictor, pipeline: InputPipeline | None) -> dict[str, float]:
    row = predictor.predict(WORKLOAD, gpu=GPU, calibration=False, pipeline=pipeline).iloc[0]
    return {k: float(row[k]) for k in ("gpu_util", "iter_time_mean_s", "memory_mib")}


def test_a_fed_job_waits_for_its_loader_and_more_workers_help(predictor) -> None:
    resident = _answer(predictor, None)
    assert _answer(predictor, RESIDENT) == resident  # resident is today's answer, to the digit
    utils = [_answer(predictor, InputPipeline("image-files", num_workers=w))["gpu_util"] for w in (0, 1, 2, 4)]
    assert utils == sorted(utils) and utils[-1] < resident["gpu_util"]
    fed = _answer(predictor, InputPipeline("image-files", num_workers=0))
    assert fed["iter_time_mean_s"] > resident["iter_time_mean_s"] and fed["memory_mib"] == resident["memory_mib"]


def test_a_job_that_names_no_host_gets_intervals_over_the_hosts_it_may_run_on(predictor) -> None:
    """A loader-bound job priced on a GPU server as measured answers as one that names that very host, with bounds
    that reach the slowest GPU host measured and the reference host (HOST_SCORE_BAND); a resident job keeps its."""
    def row(pipeline: InputPipeline | None) -> object:
        return predictor.predict(WORKLOAD, gpu=GPU, calibration=False, pipeline=pipeline).iloc[0]

    guessed = row(InputPipeline("image-files", num_workers=2))
    named = row(InputPipeline("image-files", num_workers=2, host_score=GPU_HOST_SCORE))
    for t in ("iter_time_mean_s", "gpu_util"):
        assert guessed[t] == pytest.approx(named[t], rel=1e-12)
        assert guessed[f"{t}_low"] <= named[f"{t}_low"] and guessed[f"{t}_high"] >= named[f"{t}_high"]
    assert guessed["iter_time_mean_s_low"] < 0.8 * named["iter_time_mean_s_low"]  # a host twice as fast
    assert guessed["iter_time_mean_s_high"] > 1.1 * named["iter_time_mean_s_high"]  # the H200's, 15% slower
    assert row(None)["iter_time_mean_s_low"] == row(RESIDENT)["iter_time_mean_s_low"]
    from gpupred.predictor.answer import render_text

    text = " ".join(render_text(predictor.answer(WORKLOAD, gpu=GPU, calibration=False,
                                                 pipeline=InputPipeline("image-files", num_workers=2))).split())
    assert "the intervals span hosts scoring 0.40-1.00: --host-score or --loader-profile narrows them" in text


def test_the_cli_takes_the_pipeline_flags_and_refuses_bad_ones(capsys) -> None:
    from gpupred.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(["predict", WORKLOAD, "--gpu", GPU, "--no-calibration", "--json", *args])
            code = 0
        except SystemExit as stop:
            code = int(stop.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run("--data", "image-files", "--workers", "2", "--image-source", "1024x768:png:v2")
    answer = json.loads(out)
    assert code == 0 and answer["inputs"]["pipeline"]["changes"] == {  # the answer contract (gpupred.predictor.answer)
        "kind": "image-files", "num_workers": 2, "image_width": 1024, "image_height": 768, "image_format": "png",
        "transforms": "v2"}
    code, out, _ = run("--data", "array-files", "--workers", "2", "--array-source", "45000:txt")
    assert code == 0 and json.loads(out)["inputs"]["pipeline"]["changes"] == {
        "kind": "array-files", "num_workers": 2, "array_bytes": 45_000, "array_format": "txt"}
    for args in (["--workers", "2"], ["--data", "image-files", "--image-source", "big"], ["--data", "webdataset"],
                 ["--data", "host-tensors", "--image-source", "4000x3000:png"],
                 ["--data", "image-files", "--array-source", "90000000:txt-legacy"],
                 ["--data", "array-files", "--array-source", "45k"], ["--data", "array-files", "--array-source", "9:csv"],
                 ["--data", "image-files", "--host-score", "0"]):
        code, _, err = run(*args)
        assert code == 2 and err.count("\n") == 1, (args, err)
    code, out, _ = run("--data", "image-files", "--workers", "2", "--host-score", "0.8")
    pipe = json.loads(out)["inputs"]["pipeline"]
    assert code == 0 and pipe["host_named_by"] == "host_score" and pipe["changes"]["host_score"] == 0.8


def test_a_measured_loader_feeds_the_prediction(predictor, tmp_path) -> None:
    """FIXTURE loader: 64 small tensors with a sleep per sample, measured on this CPU by gpupred.measure_loader, then
    asked about as the pipeline of a job (its receive and copy figures borrowed from the reference profile)."""
    import time

    torch = pytest.importorskip("torch")
    import gpupred

    class Slow(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int):
            time.sleep(0.002)  # 2 ms of "decoding" per sample
            return torch.zeros(3, 8, 8)

    profile = gpupred.measure_loader(torch.utils.data.DataLoader(Slow(), batch_size=8), batches=4, workers=(0,),
                                     out=tmp_path / "measured.json")
    per_sample = profile.per_sample_s("measured")
    assert 0.0015 < per_sample < 0.02
    fed = _answer(predictor, InputPipeline("measured", num_workers=0, profile=str(tmp_path / "measured.json")))
    resident = _answer(predictor, None)
    assert fed["iter_time_mean_s"] == pytest.approx(resident["iter_time_mean_s"] + 64 * per_sample, rel=0.05)
