"""The measurement campaign on the CPU (issue 75): queue order, the skip rule, the budget, packing, unpacking, and a
dry run killed with SIGKILL mid-unit. Every unit here is simulated by ``SimulatedExecutor`` in a temporary tree
(fixture plans of tiny MLP specs, built by the tests): none of it is data."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import json
import os
import platform
import signal
import subprocess
import sys
import tarfile
import time
import types
from collections import Counter
from pathlib import Path

import pytest

from gpupred.campaign import stages
from gpupred.campaign.execute import queue_report, run_next
from gpupred.campaign.executors import SimulatedExecutor
from gpupred.campaign.pack import member_names, pack, unpack
from gpupred.campaign.planner import Estimates, build_queue, plan_next, planned_seconds
from gpupred.campaign.stages import Layout
from gpupred.errors import GpupredError
from gpupred.profile import store
from gpupred.profile.schema import read_runs

from profile_faults import tiny_ids

IDS = tiny_ids(8)
EST = Estimates(sweep_s=20.0, basis="fixture", calibrate_s=60.0, trace_s=15.0, start_s=30.0, reserve_s=60.0)
PLANS = {  # fixture plans, each stage's file with tiny specs
    "h100-pairs-matrix.txt": [IDS[0], IDS[1], f"{IDS[0]} + {IDS[1]}"],
    "h200-pairs-matrix.txt": [IDS[0]],
    "realworld-solo.txt": [IDS[2], IDS[3]],
    "traces.txt": [IDS[0], IDS[4]],
    "h100-solo.txt": [IDS[5], IDS[6]],
    "sync.txt": [f"{IDS[5]} sync=window"],
    "fusion.txt": [IDS[7]],
    "fusion-coloc.txt": [f"{IDS[7]} + {IDS[7]}"],
}
ORDER = ["calibrate", "pipelines", "finetune", "pairs", "realworld", "traces", "twins", "fused"]


def _tree(root: Path) -> Layout:
    """A temporary repository tree: fixture plans, and a dry-run layout (data/dryrun, never data/raw)."""
    (root / "plans").mkdir(parents=True)
    for name, lines in PLANS.items():
        (root / "plans" / name).write_text("# fixture plan, built by tests/test_campaign.py\n" + "\n".join(lines) + "\n")
    dry = root / "data" / "dryrun"
    return Layout(root, dry, dry / "calibrations", root / "plans", root / ".cache" / "campaign")


def test_queue_is_in_the_issues_order_and_skips_stages_whose_code_is_missing(tmp_path: Path) -> None:
    layout = _tree(tmp_path)
    queue = build_queue("h100", layout, EST)
    assert [s.name for s in queue] == ORDER and [s.number for s in queue] == list(range(1, 9))
    skipped = {s.name: s.skipped for s in queue if s.skipped}
    assert set(skipped) == {"pipelines", "finetune"}
    assert skipped["pipelines"].startswith("no plans/input-pipelines.txt")  # gpupred.loader is there: the plan is not
    # without peft or bitsandbytes installed, that is the reason; with them, the missing plan is
    assert skipped["finetune"] == (stages.finetune_missing() or skipped["finetune"])
    assert stages.finetune_missing() or skipped["finetune"].startswith("no plans/finetune.txt")
    left = {s.name: [w.key for w in s.todo] for s in queue}
    assert left["calibrate"] == ["calibration:h100"] and len(left["pairs"]) == 3 and len(left["twins"]) == 3
    assert left["traces"] == [IDS[0], IDS[4]] and len(left["fused"]) == 2
    h200 = {s.name: s for s in build_queue("h200", layout, EST)}
    assert h200["twins"].skipped == "H100 only (this is an h200)" and len(h200["pairs"].todo) == 1
    (layout.plans / "h200-pairs-matrix.txt").unlink()
    assert "no plans/h200-pairs-matrix.txt" in {s.name: s for s in build_queue("h200", layout, EST)}["pairs"].skipped


def test_input_pipelines_turn_on_once_gpupred_loader_and_its_plan_exist(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _tree(tmp_path)
    for name in ("gpupred.loader", "gpupred.loader.standard"):  # a stand-in for the colleague's package
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, module)
    assert "make_loader" in stages.loader_missing()
    sys.modules["gpupred.loader.standard"].make_loader = lambda kind: None  # type: ignore[attr-defined]
    assert stages.loader_missing() == ""
    queue = {s.name: s for s in build_queue("h100", layout, EST)}
    assert queue["pipelines"].skipped.startswith("no plans/input-pipelines.txt")
    (layout.plans / "input-pipelines.txt").write_text(f"{IDS[0]}\n{IDS[1]}\n")
    pipelines = {s.name: s for s in build_queue("h100", layout, EST)}["pipelines"]
    bench = f"loader-bench:host-profile-{platform.node()}.json"
    assert not pipelines.skipped and [w.key for w in pipelines.todo] == [bench, *IDS[:2]]
    assert pipelines.todo[0].part.kind == "loader-bench" and pipelines.todo[1].part.kind == "sweep"
    assert pipelines.todo[1].part.folder == layout.raw / "h100" / "2026-12-pipelines"
    assert pipelines.todo[0].part.folder.parent == pipelines.todo[1].part.folder  # the host profile beside the runs


def test_finetuning_waits_for_lora_setups_then_for_peft(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpupred.setups

    @dataclasses.dataclass
    class WithoutAdapters:  # a TrainingSetup from before the fine-tuning issue
        precision: str = "fp32"

    monkeypatch.setattr(gpupred.setups, "TrainingSetup", WithoutAdapters)
    assert "LoRA" in stages.finetune_missing()

    @dataclasses.dataclass
    class WithAdapters:  # what the fine-tuning issue's TrainingSetup will hold, as far as the check goes
        lora_rank: int = 0
        qlora: bool = False

    monkeypatch.setattr(gpupred.setups, "TrainingSetup", WithAdapters)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "peft" else real(n, *a))
    assert stages.finetune_missing().startswith("peft is not installed")


def test_planned_units_fit_the_budget_in_priority_order(tmp_path: Path) -> None:
    layout = _tree(tmp_path)
    queue = build_queue("h100", layout, EST)
    for budget in (0, 59, 90, 150, 200, 260, 400, 600, 10_000):
        planned = plan_next(queue, budget, EST)
        assert planned_seconds(planned, EST) <= budget
        assert [w.stage for w in planned] == sorted(w.stage for w in planned)
    # the calibration (60 s and a child's 30 s start) does not fit 89 s: the pair matrix's 3 units (60 s) do
    assert [w.stage for w in plan_next(queue, 89, EST)] == [4, 4, 4]
    assert [w.stage for w in plan_next(queue, 59, EST)] == [6]  # a sweep reserves 60 s; a trace needs 45
    # a sweep's first unit needs its 60 s reserve (150 > 149), but the first trace (15 s + 30 s start) fits after it
    assert [(w.stage, w.key) for w in plan_next(queue, 149, EST)] == [(1, "calibration:h100"), (6, IDS[0])]
    assert [w.key for w in plan_next(queue, 170, EST)] == ["calibration:h100", *[w.key for w in queue[3].todo]]
    everything = plan_next(queue, 10_000, EST)
    assert len(everything) == sum(len(s.todo) for s in queue)
    lines, listed = queue_report("h100", layout, 8.0, est=EST)
    assert len(lines) == 10 and "skipped" in lines[2] and len(listed) >= 1


def test_next_runs_the_queue_in_order_packs_what_it_wrote_and_resumes(tmp_path: Path) -> None:
    layout = _tree(tmp_path)
    executor = SimulatedExecutor("h100", unit_s=0.0)
    out = run_next(executor, "h100", layout, 60.0, tmp_path / "out", est=EST)
    kinds = [(k, Path(p).name) for k, p, _ in executor.calls]
    assert kinds == [("calibrate", f"h100-{time.strftime('%Y-%m-%d')}.json"), ("sweep", "h100-pairs-matrix.txt"),
                     ("sweep", "realworld-solo.txt"), ("traces", "traces.txt"), ("sweep", "h100-solo.txt"),
                     ("sweep", "sync.txt"), ("sweep", "fusion.txt"), ("sweep", "fusion-coloc.txt")]
    assert out.lines[0].startswith("smoke test: two units") and len(out.lines) == 1 + 8 + 2
    assert [line.split(":")[0] for line in out.lines[1:9]] == [f"stage {i} {n}" for i, n in enumerate(ORDER, 1)]
    assert "skipped: no plans/input-pipelines.txt" in out.lines[2] and "ran 3 units (ok 3)" in out.lines[4]
    names = member_names(out.tarball)
    on_disk = sorted(str(p.relative_to(tmp_path)) for p in layout.raw.rglob("*") if p.is_file())
    assert names == on_disk and out.files == len(names) == 1 + 2 * 10 + 2 + 6  # calibration, units, traces, manifests
    assert out.summary.read_text().splitlines() == out.lines
    again = run_next(executor, "h100", layout, 60.0, tmp_path / "out2", est=EST)
    assert again.lines[0].startswith("smoke test: passed earlier") and again.tarball is None
    assert all(" done (" in line or "skipped" in line for line in again.lines[1:9])


def test_a_short_call_stops_cleanly_before_its_minutes(tmp_path: Path) -> None:
    layout = _tree(tmp_path)
    executor = SimulatedExecutor("h100", unit_s=0.2)
    est = Estimates(sweep_s=0.2, basis="fixture", calibrate_s=0.2, trace_s=0.2, start_s=0.0, reserve_s=0.2)
    t0 = time.monotonic()
    out = run_next(executor, "h100", layout, 0.03, tmp_path / "out", margin_minutes=0.01, est=est)  # 1.8 s, 0.6 free
    assert time.monotonic() - t0 < 0.03 * 60
    # the smoke test, the calibration and the 3 pair-matrix units take 1.0 s; the next sweep part needs more than the
    # 0.2 s left (its first unit reserves 0.2 s besides its own 0.2 s); a slower machine runs fewer, never more
    assert executor.calls[0][0] == "calibrate" and [c[0] for c in executor.calls[1:]] in ([], ["sweep"])
    assert "not reached" in "\n".join(out.lines) and not list(tmp_path.rglob(".tmp-*"))


def test_a_failed_smoke_test_refuses_to_run_anything(tmp_path: Path) -> None:
    layout = _tree(tmp_path)
    with pytest.raises(GpupredError, match="smoke test failed") as err:
        run_next(SimulatedExecutor("h100", 0.0, smoke_fails=True), "h100", layout, 60.0, tmp_path / "out", est=EST)
    assert "\n" not in str(err.value) and not layout.raw.exists() and not layout.markers.exists()


def test_unpack_adds_files_and_never_overwrites(tmp_path: Path) -> None:
    src = tmp_path / "device"
    files = [src / "data" / "raw" / "h100" / "s" / "runs" / "u.parquet", src / "data" / "calibrations" / "h100.json"]
    for i, f in enumerate(files):
        f.parent.mkdir(parents=True)
        f.write_bytes(f"fixture {i}".encode())
    tarball = pack(files, src, tmp_path / "c.tgz")
    here = tmp_path / "here"
    (here / "data" / "calibrations").mkdir(parents=True)
    (here / "data" / "calibrations" / "h100.json").write_bytes(b"another file")
    done = unpack(tarball, here)
    assert done.added == ["data/raw/h100/s/runs/u.parquet"] and done.conflicts == ["data/calibrations/h100.json"]
    assert (here / "data" / "calibrations" / "h100.json").read_bytes() == b"another file"
    assert unpack(tarball, here).same == ["data/raw/h100/s/runs/u.parquet"]
    dry = tmp_path / "dry.tgz"
    with tarfile.open(dry, "w:gz") as tar:
        tar.add(files[0], arcname="data/dryrun/h100/x.parquet")
    with pytest.raises(GpupredError, match="never data"):
        unpack(dry, here)


def _cli(root: Path, *args: str, unit_s: float, fault: str = "") -> list[str]:
    env = dict(os.environ, GPUPRED_ROOT=str(root), GPUPRED_CACHE=str(root / ".cache"),
               GPUPRED_CAMPAIGN_UNIT_S=str(unit_s), GPUPRED_CAMPAIGN_FAULT=fault, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent / "src"), env.get("PYTHONPATH", "")])
    return [sys.executable, "-m", "gpupred.cli", "campaign", *args], env  # type: ignore[return-value]


def test_dry_run_killed_mid_unit_resumes_and_the_next_call_packs_what_it_left(tmp_path: Path) -> None:
    layout = _tree(tmp_path)
    pairs = layout.raw / "h100" / "2026-12-pairs-matrix"
    cmd, env = _cli(tmp_path, "next", "--dry-run", "--gpu", "h100", "--minutes", "60", "--out", str(tmp_path / "o1"),
                    unit_s=1.0)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while len(store.finished_units(pairs)) < 1 and time.monotonic() - t0 < 60 and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)  # inside the next unit's second
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = store.finished_units(pairs)
    assert len(first) == 1, proc.stderr.read() if proc.stderr else ""
    assert not list((tmp_path / "o1").glob("*.tgz")) if (tmp_path / "o1").exists() else True
    cmd, env = _cli(tmp_path, "next", "--dry-run", "--gpu", "h100", "--minutes", "60", "--out", str(tmp_path / "o2"),
                    unit_s=0.01)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "passed earlier" in done.stdout and "stage 4 pairs: ran 2 units" in done.stdout
    runs = read_runs(pairs)
    assert Counter(runs["group_id"]).most_common(1)[0][1] == 2 and len(set(runs["group_id"])) == 3  # a pair: 2 rows
    assert not list(tmp_path.rglob(".tmp-*"))
    (tarball,) = (tmp_path / "o2").glob("*.tgz")
    killed_unit = f"data/dryrun/h100/2026-12-pairs-matrix/runs/{sorted(first)[0]}.parquet"
    assert killed_unit in member_names(tarball)  # the killed call's unit travels with the next call's tarball
    cmd, env = _cli(tmp_path, "unpack", str(tarball), unit_s=0.0)
    refused = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1


def test_cli_smoke_failure_is_one_line_and_exit_2(tmp_path: Path) -> None:
    _tree(tmp_path)
    cmd, env = _cli(tmp_path, "next", "--dry-run", "--gpu", "h100", "--minutes", "5", "--out", str(tmp_path / "o"),
                    unit_s=0.0, fault="smoke")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "smoke test failed" in done.stderr
    assert not (tmp_path / "data" / "dryrun").exists()


def test_a_part_that_fails_ends_that_part_and_the_call_still_packs(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _tree(tmp_path)
    executor = SimulatedExecutor("h100", unit_s=0.0)
    real = executor.sweep

    def sweep(plan: str, out: Path, limit: int, deadline: float):  # type: ignore[no-untyped-def]
        if plan.endswith("realworld-solo.txt"):
            raise GpupredError(f"{out}: sweep was started with window_s=9.0; resume with the same settings")
        return real(plan, out, limit, deadline)

    monkeypatch.setattr(executor, "sweep", sweep)
    out = run_next(executor, "h100", layout, 60.0, tmp_path / "out", est=EST)
    text = "\n".join(out.lines)
    assert "stage 5 realworld: ran 0 units (none) in" in text and "stopped: GpupredError:" in text
    assert "stage 8 fused: ran 2 units (ok 2)" in text and out.tarball is not None


def test_the_repositorys_own_plans_load_into_the_queue() -> None:
    lines, planned = queue_report("h200", Layout.default(), 8.0)
    assert len(lines) == 10 and all(f"stage {i} " in lines[i] for i in range(1, 9))
    assert "skipped: H100 only" in lines[7] and "its plan does not load" not in "\n".join(lines)
    # the calibration first unless data/calibrations has one, then the first stage with units left, in stage order
    # (stage 2: its launch-blocking units, where the pipeline-fed ones are measured)
    stages_planned = [w.stage for w in planned]
    assert stages_planned and stages_planned[0] in (1, 2, 3, 4) and stages_planned == sorted(stages_planned)


def test_cli_without_a_gpu_says_so_in_one_line(tmp_path: Path) -> None:
    from gpupred.profile.nvml import probe

    if probe() is None:
        pytest.skip("this machine has a GPU")
    for args in (("next", "--minutes", "8", "--out", str(tmp_path / "o")), ("plan",)):
        cmd, env = _cli(tmp_path, *args, unit_s=0.0)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_stage_2_plans_the_repositorys_input_pipeline_units_in_a_dry_run(tmp_path: Path) -> None:
    from gpupred.setups import pipeline_from_json

    layout = _tree(tmp_path)
    repo_plan = Path(__file__).resolve().parent.parent / "plans" / "input-pipelines.txt"
    (layout.plans / "input-pipelines.txt").write_text(repo_plan.read_text())
    executor = SimulatedExecutor("h100", unit_s=0.0)
    out = run_next(executor, "h100", layout, 60.0, tmp_path / "out", est=EST)
    kinds = [(k, Path(p).name) for k, p, _ in executor.calls]
    bench = f"host-profile-{platform.node()}.json"
    assert kinds[1:3] == [("loader-bench", bench), ("sweep", "input-pipelines.txt")]  # after the calibration
    assert "stage 2 pipelines: ran 13 units (ok 13)" in out.lines[2]
    folder = layout.raw / "h100" / "2026-12-pipelines"
    assert json.loads((folder / bench).read_text())["simulated"] is True
    runs = read_runs(folder)
    assert len(runs) == 12 and all(runs["simulated"])
    pipes = [pipeline_from_json(p) for p in runs.sort_values("group_id")["pipeline"]]
    assert {p.kind for p in pipes} == {"image-files", "text-tokens", "audio-logmel"}
    image = sorted(p.num_workers for p, w in zip(pipes, sorted(runs["workload_id"])) if w.startswith("resnet."))
    assert image == [0, 2, 4, 8, 8, 16] and all("~pipe-" in g for g in runs["group_id"])
    again = run_next(executor, "h100", layout, 60.0, tmp_path / "out2", est=EST)
    assert again.lines[2] == "stage 2 pipelines: done (13/13)"
    # the launch-blocking plan, where it exists, is stage 2's last part, run into the catalog sweep's folder
    repo_plan = repo_plan.parent / "launch-blocking.txt"
    (layout.plans / "launch-blocking.txt").write_text(repo_plan.read_text())
    third = run_next(executor, "h100", layout, 60.0, tmp_path / "out3", est=EST)
    assert "stage 2 pipelines: ran 32 units (ok 32)" in third.lines[2]
    catalog = read_runs(layout.raw / "h100" / "2026-11-catalog")
    kernel = catalog[catalog["sync"] == "kernel"]
    assert len(kernel) == 16 and all(kernel["group_id"].str.endswith("~sync-kernel"))
    assert set(kernel["workload_id"]) <= set(catalog.loc[catalog["sync"] == "step", "workload_id"])


def test_stage_2_fits_one_8_minute_call_once_the_gpu_kind_is_calibrated(tmp_path: Path) -> None:
    layout = _tree(tmp_path)
    repo_plan = Path(__file__).resolve().parent.parent / "plans" / "input-pipelines.txt"
    (layout.plans / "input-pipelines.txt").write_text(repo_plan.read_text())
    layout.calibrations.mkdir(parents=True)
    (layout.calibrations / "h100-fixture.json").write_text(json.dumps({"gpu": {"name": "NVIDIA H100 80GB HBM3"}}))
    # the H100's recorded per-unit wall (16.6 s), the harness's hard timeout as a sweep's reserve (190 s)
    est = Estimates(sweep_s=16.6, basis="fixture", calibrate_s=120.0, reserve_s=190.0)
    queue = build_queue("h100", layout, est)
    assert queue[0].todo == [] and len(queue[1].todo) == 13
    smoke_s = 2 * est.sweep_s + est.start_s
    planned = plan_next(queue, 60 * (8.0 - stages.MARGIN_MINUTES) - smoke_s, est)
    assert [w.stage for w in planned[:13]] == [2] * 13  # the bench and all 12 units
    assert planned_seconds([w for w in planned if w.stage == 2], est) < 5 * 60


def test_stage_3_runs_the_repositorys_fine_tune_units_in_a_dry_run(tmp_path: Path) -> None:
    from gpupred.setups import setup_from_json

    if stages.finetune_missing():
        pytest.skip(stages.finetune_missing())
    layout = _tree(tmp_path)
    repo_plan = Path(__file__).resolve().parent.parent / "plans" / "finetune.txt"
    (layout.plans / "finetune.txt").write_text(repo_plan.read_text())
    executor = SimulatedExecutor("h100", unit_s=0.0)
    out = run_next(executor, "h100", layout, 60.0, tmp_path / "out", est=EST)
    assert [(k, Path(p).name) for k, p, _ in executor.calls][1] == ("sweep", "finetune.txt")  # after the calibration
    assert "stage 3 finetune: ran 20 units (ok 20)" in out.lines[3]
    runs = read_runs(layout.raw / "h100" / "2026-12-finetune")
    assert len(runs) == 20 and all(runs["simulated"]) and all("~ft-" in g for g in runs["group_id"])
    setups = [setup_from_json(s) for s in runs["setup"]]
    assert all(s is not None and s.precision == "bf16" and s.attention == "sdpa" for s in setups)
    recipes = {s.recipe for s in setups}
    assert recipes == {"full", "lora", "qlora"}


def test_a_sweep_folders_own_record_times_its_units_and_lends_it_to_another_gpu_kind(tmp_path: Path) -> None:
    """FIXTURE manifests: the H100's fine-tune folder ran 2 units in 80 s, its catalog folder 10 in 150 s. Its
    fine-tune units are planned at 40 s each, not at the GPU's pooled 19.2 s; an H200 without a fine-tune folder of
    its own borrows the 40 s; a folder without a record takes the pooled figure."""
    from gpupred.campaign.planner import estimates

    layout = _tree(tmp_path)
    for sweep, seconds, units in (("2026-12-finetune", 80, 2), ("2026-11-catalog", 150, 10)):
        folder = layout.raw / "h100" / sweep
        folder.mkdir(parents=True)
        ended = f"2026-11-29T10:0{seconds // 60}:{seconds % 60:02d}+00:00"
        session = {"started": "2026-11-29T10:00:00+00:00", "ended": ended, "units_run": units}
        (folder / "manifest.json").write_text(json.dumps({"sessions": [session], "note": "FIXTURE"}))
    est = estimates("h100", layout)
    finetune = stages.Part("sweep", "plans/finetune.txt", layout.raw / "h100" / "2026-12-finetune")
    assert est.sweep_s == pytest.approx(230 / 12)
    assert est.unit_s(finetune) == pytest.approx(40.0)
    assert est.unit_s(stages.Part("sweep", "plans/x.txt", layout.raw / "h100" / "2026-12-pipelines")) == est.sweep_s
    other = estimates("h200", layout)
    assert other.unit_s(stages.Part("sweep", "plans/finetune.txt", layout.raw / "h200" / "2026-12-finetune")) == 40.0
    assert other.unit_s(stages.Part("traces", "plans/traces.txt", layout.raw / "h200" / "t")) == other.trace_s
