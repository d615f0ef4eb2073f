"""FIXTURES for the learning tests: made-up feature frames, datasets and raw trees. Never measurements.

Every value here is synthesized from a toy formula so the learning code has something to fit; the
rows carry ``sweep_id == "FIXTURE"`` and ``host == "fixture"`` so they cannot pass for data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpupred.graph.features import FEATURE_KEYS
from gpupred.hardware import gpu_spec, hardware_features
from gpupred.workloads.spec import WorkloadSpec

# family -> (id template without bs/precision/optimizer parts, params in millions, GFLOP per sample fwd, kind)
_ARCHS: dict[str, list[tuple[str, float, float]]] = {
    "resnet": [("resnet.resnet18-bs{bs}-img224", 11.7, 1.8), ("resnet.resnet50-bs{bs}-img224", 25.6, 4.1),
               ("resnet.resnet101-bs{bs}-img224", 44.5, 7.8)],
    "vgg": [("vgg.vgg11-bs{bs}-img224", 132.9, 7.6), ("vgg.vgg16-bs{bs}-img224", 138.4, 15.5)],
    "mlp": [("mlp.mlp-w1024-d2-bs{bs}-in784", 1.9, 0.004), ("mlp.mlp-w2048-d4-bs{bs}-in784", 14.2, 0.03)],
    "lstm": [("lstm.lstm-v10000-e256-h512-l2-bs{bs}-seq64", 10.2, 0.6), ("lstm.lstm-v10000-e256-h256-l1-bs{bs}-seq64", 5.6, 0.2)],
    "bert": [("bert.bert-v30000-m256-h4-l2-bs{bs}-seq128", 9.3, 0.5), ("bert.bert-v30000-m512-h8-l4-bs{bs}-seq128", 28.0, 2.9)],
}


def fixture_features(n_batch_sizes: int = 3, seed: int = 0) -> pd.DataFrame:
    """A FIXTURE graph-features frame (columns of graph_features.parquet) over several families."""
    rng = np.random.default_rng(seed)
    batch_sizes = [8, 16, 32, 64, 128][:n_batch_sizes]
    rows = []
    for family, archs in _ARCHS.items():
        for template, mparams, gflops in archs:
            for bs in batch_sizes:
                for precision in ("fp32", "bf16"):
                    for optimizer in ("sgd", "adam"):
                        spec = WorkloadSpec.from_id(f"{template.format(bs=bs)}-{precision}-{optimizer}")
                        params = mparams * 1e6
                        fwd = gflops * 1e9 * bs
                        act = (gflops * 2.5e6 + 2e5) * bs * (2 if precision == "bf16" else 4) * rng.uniform(0.9, 1.1)
                        moved = act * 2 + params * 4 * 3
                        n_layers = int(10 + mparams)
                        row = {
                            "workload_id": spec.id, "arch_key": spec.arch_key, "family": spec.family, "arch": spec.arch,
                            "precision": precision, "optimizer": optimizer, "fused": spec.fused,
                            "is_bf16": float(precision == "bf16"), "is_adam": float(optimizer == "adam"),
                            "flops_fwd": fwd, "flops_bwd": 2 * fwd, "flops_optimizer": params * 4, "macs_fwd": fwd / 2,
                            "n_nodes": 3.0 * (10 + mparams), "flops_train": 3 * fwd, "params": params, "param_bytes": 4 * params,
                            "activation_bytes": act, "bytes_moved": moved, "arithmetic_intensity": 3 * fwd / moved,
                            "input_bytes": 4.0 * bs * 1000, "batch_size": float(bs), "n_conv": float(n_layers * (family in ("resnet", "vgg"))),
                            "n_matmul": float(n_layers), "n_recurrent": float(2 * (family == "lstm")), "n_norm": float(n_layers // 2),
                            "n_act": float(n_layers), "n_pool": 2.0, "n_elementwise": float(n_layers), "n_layers": float(n_layers),
                            "depth": float(n_layers + 3), "n_residual": float(n_layers // 4 * (family == "resnet")), "unknown_ops": 0.0,
                            "unknown_op_types": "",
                        }
                        rows.append(row)
    df = pd.DataFrame(rows)
    for k in FEATURE_KEYS:  # keys the fixture does not model: a harmless constant column
        if k not in df.columns:
            df[k] = 0.0
    return df


def _fixture_labels(f: pd.Series, gpu: str, rng: np.random.Generator) -> dict[str, float]:
    """Toy labels from a toy formula (FIXTURE), with a little noise."""
    hw = hardware_features(gpu, f["precision"])
    t_compute = f["flops_train"] / (hw["gpu_tflops_peak"] * 1e12 * 0.4)
    t_overhead = 2e-3 + 4e-5 * f["n_layers"] * (3 if f["family"] == "lstm" else 1)
    util = 100 * (t_compute + 0.3 * t_overhead) / (t_compute + t_overhead)
    state = 4 * f["params"] * (3 + (f["optimizer"] == "adam"))
    memory = (state + 1.05 * f["activation_bytes"]) / 2**20 + 520.0
    noise = rng.normal(0, 0.03, 3)
    return {
        "gpu_util": float(np.clip(util * (1 + noise[0]), 1, 100)),
        "sm_active": float(np.clip(0.8 * util * (1 + noise[1]), 1, 100)),
        "memory_mib": float(memory * (1 + noise[2] / 3)),
        "iter_time_mean_s": float(t_compute + t_overhead),
    }


def _fixture_physics(f: pd.Series, gpu: str) -> dict[str, float]:
    """Toy step-model columns (FIXTURE): a roofline-free guess, deliberately not the labels' formula."""
    hw = hardware_features(gpu, f["precision"])
    busy = f["flops_train"] / (hw["gpu_tflops_peak"] * 1e12 * 0.6) + 2e-6 * 3 * f["n_nodes"]
    host = 1e-4 + 8e-6 * 3 * f["n_nodes"]
    step = max(busy, host) + 1.5e-5
    return {"phys_step_s": step, "phys_gpu_busy_s": busy, "phys_host_s": host, "phys_util": 100 * busy / step,
            "phys_kernels": 3.0 * f["n_nodes"]}


