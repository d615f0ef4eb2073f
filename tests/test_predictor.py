"""The exported predictor: round trip, every loader refusal, CLI, and no torch on the light path.

Artifacts here are trained on FIXTURE frames (toy formula) in temporary folders; never models/.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError
from gpupred.predictor.loading import load_predictor
from gpupred.predictor.predictor import Predictor
from gpupred.predictor.training import export_predictor, train_predictor

TESTS = Path(__file__).resolve().parent
KEYS = ["gpu_util", "gpu_util_low", "gpu_util_high", "memory_mib", "memory_mib_low", "memory_mib_high"]


@pytest.fixture(scope="module")
def fixture_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FIXTURE predictor artifact (trained on toy data, meaningless predictions)."""
    df = fixture_dataset(n_batch_sizes=2)
    predictor = train_predictor(df, models="ridge", tune=False, n_folds=3)
    return export_predictor(predictor, df, tmp_path_factory.mktemp("models") / "predictor.joblib", heldout={"fixture": True})


def _copy(src: Path, dst_dir: Path) -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    for suffix in (".joblib", ".json"):
        (dst_dir / f"predictor{suffix}").write_bytes(src.with_suffix(suffix).read_bytes())
    return dst_dir / "predictor.joblib"


def test_round_trip_and_card(fixture_artifact: Path) -> None:
    p = load_predictor(fixture_artifact)
    assert isinstance(p, Predictor)
    card = json.loads(fixture_artifact.with_suffix(".json").read_text())
    for key in ("schema_version", "variant", "answers", "core", "heldout", "baseline", "training_data",
                "library_versions", "sha256"):
        assert key in card
    assert card["heldout"] == {"fixture": True}
    assert card["baseline"]["targets"]["gpu_util"]["transform"] == "log1p"
    assert card["baseline"]["feature_names"] == p.feature_names
    df = fixture_dataset(n_batch_sizes=1).head(5)
    out = p.predict(df)
    assert list(out.columns[:6]) == KEYS and {"sm_active", "sm_active_low", "sm_active_high"} <= set(out.columns)
    assert (out["gpu_util_low"] <= out["gpu_util"]).all() and (out["gpu_util"] <= out["gpu_util_high"]).all()
    assert (out["gpu_util_high"] <= 100).all()
    # graph features only (no hardware columns): GPU from the argument or the single trained GPU
    graph_only = df[p.graph_features]
    pd.testing.assert_frame_equal(p.predict(graph_only, precision="fp32"), p.predict(graph_only, gpu="h100", precision="fp32"))
    assert not p.predict(graph_only, gpu="A100 80GB PCIe").equals(p.predict(graph_only, gpu="h100"))


def test_the_regressors_stay_packed_until_feature_rows_ask(fixture_artifact: Path) -> None:
    """A loaded artifact keeps its baseline regressors compressed; the first feature rows unpack them, and they
    answer as the predictor that was exported does (FIXTURE artifact)."""
    from gpupred.predictor.predictor import TARGETS_PAYLOAD

    df = fixture_dataset(n_batch_sizes=2)
    trained = train_predictor(df, models="ridge", tune=False, n_folds=3)
    p = load_predictor(fixture_artifact)
    assert TARGETS_PAYLOAD in vars(p) and "targets" not in vars(p)
    rows = fixture_dataset(n_batch_sizes=1).head(7)
    pd.testing.assert_frame_equal(p.predict(rows), trained.predict(rows), check_exact=True)
    assert "targets" in vars(p) and TARGETS_PAYLOAD not in vars(p)
    with pytest.raises(AttributeError, match="no attribute 'nothing_'"):
        p.nothing_  # noqa: B018 (only ``targets`` is unpacked on first use)


def test_a_graph_job_never_unpacks_the_regressors() -> None:
    """The committed predictor answers a job given as a graph from its core alone: loading and answering never
    decompress the baseline regressors (0.12 s of a cold ``gpupred predict FILE``)."""
    from gpupred.predictor.predictor import TARGETS_PAYLOAD

    p = load_predictor(TESTS.parent / "models" / "predictor.joblib")
    p.answer("resnet.resnet50-bs64-img224-bf16-sgd", gpu="H100 SXM")
    assert TARGETS_PAYLOAD in vars(p) and "targets" not in vars(p)


