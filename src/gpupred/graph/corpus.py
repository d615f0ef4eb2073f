"""The corpus of real-world graphs: timm and Hugging Face models, exported structure-only into ``data/corpus/``.

Every entry is exported twice with :func:`gpupred.graph.export.export_model`, neither with the catalog's
precomputed shape maps (the featurizer must find every shape itself, as for a user's file): with a symbolic
batch (``NAME.onnx.gz``) and with torch's default fixed batch of 1 (``NAME.b1.onnx.gz``). The index
(``index.json``) records per model its source (timm name, or Hugging Face class and config), torch's
parameter count (``sum(p.numel())``), the parameters no forward reads (a graph cannot show those), and
torch's forward FLOPs at the export batch (``torch.utils.flop_counter.FlopCounterMode``: matmuls,
convolutions and attention, 2 FLOPs per multiply-add), so the tests compare the featurizer with torch
without building a torch model. Hugging Face models are built from config classes (no download), small
where the architecture is the point. ``gpupred export --corpus`` rebuilds it; torch, timm and transformers
(the ``corpus`` extra) are imported inside functions only.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.files import atomic_write_bytes, sha256
from gpupred.workloads.hubmodels import NamedModel, hf_model

CORPUS_BATCH = 2  # the symbolic export is traced, and torch's FLOPs counted, at this batch
FIXED_BATCH = 1  # torch.onnx.export's default: a fixed batch of the example's size
REBATCH_TOLERANCE = 0.02  # a fixed-batch export re-batched agrees with the symbolic one within this, feature by feature
SEED = 0

# timm architectures: small variants where the architecture is the point; same-padding (tf_*) ones on purpose.
# Left out: volo_d1_224 (no exporter takes its aten::col2im at opset 17, and export_model says so in one line);
# 14 more (res2net, resnest, rexnet, selecsls, fastvit, efficientformer, focalnet, inception_next, botnet, cspnet,
# vovnet, sknet, hiera, sequencer) only to keep the export within the session's time on 2 shared cores.
TIMM_MODELS: tuple[str, ...] = (
    "tf_efficientnet_b0", "tf_efficientnet_lite0", "tf_efficientnetv2_b0", "efficientnet_b0", "tf_mixnet_s",
    "mnasnet_100", "tf_mobilenetv3_small_100", "mobilenetv3_small_100", "mobilenetv4_conv_small", "resnet18",
    "resnet50d", "seresnext26d_32x4d", "regnetx_002", "regnety_002", "regnetz_b16", "eca_nfnet_l0", "nf_resnet26",
    "convnext_atto", "convnextv2_atto", "swin_tiny_patch4_window7_224", "swinv2_tiny_window8_256",
    "swinv2_cr_tiny_ns_224", "davit_tiny", "maxvit_nano_rw_256", "maxvit_tiny_tf_224", "coatnet_nano_rw_224",
    "eva02_tiny_patch14_224", "vit_tiny_patch16_224", "deit_tiny_patch16_224", "deit_tiny_distilled_patch16_224",
    "vit_tiny_r_s16_p8_224", "levit_128s", "pit_ti_224", "cait_xxs24_224", "xcit_nano_12_p16_224",
    "crossvit_tiny_240", "twins_svt_small", "pvt_v2_b0", "poolformer_s12", "mixer_s16_224", "resmlp_12_224",
    "gmlp_ti16_224", "coat_lite_tiny", "tnt_s_patch16_224", "ghostnet_100", "hrnet_w18_small", "dla34", "dpn68",
    "densenet121", "inception_v3", "pnasnet5large", "xception41", "hgnetv2_b0", "repvit_m0_9", "efficientvit_b0",
    "mobilevit_xxs", "edgenext_xx_small", "tiny_vit_5m_224", "nest_tiny_jx", "gcvit_xxtiny", "gernet_s",
    "mambaout_femto", "starnet_s1", "convit_tiny",
)


@dataclass(frozen=True)
class HFEntry:
    """A Hugging Face model built from a config: its class, config class and arguments, and its inputs."""

    name: str
    model_class: str
    config_class: str
    config: dict[str, Any]
    inputs: str  # text, text-labels, qa, seq2seq, seq2seq-labels, whisper, whisper-labels, image, image-labels
    seq: int = 32


_TEXT = {"vocab_size": 1000, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 256, "max_position_embeddings": 128}
_BART = {"vocab_size": 1000, "d_model": 128, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256, "max_position_embeddings": 128}
_IMAGE = {"image_size": 64, "patch_size": 16, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 256, "num_labels": 10}
_WHISPER_IDS = {"pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2, "decoder_start_token_id": 3}
HF_MODELS: tuple[HFEntry, ...] = (
    HFEntry("hf-bert", "BertModel", "BertConfig", _TEXT, "text"),
    HFEntry("hf-bert-cls-labels", "BertForSequenceClassification", "BertConfig", _TEXT, "cls-labels"),
    HFEntry("hf-bert-qa-labels", "BertForQuestionAnswering", "BertConfig", _TEXT, "qa"),
    HFEntry("hf-roberta-mlm-labels", "RobertaForMaskedLM", "RobertaConfig", {**_TEXT, "max_position_embeddings": 130}, "text-labels"),
    HFEntry("hf-gpt2-lm-labels", "GPT2LMHeadModel", "GPT2Config",
            {"vocab_size": 1000, "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 128}, "text-labels"),
    HFEntry("hf-gpt2", "GPT2Model", "GPT2Config", {"vocab_size": 1000, "n_embd": 128, "n_layer": 2, "n_head": 4,
                                                   "n_positions": 128}, "text"),
    HFEntry("hf-gptneox-lm-labels", "GPTNeoXForCausalLM", "GPTNeoXConfig", _TEXT, "text-labels"),
    HFEntry("hf-llama-lm-labels", "LlamaForCausalLM", "LlamaConfig", {**_TEXT, "num_key_value_heads": 2}, "text-labels"),
    HFEntry("hf-t5-labels", "T5ForConditionalGeneration", "T5Config",
            {"vocab_size": 1000, "d_model": 128, "d_kv": 32, "d_ff": 256, "num_layers": 2, "num_heads": 4,
             "decoder_start_token_id": 0, "pad_token_id": 0}, "seq2seq-labels"),
    HFEntry("hf-t5", "T5Model", "T5Config",
            {"vocab_size": 1000, "d_model": 128, "d_kv": 32, "d_ff": 256, "num_layers": 2, "num_heads": 4}, "seq2seq"),
    HFEntry("hf-bart-labels", "BartForConditionalGeneration", "BartConfig", _BART, "seq2seq-labels"),
    HFEntry("hf-pegasus-x-labels", "PegasusXForConditionalGeneration", "PegasusXConfig",
            {**_BART, "block_size": 16, "num_global_tokens": 8, "stagger_local_blocks": True}, "seq2seq-labels"),
    HFEntry("hf-xlnet-base", "XLNetModel", "XLNetConfig",
            {"vocab_size": 32000, "d_model": 768, "n_layer": 12, "n_head": 12, "d_inner": 3072}, "text"),
    HFEntry("hf-xlnet-lm-labels", "XLNetLMHeadModel", "XLNetConfig",
            {"vocab_size": 1000, "d_model": 128, "n_layer": 2, "n_head": 4, "d_inner": 256}, "text-labels"),
    HFEntry("hf-whisper", "WhisperForConditionalGeneration", "WhisperConfig",
            {"vocab_size": 1000, "d_model": 128, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
             "decoder_attention_heads": 4, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256, "num_mel_bins": 80,
             "max_source_positions": 64, "max_target_positions": 64, **_WHISPER_IDS}, "whisper"),
    HFEntry("hf-whisper-labels", "WhisperForConditionalGeneration", "WhisperConfig",
            {"vocab_size": 1000, "d_model": 128, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
             "decoder_attention_heads": 4, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256, "num_mel_bins": 80,
             "max_source_positions": 64, "max_target_positions": 64, **_WHISPER_IDS}, "whisper-labels"),
    HFEntry("hf-vit-labels", "ViTForImageClassification", "ViTConfig", _IMAGE, "image-labels"),
    HFEntry("hf-deit-teacher", "DeiTForImageClassificationWithTeacher", "DeiTConfig", _IMAGE, "image"),
    HFEntry("hf-clip-text", "CLIPTextModel", "CLIPTextConfig", {**_TEXT, "max_position_embeddings": 77}, "text"),
)


LLM_SEQ = 2048  # the real-size decoders are exported at their training sequence
# Real-size decoders, exported without weights (gpupred.graph.weightless) from transformers' config classes with
# their published dimensions: GPT-2-large (Radford et al. 2019), OPT-1.3B (Zhang et al. 2022), and LlamaConfig's
# defaults (LLaMA-7B) and LLaMA-13B's dimensions (Touvron et al. 2023); eager attention, as the stored corpus was
# exported (before named models defaulted to SDPA; re-exporting them with SDPA changes data/corpus/).
LLM_MODELS: dict[str, NamedModel] = {
    "llm-gpt2-large": hf_model("gpt2", seq_len=LLM_SEQ, attention="eager", n_embd=1280, n_layer=36, n_head=20,
                               n_positions=LLM_SEQ),
    "llm-opt-1.3b": hf_model("opt", seq_len=LLM_SEQ, attention="eager", hidden_size=2048, num_hidden_layers=24,
                             num_attention_heads=32,
                             ffn_dim=8192, word_embed_proj_dim=2048, max_position_embeddings=LLM_SEQ),
    "llm-llama-7b": hf_model("llama", seq_len=LLM_SEQ, attention="eager"),
    "llm-llama-13b": hf_model("llama", seq_len=LLM_SEQ, attention="eager", hidden_size=5120, intermediate_size=13824,
                              num_hidden_layers=40,
                              num_attention_heads=40),
}


def hf_inputs(kind: str, batch: int, seq: int, config: Any) -> dict[str, Any]:
    """Keyword inputs for a Hugging Face forward of ``kind`` at a batch size (seeded, ids below the vocabulary)."""
    import torch

    g = torch.Generator().manual_seed(SEED)
    vocab = getattr(config, "vocab_size", 1000)

    def ids(n: int = seq) -> Any:
        return torch.randint(4, vocab, (batch, n), generator=g)

    if kind.startswith("image"):
        size = config.image_size
        out = {"pixel_values": torch.randn(batch, 3, size, size, generator=g)}
        return {**out, "labels": torch.randint(0, config.num_labels, (batch,), generator=g)} if kind.endswith("labels") else out
    if kind.startswith("whisper"):
        frames = 2 * config.max_source_positions
        out = {"input_features": torch.randn(batch, config.num_mel_bins, frames, generator=g)}
        key = "labels" if kind.endswith("labels") else "decoder_input_ids"
        return {**out, key: ids(16)}
    text = {"input_ids": ids(), "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
    if kind == "cls-labels":
        return {**text, "labels": torch.randint(0, 2, (batch,), generator=g)}
    if kind == "qa":
        pos = torch.randint(0, seq, (2, batch), generator=g)
        return {**text, "start_positions": pos[0], "end_positions": pos[1]}
    if kind.startswith("seq2seq"):
        key = "labels" if kind.endswith("labels") else "decoder_input_ids"
        return {**text, key: ids(seq // 2)}
    return {**text, "labels": ids()} if kind.endswith("labels") else text


def build_timm(name: str, batch: int) -> tuple[Any, Any, dict[str, Any]]:
    """A timm model (random weights, no download), an example input at ``batch`` and its index entry."""
    import timm
    import torch

    torch.manual_seed(SEED)
    model = timm.create_model(name, pretrained=False)
    size = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    example = torch.randn(batch, *size, generator=torch.Generator().manual_seed(SEED))
    module = type(model).__module__.rsplit(".", 1)[-1]
    return model, example, {"source": "timm", "timm_name": name, "timm_module": module, "input_size": list(size)}


def build_hf(entry: HFEntry, batch: int) -> tuple[Any, Any, dict[str, Any]]:
    """A Hugging Face model built from its config class (no download), its keyword inputs at ``batch``, its index entry."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    cfg = getattr(transformers, entry.config_class)(**entry.config, attn_implementation="eager")
    model = getattr(transformers, entry.model_class)(cfg)
    example = hf_inputs(entry.inputs, batch, entry.seq, cfg)
    info = {"source": "transformers", "hf_class": entry.model_class, "hf_config_class": entry.config_class,
            "hf_config": entry.config, "inputs": entry.inputs, "seq": entry.seq}
    return model, example, info


