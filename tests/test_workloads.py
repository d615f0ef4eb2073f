"""The workload catalog, id round trips and ``gpupred zoo list`` (torch-free)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from typer.testing import CliRunner

from gpupred.errors import GpupredError
from gpupred.workloads.spec import FAMILIES, WorkloadSpec
from gpupred.workloads.spec import CATALOG_FAMILIES
from gpupred.workloads.catalog import by_family, catalog, fused_catalog, get


def test_catalog_size_determinism_and_unique_ids() -> None:
    specs = catalog()
    assert len(specs) >= 300
    assert len({s.id for s in specs}) == len(specs)
    assert [s.id for s in specs] == [s.id for s in catalog()]
    code = "from gpupred.workloads.catalog import catalog; print('|'.join(s.id for s in catalog()))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other.split("|") == [s.id for s in specs]  # same order in a fresh process (no hash seeding)


def test_every_catalog_id_round_trips() -> None:
    for spec in catalog() + fused_catalog():
        assert WorkloadSpec.from_id(spec.id) == spec
        assert get(spec.id) == spec
        assert WorkloadSpec.from_json(spec.to_json()) == spec


def test_family_coverage() -> None:
    groups = by_family(catalog())
    assert set(groups) == set(CATALOG_FAMILIES)
    for fam, specs in groups.items():
        assert len(specs) >= 12, fam
        assert {s.precision for s in specs} == {"fp32", "bf16"}, fam
        assert {s.optimizer for s in specs} == {"sgd", "adam"}, fam
        sizes = [s.batch_size for s in specs]
        assert max(sizes) >= 4 * min(sizes), fam
        if FAMILIES[fam].knobs:
            for knob in FAMILIES[fam].knobs:
                assert len({s.knob[knob] for s in specs}) >= 2, (fam, knob)
    resnet_sizes = {s.input_size for s in groups["resnet"]}
    assert {32, 224} <= resnet_sizes
    assert {s.arch for s in groups["resnet"]} == {"resnet18", "resnet50", "resnet101"}
    for fam in ("lstm", "gru", "bert", "gpt", "mlp"):
        assert len({s.input_size for s in groups[fam]}) >= 3, fam


def test_any_prefix_is_balanced() -> None:
    specs = catalog()
    n = len(CATALOG_FAMILIES)
    assert Counter(s.family for s in specs[: 2 * n]) == Counter({f: 2 for f in CATALOG_FAMILIES})
    for k in (5, 17, 50, 100, 200):
        counts = Counter(s.family for s in specs[:k])
        assert max(counts.values()) - min(counts.get(f, 0) for f in CATALOG_FAMILIES) <= 1, k


def test_fused_catalog() -> None:
    specs = fused_catalog()
    assert len({s.id for s in specs}) == len(specs)
    archs = {s.arch for s in specs}
    assert archs == {"resnet18", "mobilenet_v2", "mlp", "lstm", "bert"}
    for arch in archs:
        assert {s.fused for s in specs if s.arch == arch} == {1, 2, 4, 8, 16, 32, 64}
    assert {s.input_size for s in specs if s.family in ("resnet", "mobilenet")} == {32}
    assert specs[0].fused == 1 and specs[-1].fused == 64
    assert get("mlp.mlp-w1024-d4-bs256-in784-fp32-sgd-x8").fused == 8


def test_catalog_keeps_its_families_precisions_and_archs() -> None:
    """Families, architectures and fp16 added for published workloads never enter the sweep catalog."""
    specs = catalog() + fused_catalog()
    assert {s.precision for s in specs} == {"fp32", "bf16"}
    assert not {s.family for s in specs} & {"seq2seq", "pointnet", "fcnet"}
    extra = {a for f in FAMILIES.values() for a in f.extra_archs}
    assert extra and not {s.arch for s in specs} & extra
    assert len(catalog()) == 20 * len(CATALOG_FAMILIES)


def test_published_workload_ids_round_trip() -> None:
    for wid in ("resnet.resnet18_cifar-bs32-img32-fp16-sgd", "bert.bert_qa-v30522-m768-h12-l12-bs32-seq384-fp16-adam",
                "seq2seq.transformer-v3000-t3000-m512-h8-l6-bs32-seq52-fp32-adam", "pointnet.pointnet_cls-c16-bs32-pts2500-fp16-adam",
                "fcnet.fc_pyramid-o79-d8-bs717-in1259-fp32-adam", "mobilenet.mobilenet_v3_small-bs64-img224-fp16-sgd"):
        spec = get(wid)
        assert spec.id == wid and WorkloadSpec.from_json(spec.to_json()) == spec
    with pytest.raises(GpupredError, match="fp16"):
        get("mlp.mlp-w1024-d4-bs256-in784-fp16-sgd-x8")  # no loss scaler for fused copies


def test_uncatalogued_id_is_valid() -> None:
    spec = get("resnet.resnet18-bs3-img40-fp32-adam")
    assert spec not in catalog() and spec.batch_size == 3


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "resnet50",
        "resnet.resnet50-bs64-img224-fp32",
        "resnet.resnet50-bs64-img224-fp8-sgd",
        "resnet.resnet50-bs64-seq224-fp32-sgd",
        "resnet.resnet51-bs64-img224-fp32-sgd",
        "nope.resnet50-bs64-img224-fp32-sgd",
        "mlp.mlp-w10-bs8-in32-fp32-sgd",
        "resnet.resnet50-bsX-img224-fp32-sgd",
        "resnet.resnet50-bs0-img224-fp32-sgd",
    ],
)
def test_malformed_ids_raise(bad: str) -> None:
    with pytest.raises(GpupredError) as err:
        get(bad)
    assert "\n" not in str(err.value)


def test_catalog_does_not_import_torch() -> None:
    code = (
        "import sys, gpupred.workloads, gpupred.cli.workloads; import gpupred.workloads.catalog as c;"
        "c.catalog(); c.fused_catalog(); assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _app():  # type: ignore[no-untyped-def]
    import typer

    from gpupred.cli.workloads import register

    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:  # a callback keeps `zoo` a sub-command
        pass

    return app


def test_zoo_list_json() -> None:
    res = CliRunner().invoke(_app(), ["zoo", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["id"] for r in rows] == [s.id for s in catalog()]
    assert set(rows[0]) == {"id", "family", "arch", "batch_size", "input_size", "precision", "optimizer", "fused"}
    res = CliRunner().invoke(_app(), ["zoo", "list", "--family", "gpt", "--json"])
    assert {r["family"] for r in json.loads(res.output)} == {"gpt"}
    res = CliRunner().invoke(_app(), ["zoo", "list", "--fused", "--family", "mlp", "--json"])
    assert sorted(r["fused"] for r in json.loads(res.output)) == sorted([1, 2, 4, 8, 16, 32, 64] * 2)


def test_zoo_list_table_and_unknown_family() -> None:
    res = CliRunner().invoke(_app(), ["zoo", "list", "--family", "dcgan"])
    assert res.exit_code == 0 and "dcgan" in res.output
    res = CliRunner().invoke(_app(), ["zoo", "list", "--family", "nope"])
    assert isinstance(res.exception, GpupredError) and "nope" in str(res.exception)


def test_zoo_via_gpupred_cli() -> None:
    """Through the real entry point, where the other stages' CLIs exist; unknown family exits 2 on one line."""
    out = subprocess.run([sys.executable, "-m", "gpupred.cli", "zoo", "list", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == len(catalog())
    bad = subprocess.run([sys.executable, "-m", "gpupred.cli", "zoo", "list", "--family", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