def fixture_dataset(gpus: tuple[str, ...] = ("NVIDIA H100 80GB HBM3",), n_batch_sizes: int = 3, seed: int = 0,
                    sources: dict[str, str] | None = None) -> pd.DataFrame:
    """A FIXTURE dataset frame with the columns of gpupred.dataset's contract.

    Every workload is "measured" once per GPU, so a workload's runs span GPUs (what grouped splits must keep
    together); ``sources`` maps a GPU name to the source its rows claim (default ``gpupred``).
    """
    from gpupred import dataset as ds

    rng = np.random.default_rng(seed)
    feats = fixture_features(n_batch_sizes, seed)
    keys = list(FEATURE_KEYS)
    rows = []
    for gpu in gpus:
        for _, f in feats.iterrows():
            lab = _fixture_labels(f, gpu, rng)
            row = {
                "run_id": f"FIXTURE-{gpu.split()[-1]}-{f['workload_id']}", "sweep_id": "FIXTURE",
                "workload_id": f["workload_id"], "arch_key": f["arch_key"], "family": f["family"], "arch": f["arch"],
                "precision": f["precision"], "optimizer": f["optimizer"], "fused": int(f["fused"]), "gpu_name": gpu,
                "gpu": gpu_spec(gpu).name,
                "gpu_util": lab["gpu_util"], "gpu_util_buffered": np.nan, "sm_active": lab["sm_active"],
                "memory_mib": lab["memory_mib"], "torch_peak_reserved_mib": lab["memory_mib"] - 500,
                "torch_peak_allocated_mib": lab["memory_mib"] - 600, "iter_time_mean_s": lab["iter_time_mean_s"],
                "samples_per_s": f["batch_size"] / lab["iter_time_mean_s"],
                "memory_source": "nvml-process", "gpu_memory_total_mib": 81559.0, "n_samples": 50.0,
                "cuda_context_mib": 500.0, "sync": "step", "source": (sources or {}).get(gpu, "gpupred"),
                "sampler": "nvml-poll-50ms",
            }
            row.update({k: float(f[k]) for k in keys})
            row.update(_fixture_physics(f, gpu))
            row.update(hardware_features(gpu, f["precision"]))
            row.update(ds.encode(f["precision"], f["optimizer"]))
            rows.append(row)
    return pd.DataFrame(rows)


def _run_row(spec: WorkloadSpec, run_id: str, status: str = "ok", simulated: bool = False,
             gpu: str = "NVIDIA H100 80GB HBM3", group_size: int = 1, member: int = 0, group_id: str | None = None) -> dict:
    return {
        "schema_version": 2, "run_id": run_id, "group_id": group_id or run_id, "group_size": group_size, "member": member,
        "sweep_id": "FIXTURE", "workload_id": spec.id, "family": spec.family, "spec_json": spec.to_json(),
        "status": status, "message": "" if status == "ok" else "fixture failure", "simulated": simulated,
        "host_batches": False, "gpu_name": gpu, "gpu_uuid": "GPU-fixture", "gpu_sm_count": 132,
        "gpu_memory_total_mib": 81559.0, "driver_version": "fixture", "cuda_version": "fixture",
        "torch_version": "fixture", "gpupred_version": "fixture", "host": "fixture",
        "started_at": "2000-01-01T00:00:00Z", "warmup_s": 2.0, "warmup_iters": 5, "window_start_s": 2.0,
        "window_end_s": 6.0, "n_iters": 4, "iter_times_s": [0.1, 0.1, 0.1, 0.1], "iter_time_mean_s": 0.1,
        "iter_time_median_s": 0.1, "samples_per_s": spec.batch_size / 0.1, "torch_peak_allocated_mib": 900.0,
        "torch_peak_reserved_mib": 1000.0, "sampler_interval_ms": 100.0, "buffered_supported": False,
        "gpm_supported": True, "sync": "step", "mem_baseline_mib": 300.0, "cuda_context_mib": 500.0,
        "memory_reserved_mib": float("nan"),
    }


