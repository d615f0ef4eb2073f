"""The analyst's install has no torch, Ray, NVML or onnxscript: the notebook path must not need them.

Here they are made unimportable (a FIXTURE folder of packages that raise ImportError, first on the path) and the
feature table of the whole catalog is built from the committed graph store, in-process and through notebook 02.
Also: the graph store is complete and matches its index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpupred import config

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "torchvision", "onnxscript", "ray", "pynvml")


def _blocker(tmp_path: Path) -> Path:
    shim = tmp_path / "no-heavy-packages"
    for name in HEAVY:
        (shim / name).mkdir(parents=True)
        (shim / name / "__init__.py").write_text(f"raise ImportError('{name} is not part of the light install (FIXTURE blocker)')\n")
    return shim


def _env(shim: Path, root: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["MPLBACKEND"] = "Agg"
    if root is not None:
        env["GPUPRED_ROOT"] = str(root)
    return env


def test_catalog_features_without_torch(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        import gpupred
        from gpupred.graph.table import build_feature_table
        from gpupred.workloads.catalog import catalog, fused_catalog
        specs = catalog() + fused_catalog()
        df = build_feature_table(specs, workers=2, progress=False)
        assert len(df) == len(specs) and (df["flops_train"] > 0).all() and df["unknown_ops"].sum() == 0
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY})
        assert not heavy, heavy
        print(len(df))
    """).replace("{HEAVY}", repr(set(HEAVY)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(_blocker(tmp_path)))
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.notebook
def test_notebook_02_runs_without_torch(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(REPO / "notebooks", root / "notebooks")
    shutil.copytree(REPO / "data" / "graphs", root / "data" / "graphs")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    code = "from gpupred.cli import main; main(['pipeline', '--only', '02'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(_blocker(tmp_path), root))
    assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]
    summary = json.loads((root / "reports" / "pipeline.json").read_text())
    assert summary == [{"notebook": "02-build-features.ipynb", "status": "ok", "reason": ""}]
    assert (root / "data" / "processed" / "graph_features.parquet").is_file()


def test_graph_store_is_complete_and_matches_its_index() -> None:
    from gpupred.graph.export import EXPORT_VERSION, read_index, store_path
    from gpupred import importers
    from gpupred.graph.graphstore import store_specs

    importers.load_all()  # the importers register their jobs' specs

    store = REPO / "data" / "graphs"
    index = read_index(store)
    assert index["export_version"] == EXPORT_VERSION
    keys = {s.arch_key for s in store_specs()}  # the catalog, the fused catalog, Lucid's jobs, the real-world archs
    assert set(index["graphs"]) == keys
    for spec in {s.arch_key: s for s in store_specs()}.values():
        path = store_path(spec, store)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == index["graphs"][spec.arch_key], path
    assert config.GRAPHS == config.DATA / "graphs"


def test_importers_register_their_jobs_into_the_graph_store() -> None:
    """The graph layer lists the workloads' specs; Lucid's importer adds its jobs' specs when imported (the graph
    layer never imports the importers)."""
    from gpupred.graph import graphstore as store
    from gpupred.importers import lucid

    from gpupred.workloads.catalog import catalog

    keys = {s.arch_key for s in store.store_specs()}
    assert {s.arch_key for s in lucid.store_specs()} <= keys and {s.arch_key for s in catalog()} <= keys
    store.register_store_specs("lucid", lambda: [])  # registering a name again replaces its specs
    try:
        assert not {s.arch_key for s in lucid.store_specs()} <= {s.arch_key for s in store.store_specs()}
    finally:
        store.register_store_specs("lucid", lucid.store_specs)


def test_the_exported_predictor_answers_a_graph_without_the_learning_libraries(tmp_path: Path) -> None:
    """A cold ``gpupred predict`` of a graph loads the committed predictor and answers from physics and the numpy
    forests: scikit-learn, LightGBM, XGBoost and SciPy (about a second of imports) are made unimportable, and the
    answer is the one a process with them gives."""
    slow = ("sklearn", "lightgbm", "xgboost", "scipy")
    shim = tmp_path / "no-learning-libraries"
    for name in slow:
        (shim / name).mkdir(parents=True)
        (shim / name / "__init__.py").write_text(f"raise ImportError('{name} blocked (FIXTURE blocker)')\n")
    argv = ["-m", "gpupred.cli", "predict", "resnet.resnet50-bs64-img224-fp32-sgd", "--gpu", "H100 SXM", "--json"]
    light = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=_env(shim))
    assert light.returncode == 0, light.stderr[-2000:]
    full = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=_env(tmp_path / "none"))
    assert full.returncode == 0, full.stderr[-2000:]
    assert json.loads(light.stdout) == json.loads(full.stdout) and json.loads(light.stdout)["inputs"]["answered_by"] == "physics"
