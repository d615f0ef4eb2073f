"""Named models that say what they built, and names refused fast (issue 76 item 4): an encoder's default head is its
masked LM, the head is printed, library warnings stay off the screen, a first export says it is running; unknown
timm names, transformers model types and GPUs are refused at once with the closest names; the hardware table's
rates are complete.

The export in ``test_a_first_export_says_what_it_builds`` is a FIXTURE: the build and the export are replaced by stubs
that write a two-layer MLP graph where the cache keeps the model's (no torch); predictions come from the committed
predictor and mean nothing for that graph.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpupred.errors import GpupredError
from gpupred.hardware import gpu_spec, known_gpus
from gpupred.workloads.hubmodels import NamedModel, hf_model_types, timm_names

REPO = Path(__file__).resolve().parents[1]


def test_unknown_names_are_refused_with_the_closest_without_importing_torch() -> None:
    """The names are read from the installed libraries' sources: refusing one imports neither torch nor the library."""
    code = ("import sys\nfrom gpupred.workloads.hubmodels import NamedModel, check_name\n"
            "for source, name in (('timm', 'resnet5O'), ('hf', 'bertt')):\n"
            "    try:\n        check_name(NamedModel(source, name))\n    except Exception as err:\n        print(err)\n"
            "check_name(NamedModel('timm', 'resnet50.a1_in1k')); check_name(NamedModel('hf', 'llama'))\n"
            "check_name(NamedModel('hf', 'meta-llama/Llama-3.2-1B')); check_name(NamedModel('hf', 'bert-base-uncased'))\n"
            "check_name(NamedModel('hf', 'gpt2-large'))\n"
            "print(sorted(m for m in ('torch', 'timm', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("--timm resnet5O: timm ") and "has no such model (closest: resnet50" in out[0]
    assert out[1].startswith("--hf bertt: not a transformers model type (closest: bert") and "owner/name" in out[1]
    assert out[2] == "[]"


@pytest.mark.slow
def test_the_name_lists_are_the_libraries_own() -> None:
    """What the sources say is what the imported libraries register (a new layout of theirs fails here)."""
    import timm
    import transformers

    assert timm_names() == frozenset(timm.list_models())
    assert hf_model_types() >= set(transformers.CONFIG_MAPPING.keys())


def test_the_default_head_of_an_encoder_is_its_masked_lm() -> None:
    """BERT's default is BertForMaskedLM (not BertLMHeadModel); a decoder's is its causal LM; a config's own
    ``architectures`` win."""
    import transformers

    from gpupred.workloads.hubmodels import default_head

    assert default_head(transformers.BertConfig()) == "masked-lm"
    assert default_head(transformers.RobertaConfig()) == "masked-lm"
    assert default_head(transformers.GPT2Config()) == "causal-lm"
    assert default_head(transformers.LlamaConfig()) == "causal-lm"
    assert default_head(transformers.BertConfig(architectures=["BertForSequenceClassification"])) == "seq-cls"


def test_library_warnings_stay_off_the_screen(capsys: pytest.CaptureFixture[str]) -> None:
    from gpupred.graph.named import quiet_libraries

    handler = logging.StreamHandler(sys.stderr)
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with quiet_libraries():
            warnings.warn("a library's warning", UserWarning)
            logger.warning("If you want to use BertLMHeadModel as a standalone, add `is_decoder=True.`")
        logger.warning("after the block: shown")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "BertLMHeadModel" not in err and "a library's warning" not in err and "after the block: shown" in err


def test_a_first_export_says_what_it_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The first export prints a progress line on stderr; every answer for a named model names the class, head,
    parameters and input shape (stdout, or stderr beside --json)."""
    import gpupred.graph.adapter as adapter
    import gpupred.graph.named as named
    import gpupred.graph.weightless as weightless
    from gpupred import config
    from test_predictor import _tiny_onnx

    class BertForMaskedLM:  # the stub's model: only its class name is read
        pass

    def build(model: NamedModel, *args: Any) -> Any:
        return SimpleNamespace(model=BertForMaskedLM(), example=None, head="masked-lm", seq_len=128, image_size=None,
                               params=4_385_920, config={"model_type": "bert", "class": "BertForMaskedLM"})

    monkeypatch.setattr(config, "ONNX_CACHE", tmp_path / "cache")
    monkeypatch.setattr(named, "build_named", build)
    monkeypatch.setattr(adapter, "positional", lambda model, example: (model, (), ()))
    def export(model: Any, tensors: Any, path: Path, *args: Any) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _tiny_onnx(Path(path))

    monkeypatch.setattr(weightless, "export_weightless", export)
    from gpupred.cli import main

    argv = ["predict", "--hf", "bert", "-b", "8", "--gpu", "H100 SXM", "--no-calibration",
            "--predictor", str(REPO / "models" / "predictor.joblib")]
    for extra in (["--json"], []):  # the first exports, the second reads the cache
        try:
            main(argv + extra)
        except SystemExit as stop:
            assert not stop.code
        out, err = capsys.readouterr()
        said = "model: BertForMaskedLM, head masked-lm, 4.4M parameters, seq_len 128"
        if extra:
            assert "gpupred: exporting hf bert (BertForMaskedLM, head masked-lm) once" in err
            assert said in err and json.loads(out)["figures"]["memory"]["point"] > 0
        else:
            assert "exporting" not in err and out.startswith(said + "\n")


@pytest.mark.parametrize(("name", "known"), [("RTX4090", "RTX 4090"), ("h100sxm", "H100 SXM"), ("L40S", "L40S")])
def test_a_gpu_name_without_its_spaces_is_known(name: str, known: str) -> None:
    assert gpu_spec(name).name == known


@pytest.mark.parametrize(("nvml", "known", "capability"), [
    ("NVIDIA A10G", "A10G", "8.6"), ("NVIDIA A10", "A10", "8.6"), ("NVIDIA A40", "A40", "8.6"),
    ("NVIDIA RTX A6000", "RTX A6000", "8.6"), ("NVIDIA L40", "L40", "8.9"), ("NVIDIA L40S", "L40S", "8.9"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB", "8.0"), ("NVIDIA H100 80GB HBM3", "H100 SXM", "9.0"),
    ("Tesla T4", "T4", "7.5")])
def test_cloud_gpus_are_known_by_their_nvml_names_with_their_compute_capability(nvml: str, known: str,
                                                                                capability: str) -> None:
    """AWS's A10G (G5) is not the A10 (its tensor rate is half), nor is the L40 the L40S; GA100 is 8.0, GA10x 8.6."""
    from gpupred.hardware import compute_capability, max_threads_per_sm

    assert gpu_spec(nvml).name == known and compute_capability(nvml) == capability
    assert max_threads_per_sm(nvml) == {"8.6": 1536, "8.9": 1536, "7.5": 1024}.get(capability, 2048)


def test_every_table_gpu_has_an_architecture_and_a_compute_capability() -> None:
    from gpupred.hardware import compute_capability

    table = known_gpus()
    assert table["architecture"].notna().all()
    assert all(compute_capability(name) for name in table["name"])
    assert gpu_spec("A10G").fp16 < gpu_spec("A10").fp16 and gpu_spec("A10G").tflops_fp32 > gpu_spec("A10").tflops_fp32


def test_an_unknown_gpu_is_refused_before_a_named_model_is_exported(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`predict --hf ... --gpu X` and `fits --hf ... --gpu X` with an unknown X answer in one line at once: the build
    and export (a minute for an LLM) never start (FIXTURE: a build stub that fails the test if it is called)."""
    import gpupred.graph.named as named
    from gpupred.cli import main

    def build(*args: Any) -> Any:
        raise AssertionError("the model was built before the GPU was checked")

    monkeypatch.setattr(named, "build_named", build)
    for argv in (["predict", "--hf", "llama", "-b", "1", "--gpu", "A10X", "--no-calibration",
                  "--predictor", str(REPO / "models" / "predictor.joblib")],
                 ["fits", "--hf", "llama", "--gpu", "A10X", "--predictor", str(REPO / "models" / "predictor.joblib")]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.count("\n") == 1 and "unknown GPU 'A10X' (closest: A10" in err


def test_an_unknown_gpu_gets_the_closest_names_and_no_source_file(capsys: pytest.CaptureFixture[str]) -> None:
    closest = r"\(closest: RTX 4090, RTX 3090, RTX A6000\)"
    with pytest.raises(GpupredError, match=rf"^unknown GPU 'RTX 4080' {closest}; known: ") as err:
        gpu_spec("RTX 4080")
    assert "hardware.py" not in str(err.value) and "\n" not in str(err.value)


def test_the_hardware_tables_rates_are_complete() -> None:
    """Every GPU has every rate; on Ampere, Ada and Hopper the dense FP16 tensor rate (FP32 accumulate) is the BF16 one
    (the datasheets); a tensor-core rate is never below FP32's."""
    table = known_gpus()
    rates = ["tflops_fp32", "tflops_tf32", "tflops_bf16", "tflops_fp16"]
    assert (table[rates + ["sm_count", "memory_gb", "mem_bw_gbs"]] > 0).all().all()
    modern = table[table["architecture"].isin(["ampere", "ada", "hopper"])]
    assert (modern["tflops_fp16"] == modern["tflops_bf16"]).all() and len(modern) == 16
    assert (table["tflops_fp16"] >= table["tflops_fp32"]).all() and (table["tflops_tf32"] >= table["tflops_fp32"]).all()


def test_a_gpu_found_once_is_found_again_and_extra_gpus_stay_scoped() -> None:
    """gpu_spec keeps what it found per name and extra GPUs: a calibration's extra GPU is known inside its block
    only, before and after a lookup kept from inside it (FIXTURE spec: made-up peaks)."""
    from gpupred.errors import GpupredError
    from gpupred.hardware import GpuSpec, extra_gpus, gpu_spec

    fixture = GpuSpec("Fixture GPU 7", 10, 16.0, 500.0, 10.0, 20.0, 40.0)
    assert gpu_spec("NVIDIA H100 80GB HBM3") is gpu_spec("h100 sxm")
    for _ in range(2):
        with pytest.raises(GpupredError, match="unknown GPU"):
            gpu_spec("Fixture GPU 7")
        with extra_gpus([(fixture, "ampere")]):
            assert gpu_spec("Fixture GPU 7") == fixture and gpu_spec("fixture gpu 7") == fixture
