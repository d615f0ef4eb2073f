"""`gpupred calibrate` on the CPU: the benchmarks' loop, the FakeBackend's replay, the derivation, the file's checks.

Every recording here is a FIXTURE (tests/fixtures_calibration.py: timings made up from a hand-written roofline with
known constants; no GPU ran them), except the replay of each GPU-recorded file (data/calibrations/: an H200's and an
H100's, recorded on lent GPUs on 2026-11-27), which must re-derive the constants it holds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fixtures_calibration import TRUE_MEMORY, TRUE_STEP, fixture_recording, write_fixture_calibration
from gpupred import config
from gpupred.calibration.run import calibrate
from gpupred.calibration.file import read_calibration
from gpupred.calibration.bench import Case, default_cases, run_benchmarks
from gpupred.calibration.derive import MEASURED_BY, MEMORY_MEASURED, NOT_MEASURED, STEP_MEASURED, derive
from gpupred.calibration.replay import FakeBackend
from gpupred.files import canonical_sha256
from gpupred.errors import GpupredError
from gpupred.step.physics.constants import BOUNDS, DEFAULT, StepConstants
from fixtures_cli import run_cli

H100 = "NVIDIA H100 80GB HBM3"


def test_every_measured_constant_names_its_measurement_and_the_rest_are_named_unmeasured() -> None:
    assert set(MEASURED_BY) == set(STEP_MEASURED) | set(MEMORY_MEASURED)
    fields = set(StepConstants.__dataclass_fields__) - {"source", "host_score", "blocking_runs"}  # records of a fit
    assert set(STEP_MEASURED) | set(NOT_MEASURED) == fields  # every step constant is either measured or said not to be


def test_the_derivation_recovers_the_constants_a_fixture_gpu_was_made_with() -> None:
    """On an H100-like FIXTURE every efficiency is visible in some case: each comes back to within 0.1 %."""
    rec = fixture_recording(gpu_name=H100)
    d = derive(rec["gpu"], rec["results"])
    assert d.peaks["source"] == "datasheet" and d.notes == []
    for name, value in TRUE_STEP.items():
        assert d.step[name] == pytest.approx(value, rel=1e-3), name
    for name, value in TRUE_MEMORY.items():
        assert d.memory[name] == pytest.approx(value, rel=1e-6), name


def test_noisy_timings_move_the_efficiencies_a_little_and_the_host_constants_not_at_all() -> None:
    rec = fixture_recording(gpu_name=H100, noise=0.05, seed=3)
    d = derive(rec["gpu"], rec["results"])
    for name in ("compute_eff", "tensor_eff", "memory_eff", "depthwise_eff"):
        assert d.step[name] == pytest.approx(TRUE_STEP[name], rel=0.08), name
        assert d.step[name] != pytest.approx(TRUE_STEP[name], rel=1e-6), name  # the noise did reach the fit
    assert d.step["launch_s"] == TRUE_STEP["launch_s"]


def test_sync_s_comes_from_the_per_kernel_round_trips_where_they_were_recorded() -> None:
    """FIXTURE: a sync per chain is one round trip beside 256 launches (a chain timed a little fast hides it: 0);
    a sync per kernel reads it 64 times a chain, and wins; a recording without that case keeps the chain's reading."""
    rec = fixture_recording(gpu_name=H100)
    for r in rec["results"]:
        if r["bench"] == "launch" and r["params"]["sync"] == "step":
            r["values"]["wall_s_per_step"] *= 0.97  # 3% of 256 launches: more than the round trip
    assert derive(rec["gpu"], rec["results"]).step["sync_s"] == pytest.approx(TRUE_STEP["sync_s"], rel=1e-9)
    chain_only = [r for r in rec["results"] if not (r["bench"] == "launch" and r["params"]["sync"] == "op")]
    assert derive(rec["gpu"], chain_only).step["sync_s"] == 0.0


def test_an_efficiency_no_case_can_tell_apart_stays_at_the_prior() -> None:
    """On an L4 (300 GB/s) the FIXTURE's depthwise layer is bandwidth-bound: any efficiency above a point fits, and
    the derivation keeps the predictor's value rather than a bound."""
    rec = fixture_recording(gpu_name="NVIDIA L4")
    d = derive(rec["gpu"], rec["results"])
    assert d.step["depthwise_eff"] == pytest.approx(DEFAULT.depthwise_eff, rel=0.01)
    assert d.step["tensor_eff"] == pytest.approx(TRUE_STEP["tensor_eff"], rel=1e-3)


