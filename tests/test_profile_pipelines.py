"""Input-pipeline units on the CPU (issue 75 stage 2, issue 77 item 6): plan lines with a pipeline, the harness child fed
by a real torch DataLoader over synthetic files, the run row's ``pipeline`` column, and old rows without it. Every run
here is on the CPU with the fake NVML backend (simulated, never data); the files are written into a temporary cache."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpupred import config
from gpupred.errors import GpupredError
from gpupred.profile.fake import FakeBackend
from gpupred.profile.harness import run_unit
from gpupred.profile.schema import RUN_SCHEMA, read_runs
from gpupred.profile.units import load_plan, parse_group_id, parse_plan_text
from gpupred.setups import RESIDENT, pipeline_from_json, pipeline_json, pipeline_of

from profile_faults import TINY, tiny_config

RESNET = "resnet.resnet50-bs128-img224-bf16-adam"
BERT = "bert.bert-v30522-m768-h12-l12-bs16-seq512-bf16-sgd"
SMALL_CNN = "resnet.resnet18-bs4-img32-fp32-sgd"  # a small catalog-grammar image workload for CPU runs


def test_a_plan_line_with_a_pipeline_round_trips() -> None:
    text = (f"{RESNET} pipeline=image-files workers=8 pin=1\n"
            f"{RESNET} pipeline=image-files workers=8 pin=1 transforms=v2 image=640x480 sync=window repeat=2\n"
            f"{BERT} pipeline=text-tokens workers=2 prefetch=4\n"
            f"{RESNET}\n{TINY} sync=window\n")
    a, b, c, plain, tiny = parse_plan_text(text)
    assert a.group_id == f"{RESNET}~pipe-image-files-w8-pin1"
    assert a.pipeline == pipeline_of("image-files", num_workers=8, pin_memory=True)
    assert b.group_id == f"{RESNET}~pipe-image-files-w8-pin1-v2-640x480~sync-window~rep-2"
    assert parse_group_id(b.group_id) == (f"{RESNET}~pipe-image-files-w8-pin1-v2-640x480", "window", 2)
    assert (b.pipeline.image_width, b.pipeline.image_height, b.pipeline.transforms) == (640, 480, "v2")
    assert c.group_id == f"{BERT}~pipe-text-tokens-w2-pin0-pf4" and c.pipeline.prefetch_factor == 4
    for unit in (a, b, c):  # the row's JSON reads back to the plan line's pipeline
        assert pipeline_from_json(pipeline_json(unit.pipeline)) == unit.pipeline
    # lines without a pipeline are what they always were: same ids, resident, '' in the row
    assert (plain.group_id, plain.pipeline, pipeline_json(plain.pipeline)) == (RESNET, RESIDENT, "")
    assert tiny.group_id == f"{TINY}~sync-window" and pipeline_from_json("") == RESIDENT
    assert len({u.group_id for u in (a, b, c, plain)}) == 4


@pytest.mark.parametrize("line,text", [
    (f"{RESNET} workers=8", "add pipeline=KIND"),
    (f"{RESNET} pipeline=text-tokens", "does not take"),
    (f"{BERT} pipeline=audio-logmel", "does not take"),
    (f"{RESNET} pipeline=image-files pin=yes", "malformed"),
    (f"{RESNET} pipeline=image-files prefetch=2", "prefetch_factor goes with workers"),
    (f"{RESNET} pipeline=measured", "measured pipeline"),
    (f"{RESNET} pipeline=image-files workers=2 workers=4", "given twice"),
    (f"{RESNET} pipeline=floppy", "unknown input pipeline"),
])
def test_bad_pipeline_options_are_one_line(line: str, text: str) -> None:
    with pytest.raises(GpupredError, match=text) as err:
        parse_plan_text(line, "plan.txt")
    assert "\n" not in str(err.value) and str(err.value).startswith("plan.txt:1:")


def test_the_repositorys_input_pipeline_plan_loads() -> None:
    units = load_plan(str(config.ROOT / "plans" / "input-pipelines.txt"))
    kinds = [u.pipeline.kind for u in units]
    assert len(units) == 12 and kinds.count("image-files") == 9 and {"text-tokens", "audio-logmel"} <= set(kinds)
    workers = sorted(u.pipeline.num_workers for u in units if u.workload_ids[0] == RESNET and u.pipeline.transforms == "v1")
    assert workers == [0, 2, 4, 8, 16]
    assert sum(u.pipeline.transforms == "v2" for u in units) == 1


def test_a_cpu_unit_trains_on_a_real_two_worker_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "LOADER_CACHE", tmp_path / "cache")
    (unit,) = parse_plan_text(f"{SMALL_CNN} pipeline=image-files workers=2 image=64x48")
    r = run_unit(unit.specs, FakeBackend(), tiny_config(), unit.group_id, sweep_id="fixture",
                 pipeline=pipeline_json(unit.pipeline))
    assert r.runs.schema == RUN_SCHEMA
    row = r.runs.to_pylist()[0]
    assert row["status"] == "ok", row["message"]
    assert row["group_id"] == f"{SMALL_CNN}~pipe-image-files-w2-pin0-64x48" and row["simulated"]
    assert row["n_iters"] >= 3 and math.isfinite(row["iter_time_mean_s"]) and not row["host_batches"]
    recorded = pipeline_from_json(row["pipeline"])
    assert (recorded.kind, recorded.num_workers, recorded.image_width) == ("image-files", 2, 64)
    assert recorded.host_cores is not None and recorded.host_cores >= 1  # the cores the child could run on
    (folder,) = (tmp_path / "cache").iterdir()  # the synthetic JPEGs, written once into the cache
    assert len(list(folder.glob("img_*.jpg"))) == 16 and r.timings[0]["files_s"] > 0


@pytest.mark.slow
def test_a_loader_whose_samples_do_not_fit_the_workload_fails_the_unit_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "LOADER_CACHE", tmp_path / "cache")
    (unit,) = parse_plan_text("resnet.resnet18-bs4-img64-fp32-sgd pipeline=host-tensors")
    r = run_unit(unit.specs, FakeBackend(), tiny_config(), sweep_id="fixture", pipeline=pipeline_json(unit.pipeline))
    row = r.runs.to_pylist()[0]
    assert row["status"] == "error" and "host-tensors yields 32x32" in row["message"]  # CIFAR's tensors: not 64x64
    assert not (tmp_path / "cache").exists()  # refused before writing any file


def test_rows_written_before_the_pipeline_column_read_as_resident(tmp_path: Path) -> None:
    sweep = tmp_path / "h100" / "old-sweep"
    (sweep / "runs").mkdir(parents=True)
    row = {n: None for n in RUN_SCHEMA.names}
    row.update(run_id="u", group_id="u", group_size=1, member=0, workload_id=TINY, status="ok", sync="step",
               schema_version=3, iter_times_s=[])
    old_schema = pa.schema([f for f in RUN_SCHEMA if f.name != "pipeline"])  # a schema-3 file (fixture)
    old = pa.Table.from_pylist([{k: v for k, v in row.items() if k != "pipeline"}], schema=old_schema)
    pq.write_table(old, sweep / "runs" / "u.parquet")
    runs = read_runs(tmp_path)
    assert "pipeline" in runs.columns and pipeline_from_json(runs["pipeline"].iloc[0]) == RESIDENT
    assert json.loads(json.dumps(runs["group_id"].tolist())) == ["u"]


def test_text_tokens_feed_a_catalog_bert_step_in_process(tmp_path: Path) -> None:
    from gpupred.profile.feed import loader_feed
    from gpupred.workloads.builders import build
    from gpupred.workloads.spec import WorkloadSpec

    spec = WorkloadSpec.from_id("bert.bert-v8192-m64-h4-l1-bs4-seq32-fp32-sgd")
    built = build(spec, "cpu")
    result: dict[str, object] = {}
    feed = loader_feed(built, pipeline_of("text-tokens"), "cpu", tmp_path, result)
    step = built.make_train_step("cpu", batches=feed)
    losses = [float(step()) for _ in range(3)]
    assert all(math.isfinite(x) for x in losses) and result["files_s"] > 0
    (tokens, targets) = feed()  # the loader's padded ids (below the vocabulary) and the workload's masked-LM targets
    assert tokens.shape == (4, 32) and int(tokens.max()) < 8192 and bool((tokens == 0).any())  # padded to seq 32
    assert targets.shape == (4, 32)
