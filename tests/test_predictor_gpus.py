"""GPUs the predictor knows, measured or not: strict names, extrapolation marked and widened, `gpupred gpus`,
and the licence-clean default artifact beside the non-commercial one.

Every artifact here is trained on FIXTURE frames (toy formula, meaningless predictions) in temporary folders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError
from gpupred.hardware import gpu_spec, known_gpu_names
from gpupred.predictor.loading import load_predictor
from gpupred.predictor.training import export_predictor, train_predictor
from gpupred.predictor.card import LICENCE_CLEAN, WITH_IMPORTS, licence_clean
from gpupred.learn.conformal import conformal_quantile, widen
from gpupred.predictor.extrapolate import BASIS_FAMILY, BASIS_GPU, unseen_gpu_width

REPO = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def h100_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FIXTURE artifact trained on one GPU kind (H100 SXM)."""
    df = fixture_dataset(gpus=(H100,), n_batch_sizes=2)
    return export_predictor(train_predictor(df, models="ridge", tune=False, n_folds=3), df,
                            tmp_path_factory.mktemp("models") / "predictor.joblib")


@pytest.mark.parametrize("name", ["RTX 3090 Ti", "NVIDIA A1000", "NVIDIA H200 NVL", "3dfx Voodoo 5", "mi300x"])
def test_a_gpu_name_not_in_the_table_is_refused_naming_the_known_ones(name: str) -> None:
    with pytest.raises(GpupredError, match="unknown GPU.*known: H200, H100 NVL"):
        gpu_spec(name)


def test_nvml_and_table_names_resolve_and_every_table_name_is_its_own() -> None:
    assert gpu_spec("NVIDIA A100-PCIE-40GB").name == "A100 40GB"
    assert gpu_spec("Tesla V100-PCIE-32GB").name == "V100 PCIe"
    assert gpu_spec("Tesla V100-PCIE-16GB").name == "V100 PCIe 16GB"  # NVML's name for the 16 GB card
    assert (gpu_spec("Tesla V100-PCIE-16GB").memory_gb, gpu_spec("Tesla V100-PCIE-32GB").memory_gb) == (16, 32)
    assert gpu_spec("4090").name == "RTX 4090" and gpu_spec("NVIDIA GeForce RTX 3090").name == "RTX 3090"
    assert gpu_spec("3090").name == "RTX 3090"  # the bare model number a user types
    assert gpu_spec("NVIDIA H100 NVL").name == "H100 NVL"
    assert [gpu_spec(n).name for n in known_gpu_names()] == known_gpu_names()


@pytest.mark.parametrize("name", ["H100 PCI", "h100 pci-e", "H100 PCI E", "NVIDIA H100 PCIe"])
def test_a_form_factor_the_user_names_is_the_one_matched(name: str) -> None:
    # "pci" was noise beside the bare "h100" pattern, so "H100 PCI" was answered as the SXM card (1.7x faster)
    assert gpu_spec(name).name == "H100 PCIe"
    assert gpu_spec("A100 PCI-E 80GB").name == "A100 PCIe 80GB" and gpu_spec("V100 PCI 16GB").name == "V100 PCIe 16GB"


def test_a_named_model_without_a_gpu_is_refused_before_its_export_naming_the_gpus_as_the_table_does(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`predict --hf ...` without --gpu, for the shipped predictor (trained on two GPU kinds), answers in one line at
    once with the table's names: the build and export never start (FIXTURE: a build stub that fails if called)."""
    import gpupred.graph.named as named
    from gpupred.cli import main

    def build(*args: Any) -> Any:
        raise AssertionError("the model was built before the missing GPU was said")

    shipped = REPO / "models" / "predictor.joblib"
    names = ", ".join(dict.fromkeys(gpu_spec(g).name for g in load_predictor(shipped).gpus))
    monkeypatch.setattr(named, "build_named", build)
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--hf", "llama", "-b", "1", "--no-calibration", "--predictor", str(shipped)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert f"trained on several GPUs ({names}): name the one the job runs on (--gpu NAME" in err
    assert "NVIDIA" not in err  # the table's names, not NVML's
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--hf", "llama", "-b", "0", "--gpu", "H100 SXM", "--no-calibration",
              "--predictor", str(shipped)])
    assert stop.value.code == 2 and "batch size must be a positive whole number, got 0" in capsys.readouterr().err


