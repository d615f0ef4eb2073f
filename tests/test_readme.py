"""The README's "Use" section runs as written: its Python blocks are executed verbatim in a temporary folder.

``load_predictor()`` there reads models/predictor.joblib; this test points it at a FIXTURE predictor (trained on
the toy-formula frames of fixtures_learning, meaningless predictions) so that it does not depend on the committed one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fixtures_learning import fixture_dataset
from gpupred import config
from gpupred.errors import GpupredError

REPO = Path(__file__).resolve().parent.parent


def use_blocks() -> list[str]:
    """The ```python blocks of the README's "## Use" section, in order."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Use", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.slow
def test_use_section_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torchvision")
    from gpupred.predictor import export_predictor, train_predictor

    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3",), n_batch_sizes=1)
    artifact = export_predictor(train_predictor(df, models="ridge", tune=False, n_folds=3), df,
                                tmp_path / "models" / "predictor.joblib")
    monkeypatch.setattr(config, "PREDICTOR", artifact)
    monkeypatch.chdir(tmp_path)
    blocks = use_blocks()
    assert len(blocks) == 2 and "export_model" in blocks[0] and "load_predictor" in blocks[1]
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert (tmp_path / "resnet50.onnx").stat().st_size < 1_000_000  # structure only
    assert namespace["row"]["batch_size"] == 64 and namespace["row"]["n_conv"] == 53


def test_without_a_predictor_the_snippet_says_what_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "PREDICTOR", tmp_path / "models" / "predictor.joblib")
    import gpupred

    with pytest.raises(GpupredError, match="make all. exports one"):
        gpupred.load_predictor()
    assert "`make all` exports both" in (REPO / "README.md").read_text()
