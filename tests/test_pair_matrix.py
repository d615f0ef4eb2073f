"""The pair-matrix plan (issue 59 item 1) and the plan grammar's repeat marker, on FIXTURE solo sweeps.

Every number in the fixture sweeps is made up (GPU time, utilization, memory): they are FIXTURES, not measurements.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer

from fixtures_learning import _run_row
from gpupred.cliapp import run_app
from gpupred.errors import GpupredError
from gpupred.cli import profile as profile_cli
from gpupred.profile.pair_matrix import (
    HEAVY_MIB,
    REFERENCE_ROLES,
    MatrixSettings,
    build_matrix,
    choose_matrix,
    matrix_blocks,
    memory_probes,
    tournament,
)
from gpupred.profile.plans import PlanBuild, plan_cost
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA
from gpupred.profile.store import write_manifest
from gpupred.profile.units import Unit, load_plan, parse_group_id, parse_plan_text
from gpupred.workloads.catalog import catalog
from gpupred.workloads.spec import WorkloadSpec

REPO = Path(__file__).resolve().parent.parent
CARD = 81559.0
N = 72  # FIXTURE workloads: the first 72 catalog specs (4 per family)
SPECS = catalog()[:N]
LAUNCH = next(i for i, s in enumerate(SPECS) if s.family == "mlp")  # the smallest, least busy job
BANDWIDTH = next(i for i, s in enumerate(SPECS) if s.family == "vgg")  # the highest DRAM bandwidth
TRANSFORMER = next(i for i, s in enumerate(SPECS) if s.family == "gpt")  # busy, the highest sm_active
HEAVY = [i for i, s in enumerate(SPECS) if s.family in ("bert", "densenet", "inception")][:3]  # > 95 %, > 20 GB


def _metrics(i: int) -> dict[str, float]:
    """FIXTURE solo figures of workload ``i``: made up, deterministic."""
    util = 10.0 + (i * 37) % 84
    m = {"gpu_util": util, "mem_util": 5.0 + i % 40, "sm_active": 0.7 * util, "tensor_active": float(i % 20),
         "dram_bw_util": 5.0 + (i * 13) % 40, "mem": 1000.0 + (i * 7919) % 11000}
    if i == LAUNCH:
        m.update(gpu_util=2.0, sm_active=1.0, mem=900.0)
    if i == BANDWIDTH:
        m.update(dram_bw_util=80.0)
    if i == TRANSFORMER:
        m.update(gpu_util=99.5, sm_active=99.0)
    if i in HEAVY:
        m.update(gpu_util=97.0 + HEAVY.index(i), mem=21000.0 + 1500.0 * HEAVY.index(i))
    return m


def _samples(gid: str, m: dict[str, float]) -> pd.DataFrame:
    """FIXTURE samples: flat metrics in the 2-6 s window (the run rows' window), memory allocated from 1 s."""
    rows = []
    for k in range(15, 66):
        t = k * 0.1
        inside = 2.0 <= t <= 6.0
        for metric, source in (("gpu_util", "poll"), ("mem_util", "poll"), ("sm_active", "gpm"),
                               ("tensor_active", "gpm"), ("dram_bw_util", "gpm")):
            rows.append((gid, t, metric, m[metric] if inside else 1.0, -1, source))
        rows.append((gid, t, "mem_used_mib", 300.0 + (m["mem"] if t >= 1.0 else 0.0), -1, "poll"))
        rows.append((gid, t, "proc_mem_mib", m["mem"] if t >= 1.0 else 0.0, 0, "poll"))
    return pd.DataFrame(rows, columns=["group_id", "t_s", "metric", "value", "member", "source"])


def write_fixture_solo_sweep(root: Path, gpu: str = "NVIDIA H100 80GB HBM3") -> Path:
    """A FIXTURE solo sweep ``root/raw/h100/FIXTURE-solo`` of the 72 workloads, and a manifest of 2 sessions that
    ran 36 units each in 600 s (a FIXTURE 1200 s / 72 units = 16.7 s per unit)."""
    sweep = root / "raw" / "h100" / "FIXTURE-solo"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "samples").mkdir()
    for i, spec in enumerate(SPECS):
        rid = f"fixture-{i:03d}"
        m = _metrics(i)
        row = _run_row(spec, rid, gpu=gpu)
        row.update(torch_peak_reserved_mib=m["mem"] - 500.0, gpu_memory_total_mib=CARD, cuda_context_mib=500.0)
        pq.write_table(pa.Table.from_pandas(_samples(rid, m), schema=SAMPLE_SCHEMA, preserve_index=False),
                       sweep / "samples" / f"{rid}.parquet")
        pq.write_table(pa.Table.from_pylist([row], schema=RUN_SCHEMA), sweep / "runs" / f"{rid}.parquet")
    sessions = [{"started": "2000-01-01T00:00:00+00:00", "ended": "2000-01-01T00:10:00+00:00", "units_run": 36},
                {"started": "2000-01-01T01:00:00+00:00", "ended": "2000-01-01T01:10:00+00:00", "units_run": 36}]
    write_manifest(sweep, {"sweep_id": "FIXTURE-solo", "sessions": sessions})
    return sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture_solo_sweep(tmp_path_factory.mktemp("fixture"))


