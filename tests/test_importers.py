"""Importers on FIXTURE files: loopback download, sha256 refusal, unreachable host fallback, table contracts.

Nothing here reads the published data: the files are made up in the test (tests/fixtures_external.py) and
served by a local http.server on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fixtures_external import (
    FIXTURE_GPUMEMNET, FIXTURE_LICENSE, FIXTURE_LUCID_PAIRS, FIXTURE_LUCID_SOLO, fixture_source, repin, serve, write_local_copy,
    write_tree,
)
from gpupred import config, importers
from gpupred.errors import GpupredError
from gpupred.importers import gpumemnet, lucid
from gpupred.importers.source import import_source, is_imported, read_provenance, verified_path
from gpupred.errors import MissingInput

FILES = {"a.csv": "x,y\n1,2\n", "b.txt": "FIXTURE\n"}
LUCID_FILES = {"single_data.csv": FIXTURE_LUCID_SOLO, "colocate_info.csv": FIXTURE_LUCID_PAIRS, "LICENSE.txt": FIXTURE_LICENSE}


@pytest.fixture(autouse=True)
def external(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Imports land in a temporary data/external; no local copy is configured unless a test says so."""
    folder = tmp_path / "external"
    monkeypatch.setattr(config, "EXTERNAL", folder)
    monkeypatch.setattr(config, "EXTERNAL_LOCAL", None)
    return folder


@pytest.fixture
def server(tmp_path: Path):
    yield from serve(tmp_path / "www")


def test_download_from_loopback_server(tmp_path: Path, server: str, external: Path) -> None:
    src = fixture_source("fix", FILES)
    write_tree(tmp_path / "www", src, FILES)
    folder = import_source(src, base_url=server, timeout=2)
    assert folder == external / "fix"
    assert (folder / "a.csv").read_text() == FILES["a.csv"]
    record = json.loads((folder / "provenance.json").read_text())
    assert record["commit"] == src.commit and record["upstream_repo"] == src.repo and record["licence"] == "FIXTURE licence"
    assert [f["obtained_from"] for f in record["files"]] == [f"{server}/{src.repo}/{src.commit}/data/{n}" for n in FILES]
    assert {f["sha256"] for f in record["files"]} == {f.sha256 for f in src.files}
    assert record["imported_at"].endswith("Z") and is_imported(src)


def test_corrupted_download_is_refused_and_nothing_is_written(tmp_path: Path, server: str, external: Path) -> None:
    src = fixture_source("fix", FILES)
    write_tree(tmp_path / "www", src, {**FILES, "b.txt": "FIXTURE, tampered\n"})
    with pytest.raises(GpupredError) as err:
        import_source(src, base_url=server, timeout=2)
    message = str(err.value)
    assert "sha256" in message and "refusing" in message and "\n" not in message
    assert not (external / "fix").exists()  # not even the first, good file: all or nothing
    assert not is_imported(src)


