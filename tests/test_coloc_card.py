"""The data card of a co-location sweep (issue 59 item 2): outcomes, the noise floor from repeats, the solo drift.

Built on FIXTURE sweeps written here: every iteration time and utilization is made up, none is a measurement.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fixtures_learning import _run_row, _samples
from gpupred.profile.coloc_card import coloc_checks, repeat_spread, solo_drift, unit_outcomes
from gpupred.profile.datacard import datacard_text, run_table, sanity
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA
from gpupred.profile.units import Unit
from gpupred.workloads.spec import WorkloadSpec

A = "mlp.mlp-w512-d2-bs64-in784-fp32-sgd"
B = "resnet.resnet18-bs32-img32-bf16-sgd"
C = "bert.bert-v8192-m256-h4-l4-bs16-seq128-fp32-adam"


def _unit(sweep: Path, unit: Unit, statuses: list[str], iter_times: list[float], util: float) -> None:
    """Write one FIXTURE unit: one row per member with the given status and mean iteration time."""
    gid = unit.group_id
    k = len(unit.workload_ids)
    rows = []
    for m, (wid, status, it) in enumerate(zip(unit.workload_ids, statuses, iter_times)):
        row = _run_row(WorkloadSpec.from_id(wid), gid if k == 1 else f"{gid}.m{m}", status=status, group_size=k,
                       member=m, group_id=gid)
        row.update(iter_time_mean_s=it, iter_times_s=[it] * 4, iter_time_median_s=it)
        rows.append(row)
    samples = _samples(gid, util, 1000.0 * k)
    pq.write_table(pa.Table.from_pandas(samples, schema=SAMPLE_SCHEMA, preserve_index=False),
                   sweep / "samples" / f"{gid}.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=RUN_SCHEMA), sweep / "runs" / f"{gid}.parquet")


def _folder(root: Path, name: str) -> Path:
    sweep = root / name
    (sweep / "runs").mkdir(parents=True)
    (sweep / "samples").mkdir()
    return sweep


@pytest.fixture()
def pairs_sweep(tmp_path: Path) -> Path:
    """A FIXTURE earlier solo sweep (A, B, C: 0.1 s, util 50) and a FIXTURE pairs sweep beside it."""
    earlier = _folder(tmp_path / "h100", "FIXTURE-solo")
    for wid in (A, B, C):
        _unit(earlier, Unit((wid,)), ["ok"], [0.1], 50.0)
    sweep = _folder(tmp_path / "h100", "FIXTURE-pairs")
    _unit(sweep, Unit((A,)), ["ok"], [0.11], 52.0)  # drift x1.10 and +2 points
    _unit(sweep, Unit((B,)), ["ok"], [0.1], 49.0)  # drift x1.00 and -1 point
    _unit(sweep, Unit((A,), repeat=2), ["ok"], [0.105], 51.0)  # the solo repeat: spread 0.11 / 0.105 - 1
    for rep, its, util in ((1, [0.20, 0.15], 90.0), (2, [0.22, 0.15], 93.0), (3, [0.21, 0.16], 91.0)):
        _unit(sweep, Unit((A, B), repeat=rep), ["ok", "ok"], its, util)
    _unit(sweep, Unit((B, C)), ["partner_failed", "oom"], [float("nan")] * 2, 0.0)
    _unit(sweep, Unit((B, C), repeat=2), ["ok", "ok"], [0.3, 0.3], 95.0)  # one of two measurements failed: no spread
    _unit(sweep, Unit((A, B, C)), ["ok", "ok", "ok"], [0.3, 0.3, 0.4], 99.0)
    return sweep


def test_units_are_counted_by_kind_and_outcome(pairs_sweep: Path) -> None:
    table = run_table(pairs_sweep)
    assert unit_outcomes(table) == {"solo": {"ok": 3}, "pair": {"ok": 4, "oom": 1}, "group of 3": {"ok": 1}}


def test_noise_floor_from_repeats(pairs_sweep: Path) -> None:
    spread = repeat_spread(run_table(pairs_sweep)).set_index(["workload_id", "group_size", "member"])
    assert len(spread) == 3  # A solo twice, both members of A + B three times; B + C has one ok measurement
    assert spread.loc[(A, 1, 0), "iter_time_spread"] == pytest.approx(0.11 / 0.105 - 1)
    assert spread.loc[(A, 2, 0), "iter_time_spread"] == pytest.approx(0.22 / 0.20 - 1)
    assert spread.loc[(B, 2, 1), "iter_time_spread"] == pytest.approx(0.16 / 0.15 - 1)
    assert spread.loc[(A, 2, 0), "util_spread"] == pytest.approx(3.0) and spread.loc[(A, 2, 0), "n"] == 3


def test_solo_drift_against_the_earlier_sweep_beside_it(pairs_sweep: Path) -> None:
    drift = solo_drift(pairs_sweep, run_table(pairs_sweep)).set_index("workload_id")
    assert sorted(drift.index) == sorted([A, B])  # the first solo measurement of each; C ran solo only earlier
    assert drift.at[A, "iter_time_ratio"] == pytest.approx(1.1) and drift.at[A, "util_diff"] == pytest.approx(2.0)
    assert drift.at[B, "iter_time_ratio"] == pytest.approx(1.0) and drift.at[B, "earlier_runs"] == 1
    checks = coloc_checks(pairs_sweep, run_table(pairs_sweep))
    assert checks["solo_drift"]["beyond_noise_floor"] == 1  # A drifted 10 %, its repeat moved 4.8 %
    assert checks["noise_floor"]["co-located members"]["iter_time_spread"]["max"] == pytest.approx(0.1)


def test_the_card_and_the_json_carry_the_figures(pairs_sweep: Path) -> None:
    text = datacard_text(pairs_sweep)
    assert "## Units by outcome, noise floor and solo drift" in text
    assert "- pair: ok 4, oom 1" in text and "- group of 3: ok 1" in text
    assert "noise floor, co-located members measured more than once (1 units): iteration time spread" in text
    assert "median x1.050, range x1.000 to x1.100" in text and "beyond the largest solo repeat spread: 1" in text
    checks, _ = sanity(pairs_sweep)
    assert checks["unit_outcomes"]["pair"] == {"ok": 4, "oom": 1}
    assert checks["noise_floor"]["solo"]["units"] == 1


def test_a_solo_sweep_measured_once_alone_gets_no_such_section(tmp_path: Path) -> None:
    sweep = _folder(tmp_path / "h100", "FIXTURE-solo")
    _unit(sweep, Unit((A,)), ["ok"], [0.1], 50.0)
    assert "## Units by outcome" not in datacard_text(sweep)
