"""Every path gpupred reads or writes, in one place.

The project root is the checkout that holds this package (src layout); set ``GPUPRED_ROOT`` to point
the pipeline at another tree (tests do this to run notebooks on fixtures in a temporary folder).
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _default_root() -> Path:
    """The repository root when installed editable from a checkout, else the working directory."""
    candidate = _PACKAGE_DIR.parent.parent
    if (candidate / "pyproject.toml").is_file():
        return candidate
    return Path.cwd()


ROOT: Path = Path(os.environ.get("GPUPRED_ROOT", _default_root())).resolve()

DATA: Path = ROOT / "data"
RAW: Path = DATA / "raw"  # measurements exactly as collected; never edited
DRYRUN: Path = DATA / "dryrun"  # simulated (--dry-run) sweeps; the dataset builder refuses them
INTERIM: Path = DATA / "interim"
PROCESSED: Path = DATA / "processed"  # derived tables, rebuilt by the pipeline
GRAPH_FEATURES: Path = PROCESSED / "graph_features.parquet"
DATASET: Path = PROCESSED / "dataset.parquet"
COLOCATION: Path = PROCESSED / "colocation.parquet"
OOF_PREDICTIONS: Path = PROCESSED / "oof_predictions.parquet"  # gpupred.learn.oof: what downstream stages read

MODELS: Path = ROOT / "models"
PREDICTOR: Path = MODELS / "predictor.joblib"
PREDICTOR_CARD: Path = MODELS / "predictor.json"

REPORTS: Path = ROOT / "reports"
FIGURES: Path = REPORTS / "figures"
METRICS: Path = REPORTS / "metrics.json"

NOTEBOOKS: Path = ROOT / "notebooks"

# The graph store: one structure-only ONNX export per catalog architecture, committed, so that the notebook
# pipeline featurizes the catalog without torch (`gpupred export --store` rebuilds it).
GRAPHS: Path = DATA / "graphs"
# ONNX exports (structure only, weights stripped) of architectures outside the store, cached per architecture.
ONNX_CACHE: Path = Path(os.environ.get("GPUPRED_CACHE", ROOT / ".cache")) / "onnx"