def _samples(group_id: str, util: float, mem: float, with_proc: bool = True, baseline: float = 300.0) -> pd.DataFrame:
    """FIXTURE samples timed as the harness keeps them (0.5 s either side of the 2-6 s window): util/sm flat in
    the window, memory already allocated (the pre-launch baseline is the run's ``mem_baseline_mib``)."""
    rows = []
    for i in range(15, 66):
        t = i * 0.1
        in_win = 2.0 <= t <= 6.0
        rows.append((group_id, t, "gpu_util", util if in_win else 5.0, -1, "poll"))
        rows.append((group_id, t, "sm_active", 0.8 * util if in_win else 1.0, -1, "gpm"))
        rows.append((group_id, t, "mem_used_mib", baseline + (mem if t >= 1.0 else 0.0), -1, "poll"))
        if with_proc:
            rows.append((group_id, t, "proc_mem_mib", mem if t >= 1.0 else 0.0, 0, "poll"))
    return pd.DataFrame(rows, columns=["group_id", "t_s", "metric", "value", "member", "source"])


def write_fixture_raw_tree(root: Path, workload_ids: list[str], extras: bool = True) -> Path:
    """Write a FIXTURE raw tree ``root/<gpu>/FIXTURE/`` with ok solo runs (and failures etc. if ``extras``)."""
    from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA

    sweep = root / "h100-fixture" / "FIXTURE"
    (sweep / "runs").mkdir(parents=True, exist_ok=True)
    (sweep / "samples").mkdir(parents=True, exist_ok=True)

    def write(run_rows: list[dict], samples: pd.DataFrame, group_id: str) -> None:
        pq.write_table(pa.Table.from_pandas(samples, schema=SAMPLE_SCHEMA, preserve_index=False), sweep / "samples" / f"{group_id}.parquet")
        pq.write_table(pa.Table.from_pylist(run_rows, schema=RUN_SCHEMA), sweep / "runs" / f"{group_id}.parquet")

    for i, wid in enumerate(workload_ids):
        spec = WorkloadSpec.from_id(wid)
        rid = f"fixture-{i:03d}"
        write([_run_row(spec, rid)], _samples(rid, 50.0 + i, 1000.0 + 10 * i, with_proc=(i % 2 == 0)), rid)
    if extras:
        spec = WorkloadSpec.from_id(workload_ids[0])
        write([_run_row(spec, "fixture-oom", status="oom")], _samples("fixture-oom", 0, 0), "fixture-oom")
        write([_run_row(spec, "fixture-sim", simulated=True)], _samples("fixture-sim", 50, 1000), "fixture-sim")
        g = "fixture-grp"
        write([_run_row(spec, f"{g}.m{m}", group_size=2, member=m, group_id=g) for m in (0, 1)], _samples(g, 90, 2000), g)
        empty = _samples("fixture-nowin", 50, 1000)
        write([_run_row(spec, "fixture-nowin")], empty[empty["t_s"] < 1.95], "fixture-nowin")
        write([_run_row(WorkloadSpec.from_id("alexnet.alexnet-bs8-img224-fp32-sgd"), "fixture-nofeat")],
              _samples("fixture-nofeat", 50, 1000), "fixture-nofeat")
    return sweep


def write_fixture_dataset(root: Path, **kwargs: object) -> Path:
    """Write a FIXTURE dataset.parquet under ``root/data/processed`` (a temporary GPUPRED_ROOT)."""
    path = root / "data" / "processed" / "dataset.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    fixture_dataset(**kwargs).to_parquet(path, index=False)  # type: ignore[arg-type]
    return path


def fixture_mlp(width: int) -> object:
    """FIXTURE graph: x[batch, 64] -> Gemm(width) -> Relu -> Gemm(10)."""
    from onnx import TensorProto, helper

    inits = [helper.make_tensor("W1", TensorProto.FLOAT, [width, 64], [0.0] * (width * 64)),
             helper.make_tensor("W2", TensorProto.FLOAT, [10, width], [0.0] * (10 * width))]
    nodes = [helper.make_node("Gemm", ["x", "W1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "W2"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "fixture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def fixture_kernels(df: pd.DataFrame) -> list:
    """FIXTURE kernels for each row of ``df``: a tiny MLP graph sized by its batch size and params."""
    from gpupred.step.physics.kernels import step_kernels
    from gpupred.step.physics.model import canonical_graph

    return [step_kernels(canonical_graph(fixture_mlp(int(64 + p / 1e5)), int(b))[0], prec, opt)
            for p, b, prec, opt in zip(df["params"], df["batch_size"], df["precision"], df["optimizer"])]
