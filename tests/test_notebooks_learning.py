"""Notebooks 03 (both), 04, 05, 08 on a FIXTURE dataset.parquet in a temporary GPUPRED_ROOT (never data)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_notebook_in
from fixtures_learning import write_fixture_dataset

from gpupred.reports import read_metrics

pytestmark = pytest.mark.notebook

NOTEBOOKS = ["03-compare-regressors", "03-physics-first", "04-explain", "05-memory", "08-export-predictor"]
SMALL = {
    "03-compare-regressors": {"targets": ["gpu_util", "memory_mib"], "models": ["ridge", "knn"], "n_outer": 3, "n_cal": 3,
                              "n_jobs": 1, "cross_gpu_targets": ["gpu_util"], "n_within": 3,
                              "compared": ["ridge", "decision_tree"],
                              "physics_targets": ["memory_mib"]},  # no step target: the OOF file keeps the regressors'
    "03-physics-first": {"targets": ["gpu_util", "memory_mib"], "models": ["ridge", "knn"], "n_outer": 3, "n_cal": 3,
                         "n_jobs": 1, "n_within": 3,
                         # the step model needs real graphs (tests/test_step.py); the memory footprint falls back to
                         # the feature row's activation_bytes without them
                         "physics_targets": ["memory_mib"],
                         "realworld": ["timm-resnet18", "hf-gpt2"]},  # two corpus graphs copied into the tree
    "04-explain": {"tree_models": ["decision_tree", "xgboost"], "n_permutations": 2, "top": 1, "physics_explain": False},
    "05-memory": {"n_folds": 2, "residual_model": "ridge"},
    "08-export-predictor": {"model": "ridge", "n_folds": 3, "tune": False,
                            "physics": False},  # FIXTURE workloads lack graphs: the core's test is test_predictor_gpus
}
TWO_SOURCES = {"gpus": ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), "n_batch_sizes": 2,
               "sources": {"NVIDIA GeForce RTX 3090": "lucid"}}
ITEM_6_FROM_03 = {"regressors_gpu_util_rmsle_grouped_random", "regressors_gpu_util_rmsle_lofo",
                  "regressors_gpu_util_rmsle_by_source", "regressors_gpu_util_coverage_grouped_random",
                  "regressors_gpu_util_coverage_lofo", "dataset_runs_all", "dataset_workloads_all", "dataset_sources"}
ITEM_6_FROM_05 = {"memory_median_rel_err", "memory_p90_rel_err", "memory_median_rel_err_horus"}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_missing_input_skips(name: str, run_notebook, tmp_path: Path) -> None:
    run_notebook(name, SMALL[name], allow_missing_input=True)
    summary = json.loads((tmp_path / "reports" / f"{name}.ipynb").read_text())
    assert "MissingInput" in json.dumps(summary) and "gpupred import" in json.dumps(summary)


@pytest.fixture(scope="module")
def after_03(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary tree with a FIXTURE dataset that both notebooks 03 have run on (once for the module)."""
    root = tmp_path_factory.mktemp("after-03")
    write_fixture_dataset(root, **TWO_SOURCES)
    _copy_corpus(root, SMALL["03-physics-first"]["realworld"])
    with pytest.MonkeyPatch.context() as mp:
        for name in ("03-compare-regressors", "03-physics-first"):
            run_notebook_in(root, mp, name, SMALL[name])
    return root


def _copy_corpus(root: Path, names: list[str]) -> None:
    """The corpus graphs ``names`` (real exports, data/corpus/) and their index entries, copied into ``root``."""
    from gpupred import config

    index = json.loads((config.CORPUS / "index.json").read_text())
    (root / "data" / "corpus").mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(config.CORPUS / f"{name}.onnx.gz", root / "data" / "corpus" / f"{name}.onnx.gz")
    kept = {"models": {n: index["models"][n] for n in names}}
    (root / "data" / "corpus" / "index.json").write_text(json.dumps(kept))


def _copy(tree: Path, to: Path) -> None:
    """The data and reports of ``tree`` (a run of notebook 03) copied into the test's own tree ``to``."""
    for part in ("data", "reports"):
        shutil.copytree(tree / part, to / part, dirs_exist_ok=True)


