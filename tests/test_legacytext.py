"""``np.loadtxt`` as numpy before 1.23 parsed text (gpupred.loader.legacytext) and the ``txt-legacy`` array format
that uses it (fixtures: text files written here; a host profile written here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpupred.errors import GpupredError
from gpupred.loader.legacytext import loadtxt_legacy
from gpupred.setups import InputPipeline
from gpupred.step.physics.inputfeed import ProfileCosts, loader_times, variant_of


@pytest.mark.parametrize("shape,fmt", [((40, 3), "%.5f"), ((40,), "%d"), ((1, 6), "%.3e"), ((3, 2), "%.17g")])
def test_it_reads_what_np_loadtxt_reads(tmp_path: Path, shape: tuple[int, ...], fmt: str) -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 9, size=shape) if fmt == "%d" else rng.standard_normal(shape)
    path = tmp_path / "fixture.txt"
    np.savetxt(path, values, fmt=fmt)
    got, want = loadtxt_legacy(path), np.loadtxt(path)
    assert got.dtype == np.float64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_comments_blank_lines_and_hexadecimal_values(tmp_path: Path) -> None:
    path = tmp_path / "fixture.pts"
    path.write_text("# header\n\n1.5 2.5 # trailing\n0x10 -3\n\n")
    np.testing.assert_array_equal(loadtxt_legacy(path), np.array([[1.5, 2.5], [16.0, -3.0]]))
    (tmp_path / "empty.pts").write_text("# nothing\n\n")
    assert loadtxt_legacy(tmp_path / "empty.pts").size == 0


def test_a_ragged_file_is_refused_naming_it_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "ragged.pts"
    path.write_text("1 2 3\n4 5 6\n7 8\n")
    with pytest.raises(ValueError, match=r"ragged\.pts: wrong number of columns at line 3"):
        loadtxt_legacy(path)


def test_the_legacy_array_format_reads_its_own_profile_variant() -> None:
    legacy = InputPipeline("array-files", num_workers=2, array_bytes=45_000, array_format="txt-legacy")
    assert variant_of(legacy) == "txt-legacy"
    assert variant_of(InputPipeline("array-files", array_format="npy")) is None

    class Fixture:  # fixture host costs: 1 ms per sample of txt, 20 ms of txt-legacy, nothing else
        ipc_per_batch_s, ipc_per_byte_s, copy_gbs, single_core_score = 0.0, 0.0, 1e9, 1.0

        def per_sample_s(self, kind: str, scale: float, variant: str | None = None) -> float:
            return {"txt": 1e-3, "txt-legacy": 20e-3}[variant]

    fast = loader_times(InputPipeline("array-files", num_workers=2, array_bytes=45_000, array_format="txt"), 32,
                        32 * 30_000, Fixture())
    slow = loader_times(legacy, 32, 32 * 30_000, Fixture())
    assert slow.produce_s == pytest.approx(20 * fast.produce_s, rel=1e-6)


def test_a_profile_measured_before_the_legacy_variant_is_refused_in_one_line() -> None:
    from gpupred.loader.hostprofile import read_host_profile

    path = Path(__file__).resolve().parents[1] / "data/raw/h200/2026-12-pipelines/host-profile-vm.json"
    profile = read_host_profile(path)  # measured on a lent H200's host before the bench had txt-legacy
    costs = ProfileCosts(profile, profile)
    assert costs.per_sample_s("array-files", 45_000.0, "txt") > 0
    with pytest.raises(GpupredError) as err:
        costs.per_sample_s("array-files", 45_000.0, "txt-legacy")
    assert "host-profile-vm.json" in str(err.value) and "txt-legacy" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unknown_text_parser_is_refused(tmp_path: Path) -> None:
    from gpupred.loader.standard import ArrayFileSet

    with pytest.raises(GpupredError, match="text parser 'pandas'"):
        ArrayFileSet([tmp_path / "a.txt"], text_parser="pandas")
