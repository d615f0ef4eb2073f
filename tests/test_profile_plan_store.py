"""Plans, deterministic unit ids, atomic unit writing, dry-run refusal and the no-GPU CLI error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from gpupred.errors import GpupredError
from gpupred.profile import store
from gpupred.profile.nvml import probe
from gpupred.profile.units import Unit, load_plan, parse_plan_text
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA, read_runs, read_samples
from gpupred.profile.sweep import check_out

from profile_faults import TINY, TINY2


def test_plan_file_with_groups_and_comments(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(f"# fixture plan\n{TINY}\n{TINY} + {TINY2}  # a pair\n\n{TINY}\n")
    units = load_plan(str(plan))
    assert [u.workload_ids for u in units] == [(TINY,), (TINY, TINY2)]  # duplicate dropped
    assert units[0].group_id == TINY
    assert units[1].group_id == Unit((TINY, TINY2)).group_id and units[1].group_id.startswith("co2-")
    with pytest.raises(GpupredError, match=r"plan.txt:1"):
        parse_plan_text("not-an-id\n", "plan.txt")
    with pytest.raises(GpupredError, match="2-4 ids"):
        parse_plan_text(" + ".join([TINY] * 5), "p")


def test_catalog_plans() -> None:
    units = load_plan("catalog:5")
    assert len(units) == 5 and all(len(u.workload_ids) == 1 for u in units)
    fam = load_plan("catalog:family=mlp")
    assert fam and all(u.workload_ids[0].startswith("mlp.") for u in fam)
    with pytest.raises(GpupredError, match="unknown families"):
        load_plan("catalog:family=nope")
    with pytest.raises(GpupredError, match="not a file"):
        load_plan("no-such-plan.txt")


def _fixture_unit(group_id: str) -> tuple[pa.Table, pa.Table]:
    row = {n: None for n in RUN_SCHEMA.names}
    row.update(run_id=group_id, group_id=group_id, group_size=1, member=0, status="ok", message="fixture", simulated=True,
               iter_times_s=[0.1, 0.1], schema_version=1)
    runs = pa.Table.from_pylist([row], schema=RUN_SCHEMA)
    samples = pa.Table.from_pydict({"group_id": [group_id], "t_s": [0.0], "metric": ["gpu_util"], "value": [1.0],
                                    "member": [-1], "source": ["poll"]}, schema=SAMPLE_SCHEMA)
    return runs, samples


def test_write_unit_is_atomic_and_never_rewrites(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "runs" / ".tmp-x.parquet.123").write_bytes(b"half a file")  # left by a killed writer
    assert store.clean_temporaries(sweep) == 1
    runs, samples = _fixture_unit("u1")
    store.write_unit(sweep, "u1", runs, samples)
    assert store.finished_units(sweep) == {"u1"}
    with pytest.raises(GpupredError, match="never rewritten"):
        store.write_unit(sweep, "u1", runs, samples)
    assert len(read_runs(sweep)) == 1 and len(read_samples(sweep)) == 1
    assert not list(sweep.rglob(".tmp-*"))


def test_dry_run_never_goes_under_data_raw(tmp_path: Path) -> None:
    with pytest.raises(GpupredError, match="cannot go under data/raw"):
        check_out(tmp_path / "data" / "raw" / "h100" / "s1", dry_run=True)
    with pytest.raises(GpupredError, match="dry-run folder"):
        check_out(tmp_path / "data" / "dryrun" / "cpu" / "s1", dry_run=False)
    check_out(tmp_path / "data" / "dryrun" / "cpu" / "s1", dry_run=True)


@pytest.mark.skipif(probe() is None, reason="NVML finds a GPU here")
def test_cli_without_gpu_fails_at_once_with_one_line(tmp_path: Path) -> None:
    for args in (["profile", TINY], ["sweep", "--plan", "catalog:2", "--out", str(tmp_path / "data/raw/x/s")]):
        p = subprocess.run([sys.executable, "-m", "gpupred.cli.profile", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "no NVIDIA GPU/driver found (" in lines[0]