def test_03_on_fixture_dataset(after_03: Path) -> None:
    metrics = read_metrics("03-compare-regressors", after_03 / "reports" / "metrics")
    shipped = read_metrics("03-physics-first", after_03 / "reports" / "metrics")
    assert not set(metrics) & set(shipped)  # each figure in one notebook's file
    figures = {f.name for f in (after_03 / "reports" / "figures").glob("*.png")}
    assert ITEM_6_FROM_03 <= set(metrics) and metrics["dataset_sources"] == ["gpupred", "lucid"]
    assert set(metrics["regressors_gpu_util_rmsle_by_source"]) == {"gpupred", "lucid"}
    assert set(metrics["regressors_gpu_util_rmsle_by_source"]["lucid"]) == {"grouped_random", "lofo"}
    assert metrics["regressors_gpu_util_coverage_grouped_random"] >= 0.8
    assert shipped["regressors_gpu_util_model"] in ("ridge", "knn")
    assert {"03-rmsle-gpu_util.png", "03-oof-gpu_util.png", "03-cross-gpu-gpu_util.png",
            "03-realworld-step-time.png"} <= figures
    assert shipped["realworld_models"] == 2 and shipped["realworld_params_exact_share"] == 1.0
    # every FIXTURE workload is on both GPUs: within-GPU references and twins splits, no unseen ones
    assert set(metrics["regressors_gpu_util_rmsle_within_gpu"]) == {"H100 SXM", "RTX 3090"}
    assert set(metrics["regressors_gpu_util_rmsle_cross_gpu"]) == {"H100 SXM->RTX 3090 (twins)",
                                                                    "RTX 3090->H100 SXM (twins)"}
    assert metrics["twin_ratio_median"]["RTX 3090/H100 SXM"]["all"]["gpu_util_ratio_median"] > 0
    # memory in the comparison: its four methods on the within-GPU and leave-one-family-out splits, and the shipped
    # footprint model's headline figures on this project's own rows
    assert {"comparison_memory_mib_coverage_within", "comparison_memory_mib_coverage_lofo"} <= set(shipped)
    assert {"memory_mre_within", "memory_mre_lofo", "memory_coverage_lofo", "memory_mre_lofo_baseline"} <= set(shipped)
    from gpupred.learn.choice import read_model_choice
    from gpupred.learn.oof import read_oof_predictions

    dataset = pd.read_parquet(after_03 / "data" / "processed" / "dataset.parquet")
    oof = read_oof_predictions(dataset, after_03 / "data" / "processed" / "oof_predictions.parquet")
    assert len(oof) == len(dataset) and {"gpu_util_low", "memory_mib_high"} <= set(oof.columns)
    choice = read_model_choice(dataset, after_03 / "data" / "processed" / "model_choice.json")
    assert choice == {"gpu_util": shipped["regressors_gpu_util_model"], "memory_mib": shipped["regressors_memory_mib_model"]}


def test_04_explains_with_the_model_03_chose(after_03: Path, run_notebook, tmp_path: Path) -> None:
    """With no model named, 04 reads 03's choice; a non-tree choice (ridge, knn here) falls back to xgboost."""
    _copy(after_03, tmp_path)
    run_notebook("04-explain", {**SMALL["04-explain"], "explain_model": ""})
    figures = {f.name for f in (tmp_path / "reports" / "figures").glob("*.png")}
    assert any("shap-beeswarm" in f for f in figures) and any("shap-dependence" in f for f in figures)
    html = (tmp_path / "reports" / "04-explain.html").read_text()
    assert "explaining gpu_util with xgboost" in html


def test_05_on_fixture_dataset_and_a_second_run_writes_the_same_bytes(run_notebook, tmp_path: Path) -> None:
    """05 on FIXTURE data writes its figures; and (issue 74 item 6) a second run on unchanged inputs writes the same
    bytes into every file of its that git keeps (its metrics and figures; the executed .ipynb and .html, which carry
    run times, are ignored), so a second `make all` leaves git status clean."""
    write_fixture_dataset(tmp_path, **TWO_SOURCES)
    reports = tmp_path / "reports"
    runs = []
    for _ in range(2):
        run_notebook("05-memory", SMALL["05-memory"])
        runs.append({f.relative_to(reports).as_posix(): f.read_bytes()
                     for folder in ("metrics", "figures") for f in sorted((reports / folder).glob("05-*"))})
        if len(runs) == 1:  # what the first run wrote
            metrics = read_metrics("05-memory", reports / "metrics")
            assert ITEM_6_FROM_05 <= set(metrics)
            assert set(metrics["memory_median_rel_err_by_source"]) == {"gpupred", "lucid"}
            assert {"figures/05-memory-rel-err.png", "figures/05-memory-estimate-vs-measured.png"} <= set(runs[0])
    assert "metrics/05-memory.json" in runs[0] and runs[0].keys() == runs[1].keys()
    assert [k for k in runs[0] if runs[0][k] != runs[1][k]] == []


def test_08_exports_the_model_03_chose(after_03: Path, run_notebook, tmp_path: Path) -> None:
    """08 with no model named exports 03's choice and carries 03's outer-fold figures in the card (FIXTURE data)."""
    _copy(after_03, tmp_path)
    metrics = read_metrics("03-physics-first", tmp_path / "reports" / "metrics")
    run_notebook("08-export-predictor", {**SMALL["08-export-predictor"], "model": ""})
    default = json.loads((tmp_path / "models" / "predictor.json").read_text())
    assert not default["usage_restriction"] and set(default["sources"]) == {"gpupred"}  # own measurements only
    card = json.loads((tmp_path / "models" / "predictor-noncommercial.json").read_text())  # trained on what 03 saw
    assert "non-commercial" in card["usage_restriction"].lower() and set(card["sources"]) == {"gpupred", "lucid"}
    choice = json.loads((tmp_path / "data" / "processed" / "model_choice.json").read_text())
    assert card["baseline"]["targets"]["gpu_util"]["model"] == choice["models"]["gpu_util"]
    assert choice["models"]["gpu_util"] == metrics["regressors_gpu_util_model"]
    assert card["baseline"]["targets"]["memory_mib"]["model"] == metrics["regressors_memory_mib_model"]
    assert card["heldout"] == {} and default["heldout"] == {}  # exported without the core here: no core figures
    for c in (card, default):  # no notebook 06 ran here: the prior ships, and says it has no interval
        assert c["slowdown"]["estimator"]["name"] == "timeshare_pred" and c["slowdown"]["interval"] is None
        assert c["slowdown"]["source"] == "artifact" and "no interval" in c["slowdown"]["basis"]
