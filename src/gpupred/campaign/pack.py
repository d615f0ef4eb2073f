"""The campaign's tarball: what one call wrote, packed with paths relative to the repository root, and unpacked here
under data/raw and data/calibrations without overwriting anything."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gpupred.errors import GpupredError
from gpupred.files import TMP_PREFIX, atomic_write, atomic_write_bytes

UNPACK_UNDER = ("data/raw/", "data/calibrations/")  # the only places a tarball may put files
RETURN_LIMIT_MIB = 16  # the device tool brings back files up to this size


def snapshot(folders: list[Path]) -> set[Path]:
    """Every finished file under ``folders``, resolved (temporary files of a writer in flight left out)."""
    return {p.resolve() for f in folders if f.is_dir() for p in f.rglob("*")
            if p.is_file() and not p.name.startswith(TMP_PREFIX)}


def pack(files: list[Path], root: Path, tarball: Path) -> Path:
    """Write ``files`` (each under ``root``) into the gzip tarball ``tarball`` atomically, named relative to root."""
    root = Path(root).resolve()

    def write(fh: object) -> None:
        with tarfile.open(fileobj=fh, mode="w:gz") as tar:  # type: ignore[call-overload]
            for path in sorted(Path(p).resolve() for p in files):
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)

    atomic_write(Path(tarball), write)
    return Path(tarball)


@dataclass
class Unpacked:
    """What unpacking did: files added, files already there with the same bytes, files that differ (left alone)."""

    added: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line for the terminal."""
        return (f"{len(self.added)} files added, {len(self.same)} already there"
                + (f", {len(self.conflicts)} differ and were left as they are (first: {self.conflicts[0]})"
                   if self.conflicts else ""))


def _member_path(member: tarfile.TarInfo, tarball: Path) -> str:
    """The member's path, if it is a plain file under :data:`UNPACK_UNDER`; else a one-line GpupredError."""
    name = str(PurePosixPath(member.name))
    if not member.isfile() or name.startswith("/") or ".." in PurePosixPath(name).parts:
        raise GpupredError(f"{tarball}: member {member.name!r} is not a plain relative file; nothing was unpacked")
    if not name.startswith(UNPACK_UNDER):
        raise GpupredError(f"{tarball}: member {name!r} is outside {' and '.join(UNPACK_UNDER)} (a dry run's output "
                           "is never data); nothing was unpacked")
    return name


def unpack(tarball: Path, root: Path) -> Unpacked:
    """Put the tarball's files under ``root`` (each written atomically); an existing file is never overwritten."""
    tarball, done = Path(tarball), Unpacked()
    if not tarball.is_file():
        raise GpupredError(f"{tarball}: no such tarball")
    try:
        with tarfile.open(tarball, mode="r:*") as tar:
            members = [(m, _member_path(m, tarball)) for m in tar.getmembers()]
            contents = {name: tar.extractfile(m).read() for m, name in members}  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, EOFError) as err:
        raise GpupredError(f"{tarball}: not a readable tarball ({err})") from None
    for name, data in contents.items():
        dest = Path(root) / name
        if dest.exists():
            (done.same if dest.read_bytes() == data else done.conflicts).append(name)
            continue
        atomic_write_bytes(dest, data)
        done.added.append(name)
    return done


def member_names(tarball: Path) -> list[str]:
    """The tarball's member names, sorted (what ``tar -tzf`` lists)."""
    with tarfile.open(tarball, mode="r:*") as tar:
        return sorted(m.name for m in tar.getmembers())


def read_member(tarball: Path, name: str) -> bytes:
    """One member's bytes."""
    with tarfile.open(tarball, mode="r:*") as tar:
        fh = tar.extractfile(name)
        if fh is None:
            raise GpupredError(f"{tarball}: {name} is not a file")
        return fh.read()
