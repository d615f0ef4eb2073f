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


def test_one_look_stats_each_path_once_and_sees_what_this_process_writes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside one_look, a file's version and whether it is a file are what the first stat saw (a file rewritten by
    another writer meanwhile, or missing, stays as first seen), a file written with atomic_write is seen anew, nested
    looks share one, and outside a look every call stats again (FIXTURE files)."""
    from gpupred.files import atomic_write_bytes, file_version, is_file, one_look

    stats: list[str] = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: stats.append(os.fspath(p)) or real_stat(p, *a, **k))
    a, gone, new = tmp_path / "a.onnx", tmp_path / "missing.onnx", tmp_path / "new.onnx"
    a.write_bytes(b"one")
    first = file_version(a)
    with one_look():
        assert file_version(a) == first and is_file(a) and is_file(str(a))
        a.write_bytes(b"longer")  # another writer: not seen inside this look
        with one_look():
            assert file_version(a) == first
        assert not is_file(gone) and not is_file(gone) and not is_file(tmp_path)
        with pytest.raises(FileNotFoundError):
            file_version(gone)
        assert not is_file(new)
        atomic_write_bytes(new, b"written here")
        assert is_file(new) and file_version(new)[2] == len(b"written here")
        assert stats.count(str(a)) == 2 and stats.count(str(gone)) == 1 and stats.count(str(new)) == 2  # a: once before
    assert file_version(a) != first and file_version(a)[2] == len(b"longer")
    assert stats.count(str(a)) == 4 and is_file(a) and stats.count(str(a)) == 5  # outside a look: a stat a call


def test_a_value_derived_within_a_look_is_kept_until_this_process_writes(tmp_path: Path) -> None:
    """within_look computes a value once per key in the open look (nested looks share it), again after a file this
    process writes, and each time outside a look (FIXTURE files)."""
    from gpupred.files import atomic_write_bytes, is_file, one_look, within_look

    made: list[str] = []
    path = tmp_path / "x.onnx"

    def exists() -> bool:
        made.append("x")
        return is_file(path)

    assert within_look("x", exists) is False and within_look("x", exists) is False and len(made) == 2
    with one_look():
        assert within_look("x", exists) is False
        with one_look():
            assert within_look("x", exists) is False
        assert within_look(("other", 1), lambda: 7) == 7 and len(made) == 3
        atomic_write_bytes(path, b"written here")
        assert within_look("x", exists) is True and within_look("x", exists) is True and len(made) == 4
    assert within_look("x", exists) is True and len(made) == 5


def test_the_store_graph_found_within_a_look_is_a_fresh_lookups() -> None:
    """stored_graph, kept per architecture within a look, answers what a lookup outside any look answers (the graph,
    or None for an architecture the store lacks), and the key tells architectures apart."""
    from dataclasses import replace

    from gpupred.files import one_look
    from gpupred.graph.export import stored_graph
    from gpupred.workloads.spec import WorkloadSpec

    specs = [WorkloadSpec.from_id(i) for i in ("resnet.resnet50-bs64-img224-fp32-sgd", "vit.vit_b_16-bs32-img160-bf16-sgd")]
    specs.append(replace(specs[0], input_size=123))  # an image size the store holds no graph of
    fresh = [stored_graph(s) for s in specs]
    assert fresh[0] is not None and fresh[1] is not None and fresh[0] != fresh[1] and fresh[2] is None
    with one_look():
        assert [stored_graph(s) for s in specs] == fresh and [stored_graph(s) for s in reversed(specs)] == fresh[::-1]


def test_a_recorded_path_is_shown_from_the_project(tmp_path: Path) -> None:
    """Inside the root: relative; another checkout's (a device machine's): from its plans/data folder; else as is."""
    from gpupred.files import project_path

    assert project_path(tmp_path / "plans" / "x.txt", tmp_path) == "plans/x.txt"
    assert project_path("/elsewhere/main/plans/input-pipelines.txt", tmp_path) == "plans/input-pipelines.txt"
    assert project_path("plans/h100-solo.txt", tmp_path) == "plans/h100-solo.txt"
    assert project_path("/tmp/my-plan.txt", tmp_path) == "/tmp/my-plan.txt"
