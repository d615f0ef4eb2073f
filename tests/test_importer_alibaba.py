"""The Alibaba openb importer on FIXTURE files (made up here, in the upstream format; not rows of the trace)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fixtures_external import repin, write_local_copy
from gpupred import config, importers
from gpupred.errors import GpupredError
from gpupred.importers import alibaba
from gpupred.importers.source import import_source
from gpupred.errors import MissingInput

# FIXTURE: a made-up pod list and node list in the upstream column layout.
FIXTURE_PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
fixture-pod-0,8000,16384,1,1000,,LS,Succeeded,0,500,10
fixture-pod-1,4000,8192,1,300,,BE,Failed,100,400,120
fixture-pod-2,4000,8192,0,0,,BE,Succeeded,150,300,150
fixture-pod-3,32000,65536,4,1000,,LS,Running,200,1000,210
fixture-pod-4,4000,8192,1,500,,LS,Pending,300,1000,
"""
FIXTURE_NODES = """sn,cpu_milli,memory_mib,gpu,model
fixture-node-0,64000,262144,2,P100
fixture-node-1,96000,393216,4,V100M32
fixture-node-2,96000,393216,8,G2
fixture-node-3,96000,393216,4,T4
"""
FILES = {alibaba.POD_FILE: FIXTURE_PODS, alibaba.NODE_FILE: FIXTURE_NODES}


@pytest.fixture
def imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "EXTERNAL", tmp_path / "external")
    monkeypatch.setattr(config, "EXTERNAL_LOCAL", None)
    src = repin(alibaba.SOURCE, FILES)
    monkeypatch.setattr(alibaba, "SOURCE", src)
    import_source(src, from_dir=write_local_copy(tmp_path / "copy", src, FILES))


def test_refuses_before_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "EXTERNAL", tmp_path / "external")
    with pytest.raises(MissingInput, match="gpupred import alibaba-openb"):
        alibaba.read_tasks()


def test_tasks_and_nodes_follow_the_contract(imported: None) -> None:
    tasks, nodes = alibaba.read_tasks(), alibaba.read_nodes()
    assert tuple(tasks.columns) == alibaba.TASK_COLUMNS and tuple(nodes.columns) == alibaba.NODE_COLUMNS
    t = tasks.set_index("task_id")
    assert t.loc["fixture-pod-0", "duration_s"] == 490 and t.loc["fixture-pod-1", "gpu_share"] == pytest.approx(0.3)
    assert t.loc["fixture-pod-3", "gpu_share"] == 1.0 and t.loc["fixture-pod-3", "censored"]
    assert np.isnan(t.loc["fixture-pod-4", "duration_s"]) and t.loc["fixture-pod-2", "gpu_share"] == 0.0
    n = nodes.set_index("node_id")
    assert n.loc["fixture-node-0", "gpu_memory_mib"] == 16384 and n.loc["fixture-node-0", "memory_source"] == "gpupred.hardware"
    assert n.loc["fixture-node-1", "gpu_memory_mib"] == 32768 and n.loc["fixture-node-3", "memory_source"] == "gpupred.hardware"
    assert n.loc["fixture-node-2", "memory_source"] == "assumed"
    counts = alibaba.import_counts(tasks, nodes)
    assert counts == {"tasks": 5, "tasks_gpu": 4, "tasks_cpu_only": 1, "tasks_multi_gpu": 1, "tasks_fractional": 2,
                      "tasks_never_scheduled": 1, "tasks_censored": 1, "nodes": 4, "gpus": 18, "gpus_assumed_memory": 8}


def test_trace_is_not_a_measurement_source() -> None:
    assert "alibaba-openb" not in importers.SOURCES and importers.get_source("alibaba-openb").repo == "alibaba/clusterdata"
    with pytest.raises(GpupredError, match="scheduling trace"):
        importers.module("alibaba-openb")


def test_bad_files_named() -> None:
    import pandas as pd

    with pytest.raises(GpupredError, match="pods.csv: missing columns"):
        alibaba.tasks_from_frame(pd.DataFrame({"name": ["x"]}), "pods.csv")
    bad = pd.read_csv(__import__("io").StringIO(FIXTURE_PODS)).assign(creation_time="soon")
    with pytest.raises(GpupredError, match="'creation_time' row 2"):
        alibaba.tasks_from_frame(bad, "pods.csv")
