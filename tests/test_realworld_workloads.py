"""Real-world architectures as workload families (gpupred.workloads.realworld, issue 40 item 1): at least 25
timm and Hugging Face architectures outside the catalog's 18 families, 3-5 batch sizes each in fp32 and bf16, their
own plan file, leave-one-family-out groups, and (slow) every family built and trained for one CPU step.

The slow tests shrink each architecture to a FIXTURE size (a small image, one or two layers of a narrow config): what
is checked is that the profiler's builder takes the family's route (build by name, its head's inputs and targets,
one training step), not the published sizes, which the graph store's exports and plans/realworld-solo.txt carry.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from gpupred.learn.folds import sibling_group
from gpupred.workloads import realworld
from gpupred.workloads.catalog import catalog
from gpupred.workloads.realworld import REALWORLD_ARCHS, named_for, realworld_catalog
from gpupred.workloads.spec import CATALOG_FAMILIES, FAMILIES, REALWORLD_FAMILIES, WorkloadSpec

REPO = Path(__file__).resolve().parent.parent


def test_at_least_25_architectures_outside_the_catalog() -> None:
    realworld.check_families()
    assert len(REALWORLD_ARCHS) >= 25 and not set(REALWORLD_FAMILIES) & set(CATALOG_FAMILIES)
    assert {a.source for a in REALWORLD_ARCHS} == {"timm", "hf"}
    specs = realworld_catalog()
    by_arch: dict[str, list[WorkloadSpec]] = {}
    for s in specs:
        by_arch.setdefault(f"{s.family}.{s.arch}", []).append(s)
        assert WorkloadSpec.from_id(s.id) == s and s.fused == 1
    assert len(by_arch) == len(REALWORLD_ARCHS)
    for arch, mine in by_arch.items():
        assert 3 <= len({s.batch_size for s in mine}) <= 5, arch
        assert {s.precision for s in mine} == {"fp32", "bf16"}, arch
        if FAMILIES[mine[0].family].kind == "transformer":
            assert {s.optimizer for s in mine} == {"adam"}, arch


def test_the_catalog_and_its_plan_are_unchanged() -> None:
    """catalog() samples the 18 families alone; the H100 solo plan still lists its first 180 specs."""
    specs = catalog()
    assert len(specs) == 360 and {s.family for s in specs} == set(CATALOG_FAMILIES)
    lines = [x.split("#")[0].strip() for x in (REPO / "plans" / "h100-solo.txt").read_text().splitlines()]
    assert [x for x in lines if x] == [s.id for s in specs[:180]]


def test_the_realworld_plan_file_is_the_realworld_catalog() -> None:
    from gpupred.profile.units import load_plan

    path = REPO / "plans" / "realworld-solo.txt"
    lines = [x.split("#")[0].strip() for x in path.read_text().splitlines()]
    assert [x for x in lines if x] == [s.id for s in realworld_catalog()]
    assert len(load_plan(str(path))) == len(realworld_catalog())


def test_families_have_leave_one_family_out_groups() -> None:
    """Twins of catalog families are held out with them (HF BERT with bert, DeiT with ViT...)."""
    assert sibling_group("hfbert") == sibling_group("bert") == sibling_group("deit") == sibling_group("vit")
    assert sibling_group("effnetv2") == sibling_group("efficientnet")
    assert sibling_group("regnet") == sibling_group("resnet") == sibling_group("nfnet")
    assert sibling_group("swin") == sibling_group("maxvit") != sibling_group("vit")
    assert sibling_group("convnext") == "convnext"


def test_specs_build_by_name_at_their_input_size() -> None:
    spec = WorkloadSpec("gpt2", "gpt2_large", 4, 512, "bf16", "adam")
    named = named_for(spec)
    assert (named.source, named.name, named.head, named.seq_len) == ("hf", "gpt2", "causal-lm", 512)
    assert dict(named.overrides)["n_layer"] == 36
    vision = named_for(WorkloadSpec("swin", "swinv2_tiny_window8_256", 8, 256, "fp32", "adam"))
    assert (vision.source, vision.image_size) == ("timm", 256)


def test_store_graphs_featurize_whole_without_torch() -> None:
    """Every real-world architecture's graph is in the store (exported without weights) and featurizes whole."""
    from gpupred.graph.features import featurize
    from gpupred.graph.export import stored_graph

    first = {s.arch_key: s for s in reversed(realworld_catalog())}  # each architecture at its smallest batch
    for spec in first.values():
        path = stored_graph(spec)
        assert path is not None, f"{spec.arch_key} missing from the store: gpupred export --store"
        row = featurize(path, batch_size=spec.batch_size, precision=spec.precision, optimizer=spec.optimizer, warn=False)
        assert row["frac_nodes_unshaped"] == 0 and row["unknown_ops"] == 0 and row["params"] > 1e6, spec.arch_key


