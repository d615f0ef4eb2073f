"""``gpupred campaign carry`` and the smoke test's check of what the GPU image lacks, on fixture wheels built here
(tiny zip files that say they are fixtures; pip never runs)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from gpupred.campaign import carry
from gpupred.errors import GpupredError


def _fixture_wheel(folder: Path, name: str, files: dict[str, bytes]) -> Path:
    path = folder / f"{name}-0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return path


BNB = {"bitsandbytes/__init__.py": b"# fixture\n", "bitsandbytes/libbitsandbytes_cuda118.so": b"x" * 1000,
       "bitsandbytes/libbitsandbytes_cuda128.so": b"x" * 1000, "bitsandbytes/libbitsandbytes_cuda130.so": b"y" * 10,
       "bitsandbytes/libbitsandbytes_cuda132.so": b"y" * 10, "bitsandbytes/libbitsandbytes_cpu.so": b"z",
       "bitsandbytes/libbitsandbytes_rocm72.so": b"x" * 1000}


def test_only_the_cuda_13_libraries_of_bitsandbytes_are_unpacked(tmp_path: Path) -> None:
    wheels = [_fixture_wheel(tmp_path, "bitsandbytes", BNB),
              _fixture_wheel(tmp_path, "jsonschema", {"jsonschema/__init__.py": b"# fixture\n"})]
    size = carry.unpack_wheels(wheels, tmp_path / "site")
    libs = sorted(p.name for p in (tmp_path / "site" / "bitsandbytes").glob("*.so"))
    assert libs == ["libbitsandbytes_cpu.so", "libbitsandbytes_cuda130.so", "libbitsandbytes_cuda132.so"]
    assert (tmp_path / "site" / "jsonschema" / "__init__.py").is_file()
    assert size == 10 + 10 + 1 + 2 * len(b"# fixture\n")


def test_pip_is_asked_for_binary_wheels_of_the_gpu_machines_python_without_dependencies(tmp_path: Path) -> None:
    args = carry.pip_download_args(("jsonschema", "bitsandbytes"), tmp_path)
    assert args[1:4] == ["-m", "pip", "download"] and "--no-deps" in args and "--only-binary=:all:" in args
    assert args[args.index("--python-version") + 1] == "3.12" and args[-2:] == ["jsonschema", "bitsandbytes"]
    assert args.count("--platform") == len(carry.PLATFORMS) and args[args.index("--dest") + 1] == str(tmp_path)


def test_prepare_unpacks_what_pip_fetched_and_excludes_the_folder_from_git_once(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()

    def fake_pip(args: list[str], **_: object) -> subprocess.CompletedProcess:
        dest = Path(args[args.index("--dest") + 1])
        _fixture_wheel(dest, "bitsandbytes", BNB)
        _fixture_wheel(dest, "platformdirs", {"platformdirs/__init__.py": b"# fixture\n"})
        return subprocess.CompletedProcess(args, 0, "", "")

    for _ in range(2):  # a second run replaces the folder and adds no second exclude line
        site, size = carry.prepare(tmp_path, ("bitsandbytes", "platformdirs"), run=fake_pip)
    assert site == tmp_path / ".carry" / "site" and (site / "platformdirs" / "__init__.py").is_file()
    assert size < 100 and not (site / "bitsandbytes" / "libbitsandbytes_cuda118.so").exists()
    assert (tmp_path / ".git" / "info" / "exclude").read_text().splitlines().count("/.carry/") == 1


def test_a_failed_download_is_one_line_naming_the_packages(tmp_path: Path) -> None:
    def failing(args: list[str], **_: object) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(args, 1, "", "WARNING: x\nERROR: No matching distribution found for rpds-py")

    with pytest.raises(GpupredError, match="pip download of rpds-py failed: ERROR: No matching distribution"):
        carry.prepare(tmp_path, ("rpds-py",), run=failing)
    assert not (tmp_path / ".carry").exists()


def test_the_smoke_test_stops_at_once_when_the_campaign_could_not_write_its_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first lent H200 ran the pipelines stage, then lost its calibration and host profile at their writing:
    jsonschema is not in the GPU image. The smoke test now says so before any unit runs."""
    from gpupred.campaign.executors import DeviceExecutor

    monkeypatch.setattr(carry, "NEEDED", ("jsonschema", "gpupred_no_such_module_fixture"))
    why = DeviceExecutor().smoke(deadline=0.0)
    assert why.startswith("gpupred_no_such_module_fixture not installed on this machine: run `gpupred campaign carry`")
    assert carry.missing_needed() == ["gpupred_no_such_module_fixture"]
