"""Fetching published files: pinned upstream commit, sha256 check, local-copy fallback, provenance record.

A :class:`Source` names an upstream repository, a pinned commit and the files to take from it, each with
its sha256. :func:`import_source` obtains every file — from a folder the user gives (``--from DIR``), or
downloaded from ``<base>/<owner>/<repo>/<commit>/<path>`` (``config.EXTERNAL_BASE_URL``, GitHub's raw
host) with a short timeout, falling back to ``config.EXTERNAL_LOCAL`` when the download fails — checks
each sha256, and only when all of them match writes them (atomically) under ``data/external/<source>/``
with ``provenance.json`` (source, upstream repository, commit, path, sha256, licence, when and from where).
A file whose sha256 differs is refused with one line and nothing is written. Readers call
:func:`verified_path`, which re-checks the sha256 and raises :class:`~gpupred.errors.MissingInput`
(saying how to import) when the source was never imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.files import atomic_write_bytes, read_json_object
from gpupred.errors import MissingInput

if TYPE_CHECKING:
    import pandas as pd

PROVENANCE = "provenance.json"


@dataclass(frozen=True)
class UpstreamFile:
    """One file of a source: its local name, its path in the upstream repository and its pinned sha256."""

    name: str
    path: str
    sha256: str


@dataclass(frozen=True)
class Source:
    """A published data set: upstream repository at a pinned commit, its files, GPU and licence."""

    name: str
    repo: str
    commit: str
    files: tuple[UpstreamFile, ...]
    licence: str  # one line: what the licence allows (the card of anything trained on it repeats it)
    gpu_name: str  # the GPU it was measured on, as NVML names it
    measured: str  # one line: how it was measured
    citation: str

    @property
    def folder(self) -> Path:
        """Where the imported copy lives (``data/external/<name>``)."""
        return config.EXTERNAL / self.name

    def url(self, f: UpstreamFile, base: str | None = None) -> str:
        """The raw-file URL of ``f`` at the pinned commit."""
        return f"{(base or config.EXTERNAL_BASE_URL).rstrip('/')}/{self.repo}/{self.commit}/{f.path}"

    def file(self, name: str) -> UpstreamFile:
        """The file called ``name``."""
        for f in self.files:
            if f.name == name:
                return f
        raise GpupredError(f"source {self.name!r} has no file {name!r}")


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of a byte string."""
    return hashlib.sha256(data).hexdigest()


