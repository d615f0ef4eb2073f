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
from gpupred.digest import readme_outputs
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
    from gpupred.predictor.artifact import export_predictor, train_predictor

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


def test_the_accuracy_table_is_the_metrics() -> None:
    """The README's accuracy table is exactly what gpupred.digest renders from reports/metrics and the card now."""
    from gpupred.digest import README_MARK, readme_table

    text = (REPO / "README.md").read_text()
    start, end = README_MARK
    shown = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert shown == readme_table(REPO / "reports" / "metrics", REPO / "models" / "predictor.joblib").strip(), (
        "README's accuracy table differs from reports/metrics: run `python -m gpupred.digest --write`")
    assert text.index("## Quick start") < text.index("## How accurate") < text.index("## The pipeline")


def test_the_table_fails_when_a_figure_moves(tmp_path: Path) -> None:
    """A changed metric changes the rendered table (FIXTURE metrics written here), so a stale copy cannot pass."""
    import json

    from gpupred.digest import readme_table

    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "03-compare-regressors.json").write_text(json.dumps({"gpu_util_rmsle_lofo": 0.5, "memory_width_lofo": 0.42}))
    table = readme_table(folder, tmp_path / "none.joblib")
    assert "| 0.500 |" in table and "| 42 % |" in table and "GPUs measured (the default predictor's training runs): —" in table


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", text)


@pytest.mark.parametrize("args", [a for a, _ in readme_outputs((REPO / "README.md").read_text())
                                  if "--hf" not in a and "--timm" not in a])
def test_every_command_output_shown_is_current(args: str) -> None:
    """Each README block marked `output of: gpupred ...` is what the command prints now (the committed predictor)."""
    from gpupred.digest import command_output

    shown = dict(readme_outputs((REPO / "README.md").read_text()))[args]
    assert command_output(args) == shown, f"README output of `gpupred {args}` is stale: `python -m gpupred.digest --write`"


@pytest.mark.slow
def test_named_model_outputs_shown_are_current() -> None:
    """The same for the quick start's model by name (exports it once: torch and transformers)."""
    pytest.importorskip("transformers")
    from gpupred.digest import command_output

    named = [(a, out) for a, out in readme_outputs((REPO / "README.md").read_text()) if "--hf" in a or "--timm" in a]
    assert named
    for args, shown in named:
        assert _numbers(command_output(args)) == _numbers(shown), args
