"""One answer contract, versioned (issue 76 item 2): ``gpupred predict --json``, its text and ``Predictor.answer`` give
the same object, whose keys never come and go, for a file, a workload id, a feature row and a pipeline-fed job.

Predictions come from the committed predictor (models/predictor.joblib): they are predictions, not measurements. The
ONNX file is a FIXTURE made here: a gunzipped copy of the graph store's small BERT graph.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpupred.predictor.answer import (
    ANSWER_SCHEMA, MEMORY_PARTS, SCHEMA_ID, SECTIONS, TERM_PARTS, TIME_PARTS, render_text, validate_answer,
)
from gpupred.setups import InputPipeline

REPO = Path(__file__).resolve().parents[1]
GPU = "H100 SXM"
WORKLOAD = "resnet.resnet50-bs64-img224-bf16-sgd"
GRAPH = "bert.bert-v30522-m256-h4-l2-seq256.onnx.gz"  # 256 tokens a sample


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Answers of the committed predictor for every kind of input (the file a FIXTURE copy of a store graph)."""
    from gpupred import config, featurize
    from gpupred.predictor.loading import load_predictor

    onnx = tmp_path_factory.mktemp("answer") / "bert_small.onnx"
    onnx.write_bytes(gzip.decompress((config.GRAPHS / GRAPH).read_bytes()))
    predictor = load_predictor(REPO / "models" / "predictor.joblib")
    return {
        "file": predictor.answer(str(onnx), batch_size=8, gpu=GPU, calibration=False),
        "workload": predictor.answer(WORKLOAD, gpu=GPU, calibration=False),
        "features": predictor.answer(featurize(str(onnx), batch_size=8), gpu="L4", calibration=False),
        "pipeline": predictor.answer(WORKLOAD, gpu=GPU, calibration=False,
                                     pipeline=InputPipeline("image-files", num_workers=2)),
    }


MAPS = ("inputs.setup_changes.", "inputs.pipeline.changes.")  # maps of option -> value: data, not keys


