"""Export invariance (slow): one model's features agree within 2% and its predictions within 3% however it is exported.

For five torchvision CNNs and the catalog's BERT-style transformer (random weights, FIXTURES), four flavours:
(a) ``gpupred.export_model`` (the catalog's training-mode TorchScript recipe, symbolic batch, no weights),
(b) ``torch.onnx.export`` with its legacy defaults in eval mode (BatchNorm folded, Dropout gone, weights inline,
batch fixed at 1), (c) the dynamo exporter in eval mode (weights in external data, batch fixed at 1), and
(d) the fixed-batch-1 files (b) and (c) asked at batch 8. Predictions come from a FIXTURE predictor trained on the
toy-formula rows of fixtures_learning. Takes about 2 minutes on the project's 2-core machine (dynamo exports dominate).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fixtures_learning import fixture_dataset
from gpupred.graph.features import FEATURE_KEYS, featurize

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

CNNS = ["resnet18", "mobilenet_v2", "efficientnet_b0", "densenet121", "mobilenet_v3_small"]
COMPARED = [k for k in FEATURE_KEYS if k not in ("batch_size", "is_bf16", "is_adam")]
BATCH = 8


def _randomize(model: Any) -> Any:
    """Trained-looking weights: exporters deduplicate equal tensors, which freshly initialised layers often are."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]:
            t.copy_(torch.rand(t.shape, generator=g) * 0.1 + 0.01)
    return model


def _model(name: str) -> tuple[Any, Any]:
    if name == "bert":
        from gpupred.workloads.models import TransformerLM

        return _randomize(TransformerLM(2000, 128, 4, 2, 64, causal=False)), torch.randint(0, 2000, (1, 64))
    return _randomize(getattr(torchvision.models, name)()), torch.randn(1, 3, 96, 96)


def _flavours(name: str, folder: Path) -> dict[str, Path]:
    import gpupred

    model, x = _model(name)
    paths = {"a": gpupred.export_model(model, torch.cat([x, x]), folder / f"{name}-a.onnx")}  # BatchNorm trains on > 1
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(folder / f"{name}-b.onnx"), dynamo=False)
        torch.onnx.export(model, (x,), str(folder / f"{name}-c.onnx"), dynamo=True, verbose=False)
    paths["b"], paths["c"] = folder / f"{name}-b.onnx", folder / f"{name}-c.onnx"
    return paths


def _close(x: float, y: float, rel: float) -> bool:
    return abs(x - y) <= rel * max(abs(x), abs(y)) or max(abs(x), abs(y)) < 1e-12


@pytest.fixture(scope="module")
def predictor() -> Any:
    """A FIXTURE predictor (toy formula, meaningless predictions) that reads every graph feature."""
    from gpupred.predictor.training import train_predictor

    return train_predictor(fixture_dataset(gpus=("NVIDIA H100 80GB HBM3",), n_batch_sizes=5), models="xgboost", tune=False)


@pytest.mark.parametrize("name", [*CNNS, "bert"])
def test_features_and_predictions_agree_across_exports(name: str, tmp_path: Path, predictor: Any) -> None:
    paths = _flavours(name, tmp_path)
    assert paths["b"].stat().st_size > 20 * paths["a"].stat().st_size  # (b) carries its weights inline
    rows = {f"{k}@{bs}": featurize(p, batch_size=bs) for k, p in paths.items() for bs in (1, BATCH)}
    ref = rows[f"a@{BATCH}"]
    assert ref["unknown_ops"] == 0
    for label, row in rows.items():
        want = ref if label.endswith(f"@{BATCH}") else rows["a@1"]
        off = {k: (row[k], want[k]) for k in COMPARED if not _close(row[k], want[k], 0.02)}
        assert not off, f"{name} {label}: {off}"
    frame = pd.DataFrame([{**row, "precision": "bf16", "optimizer": "adam"} for row in rows.values()], index=list(rows))
    pred = predictor.predict(frame)
    for target in predictor.targets:
        for label in rows:
            want = pred.loc[f"a@{label.split('@')[1]}", target]
            assert _close(pred.loc[label, target], want, 0.03), (name, label, target, pred[target].to_dict())
