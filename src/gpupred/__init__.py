"""gpupred: predict a training job's GPU utilization, memory and co-location slowdown from its graph.

The public face is small and never imports torch::

    import gpupred
    gpupred.export_model(model, example_input, "resnet50.onnx")   # needs torch; the rest never imports it
    features = gpupred.featurize("resnet50.onnx", batch_size=64)
    predictor = gpupred.load_predictor()          # the committed models/predictor.joblib
    predictor.predict("resnet50.onnx", batch_size=64, precision="bf16")
    gpupred.advise_fusion("resnet.resnet18-bs128-img32-fp32-sgd", gpu="H100 SXM")  # how many trials to fuse
    gpupred.calibrate()                            # on a GPU machine: measure its constants (needs torch)
    predictor.predict(gpupred.hf_model("llama", seq_len=2048), batch_size=4, precision="bf16")  # by name: exported
    # once without weights (needs torch, timm/transformers), then cached: asked again, no torch is imported
    gpupred.measure_loader(my_dataloader, batches=20, workers=(0, 1, 2))  # its host cost on this CPU (needs torch)
    predictor.predict("resnet50.onnx", batch_size=64, gpu="H100 SXM",  # fed by 8 DataLoader workers decoding JPEGs
                      pipeline=gpupred.InputPipeline("image-files", num_workers=8))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpupred.version import __version__

__all__ = ["advise_fusion", "calibrate", "export_model", "weightless", "timm_model", "hf_model", "named_graph",
           "NamedModel", "featurize", "load_predictor", "Predictor", "WorkloadSpec", "measure_loader", "InputPipeline",
           "TrainingSetup", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.calibration.run import calibrate
    from gpupred.graph.features import featurize
    from gpupred.graph.export import export_model
    from gpupred.fusion.advisor import advise_fusion
    from gpupred.graph.named import named_graph
    from gpupred.workloads.hubmodels import NamedModel, hf_model, timm_model
    from gpupred.graph.weightless import weightless
    from gpupred.loader.measure import measure_loader
    from gpupred.predictor.loading import load_predictor
    from gpupred.predictor.predictor import Predictor
    from gpupred.workloads.spec import WorkloadSpec
    from gpupred.setups import InputPipeline, TrainingSetup

_LAZY = {
    "calibrate": "gpupred.calibration.run",
    "export_model": "gpupred.graph.export",
    "weightless": "gpupred.graph.weightless",
    "timm_model": "gpupred.workloads.hubmodels",
    "hf_model": "gpupred.workloads.hubmodels",
    "named_graph": "gpupred.graph.named",
    "NamedModel": "gpupred.workloads.hubmodels",
    "featurize": "gpupred.graph.features",
    "load_predictor": "gpupred.predictor.loading",
    "Predictor": "gpupred.predictor.predictor",
    "WorkloadSpec": "gpupred.workloads",
    "advise_fusion": "gpupred.fusion.advisor",
    "measure_loader": "gpupred.loader.measure",
    "InputPipeline": "gpupred.setups",
    "TrainingSetup": "gpupred.setups",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use, so ``import gpupred`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpupred' has no attribute {name!r}")
