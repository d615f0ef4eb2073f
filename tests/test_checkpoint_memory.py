"""Activation checkpointing on graphs of models by name (issue 78 item 1): the checkpointed blocks are the decoder
layers, and the footprint's checkpointed activations against torch's own count of a real CPU training step with
``model.gradient_checkpointing_enable()``.

A tiny LLaMA config is a FIXTURE written by the test (4 layers, a 128-word vocabulary so that the loss does not hide
the layers; nothing is downloaded). torch's MemTracker refuses a module called twice in one step (checkpointing's
recompute), so torch's count here is the live-tensor peak of the forward and backward: every storage an op allocates,
freed when torch frees it (``_LiveBytes``), less the gradients (the footprint counts those in ``gradients``).

Measured (torch 2.14 CPU, transformers 5.23, fp32, SDPA; the loop does not hold the logits, as the catalog's does
not): torch 24.2 MiB without checkpointing, 8.5 MiB with it; the footprint's activations + loss + inputs 21.1 and 7.8
MiB (27.9 and 9.5 against torch's 24.7 and 9.0, with the logits held, before SiLU was one op, the rotary embedding's
products by cos and sin kept nothing of Q and K and the loss counted three buffers and no logits). Before module
paths were kept in dynamo exports, the footprint cut the graph into sqrt(n) runs of contractions instead of the 4
layers.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import weakref
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

TINY_LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "intermediate_size": 176,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 128, "max_position_embeddings": 512,
              "architectures": ["LlamaForCausalLM"]}
BATCH, SEQ = 4, 256


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The FIXTURE config and its graph (exported as ``predict --hf`` does), in a private graph cache."""
    from gpupred import config
    from gpupred.graph.named import named_graph
    from gpupred.workloads.hubmodels import hf_model

    root = tmp_path_factory.mktemp("ckpt")
    saved = config.ONNX_CACHE
    config.ONNX_CACHE = root / "cache"
    (root / "llama").mkdir()
    (root / "llama" / "config.json").write_text(json.dumps(TINY_LLAMA))
    path = root / "llama" / "config.json"
    yield path, named_graph(hf_model(str(path), seq_len=SEQ))
    config.ONNX_CACHE = saved


def test_dynamo_export_names_its_modules() -> None:
    """The dynamo exporter's module scopes become TorchScript's node-name prefix."""
    from gpupred.graph.weightless import module_path

    assert module_path(["", "model", "model.model", "model.model.layers.0", "model.model.layers.0.self_attn",
                        "model.model.layers.0.self_attn.q_proj"]) == "/model/model/layers.0/self_attn/q_proj"
    assert module_path([]) == ""


def test_checkpointed_blocks_are_the_decoder_layers(llama: Any) -> None:
    """Each decoder layer is one block (its nodes, RMSNorms and rotary split included), reading only the hidden
    state and the mask made before it; the embedding, the final norm and the head are in none."""
    from gpupred.graph.loader import cached_graph
    from gpupred.step.physics.blocks import checkpoint_blocks

    cg = cached_graph(llama[1], BATCH)[0].form(True)
    blocks = checkpoint_blocks(cg)
    assert [b.name.rsplit("/", 1)[-1] for b in blocks] == [f"layers.{k}" for k in range(4)]
    assert len({len(b.nodes) for b in blocks}) == 1
    hidden = [b.inputs[0] for b in blocks]
    for b in blocks:
        assert len(b.inputs) == 2 and b.inputs[1] == blocks[0].inputs[1]  # hidden state, mask
        assert all(cg.shapes[t][0] == (BATCH, SEQ, 64) for t in b.inputs[:1])
    assert len(set(hidden)) == 4
    inside = {i for b in blocks for i in b.nodes}
    outside = [cg.nodes[i][0] for i in range(len(cg.nodes)) if i not in inside]
    assert outside.count("MatMul") == 1  # the head


class _LiveBytes:
    """Every storage a CPU op allocates under it, with the time torch frees it: the live-bytes timeline."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        owner = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                owner.track(out)
                return out

        self.mode = Mode()
        self.events: list[tuple[int, int]] = []  # (storage id, +bytes on allocation / -bytes when freed)
        self.ids: dict[int, int] = {}
        self.count = itertools.count()

    def track(self, out: Any) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            if st._cdata in self.ids or st.nbytes() == 0:
                continue
            i = self.ids[st._cdata] = next(self.count)
            self.events.append((i, st.nbytes()))
            weakref.finalize(st, self.free, st._cdata, i, st.nbytes())

    def free(self, key: int, i: int, n: int) -> None:
        self.ids.pop(key, None)
        self.events.append((i, -n))

    def peak(self, exclude: set[int | None]) -> int:
        live = best = 0
        for i, n in self.events:
            if i not in exclude:
                live += n
                best = max(best, live)
        return best


def _torch_peak(config_path: Path, checkpointing: bool) -> float:
    """The live-tensor peak (MiB) of one fp32 CPU forward and backward, less the gradients."""
    import torch
    import transformers

    values = json.loads(config_path.read_text())
    values.pop("architectures")
    cfg = transformers.AutoConfig.for_model(values.pop("model_type"), **values)
    cfg.use_cache = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
        live = _LiveBytes()
        with live.mode:
            # the logits are not held: freed after the forward, as in the catalog's loop and transformers' Trainer
            loss = torch.nn.functional.cross_entropy(model(input_ids=ids).logits.float().flatten(0, 1), ids.view(-1))
            loss.backward()
        grads = {live.ids.get(p.grad.untyped_storage()._cdata) for p in model.parameters() if p.grad is not None}
    return live.peak(grads) / 2**20


def _ours(graph: Path, checkpointing: bool) -> float:
    """The footprint's activations + loss + inputs (MiB), fp32 AdamW."""
    from gpupred.memory.physics import graph_row, term_sizes
    from gpupred.setups import setup_of

    job = dataclasses.replace(setup_of("fp32", "adamw"), checkpointing=checkpointing)
    terms = term_sizes(graph_row(graph, BATCH, job)).iloc[0]
    return float(terms["activations"] + terms["loss"] + terms["inputs"])


