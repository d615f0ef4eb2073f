"""What a lent GPU's image lacks, made ready here to travel with the working tree (``gpupred campaign carry``).

The GPU machine has PyTorch, torchvision, nvidia-ml-py, pandas, pyarrow, peft and transformers, and no network. What
the campaign also imports there (``NEEDED``: jsonschema, which seals every file it writes, and platformdirs) and what
stage 3 needs (bitsandbytes) are fetched here as wheels for that machine (CPython 3.12, manylinux x86-64) and unpacked
into one folder, ``.carry/site``, that the device call names in ``carry`` and puts first on ``PYTHONPATH``: nothing is
installed there. bitsandbytes' wheel holds one native library per CUDA version (129 MB unpacked, over the 64 MiB a
call may carry); only the CUDA 13 ones the image's torch loads are kept.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from gpupred.errors import GpupredError

CARRY_DIR = ".carry"  # beside the repository root; ignored through .git/info/exclude, never committed
NEEDED: tuple[str, ...] = ("jsonschema", "platformdirs")  # imported by the campaign's own writers there
WHEELS: tuple[str, ...] = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "platformdirs",
                           "bitsandbytes")
PLATFORMS: tuple[str, ...] = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64",
                              "manylinux_2_28_x86_64")
DEVICE_PYTHON = "3.12"  # the GPU image's CPython
CUDA_KEEP = re.compile(r"libbitsandbytes_(cuda13\d|cpu)\.")  # the image's torch is built for CUDA 13


def missing_needed() -> list[str]:
    """The ``NEEDED`` modules that do not import here ([] when the campaign can write its files)."""
    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def needed_line(missing: list[str]) -> str:
    """One line saying what is missing and how to bring it."""
    return (f"{', '.join(missing)} not installed on this machine: run `gpupred campaign carry` where pip works, name "
            f"{CARRY_DIR} in the call's carry and put {CARRY_DIR}/site first on PYTHONPATH (docs/remote-sweeps.md)")


def pip_download_args(names: tuple[str, ...], dest: Path) -> list[str]:
    """``pip download`` of binary wheels for the GPU machine, without their dependencies (each is named)."""
    args = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version",
            DEVICE_PYTHON, "--implementation", "cp", "--dest", str(dest)]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return [*args, *names]


def unpack_wheels(wheels: list[Path], site: Path) -> int:
    """Unpack ``wheels`` into ``site``, leaving out bitsandbytes' libraries for other CUDA versions than 13; the bytes
    written."""
    written = 0
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = Path(info.filename).name
                if name.startswith("libbitsandbytes_") and not CUDA_KEEP.match(name):
                    continue
                zf.extract(info, site)
                written += info.file_size
    return written


def exclude_in_git(root: Path, folder: str = CARRY_DIR) -> None:
    """Add ``/<folder>/`` to the repository's ``.git/info/exclude`` (once), so that it travels only when carried."""
    git = root / ".git"
    if not git.is_dir():
        return
    exclude = git / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    if f"/{folder}/" not in lines:
        exclude.write_text("\n".join([*lines, f"/{folder}/"]) + "\n")


def prepare(root: Path, names: tuple[str, ...] = WHEELS, run=subprocess.run) -> tuple[Path, int]:
    """Fetch ``names`` for the GPU machine and unpack them into ``root/.carry/site`` (replacing what was there);
    (the site folder, its bytes). ``run`` is :func:`subprocess.run` (a test passes a fake)."""
    site = root / CARRY_DIR / "site"
    with tempfile.TemporaryDirectory(prefix="gpupred-carry-") as tmp:
        done = run(pip_download_args(names, Path(tmp)), capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr or done.stdout or "").strip().splitlines()
            raise GpupredError(f"pip download of {', '.join(names)} failed: {last[-1] if last else 'no output'}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) < len(names):
            raise GpupredError(f"pip download gave {len(wheels)} wheels for {len(names)} packages ({tmp})")
        if site.exists():
            shutil.rmtree(site)
        site.mkdir(parents=True)
        size = unpack_wheels(wheels, site)
    exclude_in_git(root)
    return site, size
