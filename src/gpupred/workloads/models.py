"""Package-defined model families: MLP, LSTM/GRU LMs, BERT/GPT-like Transformers, DCGAN, NeuMF, and rebuilt published workloads.

All modules are batch-first and ONNX-exportable with a symbolic batch dimension.
"""

from __future__ import annotations

import math
from typing import Callable

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
    """A BERT-like encoder (bidirectional, post-LN) or GPT-like decoder (causal, pre-LN); ff = 4 * d_model.

    The head maps to the vocabulary (masked-LM or next-token), or to ``out_features`` per token (2 for
    SQuAD-style start/end logits)."""

    def __init__(
        self, vocab: int, d_model: int, heads: int, layers: int, seq_len: int, causal: bool, dropout: float = 0.1,
        out_features: int | None = None,
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
        self.head = nn.Linear(d_model, out_features or vocab)  # out_features=2: a span (start/end) head
        if causal:
            mask = torch.full((seq_len, seq_len), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)
        else:
            self.mask = None

    def forward(self, tokens: Tensor) -> Tensor:
        """Token logits ``[B, S, vocab or out_features]`` for tokens ``[B, S]``."""
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


# ---------------------------------------------------------------- rebuilt published workloads
# The modules below rebuild workloads that other groups measured (gpupred.importers); each docstring
# names what it follows and where it departs (docs/imported-workloads.md lists every approximation).


def _conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1, bias: bool = False) -> list[nn.Module]:
    """A k x k convolution (same padding) and its BatchNorm."""
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=bias), nn.BatchNorm2d(cout)]


class _Residual(nn.Module):
    """``relu(body(x) + shortcut(x))`` with a projection shortcut where shapes change."""

    def __init__(self, body: nn.Module, shortcut: nn.Module | None) -> None:
        super().__init__()
        self.body = body
        self.shortcut = shortcut if shortcut is not None else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """The block's output."""
        return torch.relu(self.body(x) + self.shortcut(x))


