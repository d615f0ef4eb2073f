"""gpupred.files: atomic writes, and writes that leave an unchanged file alone."""

from __future__ import annotations

import os
from pathlib import Path

from gpupred.files import TMP_PREFIX, write_if_changed


def test_write_if_changed_writes_new_bytes_and_leaves_the_same_ones(tmp_path: Path) -> None:
    path = tmp_path / "reports" / "metrics.json"  # the folder does not exist yet
    assert write_if_changed(path, b"one\n") and path.read_bytes() == b"one\n"
    os.utime(path, (0, 0))
    assert not write_if_changed(path, b"one\n") and path.stat().st_mtime == 0  # not touched
    assert write_if_changed(path, b"two\n") and path.read_bytes() == b"two\n"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(TMP_PREFIX)]  # no temporary file left
