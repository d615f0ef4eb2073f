"""Writing a file whole or not at all: a temporary file in the same folder, flushed and fsync'd, renamed over
the target, then the folder fsync'd. A crash at any instant leaves the old file or the new one, never half. Reading a
small file many times: :class:`FileCache` keeps what was read while the file is unchanged. Looking at many files many
times: inside :func:`one_look`, each file is stat'ed once, and what is derived from the files alone is worked out once
(:func:`within_look`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

TMP_PREFIX = ".tmp-"  # temporary files start with this; a reader may remove strays left by a crash


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename inside it) to disk, where the filesystem allows."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - some filesystems refuse
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[Any], object], mode: int = 0o644) -> None:
    """Write ``path`` atomically; ``write(fh)`` fills the temporary file (a binary file object)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # mkstemp makes it private; the file is as readable as any other
        os.replace(tmp, path)
        _forget(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    atomic_write(path, lambda fh: fh.write(data))


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically unless the file already holds exactly these bytes; whether it wrote.

    Reports re-made from unchanged inputs keep their files (and git sees nothing to commit).
    """
    path = Path(path)
    if path.is_file() and path.read_bytes() == data:
        return False
    atomic_write_bytes(path, data)
    return True


def sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_json_object(path: Path, remedy: str, shown: str | None = None) -> dict[str, Any]:
    """The JSON object in ``path``; a one-line GpupredError naming the file (as ``shown``) and ``remedy`` if the file
    is not JSON or holds something other than an object."""
    from gpupred.errors import GpupredError

    shown = shown or str(path)
    try:
        value = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise GpupredError(f"{shown}: not valid JSON ({err}); {remedy}") from None
    if not isinstance(value, dict):
        raise GpupredError(f"{shown}: not a JSON object; {remedy}")
    return value


def canonical_sha256(data: dict[str, Any]) -> str:
    """The checksum of a sealed file's content: sha256 of its canonical JSON without the ``sha256`` field."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


_VALIDATORS: dict[str, Any] = {}  # schema name -> its checked jsonschema validator


def check_sealed(data: Any, shown: str, schema: dict[str, Any], kind: str, remedy: str) -> None:
    """Raise a one-line GpupredError naming ``shown`` unless ``data`` follows ``schema`` (whose ``schema`` and
    ``schema_version`` properties are constants: a file of the same format but another version is named so) and its
    ``sha256`` matches its content: a file gpupred wrote and nobody edited. ``kind`` names the format for a reader."""
    import jsonschema

    from gpupred.errors import GpupredError

    name, version = schema["properties"]["schema"]["const"], schema["properties"]["schema_version"]["const"]
    if isinstance(data, dict) and data.get("schema") == name and data.get("schema_version") != version:
        raise GpupredError(f"{shown}: {kind} schema version {data.get('schema_version')!r}, this gpupred reads "
                           f"{version}; {remedy}")
    if name not in _VALIDATORS:
        jsonschema.Draft202012Validator.check_schema(schema)
        _VALIDATORS[name] = jsonschema.Draft202012Validator(schema)
    err = jsonschema.exceptions.best_match(_VALIDATORS[name].iter_errors(data))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "top level"
        raise GpupredError(f"{shown}: not a gpupred {kind} ({where}: {err.message[:160]}); {remedy}") from None
    try:
        digest = canonical_sha256(data)
    except ValueError:  # NaN or infinity: never written by gpupred
        digest = ""
    if digest != data["sha256"]:
        raise GpupredError(f"{shown}: checksum does not match its content (edited or corrupted); refusing it; {remedy}")


def read_sealed(path: str | Path, schema: dict[str, Any], kind: str, remedy: str, missing: str) -> dict[str, Any]:
    """The content of a sealed JSON file (a calibration, a host profile), checked by :func:`check_sealed`; a one-line
    GpupredError naming the file otherwise (``missing``: what to say after its name when there is none)."""
    from gpupred.errors import GpupredError

    path = Path(path)
    if not path.is_file():
        raise GpupredError(f"{path}: {missing}")
    data = read_json_object(path, remedy)
    check_sealed(data, str(path), schema, kind, remedy)
    return data


Version = tuple[str, int, int, int]
T = TypeVar("T")
_LOOK: ContextVar["dict[str, tuple[Version, bool] | None] | None"] = ContextVar("gpupred_files_look", default=None)
_DERIVED: ContextVar["dict[Any, Any] | None"] = ContextVar("gpupred_files_derived", default=None)  # within_look's


@contextmanager
def one_look() -> Iterator[None]:
    """Inside, :func:`file_version` and :func:`is_file` stat each path once and answer from what they saw (a missing
    file stays missing): one call that reads the same files for each of many jobs (a scheduler's queue,
    ``predict_many``) takes one look at the file system. A file this process writes meanwhile (:func:`atomic_write`,
    as an export's cache is) is looked at again. Nested looks share the outermost one."""
    if _LOOK.get() is not None:
        yield
        return
    token, derived = _LOOK.set({}), _DERIVED.set({})
    try:
        yield
    finally:
        _DERIVED.reset(derived)
        _LOOK.reset(token)


def within_look(key: Any, make: Callable[[], T]) -> T:
    """``make()``, kept under ``key`` for the rest of the open :func:`one_look` (computed each time outside one): for
    what is derived from files alone as the look sees them (whether each exists, a cached reading of its version),
    which every job of a queue would otherwise work out again. A file this process writes meanwhile drops every kept
    value, as it is looked at again."""
    kept = _DERIVED.get()
    if kept is None:
        return make()
    if key not in kept:
        kept[key] = make()
    return kept[key]


def _looked(path: str | os.PathLike[str]) -> tuple[Version, bool]:
    """(:func:`file_version`, whether a regular file) of a path, stat'ed once per look; an OSError where it cannot
    be stat'ed."""
    seen = _LOOK.get()
    key = os.fspath(path)
    if seen is None or key not in seen:
        try:
            st = os.stat(key)
        except OSError:
            if seen is not None:
                seen[key] = None
            raise
        hit: tuple[Version, bool] | None = ((os.path.abspath(key), st.st_mtime_ns, st.st_size, st.st_ino),
                                            stat.S_ISREG(st.st_mode))
        if seen is not None:
            seen[key] = hit
    else:
        hit = seen[key]
        if hit is None:
            raise FileNotFoundError(2, "No such file or directory (as first looked at)", key)
    return hit


def _forget(path: Path) -> None:
    """Drop a path this process has just written from the open look (every spelling of it), and every value derived
    within the look (:func:`within_look`)."""
    derived = _DERIVED.get()
    if derived:
        derived.clear()
    seen = _LOOK.get()
    if seen:
        target = os.path.abspath(path)
        for key in [k for k in seen if os.path.abspath(k) == target]:
            del seen[key]


def file_version(path: str | os.PathLike[str]) -> Version:
    """A file's version in this process: (absolute path, modification time in ns, size, inode); a rewritten file
    gets a new one (inside :func:`one_look`, the version it had when first asked). An OSError where it cannot be
    stat'ed."""
    return _looked(path)[0]


def is_file(path: str | os.PathLike[str]) -> bool:
    """``Path(path).is_file()``, answered from :func:`one_look`'s look where one is open."""
    try:
        return _looked(path)[1]
    except (OSError, ValueError):
        return False


class FileCache(Generic[T]):
    """What was read from files, kept while each is unchanged (the same :func:`file_version`), at
    most ``entries`` file versions, the oldest going first: for small files every job asks for (the graph store's
    index, a host profile), which a long-lived scheduler should neither reread nor keep every version of."""

    def __init__(self, entries: int = 16) -> None:
        self.entries = entries
        self.kept: dict[tuple[str, int, int, int], T] = {}

    def read(self, path: Path, parse: Callable[[Path], T]) -> T:
        """``parse(path)``, or what it gave for this version of the file (an OSError where the file cannot be
        stat'ed)."""
        key = file_version(path)
        if key not in self.kept:
            value = parse(path)  # a parse that raises keeps nothing
            if len(self.kept) >= self.entries:
                self.kept.pop(next(iter(self.kept)))
            self.kept[key] = value
        return self.kept[key]


def project_path(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str:
    """``path`` as a record or a page shows it: relative to the project ``root`` when it lies inside; an absolute
    path recorded in another checkout of the project (a device machine's) from its ``plans``, ``data`` or
    ``notebooks`` folder on; else as given."""
    p = Path(path)
    if not p.is_absolute():
        return str(path)
    try:
        return p.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        pass
    parts = p.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] in ("plans", "data", "notebooks"):
            return Path(*parts[i:]).as_posix()
    return str(path)

