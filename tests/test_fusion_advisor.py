"""The fusion-count advisor (issue 41 item 3): fused step kernels, the choice rule, the measured side, the CLI.

Curves and runs built here are FIXTURES (made-up step times, memory and measurements). The advisor's own answers
come from the committed predictor (models/predictor.joblib) and the committed graph store: predictions, not data.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fixtures_learning import _run_row, _samples
from gpupred.errors import GpupredError
from gpupred.fusion.advisor import advise_fusion, choose_f
from gpupred.fusion.advisor import CURVE_COLUMNS, base_spec, catalog_models
from gpupred.fusion.measured import compare_with_advice, fusion_vs_colocation, measured_curves, measured_knee
from gpupred.step.physics.vmapped import LOOP_CELL_KERNELS, STACKED_OPTIMIZER_OPS, fused_kernels
from gpupred.step.physics.kernels import BWD, CONV, FOREACH_CHUNK, FWD, MATMUL, OPT, KernelList
from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA
from gpupred.profile.units import Unit
from gpupred.workloads.spec import WorkloadSpec

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
RESNET = "resnet.resnet18-bs128-img32-fp32-sgd"
H100 = "NVIDIA H100 80GB HBM3"


def _kl(rows: list[tuple[float, float, int, int, bool]]) -> KernelList:
    """A FIXTURE kernel list: (FLOPs, bytes, tensor core, phase, library) per kernel."""
    a = np.array(rows, dtype=float)
    return KernelList(a[:, 0], a[:, 1], a[:, 2].astype(np.int8), a[:, 3].astype(np.int8), np.zeros(len(rows), bool),
                      a[:, 4].astype(bool), input_bytes=100, param_tensors=2)


def test_fused_kernels_keep_the_launches_and_scale_the_work() -> None:
    kl = _kl([(10, 100, CONV, FWD, 0), (5, 50, 0, FWD, 0), (20, 200, CONV, BWD, 0)] + [(2, 16, 0, OPT, 0)] * 3)
    assert fused_kernels(kl, 1, "sgd", 1e6) is kl  # F = 1 is the plain job
    f4 = fused_kernels(kl, 4, "sgd", 1e6)
    steps = f4.phase != OPT
    assert list(f4.flops[steps]) == [40, 20, 80] and list(f4.bytes[steps]) == [400, 200, 800]
    assert int((f4.phase == OPT).sum()) == STACKED_OPTIMIZER_OPS["sgd"]  # 4 foreach ops, one launch each
    assert f4.flops[~steps].sum() == pytest.approx(3 * 2 / 3 * 4 * 4)  # one stock op's work x F, for 4 ops
    assert f4.param_tensors == 2 and f4.input_bytes == 100  # the stacked parameters, the shared batch
    big = fused_kernels(kl, 64, "adam", 1e6)  # 64 M elements: a launch per FOREACH_CHUNK
    assert int((big.phase == OPT).sum()) == STACKED_OPTIMIZER_OPS["adam"] * math.ceil(64e6 / FOREACH_CHUNK)


def test_fused_recurrent_steps_become_loop_rnn_cells() -> None:
    steps = 3  # a FIXTURE LSTM layer: input GEMM, then per time step a cuDNN GEMM and gate kernel each way
    fwd = [(8, 8, CONV, FWD, 0)] + [(4, 4, CONV, FWD, 1), (1, 4, 0, FWD, 1)] * steps
    bwd = [(8, 8, CONV, BWD, 0)] + [(4, 4, CONV, BWD, 1), (1, 4, 0, BWD, 1)] * steps
    kl = _kl(fwd + bwd + [(1, 8, 0, OPT, 0)] * 7)
    f2 = fused_kernels(kl, 2, "adam", 10.0, "lstm")
    n_fwd, n_bwd = LOOP_CELL_KERNELS["lstm"]
    assert f2.counts["forward"] == 1 + steps * (1 + n_fwd)
    assert f2.counts["backward"] == 1 + steps * (2 + n_bwd)  # data and weight gradient GEMMs per step
    assert not f2.library[f2.phase != OPT].any()  # LoopRNN launches from Python
    assert int(((f2.tensor_core == MATMUL) & (f2.phase == FWD)).sum()) == steps
    fwd_work = f2.flops[f2.phase == FWD].sum()
    assert fwd_work == pytest.approx(2 * sum(r[0] for r in fwd))  # the work is spread, not lost
    with pytest.raises(GpupredError, match="unknown recurrent cell"):
        fused_kernels(kl, 2, "adam", 10.0, "rnn")


def _curve(trials: list[float], memory: list[float], width: float = 0.0) -> pd.DataFrame:
    """A FIXTURE advisor curve over F = 1, 2, 4, ...: trials/s with a +-width band, memory upper ends."""
    f = [2 ** k for k in range(len(trials))]
    t = np.array(trials)
    return pd.DataFrame({"F": f, "trials_per_s": t, "trials_per_s_low": t * (1 - width),
                         "trials_per_s_high": t * (1 + width), "fits": np.array(memory) <= 100.0})


def test_choice_is_the_knee_of_the_fitting_curve_and_hydro_the_largest_fit() -> None:
    c = _curve([100, 190, 350, 610, 620, 630, 640], [10, 20, 30, 40, 50, 60, 70])
    assert choose_f(c, 0.05) == (8, 8, 8, 64)  # 610 >= 0.95 x 640; Hydro: the largest that fits
    assert choose_f(c, 0.0)[0] == 64
    c = _curve([100, 190, 350, 610, 620, 630, 640], [10, 20, 30, 40, 50, 120, 240])  # F >= 32 does not fit
    assert choose_f(c, 0.05) == (8, 8, 8, 16)
    wide = _curve([100, 190, 350, 610, 620, 630, 640], [10] * 7, width=0.3)
    # F = 4 could reach the bar (350 x 1.3 >= 0.95 x 640 x 0.7), F = 2 could not; nothing surely reaches 640 x 1.3
    assert choose_f(wide, 0.05) == (8, 4, 64, 64)
    assert choose_f(_curve([100, 200], [500, 600]), 0.05) == (None, None, None, None)
    with pytest.raises(GpupredError, match="tolerance 1.5"):
        choose_f(c, 1.5)


@pytest.fixture(scope="module")
def predictor():  # type: ignore[no-untyped-def]
    from gpupred.predictor.loading import load_predictor

    return load_predictor(REPO / "models" / "predictor.joblib")


def test_advice_from_the_committed_predictor(predictor) -> None:  # type: ignore[no-untyped-def]
    a = advise_fusion(RESNET + "-x8", "H100 SXM", (1, 2, 4), predictor=predictor)  # a fused id stands for its base
    assert a.model == RESNET and a.gpu == "H100 SXM" and a.card_mib == 80 * 1024.0
    c = a.curve
    assert tuple(c.columns) == CURVE_COLUMNS and list(c["F"]) == [1, 2, 4]
    assert np.allclose(c["trials_per_s"], c["F"] / c["iter_time_mean_s"])
    assert np.allclose(c["samples_per_s"], c["F"] * 128 / c["iter_time_mean_s"])
    assert (c["memory_mib"].diff().dropna() > 0).all()  # more copies, more memory
    assert (c["trials_per_s_low"] <= c["trials_per_s"]).all() and (c["trials_per_s"] <= c["trials_per_s_high"]).all()
    assert a.f in (1, 2, 4) and a.f_low <= a.f <= a.f_high and a.hydro_f == 4 and not c["extrapolated"].any()
    g = advise_fusion(RESNET, "H100 SXM", (1, 2), step="graph", predictor=predictor)
    assert g.curve.iloc[0]["iter_time_mean_s"] == pytest.approx(c.iloc[0]["iter_time_mean_s"])  # F = 1: one job
    tight = advise_fusion(RESNET, "H100 SXM", (1, 2, 4), memory_mib=float(c.iloc[1]["memory_mib_high"]),
                          predictor=predictor)
    assert list(tight.curve["fits"]) == [True, True, False] and tight.hydro_f == 2


def test_advisor_errors_are_one_line(predictor) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GpupredError, match="several GPUs"):
        advise_fusion(RESNET, None, (1, 2), predictor=predictor)
    with pytest.raises(GpupredError, match="not fp16"):
        base_spec(RESNET.replace("fp32", "fp16"))
    with pytest.raises(GpupredError, match="unknown step model 'loop'"):
        advise_fusion(RESNET, "H100 SXM", (1, 2), step="loop", predictor=predictor)
    with pytest.raises(GpupredError, match="no physics core"):
        advise_fusion(RESNET, "H100 SXM", (1, 2), predictor=replace_core(predictor))
    assert len(catalog_models()) == 10 and all(WorkloadSpec.from_id(m).fused == 1 for m in catalog_models())


def replace_core(predictor):  # type: ignore[no-untyped-def]
    """A shallow copy of ``predictor`` without its physics core (an artifact exported before it had one)."""
    import copy

    out = copy.copy(predictor)
    out.core = None
    return out


def test_cli_prints_json_without_torch() -> None:
    code = ("import json, sys; from gpupred.cli import main\n"
            "try:\n    main(['advise-fusion', %r, '--gpu', 'H200', '--counts', '1,2', '--json'])\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n") % RESNET
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)},
                         cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["gpu"] == "H200" and [r["F"] for r in got["curve"]] == [1, 2] and got["hydro_f"] == 2
    bad = subprocess.run([sys.executable, "-m", "gpupred.cli", "advise-fusion", RESNET, "--counts", "0,2"],
                         capture_output=True, text=True, env={"PYTHONPATH": str(SRC)}, cwd=REPO, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--counts '0,2'" in bad.stderr


def write_fixture_fused_runs(raw: Path) -> Path:
    """A FIXTURE sweep of fused runs of resnet18 (F = 1..8 ok, 16 out of memory) and its F = 2, 4 co-located copies,
    plus an unrelated solo run; every figure is made up."""
    sweep = raw / "h100" / "FIXTURE-fusion"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "samples").mkdir()
    base = WorkloadSpec.from_id(RESNET)

    def write(unit: Unit, statuses: list[str], its: list[float], util: float, mem: float) -> None:
        gid, k = unit.group_id, len(unit.workload_ids)
        rows = []
        for m, (wid, st, it) in enumerate(zip(unit.workload_ids, statuses, its)):
            spec = WorkloadSpec.from_id(wid)
            row = _run_row(spec, gid if k == 1 else f"{gid}.m{m}", status=st, group_size=k, member=m, group_id=gid)
            row.update(iter_time_mean_s=it, samples_per_s=spec.batch_size * spec.fused / it if st == "ok" else float("nan"))
            rows.append(row)
        pq.write_table(pa.Table.from_pandas(_samples(gid, util, mem), schema=SAMPLE_SCHEMA, preserve_index=False),
                       sweep / "samples" / f"{gid}.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema=RUN_SCHEMA), sweep / "runs" / f"{gid}.parquet")

    for f, it, util in ((1, 0.010, 25.0), (2, 0.011, 40.0), (4, 0.012, 70.0), (8, 0.020, 95.0)):
        write(Unit((replace(base, fused=f).id,)), ["ok"], [it], util, 1000.0 * f)
    write(Unit((replace(base, fused=16).id,)), ["oom"], [float("nan")], 0.0, 0.0)
    write(Unit((RESNET, RESNET)), ["ok", "ok"], [0.018, 0.018], 45.0, 1900.0)
    write(Unit((RESNET,) * 4), ["ok"] * 4, [0.036] * 4, 75.0, 3800.0)
    write(Unit(("mlp.mlp-w512-d2-bs64-in784-fp32-sgd",)), ["ok"], [0.005], 20.0, 800.0)
    return sweep


def test_measured_curve_knee_and_fusion_against_colocation(tmp_path: Path) -> None:
    write_fixture_fused_runs(tmp_path / "raw")
    m = measured_curves(tmp_path / "raw")
    assert set(m["model"]) == {RESNET} and set(m["gpu"]) == {"H100 SXM"}  # the unrelated solo run is not a fused model
    fused = m[m["kind"] == "fused"].set_index("F")
    assert list(fused.index) == [1, 2, 4, 8, 16] and fused.at[16, "status"] == "oom"
    assert fused.at[8, "trials_per_s"] == pytest.approx(8 / 0.020) and fused.at[4, "gpu_util"] == pytest.approx(70.0)
    k = measured_knee(m)
    assert k["knee_f"] == 8 and k["largest_ok_f"] == 8 and k["first_oom_f"] == 16  # 400 trials/s: the best
    assert measured_knee(m, 0.25)["knee_f"] == 4  # 333 >= 0.75 x 400
    co = fusion_vs_colocation(m).set_index("F")
    assert co.at[2, "samples_per_s_coloc"] == pytest.approx(2 * 128 / 0.018)
    assert co.at[4, "throughput_ratio"] == pytest.approx((4 * 128 / 0.012) / (4 * 128 / 0.036))
    advice = pd.DataFrame([{"model": RESNET, "gpu": "H100 SXM", "step": "vmap", "f": 4, "f_low": 2, "f_high": 8,
                            "hydro_f": 64}])
    cmp = compare_with_advice(advice, m).iloc[0]
    assert cmp["knee_f"] == 8 and bool(cmp["knee_in_interval"])
    assert cmp["advised_share_of_best"] == pytest.approx((4 / 0.012) / 400) and np.isnan(cmp["hydro_share_of_best"])
    assert measured_curves(tmp_path / "nothing").empty


def _outputs(nb: Path) -> str:
    """Every text and plain-data output of an executed notebook, joined."""
    cells = json.loads(nb.read_text())["cells"]
    return "\n".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "") for c in cells
                     for o in c.get("outputs", []))


@pytest.mark.notebook
def test_notebook_09_advises_and_compares_with_fixture_runs(run_notebook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "graphs").symlink_to(REPO / "data" / "graphs")  # the committed store (read only)
    (tmp_path / "models").symlink_to(REPO / "models")  # the committed predictor
    write_fixture_fused_runs(tmp_path / "data" / "raw")
    nb = run_notebook("09-fusion-advisor", {"models": [RESNET], "gpus": ["H100 SXM"], "counts": [1, 2, 4, 8],
                                            "steps": ["vmap"]})
    text = _outputs(nb)
    assert "knee_in_interval" in text and "throughput_ratio" in text and "no fused runs" not in text
    assert (tmp_path / "reports" / "figures" / "09-fusion-curves-h100-sxm.png").is_file()
    metrics = json.loads((tmp_path / "reports" / "metrics" / "09-fusion-advisor.json").read_text())["fusion_advisor"]
    assert metrics["measured_models"] == 1 and f"{RESNET} @ H100 SXM" in metrics["advised"]


@pytest.mark.notebook
def test_notebook_09_says_so_without_fused_runs(run_notebook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "graphs").symlink_to(REPO / "data" / "graphs")
    (tmp_path / "models").symlink_to(REPO / "models")
    nb = run_notebook("09-fusion-advisor", {"models": [RESNET], "gpus": ["H200"], "counts": [1, 2], "steps": ["vmap"]})
    assert "no fused runs under" in _outputs(nb)


def test_fused_kernels_keep_the_setups_tensor_core_flags() -> None:
    """A fused step's kernels carry one tensor-core flag per kernel (the setup's), so they can be timed."""
    from gpupred.hardware import gpu_spec
    from gpupred.step.physics.constants import DEFAULT
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.step.physics.timeline import kernel_times
    from gpupred.step.physics.vmapped import fused_kernels
    from gpupred.workloads.spec import WorkloadSpec

    kl = spec_kernels(WorkloadSpec.from_id(RESNET))
    fused = fused_kernels(kl, 8, "sgd", 11.2e6)
    assert kl.on_tc is not None and fused.on_tc is not None and len(fused.on_tc) == len(fused) != len(kl)
    assert kernel_times(fused, gpu_spec("H100 SXM"), fused.precision, DEFAULT).shape == (len(fused),)
