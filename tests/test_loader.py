"""gpupred.loader: the synthetic writers, the standard loaders, the host profile (reader, interpolation, checksum),
``measure_loader`` and its error cases, ``loader bench`` and the calibration's single-core score.

Every file here is a FIXTURE the tests write into temporary folders (synthetic images, audio, tokens, arrays, loader
factories, host profiles); the only measurement read is the committed reference profile, read and never changed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.loader import synth
from gpupred.loader.hostprofile import (SCHEMA_NAME, SCHEMA_VERSION, loglog, read_host_profile, seal,
                                        write_host_profile)
from fixtures_cli import run_cli, run_cli_fresh, run_python_fresh

REPO = Path(__file__).resolve().parent.parent

# Every test here takes seconds. Those that fork DataLoader workers do it in a fresh interpreter (run_cli_fresh,
# run_python_fresh), never in this process with every earlier test's threads; a hang fails its test in 3 minutes
# with every thread's stack (pytest-timeout), not the whole run.
pytestmark = pytest.mark.timeout(180)


_cli = run_cli  # gpupred in this process: exit code, stdout, stderr


# -- writers and standard loaders

KIND_CASES = [
    ("host-tensors", {}, {}, [(4, 3, 32, 32), (4,)]),
    ("image-files", {"size": (64, 48)}, {"image_size": 32}, [(4, 3, 32, 32), (4,)]),
    ("image-files", {"size": (64, 48)}, {"image_size": 32, "transforms": "v2"}, [(4, 3, 32, 32), (4,)]),
    ("image-files", {"size": (64, 48), "fmt": "png"}, {"image_size": 32, "transforms": "v2"}, [(4, 3, 32, 32), (4,)]),
    ("image-files", {"size": (64, 48), "fmt": "png"}, {"image_size": 32}, [(4, 3, 32, 32), (4,)]),
    ("text-tokens", {"seq_len": 16}, {"seq_len": 16}, [(4, 16), (4, 16)]),
    ("audio-logmel", {"seconds": 0.5}, {}, [(4, 80, 3000)]),
    ("array-files", {"shape": (2500, 3)}, {}, [(4, 2500, 3), (4,)]),
    ("array-files", {"shape": (50, 3), "fmt": "txt"}, {}, [(4, 50, 3), (4,)]),
    ("array-files", {"shape": (50, 3), "fmt": "txt"}, {"text_parser": "legacy"}, [(4, 50, 3), (4,)]),
]


def _shapes(batch: Any) -> list[tuple[int, ...]]:
    values = batch.values() if isinstance(batch, dict) else batch
    return [tuple(v.shape) for v in values]


@pytest.mark.parametrize("kind,write,load,shapes", KIND_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(KIND_CASES)])
def test_make_loader_yields_each_kinds_batch(tmp_path: Path, kind: str, write: dict, load: dict,
                                             shapes: list[tuple[int, ...]]) -> None:
    from gpupred.loader.standard import make_loader

    root = synth.write_kind(kind, tmp_path / kind, 6, **write)
    loader = make_loader(kind, root, batch_size=4, **load)
    assert loader.num_workers == 0 and loader.pin_memory is False and loader.prefetch_factor is None
    batch = next(iter(loader))
    assert _shapes(batch) == shapes
    if kind == "text-tokens":  # padded ids where the mask is 0, real ids (never the pad id) where it is 1
        ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
        assert ((ids == 0) == (mask == 0)).all() and mask.sum(axis=1).min() >= 4


def test_make_loader_with_workers_and_torch_defaults(tmp_path: Path) -> None:
    root = synth.write_arrays(tmp_path / "arr", 8, shape=(10, 3))
    code, out, err = run_python_fresh(textwrap.dedent("""
        import multiprocessing, sys
        from gpupred.loader.standard import make_loader
        loader = make_loader("array-files", sys.argv[1], batch_size=4, num_workers=1)
        print(loader.prefetch_factor, len([b for b in loader]), len(multiprocessing.active_children()))
    """), [str(root)])
    assert code == 0 and out.split() == ["2", "2", "0"], err[-2000:]


def test_audio_features_are_whisper_feature_extractors(tmp_path: Path) -> None:
    from transformers import WhisperFeatureExtractor

    from gpupred.loader.standard import make_loader

    root = synth.write_audio(tmp_path / "aud", 1, seconds=1.0)
    wave = np.load(root / "wav_00000.npy")
    assert wave.dtype == np.float32 and wave.shape == (16_000,)
    ours = next(iter(make_loader("audio-logmel", root, batch_size=1)))["input_features"][0].numpy()
    ref = WhisperFeatureExtractor()(wave, sampling_rate=16_000, return_tensors="np")["input_features"][0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_writers_make_realistic_files(tmp_path: Path) -> None:
    from PIL import Image

    root = synth.write_images(tmp_path / "img", 2)  # default: 500x375 JPEG
    files = sorted(root.iterdir())
    assert [p.suffix for p in files] == [".jpg", ".jpg"] and Image.open(files[0]).size == (500, 375)
    assert 20_000 < files[0].stat().st_size < 200_000  # smoothed noise: a photograph's size, not noise's or a flat one
    tok = synth.write_tokens(tmp_path / "tok", 50, seq_len=64)
    lengths = np.diff(np.load(tok / "offsets.npy"))
    assert lengths.max() <= 64 and lengths.min() >= 16 and len(set(lengths.tolist())) > 5
    ht = synth.write_host_tensors(tmp_path / "ht", 3)
    assert np.load(ht / "data.npy").dtype == np.uint8 and np.load(ht / "data.npy").shape == (3, 32, 32, 3)
    with pytest.raises(GpupredError, match="loader kind 'video'"):
        synth.write_kind("video", tmp_path / "v", 1)


def test_make_loader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    from gpupred.loader.standard import make_loader

    with pytest.raises(GpupredError, match="no such folder"):
        make_loader("array-files", tmp_path / "absent", 2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GpupredError, match="no img_\\* files"):
        make_loader("image-files", tmp_path / "empty", 2)
    with pytest.raises(GpupredError, match="expected 'v1' or 'v2'"):
        make_loader("image-files", synth.write_images(tmp_path / "i", 1, size=(16, 16)), 2, transforms="v3")


# -- the host profile

def _fixture_profile(kinds: dict[str, Any] | None = None, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """A FIXTURE host profile's content (made-up figures, never a measurement)."""
    kinds = kinds if kinds is not None else {
        "image-files": {"jpeg-v1": {"scale_unit": "px", "params": {}, "points": [
            {"scale": 1e5, "per_sample_s": 0.002}, {"scale": 4e5, "per_sample_s": 0.006}]}},
        "host-tensors": {"default": {"scale_unit": "sample", "params": {}, "points": [
            {"scale": 1.0, "per_sample_s": 5e-5}]}}}
    return {"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "created_at": "2026-01-01T00:00:00Z",
            "source": "bench", "wall_s": 1.0, "seconds_budget": 1.0,
            "host": {"cpu": "FIXTURE CPU", "logical_cores": 8, "physical_cores": 4, "affinity_cores": 6,
                     "platform": "Linux"},
            "software": {"python": "3"}, "single_core": {"score": 2.0, "python_s": 0.03, "numpy_s": 0.02,
                                                         "workload_version": 1},
            "torch_threads": 1, "kinds": kinds, "ipc": {"per_batch_s": 1e-4, "per_byte_s": 1e-10, "points": []},
            "copy": {"gbs": 5.0, "kind": "pageable", "bytes": 1}, "measured": measured}


