"""gpupred.files: atomic writes, and writes that leave an unchanged file alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpupred.errors import GpupredError
from gpupred.files import TMP_PREFIX, read_json_object, write_if_changed


def test_write_if_changed_writes_new_bytes_and_leaves_the_same_ones(tmp_path: Path) -> None:
    path = tmp_path / "reports" / "metrics.json"  # the folder does not exist yet
    assert write_if_changed(path, b"one\n") and path.read_bytes() == b"one\n"
    os.utime(path, (0, 0))
    assert not write_if_changed(path, b"one\n") and path.stat().st_mtime == 0  # not touched
    assert write_if_changed(path, b"two\n") and path.read_bytes() == b"two\n"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(TMP_PREFIX)]  # no temporary file left


@pytest.mark.parametrize("text, message", [("{oops", "not valid JSON"), ("[1, 2]", "not a JSON object"),
                                           ("\udcff", "not valid JSON")])
def test_read_json_object_names_the_file_the_problem_and_the_remedy(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "card.json"
    path.write_bytes(b"\xff\xfe" if text == "\udcff" else text.encode())
    with pytest.raises(GpupredError, match=f"^{path}: {message}.*; run the exporter$"):
        read_json_object(path, "run the exporter")
    assert path.read_bytes() == (b"\xff\xfe" if text == "\udcff" else text.encode())  # nothing lost
    path.write_text('{"a": 1}')
    assert read_json_object(path, "run the exporter") == {"a": 1}



def test_a_file_cache_reads_a_file_once_while_it_is_unchanged_and_keeps_few_versions(tmp_path: Path) -> None:
    """FileCache: one parse per version of a file (same path, mtime, size), a rewritten file parsed again, a parse
    that raises keeps nothing, and at most ``entries`` versions are kept (FIXTURE files)."""
    from gpupred.files import FileCache

    calls: list[str] = []

    def parse(path: Path) -> str:
        calls.append(path.name)
        text = path.read_text()
        if text == "bad":
            raise ValueError("FIXTURE: unreadable")
        return text

    cache: FileCache[str] = FileCache(entries=2)
    a = tmp_path / "a.json"
    a.write_text("one")
    assert cache.read(a, parse) == cache.read(a, parse) == "one" and calls == ["a.json"]
    a.write_text("two!")
    os.utime(a, ns=(1, 1))  # a new version even where the clock did not move
    assert cache.read(a, parse) == "two!" and calls == ["a.json"] * 2
    b, c = tmp_path / "b.json", tmp_path / "c.json"
    b.write_text("bad")
    with pytest.raises(ValueError):
        cache.read(b, parse)
    assert len(cache.kept) == 2  # both versions of a; nothing of b
    c.write_text("three")
    assert cache.read(c, parse) == "three" and len(cache.kept) == 2  # the oldest version went
    with pytest.raises(OSError):
        cache.read(tmp_path / "missing.json", parse)


def test_a_recorded_path_is_shown_from_the_project(tmp_path: Path) -> None:
    """Inside the root: relative; another checkout's (a device machine's): from its plans/data folder; else as is."""
    from gpupred.files import project_path

    assert project_path(tmp_path / "plans" / "x.txt", tmp_path) == "plans/x.txt"
    assert project_path("/elsewhere/main/plans/input-pipelines.txt", tmp_path) == "plans/input-pipelines.txt"
    assert project_path("plans/h100-solo.txt", tmp_path) == "plans/h100-solo.txt"
    assert project_path("/tmp/my-plan.txt", tmp_path) == "/tmp/my-plan.txt"
