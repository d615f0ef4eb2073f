"""The sweep plan: a deterministic, family-balanced list of workload specs (torch-free).

Each family has a plan: its factors (architecture, input size, knobs, batch-size step, precision,
optimizer) and a target count. Specs are drawn from shuffled "decks" of every factor with a fixed
seed per family, so each factor's values appear about equally often and their combinations vary;
batch sizes are a base per input size times 2**step. Families are then interleaved round-robin, so
any prefix of :func:`catalog` is a balanced sample across families.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gpupred.errors import GpupredError
from gpupred.workloads.spec import CATALOG_FAMILIES, FAMILIES, OPTIMIZERS, WorkloadSpec

PER_FAMILY = 20  # specs drawn per family (fewer only if a family's grid is smaller)
CATALOG_PRECISIONS: tuple[str, ...] = ("fp32", "bf16")  # fp16 is for published AMP workloads, not sampled
FUSED_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
BS_STEPS: tuple[int, ...] = (0, 1, 2, 3, 4)  # batch size = base * 2**step: a 16x span per input size

# Base (smallest) batch size per image side for torchvision CNNs, sized for an 80 GB H100.
_CNN_BASE_BS = {32: 64, 64: 32, 128: 32, 160: 16, 224: 16, 299: 8}


@dataclass(frozen=True)
class _Plan:
    """How one family's specs are drawn: factor values and a maker from one draw to a spec."""

    family: str
    factors: dict[str, tuple[Any, ...]]
    make: Callable[[dict[str, Any]], WorkloadSpec | None]
    n: int = PER_FAMILY


def _common() -> dict[str, tuple[Any, ...]]:
    """Factors every family shares: batch-size step, precision, optimizer."""
    return {"step": BS_STEPS, "precision": CATALOG_PRECISIONS, "optimizer": OPTIMIZERS}


def _cnn(family: str, sizes: tuple[int, ...], base: dict[int, int] | None = None) -> _Plan:
    """A torchvision family: architectures x image sizes x batch steps x precision x optimizer."""
    base = base or _CNN_BASE_BS

    def make(d: dict[str, Any]) -> WorkloadSpec:
        bs = base[d["img"]] * 2 ** d["step"]
        return WorkloadSpec(family, d["arch"], bs, d["img"], d["precision"], d["optimizer"])

    return _Plan(family, {"arch": FAMILIES[family].archs, "img": sizes, **_common()}, make)


def _knobbed(family: str, factors: dict[str, tuple[Any, ...]], fn: Callable[[dict[str, Any]], WorkloadSpec | None]) -> _Plan:
    """A package-defined family: its knob factors plus the common ones."""
    return _Plan(family, {**factors, **_common()}, fn)


def _mlp(d: dict[str, Any]) -> WorkloadSpec:
    return WorkloadSpec("mlp", "mlp", 128 * 2 ** d["step"], d["in"], d["precision"], d["optimizer"],
                        (("w", d["w"]), ("d", d["d"])))


def _rnn(family: str) -> Callable[[dict[str, Any]], WorkloadSpec]:
    def make(d: dict[str, Any]) -> WorkloadSpec:
        bs = (32 if d["seq"] <= 64 else 16) * 2 ** d["step"]
        knobs = (("v", d["v"]), ("e", d["eh"][0]), ("h", d["eh"][1]), ("l", d["l"]))
        return WorkloadSpec(family, family, bs, d["seq"], d["precision"], d["optimizer"], knobs)

    return make