# FIXTURE sizes: one architecture per family, shrunk
TINY_TEXT = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128}
TINY_SEQ2SEQ = {"d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}
TINY: dict[str, tuple[str, int, dict]] = {  # family -> (arch, input size, config over the published one)
    "convnext": ("convnext_tiny", 64, {}), "swin": ("swin_tiny_patch4_window7_224", 64, {}),
    "regnet": ("regnety_016", 64, {}), "effnetv2": ("efficientnetv2_rw_s", 64, {}),
    "maxvit": ("maxvit_tiny_tf_224", 64, {}), "deit": ("deit_small_patch16_224", 64, {}),
    "nfnet": ("eca_nfnet_l0", 64, {}), "hfbert": ("bert_base", 32, TINY_TEXT),
    "roberta": ("roberta_base", 32, TINY_TEXT), "gpt2": ("gpt2_medium", 32, {"n_embd": 64, "n_layer": 1, "n_head": 2}),
    "llama": ("llama_1b", 32, {**TINY_TEXT, "num_key_value_heads": 1}),
    "t5": ("t5_small", 32, {"d_model": 64, "d_ff": 128, "num_layers": 1, "num_heads": 2, "d_kv": 32}),
    "bart": ("bart_base", 32, TINY_SEQ2SEQ), "whisper": ("whisper_small", 16, {**TINY_SEQ2SEQ, "max_source_positions": 32}),
    "pegasusx": ("pegasus_x_base", 32, {**TINY_SEQ2SEQ, "block_size": 16, "num_global_tokens": 4}),
}


def test_every_family_has_a_fixture_size() -> None:
    assert set(TINY) == set(REALWORLD_FAMILIES)


def _shrunk(family: str, monkeypatch: pytest.MonkeyPatch) -> WorkloadSpec:
    arch, size, config = TINY[family]
    real = realworld._BY_ARCH[(family, arch)]
    monkeypatch.setitem(realworld._BY_ARCH, (family, arch),
                        dataclasses.replace(real, size=size, config={**real.config, **config}))
    return WorkloadSpec(family, arch, 2, size, "fp32", real.optimizer)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(TINY))
def test_every_family_builds_and_trains_one_cpu_step(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpupred.workloads.builders.build as the profiler calls it: random weights, the head's batch and targets, one
    Adam or SGD step on the CPU with a finite loss that changes the weights; the export build holds no weights."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch = pytest.importorskip("torch")
    from gpupred.workloads.builders import build

    spec = _shrunk(family, monkeypatch)
    built = build(spec, device="cpu")
    assert next(built.model.parameters()).device.type == "cpu"
    before = [p.detach().clone() for p in built.model.parameters()][:4]
    loss = built.make_train_step("cpu")()
    assert math.isfinite(float(loss))
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, built.model.parameters()))
    meta = build(spec, device="cpu", for_export=True)
    assert all(p.is_meta for p in meta.model.parameters())
    assert meta.input_names == built.input_names