def test_a_recording_without_some_benchmarks_derives_what_it_can_and_says_what_it_kept() -> None:
    rec = fixture_recording(gpu_name=H100)
    results = [r for r in rec["results"] if r["bench"] not in ("optimizer", "memory")]
    d = derive(rec["gpu"], results)
    assert "param_host_s" not in d.step and "context_mib" not in d.memory and "launch_s" in d.step
    assert any("optimizer_launch_ratio" in n for n in d.notes) and any("context_mib" in n for n in d.notes)


def test_a_gpu_outside_the_table_is_calibrated_on_its_measured_peaks() -> None:
    rec = fixture_recording(gpu_name="NVIDIA RTX PRO 6000 FIXTURE", peaks_of=H100)
    d = derive(rec["gpu"], rec["results"])
    assert d.peaks["source"] == "measured"
    assert 0 < d.peaks["tflops_bf16"] < 989.5 and 0 < d.peaks["mem_bw_gbs"] < 3350
    for name in ("compute_eff", "tensor_eff", "memory_eff"):  # against the best measured rate: high, at most 1
        assert 0.8 < d.step[name] <= BOUNDS[name][1], name
    assert d.step["launch_s"] == TRUE_STEP["launch_s"]


def test_the_fake_backend_replays_every_case_in_order_and_calibrate_writes_a_checked_file(tmp_path: Path) -> None:
    backend = FakeBackend(fixture_recording(gpu_name=H100), "FIXTURE")
    path = calibrate(tmp_path / "cal.json", seconds=5.0, backend=backend, progress=False)
    assert [b for b, _ in backend.calls][0] == "memory"  # the first CUDA call is the memory benchmark's
    assert len(backend.calls) == len(default_cases())
    cal = read_calibration(path)
    assert cal.data["backend"] == "replay:FIXTURE" and cal.data["replayed_from"] == "FIXTURE"
    assert cal.data["derived"]["step"]["launch_s"] == pytest.approx(TRUE_STEP["launch_s"])
    assert cal.derived().step == pytest.approx(cal.data["derived"]["step"])
    assert cal.data["sha256"] == canonical_sha256(cal.data)


def test_the_budget_is_shared_by_weight_and_a_missing_case_is_named() -> None:
    seen: list[float] = []

    class Timing(FakeBackend):
        def measure(self, bench: str, params: dict, seconds: float) -> dict[str, float]:
            seen.append(seconds)
            return super().measure(bench, params, seconds)

    rec = fixture_recording(gpu_name=H100)
    cases = [Case("launch", {"ops": 256, "sync": "none"}, 3.0), Case("min_kernel", {"ops": 1000}, 1.0)]
    run_benchmarks(Timing(rec), 8.0, cases, progress=False)
    assert seen == [6.0, 2.0]
    with pytest.raises(GpupredError, match="no recorded result for matmul"):
        run_benchmarks(FakeBackend(rec), 1.0, [Case("matmul", {"m": 3, "n": 3, "k": 3, "dtype": "fp32", "tf32": False})],
                       progress=False)


def test_calibrate_writes_to_the_users_folder_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPRED_CALIBRATION_DIR", str(tmp_path / "mine"))
    path = write_fixture_calibration(None, gpu_name="NVIDIA L4", uuid="GPU-1a2b3c4d-5e6f")
    assert path == tmp_path / "mine" / "l4-1a2b3c4d.json" == config.calibration_dir() / path.name