def test_the_reader_gives_every_field_and_interpolates_log_log(tmp_path: Path) -> None:
    prof = read_host_profile(write_host_profile(_fixture_profile(), tmp_path / "p.json"))
    assert (prof.cpu, prof.cores, prof.logical_cores, prof.physical_cores) == ("FIXTURE CPU", 6, 8, 4)
    assert (prof.single_core_score, prof.ipc_per_batch_s, prof.ipc_per_byte_s) == (2.0, 1e-4, 1e-10)
    assert (prof.copy_gbs, prof.copy_kind, prof.measured) == (5.0, "pageable", None)
    assert prof.variants("image-files") == ["jpeg-v1"]
    assert prof.per_sample_s("image-files", 1e5) == pytest.approx(0.002)
    assert prof.per_sample_s("image-files", 2e5) == pytest.approx(math.sqrt(0.002 * 0.006))  # log-log midpoint
    assert prof.per_sample_s("host-tensors") == pytest.approx(5e-5)
    # moved to a host half as fast per core: twice the time
    assert prof.per_sample_s("image-files", 1e5, single_core_score=1.0) == pytest.approx(0.004)
    with pytest.raises(GpupredError, match="no measurement of loader kind 'image-files' variant 'png-v2'"):
        prof.per_sample_s("image-files", 1e5, variant="png-v2")
    with pytest.raises(GpupredError, match="holds no measured loader"):
        prof.per_sample_s("measured")