def _keys(value: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value (lists by their first item; the option maps' entries left out)."""
    if prefix in MAPS:
        return set()
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{prefix}{k}"} | _keys(v, f"{prefix}{k}.")}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return _keys(value[0], f"{prefix}[].")
    return set()


def test_every_input_kind_gives_the_same_keys_and_keeps_the_schema(answers: dict[str, dict[str, Any]]) -> None:
    for kind, answer in answers.items():
        validate_answer(json.loads(json.dumps(answer)))  # as --json prints it
        assert answer["schema"] == SCHEMA_ID and isinstance(answer["caveats"], list), kind
    shared = ("schema", "inputs", "figures", "fit", "caveats")
    keys = {kind: _keys({k: a[k] for k in shared}) for kind, a in answers.items()}
    assert len({frozenset(k) for k in keys.values()}) == 1, keys
    assert set(answers["file"]) == set(answers["features"]) == set(ANSWER_SCHEMA["required"])
    graphs = [a for k, a in answers.items() if k != "features"]
    assert len({frozenset(_keys(a)) - {"time_breakdown.top_op_classes"} for a in graphs}) == 1
    # a feature row is answered by the regressors: no step time, no breakdowns, null not absent
    features = answers["features"]
    assert features["inputs"]["answered_by"] == "regressor" and features["figures"]["step_time"]["point"] is None
    assert features["memory_breakdown"] is None and features["time_breakdown"] is None
    assert features["fit"]["fits"] is not None and features["fit"]["gpu"] == "L4"  # the fit from its memory interval


def test_a_figure_the_answer_lacks_is_refused_by_the_schema(answers: dict[str, dict[str, Any]]) -> None:
    import jsonschema

    broken = json.loads(json.dumps(answers["file"]))
    del broken["fit"]["probability"]
    with pytest.raises(jsonschema.ValidationError):
        validate_answer(broken)
    broken = json.loads(json.dumps(answers["file"]))
    broken["inputs"]["extra"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_answer(broken)


def test_breakdowns_add_up_to_the_point_figures(answers: dict[str, dict[str, Any]]) -> None:
    for kind in ("file", "workload", "pipeline"):
        answer = answers[kind]
        mem, time = answer["memory_breakdown"], answer["time_breakdown"]
        assert set(mem["parts"]) == set(MEMORY_PARTS) and set(time["parts"]) == set(TIME_PARTS)
        assert sum(mem["parts"].values()) == pytest.approx(answer["figures"]["memory"]["point"], rel=1e-6)
        step_ms = answer["figures"]["step_time"]["point"]
        assert sum(time["parts"].values()) == pytest.approx(step_ms, rel=1e-6)
        for view in ("device_by_op_class", "device_by_phase"):
            assert sum(time[view].values()) == pytest.approx(time["parts"]["device_busy"], rel=1e-6), (kind, view)
        assert min(time["parts"].values()) >= 0
        assert min(v for k, v in mem["parts"].items() if k not in ("allocator", "learned_correction")) >= 0
        assert min(mem["parts"][k] for k in ("weights", "cuda_context")) > 0
        # the parts are the tensors live at the peak: the backward's holds activations, the optimizer step's every
        # gradient and no activation
        at_step = mem["peak"] == "optimizer step"
        assert (mem["parts"]["activations"] > 0) != at_step and (not at_step or mem["parts"]["gradients"] > 0)
        assert time["optimizer_step"]["device_ms"] == time["device_by_phase"]["optimizer"] > 0
        assert answer["figures"]["memory"]["point_gib"] == pytest.approx(answer["figures"]["memory"]["point"] / 1024)
    fed, resident = answers["pipeline"]["time_breakdown"], answers["workload"]["time_breakdown"]
    assert resident["input_pipeline"]["kind"] == "resident" and resident["input_pipeline"]["batch_make_ms"] is None
    assert resident["parts"]["input_stall"] == 0.0 and fed["input_pipeline"]["batch_make_ms"] > 0
    assert fed["input_pipeline"]["num_workers"] == 2 and fed["parts"]["input_stall"] > 0
    assert fed["parts"]["device_busy"] == pytest.approx(resident["parts"]["device_busy"], rel=0.05)


def test_the_inputs_are_resolved_and_echoed(answers: dict[str, dict[str, Any]]) -> None:
    from gpupred.setups import TrainingSetup

    file, workload, fed = answers["file"]["inputs"], answers["workload"]["inputs"], answers["pipeline"]["inputs"]
    assert file["model"]["kind"] == "file" and file["sequence_length"] == 256 and file["image_size"] is None
    assert workload["model"] == {"kind": "workload", "name": WORKLOAD, "class": None, "head": None}
    assert workload["image_size"] == [224, 224] and workload["batch_size"] == 64 and workload["parameters"] > 2e7
    assert set(workload["setup"]) == set(TrainingSetup().as_dict()) and workload["setup"]["precision"] == "bf16"
    assert workload["setup_changes"] == {} and workload["pipeline"]["resident"] is True
    assert fed["pipeline"]["kind"] == "image-files" and fed["pipeline"]["num_workers"] == 2
    assert workload["gpu"]["name"] == GPU and workload["gpu"]["measured_runs"] > 0 and not workload["extrapolated"]
    assert answers["features"]["inputs"]["model"]["kind"] == "features"


def test_the_cli_prints_the_contract_and_renders_every_section(tmp_path: Path) -> None:
    """``--json`` prints the answer of ``Predictor.answer``; the text shows every section; ``--gpu A100`` is shown
    resolved to the card the hardware table names."""
    import subprocess
    import sys

    def cli(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "gpupred.cli", "predict", WORKLOAD, "--no-calibration", *args],
                             capture_output=True, text=True, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    answer = json.loads(cli("--gpu", "A100", "--optimizer", "adam", "--json"))
    validate_answer(answer)
    assert answer["inputs"]["gpu"] == {"asked": "A100", "name": "A100 40GB", "memory_gib": 40.0,
                                       "measured_runs": answer["inputs"]["gpu"]["measured_runs"]}
    assert answer["inputs"]["setup_changes"] == {"optimizer": "adam"} and answer["fit"]["capacity_gib"] == 40.0
    text = cli("--gpu", "A100", "--optimizer", "adam")
    for section in SECTIONS:
        assert f"\n{section}:\n" in f"\n{text}", section
    assert "A100 40GB (asked: A100)" in text and "optimizer=adam" in text and "fits: yes" in text
    assert text.strip() == render_text(answer)


def test_the_time_breakdown_spreads_the_step_estimators_own_correction(answers: dict[str, dict[str, Any]]) -> None:
    """The timeline the breakdown splits is the one the step estimator corrected: its step time is the estimator's
    physics step time, so ``correction_factor`` is the learned correction itself."""
    from gpupred.predictor.jobs import JobOptions, resolve_graph
    from gpupred.predictor.loading import load_predictor
    from gpupred.predictor.core import job_frame

    predictor = load_predictor(REPO / "models" / "predictor.joblib")
    frame, physics = job_frame(resolve_graph(WORKLOAD, JobOptions(gpu=GPU)), GPU)
    _, step = predictor.core.step_.physics(frame, physics)
    time = answers["workload"]["time_breakdown"]
    assert time["physics_step_ms"] == pytest.approx(1000.0 * float(step[0]), rel=1e-9)
    assert time["correction_factor"] * time["physics_step_ms"] == pytest.approx(time["total"], rel=1e-9)


TINY_BERT = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 64, "num_hidden_layers": 1,
             "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 512, "max_position_embeddings": 64}


def test_a_cached_named_graph_is_answered_as_the_model_it_was_built_from(tmp_path: Path) -> None:
    """A named model's cached graph (here a FIXTURE: a store graph with a sidecar written as
    :func:`gpupred.graph.named.named_graph` writes one) answers as a named model, with its class and head."""
    from gpupred import config
    from gpupred.predictor.loading import load_predictor

    graph = tmp_path / "bert-fixture.onnx"
    graph.write_bytes(gzip.decompress((config.GRAPHS / GRAPH).read_bytes()))
    graph.with_suffix(".json").write_text(json.dumps({"key": "FIXTURE", "head": "masked-lm", "seq_len": 256,
                                                      "image_size": None, "config": {"class": "BertForMaskedLM"}}))
    answer = load_predictor(REPO / "models" / "predictor.joblib").answer(str(graph), batch_size=8, gpu=GPU,
                                                                          calibration=False)
    validate_answer(answer)
    assert answer["inputs"]["model"] == {"kind": "named", "name": str(graph), "class": "BertForMaskedLM",
                                         "head": "masked-lm"}
    assert answer["inputs"]["sequence_length"] == 256 and answer["inputs"]["image_size"] is None


@pytest.mark.slow
def test_a_named_model_answer_says_the_class_head_and_sequence_it_built(tmp_path: Path) -> None:
    """A Hugging Face model by name (a tiny BERT config.json written here, a FIXTURE exported in seconds) answers
    with the class and head it built and its sequence length."""
    pytest.importorskip("transformers")
    import gpupred
    from gpupred import config
    from gpupred.predictor.loading import load_predictor

    (tmp_path / "tiny-bert").mkdir()
    (tmp_path / "tiny-bert" / "config.json").write_text(json.dumps(TINY_BERT))
    predictor = load_predictor(REPO / "models" / "predictor.joblib")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config, "ONNX_CACHE", tmp_path / "cache")
        answer = predictor.answer(gpupred.hf_model(str(tmp_path / "tiny-bert"), seq_len=32), batch_size=4, gpu=GPU,
                                  calibration=False)
    validate_answer(answer)
    model = answer["inputs"]["model"]
    assert model["kind"] == "named" and model["class"] == "BertForMaskedLM" and model["head"] == "masked-lm"
    assert answer["inputs"]["sequence_length"] == 32 and answer["inputs"]["batch_size"] == 4
    assert "model        named hf " in render_text(answer) and ", class BertForMaskedLM, head masked-lm" in render_text(answer)


def test_memory_as_users_read_it_allocated_reserved_device(answers: dict[str, dict[str, Any]]) -> None:
    from gpupred.predictor.loading import load_predictor
    from gpupred.setups import setup_of

    mem = answers["workload"]["memory_breakdown"]
    seen, parts = mem["as_reported"], mem["parts"]
    assert seen["device"] == pytest.approx(mem["total"])
    assert 0 < seen["torch_allocated_peak"] < seen["torch_reserved_peak"] < seen["device"]
    # torch's figures are the physics' own; the learned correction is NVML's alone, a part of its own (that it moves
    # the device figure alone: test_the_learned_correction_moves_the_device_figure_alone)
    tensors = sum(parts[p] for p in TERM_PARTS.values())
    assert seen["torch_allocated_peak"] == pytest.approx(tensors, rel=1e-9)
    assert seen["torch_reserved_peak"] == pytest.approx(tensors + parts["allocator"], rel=1e-9)
    assert mem["analytic_mib"] == pytest.approx(tensors + parts["allocator"] + parts["cuda_context"], rel=1e-9)
    assert parts["learned_correction"] == pytest.approx(mem["analytic_mib"] * (mem["correction_factor"] - 1), rel=1e-9)
    predictor = load_predictor(REPO / "models" / "predictor.joblib")
    frame = predictor.predict(WORKLOAD, gpu=GPU, calibration=False).iloc[0]  # one truth: the predict frame's figures
    assert seen["torch_allocated_peak"] == pytest.approx(frame["memory_allocated_mib"])
    assert seen["torch_reserved_peak"] == pytest.approx(frame["memory_reserved_mib"])
    # paged optimizer states live in CUDA unified memory: NVML sees them, torch's allocator does not
    paged, plain = (predictor.answer(WORKLOAD, gpu=GPU, calibration=False, optimizer=o, setup=setup_of("bf16", o))
                    ["memory_breakdown"] for o in ("paged_adamw", "adamw"))
    gap = paged["as_reported"]["device"] - paged["as_reported"]["torch_reserved_peak"]
    assert gap > plain["as_reported"]["device"] - plain["as_reported"]["torch_reserved_peak"]
    assert gap > paged["parts"]["cuda_context"] + 0.5 * paged["parts"]["optimizer_state"]



def test_the_learned_correction_moves_the_device_figure_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped memory correction may be chosen as none (clip 0): a FIXTURE log-factor of 0.2 put in its place
    moves NVML's figure by exp(0.2) and reports it as the learned part, and leaves torch's two figures as they were."""
    import numpy as np

    from gpupred.memory.estimator import MemoryEstimator
    from gpupred.predictor.loading import load_predictor

    def ask() -> dict[str, Any]:
        predictor = load_predictor(REPO / "models" / "predictor.joblib")
        return predictor.answer(WORKLOAD, gpu=GPU, calibration=False)["memory_breakdown"]

    shipped = ask()
    monkeypatch.setattr(MemoryEstimator, "correction", lambda self, df, terms=None: np.full(len(df), 0.2))
    moved = ask()
    for figure in ("torch_allocated_peak", "torch_reserved_peak"):
        assert moved["as_reported"][figure] == pytest.approx(shipped["as_reported"][figure], rel=1e-12)
    assert moved["correction_factor"] == pytest.approx(np.exp(0.2))
    assert moved["as_reported"]["device"] == pytest.approx(moved["analytic_mib"] * np.exp(0.2))
    assert moved["parts"]["learned_correction"] == pytest.approx(moved["analytic_mib"] * (np.exp(0.2) - 1))

def test_the_memory_breakdown_is_the_predictions_own_and_equals_a_fresh_estimate() -> None:
    """The answer reads the memory estimator's parts kept from its own prediction (one pass, issue 74 item 5); they
    are what estimating the job afresh gives, to the bit, and they never reach the prediction's columns."""
    from gpupred.hardware import gpu_spec
    from gpupred.predictor.answer import memory_parts
    from gpupred.predictor.core import EXPLAINED_MEMORY
    from gpupred.predictor.loading import load_predictor
    from gpupred.predictor.jobs import JobOptions, resolve_graph

    predictor = load_predictor(REPO / "models" / "predictor.joblib")
    answer = predictor.answer(WORKLOAD, gpu=GPU, calibration=False)
    graph = resolve_graph(WORKLOAD, JobOptions(gpu=GPU))
    fresh = memory_parts(predictor.core.models_for(GPU)[1], graph, gpu_spec(GPU).name)
    assert answer["memory_breakdown"] == fresh
    frame = predictor.predict(WORKLOAD, gpu=GPU, calibration=False)
    assert EXPLAINED_MEMORY not in frame.columns and answer["figures"]["memory"]["point"] == frame["memory_mib"][0]


def test_a_cold_answer_from_a_graph_never_imports_pandas(tmp_path: Path) -> None:
    """``gpupred predict FILE --json`` in a fresh interpreter answers without importing pandas (issue 74 item 7: a cold
    predict <= 1.0 s; pandas and the pyarrow it loads were a third of it), and prints what ``Predictor.answer``
    gives; asking ``predict`` for its frame afterwards then imports it."""
    from fixtures_cli import run_python_fresh

    from gpupred import config

    onnx = tmp_path / "bert_small.onnx"
    onnx.write_bytes(gzip.decompress((config.GRAPHS / GRAPH).read_bytes()))
    code = ("import contextlib, io, json, sys\n"
            "from gpupred import cli\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            f"    cli.main(['predict', {str(onnx)!r}, '-b', '8', '--gpu', {GPU!r}, '--no-calibration', '--json'])\n"
            "print('pandas' in sys.modules, 'pyarrow' in sys.modules)\n"
            "from gpupred.predictor.loading import load_predictor\n"
            "p = load_predictor()\n"
            f"assert json.loads(out.getvalue()) == json.loads(json.dumps(p.answer({str(onnx)!r}, batch_size=8, "
            f"gpu={GPU!r}, calibration=False)))\n"
            f"frame = p.predict({str(onnx)!r}, batch_size=8, gpu={GPU!r}, calibration=False)\n"
            "print(len(frame), 'pandas' in sys.modules)\n")
    code_, out, err = run_python_fresh(code, cwd=REPO)
    assert code_ == 0, err[-2000:]
    assert out.split("\n")[:2] == ["False False", "1 True"], out