def test_the_default_folder_honours_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPRED_CALIBRATION_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.calibration_dir() == tmp_path / "gpupred" / "calibrations"


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A FIXTURE calibration file as `gpupred calibrate` writes it."""
    return write_fixture_calibration(tmp_path / "good.json", gpu_name="NVIDIA L4")


def test_a_file_that_is_not_json_is_refused_naming_it(good: Path) -> None:
    good.write_text(good.read_text()[:500])
    with pytest.raises(GpupredError, match=rf"{good}: not valid JSON.*gpupred calibrate"):
        read_calibration(good)


def test_a_hand_edited_value_is_refused_by_the_checksum(good: Path) -> None:
    data = json.loads(good.read_text())
    data["derived"]["step"]["launch_s"] *= 0.5  # a "better" launch cost typed in
    good.write_text(json.dumps(data))
    with pytest.raises(GpupredError, match=rf"{good}: checksum does not match its content"):
        read_calibration(good)


def test_a_file_off_the_schema_is_refused_even_with_a_fresh_checksum(good: Path) -> None:
    data = json.loads(good.read_text())
    del data["gpu"]["uuid"]
    data["sha256"] = canonical_sha256(data)
    good.write_text(json.dumps(data))
    with pytest.raises(GpupredError, match=r"not a gpupred calibration \(gpu: 'uuid' is a required property"):
        read_calibration(good)
    data["schema_version"] = 99
    good.write_text(json.dumps(data))
    with pytest.raises(GpupredError, match="calibration schema version 99, this gpupred reads 1"):
        read_calibration(good)


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(GpupredError, match="no calibration file there; `gpupred calibrate --out"):
        read_calibration(tmp_path / "absent.json")


_cli = run_cli  # gpupred in this process: exit code, stdout, stderr


def test_no_gpu_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    import gpupred.profile.nvml as nvml

    monkeypatch.setattr(nvml, "probe", lambda: "NVMLError_LibraryNotFound: NVML Shared Library Not Found")
    code, out, err = _cli(["calibrate", "--out", str(tmp_path / "x.json")], capsys)
    assert code == 2 and err.count("\n") == 1 and "no NVIDIA GPU/driver found" in err and "gpupred calibrate" in err
    assert not (tmp_path / "x.json").exists()


def test_a_driver_torch_cannot_use_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import torch

    import gpupred.profile.nvml as nvml

    monkeypatch.setattr(nvml, "probe", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = _cli(["calibrate", "--out", str(tmp_path / "x.json")], capsys)
    assert code == 2 and err.count("\n") == 1 and "sees no CUDA device" in err


def test_replay_rederives_a_recording_and_prints_each_reading(good: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(["calibrate", "--replay", str(good), "--out", str(tmp_path / "again.json")], capsys)
    assert code == 0 and f"wrote {tmp_path / 'again.json'}" in out and "NVIDIA L4" in out
    assert "launch_s" in out and "6.5e-06" in out and "step_overhead_s" in out  # the unmeasured are named
    again = read_calibration(tmp_path / "again.json")
    assert again.data["results"] == read_calibration(good).data["results"]
    code, _, err = _cli(["calibrate", "--seconds", "0", "--replay", str(good)], capsys)
    assert code == 2 and "--seconds must be positive" in err


def test_the_torch_backend_runs_every_benchmark_on_the_cpu() -> None:
    """The real backend's code paths on tiny shapes, on the CPU (host clock, no NVML): values are finite where the
    CPU has them. (Its figures are the CPU's, never a calibration.)"""
    from gpupred.calibration.torch_backend import TorchBackend

    backend = TorchBackend("cpu")
    conv = {"batch": 2, "channels": 4, "size": 6, "out_channels": 4, "kernel": 3, "tf32": True}
    cases = [Case("memory"), Case("allocator", {"tensors": 8, "seed": 0}), Case("launch", {"ops": 8, "sync": "step"}),
             Case("backward", {"ops": 8}), Case("min_kernel", {"ops": 20}),
             Case("matmul", {"m": 8, "n": 8, "k": 8, "dtype": "bf16", "tf32": False}),
             Case("conv", {**conv, "groups": 1, "dtype": "fp32", "direction": "train"}),
             Case("conv", {**conv, "groups": 4, "dtype": "fp32", "direction": "forward"}),
             Case("elementwise", {"op": "add", "numel": 64, "dtype": "fp32"}),
             Case("optimizer", {"kind": "adam", "impl": "foreach", "tensors": 2, "params": 64})]
    results = run_benchmarks(backend, 0.3, cases, progress=False)
    backend.close()
    by = {r["bench"]: r["values"] for r in results}
    assert math.isnan(by["memory"]["device_used_context_mib"])  # no NVML on the CPU
    assert by["allocator"]["requested_peak_bytes"] > 0
    for bench, key in (("launch", "host_s_per_op"), ("backward", "backward_host_s_per_op"),
                       ("min_kernel", "device_s_per_op"), ("matmul", "device_s"), ("conv", "device_s"),
                       ("elementwise", "device_s"), ("optimizer", "host_s")):
        assert 0 < by[bench][key] < 1, bench
    assert backend.identity()["gpu"]["name"] == "cpu"


def _gpu_recorded() -> list[Path]:
    return sorted(config.CALIBRATIONS.glob("*.json")) if config.CALIBRATIONS.is_dir() else []


@pytest.mark.skipif(not _gpu_recorded(), reason="no GPU-recorded calibration committed under data/calibrations/ yet: "
                                                "the first session lent a GPU runs `gpupred calibrate --out "
                                                "data/calibrations/<gpu>-<date>.json` and commits it")
@pytest.mark.parametrize("path", _gpu_recorded(), ids=lambda p: p.name)
def test_a_gpu_recorded_calibration_replays_and_derives_plausible_constants(path: Path, tmp_path: Path) -> None:
    cal = read_calibration(path)
    assert cal.data["backend"] == "torch-cuda" and cal.in_table()
    d = cal.derived()
    assert set(d.step) == set(STEP_MEASURED) and set(d.memory) == set(MEMORY_MEASURED), d.notes
    for name, value in d.step.items():
        lo, hi = BOUNDS.get(name, (0.0, math.inf))
        assert lo <= value <= hi, name
    assert 100 < d.memory["context_mib"] < 4096 and 1.0 <= d.memory["allocator"] < 2.0
    replayed = calibrate(tmp_path / "replayed.json", backend=FakeBackend.from_file(path), progress=False)
    assert read_calibration(replayed).data["derived"]["step"] == pytest.approx(d.step)


def test_a_failing_case_is_recorded_and_left_out_and_its_replay_fails_alike(tmp_path: Path) -> None:
    """One benchmark's failure (out of memory, an API an older torch lacks) must not cost the whole GPU run."""

    class OneFails(FakeBackend):
        def measure(self, bench: str, params: dict, seconds: float) -> dict[str, float]:
            if bench == "optimizer" and params["impl"] == "fused":
                raise RuntimeError("fused=True requires all the params to be floating point Tensors of supported devices")
            return super().measure(bench, params, seconds)

    path = calibrate(tmp_path / "cal.json", backend=OneFails(fixture_recording(gpu_name=H100)), progress=False)
    cal = read_calibration(path)
    failed = [r for r in cal.data["results"] if "error" in r]
    assert len(failed) == 8 and all(r["values"] == {} for r in failed)
    assert failed[0]["error"].startswith("RuntimeError: fused=True requires")
    assert cal.derived().step["optimizer_launch_ratio"] == pytest.approx(TRUE_STEP["optimizer_launch_ratio"])
    assert cal.derived().notes[0].startswith(f"8 of {len(default_cases())} cases failed, e.g. optimizer")
    again = read_calibration(calibrate(tmp_path / "again.json", backend=FakeBackend.from_file(path), progress=False))
    assert [r.get("error") for r in again.data["results"]] == [r.get("error") for r in cal.data["results"]]


def test_without_torch_calibrate_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import gpupred.profile.nvml as nvml
    from gpupred.calibration.torch_backend import no_gpu_message

    monkeypatch.setattr(nvml, "probe", lambda: None)
    monkeypatch.setitem(sys.modules, "torch", None)  # the analyst's install: no torch
    assert no_gpu_message() == 'torch is not installed (pip install -c constraints.txt "gpupred[torch]")'


def test_the_public_name_is_lazy_and_nothing_here_imports_torch_until_it_measures() -> None:
    import os
    import subprocess
    import sys

    import gpupred

    assert gpupred.calibrate is calibrate
    code = ("import sys, gpupred, gpupred.calibration.use, gpupred.calibration.assessment, gpupred.cli.calibrate, "
            "gpupred.traces.tracetable, gpupred.traces.compare, gpupred.traces.runner, gpupred.cli.trace; "
            "gpupred.calibrate; assert not {'torch', 'pynvml'} & set(sys.modules), sorted(sys.modules)")
    env_path = str(Path(__file__).resolve().parent.parent / "src")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": env_path})
    assert result.returncode == 0, result.stderr[-500:]
