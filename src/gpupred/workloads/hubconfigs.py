"""Published configs of widely fine-tuned Hugging Face checkpoints, so that ``--hf <hub id>`` answers offline.

A hub id is otherwise resolved by transformers from its cache or the network; on a machine without either (a cluster
node, CI) it used to retry for half a minute and fail. Each entry is the checkpoint's model type and the fields of
its published ``config.json`` that set the graph's shapes (widths, depths, heads, key/value heads, vocabulary, the
longest position where it bounds the default sequence, tied embeddings, the head's class); every other field is the
model type's default in the installed transformers. Architecture hyper-parameters are facts of the model, not
measurements: the parameter count each entry builds is checked against its model card's
(``tests/test_hubconfigs.py``).

Instruct and chat variants share their base's shapes: ``-Instruct``, ``-chat-hf``, ``-it`` and ``-chat`` suffixes
(before a version, if any) are looked up as the base (``meta-llama/Llama-2-7b-chat-hf`` is
``meta-llama/Llama-2-7b-hf``, ``mistralai/Mistral-7B-Instruct-v0.3`` is ``mistralai/Mistral-7B-v0.3``). Names match
without regard to case, and the hub's old owner-less ids (``gpt2-large``, ``bert-base-uncased``) are the same
checkpoints as their ``openai-community/``, ``google-bert/``... ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

TABLE_VERSION = 1  # bump when an entry changes: named graphs built from the table are then rebuilt


@dataclass(frozen=True)
class PublishedConfig:
    """A checkpoint's model type and the shape fields of its published config.json."""

    hub_id: str
    model_type: str
    fields: dict[str, Any]
    params: float  # the parameter count its model card gives (the check of the entry), in millions

    def identity(self) -> str:
        """What a graph built from it depends on: the entry's content, with the table's version."""
        text = json.dumps([TABLE_VERSION, self.model_type, self.fields], sort_keys=True)
        return f"published:{self.hub_id}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _llama(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, positions: int,
           tied: bool = False, **more: Any) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "hidden_size": hidden, "intermediate_size": inter,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
            "max_position_embeddings": positions, "tie_word_embeddings": tied, "rms_norm_eps": 1e-5, **more}


def _qwen2(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool) -> dict[str, Any]:
    return {"architectures": ["Qwen2ForCausalLM"], "hidden_size": hidden, "intermediate_size": inter,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
            "max_position_embeddings": 32768, "tie_word_embeddings": tied, "rms_norm_eps": 1e-6}


def _whisper(width: int, layers: int, heads: int, mels: int = 80, vocab: int = 51865) -> dict[str, Any]:
    return {"architectures": ["WhisperForConditionalGeneration"], "d_model": width, "encoder_layers": layers,
            "decoder_layers": layers, "encoder_attention_heads": heads, "decoder_attention_heads": heads,
            "encoder_ffn_dim": 4 * width, "decoder_ffn_dim": 4 * width, "num_mel_bins": mels, "vocab_size": vocab}


