"""``gpupred features`` through the real entry point: JSON output and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from test_graph_features import mlp_graph

from gpupred.graph.features import FEATURE_KEYS


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpupred.cli", "features", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_graph(), path)
    return path


def test_json_output(model_file: Path) -> None:
    out = run_cli(str(model_file), "--batch-size", "4", "--precision", "bf16", "--optimizer", "adam", "--json")
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert set(FEATURE_KEYS) <= set(row) and row["batch_size"] == 4 and row["is_bf16"] == 1 and row["is_adam"] == 1


def test_human_table(model_file: Path) -> None:
    out = run_cli(str(model_file), "-b", "2")
    assert out.returncode == 0 and "flops_fwd" in out.stdout


def _bad_inputs(tmp: Path, good: Path) -> list[tuple[list[str], str]]:
    text = tmp / "notes.onnx"
    text.write_text("not a model\n" * 10)
    truncated = tmp / "cut.onnx"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    two = mlp_graph()
    two.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"
    onnx.save(two, tmp / "two.onnx")
    return [
        ([str(tmp / "missing.onnx"), "-b", "1"], "missing.onnx"),
        ([str(text), "-b", "1"], "notes.onnx"),
        ([str(truncated), "-b", "1"], "cut.onnx"),
        ([str(good)], "--batch-size"),
        ([str(tmp / "two.onnx"), "-b", "2"], "'features'"),
        (["--workload", "resnet.resnet50-bs64"], "resnet.resnet50-bs64"),
    ]


def test_bad_input_one_line_exit_2(tmp_path: Path, model_file: Path) -> None:
    for args, needle in _bad_inputs(tmp_path, model_file):
        out = run_cli(*args)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr, (args, out.stderr)
