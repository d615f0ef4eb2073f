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
    from gpupred.predictor.training import export_predictor, train_predictor

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
    assert (tmp_path / "resnet50.onnx").stat().st_size < 1_000_000  # structure only: the README's "under 1 MB"
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
    (folder / "03-physics-first.json").write_text(json.dumps({"gpu_util_rmsle_lofo": 0.5, "memory_width_lofo": 0.42}))
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


# The README's hand-written figures, each as the phrase it must contain, rebuilt from the code or committed files.
# A figure that moves fails here; rewrite the README's phrase (or the code) so that they agree.
WORDS = {4: "four", 7: "seven"}


def _prose() -> str:
    """The README with every run of whitespace (line breaks included) as one space."""
    return " ".join(README.split())


def _card() -> dict:
    """The default predictor's card (models/predictor.json)."""
    import json

    return json.loads((REPO / "models" / "predictor.json").read_text())


def _python_claims() -> list[str]:
    """The Python version and pytest's durations (pyproject.toml)."""
    import tomllib

    pins = tomllib.loads((REPO / "pyproject.toml").read_text())
    version = pins["project"]["requires-python"].removeprefix(">=")
    durations = re.search(r"--durations=(\d+)", pins["tool"]["pytest"]["ini_options"]["addopts"]).group(1)
    return [f"with Python {version};", f"python{version} -m venv", f"pytest prints the {durations} slowest tests"]


def _catalog_claims() -> list[str]:
    """The catalogs' sizes (gpupred.workloads) and a plan's chunk (gpupred.profile.plans)."""
    from gpupred.profile.plans import CHUNK_MINUTES
    from gpupred.workloads.catalog import by_family, catalog, fused_catalog
    from gpupred.workloads.realworld import REALWORLD_ARCHS, realworld_catalog

    specs, real = catalog(), realworld_catalog()
    return [f"the catalog: {len(specs)} specs over {len(by_family(specs))} families "
            f"(--fused: {len(fused_catalog())} fused-trial specs)",
            f"{len(real)} specs of {len(REALWORLD_ARCHS)} timm and Hugging Face architectures "
            f"({len(by_family(real))} families)", f"a plan's GPU time and {CHUNK_MINUTES:g}-minute chunks"]


def _model_claims() -> list[str]:
    """The predictor's intervals and fitted launch costs (its card), the step model's constants, the hardware table
    and the corpus's decoders."""
    from gpupred.digest import measured_gpus
    from gpupred.graph.corpus import LLM_MODELS, read_corpus_index
    from gpupred.hardware import gpu_spec
    from gpupred.step.physics import constants

    level = re.search(r"(\d+)% nominal", _card()["core"]["step"]["interval"]).group(1)
    fits = [c["launch_s"] * 1e6 for c in _card()["core"]["step"]["constants"]]
    gpus = " and ".join(sorted(gpu_spec(g).name.split()[0] for g in measured_gpus()))
    seven = read_corpus_index()["models"]["llm-llama-7b"]["torch_params"] / 1e9
    assert "5-10 us" in constants.__doc__ and "L4" not in measured_gpus()
    return [f"({level}% intervals)", f"Each figure comes with its {level} % interval", f"each with {level}% bounds",
            f"only where there are training runs (the {gpus} here)",
            f"{min(fits):.0f}-{max(fits):.0f} us on this project's {gpus} runs, where PyTorch's profiler puts a bare "
            "eager launch at 5-10 us", f"Its {WORDS[len(constants.FITTED)]} constants",
            f'the GPU\'s full name: A100 -> "{gpu_spec("A100").name}"', f"{WORDS[len(LLM_MODELS)]} real-size decoders",
            f"the export of a {seven:.0f}B model", f"# {seven:.1f}B parameters, no memory",
            f"LlamaConfig's defaults: {seven:.0f}B"]


def _code_claims() -> list[str]:
    """Thresholds and defaults of the code and the tests, and the reference host profile (data/hosts/)."""
    import json

    from gpupred import config
    from gpupred.calibration.bench import DEFAULT_SECONDS
    from gpupred.digest import HEADLINES
    from gpupred.graph.coverage import MAX_INCOMPLETE
    from gpupred.workloads.hubconfigs import published_ids

    host = json.loads(Path(config.HOST_PROFILE).read_text())
    timeline = (REPO / "tests" / "test_pipeline_timeline.py").read_text()
    workers = re.search(r'parametrize\("workers", \[(\d+), (\d+), (\d+)\]\)', timeline).groups()
    tolerance = float(re.search(r"^TOLERANCE = ([\d.]+)", timeline, re.M).group(1))
    invariance = float(re.search(r"_close\(row\[k\], want\[k\], ([\d.]+)\)",
                                 (REPO / "tests" / "test_export_invariance.py").read_text()).group(1))
    k = {m.group(1) for key, notebook, _ in HEADLINES
         if notebook == "06-colocation" and (m := re.search(r"_k(\d+)$", key))}
    assert host["wall_s"] < 60 and len(k) == 1  # `gpupred loader bench` (under a minute): the reference host's run
    return [f"agree within {invariance:.0%} however it was exported", f"past {MAX_INCOMPLETE:.0%} missing",
            f"this project's {host['host']['physical_cores']}-core development machine",
            f"within {tolerance:.0%} for {workers[0]}, {workers[1]} and {workers[2]} workers",
            f"notebook 06's `k` = {k.pop()} adaptation",
            f"micro-benchmarks in a {DEFAULT_SECONDS:g} s budget (--seconds)",
            "of every standard kind (under a minute)", f"or from a hub id. {len(published_ids())} widely fine-tuned"]


