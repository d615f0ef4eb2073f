"""Plan generators (pairs, subset, fusion co-location) on FIXTURE raw trees, and the committed plan files."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer

from fixtures_learning import _run_row, _samples
from gpupred.cliapp import run_app
from gpupred.errors import GpupredError
from gpupred.cli import profile as profile_cli
from gpupred.profile.units import Unit, load_plan, parse_plan_text
from gpupred.profile.plans import (
    build_pairs,
    build_subset,
    fused_plan,
    fusion_colocation_plan,
    pairs_plan,
    solo_plan,
    subset_plan,
)
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA
from gpupred.workloads.catalog import catalog, fused_catalog
from gpupred.workloads.spec import WorkloadSpec

REPO = Path(__file__).resolve().parent.parent
CARD_MIB = 81559.0
N_OK = 72  # FIXTURE solo workloads with ok runs (4 per family)
OOM_ID = catalog()[N_OK].id  # a FIXTURE workload whose only solo run is oom: never a plan member


def _write_unit(sweep: Path, rows: list[dict], samples: pd.DataFrame, group_id: str) -> None:
    """Write one FIXTURE unit (schema-valid samples then runs)."""
    pq.write_table(pa.Table.from_pandas(samples, schema=SAMPLE_SCHEMA, preserve_index=False), sweep / "samples" / f"{group_id}.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=RUN_SCHEMA), sweep / "runs" / f"{group_id}.parquet")


def _fixture_sweep(root: Path, simulated: bool = False, gpu: str = "NVIDIA H100 80GB HBM3") -> Path:
    """A FIXTURE solo sweep: made-up util 5-99 % and memory 1-45 GiB per workload, plus an oom and a group."""
    sweep = root / "FIXTURE-solo"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "samples").mkdir()
    for i, spec in enumerate(catalog()[:N_OK]):
        rid = f"fixture-{i:03d}"
        util = 5.0 + (i * 37) % 95
        mem = 1000.0 + (i * 7919) % 12000 if i % 6 else 30000.0 + (i * 997) % 16000
        row = _run_row(spec, rid, simulated=simulated, gpu=gpu)
        row["torch_peak_reserved_mib"] = mem - 500.0
        _write_unit(sweep, [row], _samples(rid, util, mem, with_proc=(i % 3 != 0), baseline=300.0), rid)
    oom = WorkloadSpec.from_id(OOM_ID)
    _write_unit(sweep, [_run_row(oom, "fixture-oom", status="oom", gpu=gpu)], _samples("fixture-oom", 0, 0), "fixture-oom")
    spec = catalog()[0]
    _write_unit(sweep, [_run_row(spec, f"fixture-grp.m{m}", group_size=2, member=m, group_id="fixture-grp", gpu=gpu)
                        for m in (0, 1)], _samples("fixture-grp", 90, 2000), "fixture-grp")
    return sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _fixture_sweep(tmp_path_factory.mktemp("raw"))


def _ids(line: str) -> list[str]:
    return [p.strip() for p in line.split("#", 1)[0].split("+")]


def test_pairs_cover_bins_memory_groups_and_are_deterministic(sweep: Path) -> None:
    built = build_pairs(sweep, n_pairs=60, n_groups34=6, seed=0)
    lines = built.lines
    assert lines == pairs_plan(sweep, 60, 6, 0)  # deterministic
    assert lines != pairs_plan(sweep, 60, 6, 1)  # the seed matters
    units = parse_plan_text("\n".join(lines))
    pairs = [u for u in units if len(u.workload_ids) == 2]
    groups = [u for u in units if len(u.workload_ids) > 2]
    assert len(pairs) == 60 and len(units) == 66 and len({u.group_id for u in units}) == 66
    assert sorted(len(g.workload_ids) for g in groups) == [3, 3, 3, 4, 4, 4]
    assert all(len(set(g.workload_ids)) == len(g.workload_ids) for g in groups)
    bins = built.details["bins"]
    assert all(15 <= bins[b] <= 25 for b in ("low", "medium", "high")), bins  # roughly even
    ok_ids = {s.id for s in catalog()[:N_OK]}
    members = {w for u in units for w in u.workload_ids}
    assert members <= ok_ids and OOM_ID not in members
    fams = {WorkloadSpec.from_id(a).family != WorkloadSpec.from_id(b).family for a, b in (u.workload_ids for u in pairs)}
    assert fams == {True, False}  # mostly different families, some the same
    precisions = {tuple(sorted(s.precision for s in u.specs)) for u in pairs}
    assert precisions == {("bf16", "bf16"), ("bf16", "fp32"), ("fp32", "fp32")}
    pair_lines = [x for x in lines if len(_ids(x)) == 2]
    mem = [int(m) for m in re.findall(r"mem (\d+)%", "\n".join(pair_lines))]
    assert sum(m > 70 for m in mem) >= 6  # memory-heavy pairs
    assert sum("expected to fail together" in x for x in pair_lines) >= 3  # over the card (100.4% prints as 100%)
    assert "expected to fail together" in "\n".join(lines)
    assert "60 pairs" in built.summary and "6 groups" in built.summary


def test_pairs_sum_util_matches_fixture(sweep: Path) -> None:
    util = {s.id: 5.0 + (i * 37) % 95 for i, s in enumerate(catalog()[:N_OK])}
    for line in pairs_plan(sweep, 20, 0, 0):
        a, b = _ids(line)
        assert f"sum_util {util[a] + util[b]:.0f}," in line


def test_simulated_mixed_gpus_and_empty_sources_refused(tmp_path: Path) -> None:
    sim = _fixture_sweep(tmp_path / "sim", simulated=True)
    with pytest.raises(GpupredError, match="simulated"):
        pairs_plan(sim)
    with pytest.raises(GpupredError, match="simulated"):
        subset_plan(sim)
    mixed = tmp_path / "mixed"
    _fixture_sweep(mixed / "a")
    _fixture_sweep(mixed / "b", gpu="NVIDIA H200")
    with pytest.raises(GpupredError, match="2 GPU kinds"):
        subset_plan(mixed)
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    with pytest.raises(GpupredError, match=f"{empty}: no ok solo runs"):
        pairs_plan(empty)


def test_subset_round_robin_over_families(sweep: Path) -> None:
    built = build_subset(sweep, n=36, seed=0)
    assert built.lines == subset_plan(sweep, 36, 0)
    units = parse_plan_text("\n".join(built.lines))
    assert len(units) == 36 and len({u.group_id for u in units}) == 36
    fams = pd.Series([u.specs[0].family for u in units]).value_counts()
    assert len(fams) == 18 and set(fams) == {2}
    assert {u.workload_ids[0] for u in units} <= {s.id for s in catalog()[:N_OK]}
    assert len(parse_plan_text("\n".join(subset_plan(sweep, 500)))) == N_OK  # capped at what was measured


def test_fusion_colocation_groups_repeat_the_f1_spec() -> None:
    lines = fusion_colocation_plan()
    fs = sorted({s.fused for s in fused_catalog() if 2 <= s.fused <= 4})
    assert fs == [2, 4]
    units = parse_plan_text("\n".join(lines))
    assert len(units) == len([s for s in fused_catalog() if s.fused in fs])
    for u in units:
        assert len(set(u.workload_ids)) == 1 and u.specs[0].fused == 1
    # identical ids in one group: a distinct, deterministic co-located unit, not the solo run
    wid = units[0].workload_ids[0]
    assert Unit((wid, wid)).group_id.startswith("co2-") and Unit((wid, wid)).group_id != Unit((wid,)).group_id


@pytest.mark.parametrize("name,expected", [
    ("h100-solo.txt", lambda: load_plan("catalog:180")),
    ("fusion.txt", lambda: load_plan("fused")),
    ("fusion-coloc.txt", lambda: parse_plan_text("\n".join(fusion_colocation_plan()))),
])
def test_committed_plan_files_load_and_match_their_generators(name: str, expected) -> None:  # type: ignore[no-untyped-def]
    path = REPO / "plans" / name
    units = load_plan(str(path))
    assert units == expected()
    assert path.read_text().startswith("# ")
    assert solo_plan(180) == [u.workload_ids[0] for u in load_plan("catalog:180")]
    assert fused_plan() == [u.workload_ids[0] for u in load_plan("fused")]


def _cli(argv: list[str]) -> int:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    profile_cli.register(app)
    try:
        run_app(app, argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_cli_writes_plans_with_header_and_summary(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pairs.txt"
    assert _cli(["plan", "pairs", "--from", str(sweep), "--n", "30", "--groups", "2", "--out", str(out)]) == 0
    text = out.read_text()
    assert f"--from {sweep}" in text and "generated 20" in text
    assert len(load_plan(str(out))) == 32
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and "30 pairs" in line and "sum_util <100" in line
    sub = tmp_path / "subset.txt"
    assert _cli(["plan", "subset", "--from", str(sweep), "--n", "18", "--out", str(sub)]) == 0
    assert len(load_plan(str(sub))) == 18 and "18 families" in capsys.readouterr().out
    fc = tmp_path / "fc.txt"
    assert _cli(["plan", "fusion-coloc", "--out", str(fc)]) == 0
    assert load_plan(str(fc)) == parse_plan_text("\n".join(fusion_colocation_plan()))
    assert "F=2: 10, F=4: 10" in capsys.readouterr().out
    assert _cli(["plan", "solo", "--n", "20", "--out", str(tmp_path / "solo.txt")]) == 0
    assert load_plan(str(tmp_path / "solo.txt")) == load_plan("catalog:20")
    assert _cli(["plan", "fused", "--out", str(tmp_path / "fused.txt")]) == 0
    assert load_plan(str(tmp_path / "fused.txt")) == load_plan("fused")


def test_cli_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "h100" / "none"
    (empty / "runs").mkdir(parents=True)
    for cmd in ("pairs", "subset"):
        assert _cli(["plan", cmd, "--from", str(empty), "--out", str(tmp_path / "x.txt")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and str(empty) in err and "no ok solo runs" in err
    assert not (tmp_path / "x.txt").exists()
