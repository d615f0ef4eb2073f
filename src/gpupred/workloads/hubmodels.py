"""Models by name: timm architectures and Hugging Face transformers, built in torch from their libraries' own
definitions (the graph side, the export and its cache, is :mod:`gpupred.graph.named`).

A :class:`NamedModel` says which model (a timm name; a transformers model type such as ``llama``, a local
``config.json`` or a folder holding one, or a hub id), with which head and at which input shape. Configs come
from the local file, or from the library's own definitions (a transformers config class's defaults, timm's
registry); a hub id is resolved by transformers (its cache, or the network where the machine has one: never in
tests). :func:`build_named` builds the model (on the meta device unless real weights are asked for: the profiler's
real-world workloads take the same route) with a synthetic batch. :meth:`NamedModel.cache_path` is where
:func:`gpupred.graph.named.named_graph` caches its structure-only graph, keyed by (name, config hash, input shape)
and computed without torch, timm or transformers (a local config is hashed; a name stands with the library version
that defines it), so a cached graph is predicted without importing torch.

The graph is the model's training-mode forward (logits, no loss), as the catalog's graphs are. A Hugging Face model's
attention is what transformers builds unless told otherwise (``attn_implementation`` left to the library: SDPA where
the model supports it, eager where it does not), or eager when asked (``attention="eager"``: ``--attention eager``).
The dynamo exporter writes an SDPA core out as ``MatMul(Q x sqrt(scale), K^T x sqrt(scale))`` -> mask -> Softmax ->
NaN guard -> ``MatMul(., V)``, which :func:`gpupred.step.physics.attention.attention_cores` tells apart from eager's
(``AttentionCore.sdpa``), so the footprint keeps the log-sum-exp and no score matrix for it. Graphs cached before
recipe 4 were all built eager (``NAMED_VERSION`` keys them apart). torch, timm and transformers (the torch extra) are
imported inside functions only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.workloads.hubconfigs import published_config, published_ids

NAMED_VERSION = 6  # bump when the recipe of named graphs changes: cached graphs are then rebuilt (4: SDPA by default;
# 5: an encoder's default head is its masked LM, an HF image model built for --image-size, and node names carry
# their module path, gpupred.graph.weightless.name_module_scopes; 6: without --seq-len, the tokens a learned position
# table holds: RoBERTa's 514 entries hold 512)
SEED = 0
EXPORT_BATCH = 2  # the batch the example inputs are built at (the exported batch axis is symbolic)
MAX_DEFAULT_SEQ = 2048  # without --seq-len: the model's longest position, at most this
# a config's fields that size its learned absolute position tables (Whisper's max_source_positions sizes its encoder's,
# fed by log-mel frames, not by the token sequence)
POSITION_FIELDS: tuple[str, ...] = ("max_position_embeddings", "n_positions", "max_target_positions", "n_ctx")
HF_ATTENTIONS: tuple[str, ...] = ("sdpa", "eager")  # attn_implementation asked of transformers (None: its default)
# heads: the transformers Auto class that builds each (the graph is that class's forward)
HEADS: dict[str, str] = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq-cls": "AutoModelForSequenceClassification",
    "image-cls": "AutoModelForImageClassification",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
}
# a config's ``architectures`` entry names its head by suffix
_ARCH_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("ForCausalLM", "causal-lm"), ("LMHeadModel", "causal-lm"), ("ForMaskedLM", "masked-lm"),
    ("ForSequenceClassification", "seq-cls"), ("ForImageClassification", "image-cls"),
    ("ForSpeechSeq2Seq", "speech-seq2seq"), ("ForConditionalGeneration", "seq2seq-lm"),
)
TORCH_EXTRA = 'install the torch extra: pip install -e ".[torch]"'


@dataclass(frozen=True)
class NamedModel:
    """A model named by its library: ``source`` timm or hf, the name, the head and the input shape (None: default)."""

    source: Literal["timm", "hf"]
    name: str
    head: str | None = None  # hf only: one of HEADS (default: the config's architecture, else its model kind)
    seq_len: int | None = None  # hf text models: tokens per sample (default: min(longest position, 2048))
    image_size: int | None = None  # image side (default: the model's own)
    overrides: tuple[tuple[str, Any], ...] = field(default=())  # config fields set over the named config
    attention: str | None = None  # hf only: attn_implementation (None: transformers' default, SDPA where supported)

    def __post_init__(self) -> None:
        if self.source not in ("timm", "hf"):
            raise GpupredError(f"unknown model source {self.source!r}; use timm or hf")
        if self.attention is not None and self.attention not in HF_ATTENTIONS:
            raise GpupredError(f"{self.name}: unknown attention implementation {self.attention!r}; use "
                               f"{' or '.join(HF_ATTENTIONS)} (or none: transformers' default)")
        if self.head is not None and self.head not in HEADS:
            raise GpupredError(f"unknown head {self.head!r}; use one of {', '.join(HEADS)}")
        if self.head is not None and self.source == "timm" and self.head != "image-cls":
            raise GpupredError(f"timm models are image classifiers: head {self.head!r} does not apply")
        if self.seq_len is not None and self.source == "timm":
            raise GpupredError(f"timm models take images: a sequence length does not apply to {self.name}")
        for label, value in (("seq_len", self.seq_len), ("image_size", self.image_size)):
            if value is not None and int(value) < 1:
                raise GpupredError(f"{self.name}: {label} must be positive, got {value}")

    @property
    def label(self) -> str:
        """A short readable name: the timm name, the model type or hub id, or a local config's folder (and stem)."""
        path = _local_config(self.name) if self.source == "hf" else None
        text = self.name if path is None else path.resolve().parent.name + ("" if path.stem == "config" else f"-{path.stem}")
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "model"

    @property
    def shown(self) -> str:
        """How answers and errors name it: a hub id or model type as typed, a timm name, a local config as
        :attr:`label` shows it."""
        return self.name if self.source == "hf" and _local_config(self.name) is None else self.label

    def cache_key(self) -> dict[str, Any]:
        """What the cached graph depends on, computed without torch, timm or transformers."""
        library = "timm" if self.source == "timm" else "transformers"
        return {
            "recipe": NAMED_VERSION, "source": self.source, "config": _config_identity(self),
            "head": self.head, "seq_len": self.seq_len, "image_size": self.image_size,
            "overrides": [[k, v] for k, v in self.overrides], library: _installed(library), "torch": _installed("torch"),
            "attention": self.attention or "default",
        }

    def cache_path(self) -> Path:
        """Where its structure-only graph is cached: ``<cache>/named/<label>-<key hash>.onnx``."""
        digest = hashlib.sha256(json.dumps(self.cache_key(), sort_keys=True, default=str).encode()).hexdigest()[:16]
        return config.ONNX_CACHE / "named" / f"{self.source}-{self.label}-{digest}.onnx"


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _config_identity(named: NamedModel) -> str:
    """The sha256 of a local config file (wherever it lies), else the name (a library's definition, fixed by its version,
    or a hub id)."""
    path = _local_config(named.name) if named.source == "hf" else None
    if path is None:
        published = published_config(named.name) if named.source == "hf" else None
        return named.name if published is None else published.identity()
    if not path.is_file():
        raise GpupredError(f"{named.name}: no such config file; give a transformers config.json (or the folder "
                           "holding one), a model type such as llama or bert, or a hub id")
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _local_config(name: str) -> Path | None:
    """The config.json a name points at when it is a path (a .json file, or a folder), else None."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path / "config.json"
    if path.suffix == ".json" or path.is_file():
        return path
    return None


def timm_model(name: str, image_size: int | None = None, **overrides: Any) -> NamedModel:
    """A timm architecture by its registry name (random weights, no download); ``overrides`` go to create_model."""
    return NamedModel("timm", name, None, None, image_size, tuple(sorted(overrides.items())))


def hf_model(model: str, head: str | None = None, seq_len: int | None = None, image_size: int | None = None,
             attention: str | None = None, **overrides: Any) -> NamedModel:
    """A Hugging Face model: a model type (``llama``), a local config.json or its folder, or a hub id; ``attention``
    ``eager`` builds eager attention (default: transformers', SDPA where the model supports it)."""
    return NamedModel("hf", str(model), head, seq_len, image_size, tuple(sorted(overrides.items())), attention)


# ---------------------------------------------------------------- names, checked without importing the libraries


def _package_dir(package: str) -> Path | None:
    """Where an installed package's sources lie (found, not imported: timm and transformers import torch)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


@lru_cache(maxsize=1)
def timm_names() -> frozenset[str]:
    """The architectures timm registers (``@register_model`` in its sources); empty when timm is not installed."""
    root = _package_dir("timm")
    pattern = re.compile(r"@register_model\s*\n\s*def\s+(\w+)\s*\(")
    names: set[str] = set()
    for path in sorted((root / "models").glob("*.py")) if root is not None else ():
        names.update(pattern.findall(path.read_text(errors="ignore")))
    return frozenset(names)


@lru_cache(maxsize=1)
def hf_model_types() -> frozenset[str]:
    """The model types transformers knows (its auto mappings' config names); empty when not installed."""
    root = _package_dir("transformers")
    pattern = re.compile(r'"([\w.-]+)"\s*[:,]\s*"\w+Config"')
    names: set[str] = set()
    for path in sorted((root / "models" / "auto").glob("*.py")) if root is not None else ():
        names.update(pattern.findall(path.read_text(errors="ignore")))
    return frozenset(names)


def _closest(name: str, known: frozenset[str]) -> str:
    import difflib

    near = difflib.get_close_matches(name, sorted(known), n=5, cutoff=0.6)
    return f" (closest: {', '.join(near)})" if near else ""


def check_name(named: NamedModel) -> None:
    """Refuse, in a fraction of a second, a timm name timm does not register, or an --hf name that is no local config,
    no transformers model type and no hub id (owner/name), with the closest names; where the installed library's
    names cannot be read, the library says it when building."""
    if named.source == "timm":
        names, base = timm_names(), named.name.split(".")[0]  # "resnet50.a1_in1k": a pretrained tag of resnet50
        if names and base not in names:
            raise GpupredError(f"--timm {named.name}: timm {_installed('timm')} has no such model"
                               f"{_closest(base, names)}; `timm.list_models()` lists them")
        return
    types = hf_model_types()
    if _local_config(named.name) is not None or looks_like_hub_id(named.name) or not types or named.name in types:
        return
    raise GpupredError(f"--hf {named.name}: not a transformers model type{_closest(named.name, types)}, not a "
                       "config.json here, and not a hub id (owner/name, or a legacy one such as bert-base-uncased)")


def looks_like_hub_id(name: str) -> bool:
    """Whether a name is shaped like a Hugging Face hub id: ``owner/name``, or a legacy id without an owner, which
    the hub still serves (``bert-base-uncased``, ``gpt2-large``: a model type with a size or variant after a
    hyphen). A single word that is no model type (``bertt``) is a typo, refused without asking the hub."""
    if "/" in name:
        return True
    return re.fullmatch(r"[A-Za-z0-9][\w.]*(-[\w.]+)+", name) is not None


# ---------------------------------------------------------------- building (torch, timm, transformers)


@dataclass
class BuiltNamed:
    """A named model built in torch: the module, its example inputs (keyword inputs for transformers), what was
    resolved (head, sequence length, image size) and torch's parameter count."""

    named: NamedModel
    model: Any
    example: Any  # a tensor (timm) or a dict of keyword tensors (transformers)
    head: str
    seq_len: int | None
    image_size: int | None
    params: int
    config: dict[str, Any]


def _import(module: str, named: NamedModel) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        flag = "--timm" if named.source == "timm" else "--hf"
        raise GpupredError(f"{flag} {named.name}: models by name need {module} (not installed); {TORCH_EXTRA}") from None


def build_named(named: NamedModel, weights: bool = False, batch: int = EXPORT_BATCH) -> BuiltNamed:
    """Build a named model (on the meta device, or with seeded random weights) and a synthetic batch of ``batch``."""
    _import("torch", named)
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        building = contextlib.nullcontext() if weights else torch.device("meta")  # as gpupred.weightless() builds
        if named.source == "timm":
            return _build_timm(named, building, batch)
        return _build_hf(named, building, batch)


def _build_timm(named: NamedModel, building: Any, batch: int) -> BuiltNamed:
    """A timm model (``img_size`` passed when an image size is asked and the model takes one) and random images."""
    timm = _import("timm", named)
    import torch

    kwargs = dict(named.overrides)
    if not timm.is_model(named.name.split(".")[0]):
        near = ", ".join(timm.list_models(f"*{named.name.split('.')[0]}*")[:5]) or "none"
        raise GpupredError(f"--timm {named.name}: timm {_installed('timm')} has no such model (similar: {near}); "
                           "`timm.list_models()` lists them")
    with building:
        try:
            model = timm.create_model(named.name, pretrained=False, **kwargs,
                                      **({"img_size": named.image_size} if named.image_size else {}))
        except TypeError:  # a convolutional network takes any image size and no img_size argument
            model = timm.create_model(named.name, pretrained=False, **kwargs)
    channels, height, width = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    size = named.image_size or height
    g = torch.Generator().manual_seed(SEED)
    example = torch.randn(batch, channels, size, size if named.image_size else width, generator=g)
    params = int(sum(p.numel() for p in model.parameters()))
    return BuiltNamed(named, model, example, "image-cls", None, size, params, {"timm_name": named.name, **kwargs})


def hf_config(named: NamedModel) -> Any:
    """The transformers config of a named model: a local file, a model type's defaults, or a hub id, built with the
    overrides."""
    transformers = _import("transformers", named)
    path = _local_config(named.name)
    overrides = dict(named.overrides)  # given to the constructor, so that derived fields follow (head_dim, kv heads)
    if path is not None:
        _config_identity(named)  # a missing file: one line
        values = json.loads(path.read_text())
        model_type = values.pop("model_type", None)
        if model_type is None:
            raise GpupredError(f"{path}: no model_type, so it is not a transformers config.json")
        return transformers.AutoConfig.for_model(model_type, **{**values, **overrides})
    if named.name in transformers.CONFIG_MAPPING:
        return transformers.AutoConfig.for_model(named.name, **overrides)
    published = published_config(named.name)
    if published is not None:
        return transformers.AutoConfig.for_model(published.model_type, **{**published.fields, **overrides})
    return _hub_config(transformers, named.name, overrides)


def _hub_config(transformers: Any, name: str, overrides: dict[str, Any]) -> Any:
    """A hub id's config from transformers' cache, else from the hub where it answers within seconds; refused in one
    line otherwise (offline, transformers would retry for half a minute)."""
    try:
        return transformers.AutoConfig.from_pretrained(name, local_files_only=True, **overrides)
    except (OSError, ValueError):
        pass
    known = f"; {len(published_ids())} widely used ones are known offline (`gpupred named` lists them)"
    where = hub_unreachable()
    if where is not None:
        raise GpupredError(f"--hf {name}: not a local config.json, not a transformers model type, not in "
                           f"transformers' cache, and {where}: give a config.json{_closest_id(name)}{known}")
    try:
        return transformers.AutoConfig.from_pretrained(name, **overrides)
    except (OSError, ValueError) as err:
        raise GpupredError(
            f"--hf {name}: not a local config.json, not a transformers model type (e.g. llama, bert, gpt2, "
            f"t5) and the hub gave no config ({' '.join(str(err).split())[:160]}); give a config.json") from None


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be asked (offline by setting, or no connection to its host within
    ``timeout`` seconds), else None."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "the hub is off (HF_HUB_OFFLINE)"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    try:
        socket.create_connection((host, url.port or (80 if url.scheme == "http" else 443)), timeout=timeout).close()
    except OSError as err:
        return f"{host} cannot be reached ({err.strerror or type(err).__name__})"
    return None


def _closest_id(name: str) -> str:
    """The table's ids closest to a name, as a clause (empty when none is close)."""
    import difflib

    ids = {i.lower(): i for i in published_ids()}
    near = difflib.get_close_matches(name.lower(), sorted(ids), n=3, cutoff=0.6)
    return f" or use a known id ({', '.join(ids[n] for n in near)})" if near else ""


def default_head(cfg: Any) -> str:
    """The head a config names (its ``architectures``), else its kind: encoder-decoder, vision, an encoder's masked
    LM, else a causal LM."""
    for arch in getattr(cfg, "architectures", None) or ():
        for suffix, head in _ARCH_SUFFIXES:
            if arch.endswith(suffix):
                return "speech-seq2seq" if head == "seq2seq-lm" and hasattr(cfg, "num_mel_bins") else head
    if getattr(cfg, "is_encoder_decoder", False):
        return "speech-seq2seq" if hasattr(cfg, "num_mel_bins") else "seq2seq-lm"
    if hasattr(cfg, "image_size") and hasattr(cfg, "num_channels"):
        return "image-cls"
    import transformers

    masked = type(cfg) in transformers.AutoModelForMaskedLM._model_mapping
    if masked and not getattr(cfg, "is_decoder", False):  # an encoder (BERT): its masked LM, not BertLMHeadModel
        return "masked-lm"
    return "causal-lm" if type(cfg) in transformers.AutoModelForCausalLM._model_mapping else "masked-lm"


def _build_hf(named: NamedModel, building: Any, batch: int) -> BuiltNamed:
    """A transformers model from its config through the head's Auto class, the named attention (default:
    transformers'), fp32, no cache."""
    transformers = _import("transformers", named)
    import torch

    cfg = hf_config(named)
    head = named.head or default_head(cfg)
    auto = getattr(transformers, HEADS[head])
    if type(cfg) not in auto._model_mapping:
        can = [h for h, cls in HEADS.items() if type(cfg) in getattr(transformers, cls)._model_mapping]
        raise GpupredError(f"--hf {named.name}: {type(cfg).__name__} has no {head} model in transformers; its heads: "
                           f"{', '.join(can) or 'none'} (--head)")
    image = head == "image-cls"
    if (named.seq_len if image else named.image_size) is not None:  # refused, not ignored
        raise GpupredError(f"--hf {named.name}: {'--seq-len' if image else '--image-size'} does not apply to its "
                           f"{head} model ({'images' if image else 'token sequences'}); drop it")
    if image and named.image_size is not None and hasattr(cfg, "image_size"):
        cfg.image_size = int(named.image_size)  # a model made for that side (ViT's position table follows it)
    cfg.use_cache = False
    with building:
        asked = {"attn_implementation": named.attention} if named.attention else {}
        model = auto.from_config(cfg, dtype=torch.float32, **asked)
    if named.seq_len is not None and not image:
        _check_positions(named, model, cfg)  # before any export: the real job would fail on its embedding lookup
    seq = named.seq_len or _default_seq(cfg, None if image else position_limit(model, cfg))
    example, image = _hf_inputs(head, cfg, batch, seq, named.image_size)
    params = int(sum(p.numel() for p in model.parameters()))
    return BuiltNamed(named, model, example, head, None if head == "image-cls" else seq, image, params,
                      {"model_type": cfg.model_type, "class": type(model).__name__,
                       "attn_implementation": getattr(model.config, "_attn_implementation", None)})


def position_limit(model: Any, cfg: Any) -> tuple[int, str] | None:
    """The most tokens a transformers model's learned absolute position tables hold, and the config field that sets
    it (None: no such table; rotary, relative and ALiBi models run at any length). A table is an ``nn.Embedding`` beside
    a token table (same parent: the two are looked up with the same tokens) whose size is a position field of
    :data:`POSITION_FIELDS`, or that + 2 (OPT's and BART's learned offset: the field's value is what it holds); one with
    a ``padding_idx`` (RoBERTa's) counts its positions from after it. A table with no token table beside it is fed
    otherwise (Whisper's encoder: log-mel frames; DeBERTa's relative table: read as a weight) and does not count."""
    from torch import nn

    fields: dict[int, str] = {}
    for key in POSITION_FIELDS:
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:  # an alias (GPT-2's max_position_embeddings) named by its field
            fields.setdefault(value, (getattr(cfg, "attribute_map", None) or {}).get(key, key))
    vocab = getattr(cfg, "vocab_size", None)
    try:
        tokens_in = model.get_input_embeddings()
    except (NotImplementedError, AttributeError):
        tokens_in = None
    limits: list[tuple[int, str]] = []
    for parent in model.modules():
        tables = [m for m in parent.children() if isinstance(m, nn.Embedding)]
        is_tokens = [m is tokens_in or m.num_embeddings == vocab for m in tables]
        if not any(is_tokens):
            continue
        for table, tokens in zip(tables, is_tokens):
            size = table.num_embeddings
            if tokens or (size not in fields and size - 2 not in fields):
                continue
            if size in fields:
                held = size if table.padding_idx is None else size - table.padding_idx - 1
                limits.append((held, fields[size]))
            else:
                limits.append((size - 2, fields[size - 2]))
    return min(limits) if limits else None


def _check_positions(named: NamedModel, model: Any, cfg: Any) -> None:
    """Refuse, in one line, an asked sequence longer than the model's learned position tables hold
    (:func:`position_limit`), naming the config field that would hold it."""
    found = position_limit(model, cfg)
    if found is None or named.seq_len is None or named.seq_len <= found[0]:
        return
    limit, key = found
    value = int(getattr(cfg, key))
    held = f"{value} positions" if value == limit else f"{value} entries, {limit} positions"
    longer = f"{key}={named.seq_len + value - limit}"
    raise GpupredError(f"--hf {named.name}: --seq-len {named.seq_len} is longer than its learned position table "
                       f"({key} = {held}); give --seq-len {limit} or less, or a config with a longer table "
                       f"({longer} in a config.json given to --hf, or hf_model(..., {longer}))")


def _default_seq(cfg: Any, limit: tuple[int, str] | None = None) -> int:
    """The model's longest position, at most :data:`MAX_DEFAULT_SEQ`: what its learned position tables hold
    (``limit``, :func:`position_limit`: RoBERTa's 514 entries hold 512 tokens), else ``max_position_embeddings`` or
    its alias."""
    if limit is not None:
        return min(limit[0], MAX_DEFAULT_SEQ)
    for key in POSITION_FIELDS:
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return min(value, MAX_DEFAULT_SEQ)
    return 512


def _hf_inputs(head: str, cfg: Any, batch: int, seq: int, image_size: int | None) -> tuple[dict[str, Any], int | None]:
    """Seeded keyword inputs of a head at a batch: token ids below the vocabulary and a mask that attends everywhere,
    pixels, or log-mel frames (Whisper's encoder takes 2 x its positions); the image side used."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    vocab = int(getattr(cfg, "vocab_size", None) or 1000)
    if head == "image-cls":
        size = image_size or int(cfg.image_size)
        channels = int(getattr(cfg, "num_channels", 3))
        return {"pixel_values": torch.randn(batch, channels, size, size, generator=g)}, size
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    if head == "speech-seq2seq":
        frames = 2 * int(cfg.max_source_positions)
        return {"input_features": torch.randn(batch, int(cfg.num_mel_bins), frames, generator=g),
                "decoder_input_ids": ids}, None
    text = {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
    if head == "seq2seq-lm":
        return {**text, "decoder_input_ids": torch.randint(0, vocab, (batch, seq), generator=g)}, None
    return text, None