@pytest.fixture(scope="module")
def built(sweep: Path) -> PlanBuild:
    return build_matrix(sweep)


def test_matrix_meets_issue_59(sweep: Path, built: PlanBuild) -> None:
    units = parse_plan_text("\n".join(built.lines))
    assert len(units) == len(built.lines) == len({u.group_id for u in units})  # every line its own unit
    refs = list(built.details["references"].values())
    jobs = built.details["jobs"]
    assert list(built.details["references"]) == list(REFERENCE_ROLES) and len(set(refs)) == 4
    assert len({WorkloadSpec.from_id(r).family for r in refs}) == 4
    assert len(jobs) == 30 and not set(jobs) & set(refs)
    specs = [WorkloadSpec.from_id(j) for j in jobs]
    assert len({s.family for s in specs}) >= 12 and {s.precision for s in specs} == {"fp32", "bf16"}
    assert {SPECS[i].id for i in HEAVY} <= set(jobs)  # every job above 95 % and 20 GB
    pairs = {frozenset(u.workload_ids) for u in units if len(u.workload_ids) == 2 and u.repeat == 1}
    assert all(frozenset((j, r)) in pairs for j in jobs for r in refs)  # each job x each reference: 120
    every = built.details["all_pairs"]
    assert len(every) == 8 and all(frozenset((a, b)) in pairs for k, a in enumerate(every) for b in every[k + 1:])
    assert any(SPECS[i].id in every for i in HEAVY)
    reps = [u for u in units if u.repeat > 1 and len(u.workload_ids) == 2]
    assert sorted(u.repeat for u in reps) == [2] * 10 + [3] * 10
    assert {frozenset(u.workload_ids) for u in reps} <= pairs  # repeats of measured reference pairs
    assert build_matrix(sweep).lines == built.lines  # deterministic


def test_references_follow_their_rules(sweep: Path) -> None:
    m = choose_matrix(sweep)
    chosen = {role: m.table.at[i, "workload_id"] for role, i in m.refs.items()}
    assert chosen["launch-bound"] == SPECS[LAUNCH].id
    assert chosen["bandwidth"] == SPECS[BANDWIDTH].id
    assert chosen["compute-transformer"] == SPECS[TRANSFORMER].id
    assert WorkloadSpec.from_id(chosen["mid-cnn"]).kind == "cnn"


def test_each_solo_run_comes_just_before_its_pairs_and_the_matrix_first(built: PlanBuild) -> None:
    units = parse_plan_text("\n".join(built.lines))
    first_solo: dict[str, int] = {}
    for k, u in enumerate(units):
        if len(u.workload_ids) == 1:
            first_solo.setdefault(u.workload_ids[0], k)
        else:
            assert all(first_solo.get(w, len(units)) < k for w in u.workload_ids), u.label
    refs, jobs = set(built.details["references"].values()), built.details["jobs"]
    head = units[: built.details["matrix_units"]]
    assert sum(len(u.workload_ids) == 2 for u in head) == 120  # the reference matrix is the plan's prefix
    for j in jobs:  # a job's solo run, then its 4 reference pairs, one after another
        k = next(i for i, u in enumerate(head) if u.workload_ids == (j,))
        assert [set(u.workload_ids) - {j} <= refs for u in head[k + 1:k + 5]] == [True] * 4
    again = [u for u in units if len(u.workload_ids) == 1 and u.repeat == 2]
    assert {u.workload_ids[0] for u in again} == set(built.details["all_pairs"])


