"""GPUMemNet (itu-rad): 3,000 training runs of fully connected networks on an A100 40 GB, measured with DCGM.

Upstream ``itu-rad/GPUMemNet`` at a pinned commit: ``Datasets/MLP/mlp_data_step1.csv``. How each run was
made (upstream ``NeuroNetGen_scripts/MLP/mlp.py`` and its launcher, ``Data_Cleaner_scripts/MLP/
data_cleaner_mlp_step1.py``):

- the network: ``d`` hidden Linear+ReLU layers whose widths follow one of four rules (pyramid, uniform,
  bottleneck, gradual; :mod:`gpupred.workloads.fcnet`), then a Linear to the output size;
- training: Adam (default settings), fp32 (no AMP), cross-entropy (BCE-with-logits for one output), on
  4,096 random samples in a host ``DataLoader`` (shuffled, each batch copied to the GPU), ``loss.item()``
  every step (``sync = "step"``), for about 75 s, one network at a time;
- labels: ``dcgmi dmon`` (1 s) averaged over the run's **non-zero** samples (GPUTL in %, GRACT, SMACT,
  SMOCC, FP32A as fractions); memory the maximum of ``nvidia-smi`` ``memory.used`` polled every 1 s (the
  whole device, CUDA context included).

Every network is rebuilt exactly from its layer list (``Activations-Params``): a row whose list does not
follow its architecture's rule, or holds a layer kind other than Linear and ReLU, is excluded with the
reason, never approximated. :func:`gpupred.graph.graphstore.fcnet_onnx` writes the graph with ``onnx.helper``
(no torch).

Licence: the upstream repository has no licence file at the pinned commit; later upstream READMEs give
the data CC BY-NC 4.0 (README.md) and CC BY 4.0 (Datasets/README.md). Treated as non-commercial:
research evaluation only, never committed.
"""

from __future__ import annotations

import ast
import re

import pandas as pd

from gpupred.errors import GpupredError
from gpupred.graph.graphstore import ACTIVATIONS
from gpupred.importers.source import Source, UpstreamFile, read_csv
from gpupred.workloads.fcnet import fc_widths
from gpupred.workloads.spec import WorkloadSpec

SOURCE = Source(
    name="gpumemnet",
    repo="itu-rad/GPUMemNet",
    commit="f01eb0592e1b2030d3bceb73441747912b6652a6",
    files=(UpstreamFile("mlp_data_step1.csv", "Datasets/MLP/mlp_data_step1.csv",
                        "5f7cd9e1103e9134752ee661d7fc2ad69aed304e64ed1dc98377dde07b516b7d"),),
    licence="no licence file at the pinned commit; later upstream READMEs state CC BY-NC 4.0 (README.md) and CC BY 4.0 "
            "(Datasets/README.md): treated as non-commercial, research evaluation only",
    gpu_name="NVIDIA A100 40GB",
    measured="dcgmi dmon every 1 s, averaged over the run's non-zero samples; memory the max of nvidia-smi memory.used (1 s)",
    citation="Yousefzadeh-Asl-Miandoab, Karimzadeh, Yorulmaz, Ibragimov, Tozun. GPU Memory and Utilization Estimation "
             "for Training-Aware Resource Management: Opportunities and Limitations. arXiv:2602.17817 (GPUMemNet)",
)
GPU_NAME = SOURCE.gpu_name
GPU_MEMORY_MIB = 40960.0  # A100 40 GB
SAMPLER = "dcgm-1s-nonzero"
SYNC = "step"  # the training loop reads loss.item() every step
MEMORY_SOURCE = "nvidia-smi-device-max"
OPTIMIZER = "adam"
PRECISION = "fp32"

_CSV = ("Filename", "Activations-Params", "Activation Function", "Batch Size", "Max GPU Memory (MiB)", "Avg GPUTL",
        "Avg GRACT", "Avg SMACT", "Avg SMOCC", "Avg FP32A")
_NAME = re.compile(r"^input:(\d+)_output:(\d+)_depth:(\d+)_arch:([a-z]+)_batch:(\d+)\.out$")
RUN_COLUMNS: tuple[str, ...] = (
    "run_id", "workload_id", "filename", "batch_size", "memory_mib", "gpu_util", "gract", "sm_active", "sm_occupancy",
    "fp32_active", "excluded_reason",
)


