"""No option of ``gpupred predict`` (nor of ``Predictor.predict``) is ever ignored: every option, against every kind of
input (an ONNX file, a workload id, ``--hf``, ``--timm``), changes the answer or is refused in one line.

Predictions come from the committed predictor (models/predictor.joblib): they are predictions, not measurements.
Inputs are FIXTURES made here: a gunzipped copy of the graph store's ViT-B/16 graph (it has convolutions and
attention, so every setup option has something to act on), its catalog workload id, a tiny Hugging Face ViT
config.json written by the test (exported in seconds), and timm's smallest ViT (a real export: ``slow``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpupred.errors import GpupredError
from gpupred.predictor.answer import point_columns
from gpupred.setups import setup_of
from gpupred.workloads.hubmodels import NamedModel
from fixtures_cli import run_cli

REPO = Path(__file__).resolve().parents[1]
GPU = "H100 SXM"
WORKLOAD = "vit.vit_b_16-bs32-img224-fp32-sgd"
TARGETS = ("gpu_util", "sm_active", "memory_mib", "iter_time_mean_s", "samples_per_s")
TINY_VIT = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256, "image_size": 64,
            "patch_size": 8, "num_channels": 3, "num_labels": 10}
TIMM = "vit_tiny_patch16_224"

# option -> (CLI flags, what the Python API takes: job keywords, setup options, or the named model's keywords)
OPTIONS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "batch_size": (["-b", "64"], {"batch_size": 64}),
    "precision": (["--precision", "bf16"], {"precision": "bf16"}),
    "optimizer": (["--optimizer", "adam"], {"optimizer": "adam"}),
    "optimizer_impl": (["--optimizer-impl", "fused"], {"setup": {"optimizer_impl": "fused"}}),
    "no_momentum": (["--no-momentum"], {"setup": {"sgd_momentum": False}}),
    "weight_decay": (["--weight-decay", "0.1"], {"setup": {"weight_decay": 0.1}}),
    "tf32": (["--tf32"], {"setup": {"tf32_matmul": True, "tf32_conv": True}}),
    "no_tf32": (["--no-tf32"], {"setup": {"tf32_matmul": False, "tf32_conv": False}}),
    "checkpointing": (["--checkpointing"], {"setup": {"checkpointing": True}}),
    "accumulation": (["--accumulation", "2"], {"setup": {"accumulation": 2}}),
    "attention": ([], {}),  # per input: the kernel it does not run by default (KINDS)
    "channels_last": (["--channels-last"], {"setup": {"channels_last": True}}),
    "head": (["--head", "masked-lm"], {"named": {"head": "masked-lm"}}),  # ViTs have no masked-LM head
    "seq_len": (["--seq-len", "64"], {"named": {"seq_len": 64}}),  # images have no sequence length
    "image_size": (["--image-size", "96"], {"named": {"image_size": 96}}),
}
# input kind -> the attention kernel that differs from the graph's own (the store's and timm's ViTs call
# scaled_dot_product_attention, fused by default; Hugging Face's is built with transformers' default, SDPA, and
# --attention eager rebuilds it eager)
KINDS: dict[str, str] = {"file": "eager", "workload_id": "eager", "hf": "eager", "timm": "eager"}
# the cells refused: model options do not go with a graph or a workload id, nor with a model that lacks them
REFUSED = {(kind, option) for kind in ("file", "workload_id") for option in ("head", "seq_len", "image_size")}
REFUSED |= {(kind, option) for kind in ("hf", "timm") for option in ("head", "seq_len")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The FIXTURE inputs, the committed predictor (loaded once; the CLI is handed it) and a cache folder of the
    test's own for the named models' graphs."""
    import gpupred.predictor.loading as loading
    from gpupred import config

    root = tmp_path_factory.mktemp("options")
    onnx = root / "vit_b_16.onnx"
    onnx.write_bytes(gzip.decompress((config.GRAPHS / "vit.vit_b_16-img224.onnx.gz").read_bytes()))
    (root / "tiny-vit").mkdir()
    (root / "tiny-vit" / "config.json").write_text(json.dumps(TINY_VIT))
    predictor = loading.load_predictor(REPO / "models" / "predictor.joblib")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config, "ONNX_CACHE", root / "cache")
        mp.setattr(loading, "load_predictor", lambda path=None: predictor)
        yield {"file": str(onnx), "hf": str(root / "tiny-vit"), "predictor": predictor}