def test_memory_probes_scale_the_heaviest_jobs_and_are_expected_to_fail(sweep: Path, built: PlanBuild) -> None:
    probes = built.details["probes"]
    assert len(probes) == 2 and len({WorkloadSpec.from_id(p).family for p in probes}) == 2
    for p in probes:
        spec = WorkloadSpec.from_id(p)
        base = next(s for i, s in enumerate(SPECS) if i in HEAVY and s.arch_key == spec.arch_key
                    and s.precision == spec.precision and s.optimizer == spec.optimizer)
        assert spec.batch_size % base.batch_size == 0 and spec.batch_size >= 2 * base.batch_size  # batch scaled up
        assert any(l.startswith(f"{p} + {p}") and "expected to fail for memory" in l for l in built.lines)
    assert build_matrix(sweep, MatrixSettings(memory_probes=0)).details["probes"] == []
    assert min(_metrics(i)["mem"] for i in HEAVY) > HEAVY_MIB


def test_a_job_too_big_to_double_is_its_own_probe_without_a_second_solo_line(sweep: Path) -> None:
    m = choose_matrix(sweep)
    t = m.table.copy()
    big = max(m.jobs, key=lambda i: t.at[i, "mem_mib"])
    t.loc[big, "mem_mib"] = 0.55 * CARD  # a FIXTURE job above half the card: doubling its batch would not fit
    probes = memory_probes(t, m.jobs, 1)
    assert probes[0][0] == t.at[big, "workload_id"]
    lines = matrix_blocks(replace(m, table=t, probes=probes), 3)["probes"]
    assert len(lines) == 1 and lines[0].startswith(f"{probes[0][0]} + {probes[0][0]}") and "expected to fail" in lines[0]


def test_tournament_pairs_every_member_once_per_round() -> None:
    games = tournament(list(range(8)))
    assert len(games) == 28 and len({frozenset(g) for g in games}) == 28
    for r in range(7):
        assert sorted(x for g in games[4 * r:4 * r + 4] for x in g) == list(range(8))
    assert len(tournament(list(range(5)))) == 10


def test_too_few_workloads_and_bad_sizes_are_one_line_errors(sweep: Path) -> None:
    with pytest.raises(GpupredError, match="needs at least"):
        build_matrix(sweep, MatrixSettings(n_jobs=100))
    with pytest.raises(GpupredError, match="--all 12 .* at most --jobs 10"):
        build_matrix(sweep, MatrixSettings(n_jobs=10, n_all=12))


def test_plan_cost_uses_the_solo_sweeps_time_per_unit(sweep: Path) -> None:
    cost = plan_cost(221, sweep)
    assert cost.seconds_per_unit == pytest.approx(1200.0 / 72)
    assert cost.minutes == pytest.approx(221 * 1200.0 / 72 / 60) and cost.chunks() == 8  # 61.4 min / 8
    assert "8 chunks of 8 minutes" in cost.line()


