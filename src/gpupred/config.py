"""Every path gpupred reads or writes, in one place.

The project root is the checkout that holds this package (src layout); set ``GPUPRED_ROOT`` to point
the pipeline at another tree (tests do this to run notebooks on fixtures in a temporary folder).
"""

from __future__ import annotations

import functools
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
PROCESSED: Path = DATA / "processed"  # derived tables, rebuilt by the pipeline
GRAPH_FEATURES: Path = PROCESSED / "graph_features.parquet"
DATASET: Path = PROCESSED / "dataset.parquet"
JOB_KERNELS: Path = PROCESSED / "job_kernels.parquet"  # gpupred.physicstables: each dataset workload's step kernels
JOB_TERMS: Path = PROCESSED / "job_terms.parquet"  # gpupred.physicstables: each dataset workload's footprint graph terms
OOF_PREDICTIONS: Path = PROCESSED / "oof_predictions.parquet"  # gpupred.learn.oof: what downstream stages read
MODEL_CHOICE: Path = PROCESSED / "model_choice.json"  # gpupred.learn.choice: the regressor notebook 03 chose per target
SLOWDOWN_CHOICE: Path = PROCESSED / "slowdown_choice.json"  # gpupred.colocation.served: the slowdown estimator 06 ships

MODELS: Path = ROOT / "models"
PREDICTOR: Path = MODELS / "predictor.joblib"  # the default: this project's own measurements only (MIT)
# trained with the imported published measurements too: their licences allow non-commercial use only
PREDICTOR_NONCOMMERCIAL: Path = MODELS / "predictor-noncommercial.joblib"

REPORTS: Path = ROOT / "reports"
FIGURES: Path = REPORTS / "figures"
METRICS_DIR: Path = REPORTS / "metrics"  # one <notebook>.json of figures of merit per notebook (gpupred.reports)
SUMMARY: Path = REPORTS / "summary.json"  # the headline figures, what a reader opens first (gpupred.pipeline)

NOTEBOOKS: Path = ROOT / "notebooks"

# Published measurements of other groups (gpupred.importers): imported copies live here, never under
# data/raw and never committed (gitignored), each folder with its provenance.json.
EXTERNAL: Path = DATA / "external"
# Upstream files are fetched from <base>/<owner>/<repo>/<commit>/<path> (tests point it at a loopback server).
EXTERNAL_BASE_URL: str = os.environ.get("GPUPRED_EXTERNAL_BASE_URL", "https://raw.githubusercontent.com").rstrip("/")
EXTERNAL_TIMEOUT_S: float = float(os.environ.get("GPUPRED_EXTERNAL_TIMEOUT_S", "5"))  # per request; offline fails fast


def _default_external_local() -> Path | None:
    """A local copy of the published files to fall back on: $GPUPRED_EXTERNAL_LOCAL, else ../shared/external."""
    if os.environ.get("GPUPRED_EXTERNAL_LOCAL"):
        return Path(os.environ["GPUPRED_EXTERNAL_LOCAL"]).expanduser().resolve()
    candidate = ROOT.parent / "shared" / "external"
    return candidate if candidate.is_dir() else None


EXTERNAL_LOCAL: Path | None = _default_external_local()

# The graph store: one structure-only ONNX export per catalog architecture, committed, so that the notebook
# pipeline featurizes the catalog without torch (`gpupred export --store` rebuilds it).
GRAPHS: Path = DATA / "graphs"
# The corpus of real-world graphs (timm and Hugging Face models, structure only) the featurizer is tested on
# (`gpupred export --corpus` rebuilds it).
CORPUS: Path = DATA / "corpus"
# ONNX exports (structure only, weights stripped) of architectures outside the store, cached per architecture.
ONNX_CACHE: Path = Path(os.environ.get("GPUPRED_CACHE", ROOT / ".cache")) / "onnx"
# The measurement campaign's per-machine marker (`gpupred campaign next`: its smoke test passed on this GPU);
# gitignored, so a fresh device machine never receives one.
CAMPAIGN_MARKERS: Path = Path(os.environ.get("GPUPRED_CACHE", ROOT / ".cache")) / "campaign"
# Synthetic files the profiler's input-pipeline units read (`pipeline=KIND` plan lines, gpupred.profile.feed), written
# once per machine; gitignored, never data.
LOADER_CACHE: Path = Path(os.environ.get("GPUPRED_CACHE", ROOT / ".cache")) / "loader"

# Calibrations of this project's own GPU kinds, recorded by `gpupred calibrate` on a lent GPU and committed as
# written: the tests replay them and the exported predictor measures a calibrated GPU's interval width on them.
CALIBRATIONS: Path = DATA / "calibrations"
CALIBRATION_DIR_ENV = "GPUPRED_CALIBRATION_DIR"


def calibration_dir() -> Path:
    """Where ``gpupred calibrate`` writes this user's calibrations and predictions look for them:
    ``$GPUPRED_CALIBRATION_DIR``, else the per-user cache (``$XDG_CACHE_HOME/gpupred/calibrations`` on Linux)."""
    override = os.environ.get(CALIBRATION_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser().resolve()
    return user_cache() / "calibrations"


def user_cache() -> Path:
    """This user's cache folder for gpupred (platformdirs'; ``$XDG_CACHE_HOME/gpupred`` on Linux), looked up once per
    value of the variables it reads: every prediction asks."""
    return platform_cache(os.environ.get("XDG_CACHE_HOME"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def platform_cache(xdg_cache_home: str | None, home: str | None) -> Path:
    """platformdirs' user cache folder for gpupred, under these values of the variables it reads (the cache's key)."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("gpupred", appauthor=False))


# Host profiles (`gpupred loader bench`): what the standard input pipelines cost per sample on a host's CPU. The one
# committed here is this project's own measurement of its development machine, the reference the predictor uses
# when a job names no host profile; never edited by hand (gpupred.loader.hostprofile checks its checksum).
HOSTS: Path = DATA / "hosts"
HOST_PROFILE: Path = HOSTS / "amd-epyc-2cpu.json"
HOST_PROFILE_DIR_ENV = "GPUPRED_HOST_PROFILE_DIR"


def host_profile_dir() -> Path:
    """Where ``gpupred loader bench`` and ``loader measure`` write by default: ``$GPUPRED_HOST_PROFILE_DIR``, else the
    per-user cache (``$XDG_CACHE_HOME/gpupred/hosts`` on Linux)."""
    override = os.environ.get(HOST_PROFILE_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser().resolve()
    return user_cache() / "hosts"