def test_runs_measured_by_others_on_a_gpu_are_not_said_to_be_none(capsys: pytest.CaptureFixture[str]) -> None:
    """The noncommercial predictor holds GPUMemNet's A100 runs (DCGM, no step times) but no run under this project's
    protocol there: its answer says both without contradicting itself (it said "N measured runs" and "no
    measurements on this GPU")."""
    from gpupred.cli import main

    main(["predict", "resnet.resnet18-bs32-img224-fp32-sgd", "--gpu", "A100 40GB", "--noncommercial",
          "--no-calibration"])
    out = capsys.readouterr().out
    runs = int(out.split("A100 40GB, 40 GiB, ")[1].split(" measured runs")[0].replace(",", ""))
    assert runs > 0 and "extrapolated (no measurements on this GPU under this project's protocol" in out


def test_conformal_quantile_is_the_ceil_rank() -> None:
    r = np.arange(1.0, 20.0)  # 19 residuals: ceil(0.9 * 20) = 18th smallest
    assert conformal_quantile(r, 0.1) == 18.0
    assert conformal_quantile(-r, 0.1) == 18.0  # absolute values
    assert conformal_quantile(np.ones(5), 0.1) == float("inf")  # too few for a 90% quantile


def test_widen_only_touches_the_extrapolated_rows_and_never_narrows() -> None:
    point, low, high = np.array([50.0, 50.0, 50.0]), np.array([10.0, 45.0, 45.0]), np.array([90.0, 55.0, 55.0])
    lo, hi = widen(point, low, high, 0.5, np.array([True, True, False]))
    assert lo[0] == 10.0 and hi[0] == 90.0  # already wider than exp(±0.5)
    assert lo[1] == pytest.approx(np.expm1(np.log1p(50) - 0.5)) and hi[1] == pytest.approx(np.expm1(np.log1p(50) + 0.5))
    assert lo[2] == 45.0 and hi[2] == 55.0


def test_unseen_width_holds_out_gpu_kinds_when_there_are_two_else_families() -> None:
    from sklearn.linear_model import Ridge

    two = fixture_dataset(gpus=(H100, "NVIDIA GeForce RTX 3090"), n_batch_sizes=1)
    feats = ["flops_fwd", "params", "batch_size", "gpu_tflops_peak"]
    w2 = unseen_gpu_width(Ridge(), two[feats].to_numpy(float), two["gpu_util"].to_numpy(float), two["gpu"].to_numpy(),
                          two["family"].to_numpy(), 0.1)
    assert w2.basis == BASIS_GPU and w2.n_held_out == 2 and 0 < w2.width < np.inf
    one = two[two["gpu"] == "H100 SXM"]
    w1 = unseen_gpu_width(Ridge(), one[feats].to_numpy(float), one["gpu_util"].to_numpy(float), one["gpu"].to_numpy(),
                          one["family"].to_numpy(), 0.1)
    assert w1.basis == BASIS_FAMILY and w1.n_held_out == one["family"].nunique()


def test_a_gpu_without_measurements_is_answered_extrapolated_with_wider_intervals(h100_only: Path) -> None:
    p = load_predictor(h100_only)
    assert p.measured_gpus == {"H100 SXM": len(fixture_dataset(gpus=(H100,), n_batch_sizes=2))}
    rows = fixture_dataset(n_batch_sizes=1).head(6)[p.graph_features]
    seen = p.predict(rows, gpu="H100 SXM")
    unseen = p.predict(rows, gpu="NVIDIA A100-SXM4-80GB")
    assert not seen["extrapolated"].any() and unseen["extrapolated"].all()
    z = np.log1p(unseen["memory_mib"])
    width = p.unseen_widths["memory_mib"].width
    assert (np.log1p(unseen["memory_mib_high"]) >= z + width - 1e-9).all()
    assert (np.log1p(unseen["memory_mib_low"]) <= z - width + 1e-9).all()
    assert (unseen["gpu_util_high"] <= 100).all()
    with pytest.raises(GpupredError, match="unknown GPU 'RTX 3090 Ti'"):
        p.predict(rows, gpu="RTX 3090 Ti")
    card = json.loads(h100_only.with_suffix(".json").read_text())
    assert card["measured_gpus"] == p.measured_gpus and card["variant"] == LICENCE_CLEAN
    assert "leave-one-family-out" in card["baseline"]["extrapolation"]["interval"]["gpu_util"]