def _download(url: str, timeout: float) -> bytes:
    """The body of ``url``; any failure (unreachable host, timeout, HTTP error) raises OSError."""
    request = urllib.request.Request(url, headers={"User-Agent": "gpupred-importer"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (https or loopback)
            return response.read()
    except urllib.error.HTTPError as err:
        raise OSError(f"HTTP {err.code}") from None
    except urllib.error.URLError as err:
        raise OSError(str(err.reason)) from None
    except (TimeoutError, ConnectionError) as err:
        raise OSError(type(err).__name__) from None


def _local_file(folder: Path, source: Source, f: UpstreamFile) -> Path | None:
    """``folder/<source>/<name>`` or ``folder/<name>``, whichever exists."""
    for candidate in (folder / source.name / f.name, folder / f.name):
        if candidate.is_file():
            return candidate
    return None


def _check(data: bytes, f: UpstreamFile, origin: str) -> None:
    """Refuse (one line) a file whose sha256 is not the pinned one."""
    digest = sha256_bytes(data)
    if digest != f.sha256:
        raise GpupredError(f"{origin}: sha256 {digest[:16]}... differs from the pinned {f.sha256[:16]}... of "
                           f"{f.path}; refusing it (not the published file)")


def _from_folder(source: Source, folder: Path) -> dict[str, tuple[bytes, str]]:
    """Every file of ``source`` read from a local folder, checked."""
    out = {}
    for f in source.files:
        path = _local_file(folder, source, f)
        if path is None:
            raise GpupredError(f"{folder}: no {source.name}/{f.name} (nor {f.name}) in this folder; "
                               f"give the folder that holds the copy of {source.repo}'s {f.path}")
        data = path.read_bytes()
        _check(data, f, str(path))
        out[f.name] = (data, f"local copy {path}")
    return out


def _from_upstream(source: Source, base: str | None, timeout: float, local: Path | None) -> dict[str, tuple[bytes, str]]:
    """Every file downloaded at the pinned commit, or (on the first network failure) from ``local``."""
    out = {}
    for f in source.files:
        url = source.url(f, base)
        try:
            data = _download(url, timeout)
        except OSError as err:
            if local is None:
                raise GpupredError(f"cannot download {url} ({err}) and no local copy is configured: give one with "
                                   f"`gpupred import {source.name} --from DIR` or GPUPRED_EXTERNAL_LOCAL=DIR") from None
            print(f"{source.name}: download failed ({err}); using the local copy in {local}", flush=True)
            return _from_folder(source, local)
        _check(data, f, url)
        out[f.name] = (data, url)
    return out


def provenance_record(source: Source, obtained: dict[str, tuple[bytes, str]]) -> dict[str, Any]:
    """The provenance.json content for files just obtained."""
    from gpupred.version import __version__

    return {
        "source": source.name, "upstream_repo": source.repo, "commit": source.commit, "licence": source.licence,
        "gpu_name": source.gpu_name, "measured": source.measured, "citation": source.citation,
        "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpupred_version": __version__,
        "files": [{"name": f.name, "upstream_path": f.path, "url": source.url(f, "https://raw.githubusercontent.com"),
                   "sha256": f.sha256, "bytes": len(obtained[f.name][0]), "obtained_from": obtained[f.name][1]}
                  for f in source.files],
    }


def import_source(source: Source, from_dir: str | os.PathLike[str] | None = None, base_url: str | None = None,
                  timeout: float | None = None, local: Path | None = None) -> Path:
    """Obtain, check and write every file of ``source`` under data/external/<name>; return that folder.

    ``from_dir`` reads a local folder only; otherwise files are downloaded at the pinned commit and, if
    that fails, read from ``local`` (default ``config.EXTERNAL_LOCAL``). Nothing is written unless every
    file's sha256 matches.
    """
    if from_dir is not None:
        folder = Path(from_dir).expanduser()
        if not folder.is_dir():
            raise GpupredError(f"{folder}: no such folder (--from names the folder holding the published files)")
        obtained = _from_folder(source, folder)
    else:
        fallback = local if local is not None else config.EXTERNAL_LOCAL
        obtained = _from_upstream(source, base_url, config.EXTERNAL_TIMEOUT_S if timeout is None else timeout, fallback)
    for f in source.files:
        atomic_write_bytes(source.folder / f.name, obtained[f.name][0])
    record = provenance_record(source, obtained)
    atomic_write_bytes(source.folder / PROVENANCE, (json.dumps(record, indent=2) + "\n").encode())
    return source.folder


def read_provenance(source: Source) -> dict[str, Any]:
    """The provenance of an imported source; MissingInput (saying how to import) if it was never imported."""
    path = source.folder / PROVENANCE
    if not path.is_file():
        raise MissingInput(f"{source.name} data not imported ({path} missing): run `gpupred import {source.name}` "
                           f"(offline: `gpupred import {source.name} --from DIR` with a copy of {source.repo}'s files)")
    record = read_json_object(path, f"re-run `gpupred import {source.name}`")
    if record.get("commit") != source.commit:
        raise GpupredError(f"{path}: imported at commit {str(record.get('commit'))[:12]}, this gpupred pins "
                           f"{source.commit[:12]}; re-run `gpupred import {source.name}`")
    return record


def is_imported(source: Source) -> bool:
    """Whether ``source`` has been imported at the pinned commit (files not re-checked)."""
    try:
        read_provenance(source)
    except GpupredError:
        return False
    return all((source.folder / f.name).is_file() for f in source.files)


def verified_path(source: Source, name: str) -> Path:
    """The imported file ``name``, its sha256 checked again; MissingInput if the source was never imported."""
    read_provenance(source)
    f = source.file(name)
    path = source.folder / f.name
    if not path.is_file():
        raise MissingInput(f"{path} missing: re-run `gpupred import {source.name}`")
    _check(path.read_bytes(), f, str(path))
    return path


def read_csv(source: Source, name: str, columns: Any, owner: str, **read_kw: Any) -> "pd.DataFrame":
    """The imported CSV file ``name`` (sha256 checked again), refused in one line when it lacks ``columns``;
    ``owner`` names whose file it should be ("Lucid's")."""
    import pandas as pd

    path = verified_path(source, name)
    df = pd.read_csv(path, **read_kw)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise GpupredError(f"{path}: missing columns {missing}; not {owner} {name}")
    return df


def ensure_imported(source: Source) -> tuple[bool, str]:
    """Import ``source`` unless it already is; (True, how) on success, (False, why not) when it cannot be had."""
    if is_imported(source):
        return True, f"{source.name}: already imported in {source.folder}"
    try:
        folder = import_source(source)
    except GpupredError as err:
        return False, str(err)
    origins = {f["obtained_from"].split(" ")[0] for f in read_provenance(source)["files"]}
    return True, f"{source.name}: imported into {folder} ({', '.join(sorted(origins))})"