def _bert(hidden: int, layers: int, heads: int, vocab: int) -> dict[str, Any]:
    return {"architectures": ["BertForMaskedLM"], "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "intermediate_size": 4 * hidden, "vocab_size": vocab}


def _roberta(hidden: int, layers: int, heads: int) -> dict[str, Any]:
    return {"architectures": ["RobertaForMaskedLM"], "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "intermediate_size": 4 * hidden, "vocab_size": 50265,
            "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1, "layer_norm_eps": 1e-5}


def _t5(width: int, ff: int, layers: int, heads: int) -> dict[str, Any]:
    return {"architectures": ["T5ForConditionalGeneration"], "d_model": width, "d_ff": ff, "d_kv": 64,
            "num_layers": layers, "num_decoder_layers": layers, "num_heads": heads, "vocab_size": 32128}


def _opt(hidden: int, ffn: int, layers: int, heads: int) -> dict[str, Any]:
    return {"architectures": ["OPTForCausalLM"], "hidden_size": hidden, "ffn_dim": ffn, "num_hidden_layers": layers,
            "num_attention_heads": heads, "word_embed_proj_dim": hidden, "vocab_size": 50272,
            "max_position_embeddings": 2048}


def _mistral(vocab: int, sliding: int | None, **more: Any) -> dict[str, Any]:
    return {"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": vocab,
            "max_position_embeddings": 32768, "sliding_window": sliding, **more}


def _vit(hidden: int, layers: int, heads: int) -> dict[str, Any]:
    return {"architectures": ["ViTForImageClassification"], "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "intermediate_size": 4 * hidden, "image_size": 224, "patch_size": 16,
            "num_labels": 1000}


def _gpt2(width: int, layers: int, heads: int) -> dict[str, Any]:
    return {"architectures": ["GPT2LMHeadModel"], "n_embd": width, "n_layer": layers, "n_head": heads,
            "vocab_size": 50257, "n_positions": 1024}


# hub id: (model type, shape fields, parameters in millions as its model card gives them)
_ENTRIES: dict[str, tuple[str, dict[str, Any], float]] = {
    "openai-community/gpt2-medium": ("gpt2", _gpt2(1024, 24, 16), 355),
    "openai-community/gpt2-large": ("gpt2", _gpt2(1280, 36, 20), 774),
    "openai-community/gpt2-xl": ("gpt2", _gpt2(1600, 48, 25), 1558),
    "distilbert/distilgpt2": ("gpt2", _gpt2(768, 6, 12), 82),
    "google-bert/bert-base-uncased": ("bert", _bert(768, 12, 12, 30522), 110),
    "google-bert/bert-base-cased": ("bert", _bert(768, 12, 12, 28996), 109),
    "google-bert/bert-large-uncased": ("bert", _bert(1024, 24, 16, 30522), 336),
    "google-bert/bert-large-cased": ("bert", _bert(1024, 24, 16, 28996), 334),
    "FacebookAI/roberta-base": ("roberta", _roberta(768, 12, 12), 125),
    "FacebookAI/roberta-large": ("roberta", _roberta(1024, 24, 16), 355),
    "distilbert/distilbert-base-uncased": ("distilbert", {"architectures": ["DistilBertForMaskedLM"]}, 67),
    "google-t5/t5-small": ("t5", _t5(512, 2048, 6, 8), 60),
    "google-t5/t5-base": ("t5", _t5(768, 3072, 12, 12), 223),
    "google-t5/t5-large": ("t5", _t5(1024, 4096, 24, 16), 738),
    "meta-llama/Llama-2-7b-hf": ("llama", _llama(4096, 11008, 32, 32, 32, 32000, 4096), 6738),
    "meta-llama/Llama-2-13b-hf": ("llama", _llama(5120, 13824, 40, 40, 40, 32000, 4096), 13016),
    "meta-llama/Llama-2-70b-hf": ("llama", _llama(8192, 28672, 80, 64, 8, 32000, 4096), 68977),
    "meta-llama/Meta-Llama-3-8B": ("llama", _llama(4096, 14336, 32, 32, 8, 128256, 8192, rope_theta=500000.0), 8030),
    "meta-llama/Meta-Llama-3-70B": ("llama", _llama(8192, 28672, 80, 64, 8, 128256, 8192, rope_theta=500000.0), 70554),
    "meta-llama/Llama-3.1-8B": ("llama", _llama(4096, 14336, 32, 32, 8, 128256, 131072, rope_theta=500000.0), 8030),
    "meta-llama/Llama-3.1-70B": ("llama", _llama(8192, 28672, 80, 64, 8, 128256, 131072, rope_theta=500000.0),
                                 70554),
    "meta-llama/Llama-3.2-1B": ("llama", _llama(2048, 8192, 16, 32, 8, 128256, 131072, True, head_dim=64,
                                                rope_theta=500000.0), 1236),
    "meta-llama/Llama-3.2-3B": ("llama", _llama(3072, 8192, 28, 24, 8, 128256, 131072, True, head_dim=128,
                                                rope_theta=500000.0), 3213),
    "TinyLlama/TinyLlama-1.1B-Chat-v1.0": ("llama", _llama(2048, 5632, 22, 32, 4, 32000, 2048), 1100),
    "mistralai/Mistral-7B-v0.1": ("mistral", _mistral(32000, 4096), 7242),
    "mistralai/Mistral-7B-v0.3": ("mistral", _mistral(32768, None), 7248),
    "mistralai/Mistral-7B-Instruct-v0.2": ("mistral", _mistral(32000, None, rope_theta=1e6), 7242),
    "Qwen/Qwen2.5-0.5B": ("qwen2", _qwen2(896, 4864, 24, 14, 2, 151936, True), 494),
    "Qwen/Qwen2.5-1.5B": ("qwen2", _qwen2(1536, 8960, 28, 12, 2, 151936, True), 1544),
    "Qwen/Qwen2.5-3B": ("qwen2", _qwen2(2048, 11008, 36, 16, 2, 151936, True), 3086),
    "Qwen/Qwen2.5-7B": ("qwen2", _qwen2(3584, 18944, 28, 28, 4, 152064, False), 7616),
    "Qwen/Qwen2.5-14B": ("qwen2", _qwen2(5120, 13824, 48, 40, 8, 152064, False), 14770),
    "google/gemma-2b": ("gemma", {"architectures": ["GemmaForCausalLM"], "hidden_size": 2048,
                                  "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8,
                                  "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 256000}, 2506),
    "google/gemma-7b": ("gemma", {"architectures": ["GemmaForCausalLM"], "hidden_size": 3072,
                                  "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16,
                                  "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000}, 8538),
    "microsoft/phi-2": ("phi", {"architectures": ["PhiForCausalLM"], "hidden_size": 2560, "intermediate_size": 10240,
                                "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 51200,
                                "partial_rotary_factor": 0.4, "max_position_embeddings": 2048}, 2780),
    "microsoft/Phi-3-mini-4k-instruct": ("phi3", {"architectures": ["Phi3ForCausalLM"], "hidden_size": 3072,
                                                  "intermediate_size": 8192, "num_hidden_layers": 32,
                                                  "num_attention_heads": 32, "vocab_size": 32064,
                                                  "max_position_embeddings": 4096}, 3821),
    "facebook/opt-125m": ("opt", _opt(768, 3072, 12, 12), 125),
    "facebook/opt-1.3b": ("opt", _opt(2048, 8192, 24, 32), 1316),
    "facebook/opt-6.7b": ("opt", _opt(4096, 16384, 32, 32), 6658),
    "openai/whisper-tiny": ("whisper", _whisper(384, 4, 6), 39),
    "openai/whisper-base": ("whisper", _whisper(512, 6, 8), 74),
    "openai/whisper-small": ("whisper", _whisper(768, 12, 12), 244),
    "openai/whisper-medium": ("whisper", _whisper(1024, 24, 16), 769),
    "openai/whisper-large-v2": ("whisper", _whisper(1280, 32, 20), 1550),
    "openai/whisper-large-v3": ("whisper", _whisper(1280, 32, 20, mels=128, vocab=51866), 1550),
    "google/vit-base-patch16-224": ("vit", _vit(768, 12, 12), 86),
    "google/vit-large-patch16-224": ("vit", _vit(1024, 24, 16), 304),
}
# owners the hub added to ids that had none: the old id names the same checkpoint
_LEGACY_OWNERS = ("openai-community/", "google-bert/", "FacebookAI/", "distilbert/", "google-t5/")
# fine-tuned variants, before a version if any: their base's shapes (Mistral-7B-Instruct-v0.1 is Mistral-7B-v0.1)
_VARIANT = re.compile(r"-(instruct|chat-hf|chat|it)(-v[\d.]+)?$", re.IGNORECASE)


def _index() -> dict[str, str]:
    """Lower-case lookup name -> hub id: each id, and its owner-less legacy id."""
    out: dict[str, str] = {}
    for hub_id in _ENTRIES:
        out[hub_id.lower()] = hub_id
        for owner in _LEGACY_OWNERS:
            if hub_id.startswith(owner):
                out[hub_id[len(owner):].lower()] = hub_id
    return out


_INDEX = _index()


def published_config(name: str) -> PublishedConfig | None:
    """The table's entry for a hub id (its own, its legacy owner-less id, or an instruct or chat variant of either),
    else None."""
    key = name.strip().lower()
    base = _VARIANT.sub(r"\2", key)
    hub_id = _INDEX.get(key) or _INDEX.get(base) or _INDEX.get(base + "-hf")
    return None if hub_id is None else _entry(hub_id)


def published_configs() -> list[PublishedConfig]:
    """Every entry of the table, in its order."""
    return [_entry(hub_id) for hub_id in _ENTRIES]


def _entry(hub_id: str) -> PublishedConfig:
    """The table's entry for one of its hub ids (its fields a copy: a caller may add overrides)."""
    model_type, fields, params = _ENTRIES[hub_id]
    return PublishedConfig(hub_id, model_type, dict(fields), params)


def published_ids() -> list[str]:
    """Every hub id the table holds, in its order."""
    return list(_ENTRIES)
