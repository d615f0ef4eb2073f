"""Package-defined, knob-driven model families: MLP, LSTM/GRU LMs, BERT/GPT-like Transformers, DCGAN, NeuMF.

All modules are batch-first and ONNX-exportable with a symbolic batch dimension.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class MLP(nn.Module):
    """A ReLU multilayer perceptron classifier: ``depth`` hidden layers of ``width`` units."""

    def __init__(self, in_features: int, width: int, depth: int, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_features
        for _ in range(depth):
            layers += [nn.Linear(prev, width), nn.ReLU()]
            prev = width
        layers.append(nn.Linear(prev, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, classes]`` for features ``[B, in_features]``."""
        return self.net(x)


class RNNLM(nn.Module):
    """An LSTM or GRU word-level language model: embedding, stacked RNN, vocabulary projection."""

    def __init__(self, cell: str, vocab: int, embed: int, hidden: int, layers: int, dropout: float = 0.1) -> None:
        super().__init__()
        rnn_cls = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = rnn_cls(embed, hidden, num_layers=layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits ``[B, S, vocab]`` for tokens ``[B, S]``."""
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out)


class TransformerLM(nn.Module):
    """A BERT-like encoder (bidirectional, post-LN) or GPT-like decoder (causal, pre-LN); ff = 4 * d_model."""

    def __init__(
        self, vocab: int, d_model: int, heads: int, layers: int, seq_len: int, causal: bool, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.causal = causal
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(1, seq_len, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, 4 * d_model, dropout=dropout, activation="gelu", batch_first=True, norm_first=causal
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        if causal:
            mask = torch.full((seq_len, seq_len), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)
        else:
            self.mask = None

    def forward(self, tokens: Tensor) -> Tensor:
        """Token logits ``[B, S, vocab]`` for tokens ``[B, S]`` (masked-LM or next-token)."""
        x = self.tok(tokens) + self.pos[:, : tokens.shape[1]]
        x = self.encoder(x, mask=self.mask, is_causal=self.causal)
        return self.head(self.norm(x))


def _dcgan_depth(image_size: int) -> int:
    """Number of stride-2 stages for a DCGAN at ``image_size`` (a power of two, at least 16)."""
    n = int(round(math.log2(image_size))) - 2
    if 2 ** (n + 2) != image_size or n < 2:
        raise ValueError(f"DCGAN image size must be a power of two >= 16, got {image_size}")
    return n


class Generator(nn.Module):
    """DCGAN generator: latent ``[B, z, 1, 1]`` to an image ``[B, 3, S, S]`` in [-1, 1]."""

    def __init__(self, latent: int, width: int, image_size: int) -> None:
        super().__init__()
        n = _dcgan_depth(image_size)
        ch = width * 2 ** (n - 1)
        layers: list[nn.Module] = [nn.ConvTranspose2d(latent, ch, 4, 1, 0, bias=False), nn.BatchNorm2d(ch), nn.ReLU(True)]
        for _ in range(n - 1):
            layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch // 2), nn.ReLU(True)]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: Tensor) -> Tensor:
        """Generated images for latents ``z``."""
        return self.net(z)


class Discriminator(nn.Module):
    """DCGAN discriminator: image ``[B, 3, S, S]`` to a real/fake logit ``[B]``."""

    def __init__(self, width: int, image_size: int) -> None:
        super().__init__()
        n = _dcgan_depth(image_size)
        ch = width
        layers: list[nn.Module] = [nn.Conv2d(3, ch, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
        for _ in range(n - 1):
            layers += [nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch * 2), nn.LeakyReLU(0.2, True)]
            ch *= 2
        layers.append(nn.Conv2d(ch, 1, 4, 1, 0, bias=False))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B]`` that each image is real."""
        return self.net(x).flatten()


class DCGAN(nn.Module):
    """A generator and a discriminator; ``forward`` is one iteration's compute: D(real), D(G(z))."""

    def __init__(self, latent: int, g_width: int, d_width: int, image_size: int) -> None:
        super().__init__()
        self.G = Generator(latent, g_width, image_size)
        self.D = Discriminator(d_width, image_size)

    def forward(self, z: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
        """Discriminator logits on the real batch and on a generated batch."""
        return self.D(real), self.D(self.G(z))


class NeuMF(nn.Module):
    """Neural matrix factorization (He et al. 2017): GMF and an MLP tower over user/item embeddings."""

    def __init__(self, users: int, items: int, embed: int, layers: int) -> None:
        super().__init__()
        mlp_dim = embed * 2 ** (layers - 1)
        self.user_gmf = nn.Embedding(users, embed)
        self.item_gmf = nn.Embedding(items, embed)
        self.user_mlp = nn.Embedding(users, mlp_dim)
        self.item_mlp = nn.Embedding(items, mlp_dim)
        tower: list[nn.Module] = []
        width = 2 * mlp_dim
        for _ in range(layers):
            tower += [nn.Linear(width, width // 2), nn.ReLU()]
            width //= 2
        self.tower = nn.Sequential(*tower)
        self.out = nn.Linear(embed + width, 1)

    def forward(self, users: Tensor, items: Tensor) -> Tensor:
        """Interaction logits ``[B]`` for user and item ids ``[B]``."""
        gmf = self.user_gmf(users) * self.item_gmf(items)
        mlp = self.tower(torch.cat([self.user_mlp(users), self.item_mlp(items)], dim=-1))
        return self.out(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)