class CifarResNet18(nn.Module):
    """ResNet-18 for 32x32 images (kuangliu/pytorch-cifar, which Lucid vendors): 3x3 stem, no max-pool."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [*_conv_bn(3, 64), nn.ReLU()]
        cin = 64
        for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            for s in (stride, 1):
                body = nn.Sequential(*_conv_bn(cin, width, 3, s), nn.ReLU(), *_conv_bn(width, width))
                proj = nn.Sequential(*_conv_bn(cin, width, 1, s)) if (s != 1 or cin != width) else None
                layers.append(_Residual(body, proj))
                cin = width
        self.features = nn.Sequential(*layers)
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, classes]``."""
        return self.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class CifarVGG11(nn.Module):
    """VGG-11 for 32x32 images (kuangliu/pytorch-cifar): 3x3 conv + BN + ReLU stages, one Linear classifier."""

    STAGES: tuple[object, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for item in self.STAGES:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [*_conv_bn(cin, int(item), bias=True), nn.ReLU()]  # type: ignore[arg-type]
                cin = int(item)  # type: ignore[arg-type]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, classes]`` (32x32 input: the last stage is 1x1)."""
        return self.classifier(torch.flatten(self.features(x), 1))


class _InvertedResidual(nn.Module):
    """Expand 1x1 -> depthwise 3x3 -> project 1x1 (each with BN), squeeze-excitation in EfficientNet's; CIFAR-repo
    flavour."""

    def __init__(self, cin: int, cout: int, expansion: int, stride: int, efficientnet: bool) -> None:
        super().__init__()
        mid = expansion * cin
        self.body = nn.Sequential(*_conv_bn(cin, mid, 1), nn.ReLU(), *_conv_bn(mid, mid, 3, stride, groups=mid), nn.ReLU(),
                                  *_conv_bn(mid, cout, 1))
        self.stride = stride
        self.efficientnet = efficientnet
        self.proj = nn.Sequential(*_conv_bn(cin, cout, 1)) if (stride == 1 and cin != cout) else None
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cout, cout // 16, 1), nn.ReLU(),
                                nn.Conv2d(cout // 16, cout, 1), nn.Sigmoid()) if efficientnet else None

    def forward(self, x: Tensor) -> Tensor:
        """The block's output."""
        out = self.body(x)
        if self.stride == 1:
            short = self.proj(x) if self.proj is not None else x
        else:  # no shortcut on strided blocks; the vendored EfficientNet adds the block's own output instead
            short = out if self.efficientnet else None
        if self.se is not None:
            out = out * self.se(out)
        return out if short is None else out + short


def _inverted_residual_stages(cfg: tuple[tuple[int, int, int, int], ...], efficientnet: bool) -> list[nn.Module]:
    """A 3->32 conv-BN-ReLU stem and the inverted-residual stages of ``cfg`` (expansion, channels, blocks, stride);
    EfficientNet's blocks carry squeeze-excitation."""
    blocks: list[nn.Module] = [*_conv_bn(3, 32), nn.ReLU()]
    cin = 32
    for expansion, cout, n, stride in cfg:
        for s in [stride] + [1] * (n - 1):
            blocks.append(_InvertedResidual(cin, cout, expansion, s, efficientnet=efficientnet))
            cin = cout
    return blocks


class CifarMobileNetV2(nn.Module):
    """MobileNetV2 for 32x32 images (kuangliu/pytorch-cifar): stride-1 stem and second stage, 1280-d head."""

    CFG: tuple[tuple[int, int, int, int], ...] = (
        (1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        blocks = _inverted_residual_stages(self.CFG, efficientnet=False)
        blocks += [*_conv_bn(320, 1280, 1), nn.ReLU()]
        self.features = nn.Sequential(*blocks)
        self.linear = nn.Linear(1280, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, classes]``."""
        return self.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class CifarEfficientNetB0(nn.Module):
    """EfficientNet-B0 as Lucid vendors it for CIFAR (``workloads/cifar/models/efficientnet.py``).

    ReLU everywhere (no swish), squeeze-excitation to out/16 on every block, no 1280-d head conv; a 32x32
    input reaches 1x1 after the last stage and feeds one Linear.
    """

    CFG: tuple[tuple[int, int, int, int], ...] = (
        (1, 16, 1, 2), (6, 24, 2, 1), (6, 40, 2, 2), (6, 80, 3, 2), (6, 112, 3, 1), (6, 192, 4, 2), (6, 320, 1, 2))

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        blocks = _inverted_residual_stages(self.CFG, efficientnet=True)
        self.features = nn.Sequential(*blocks)
        self.linear = nn.Linear(320, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[B, classes]``."""
        return self.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


CIFAR_MODELS: dict[str, type[nn.Module]] = {
    "resnet18_cifar": CifarResNet18, "vgg11_cifar": CifarVGG11, "mobilenet_v2_cifar": CifarMobileNetV2,
    "efficientnet_b0_cifar": CifarEfficientNetB0,
}


def _bn_relu_stack(widths: tuple[int, ...], layer: Callable[[int, int], nn.Module] = nn.Linear) -> nn.Sequential:
    """``layer`` + BatchNorm1d + ReLU for each step of ``widths`` (every layer, the last included, ends in ReLU)."""
    layers: list[nn.Module] = []
    for cin, cout in zip(widths[:-1], widths[1:]):
        layers += [layer(cin, cout), nn.BatchNorm1d(cout), nn.ReLU()]
    return nn.Sequential(*layers)


def _point_mlp(widths: tuple[int, ...]) -> nn.Sequential:
    """Shared per-point layers: 1x1 Conv1d + BatchNorm + ReLU."""
    return _bn_relu_stack(widths, lambda cin, cout: nn.Conv1d(cin, cout, 1))


class PointNetCls(nn.Module):
    """PointNet classifier (Qi et al. 2017) as Lucid trains it: input 3x3 transform net, no feature transform."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.stn_points = _point_mlp((3, 64, 128, 1024))
        self.stn_head = nn.Sequential(_bn_relu_stack((1024, 512, 256)), nn.Linear(256, 9))
        self.register_buffer("eye", torch.eye(3).reshape(1, 9), persistent=False)
        self.conv12 = _point_mlp((3, 64, 128))
        self.conv3 = nn.Sequential(nn.Conv1d(128, 1024, 1), nn.BatchNorm1d(1024))
        self.fc1 = _bn_relu_stack((1024, 512))
        self.fc2 = nn.Linear(512, 256)
        self.dropout = nn.Dropout(0.3)
        self.bn2 = nn.BatchNorm1d(256)
        self.fc3 = nn.Linear(256, num_classes)

    def forward(self, points: Tensor) -> Tensor:
        """Logits ``[B, classes]`` for point clouds ``[B, 3, N]``."""
        t = self.stn_points(points).amax(dim=2)
        trans = (self.stn_head(t) + self.eye).reshape(-1, 3, 3)
        x = torch.bmm(points.transpose(1, 2), trans).transpose(1, 2)
        x = self.conv3(self.conv12(x)).amax(dim=2)
        x = self.fc1(x)
        x = torch.relu(self.bn2(self.dropout(self.fc2(x))))
        return self.fc3(x)


def _sinusoid_table(positions: int, dim: int) -> Tensor:
    """The fixed sine/cosine position table of Vaswani et al. ``[positions, dim]``."""
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    rate = torch.exp(-math.log(10000.0) * (torch.arange(dim) // 2 * 2).float() / dim)
    angle = pos * rate
    return torch.where(torch.arange(dim) % 2 == 0, torch.sin(angle), torch.cos(angle))


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer (Vaswani et al.), post-LN, ReLU feed-forward of 4 x d_model, fixed sinusoid
    positions, separate source/target embeddings and an unshared bias-free output projection."""

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int, heads: int, layers: int, seq_len: int,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, d_model)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_model)
        self.register_buffer("pos", _sinusoid_table(seq_len + 1, d_model)[None], persistent=False)
        self.core = nn.Transformer(d_model, heads, layers, layers, 4 * d_model, dropout, batch_first=True)
        self.proj = nn.Linear(d_model, tgt_vocab, bias=False)
        self.register_buffer("mask", torch.full((seq_len, seq_len), float("-inf")).triu(1), persistent=False)

    def forward(self, source: Tensor, target: Tensor) -> Tensor:
        """Next-token logits ``[B, T, tgt_vocab]`` for source ``[B, S]`` and shifted target tokens ``[B, T]``."""
        s, t = source.shape[1], target.shape[1]
        src = self.src_emb(source) + self.pos[:, :s]
        tgt = self.tgt_emb(target) + self.pos[:, :t]
        out = self.core(src, tgt, tgt_mask=self.mask[:t, :t], tgt_is_causal=True)
        return self.proj(out)


class FCNet(nn.Module):
    """A Linear + activation stack with the given output widths (no activation after the last Linear)."""

    def __init__(self, in_features: int, widths: list[int], activation: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_features
        for i, width in enumerate(widths):
            layers.append(nn.Linear(prev, width))
            if i < len(widths) - 1:
                layers.append(activation())
            prev = width
        self.model = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Outputs ``[B, widths[-1]]``."""
        return self.model(x)