def test_corrupted_file_does_not_replace_a_good_import(tmp_path: Path, server: str, external: Path) -> None:
    src = fixture_source("fix", FILES)
    write_local_copy(tmp_path / "copy", src, FILES)
    import_source(src, from_dir=tmp_path / "copy")
    before = {p.name: p.read_bytes() for p in (external / "fix").iterdir()}
    write_tree(tmp_path / "www", src, {**FILES, "a.csv": "x,y\n9,9\n"})
    with pytest.raises(GpupredError, match="sha256"):
        import_source(src, base_url=server, timeout=2)
    assert {p.name: p.read_bytes() for p in (external / "fix").iterdir()} == before
    assert not [p for p in (external / "fix").iterdir() if p.name.endswith(".tmp")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_host_falls_back_to_the_local_copy(tmp_path: Path, external: Path, capsys) -> None:
    src = fixture_source("fix", FILES)
    local = write_local_copy(tmp_path / "copy", src, FILES)
    import_source(src, base_url=f"http://127.0.0.1:{_closed_port()}", timeout=2, local=local)
    assert "download failed" in capsys.readouterr().out
    assert all(f["obtained_from"].startswith("local copy") for f in read_provenance(src)["files"])


def test_unreachable_host_without_local_copy_says_what_to_do(external: Path) -> None:
    src = fixture_source("fix", FILES)
    with pytest.raises(GpupredError) as err:
        import_source(src, base_url=f"http://127.0.0.1:{_closed_port()}", timeout=2)
    assert "cannot download" in str(err.value) and "--from DIR" in str(err.value) and "\n" not in str(err.value)
    assert not (external / "fix").exists()


def test_silent_host_times_out_fast(tmp_path: Path) -> None:
    """A host that accepts the connection but never answers fails within the timeout, then falls back."""
    src = fixture_source("fix", FILES)
    local = write_local_copy(tmp_path / "copy", src, FILES)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        start = time.perf_counter()
        import_source(src, base_url=f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.5, local=local)
        assert time.perf_counter() - start < 5
    assert is_imported(src)


def test_from_dir_layouts_and_errors(tmp_path: Path) -> None:
    src = fixture_source("fix", FILES)
    flat = tmp_path / "flat"
    flat.mkdir()
    for name, text in FILES.items():
        (flat / name).write_text(text)
    import_source(src, from_dir=flat)
    assert "local copy" in read_provenance(src)["files"][0]["obtained_from"]
    (flat / "b.txt").write_text("not it\n")
    with pytest.raises(GpupredError, match="sha256"):
        import_source(src, from_dir=flat)
    (flat / "b.txt").unlink()
    with pytest.raises(GpupredError, match="no fix/b.txt"):
        import_source(src, from_dir=flat)
    with pytest.raises(GpupredError, match="no such folder"):
        import_source(src, from_dir=tmp_path / "absent")


def test_readers_recheck_and_refuse_what_was_never_imported(tmp_path: Path, external: Path) -> None:
    src = fixture_source("fix", FILES)
    with pytest.raises(MissingInput, match="gpupred import fix"):
        verified_path(src, "a.csv")
    import_source(src, from_dir=write_local_copy(tmp_path / "copy", src, FILES))
    assert verified_path(src, "a.csv").read_text() == FILES["a.csv"]
    (external / "fix" / "a.csv").write_text("edited\n")
    with pytest.raises(GpupredError, match="sha256"):
        verified_path(src, "a.csv")


def test_lucid_tables_follow_the_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingInput, match="gpupred import lucid"):
        lucid.read_solo()
    src = repin(lucid.SOURCE, LUCID_FILES)
    monkeypatch.setattr(lucid, "SOURCE", src)
    import_source(src, from_dir=write_local_copy(tmp_path / "copy", src, LUCID_FILES))
    solo = lucid.read_solo()
    assert tuple(solo.columns) == lucid.SOLO_COLUMNS and len(solo) == 4
    by = solo.set_index("job_key")
    assert by.loc["ResNet18/CIFAR-10/bs32/amp0", "workload_id"] == "resnet.resnet18_cifar-bs32-img32-fp32-sgd"
    assert by.loc["ResNet18/CIFAR-10/bs64/amp1", "workload_id"] == "resnet.resnet18_cifar-bs64-img32-fp16-sgd"
    assert by.loc["BERT/SQuAD/bs32/amp1", "workload_id"] == "bert.bert_qa-v30522-m768-h12-l12-bs32-seq384-fp16-adam"
    assert by.loc["PPO/LunarLander/bs32/amp0", "workload_id"] is None
    assert (solo["gpu_name"] == "NVIDIA GeForce RTX 3090").all() and by.loc["BERT/SQuAD/bs32/amp1", "memory_mib"] == 15000.0
    pairs = lucid.read_pairs()
    assert tuple(pairs.columns) == lucid.PAIR_COLUMNS and len(pairs) == 4
    assert pairs.groupby("pair_id")["member"].apply(list).to_dict() == {0: [0, 1], 7: [0, 1]}
    first = pairs.set_index(["pair_id", "member"])
    assert first.loc[(0, 0), "slowdown"] == pytest.approx(2.0) and first.loc[(0, 1), "speed_norm"] == 0.8
    assert pd.isna(first.loc[(7, 1), "slowdown"])  # speed_norm 0: no slowdown rather than infinity
    assert first.loc[(7, 0), "workload_id"] is None and first.loc[(0, 1), "pair_memory_mib"] == 17000.0
    runs, excluded = lucid.dataset_rows()
    assert len(runs) == 3 and set(runs["sync"]) == {"kernel"} and set(runs["sampler"]) == {"nvidia-smi-0.2s"}
    assert excluded["run_id"].tolist() == ["lucid:PPO/LunarLander/bs32/amp0"] and "reinforcement" in excluded["reason"][0]