_cli = run_cli  # gpupred in this process: exit code, stdout, stderr


def _cli_args(kind: str, option: str | None, inputs: dict[str, Any]) -> list[str]:
    """``gpupred predict`` of the input kind at its base (fp32, SGD, batch 32), with one option."""
    flags = (["--attention", KINDS[kind]] if option == "attention" else OPTIONS[option][0]) if option else []
    model = {"file": [inputs["file"]], "workload_id": [WORKLOAD], "hf": ["--hf", inputs["hf"]],
             "timm": ["--timm", TIMM]}[kind]
    batch = [] if kind == "workload_id" or "-b" in flags else ["-b", "32"]
    return ["predict", *model, *batch, *flags, "--gpu", GPU, "--no-calibration", "--json"]


def _api(kind: str, option: str | None, inputs: dict[str, Any]) -> dict[str, float]:
    """``Predictor.predict`` of the input kind at its base, with one option (what the CLI's flags say)."""
    import gpupred

    given = ({"setup": {"attention": KINDS[kind]}} if option == "attention" else OPTIONS[option][1]) if option else {}
    named = given.get("named", {})
    if named and kind in ("file", "workload_id"):
        raise GpupredError("the Python API has no model options for a graph or a workload id")  # no such keyword
    x = {"file": inputs["file"], "workload_id": WORKLOAD}.get(kind)
    if x is None:  # timm_model's keywords other than the image size go to timm: the NamedModel says them all
        x = gpupred.hf_model(inputs["hf"], **named) if kind == "hf" else NamedModel("timm", TIMM, **named)
    kwargs: dict[str, Any] = {k: v for k, v in given.items() if k in ("batch_size", "precision", "optimizer")}
    if kind != "workload_id":
        kwargs.setdefault("batch_size", 32)
    if "setup" in given:
        kwargs.update(precision="fp32", setup=setup_of("fp32", "sgd", **given["setup"]))
    row = inputs["predictor"].predict(x, gpu=GPU, calibration=False, **kwargs).iloc[0]
    return {t: float(row[t]) for t in TARGETS}


def _changed(a: dict[str, float], b: dict[str, float]) -> bool:
    """Whether any figure differs (both printed, or both computed, the same way)."""
    return any(a[t] != b[t] for t in TARGETS)


CELLS = [pytest.param(kind, option, id=f"{kind}-{option}", marks=[pytest.mark.slow] if kind == "timm" else [])
         for kind in KINDS for option in OPTIONS]