def torch_figures(model: Any, example: Any) -> dict[str, int]:
    """torch's parameter count and forward FLOPs (FlopCounterMode, attention as matmuls) on an example, in training mode."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model.train()
    counter = FlopCounterMode(display=False)
    # the math backend runs attention as matmuls the counter sees (it has no rule for the CPU flash kernel)
    with sdpa_kernel(SDPBackend.MATH), counter:  # autograd on: its module tracker needs grad_fns (PiT, CaiT)
        if isinstance(example, dict):
            model(**example)
        else:
            model(example)
    return {"torch_params": int(sum(p.numel() for p in model.parameters())), "torch_flops_fwd": int(counter.get_total_flops())}


def unused_params(model: Any, path: Path) -> int:
    """Elements of the parameters the exported graph never reads (a forward that skips them: no graph shows them).

    A tied parameter (one tensor under several names, as a head tied to the embedding) is read when any of its names is.
    """
    from gpupred.graph.protoscan import load_without_weights

    names = {t.name for t in load_without_weights(path).graph.initializer}
    read: dict[int, bool] = {}
    sizes: dict[int, int] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        read[id(p)] = read.get(id(p), False) or f"model.{n}" in names
        sizes[id(p)] = p.numel()
    return int(sum(sizes[k] for k, used in read.items() if not used))


def llm_figures(named: NamedModel) -> tuple[Any, Any, dict[str, int]]:
    """A real-size decoder built without weights, its example at the corpus batch, and torch's figures counted under
    fake tensors (FlopCounterMode sees every matmul's shapes; no weight or activation is ever allocated)."""
    from gpupred.workloads.hubmodels import build_named
    from gpupred.graph.weightless import fake_copy

    built = build_named(named, batch=CORPUS_BATCH)
    model, mode = fake_copy(built.model)
    with mode:
        figures = torch_figures(model, built.example)
    return built.model, built.example, figures


def export_llm_entry(name: str, named: NamedModel, folder: Path) -> dict[str, Any]:
    """Export one real-size decoder without weights (symbolic batch, its shape map stored: what ``gpupred export --hf``
    writes), with torch's figures; no fixed-batch export (its re-batching is the corpus's small models' test)."""
    from gpupred.graph.adapter import positional
    from gpupred.graph.weightless import export_weightless

    start = time.perf_counter()
    model, example, figures = llm_figures(named)
    adapter, tensors, names = positional(model, example)  # as gpupred.export_model takes them
    plain = export_weightless(adapter, tensors, folder / f"{name}.onnx", names, [0] * len(tensors))
    cfg = model.config
    dims = {"layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size, "heads": cfg.num_attention_heads,
            "vocab": cfg.vocab_size}
    info = {"source": "transformers", "weightless": True, "hf_model": named.name, "seq": named.seq_len,
            "hf_config": dict(named.overrides), "hf_class": type(model).__name__, "dims": dims, **figures,
            "torch_params_unused": unused_params(model, plain), "export_batch": CORPUS_BATCH, "fixed_batch": None,
            "export_seconds": round(time.perf_counter() - start, 1)}
    _write_gz(plain, plain.with_suffix(".onnx.gz"))
    info["sha256"] = {plain.name + ".gz": sha256(plain.with_suffix(".onnx.gz"))}
    return info


def _entries() -> list[tuple[str, Callable[[int], tuple[Any, Any, dict[str, Any]]]]]:
    """Every small corpus model's name and builder, timm first (the real-size decoders are :data:`LLM_MODELS`)."""
    out: list[tuple[str, Callable[[int], tuple[Any, Any, dict[str, Any]]]]] = []
    for name in TIMM_MODELS:
        out.append((f"timm-{name}", lambda b, n=name: build_timm(n, b)))
    for entry in HF_MODELS:
        out.append((entry.name, lambda b, e=entry: build_hf(e, b)))
    return out


def _exporters() -> list[tuple[str, Callable[[Path], dict[str, Any]]]]:
    """Every corpus model's name and the call that exports it into a folder and returns its index entry."""
    out: list[tuple[str, Callable[[Path], dict[str, Any]]]] = [
        (name, lambda folder, n=name, b=build: export_entry(n, b, folder)) for name, build in _entries()]
    out += [(name, lambda folder, n=name, m=named: export_llm_entry(n, m, folder)) for name, named in LLM_MODELS.items()]
    return out


def corpus_names() -> list[str]:
    """The names of every corpus model (``timm-<name>``, ``hf-...`` and the real-size ``llm-...``)."""
    return [name for name, _ in _exporters()]


def read_corpus_index(folder: Path | None = None) -> dict[str, Any]:
    """The corpus index (``data/corpus/index.json``): per model its source, torch figures and files."""
    path = Path(folder or config.CORPUS) / "index.json"
    if not path.is_file():
        return {"models": {}}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise GpupredError(f"{path}: not valid JSON ({err}); rebuild it with `gpupred export --corpus`") from None


def _write_gz(plain: Path, target: Path) -> None:
    atomic_write_bytes(target, gzip.compress(plain.read_bytes(), compresslevel=9, mtime=0))
    plain.unlink()


def export_entry(name: str, build: Callable[[int], tuple[Any, Any, dict[str, Any]]], folder: Path) -> dict[str, Any]:
    """Build one corpus model, count it with torch, export it symbolic and at a fixed batch of 1; its index entry."""
    from gpupred.graph.export import export_model

    start = time.perf_counter()
    model, example, info = build(CORPUS_BATCH)
    info.update(torch_figures(model, example))
    symbolic = export_model(model, example, folder / f"{name}.onnx", precompute=False)
    _, fixed_example, _ = build(FIXED_BATCH)
    fixed = export_model(model, fixed_example, folder / f"{name}.b{FIXED_BATCH}.onnx", precompute=False, symbolic=False)
    info["torch_params_unused"] = unused_params(model, symbolic)
    info["export_batch"], info["fixed_batch"] = CORPUS_BATCH, FIXED_BATCH
    info["export_seconds"] = round(time.perf_counter() - start, 1)
    for plain in (symbolic, fixed):
        _write_gz(plain, plain.with_suffix(".onnx.gz"))
    info["sha256"] = {p.name + ".gz": sha256(p.with_suffix(".onnx.gz")) for p in (symbolic, fixed)}
    return info


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def build_corpus(folder: Path | None = None, names: list[str] | None = None, force: bool = False,
                 progress: bool = True) -> dict[str, Any]:
    """Export the corpus models missing from ``folder`` (all with ``force``, or only ``names``); update and return its index."""
    import torch

    from gpupred.reports import progress_bar

    folder = Path(folder or config.CORPUS)
    folder.mkdir(parents=True, exist_ok=True)
    index = read_corpus_index(folder)
    models = index.setdefault("models", {})
    todo = [(n, e) for n, e in _exporters() if (names is None or n in names) and (force or n not in models)]
    for name, export in progress_bar(iterable=todo, desc="corpus", unit="model", disable=not progress):
        try:
            models[name] = export(folder)
        except Exception as err:  # one model's failure is recorded, the rest go on
            models[name] = {"error": f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"}
        index.update(torch=torch.__version__.split("+")[0], timm=_version("timm"), transformers=_version("transformers"),
                     models=dict(sorted(models.items())))
        (folder / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def corpus_files(name: str, entry: dict[str, Any], folder: Path | None = None) -> list[Path]:
    """A corpus model's files: its symbolic export, and its fixed-batch-1 export when it has one."""
    return [corpus_path(name, False, folder)] + ([corpus_path(name, True, folder)] if entry.get("fixed_batch") else [])


def corpus_path(name: str, fixed: bool = False, folder: Path | None = None) -> Path:
    """The corpus file of a model: its symbolic export, or with ``fixed`` its export at a fixed batch of 1."""
    return Path(folder or config.CORPUS) / (f"{name}.b{FIXED_BATCH}.onnx.gz" if fixed else f"{name}.onnx.gz")


def agreement(name: str, entry: dict[str, Any], batches: tuple[int, int] = (CORPUS_BATCH, 8),
              folder: Path | None = None) -> dict[str, Any]:
    """One corpus model featurized (cold) at two batch sizes against torch's recorded figures (torch-free).

    ``flops_ratio`` is 2 x ``macs_fwd`` (what torch's FlopCounterMode counts: 2 FLOPs per multiply-add of
    matmuls, convolutions and attention) over torch's forward FLOPs at the export batch; ``rebatch_diff`` lists
    the features where the fixed-batch export re-batched to the second batch differs from the symbolic one by
    more than :data:`REBATCH_TOLERANCE` (relative; absolute for the ``frac_`` shares), ``rebatch_max`` the
    largest relative difference of any feature (none for the real-size decoders, which have no fixed-batch export).
    """
    from gpupred.graph.features import FEATURE_KEYS, clear_cache, featurize

    rows, seconds = {}, []
    for bs in batches:
        clear_cache()
        start = time.perf_counter()
        rows[bs] = featurize(corpus_path(name, folder=folder), batch_size=bs, warn=False)
        seconds.append(time.perf_counter() - start)
    first, other = rows[batches[0]], rows[batches[1]]
    fixed = other  # a real-size decoder has no fixed-batch export: nothing to compare
    if entry.get("fixed_batch"):
        clear_cache()
        start = time.perf_counter()
        fixed = featurize(corpus_path(name, True, folder), batch_size=batches[1], warn=False)
        seconds.append(time.perf_counter() - start)
    want = entry["torch_params"] - entry["torch_params_unused"]
    rel = {k: abs(fixed[k] - other[k]) / max(abs(other[k]), 1e-12) for k in FEATURE_KEYS if fixed[k] != other[k]}
    return {
        "name": name, "shaped": 1.0 - max(r["frac_nodes_unshaped"] for r in rows.values()),
        "uncosted": max(r["frac_nodes_uncosted"] for r in rows.values()), "unknown": first["unknown_op_types"],
        "params": first["params"], "params_diff": first["params"] - want,
        "params_diff_other_batch": rows[batches[1]]["params"] - want,
        "flops_ratio": 2 * first["macs_fwd"] / entry["torch_flops_fwd"] if entry["torch_flops_fwd"] else float("nan"),
        "rebatch_diff": [k for k, r in rel.items()
                         if (abs(fixed[k] - other[k]) if k.startswith("frac_") else r) > REBATCH_TOLERANCE],
        "rebatch_max": max(rel.values(), default=0.0),
        "seconds": seconds,
    }


def refresh_figures(folder: Path | None = None, names: list[str] | None = None) -> dict[str, Any]:
    """Recount torch's figures of exported corpus models (after a change to :func:`torch_figures`) without re-exporting."""
    folder = Path(folder or config.CORPUS)
    index = read_corpus_index(folder)
    builders = dict(_entries())
    for name, entry in index["models"].items():
        if "error" in entry or (names is not None and name not in names):
            continue
        if name in LLM_MODELS:
            entry.update(llm_figures(LLM_MODELS[name])[2])
            continue
        model, example, _ = builders[name](CORPUS_BATCH)
        entry.update(torch_figures(model, example))
    (folder / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return index
