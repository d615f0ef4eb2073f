"""Hub ids known offline (gpupred.workloads.hubconfigs): published configs of widely fine-tuned checkpoints, found by
their own ids, the hub's owner-less legacy ids and their instruct or chat variants; every entry builds its model
card's parameter count; a hub id the table lacks is refused at once when the hub cannot be reached."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from gpupred.errors import GpupredError
from gpupred.workloads.hubconfigs import PublishedConfig, published_config, published_configs, published_ids
from gpupred.workloads.hubmodels import NamedModel, hf_model, hub_unreachable


@pytest.mark.parametrize(("name", "hub_id"), [
    ("gpt2-large", "openai-community/gpt2-large"),
    ("openai-community/GPT2-Large", "openai-community/gpt2-large"),
    ("bert-base-uncased", "google-bert/bert-base-uncased"),
    ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-v0.3"),
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.2"),
    ("google/gemma-2b-it", "google/gemma-2b"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
])
def test_a_hub_id_is_found_by_its_legacy_id_its_variants_and_any_case(name: str, hub_id: str) -> None:
    found = published_config(name)
    assert found is not None and found.hub_id == hub_id


@pytest.mark.parametrize("name", ["no-such-org/no-such-model", "meta-llama/Llama-2-7b-hff", "gpt2-huge", "llama"])
def test_names_the_table_lacks_are_not_guessed(name: str) -> None:
    """A near name (a typo) is not its neighbour, and a model type is transformers' own, not the table's."""
    assert published_config(name) is None


def test_an_entry_s_identity_follows_its_fields() -> None:
    """A graph built from an entry is cached under its content: a corrected entry is built again."""
    entry = published_config("gpt2-large")
    assert entry is not None
    changed = PublishedConfig(entry.hub_id, entry.model_type, {**entry.fields, "n_layer": 35}, entry.params)
    assert entry.identity() != changed.identity() and entry.identity() == published_config("gpt2-large").identity()
    assert NamedModel("hf", "gpt2-large").cache_key()["config"] == entry.identity()
    assert NamedModel("hf", "someone/unknown-model").cache_key()["config"] == "someone/unknown-model"


def test_the_hub_is_unreachable_when_set_off_or_its_host_does_not_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_unreachable() == "the hub is off (HF_HUB_OFFLINE)"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.invalid")  # .invalid never resolves (RFC 2606)
    reason = hub_unreachable(timeout=2.0)
    assert reason is not None and reason.startswith("hub.example.invalid cannot be reached")


def test_an_unknown_hub_id_is_refused_at_once_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the table, cache or network, transformers retried for half a minute before failing."""
    from gpupred.workloads.hubmodels import hf_config

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.invalid")
    start = time.perf_counter()
    with pytest.raises(GpupredError, match=r"--hf meta-llama/Llama-2-7b-hff: .*not in transformers' cache, and "
                                           r"hub.example.invalid cannot be reached.*meta-llama/Llama-2-7b-hf"):
        hf_config(hf_model("meta-llama/Llama-2-7b-hff"))
    assert time.perf_counter() - start < 10


def test_gpupred_named_lists_the_table() -> None:
    out = subprocess.run([sys.executable, "-m", "gpupred.cli", "named"], capture_output=True, text=True, check=True)
    listed = [line.split()[0] for line in out.stdout.splitlines()[:-1]]
    assert listed == published_ids()


@pytest.mark.slow
def test_every_entry_builds_its_model_card_s_parameter_count() -> None:
    """Each entry, built by transformers on the meta device through the head its config names, has the parameters its
    model card gives: within 1%, or 4% for Whisper, whose paper rounds its sizes (39M for 37.8M)."""
    import torch
    import transformers

    from gpupred.workloads.hubmodels import HEADS, default_head, hf_config

    off = []
    for entry in published_configs():
        hub_id = entry.hub_id
        cfg = hf_config(hf_model(hub_id))
        with torch.device("meta"):
            model = getattr(transformers, HEADS[default_head(cfg)]).from_config(cfg)
        millions = sum(p.numel() for p in model.parameters()) / 1e6
        if abs(millions / entry.params - 1) > (0.04 if entry.model_type == "whisper" else 0.01):
            off.append(f"{hub_id}: {millions:.1f}M built, {entry.params}M on its card")
    assert not off, off
