"""gpupred.export_model on small look-alike modules (FIXTURES written here, random weights): a timm-style CNN,
a Hugging Face-style transformer with keyword inputs, an attention mask and a ModelOutput-like output, and
a module returning a dict. The written file has a symbolic batch and no weights, and featurizes at any batch.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import gpupred
from gpupred.errors import GpupredError
from gpupred.graph.features import FEATURE_KEYS, featurize

torch = pytest.importorskip("torch")
nn = torch.nn


class TimmStyleNet(nn.Module):
    """Like a timm model: ``forward_features`` then ``forward_head``, BatchNorm, Dropout, a tensor in and out."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(16, classes)

    def forward_features(self, x: Any) -> Any:
        """Feature map."""
        y = self.stem(x)
        return y + self.block(y)

    def forward_head(self, x: Any) -> Any:
        """Logits."""
        return self.head(self.drop(x.mean(dim=(2, 3))))

    def forward(self, x: Any) -> Any:
        """Logits for images."""
        return self.forward_head(self.forward_features(x))


class ModelOutputLike(OrderedDict):
    """Like transformers' ModelOutput: a dict with attributes and ``to_tuple``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to_tuple(self) -> tuple[Any, ...]:
        """Values in order."""
        return tuple(self.values())


class HFStyleEncoder(nn.Module):
    """Like a Hugging Face encoder: ``forward(input_ids, attention_mask=None, return_dict=True)``."""

    def __init__(self, vocab: int = 100, d: int = 32, heads: int = 4, seq: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True, dropout=0.1)
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * d, d))
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids: Any, attention_mask: Any = None, return_dict: bool = True) -> Any:
        """Hidden states and a pooled output."""
        x = self.embed(input_ids) + self.pos[:, : input_ids.shape[1]]
        pad = None if attention_mask is None else attention_mask == 0
        x = self.norm(x + self.attn(x, x, x, key_padding_mask=pad, need_weights=False)[0])
        x = x + self.ff(x)
        pooled = torch.tanh(self.pool(x[:, 0]))
        out = ModelOutputLike(last_hidden_state=x, pooler_output=pooled)
        return out if return_dict else out.to_tuple()


class DictOut(nn.Module):
    """Returns a dict of tensors (and a None)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x: Any) -> dict[str, Any]:
        """Two heads."""
        h = torch.relu(self.a(x))
        return {"hidden": h, "logits": self.b(h), "aux": None}


def _randomize(model: Any) -> Any:
    """Trained-looking weights (no two layers equal, BatchNorm statistics not at their defaults)."""
    with torch.no_grad():
        for p in [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]:
            p.copy_(torch.rand_like(p) * 0.1 + 0.01)
    return model


def _check_file(path: Path) -> onnx.ModelProto:
    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    for inp in m.graph.input:
        if inp.name not in inits:
            assert inp.type.tensor_type.shape.dim[0].dim_param == "batch", inp
    big = [t for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) > 16]
    assert big and all(not t.raw_data and t.data_location == onnx.TensorProto.EXTERNAL for t in big)  # structure only
    return m


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_timm_style_model(tmp_path: Path) -> None:
    model = _randomize(TimmStyleNet())
    path = gpupred.export_model(model, torch.randn(1, 3, 16, 16), tmp_path / "timm.onnx")
    _check_file(path)
    f1, f8 = featurize(path, batch_size=1), featurize(path, batch_size=8)
    assert f8["macs_fwd"] == 8 * f1["macs_fwd"] and f1["unknown_ops"] == 0
    assert f1["macs_fwd"] == 16 * 16 * (16 * 27 + 16 * 16 * 9) + 16 * 10
    # the same model exported the way torch does by default (eval mode, BatchNorm folded, Dropout gone)
    eval_path = tmp_path / "timm-eval.onnx"
    torch.onnx.export(model.eval(), (torch.randn(1, 3, 16, 16),), str(eval_path), dynamo=False)
    plain = featurize(eval_path, batch_size=8)
    param_keys = {"params", "param_bytes", "flops_optimizer", "flops_train"}
    assert {k: plain[k] for k in FEATURE_KEYS if k not in param_keys} == {k: f8[k] for k in FEATURE_KEYS if k not in param_keys}
    # parameters as torch counts them; the eval export folded each BatchNorm's scale and shift into one bias
    bn_channels = sum(m.num_features for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert f8["params"] == sum(p.numel() for p in model.parameters()) == plain["params"] + bn_channels


def test_hf_style_keyword_inputs_mask_and_model_output(tmp_path: Path) -> None:
    model = _randomize(HFStyleEncoder())
    ids = torch.randint(0, 100, (2, 12))
    example = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "return_dict": True}
    path = gpupred.export_model(model, example, tmp_path / "hf.onnx")
    m = _check_file(path)
    assert [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}] == ["input_ids", "attention_mask"]
    assert len(m.graph.output) == 2  # last_hidden_state, pooler_output
    f1, f4 = featurize(path, batch_size=1), featurize(path, batch_size=4)
    assert f4["macs_fwd"] == 4 * f1["macs_fwd"] > 0 and f1["unknown_ops"] == 0 and f1["n_norm"] == 1
    assert f1["params"] == sum(p.numel() for p in model.parameters())


def test_dict_outputs_and_weights_on_request(tmp_path: Path) -> None:
    path = gpupred.export_model(DictOut(), torch.randn(3, 8), tmp_path / "dict.onnx", keep_weights=True)
    m = onnx.load(str(path))
    assert len(m.graph.output) == 2 and any(t.raw_data for t in m.graph.initializer)
    assert featurize(path, batch_size=5)["macs_fwd"] == 5 * (8 * 8 + 8 * 2)


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(GpupredError, match="needs a torch.nn.Module"):
        gpupred.export_model(lambda x: x, torch.randn(1, 3), tmp_path / "f.onnx")
    with pytest.raises(GpupredError, match="example_input must be"):
        gpupred.export_model(DictOut(), "text", tmp_path / "f.onnx")
    with pytest.raises(GpupredError, match="no batch axis"):
        gpupred.export_model(DictOut(), torch.tensor(1.0), tmp_path / "f.onnx")
