"""Kernel-trace summaries (issue 38): the summarizer on a hand-built FIXTURE Chrome trace (the shape torch.profiler
exports; no GPU ran it), the table's contract, the step model's comparison on FIXTURE tables, and the runner's code
path on the CPU (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpupred.errors import GpupredError
from gpupred.traces.compare import GROUPS, compare_traces, error_table, group_table, model_groups, predicted
from gpupred.traces.tracetable import (OP_CLASSES, TRACE_SCHEMA, busy_seconds, op_class, read_traces, summarize_trace,
                                  trace_path, write_traces)

MAIN, AUTOGRAD = 100, 200


def _x(cat: str, name: str, ts: float, dur: float, tid: int = MAIN, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat.startswith(("kernel", "gpu")) else 9, "tid": tid,
            "ts": ts, "dur": dur, "args": args}


def fixture_trace() -> dict[str, Any]:
    """A FIXTURE trace of two steps, timestamps in microseconds (see each event's comment for what it checks)."""
    ev = [
        {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "python"}},
        _x("user_annotation", "ProfilerStep#1", 1000, 500), _x("user_annotation", "ProfilerStep#2", 1600, 300),
        _x("gpu_user_annotation", "ProfilerStep#1", 1000, 900, tid=7),  # the GPU's copy of the annotation: ignored
        _x("cpu_op", "aten::mm", 1005, 10),
        # step 0: a GEMM and an elementwise kernel that overlap (union 1020-1080: 60 us busy, 70 us summed)
        _x("cuda_runtime", "cudaLaunchKernel", 1010, 4, correlation=1), _x("kernel", "ampere_sgemm_128x64_nn", 1020, 50, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", 1030, 4, correlation=2),
        _x("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 1060, 20,
           correlation=2),
        # a convolution's data gradient launched by the autograd engine's thread
        _x("cuda_runtime", "cudaLaunchKernel", 1100, 4, tid=AUTOGRAD, correlation=3),
        _x("kernel", "sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nchwkcrs", 1110, 30, correlation=3),
        _x("cuda_runtime", "cudaLaunchKernel", 1200, 4, correlation=4),
        _x("kernel", "void at::native::multi_tensor_apply_kernel<TensorListMetadata<3>>", 1210, 40, correlation=4),
        _x("cuda_runtime", "cudaMemsetAsync", 1212, 2, correlation=5), _x("gpu_memset", "Memset (Device)", 1215, 1, correlation=5),
        _x("cuda_runtime", "cudaMemcpyAsync", 1250, 3, correlation=6), _x("gpu_memcpy", "Memcpy DtoH", 1260, 2, correlation=6),
        _x("cuda_runtime", "cudaStreamSynchronize", 1300, 150),  # the step's thread waits 150 us for the GPU
        _x("cuda_runtime", "cudaStreamSynchronize", 1320, 10, tid=AUTOGRAD),  # another thread's wait: not the step's
        # between the steps: launched outside any step, dropped
        _x("cuda_runtime", "cudaLaunchKernel", 1550, 4, correlation=8), _x("kernel", "fill_kernel", 1555, 3, correlation=8),
        # step 1: launched inside it, run after it ends (the queue); a kernel without a launch record, placed by its start
        _x("cuda_runtime", "cuLaunchKernel", 1650, 4, correlation=7), _x("kernel", "ampere_bf16_s16816gemm", 1950, 10, correlation=7),
        _x("kernel", "void at::native::fill_kernel<float>", 1700, 5),
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1, "tid": 7, "ts": 1020},
    ]
    return {"schemaVersion": 1, "traceEvents": ev, "traceName": "FIXTURE"}


def test_the_summarizer_reads_steps_kernels_busy_and_host_time_off_a_fixture_trace() -> None:
    first, second = summarize_trace(fixture_trace())
    assert first["step"] == 0 and second["step"] == 1
    assert first["step_wall_s"] == pytest.approx(500e-6) and first["sync_wait_s"] == pytest.approx(150e-6)
    assert first["host_busy_s"] == pytest.approx(350e-6)
    assert first["kernels"] == 4 and first["kernels_autograd"] == 1 and first["memcpy"] == 1 and first["memset"] == 1
    assert first["gpu_busy_s"] == pytest.approx((60 + 30 + 40) * 1e-6) and first["kernel_sum_s"] == pytest.approx(140e-6)
    assert {c: first[f"kernels_{c}"] for c in OP_CLASSES if first[f"kernels_{c}"]} == {
        "gemm": 1, "elementwise": 1, "conv": 1, "optimizer": 1}
    assert first["kernel_s_gemm"] == pytest.approx(50e-6) and first["kernel_s_conv"] == pytest.approx(30e-6)
    assert second["kernels"] == 2 and second["kernels_gemm"] == 1 and second["kernels_fill"] == 1
    assert second["gpu_busy_s"] == pytest.approx(15e-6) and second["host_busy_s"] == pytest.approx(300e-6)