def test_loglog_extrapolation_keeps_the_slope_within_0_and_1() -> None:
    pts = [(1.0, 1.0), (10.0, 10.0), (100.0, 50.0)]
    assert loglog(pts, 10.0) == pytest.approx(10.0)
    assert loglog(pts, 1000.0) == pytest.approx(50.0 * 10 ** math.log10(5.0))  # the end segment's slope, log10(5)
    assert loglog([(1.0, 1.0), (2.0, 8.0)], 4.0) == pytest.approx(16.0)  # slope 3 measured, 1 at most outside
    assert loglog([(1.0, 4.0), (2.0, 2.0)], 0.5) == pytest.approx(4.0)  # a falling cost stays flat outside
    assert loglog([(3.0, 7.0)], 1e6) == pytest.approx(7.0)


def test_a_hand_edited_or_corrupt_profile_is_refused_in_one_line(tmp_path: Path) -> None:
    path = write_host_profile(_fixture_profile(), tmp_path / "p.json")
    data = json.loads(path.read_text())
    data["kinds"]["image-files"]["jpeg-v1"]["points"][0]["per_sample_s"] = 0.001
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    with pytest.raises(GpupredError, match="checksum does not match") as err:
        read_host_profile(edited)
    assert "\n" not in str(err.value) and str(edited) in str(err.value)
    del data["ipc"]
    (tmp_path / "schema.json").write_text(json.dumps(seal(data)))
    with pytest.raises(GpupredError, match="not a gpupred host profile .*'ipc' is a required property"):
        read_host_profile(tmp_path / "schema.json")
    (tmp_path / "trunc.json").write_text(path.read_text()[:100])
    with pytest.raises(GpupredError, match="not valid JSON"):
        read_host_profile(tmp_path / "trunc.json")
    (tmp_path / "v9.json").write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 9}))
    with pytest.raises(GpupredError, match="schema version 9, this gpupred reads 1"):
        read_host_profile(tmp_path / "v9.json")
    with pytest.raises(GpupredError, match="no host profile there"):
        read_host_profile(tmp_path / "absent.json")