def _cli(argv: list[str]) -> int:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    profile_cli.register(app)
    try:
        run_app(app, argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_cli_matrix_writes_the_plan_and_prints_its_gpu_time(sweep: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "matrix.txt"
    assert _cli(["plan", "pairs", "--matrix", "--from", str(sweep), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "GPU time: 221 units x 16.7 s" in printed and "8 chunks of 8 minutes" in printed
    assert "the reference matrix (first 154 units)" in printed
    text = out.read_text()
    assert f"gpupred plan pairs --matrix --from {sweep}" in text and "reference launch-bound:" in text
    assert len(load_plan(str(out))) == 221
    assert _cli(["plan", "estimate", str(out), "--from", str(sweep)]) == 0
    assert "221 units x 16.7 s" in capsys.readouterr().out
    assert _cli(["plan", "pairs", "--matrix", "--from", str(sweep), "--jobs", "0", "--out", str(out)]) == 2
    assert "--jobs 0: must be at least 1" in capsys.readouterr().err


def test_repeat_marker_makes_its_own_unit_and_keeps_old_ids() -> None:
    a, b = SPECS[0].id, SPECS[1].id
    units = parse_plan_text(f"{a}\n{a} repeat=2\n{a} + {b}\n{a} + {b} repeat=2 sync=window  # note\n{a} + {b} repeat=3")
    assert [u.repeat for u in units] == [1, 2, 1, 2, 3]
    ids = [u.group_id for u in units]
    assert len(set(ids)) == 5 and ids[0] == a and ids[1] == f"{a}~rep-2"  # a first measurement keeps its old id
    assert re.fullmatch(r"co2-[0-9a-f]{12}", ids[2]) and ids[3] == f"{ids[2]}~sync-window~rep-2"
    assert [parse_group_id(g) for g in ids] == [(a, "step", 1), (a, "step", 2), (ids[2], "step", 1),
                                               (ids[2], "window", 2), (ids[2], "step", 3)]
    assert Unit((a,), "window").group_id == f"{a}~sync-window" and parse_group_id(f"{a}~sync-window") == (a, "window", 1)
    assert parse_plan_text(f"{a} repeat=1")[0] == Unit((a,))


@pytest.mark.parametrize("line,match", [
    ("{a} repeat=0", "repeat='0' must be a whole number >= 1"),
    ("{a} repeat=two", "repeat='two'"),
    ("{a} repeat=2 repeat=3", "repeat= given twice"),
    ("{a} sync=often", "unknown sync mode"),
])
def test_bad_repeat_or_sync_options_are_one_line_errors(line: str, match: str) -> None:
    with pytest.raises(GpupredError, match=match):
        parse_plan_text(line.format(a=SPECS[0].id), "plan.txt")


def test_a_resumed_sweep_runs_a_repeat_of_a_finished_unit(tmp_path: Path) -> None:
    from gpupred.profile.sweep import SweepOptions, run_sweep
    from profile_faults import tiny_config, tiny_ids

    a, b = tiny_ids(2)
    plan = tmp_path / "plan.txt"
    plan.write_text(f"{a}\n{a} + {b}\n{a} repeat=2\n{a} + {b} repeat=2\n")
    out = tmp_path / "data" / "dryrun" / "cpu" / "FIXTURE-repeats"
    (out / "runs").mkdir(parents=True)
    for u in load_plan(str(plan))[:2]:  # the first measurements are on disk (FIXTURE files: only their names count)
        (out / "runs" / f"{u.group_id}.parquet").write_bytes(b"")
    s = run_sweep(str(plan), out, SweepOptions(dry_run=True, max_minutes=0.05, progress=False), tiny_config())
    assert s.planned == 4 and s.already_done == 2 and s.remaining == 2  # the repeats are still to run


@pytest.mark.slow
def test_a_dry_sweep_writes_each_repeat_as_its_own_unit_and_the_card_counts_them(tmp_path: Path) -> None:
    from gpupred.profile.datacard import sanity
    from gpupred.profile.schema import read_runs
    from gpupred.profile.sweep import SweepOptions, run_sweep
    from profile_faults import tiny_config, tiny_ids

    a, b = tiny_ids(2)
    plan = tmp_path / "plan.txt"
    plan.write_text(f"{a}\n{a} + {b}\n{a} repeat=2\n{a} + {b} repeat=2\n")
    out = tmp_path / "data" / "dryrun" / "cpu" / "FIXTURE-repeats"
    s = run_sweep(str(plan), out, SweepOptions(dry_run=True, progress=False), tiny_config())
    assert s.done_now == 4 and s.remaining == 0
    runs = read_runs(out)
    assert set(runs["group_id"]) == {u.group_id for u in load_plan(str(plan))} and len(runs) == 6
    checks, _ = sanity(out)
    assert checks["unit_outcomes"] == {"solo": {"ok": 2}, "pair": {"ok": 2}}
    assert checks["noise_floor"]["solo"]["units"] == 1 and checks["noise_floor"]["co-located members"]["units"] == 1


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_committed_matrix_plans_load_with_solo_runs_before_pairs(gpu: str) -> None:
    path = REPO / "plans" / f"{gpu}-pairs-matrix.txt"
    text = path.read_text()
    assert f"gpupred plan pairs --matrix --from data/raw/{gpu}/" in text and "GPU time:" in text
    units = load_plan(str(path))
    assert len(units) == len([x for x in text.splitlines() if x.strip() and not x.startswith("#")]) >= 120 + 28 + 20
    seen: set[str] = set()
    for u in units:
        if len(u.workload_ids) == 1:
            seen.add(u.workload_ids[0])
        assert set(u.workload_ids) <= seen, u.label