def spec_from_filename(filename: str) -> WorkloadSpec:
    """The spec a GPUMemNet file name describes (``input:I_output:O_depth:D_arch:A_batch:B.out``)."""
    m = _NAME.match(filename)
    if not m:
        raise GpupredError(f"GPUMemNet file name {filename!r} is not input:I_output:O_depth:D_arch:A_batch:B.out")
    i, o, d, arch, bs = m.groups()
    return WorkloadSpec("fcnet", f"fc_{arch}", int(bs), int(i), PRECISION, OPTIMIZER, (("o", int(o)), ("d", int(d))))


def check_layers(spec: WorkloadSpec, layers: list[tuple[str, int, int]]) -> str:
    """'' if the upstream layer list is exactly the spec's network (Linear widths, parameters, ReLU between), else why not."""
    widths = fc_widths(spec.input_size, spec.knob["o"], spec.knob["d"], spec.arch)
    expected: list[tuple[str, int, int]] = []
    prev = spec.input_size
    for k, w in enumerate(widths):
        expected.append(("linear", w, prev * w + w))
        if k < len(widths) - 1:
            expected.append(("ReLU", w, 0))
        prev = w
    kinds = sorted({t[0] for t in layers} - {"linear", *ACTIVATIONS})
    if kinds:
        return f"layer kinds {kinds} not rebuilt (only linear and {', '.join(ACTIVATIONS)})"
    if [tuple(t) for t in layers] != expected:
        return "layer list differs from its architecture's width rule"
    return ""


def read_runs() -> pd.DataFrame:
    """One row per GPUMemNet run with its spec id and labels (``RUN_COLUMNS``); MissingInput if not imported."""
    raw = read_csv(SOURCE, "mlp_data_step1.csv", _CSV, "GPUMemNet's")
    ids, reasons = [], []
    for name, text, bs in zip(raw["Filename"], raw["Activations-Params"], raw["Batch Size"]):
        spec = spec_from_filename(name)
        if spec.batch_size != int(bs):
            ids.append(None)
            reasons.append(f"batch size {bs} differs from the file name's {spec.batch_size}")
            continue
        try:
            layers = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            ids.append(None)
            reasons.append("unreadable layer list")
            continue
        reason = check_layers(spec, layers)
        ids.append(None if reason else spec.id)
        reasons.append(reason)
    df = pd.DataFrame({
        "run_id": "gpumemnet:" + raw["Filename"].str.removesuffix(".out"), "workload_id": pd.Series(ids, dtype=object),
        "filename": raw["Filename"], "batch_size": raw["Batch Size"].astype(int),
        "memory_mib": raw["Max GPU Memory (MiB)"].astype(float), "gpu_util": raw["Avg GPUTL"].astype(float),
        "gract": 100 * raw["Avg GRACT"].astype(float), "sm_active": 100 * raw["Avg SMACT"].astype(float),
        "sm_occupancy": 100 * raw["Avg SMOCC"].astype(float), "fp32_active": 100 * raw["Avg FP32A"].astype(float),
        "excluded_reason": reasons,
    })
    if df["run_id"].duplicated().any():
        raise GpupredError(f"{SOURCE.name}'s mlp_data_step1.csv: duplicate file names, e.g. "
                           f"{df['run_id'][df['run_id'].duplicated()].iloc[0]!r}; re-import it (gpupred import gpumemnet)")
    return df[list(RUN_COLUMNS)]


def dataset_rows() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, exclusions): the rebuilt networks as dataset label rows (see gpupred.dataset), the rest with why."""
    runs = read_runs()
    bad = runs["excluded_reason"] != ""
    keep = runs[~bad]
    out = pd.DataFrame({
        "run_id": keep["run_id"], "sweep_id": f"gpumemnet@{SOURCE.commit[:7]}", "workload_id": keep["workload_id"],
        "gpu_name": GPU_NAME, "source": SOURCE.name, "sampler": SAMPLER, "sync": SYNC, "host_batches": 1,
        "gpu_util": keep["gpu_util"], "sm_active": keep["sm_active"], "memory_mib": keep["memory_mib"],
        "memory_source": MEMORY_SOURCE, "gpu_memory_total_mib": GPU_MEMORY_MIB,
    }).reset_index(drop=True)
    exclusions = runs.loc[bad, ["run_id", "workload_id", "excluded_reason"]].rename(columns={"excluded_reason": "reason"})
    return out, exclusions.reset_index(drop=True)


def specs() -> list[WorkloadSpec]:
    """The specs of every rebuilt network (needs the imported data)."""
    return [WorkloadSpec.from_id(w) for w in read_runs()["workload_id"].dropna().unique()]