def test_the_committed_reference_profile_reads_without_torch() -> None:
    code = textwrap.dedent("""
        import sys
        import gpupred, gpupred.loader, gpupred.loader.hostprofile, gpupred.loader.speed, gpupred.loader.synth
        import gpupred.loader.standard, gpupred.loader.measure, gpupred.loader.hostbench
        from gpupred.loader.hostprofile import default_host_profile
        p = default_host_profile()
        kinds = {k: p.variants(k) for k in p.data["kinds"]}
        print(sorted(kinds), p.data["source"], p.copy_kind, 'torch' in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")}).stdout.split()
    assert out == ["['array-files',", "'audio-logmel',", "'host-tensors',", "'image-files',", "'text-tokens']",
                   "bench", "pageable", "False"]
    prof = read_host_profile(config.HOST_PROFILE)
    for kind in prof.data["kinds"]:
        for variant in prof.variants(kind):
            assert len(prof.points(kind, variant)) >= (1 if kind == "host-tensors" else 2), (kind, variant)


# -- measure_loader and its error cases

FACTORIES = '''
import time
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

def good():
    return DataLoader(TensorDataset(torch.randn(40, 8), torch.arange(40)), batch_size=4)

class Hang(Dataset):
    def __len__(self):
        return 10
    def __getitem__(self, i):
        time.sleep(600)

def hang():
    return DataLoader(Hang(), batch_size=2)

class Odd(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return object()

def odd():
    return DataLoader(Odd(), batch_size=2, collate_fn=lambda x: x)

def empty():
    return DataLoader(TensorDataset(torch.randn(0, 3)), batch_size=2)

def raises():
    raise ValueError("no data here")

def not_a_loader():
    return [1, 2]

class Fails(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        raise KeyError("sample 3 is missing")

def fails():
    return DataLoader(Fails(), batch_size=2)
'''


@pytest.fixture()
def factories(tmp_path: Path) -> Path:
    """A FIXTURE module of loader factories, good and bad."""
    path = tmp_path / "fixture_factories.py"
    path.write_text(FACTORIES)
    (tmp_path / "broken_module.py").write_text("import no_such_package_anywhere\n")
    return path


def test_measure_loader_times_each_worker_count(tmp_path: Path) -> None:
    code, out, err = run_python_fresh(textwrap.dedent("""
        import multiprocessing, sys
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        import gpupred
        from gpupred.loader.hostprofile import HostProfile
        loader = DataLoader(TensorDataset(torch.randn(40, 8), torch.arange(40)), batch_size=4)
        prof = gpupred.measure_loader(loader, batches=3, workers=(0, 1), out=sys.argv[1])
        print(isinstance(prof, HostProfile), prof.path == __import__("pathlib").Path(sys.argv[1]),
              len(multiprocessing.active_children()))
    """), [str(tmp_path / "m.json")])
    assert code == 0 and out.split() == ["True", "True", "0"], err[-2000:]
    prof = read_host_profile(tmp_path / "m.json")
    m = prof.measured
    assert set(m["workers"]) == {"0", "1"} and m["batch_size"] == 4 and m["batch_bytes"] == 4 * 8 * 4 + 4 * 8
    for entry in m["workers"].values():
        assert entry["batches"] == 3 and entry["per_sample_s"] == pytest.approx(entry["per_batch_s"] / 4)
    assert prof.per_sample_s("measured") == m["workers"]["0"]["per_sample_s"] and prof.data["source"] == "measure"


def test_measure_cli_writes_the_profile(factories: Path, tmp_path: Path) -> None:
    out = tmp_path / "good.json"
    code, text, err, alive = run_cli_fresh(["loader", "measure", f"{factories}:good", "--batches", "2",
                                            "--workers", "0,2", "--out", str(out)])
    assert code == 0 and alive == 0, err
    assert f"wrote {out}" in text and "at 2 workers" in text and "loader measure took" in text
    assert set(read_host_profile(out).measured["workers"]) == {"0", "2"}


BAD = [
    ("broken_module.py:x", "cannot import broken_module.py (ModuleNotFoundError"),
    ("no_such_module_here:x", "cannot import no_such_module_here"),
    ("{f}:absent", "has no callable 'absent'"),
    ("{f}:raises", "the factory raised ValueError: no data here"),
    ("{f}:not_a_loader", "gave a list, not a torch.utils.data.DataLoader"),
    ("{f}:empty", "the loader yielded no batches"),
    ("{f}:odd", "a batch of no known type (object)"),
    ("{f}:fails --workers 1", "batch 0 at 1 workers raised KeyError"),
    ("{f}:hang --workers 0", "batch 0 at 0 workers took longer than the 1 s timeout"),
    ("{f}:hang --workers 1", "batch 0 at 1 workers took longer than the 1 s timeout"),
    ("{f}", "expected module:factory"),
]


@pytest.mark.parametrize("target,message", BAD, ids=[b[0].split()[0].replace("{f}", "f") + str(i)
                                                     for i, b in enumerate(BAD)])
def test_bad_loaders_are_one_line_exit_2_and_leave_nothing_behind(
        factories: Path, tmp_path: Path, target: str, message: str) -> None:
    before = set(tmp_path.iterdir())
    args = target.replace("{f}", str(factories)).split()
    code, out, err, alive = run_cli_fresh(["loader", "measure", *args, "--batches", "2", "--timeout", "1"],
                                          cwd=tmp_path, env={config.HOST_PROFILE_DIR_ENV: str(tmp_path / "hosts")})
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert alive == 0
    assert set(tmp_path.iterdir()) - before <= {tmp_path / "__pycache__"}  # no profile, no temporary file


# -- the bench and the calibration's score

def test_bench_writes_a_profile_with_every_kind(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    before = set(scratch.glob("gpupred-loader-bench-*"))  # another run's, killed mid-bench: not this one's
    code, text, err, alive = run_cli_fresh(["loader", "bench", "--seconds", "0.3", "--out", str(out)])  # forks (IPC)
    assert code == 0 and alive == 0, err
    prof = read_host_profile(out)
    assert set(prof.data["kinds"]) == {"host-tensors", "image-files", "text-tokens", "audio-logmel", "array-files"}
    assert prof.variants("image-files") == ["jpeg-v1", "jpeg-v2", "png-v1", "png-v2"]
    assert all(len(prof.points("image-files", v)) == 2 for v in prof.variants("image-files"))
    assert prof.variants("array-files") == ["default", "txt", "txt-legacy"]
    assert all(len(prof.points("array-files", v)) == 2 for v in prof.variants("array-files"))
    assert prof.copy_kind in ("pinned", "pageable") and prof.copy_gbs > 0 and prof.single_core_score > 0
    assert prof.ipc_per_batch_s is not None and prof.ipc_per_byte_s is not None
    assert text.startswith(f"wrote {out}") and "loader bench took" in text and "ipc:" in text
    leftovers = set(scratch.glob("gpupred-loader-bench-*")) - before
    assert leftovers == set()


def test_calibrate_records_the_gpu_hosts_single_core_score(tmp_path: Path) -> None:
    from fixtures_calibration import fixture_recording

    from gpupred.calibration.file import read_calibration
    from gpupred.calibration.replay import FakeBackend
    from gpupred.calibration.run import calibrate

    class Live(FakeBackend):  # stands in for a real backend: it replays nothing, so the host's score is measured
        def __init__(self, recording: dict[str, Any]) -> None:
            super().__init__(recording, "FIXTURE")
            self.replayed_from = ""

    rec = fixture_recording()
    live = read_calibration(calibrate(tmp_path / "live.json", 1.0, Live(rec), progress=False))
    assert live.single_core_score is not None and live.single_core_score > 0
    replayed = read_calibration(calibrate(tmp_path / "replay.json", 1.0, FakeBackend(rec, "FIXTURE"), progress=False))
    assert replayed.single_core_score is None  # an old recording's host, kept as recorded


# -- the main-process watchdog and an outer interval timer (pytest-timeout's, a batch job's)

def test_the_watchdog_fires_and_keeps_an_outer_timer_armed() -> None:
    import signal
    import time

    from gpupred.loader.measure import LoaderTimeout, watchdog

    calls: list[float] = []
    saved = signal.getitimer(signal.ITIMER_REAL)[0], time.monotonic()  # pytest-timeout's own, given back at the end
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: calls.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)  # an outer deadline far away: kept through the watchdog
        with watchdog(5.0):
            pass
        assert 29.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30.0 and not calls
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # an outer deadline first: its handler runs, then ours fires
        start = time.monotonic()
        with pytest.raises(LoaderTimeout):
            with watchdog(0.3):
                time.sleep(2.0)
        assert len(calls) == 1 and calls[0] - start < 0.3 <= time.monotonic() - start < 1.5
        with pytest.raises(LoaderTimeout):  # no outer timer: ours alone, and nothing left armed after
            with watchdog(0.05):
                time.sleep(2.0)
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0 and len(calls) == 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if saved[0]:
            signal.setitimer(signal.ITIMER_REAL, max(saved[0] - (time.monotonic() - saved[1]), 1e-3))