def test_cli_predict_says_extrapolated_and_gpus_lists_the_table(h100_only: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from gpupred import config
    from gpupred.cli import main

    models = tmp_path / "models"
    models.mkdir()
    for suffix in (".joblib", ".json"):
        (models / f"predictor{suffix}").write_bytes(h100_only.with_suffix(suffix).read_bytes())
    monkeypatch.setattr(config, "PREDICTOR", models / "predictor.joblib")
    monkeypatch.setattr(config, "PREDICTOR_NONCOMMERCIAL", models / "predictor-noncommercial.joblib")
    main(["gpus", "--json"])
    table = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(table) == set(known_gpu_names())
    assert table["H100 SXM"]["runs_default"] > 0 and table["H200"]["runs_default"] == 0
    assert table["H100 SXM"]["runs_noncommercial"] == 0  # no such artifact here
    onnx = tmp_path / "mlp.onnx"
    _tiny_mlp(onnx)
    main(["predict", str(onnx), "--batch-size", "8", "--gpu", "L4"])
    assert "extrapolated (no measurements on this GPU" in capsys.readouterr().out
    main(["predict", str(onnx), "--batch-size", "8", "--gpu", "H100 SXM", "--json"])
    assert json.loads(capsys.readouterr().out)["inputs"]["extrapolated"] is False


def _tiny_mlp(path: Path) -> None:
    """A FIXTURE ONNX graph: one Gemm + Relu with a symbolic batch, built with onnx.helper."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((16, 32), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(16, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])], "fixture",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_the_default_artifact_is_licence_clean_and_the_other_says_non_commercial(tmp_path: Path) -> None:
    df = fixture_dataset(gpus=(H100, "NVIDIA GeForce RTX 3090"), n_batch_sizes=1,
                         sources={"NVIDIA GeForce RTX 3090": "lucid"})
    own = licence_clean(df)
    assert set(own["source"]) == {"gpupred"} and len(own) == (df["source"] == "gpupred").sum()
    cards = {}
    for name, rows in (("predictor", own), ("predictor-noncommercial", df)):
        path = export_predictor(train_predictor(rows, models="ridge", tune=False, n_folds=3), rows, tmp_path / f"{name}.joblib")
        cards[name] = json.loads(path.with_suffix(".json").read_text())
    assert cards["predictor"]["variant"] == LICENCE_CLEAN and cards["predictor"]["usage_restriction"] == ""
    assert set(cards["predictor"]["sources"]) == {"gpupred"}
    assert cards["predictor-noncommercial"]["variant"] == WITH_IMPORTS
    assert "non-commercial" in cards["predictor-noncommercial"]["usage_restriction"].lower()
    assert "leave-one-GPU-kind-out" in cards["predictor-noncommercial"]["baseline"]["extrapolation"]["interval"]["gpu_util"]
    for card in cards.values():
        assert set(card["baseline"]["own_folds"]) >= {"gpu_util", "memory_mib"}
        assert all(0 < v["rmsle"] < 5 for v in card["baseline"]["own_folds"].values())


@pytest.fixture(scope="module")
def physics_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FIXTURE artifact with the physics core: toy labels on workloads whose graphs are in the graph store."""
    df = fixture_dataset(gpus=(H100,), n_batch_sizes=2)
    df = df[df["family"].isin(["resnet", "vgg"])].reset_index(drop=True)  # their ids' graphs are in data/graphs
    from gpupred.step.physics.columns import spec_step_columns
    from gpupred.workloads.spec import WorkloadSpec

    steps = [spec_step_columns(WorkloadSpec.from_id(w), g) for w, g in zip(df["workload_id"], df["gpu"])]
    df = df.assign(**pd.DataFrame(steps, index=df.index))
    predictor = train_predictor(df, models="ridge", tune=False, n_folds=3, physics=True)
    return export_predictor(predictor, df, tmp_path_factory.mktemp("models") / "predictor.joblib")


def test_a_graph_is_answered_by_physics_with_iteration_time_and_throughput(physics_artifact: Path) -> None:
    p = load_predictor(physics_artifact)
    job = "resnet.resnet18-bs16-img128-fp32-sgd"  # a batch size and image size the FIXTURE rows never had
    seen, unseen = p.predict(job, gpu="H100 SXM").iloc[0], p.predict(job, gpu="L4").iloc[0]
    for row in (seen, unseen):
        assert row["core"] == "physics"
        for t in ("gpu_util", "memory_mib", "iter_time_mean_s", "samples_per_s"):
            assert 0 < row[f"{t}_low"] <= row[t] <= row[f"{t}_high"], t
        assert row["samples_per_s"] == pytest.approx(16 / row["iter_time_mean_s"])
    assert not seen["extrapolated"] and unseen["extrapolated"]
    ratio = lambda r: r["iter_time_mean_s_high"] / r["iter_time_mean_s_low"]  # noqa: E731
    widths = p.core.step_.widths_["iter_time_mean_s"]
    width = widths.for_rows([False], [True])[0]  # a GPU of an unfitted architecture (Ada) under the fitted protocol
    arch = widths.fallback if np.isnan(widths.architecture) else widths.architecture
    assert width == max(arch, widths.fallback if np.isnan(widths.key) else widths.key)
    assert ratio(unseen) >= ratio(seen) * (1 - 1e-9) and ratio(unseen) >= np.exp(2 * width) * (1 - 1e-9)  # at least the width
    assert unseen["iter_time_mean_s"] > seen["iter_time_mean_s"]  # an L4 has a tenth of the H100's bandwidth
    frame = p.predict(fixture_dataset(gpus=(H100,), n_batch_sizes=1).head(2))
    assert (frame["core"] == "regressor").all()  # feature rows without a graph: the regressors
    card = json.loads(physics_artifact.with_suffix(".json").read_text())
    assert card["core"]["step"]["constants"] and "footprint_constants" in card["core"]["memory"]


def test_memory_of_a_larger_model_exceeds_every_training_label(physics_artifact: Path) -> None:
    """The footprint scales with the model: a job far bigger than any FIXTURE training row is not capped."""
    p = load_predictor(physics_artifact)
    biggest = fixture_dataset(gpus=(H100,), n_batch_sizes=2)["memory_mib"].max()
    big = p.predict("vgg.vgg16-bs512-img224-fp32-adam", gpu="H100 SXM").iloc[0]
    assert big["memory_mib"] > 2 * biggest


def test_a_graph_job_is_featurized_once_for_the_regressors_and_physics(physics_artifact: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One feature row serves both answers, with the workload's own precision (not the call's default)."""
    import gpupred.graph.features as features

    seen: list[str] = []
    real = features.featurize

    def counting(path_or_proto: Any, **kw: Any) -> dict[str, Any]:
        seen.append(kw["precision"])
        return real(path_or_proto, **kw)

    monkeypatch.setattr(features, "featurize", counting)
    out = load_predictor(physics_artifact).predict("resnet.resnet18-bs16-img128-bf16-sgd", gpu="H100 SXM")
    assert seen == ["bf16"] and out["core"].iloc[0] == "physics"


def test_training_setups_move_physics_answers_the_way_torch_runs_them(physics_artifact: Path) -> None:
    """The same job under other setups: checkpointing costs time and saves memory; two micro-batches per optimizer
    step take about twice the time and give the same throughput's order; channels_last drops the NCHW transposes;
    feature rows (the regressors) refuse options only the physics core models."""
    from gpupred.errors import GpupredError
    from gpupred.setups import setup_of

    p = load_predictor(physics_artifact)
    job = "resnet.resnet50-bs64-img224-bf16-sgd"

    def answer(**options: Any) -> pd.Series:
        return p.predict(job, gpu="H100 SXM", setup=setup_of("bf16", "sgd", **options)).iloc[0]

    base, ckpt, accum, nhwc = answer(), answer(checkpointing=True), answer(accumulation=2), answer(channels_last=True)
    assert ckpt["memory_mib"] < base["memory_mib"] and ckpt["iter_time_mean_s"] > base["iter_time_mean_s"]
    assert 1.6 < accum["iter_time_mean_s"] / base["iter_time_mean_s"] < 2.4
    assert accum["samples_per_s"] == pytest.approx(2 * 64 / accum["iter_time_mean_s"])
    assert nhwc["iter_time_mean_s"] < base["iter_time_mean_s"]
    adam = p.predict(job.replace("-sgd", "-adam"), gpu="H100 SXM").iloc[0]
    assert adam["memory_mib"] > base["memory_mib"]  # two moments against one momentum buffer
    with pytest.raises(GpupredError, match="physics core"):
        p.predict(fixture_dataset(gpus=(H100,), n_batch_sizes=1).head(1), setup=setup_of(checkpointing=True))


def test_a_failure_class_widens_the_interval_and_is_named(physics_artifact: Path) -> None:
    """ViT's attention exported from scaled_dot_product_attention runs fused; run as its ops (attention='eager') it
    is the eager-attention class: named in 'caveats', its step-time interval at least that class's width."""
    from gpupred.step.physics.caveats import CAVEATS
    from gpupred.setups import setup_of

    p = load_predictor(physics_artifact)
    job = "vit.vit_b_16-bs32-img224-bf16-adam"
    fused = p.predict(job, gpu="H100 SXM").iloc[0]
    eager = p.predict(job, gpu="H100 SXM", setup=setup_of("bf16", "adam", attention="eager")).iloc[0]
    assert fused["caveats"] == "" and eager["caveats"] == "eager_attention"
    assert eager["iter_time_mean_s"] > fused["iter_time_mean_s"]
    width = np.log(eager["iter_time_mean_s_high"] / eager["iter_time_mean_s"])
    assert width >= CAVEATS["eager_attention"].log_width - 1e-9
    card = json.loads(physics_artifact.with_suffix(".json").read_text())
    assert set(card["core"]["failure_classes"]) >= set(CAVEATS)
    assert card["core"]["training_setup"]["defaults"]["transformers_trainer"]["optimizer"].startswith("adamw_torch_fused")


def test_predict_cli_takes_the_setup_flags(physics_artifact: Path) -> None:
    """``gpupred predict`` with setup flags answers from physics, prints the options that differ from the sweeps'
    and the failure classes; a contradictory option is one line and exit 2."""
    import subprocess
    import sys

    def gpupred(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpupred.cli", "predict", *args, "--predictor", str(physics_artifact)],
                              capture_output=True, text=True, timeout=300)

    job = "vit.vit_b_16-bs32-img224-bf16-adam"
    out = gpupred(job, "--gpu", "H100 SXM", "--optimizer-impl", "fused", "--checkpointing", "--accumulation", "4",
                  "--attention", "eager", "--json")
    assert out.returncode == 0, out.stderr
    values = json.loads(out.stdout)  # the answer contract (gpupred.predictor.answer)
    assert values["inputs"]["answered_by"] == "physics" and values["caveats"] == ["eager_attention"]
    assert values["inputs"]["setup_changes"] == {"optimizer_impl": "fused", "checkpointing": True, "accumulation": 4,
                                                 "attention": "eager"}
    assert values["inputs"]["setup"]["checkpointing"] is True and values["inputs"]["setup"]["precision"] == "bf16"
    text = gpupred(job, "--gpu", "H100 SXM", "--channels-last")
    assert text.returncode == 0 and "changed      channels_last=True" in text.stdout
    bad = gpupred(job, "--gpu", "H100 SXM", "--attention", "flash", "--precision", "fp32")
    assert bad.returncode == 2 and "flash" in bad.stderr and "Traceback" not in bad.stderr
