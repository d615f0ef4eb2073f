"""gpupred: predict a training job's GPU utilization, memory and co-location slowdown from its graph.

The public face is small and never imports torch::

    import gpupred
    gpupred.export_model(model, example_input, "resnet50.onnx")   # needs torch; the rest never imports it
    features = gpupred.featurize("resnet50.onnx", batch_size=64)
    predictor = gpupred.load_predictor()          # the committed models/predictor.joblib
    predictor.predict("resnet50.onnx", batch_size=64, precision="bf16")
    gpupred.advise_fusion("resnet.resnet18-bs128-img32-fp32-sgd", gpu="H100 SXM")  # how many trials to fuse
    gpupred.calibrate()                            # on a GPU machine: measure its constants (needs torch)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpupred.version import __version__

__all__ = ["advise_fusion", "calibrate", "export_model", "featurize", "load_predictor", "Predictor", "WorkloadSpec",
           "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.calibration import calibrate
    from gpupred.graph import featurize
    from gpupred.graph.export import export_model
    from gpupred.fusion import advise_fusion
    from gpupred.predictor import Predictor, load_predictor
    from gpupred.workloads import WorkloadSpec

_LAZY = {
    "calibrate": "gpupred.calibration",
    "export_model": "gpupred.graph.export",
    "featurize": "gpupred.graph",
    "load_predictor": "gpupred.predictor",
    "Predictor": "gpupred.predictor",
    "WorkloadSpec": "gpupred.workloads",
    "advise_fusion": "gpupred.fusion",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use, so ``import gpupred`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpupred' has no attribute {name!r}")