def test_a_gzipped_trace_file_reads_the_same_and_a_trace_without_steps_is_refused(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(fixture_trace()).encode()))
    assert summarize_trace(path) == summarize_trace(fixture_trace())
    with pytest.raises(GpupredError, match="no ProfilerStep"):
        summarize_trace({"traceEvents": [_x("kernel", "k", 0, 1)]})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(GpupredError, match="bad.json: not a readable Chrome trace"):
        summarize_trace(tmp_path / "bad.json")


@pytest.mark.parametrize("name, cls", [
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nchw", "conv"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"), ("flash_fwd_kernel", "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", "attention"), ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", "norm"),
    ("void cudnn::rnn::LSTM_elementWise_fp<float, float, float>", "rnn"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "copy"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>", "reduce"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "softmax"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>", "pool"),
    ("void at::native::multi_tensor_apply_kernel<TensorListMetadata<3>>", "optimizer"), ("mystery", "other")])
def test_kernel_names_map_to_op_classes(name: str, cls: str) -> None:
    assert op_class(name) == cls


def test_busy_time_is_the_union_of_intervals() -> None:
    assert busy_seconds([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17.0
    assert busy_seconds([]) == 0.0


def _identity(workload_id: str, family: str, status: str = "ok") -> dict[str, Any]:
    return {"workload_id": workload_id, "family": family, "spec_json": "{}", "sweep_id": "FIXTURE", "status": status,
            "message": "", "warmup_steps": 10, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_uuid": "GPU-fixture",
            "driver_version": "fixture", "cuda_version": "fixture", "torch_version": "fixture", "gpupred_version": "fixture",
            "host_cpu": "fixture", "started_at": "2000-01-01T00:00:00Z"}


def test_the_table_is_written_once_and_read_back_checked(tmp_path: Path) -> None:
    rows = [{**_identity("resnet.resnet18-bs16-img128-fp32-sgd", "resnet"), **r} for r in summarize_trace(fixture_trace())]
    path = write_traces(tmp_path / "h100" / "FIXTURE", rows[0]["workload_id"], rows)
    assert path == trace_path(tmp_path / "h100" / "FIXTURE", rows[0]["workload_id"])
    back = read_traces(tmp_path)
    assert len(back) == 2 and list(back.columns[:-1]) == TRACE_SCHEMA.names and (back["schema_version"] == 1).all()
    with pytest.raises(GpupredError, match="already written; measurements are never rewritten"):
        write_traces(tmp_path / "h100" / "FIXTURE", rows[0]["workload_id"], rows)
    with pytest.raises(GpupredError, match="lack columns"):
        write_traces(tmp_path / "x", "w", [{"step": 0}])


ZERO_CLASSES = {f"kernels_{c}": 0 for c in OP_CLASSES} | {f"kernel_s_{c}": 0.0 for c in OP_CLASSES}
FIXTURE_JOBS = {"resnet.resnet18-bs16-img128-fp32-sgd": "resnet", "resnet.resnet50-bs32-img224-bf16-adam": "resnet",
                "vgg.vgg11-bs64-img224-fp32-sgd": "vgg"}


def fixture_tables(factor: float) -> pd.DataFrame:
    """FIXTURE trace rows whose figures are the step model's own (default constants) divided by ``factor`` per
    workload, in two steps; each group's kernels split over the op classes of that group."""
    from gpupred.step.physics.constants import DEFAULT
    from gpupred.traces.runner import failed_row

    rows = []
    for wid, family in FIXTURE_JOBS.items():
        p = predicted(wid, "H100 SXM", DEFAULT)
        step = {"step_wall_s": p["host_s"] / factor + 1e-4, "sync_wait_s": 1e-4, "host_busy_s": p["host_s"] / factor,
                "gpu_busy_s": p["gpu_busy_s"] / factor, "kernel_sum_s": p["gpu_busy_s"] / factor,
                "kernels": int(round(p["kernels"] / factor)), "kernels_autograd": 0, "memcpy": 0, "memset": 0,
                "kernels_conv": p["kernels_contraction"] / factor, "kernel_s_conv": p["kernel_s_contraction"] / factor,
                "kernels_optimizer": p["kernels_optimizer"] / factor, "kernel_s_optimizer": p["kernel_s_optimizer"] / factor,
                "kernels_elementwise": p["kernels_other"] / factor, "kernel_s_elementwise": p["kernel_s_other"] / factor}
        step = {**ZERO_CLASSES, **step, **{k: int(round(v)) for k, v in step.items() if k.startswith("kernels_")}}
        rows += [{**_identity(wid, family), **step, "step": i} for i in range(2)]
    rows.append({**_identity("vgg.vgg16-bs512-img224-fp32-adam", "vgg", "oom"), **ZERO_CLASSES, **failed_row()})
    return pd.DataFrame(rows)


def test_the_comparison_reports_each_familys_errors_and_each_groups() -> None:
    comparison = compare_traces(fixture_tables(1.25))
    assert sorted(comparison["workload_id"]) == sorted(FIXTURE_JOBS)
    for q in ("host_s", "gpu_busy_s"):
        assert np.allclose(comparison[f"err_{q}"], math.log(1.25))
    errors = error_table(comparison)
    assert set(errors["family"]) == {"resnet", "vgg", "all"}
    every = errors[(errors["family"] == "all") & (errors["quantity"] == "gpu_busy_s")].iloc[0]
    assert every["n"] == 3 and every["median_abs"] == pytest.approx(math.log(1.25)) and every["median"] > 0
    groups = group_table(comparison)
    assert set(groups["group"]) == set(GROUPS)
    assert np.allclose(groups[groups["quantity"] == "kernel_s"]["median"], math.log(1.25))


def test_model_groups_label_contractions_optimizer_and_the_rest() -> None:
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.workloads.spec import WorkloadSpec

    kl = spec_kernels(WorkloadSpec.from_id("resnet.resnet18-bs16-img128-fp32-sgd"))
    labels = model_groups(kl)
    assert set(labels) == set(GROUPS) and len(labels) == len(kl)
    assert (labels == "contraction").sum() == int((kl.tensor_core != 0).sum())


def test_cli_summarize_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpupred.cli import main

    (tmp_path / "t.json").write_text(json.dumps(fixture_trace()))
    main(["trace", "summarize", str(tmp_path / "t.json"), "--json"])
    assert [r["kernels"] for r in json.loads(capsys.readouterr().out)] == [4, 2]
    table = fixture_tables(0.8)
    for wid, g in table.groupby("workload_id"):
        write_traces(tmp_path / "h100" / "FIXTURE", str(wid), g.to_dict("records"))
    main(["trace", "compare", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    every = [r for r in out["families"] if r["family"] == "all" and r["quantity"] == "host_s"][0]
    assert every["median"] == pytest.approx(math.log(0.8))
    with pytest.raises(SystemExit) as stop:
        main(["trace", "compare", str(tmp_path / "empty")])
    assert stop.value.code == 2 and "no kernel-trace summaries" in capsys.readouterr().err


def test_cli_run_refuses_co_located_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpupred.cli import main

    plan = tmp_path / "plan.txt"
    plan.write_text("resnet.resnet18-bs16-img128-fp32-sgd + vgg.vgg11-bs64-img224-fp32-sgd\n")
    with pytest.raises(SystemExit) as stop:
        main(["trace", "run", "--plan", str(plan), "--out", str(tmp_path / "out")])
    assert stop.value.code == 2 and "kernel traces are of solo specs" in capsys.readouterr().err


@pytest.mark.slow
def test_the_runner_profiles_a_spec_on_the_cpu_and_resumes(tmp_path: Path) -> None:
    """The runner's whole path (build, warm-up, torch.profiler, summary, atomic write) on the CPU: a CPU trace has no
    kernels, so only the host figures are real; a second run finds the spec done."""
    from gpupred.traces.runner import run_traces
    from gpupred.workloads.spec import WorkloadSpec

    spec = WorkloadSpec.from_id("mlp.mlp-w512-d2-bs256-in784-fp32-adam")
    summary = run_traces([spec], tmp_path / "cpu" / "FIXTURE", steps=2, warmup=1, device="cpu", progress=False)
    assert (summary.done, summary.statuses) == (1, {"ok": 1})
    rows = read_traces(tmp_path)
    assert list(rows["step"]) == [0, 1] and (rows["step_wall_s"] > 0).all() and (rows["kernels"] == 0).all()
    again = run_traces([spec], tmp_path / "cpu" / "FIXTURE", steps=2, warmup=1, device="cpu", progress=False)
    assert (again.done, again.skipped) == (0, 1)