def test_every_lucid_job_is_rebuilt_or_explained() -> None:
    table = lucid.job_table()
    assert {"ResNet18", "VGG", "MobileNetV2", "EfficientNet", "ResNet50", "MobileNetV3", "BERT", "LSTM", "Transformer",
            "DCGAN", "NeuMF", "PointNet"} <= set(table.loc[table["rebuilt_as"].notna(), "model"])
    assert set(table.loc[table["rebuilt_as"].isna(), "model"]) == {"PPO", "TD3"}
    assert table["approximations"].str.len().min() > 20
    assert lucid.workload_spec("TD3", "BipedalWalker", 32, 0) is None
    assert lucid.workload_spec("VGG", "CIFAR-10", 128, 1).id == "vgg.vgg11_cifar-bs128-img32-fp16-sgd"


def test_gpumemnet_rows_rebuild_exactly_or_are_excluded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"mlp_data_step1.csv": FIXTURE_GPUMEMNET}
    src = repin(gpumemnet.SOURCE, files)
    monkeypatch.setattr(gpumemnet, "SOURCE", src)
    import_source(src, from_dir=write_local_copy(tmp_path / "copy", src, files))
    runs = gpumemnet.read_runs()
    assert runs["workload_id"].tolist() == ["fcnet.fc_pyramid-o2-d2-bs16-in8-fp32-adam", None, None]
    assert "width rule" in runs["excluded_reason"][1] and "Tanh" in runs["excluded_reason"][2]
    assert runs["sm_active"][0] == pytest.approx(20.0) and runs["gpu_util"][0] == 30.0
    rows, excluded = gpumemnet.dataset_rows()
    assert len(rows) == 1 and len(excluded) == 2
    assert rows.loc[0, "sampler"] == "dcgm-1s-nonzero" and rows.loc[0, "sync"] == "step" and rows.loc[0, "memory_mib"] == 1500


def test_gpumemnet_file_names_parse() -> None:
    spec = gpumemnet.spec_from_filename("input:1259_output:79_depth:8_arch:pyramid_batch:717.out")
    assert spec.id == "fcnet.fc_pyramid-o79-d8-bs717-in1259-fp32-adam"
    with pytest.raises(GpupredError, match="file name"):
        gpumemnet.spec_from_filename("input:12_output:3.out")


@pytest.mark.parametrize("wid", [
    "fcnet.fc_pyramid-o79-d8-bs717-in1259-fp32-adam", "fcnet.fc_uniform-o95-d3-bs270-in350-fp32-adam",
    "fcnet.fc_gradual-o1-d3-bs64-in20-fp32-adam", "fcnet.fc_bottleneck-o12-d5-bs777-in61-fp32-adam",
])
def test_helper_built_graph_featurizes_like_the_torch_export(wid: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from gpupred.graph.features import featurize
    from gpupred.graph.export import export_module
    from gpupred.graph.graphstore import fcnet_onnx
    from gpupred.workloads.builders import build
    from gpupred.workloads.spec import WorkloadSpec

    spec = WorkloadSpec.from_id(wid)
    built = build(spec)
    exported = export_module(built.export_model, built.export_inputs, tmp_path / "x.onnx", built.input_names, built.batch_axes)
    for precision in ("fp32", "fp16"):
        ours = featurize(fcnet_onnx(spec), batch_size=spec.batch_size, precision=precision, optimizer="adam")
        theirs = featurize(exported, batch_size=spec.batch_size, precision=precision, optimizer="adam")
        assert ours == theirs
    assert ours["params"] == sum(p.numel() for p in built.model.parameters())


def test_import_cli(tmp_path: Path) -> None:
    """`gpupred import` through the real entry point: unknown source and a bad --from exit 2 on one line."""
    env_code = "import sys; from gpupred.cli import main; main(sys.argv[1:])"
    bad = subprocess.run([sys.executable, "-c", env_code, "import", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown source" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    missing = subprocess.run([sys.executable, "-c", env_code, "import", "lucid", "--from", str(tmp_path)],
                             capture_output=True, text=True, env={**__import__("os").environ, "GPUPRED_ROOT": str(tmp_path)})
    assert missing.returncode == 2 and "single_data.csv" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and not (tmp_path / "data" / "external" / "lucid").exists()
    assert importers.get_source("gpumemnet").repo == "itu-rad/GPUMemNet"


def test_every_rebuilt_lucid_job_is_in_the_graph_store() -> None:
    """The notebook pipeline featurizes Lucid's jobs without torch: every rebuilt architecture is in data/graphs."""
    from gpupred.graph.export import stored_graph

    for job in lucid.JOBS.values():
        for bs, amp in ((32, 0), (128, 1)):
            assert stored_graph(job.spec(bs, amp)) is not None, job.model
