"""`gpupred predict` as a new user meets it: the missing model file is named first, and every path in a message is
the one the user typed. Predictors here are FIXTURES (toy-formula training frames, meaningless predictions).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_learning import fixture_dataset
from gpupred.predictor.training import export_predictor, train_predictor


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpupred.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FIXTURE predictor artifact."""
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3",), n_batch_sizes=1)
    return export_predictor(train_predictor(df, models="ridge", tune=False, n_folds=3), df,
                            tmp_path_factory.mktemp("models") / "predictor.joblib")


def test_missing_model_file_is_named_before_the_predictor(tmp_path: Path) -> None:
    result = _cli(tmp_path, "predict", "missing.onnx", "--batch-size", "8")
    assert result.returncode == 2
    assert result.stderr.startswith("gpupred: error: missing.onnx: no such file")
    assert result.stderr.count("\n") == 1


def test_paths_in_messages_are_as_typed(tmp_path: Path, artifact: Path) -> None:
    (tmp_path / "sub").mkdir()
    result = _cli(tmp_path, "predict", "./sub/../missing.onnx", "--batch-size", "8")
    assert "./sub/../missing.onnx: no such file" in result.stderr
    result = _cli(tmp_path, "features", "./sub/../missing.onnx", "--batch-size", "8")
    assert "./sub/../missing.onnx: no such file" in result.stderr
    model = tmp_path / "sub" / "m.onnx"
    from test_predictor import _tiny_onnx

    _tiny_onnx(model)
    result = _cli(tmp_path, "predict", "./sub/m.onnx", "--batch-size", "8", "--predictor", "./nowhere/../p.joblib")
    assert result.returncode == 2 and "./nowhere/../p.joblib: no predictor there" in result.stderr
    tampered = tmp_path / "models" / "predictor.joblib"
    tampered.parent.mkdir()
    tampered.write_bytes(b"tampered")
    tampered.with_suffix(".json").write_bytes(artifact.with_suffix(".json").read_bytes())
    result = _cli(tmp_path, "predict", "./sub/m.onnx", "-b", "8", "--predictor", "./models/../models/predictor.joblib")
    assert result.returncode == 2 and result.stderr.startswith("gpupred: error: ./models/../models/predictor.joblib: sha256")
    result = _cli(tmp_path, "predict", "sub/m.onnx", "-b", "8", "--predictor", str(artifact), "--json")
    assert result.returncode == 0, result.stderr
