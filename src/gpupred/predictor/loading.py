"""Loading the predictor artifact: models/predictor.joblib plus the models/predictor.json card that vouches for it.

The loader reads the card first and checks the schema version, the joblib file's sha256 and the
library versions before anything is unpickled. Nothing here imports torch; only predicting from a
workload id does, through ``gpupred.graph.export``.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.files import read_json_object, sha256
from gpupred.predictor.predictor import Predictor

SCHEMA_VERSION = 4  # 3: the core (step and memory estimators) and its held-out figures first; the regressors a baseline.
# 4: the baseline regressors and the models pickled apart are compressed payloads, unpacked on first use
# libraries whose pickles must be read by the very version that wrote them
CHECKED_LIBRARIES: tuple[str, ...] = ("scikit-learn", "xgboost", "lightgbm", "numpy")
MISSING_DEFAULT = "no predictor at models/predictor.joblib: `make all` exports one (notebook 08) from the measurements it has"


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries the artifact depends on."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for lib in (*CHECKED_LIBRARIES, "pandas", "joblib", "gpupred"):
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:  # xgboost's CPU-only wheel is the distribution xgboost-cpu (same module)
            out[lib] = version(f"{lib}-cpu")
    return out


def _versions_match(lib: str, built: str, installed: str) -> bool:
    if lib == "numpy":  # pickled arrays are stable within a major version
        return built.split(".")[0] == installed.split(".")[0]
    return built == installed


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(config.ROOT))
    except ValueError:
        return str(path)


def _card_label(shown: str) -> str:
    return shown[: -len(".joblib")] + ".json" if shown.endswith(".joblib") else f"{shown} card"


def read_card(path: Path, shown: str | None = None) -> dict[str, Any]:
    """The predictor card beside ``path``, checked for schema version and the artifact's sha256.

    ``shown`` is how messages name the artifact (the path as the user typed it); default: relative to the project.
    """
    shown = shown or _display(path)
    card_path = path.with_suffix(".json")
    card_shown = _card_label(shown)
    if not card_path.is_file():
        raise GpupredError(f"{card_shown}: predictor card missing; refusing to load {shown} (re-export with notebook 08)")
    card = read_json_object(card_path, "re-export with notebook 08", card_shown)
    if card.get("schema_version") != SCHEMA_VERSION:
        got = card.get("schema_version")
        raise GpupredError(f"{card_shown}: unknown predictor schema version {got!r} (this gpupred reads {SCHEMA_VERSION}); "
                           "re-export with notebook 08 or install the matching gpupred")
    if sha256(path) != card.get("sha256"):
        raise GpupredError(f"{shown}: sha256 does not match its card (tampered or corrupted); refusing to unpickle it")
    return card


def load_predictor(path: str | Path | None = None) -> Predictor:
    """Load a predictor (default: models/predictor.joblib) after checking its card's schema, hash and versions."""
    import joblib

    default = path is None
    shown = _display(config.PREDICTOR) if default else str(path)  # messages name the path as the user typed it
    path = Path(path) if path is not None else config.PREDICTOR
    if not path.is_file():
        raise GpupredError(MISSING_DEFAULT if default else f"{shown}: no predictor there (no such file)")
    card = read_card(path, shown)
    installed = library_versions()
    for lib in CHECKED_LIBRARIES:
        built = card.get("library_versions", {}).get(lib)
        if built is None or not _versions_match(lib, built, installed[lib]):
            raise GpupredError(f"{shown}: built with {lib} {built}, installed {installed[lib]}; "
                               "install the versions in its card or re-export with notebook 08")
    try:
        predictor = joblib.load(path)
    except (ModuleNotFoundError, AttributeError) as exc:  # a class moved or renamed since it was exported
        where = getattr(exc, "name", None) or str(exc)
        raise GpupredError(f"{shown}: exported by another gpupred (it refers to {where}, which this one does not "
                           "have); re-export with notebook 08 or install the gpupred that exported it") from None
    if not isinstance(predictor, Predictor):
        raise GpupredError(f"{shown}: not a gpupred Predictor")
    predictor.card = card
    return predictor