def _transformer(family: str) -> Callable[[dict[str, Any]], WorkloadSpec]:
    def make(d: dict[str, Any]) -> WorkloadSpec:
        m, h = d["mh"]
        bs = max(2, 2048 // d["seq"]) * 2 ** d["step"]  # 2k..32k tokens per batch
        knobs = (("v", d["v"]), ("m", m), ("h", h), ("l", d["l"]))
        return WorkloadSpec(family, family, bs, d["seq"], d["precision"], d["optimizer"], knobs)

    return make


def _dcgan(d: dict[str, Any]) -> WorkloadSpec:
    bs = (64 if d["img"] == 32 else 32) * 2 ** d["step"]
    return WorkloadSpec("dcgan", "dcgan", bs, d["img"], d["precision"], d["optimizer"],
                        (("z", d["z"]), ("g", d["gk"][0]), ("k", d["gk"][1])))


def _neumf(d: dict[str, Any]) -> WorkloadSpec:
    u, i = d["data"]
    return WorkloadSpec("neumf", "neumf", 256 * 4 ** d["step"], 0, d["precision"], d["optimizer"],
                        (("u", u), ("i", i), ("e", d["e"]), ("l", d["l"])))


def _plans() -> list[_Plan]:
    """One plan per catalog family, in FAMILIES order."""
    imagenet = (224, 160, 128)
    plans = {
        "resnet": _cnn("resnet", (32, 224, 128)),
        "vgg": _cnn("vgg", imagenet),
        "alexnet": _cnn("alexnet", (224, 128), {224: 64, 128: 128}),
        "googlenet": _cnn("googlenet", imagenet),
        "inception": _cnn("inception", (299, 224)),
        "mobilenet": _cnn("mobilenet", (224, 160, 32)),
        "densenet": _cnn("densenet", imagenet),
        "efficientnet": _cnn("efficientnet", imagenet),
        "squeezenet": _cnn("squeezenet", (224, 128), {224: 32, 128: 64}),
        "shufflenet": _cnn("shufflenet", (224, 128), {224: 32, 128: 64}),
        "vit": _cnn("vit", (224, 160, 128), {224: 8, 160: 16, 128: 16}),
        "mlp": _knobbed("mlp", {"w": (256, 512, 1024, 2048, 4096), "d": (2, 4, 8), "in": (256, 784, 3072)}, _mlp),
        "lstm": _knobbed("lstm", {"v": (10000, 33278), "eh": ((128, 256), (256, 512), (512, 1024), (1024, 1024)),
                                  "l": (1, 2, 3), "seq": (32, 64, 128)}, _rnn("lstm")),
        "gru": _knobbed("gru", {"v": (10000, 33278), "eh": ((128, 256), (256, 512), (512, 1024), (1024, 1024)),
                                "l": (1, 2, 3), "seq": (32, 64, 128)}, _rnn("gru")),
        "bert": _knobbed("bert", {"v": (8192, 30522), "mh": ((256, 4), (512, 8), (768, 12), (1024, 16)),
                                  "l": (2, 4, 6, 12), "seq": (64, 128, 256, 512)}, _transformer("bert")),
        "gpt": _knobbed("gpt", {"v": (8192, 50257), "mh": ((256, 4), (512, 8), (768, 12), (1024, 16)),
                                "l": (2, 4, 6, 12), "seq": (64, 128, 256, 512)}, _transformer("gpt")),
        "dcgan": _knobbed("dcgan", {"z": (64, 100, 128), "gk": ((32, 32), (64, 64), (128, 128), (64, 32), (128, 64)),
                                    "img": (32, 64)}, _dcgan),
        "neumf": _knobbed("neumf", {"data": ((6040, 3706), (138493, 26744), (162541, 59047)), "e": (8, 16, 32, 64),
                                    "l": (1, 2, 3, 4)}, _neumf),
    }
    assert tuple(plans) == CATALOG_FAMILIES
    return list(plans.values())


def _decks(values: tuple[Any, ...], rng: random.Random) -> Iterator[Any]:
    """Endless draws from ``values``: each pass is a fresh shuffle, so counts stay balanced."""
    while True:
        deck = list(values)
        rng.shuffle(deck)
        yield from deck


def _draw(plan: _Plan) -> list[WorkloadSpec]:
    """``plan.n`` distinct specs for one family, deterministically."""
    rng = random.Random(f"gpupred-catalog-{plan.family}")
    decks = {k: _decks(v, rng) for k, v in plan.factors.items()}
    out: dict[str, WorkloadSpec] = {}
    for _ in range(plan.n * 50):
        if len(out) == plan.n:
            break
        spec = plan.make({k: next(d) for k, d in decks.items()})
        if spec is not None and spec.id not in out:
            out[spec.id] = spec
    return list(out.values())


def _interleave(groups: Iterable[list[WorkloadSpec]]) -> list[WorkloadSpec]:
    """Round-robin over the groups: one spec from each in turn."""
    groups = [list(g) for g in groups]
    out: list[WorkloadSpec] = []
    for i in range(max(map(len, groups), default=0)):
        out += [g[i] for g in groups if i < len(g)]
    return out


@lru_cache(maxsize=1)
def _catalog() -> tuple[WorkloadSpec, ...]:
    """The catalog, computed once."""
    return tuple(_interleave(_draw(p) for p in _plans()))


def catalog() -> list[WorkloadSpec]:
    """The sweep plan: 360 deterministic specs, 20 per family, round-robin so any prefix is balanced."""
    return list(_catalog())


def fused_catalog() -> list[WorkloadSpec]:
    """Inter-trial fusion sweep: 5 small models x F in 1..64 x {fp32, bf16}, interleaved by model."""
    bases = [
        WorkloadSpec("resnet", "resnet18", 128, 32, optimizer="sgd"),
        WorkloadSpec("mobilenet", "mobilenet_v2", 128, 32, optimizer="sgd"),
        WorkloadSpec("mlp", "mlp", 256, 784, optimizer="sgd", knobs=(("w", 1024), ("d", 4))),
        WorkloadSpec("lstm", "lstm", 32, 64, optimizer="adam", knobs=(("v", 10000), ("e", 256), ("h", 512), ("l", 2))),
        WorkloadSpec("bert", "bert", 32, 128, optimizer="adam", knobs=(("v", 8192), ("m", 256), ("h", 4), ("l", 4))),
    ]
    groups = []
    for b in bases:
        groups.append([
            WorkloadSpec(b.family, b.arch, b.batch_size, b.input_size, p, b.optimizer, b.knobs, f)  # type: ignore[arg-type]
            for f in FUSED_COUNTS for p in CATALOG_PRECISIONS
        ])
    return _interleave(groups)


def by_family(specs: Iterable[WorkloadSpec]) -> dict[str, list[WorkloadSpec]]:
    """Specs grouped by family, families in FAMILIES order, each group in input order."""
    out: dict[str, list[WorkloadSpec]] = {f: [] for f in FAMILIES}
    for s in specs:
        out[s.family].append(s)
    return {f: v for f, v in out.items() if v}


def get(workload_id: str) -> WorkloadSpec:
    """The spec for an id (catalogued or not); :class:`GpupredError` naming the id if it is malformed."""
    return WorkloadSpec.from_id(workload_id)


def check_family(family: str) -> str:
    """``family`` if it is known, else :class:`GpupredError` listing the known ones."""
    if family not in FAMILIES:
        raise GpupredError(f"unknown workload family {family!r}; known: {', '.join(FAMILIES)}")
    return family