def test_reexport_of_the_same_predictor_keeps_its_card(tmp_path: Path) -> None:
    """make all on unchanged data leaves the committed card alone (same creation time); new data rewrites it."""
    df = fixture_dataset(n_batch_sizes=2)
    path = tmp_path / "predictor.joblib"
    export_predictor(train_predictor(df, models="ridge", tune=False, n_folds=3), df, path)
    card = json.loads(path.with_suffix(".json").read_text())
    card["created_at"] = "2000-01-01T00:00:00Z"
    path.with_suffix(".json").write_text(json.dumps(card))
    export_predictor(train_predictor(df, models="ridge", tune=False, n_folds=3), df, path)
    assert json.loads(path.with_suffix(".json").read_text())["created_at"] == "2000-01-01T00:00:00Z"
    load_predictor(path)
    fewer = df.iloc[: len(df) // 2]
    export_predictor(train_predictor(fewer, models="ridge", tune=False, n_folds=3), fewer, path)
    assert json.loads(path.with_suffix(".json").read_text())["created_at"] != "2000-01-01T00:00:00Z"
    load_predictor(path)


def test_predict_input_errors(fixture_artifact: Path, tmp_path: Path) -> None:
    p = load_predictor(fixture_artifact)
    with pytest.raises(GpupredError, match="lacks graph features"):
        p.predict(pd.DataFrame([{"flops_fwd": 1.0}]))
    with pytest.raises(GpupredError, match="neither an ONNX file nor a workload id"):
        p.predict("no-such-thing")
    with pytest.raises(GpupredError, match="no such ONNX file"):
        p.predict(str(tmp_path / "absent.onnx"), batch_size=8)
    with pytest.raises(GpupredError, match="unknown GPU"):
        p.predict(fixture_dataset(n_batch_sizes=1).head(1)[p.graph_features], gpu="Voodoo")


def test_missing_default_artifact_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpupred import config

    monkeypatch.setattr(config, "PREDICTOR", tmp_path / "models" / "predictor.joblib")
    with pytest.raises(GpupredError) as err:
        load_predictor()
    assert str(err.value) == "no predictor at models/predictor.joblib: `make all` exports one (notebook 08) from the measurements it has"


def test_refuses_tampered_file(fixture_artifact: Path, tmp_path: Path) -> None:
    path = _copy(fixture_artifact, tmp_path)
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(GpupredError, match="sha256 does not match"):
        load_predictor(path)


def test_refuses_missing_or_broken_card(fixture_artifact: Path, tmp_path: Path) -> None:
    path = _copy(fixture_artifact, tmp_path)
    path.with_suffix(".json").write_text("{not json")
    with pytest.raises(GpupredError, match="not valid JSON"):
        load_predictor(path)
    path.with_suffix(".json").unlink()
    with pytest.raises(GpupredError, match="card missing"):
        load_predictor(path)


def test_refuses_unknown_schema(fixture_artifact: Path, tmp_path: Path) -> None:
    path = _copy(fixture_artifact, tmp_path)
    card = json.loads(path.with_suffix(".json").read_text())
    card["schema_version"] = 99
    path.with_suffix(".json").write_text(json.dumps(card))
    with pytest.raises(GpupredError, match="unknown predictor schema version 99"):
        load_predictor(path)


def test_refuses_version_mismatch(fixture_artifact: Path, tmp_path: Path) -> None:
    path = _copy(fixture_artifact, tmp_path)
    card = json.loads(path.with_suffix(".json").read_text())
    card["library_versions"]["scikit-learn"] = "0.0.1"
    path.with_suffix(".json").write_text(json.dumps(card))
    with pytest.raises(GpupredError, match="built with scikit-learn 0.0.1"):
        load_predictor(path)


def test_refuses_an_artifact_whose_classes_this_gpupred_lacks(fixture_artifact: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An artifact exported by a gpupred whose classes have since moved (FIXTURE: a class in a module that is gone)
    gets one line naming the module and the remedy, not an unpickling traceback."""
    import sys
    import types

    import joblib

    from gpupred.files import sha256

    gone = types.ModuleType("gpupred_fixture_gone")
    gone.Thing = type("Thing", (), {"__module__": "gpupred_fixture_gone"})
    monkeypatch.setitem(sys.modules, "gpupred_fixture_gone", gone)
    path = _copy(fixture_artifact, tmp_path)
    joblib.dump(gone.Thing(), path)
    monkeypatch.delitem(sys.modules, "gpupred_fixture_gone")
    card = json.loads(path.with_suffix(".json").read_text())
    card["sha256"] = sha256(path)
    path.with_suffix(".json").write_text(json.dumps(card))
    with pytest.raises(GpupredError, match=r"another gpupred \(it refers to gpupred_fixture_gone,.*re-export"):
        load_predictor(path)


def test_refusals_are_one_line(fixture_artifact: Path, tmp_path: Path) -> None:
    path = _copy(fixture_artifact, tmp_path)
    path.write_bytes(b"tampered")
    result = _cli("predict", str(_tiny_onnx(tmp_path / "x.onnx")), "--batch-size", "8", "--predictor", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "sha256 does not match" in result.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``gpupred.cli.main`` with only this stage's commands attached (other stages may not have landed)."""
    code = ("import sys; from gpupred import cli; from gpupred.cli.predict import register; register(cli.app); "
            "cli.app.command('noop')(lambda: None); "
            "cli._register = lambda: None; cli.main(sys.argv[1:])")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def _tiny_onnx(path: Path) -> Path:
    """A two-layer MLP graph built with onnx.helper (no torch, no weights needed)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w1 = numpy_helper.from_array(np.zeros((16, 32), np.float32), "w1")
    w2 = numpy_helper.from_array(np.zeros((32, 4), np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("MatMul", ["a", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_no_torch_on_the_light_path(fixture_artifact: Path, tmp_path: Path) -> None:
    feats = tmp_path / "features.parquet"
    fixture_dataset(n_batch_sizes=1).head(4).to_parquet(feats)
    onnx_path = _tiny_onnx(tmp_path / "tiny.onnx")
    code = textwrap.dedent(f"""
        import sys
        import pandas as pd
        import gpupred
        p = gpupred.load_predictor({str(fixture_artifact)!r})
        out = p.predict(pd.read_parquet({str(feats)!r}))
        assert len(out) == 4
        p.predict({str(onnx_path)!r}, batch_size=8)
        assert "torch" not in sys.modules, "torch was imported"
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_predict_from_onnx_and_cli_json(fixture_artifact: Path, tmp_path: Path) -> None:
    onnx_path = _tiny_onnx(tmp_path / "tiny.onnx")
    out = load_predictor(fixture_artifact).predict(onnx_path, batch_size=8, precision="bf16")
    assert len(out) == 1 and (out["memory_mib"] > 0).all()
    result = _cli("predict", str(onnx_path), "--batch-size", "8", "--json", "--predictor", str(fixture_artifact))
    assert result.returncode == 0, result.stderr
    from gpupred.predictor.answer import point_columns, validate_answer

    answer = json.loads(result.stdout)  # the answer contract (gpupred.predictor.answer)
    validate_answer(answer)
    assert answer["inputs"]["answered_by"] == "regressor" and answer["figures"]["memory"]["low"] is not None
    assert {"gpu_util", "memory_mib"} <= set(point_columns(answer))


def test_card_lists_sources_licences_and_the_inherited_restriction(tmp_path: Path) -> None:
    """A predictor trained on (FIXTURE rows claiming to be) Lucid rows says non-commercial in its card."""
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=1,
                         sources={"NVIDIA GeForce RTX 3090": "lucid"})
    df.loc[df["source"] == "lucid", ["sync", "sync_kernel"]] = ["kernel", 1.0]
    path = export_predictor(train_predictor(df, models="ridge", tune=False, n_folds=3), df, tmp_path / "p.joblib")
    card = json.loads(path.with_suffix(".json").read_text())
    assert "non-commercial" in card["usage_restriction"].lower() and "S-Lab" in card["usage_restriction"]
    assert card["sources"]["lucid"]["n_runs"] == (df["source"] == "lucid").sum()
    assert "S-Lab License 1.0" in card["sources"]["lucid"]["licence"] and len(card["sources"]["lucid"]["commit"]) == 40
    assert "own measurements" in card["sources"]["gpupred"]["licence"]
    assert "workload-grouped" in card["baseline"]["targets"]["gpu_util"]["interval"]
    p = load_predictor(path)
    rows = df[df["source"] == "lucid"].head(3)
    as_measured = p.features(rows)
    assert (as_measured["sync_kernel"] == 1).all()  # dataset rows keep how their source measured
    as_new_job = p.features(rows[p.graph_features], gpu="NVIDIA GeForce RTX 3090", precision="fp32")
    assert (as_new_job["sync_kernel"] == 0).all() and (as_new_job["is_fp16"] == 0).all()  # a new job: our protocol
    own_only = fixture_dataset(n_batch_sizes=1)
    card2 = json.loads(export_predictor(train_predictor(own_only, models="ridge", tune=False, n_folds=3), own_only,
                                        tmp_path / "q.joblib").with_suffix(".json").read_text())
    assert card2["usage_restriction"] == ""
