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
from gpupred.digest import ShownOutput, readme_outputs
from gpupred.errors import GpupredError

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


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


def test_every_generated_block_is_current() -> None:
    """Each README block marked `generated: gpupred.digest.NAME` is exactly what NAME renders now (from
    reports/metrics, the predictor's card, data/raw, plans/ and data/corpus)."""
    from gpupred.digest import generators, readme_generated

    blocks = readme_generated(README)
    assert sorted(name for name, _ in blocks) == sorted(generators())
    for name, shown in blocks:
        assert shown == generators()[name](), f"README block {name} is stale: run `python -m gpupred.digest --write`"
    assert README.index("## Quick start") < README.index("## How accurate") < README.index("## The pipeline")


def test_the_accuracy_table_is_the_metrics() -> None:
    """The README's accuracy table is what gpupred.digest renders from reports/metrics and the card now."""
    from gpupred.digest import readme_generated, readme_table

    shown = dict(readme_generated(README))["readme_table"]
    assert shown == readme_table(REPO / "reports" / "metrics", REPO / "models" / "predictor.joblib"), (
        "README's accuracy table differs from reports/metrics: run `python -m gpupred.digest --write`")


def test_the_table_fails_when_a_figure_moves(tmp_path: Path) -> None:
    """A changed metric changes the rendered table (FIXTURE metrics written here), so a stale copy cannot pass."""
    import json

    from gpupred.digest import readme_table

    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "03-compare-regressors.json").write_text(json.dumps({"gpu_util_rmsle_lofo": 0.5, "memory_width_lofo": 0.42}))
    table = readme_table(folder, tmp_path / "none.joblib")
    assert "| 0.500 |" in table and "| 42 % |" in table and "GPUs measured (the default predictor's training runs): —" in table


def test_a_generated_block_is_rewritten_in_place() -> None:
    """An empty block is filled and a stale one replaced, each within its own marks (FIXTURE text)."""
    from gpupred.digest import readme_generated, readme_with_generated

    mark = "<!-- generated: gpupred.digest.{} (python -m gpupred.digest --write) -->\n"
    text = (f"a\n{mark.format('data_status')}<!-- end generated -->\nb\n"
            f"{mark.format('export_scale_table')}stale\n<!-- end generated -->\nc\n")
    out = readme_with_generated(text)
    assert out.startswith("a\n") and "\nb\n" in out and out.endswith("<!-- end generated -->\nc\n")
    assert [name for name, _ in readme_generated(out)] == ["data_status", "export_scale_table"]
    assert "stale" not in out and "Committed so far" in out and "llm-llama-7b" in out


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", text)


def test_an_excerpt_keeps_the_opening_and_the_named_sections() -> None:
    """FIXTURE answer text: the lines before `[answer`, the named sections whole, each cut marked `...`."""
    from gpupred.digest import excerpt

    answer = "model: x\nfits: yes\n[answer s/1]\ninputs:\n  a 1\nfigures:\n  b 2\n  c 3\nfit:\n  d 4\n"
    assert excerpt(answer, ("figures",)) == "model: x\nfits: yes\n...\nfigures:\n  b 2\n  c 3\n...\n"
    assert excerpt(answer, ("inputs", "fit")) == "model: x\nfits: yes\n...\ninputs:\n  a 1\n...\nfit:\n  d 4\n"
    assert excerpt(answer, ()) == answer


@pytest.mark.parametrize("block", [b for b in readme_outputs(README)
                                   if "--hf" not in b.args and "--timm" not in b.args],
                         ids=lambda b: f"{b.args} {','.join(b.sections)}".strip())
def test_every_command_output_shown_is_current(block: ShownOutput) -> None:
    """Each README block marked `output of: gpupred ...` is what the command prints now (the committed predictor), or
    the excerpt it names."""
    from gpupred.digest import shown_output

    assert shown_output(block) == block.shown, (
        f"README output of `gpupred {block.args}` is stale: `python -m gpupred.digest --write`")


@pytest.mark.slow
def test_named_model_outputs_shown_are_current() -> None:
    """The same for the quick start's model by name (exports it once: torch and transformers)."""
    pytest.importorskip("transformers")
    from gpupred.digest import shown_output

    named = [b for b in readme_outputs(README) if "--hf" in b.args or "--timm" in b.args]
    assert named
    for block in named:
        assert _numbers(shown_output(block)) == _numbers(block.shown), block.args