def test_checkpointed_activations_against_torch(llama: Any) -> None:
    """With checkpointing, the footprint's live activations are within 10% of torch's peak (measured -8.1%), and
    checkpointing saves what torch says it saves within 20% (measured 13.3 MiB against 15.7)."""
    config_path, graph = llama
    full, ckpt = _ours(graph, False), _ours(graph, True)
    torch_full, torch_ckpt = _torch_peak(config_path, False), _torch_peak(config_path, True)
    assert ckpt == pytest.approx(torch_ckpt, rel=0.10), (ckpt, torch_ckpt)
    assert full - ckpt == pytest.approx(torch_full - torch_ckpt, rel=0.20), (full, ckpt, torch_full, torch_ckpt)


def _checkpointed_model(config_path: Path, lora_rank: int = 0) -> Any:
    """The FIXTURE config's model in training mode with ``gradient_checkpointing_enable()`` (and peft's default LoRA
    of rank ``lora_rank`` when given: its adapters train, every base weight is frozen)."""
    import transformers

    values = json.loads(config_path.read_text())
    values.pop("architectures")
    cfg = transformers.AutoConfig.for_model(values.pop("model_type"), **values)
    cfg.use_cache = False
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()
    model.gradient_checkpointing_enable()
    if lora_rank:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=lora_rank, task_type="CAUSAL_LM"))
    return model


def _live_weight_copies(model: Any) -> tuple[int, int]:
    """Bytes of the 16-bit copies of ``model``'s parameters that CPU autocast (bf16) made in one forward and that are
    still live at its end, inside the autocast region and after it exits (the logits still held)."""
    import torch

    params = {p.untyped_storage()._cdata for p in model.parameters()}
    copies: list[Any] = []

    class Casts(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten._to_copy.default and args[0].untyped_storage()._cdata in params:
                copies.append(weakref.ref(out))
            return out

    ids = torch.randint(0, TINY_LLAMA["vocab_size"], (BATCH, SEQ))
    with Casts():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=ids).logits
            live_in = sum(c().nbytes for c in copies if c() is not None)
        live_out = sum(c().nbytes for c in copies if c() is not None)
    del logits
    return live_in, live_out


def test_autocast_copies_under_checkpointing(llama: Any) -> None:
    """CPU autocast (bf16) caches the 16-bit copy of every fp32 leaf weight a linear reads, as CUDA's does: under
    checkpointing all of them are live at the end of the forward, and exiting autocast frees all but the head's, which
    autograd saved outside the checkpointed layers. The footprint's ``autocast_copies`` counts exactly those: every
    parameter but the embedding and the RMSNorm weights, which no cast reads (``cast_copy_elems``; it counted every
    parameter, by ``param_bytes / 2``, before)."""
    import torch

    from gpupred.memory.physics import graph_row, term_sizes
    from gpupred.setups import setup_of

    config_path, graph = llama
    model = _checkpointed_model(config_path)
    live_in, live_out = _live_weight_copies(model)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert live_in == 2 * linear
    assert live_out == 2 * model.lm_head.weight.numel()
    job = dataclasses.replace(setup_of("bf16", "adamw"), checkpointing=True)
    ours = term_sizes(graph_row(graph, BATCH, job)).iloc[0]["autocast_copies"] * 2**20
    assert ours == live_in < 2 * sum(p.numel() for p in model.parameters())


def test_frozen_weight_copies_under_lora_checkpointing(llama: Any) -> None:
    """Under LoRA the base weights are frozen, and autocast caches no copy of a leaf that does not require grad: with
    checkpointing, the copies live at the end of the forward are the adapters' (cached) and the frozen head's (saved
    by its product, outside every checkpointed layer), and the footprint's ``autocast_copies`` counts those to the
    byte; a layer's frozen q_proj, v_proj and MLP weights keep none (the footprint counted every frozen copy before:
    LLaMA-7B's 12.3 GiB, see gpupred.finetune). Without checkpointing every frozen Linear's copy is counted, as the
    products save them for the backward."""
    import torch

    from gpupred.predictor.jobgraph import JobGraph
    from gpupred.setups import setup_of

    config_path, graph = llama
    model = _checkpointed_model(config_path, lora_rank=4)
    live_in, _ = _live_weight_copies(model)
    adapters = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    head = model.get_output_embeddings().weight.numel()
    assert live_in == 2 * (adapters + head)
    lora = setup_of("bf16", "adamw", lora_rank=4)
    terms = {ckpt: JobGraph(graph, "tiny", BATCH, dataclasses.replace(lora, checkpointing=ckpt)).parameter_terms()
             for ckpt in (True, False)}
    assert terms[True]["copy_bytes"] == live_in
    frozen = sum(m.weight.numel() for n, m in model.named_modules()  # every decoder Linear (q, k, v, o, MLP)
                 if isinstance(m, torch.nn.Linear) and "lora_" not in n and "lm_head" not in n)
    assert terms[False]["copy_bytes"] == 2 * (adapters + head + frozen)