@pytest.mark.parametrize(("kind", "option"), CELLS)
def test_every_option_changes_the_answer_or_is_refused(kind: str, option: str, inputs: dict[str, Any],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI and the Python API agree, cell by cell: a different answer than the input's base, or one line (exit 2
    on the command line)."""
    code, out, err = _cli(_cli_args(kind, option, inputs), capsys)
    if (kind, option) in REFUSED:
        assert code == 2 and err.startswith("gpupred: error: ") and err.count("\n") == 1, (code, out, err)
        if kind in ("hf", "timm"):  # the Python API has these keywords only for named models
            with pytest.raises(GpupredError):
                _api(kind, option, inputs)
        return
    assert code == 0, err
    cli = {t: float(v) for t, v in point_columns(json.loads(out)).items() if t in TARGETS}
    base_code, base_out, base_err = _cli(_cli_args(kind, None, inputs), capsys)
    assert base_code == 0, base_err
    base = {t: float(v) for t, v in point_columns(json.loads(base_out)).items() if t in TARGETS}
    assert _changed(cli, base), f"{kind} {option}: the answer did not change"
    api = _api(kind, option, inputs)
    assert _changed(api, _api(kind, None, inputs))
    assert all(abs(api[t] - cli[t]) <= 1e-3 * max(abs(api[t]), 1.0) for t in TARGETS), (api, cli)


def test_a_workload_ids_batch_precision_and_optimizer_are_defaults(inputs: dict[str, Any],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Overriding an id's batch, precision and optimizer answers exactly as the id that says them (the store's graphs
    have a symbolic batch); the text names what differs from the id."""
    p = inputs["predictor"]
    base = "resnet.resnet50-bs64-img224-bf16-sgd"
    moved = p.predict(base, batch_size=128, precision="fp32", optimizer="adam", gpu="L4", calibration=False)
    same = p.predict("resnet.resnet50-bs128-img224-fp32-adam", gpu="L4", calibration=False)
    assert moved.equals(same)
    plain = p.predict(base, gpu="L4", calibration=False)
    assert moved["memory_mib"].iloc[0] > plain["memory_mib"].iloc[0]
    code, out, err = _cli(["predict", base, "--gpu", "L4", "--no-calibration", "-b", "128", "--precision", "fp32",
                           "--optimizer", "adam"], capsys)
    assert code == 0, err
    assert "changed      batch_size=128, precision=fp32, optimizer=adam (from the job's own)" in out
    code, out, _ = _cli(["predict", base, "--gpu", "L4", "--no-calibration", "--precision", "bf16", "-b", "64"], capsys)
    assert code == 0 and "changed      none (from the job's own)" in out  # the id's own values: nothing differs


def test_a_setup_for_a_workload_id_must_say_its_precision(inputs: dict[str, Any]) -> None:
    """A ``TrainingSetup()`` (fp32 by default) given for a bf16 id is refused, not taken to mean fp32 unasked; with
    ``precision`` said it applies, and agrees with the id that says it."""
    from gpupred.setups import TrainingSetup

    p = inputs["predictor"]
    base = "resnet.resnet50-bs64-img224-bf16-sgd"
    with pytest.raises(GpupredError, match=r"^resnet\.resnet50-bs64-img224-bf16-sgd: the setup's precision 'fp32'"):
        p.predict(base, gpu="L4", setup=TrainingSetup(checkpointing=True))
    said = p.predict(base, gpu="L4", precision="fp32", setup=TrainingSetup(checkpointing=True), calibration=False)
    same = p.predict(base.replace("bf16", "fp32"), gpu="L4", setup=TrainingSetup(checkpointing=True), calibration=False)
    assert said.equals(same)
    with pytest.raises(GpupredError, match="disagrees with the setup's"):
        p.predict(base, gpu="L4", precision="fp16", setup=setup_of("bf16", "sgd"))


@pytest.mark.parametrize(("args", "message"), [
    (["resnet.resnet50-bs64-img224-bf16-sgd", "--tf32"], "TF32 applies to fp32 matmuls and convolutions only"),
    (["resnet.resnet50-bs64-img224-bf16-sgd", "--optimizer", "adam", "--no-momentum"], "no momentum is an SGD option"),
    (["resnet.resnet50-bs64-img224-bf16-sgd", "--attention", "sdpa"], "the graph has no attention"),
    (["hfbert.bert_base-bs8-seq512-fp32-sgd", "--channels-last"], "the graph has no convolutions"),
    (["--timm", "resnet50", "--gpu", "L4"], "give the training batch size"),
])
def test_options_that_cannot_apply_are_refused_in_one_line(args: list[str], message: str, inputs: dict[str, Any],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Options that would change nothing for the job (or a model by name without its batch) are one line, exit 2,
    naming the model."""
    code, out, err = _cli(["predict", *args, "--no-calibration"], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, (code, out, err)
    assert args[0].lstrip("-") in err or args[1] in err


def test_feature_rows_refuse_the_batch_size_they_carry(inputs: dict[str, Any]) -> None:
    """A featurize row carries its batch size: another one is refused rather than dropped."""
    from gpupred.graph.features import featurize

    row = featurize(inputs["file"], batch_size=8)
    with pytest.raises(GpupredError, match="feature rows carry their own"):
        inputs["predictor"].predict(row, batch_size=16, gpu=GPU)
