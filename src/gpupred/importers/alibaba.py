"""The Alibaba GPU-sharing cluster trace (openb; Weng et al., USENIX ATC 2023): tasks and GPU nodes.

Upstream ``alibaba/clusterdata`` at a pinned commit, ``cluster-trace-gpu-v2023/csv/``:
``openb_pod_list_default.csv`` (8,152 tasks: CPU and memory requests, ``num_gpu`` 0-8, ``gpu_milli``
-- the thousandths of one GPU a sharing task asked for --, ``gpu_spec`` (a GPU-type constraint, empty
in this file), ``qos``, ``pod_phase``, creation / scheduled / deletion times in seconds) and
``openb_node_list_gpu_node.csv`` (the GPU nodes: ``sn``, CPU, memory, GPU count and ``model``).

It is a *scheduling* trace, not measurements: it has no model names, so the simulator assigns a measured
workload to each task (:mod:`gpupred.sim.openb`). It never enters the learning dataset (it is not in
:data:`gpupred.importers.SOURCES`). Licence: none stated for this folder; research evaluation only, cite
the paper, never commit the files or rows of them.

Times: ``arrival_s`` is ``creation_time``; a task that was scheduled ran from ``scheduled_time`` to
``deletion_time`` (``duration_s``). Tasks still ``Running`` at the end of the trace have a censored
duration (``censored``); ``Pending`` tasks were never scheduled and have no duration (NaN).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.importers.source import Source, UpstreamFile, read_csv

SOURCE = Source(
    name="alibaba-openb",
    repo="alibaba/clusterdata",
    commit="7a6c496e4f4b6ce6150be8f881cb051bf2abff42",
    files=(
        UpstreamFile("openb_pod_list_default.csv", "cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv",
                     "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8"),
        UpstreamFile("openb_node_list_gpu_node.csv", "cluster-trace-gpu-v2023/csv/openb_node_list_gpu_node.csv",
                     "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5"),
    ),
    licence="no licence stated upstream for this folder: research evaluation only, cite the paper, do not redistribute",
    gpu_name="heterogeneous (P100, T4, V100, A10, undisclosed G1-G3)",
    measured="a production cluster's scheduler records (task requests and lifetimes), not GPU measurements",
    citation="Weng, Yang, Lin, Tan, Tang, Zheng, Zhou, Zhai, Zhang. Beware of Fragmentation: Scheduling GPU-Sharing "
             "Workloads with Fragmentation Gradient Descent. USENIX ATC 2023",
)
POD_FILE, NODE_FILE = "openb_pod_list_default.csv", "openb_node_list_gpu_node.csv"
POD_CSV: tuple[str, ...] = ("name", "num_gpu", "gpu_milli", "pod_phase", "creation_time", "deletion_time",
                            "scheduled_time")
NODE_CSV: tuple[str, ...] = ("sn", "gpu", "model")
TASK_COLUMNS: tuple[str, ...] = (
    "task_id", "arrival_s", "start_s", "duration_s", "num_gpu", "gpu_share", "phase", "censored", "cpu_milli", "qos",
)
NODE_COLUMNS: tuple[str, ...] = ("node_id", "model", "gpus", "gpu_memory_mib", "memory_source")

# GPU memory of the trace's node models. Where gpupred.hardware knows the model its vendor size is used;
# G1-G3 are undisclosed models, given the size of the GPU the co-location truth was measured on (RTX 3090,
# 24 GB) and marked "assumed".
UNKNOWN_MEMORY_GB = 24.0
# The trace's model names as gpupred.hardware names them (V100M16/M32: V100 with 16/32 GB).
HARDWARE_NAMES: dict[str, str] = {"V100M16": "V100 16GB", "V100M32": "V100 32GB", "T4": "T4", "A10": "A10",
                                  "P100": "P100"}


def tasks_from_frame(pods: pd.DataFrame, origin: str = POD_FILE) -> pd.DataFrame:
    """The task table (:data:`TASK_COLUMNS`) of a pod list in the upstream format."""
    missing = [c for c in POD_CSV if c not in pods.columns]
    if missing:
        raise GpupredError(f"{origin}: missing columns {missing}; not an openb pod list")
    num = pods[["num_gpu", "gpu_milli", "creation_time", "deletion_time"]].apply(pd.to_numeric, errors="coerce")
    if num.isna().any().any():
        bad = num.columns[num.isna().any()][0]
        raise GpupredError(f"{origin}: column {bad!r} row {int(np.flatnonzero(num[bad].isna())[0]) + 2} is not a number")
    start = pd.to_numeric(pods["scheduled_time"], errors="coerce")
    phase = pods["pod_phase"].astype(str)
    end = num["deletion_time"].to_numpy(float)
    share = np.where(num["num_gpu"].to_numpy() == 1, num["gpu_milli"].to_numpy(float) / 1000.0,
                     np.where(num["num_gpu"].to_numpy() > 1, 1.0, 0.0))
    return pd.DataFrame({
        "task_id": pods["name"].astype(str).to_numpy(), "arrival_s": num["creation_time"].to_numpy(float),
        "start_s": start.to_numpy(float), "duration_s": end - start.to_numpy(float),
        "num_gpu": num["num_gpu"].to_numpy(np.int64), "gpu_share": share, "phase": phase.to_numpy(),
        "censored": (phase == "Running").to_numpy() & (end >= end.max()),
        "cpu_milli": pods["cpu_milli"].to_numpy(float) if "cpu_milli" in pods else np.nan,
        "qos": pods["qos"].astype(str).to_numpy() if "qos" in pods else "",
    })[list(TASK_COLUMNS)]


def node_memory_gb(model: str) -> tuple[float, str]:
    """GPU memory (GB) of a trace node model and where the figure comes from (gpupred.hardware, or assumed)."""
    from gpupred.hardware import gpu_spec

    name = model.strip().upper()
    if name in HARDWARE_NAMES:
        return float(gpu_spec(HARDWARE_NAMES[name]).memory_gb), "gpupred.hardware"
    return UNKNOWN_MEMORY_GB, "assumed"


def nodes_from_frame(nodes: pd.DataFrame, origin: str = NODE_FILE) -> pd.DataFrame:
    """The node table (:data:`NODE_COLUMNS`) of a node list in the upstream format."""
    missing = [c for c in NODE_CSV if c not in nodes.columns]
    if missing:
        raise GpupredError(f"{origin}: missing columns {missing}; not an openb node list")
    gpus = pd.to_numeric(nodes["gpu"], errors="coerce")
    if gpus.isna().any() or (gpus < 0).any():
        raise GpupredError(f"{origin}: column 'gpu' row {int(np.flatnonzero(gpus.isna() | (gpus < 0))[0]) + 2} "
                           "is not a GPU count")
    memory = [node_memory_gb(str(m)) for m in nodes["model"]]
    return pd.DataFrame({
        "node_id": nodes["sn"].astype(str).to_numpy(), "model": nodes["model"].astype(str).to_numpy(),
        "gpus": gpus.to_numpy(np.int64), "gpu_memory_mib": [gb * 1024.0 for gb, _ in memory],
        "memory_source": [src for _, src in memory],
    })


def read_tasks() -> pd.DataFrame:
    """Every task of the imported pod list (sha256 checked); MissingInput when the trace was never imported."""
    return tasks_from_frame(read_csv(SOURCE, POD_FILE, POD_CSV, "Alibaba's openb"), POD_FILE)


def read_nodes() -> pd.DataFrame:
    """Every GPU node of the imported node list (sha256 checked); MissingInput when never imported."""
    return nodes_from_frame(read_csv(SOURCE, NODE_FILE, NODE_CSV, "Alibaba's openb"), NODE_FILE)


def import_counts(tasks: pd.DataFrame, nodes: pd.DataFrame) -> dict[str, int]:
    """What the trace holds: tasks by GPU need and phase, sharing tasks, nodes and GPUs."""
    gpu = tasks["num_gpu"] > 0
    return {
        "tasks": int(len(tasks)), "tasks_gpu": int(gpu.sum()), "tasks_cpu_only": int((~gpu).sum()),
        "tasks_multi_gpu": int((tasks["num_gpu"] > 1).sum()),
        "tasks_fractional": int(((tasks["num_gpu"] == 1) & (tasks["gpu_share"] < 1)).sum()),
        "tasks_never_scheduled": int(tasks["start_s"].isna().sum()), "tasks_censored": int(tasks["censored"].sum()),
        "nodes": int(len(nodes)), "gpus": int(nodes["gpus"].sum()),
        "gpus_assumed_memory": int(nodes.loc[nodes["memory_source"] == "assumed", "gpus"].sum()),
    }