def _imported_claims() -> list[str]:
    """The published data sets' sizes, as their importers (gpupred.importers) document the pinned files."""
    from gpupred.importers import gavel, gpumemnet, lucid

    solo, pairs = re.search(r"\((\d+) solo.*?\(([\d,]+) pairs", " ".join(lucid.__doc__.split())).groups()
    networks = re.search(r"([\d,]+) training runs of fully connected networks", gpumemnet.__doc__).group(1)
    types, kinds = re.search(r"of (\d+) training job types on ([\w, ]+)\.", gavel.__doc__).groups()
    return [f"Lucid's {solo} solo jobs and {pairs} pairs", f"GPUMemNet's {networks} fully connected networks",
            f"({types} job types alone and in every pair on {' and '.join(kinds.rsplit(', ', 1))},"]


CLAIMS = (_python_claims, _catalog_claims, _model_claims, _code_claims, _imported_claims)
NOT_FIGURES = (  # numbers the README may type by hand that are no figure of merit
    r"\((?:HotCloud|IEEE TPDS) 20\d\d\)", r"\((?:ATC'23|OSDI'20)\)", r"\(issue \d+\)",  # citations, issues
    r"[Nn]otebooks? 0\d(?: and 0\d)?", r"\b0\d(?:-[a-z-]+|'s)", r"\| 0\d \(kernels\), 0\d[a-z-]*, 0\d \|",  # notebooks
    r"0\.15 is about 15 % relative error",  # the metric's scale, worked out
    r"\*\*\d\. ", r"fixed at 1\b", r"16-bit", r"RTX 3090",  # step numbers, names
    r"under 1 MB",  # checked by test_use_section_runs_as_written
)

@pytest.mark.parametrize("claims", CLAIMS, ids=lambda f: f.__name__.strip("_"))
def test_each_figure_typed_in_the_prose_is_derived(claims) -> None:
    """Each figure the README types by hand is what the code, the card or a committed file says now."""
    missing = [c for c in claims() if c not in _prose()]
    assert not missing, f"README differs from its source on: {missing}"


def test_h100_runs_are_twins_of_h200_runs() -> None:
    """The README's "each H100 run is the twin of an H200 run: the same spec and software on a GPU with the same compute
    and less, slower memory", from data/raw's runs and manifests and gpupred.hardware."""
    from gpupred import config
    from gpupred.hardware import gpu_spec
    from gpupred.profile.schema import read_runs
    from gpupred.profile.store import read_manifest

    runs = {gpu: read_runs(config.RAW / gpu) for gpu in ("h100", "h200")}
    assert set(runs["h100"]["workload_id"]) <= set(runs["h200"]["workload_id"])
    software = [read_manifest(sweep)["software"] for gpu in runs for sweep in map(Path, set(runs[gpu]["sweep_dir"]))]
    assert all(s == software[0] for s in software)
    h100, h200 = (gpu_spec(runs[gpu]["gpu_name"].iloc[0]) for gpu in runs)
    assert (h100.tflops_bf16, h100.tflops_fp32, h100.sm_count) == (h200.tflops_bf16, h200.tflops_fp32, h200.sm_count)
    assert h100.memory_gb < h200.memory_gb and h100.mem_bw_gbs < h200.mem_bw_gbs
    assert "Each H100 run is the twin of an H200 run: the same spec and software" in _prose()


def test_every_notebook_named_exists() -> None:
    """Each notebook the README names ("notebook 03", "Notebooks 06 and 07", "02-build-features") is in notebooks/."""
    have = {p.stem for p in (REPO / "notebooks").glob("*.ipynb")}
    numbers = {n for m in re.finditer(r"[Nn]otebooks? (\d\d)(?: and (\d\d))?", _prose()) for n in m.groups() if n}
    named = set(re.findall(r"(?<![\w-])(0\d-[a-z][a-z-]*[a-z])\b", README))
    assert numbers and named
    assert {n for n in numbers if not any(h.startswith(f"{n}-") for h in have)} == set()
    assert named - have == set()



def _hand_typed_numbers() -> list[str]:
    """Each number left in the README's prose and shell comments once generated blocks, command outputs, inline code,
    links, the derived phrases (:data:`CLAIMS`) and :data:`NOT_FIGURES` are taken out, with its context."""
    from gpupred.digest import GENERATED_MARK, OUTPUT_MARK

    text = OUTPUT_MARK.sub("", GENERATED_MARK.sub("", README))
    text = re.sub(r"```bash\n(.*?)```", lambda m: " ".join(re.findall(r"#( .*)", m.group(1))), text, flags=re.S)
    text = " ".join(re.sub(r"```\w*\n.*?```", "", text, flags=re.S).split())
    for claim in (c for claims in CLAIMS for c in claims()):
        text = text.replace(claim, " ")
    text = re.sub("|".join([r"`[^`]*`", r"\[[^\]]*\]\([^)]*\)", *NOT_FIGURES]), " ", text)
    return [text[max(0, m.start() - 30):m.end() + 30] for m in re.finditer(r"(?<![\w.\-/])\d[\d,.]*(?!\w)", text)]


def test_no_figure_is_typed_by_hand_unchecked() -> None:
    """Every number in the README is generated (a generated block, a command's output), derived by a test here, or
    no figure at all: a figure typed by hand would go stale unseen."""
    assert _hand_typed_numbers() == [], "generate these (gpupred.digest) or derive them here (CLAIMS)"
