"""Weightless export (gpupred.graph.weightless): a module built on the meta device is exported without the host
ever holding its weights, and its graph featurizes as the TorchScript recipe's export of the same module with real
weights does. The modules are FIXTURES written here (and, in the slow tests, transformers' and timm's classes
built from small configs, random weights, no download).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

import gpupred
from gpupred.errors import GpupredError
from gpupred.graph.features import FEATURE_KEYS, featurize

torch = pytest.importorskip("torch")
nn = torch.nn

COMPARED = [k for k in FEATURE_KEYS if k not in ("batch_size", "is_bf16", "is_adam")]


class Block(nn.Module):
    """A FIXTURE pre-norm transformer block: qkv projection unbound into three, attention, MLP."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * d, d))

    def forward(self, x: Any) -> Any:
        """One block on ``[B, S, d]``."""
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = (q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(x)


class TinyLM(nn.Module):
    """A FIXTURE decoder: embedding, two blocks, a head tied to the embedding."""

    def __init__(self, vocab: int = 100, d: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(Block(d), Block(d))
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: Any) -> Any:
        """Logits ``[B, S, vocab]``."""
        return self.head(self.blocks(self.embed(ids)))


def _agree(a: Path, b: Path, batches: tuple[int, ...] = (2, 8)) -> None:
    for bs in batches:
        ra, rb = featurize(a, batch_size=bs), featurize(b, batch_size=bs)
        off = {k: (ra[k], rb[k]) for k in COMPARED
               if abs(ra[k] - rb[k]) > 0.02 * max(abs(ra[k]), abs(rb[k])) and max(abs(ra[k]), abs(rb[k])) > 1e-12}
        assert not off, f"batch {bs}: {off}"
        assert rb["frac_nodes_unshaped"] == 0 and rb["unknown_ops"] == 0


def test_meta_module_exports_like_a_real_one(tmp_path: Path) -> None:
    torch.manual_seed(0)
    real = TinyLM()
    with gpupred.weightless():
        meta = TinyLM()
    assert next(meta.parameters()).is_meta
    ids = torch.randint(0, 100, (2, 16))
    a = gpupred.export_model(real, ids, tmp_path / "real.onnx")
    b = gpupred.export_model(meta, ids, tmp_path / "meta.onnx")
    _agree(a, b)
    model = onnx.load(b, load_external_data=False)
    meta_props = {p.key: p.value for p in model.metadata_props}
    assert meta_props["gpupred.weightless"] == "1"
    assert int(meta_props["gpupred.torch_params"]) == sum(p.numel() for p in real.parameters())  # tied weight once
    assert featurize(b, batch_size=2)["params"] == sum(p.numel() for p in real.parameters())
    assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim] == ["batch", ""]
    assert next(meta.parameters()).is_meta  # the caller's module is left on the meta device


def test_weights_far_beyond_memory_are_never_allocated(tmp_path: Path) -> None:
    """A FIXTURE model with 68 billion parameters (272 GB in fp32) exports on a machine with 24 GB."""
    with gpupred.weightless():
        huge = nn.Sequential(nn.Embedding(1_000_000, 65536), nn.Linear(65536, 4096), nn.GELU(), nn.Linear(4096, 16))
    path = gpupred.export_model(huge, torch.zeros(1, 8, dtype=torch.long), tmp_path / "huge.onnx")
    assert path.stat().st_size < 100_000
    row = featurize(path, batch_size=4)
    assert row["params"] == sum(p.numel() for p in huge.parameters()) > 65e9


def test_weightless_keep_weights_is_refused(tmp_path: Path) -> None:
    with gpupred.weightless():
        model = nn.Linear(4, 4)
    with pytest.raises(GpupredError, match="holds no weights"):
        gpupred.export_model(model, torch.zeros(2, 4), tmp_path / "x.onnx", keep_weights=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama", "vit", "resnet"])
def test_weightless_export_agrees_with_torchscript_on_real_models(name: str, tmp_path: Path) -> None:
    """transformers' GPT-2 and Llama (2 layers, from config classes), timm's ViT (``unbind``) and a torchvision
    ResNet-18 (training-mode BatchNorm): the features of both recipes agree within 2% at two batch sizes."""
    make, example = _real_model(name)
    torch.manual_seed(0)
    a = gpupred.export_model(make(), example, tmp_path / "torchscript.onnx")
    with gpupred.weightless():
        meta = make()
    b = gpupred.export_model(meta, example, tmp_path / "weightless.onnx")
    _agree(a, b)


def _real_model(name: str) -> tuple[Any, Any]:
    ids = torch.randint(0, 1000, (2, 64))
    if name in ("gpt2", "llama"):
        transformers = pytest.importorskip("transformers")
        if name == "gpt2":
            cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, use_cache=False)
        else:
            cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256, vocab_size=1000,
                                           num_attention_heads=4, num_key_value_heads=2, use_cache=False)
        cfg._attn_implementation = "eager"
        return (lambda: transformers.AutoModelForCausalLM.from_config(cfg)), {"input_ids": ids,
                                                                              "attention_mask": torch.ones_like(ids)}
    if name == "vit":
        timm = pytest.importorskip("timm")
        return (lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64)), torch.randn(2, 3, 64, 64)
    torchvision = pytest.importorskip("torchvision")
    return (lambda: torchvision.models.resnet18()), torch.randn(2, 3, 64, 64)
