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

