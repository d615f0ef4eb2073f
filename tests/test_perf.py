"""The step model (gpupred.step.physics) on tiny hand-built ONNX graphs (fixtures made here) with hand-computed values."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from gpupred.errors import GpupredError
from gpupred.hardware import gpu_spec
from gpupred.step.physics.kernels import KernelList, step_kernels
from gpupred.step.physics.constants import StepConstants
from gpupred.step.physics.model import canonical_graph, estimate_onnx, estimate_step
from gpupred.step.physics.timeline import kernel_times, simulate
from gpupred.setups import setup_of

B, K, N = 4, 8, 16


def _linear_relu(extra_relu_reader: bool = False, dropout: bool = False):
    """Fixture: x[B,K] -> Gemm(W[N,K], b[N]) -> Relu (-> Dropout) (-> a second reader of the Gemm output)."""
    inits = [helper.make_tensor("W", TensorProto.FLOAT, [N, K], [0.0] * (N * K)),
             helper.make_tensor("b", TensorProto.FLOAT, [N], [0.0] * N)]
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])]
    out = "y"
    if dropout:
        nodes.append(helper.make_node("Dropout", ["y"], ["yd"]))
        out = "yd"
    if extra_relu_reader:
        nodes.append(helper.make_node("Sigmoid", ["h"], ["s"]))
        nodes.append(helper.make_node("Add", [out, "s"], ["z"]))
        out = "z"
    graph = helper.make_graph(nodes, "fixture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_kernels_of_a_linear_relu_step_fp32_sgd() -> None:
    """Forward: Gemm, Relu, loss x2; backward: fill, loss x2, Relu, weight grad, bias grad (no data grad of x);
    SGD: 3 foreach ops of one launch each (2 tensors)."""
    graph, bs = canonical_graph(_linear_relu(), B)
    kl = step_kernels(graph, "fp32", "sgd")
    assert bs == B
    assert dict(kl.counts) == {"forward": 4, "backward": 6, "optimizer": 3, "other": 0}
    assert kl.param_tensors == 2
    assert kl.input_bytes == B * K * 4
    gemm_flops = 2 * B * N * K + B * N  # MACs x 2 + the bias add
    assert kl.flops[0] == gemm_flops and kl.tensor_core[0]
    assert kl.bytes[0] == 4 * (B * K + N * K + N + B * N)  # x, W, b read; h written
    bwd = kl.flops[kl.phase == 1]
    assert (bwd == gemm_flops).sum() == 1  # the weight gradient only


def test_dropout_branch_and_adam_add_kernels() -> None:
    """A dropped Dropout runs one kernel each way; a tensor read twice accumulates one gradient; Adam runs 7 ops."""
    base = step_kernels(canonical_graph(_linear_relu(), B)[0], "fp32", "sgd")
    drop = step_kernels(canonical_graph(_linear_relu(dropout=True), B)[0], "fp32", "sgd")
    assert drop.counts["forward"] == base.counts["forward"] + 1
    assert drop.counts["backward"] == base.counts["backward"] + 1
    branch = step_kernels(canonical_graph(_linear_relu(extra_relu_reader=True), B)[0], "fp32", "adam")
    # + Sigmoid and Add forward; backward + Sigmoid, + one accumulation into h, Add passes gradients through
    assert branch.counts["forward"] == base.counts["forward"] + 2
    assert branch.counts["backward"] == base.counts["backward"] + 2
    assert branch.counts["optimizer"] == 7


def test_autocast_casts_weights_and_fp16_scaler_syncs() -> None:
    """bf16: the fp32 input and the weight are cast before the Gemm, each way (bias stays: 2 casts); fp16 adds
    the GradScaler's kernels and one host synchronization."""
    graph, _ = canonical_graph(_linear_relu(), B)
    fp32 = step_kernels(graph, "fp32", "sgd")
    bf16 = step_kernels(graph, "bf16", "sgd")
    assert bf16.counts["forward"] == fp32.counts["forward"] + 2
    assert bf16.counts["backward"] == fp32.counts["backward"] + 2
    assert not fp32.sync_after.any() and not bf16.sync_after.any()
    fp16 = step_kernels(graph, "fp16", "sgd")
    assert fp16.sync_after.sum() == 1
    assert fp16.counts["optimizer"] == bf16.counts["optimizer"] + 4  # unscale, 2 small, update scale
    assert bf16.bytes[bf16.tensor_core > 0][0] < fp32.bytes[fp32.tensor_core > 0][0]  # 16-bit operands


def test_recurrent_layer_launches_kernels_per_time_step() -> None:
    """An LSTM over T steps: forward 1 + 2T kernels, backward 1 + 2T (+ the loss's)."""
    T, H, I = 5, 3, 2
    inits = [helper.make_tensor("W", TensorProto.FLOAT, [1, 4 * H, I], [0.0] * (4 * H * I)),
             helper.make_tensor("R", TensorProto.FLOAT, [1, 4 * H, H], [0.0] * (4 * H * H))]
    node = helper.make_node("LSTM", ["x", "W", "R"], ["Y"], hidden_size=H)
    g = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, "batch", I])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], initializer=inits)
    kl = step_kernels(canonical_graph(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), 2)[0])
    assert kl.counts["forward"] == 1 + 2 * T + 2
    assert kl.counts["backward"] == 1 + 2 * T + 3


def _kernels(g_flops: list[float]) -> KernelList:
    n = len(g_flops)
    return KernelList(np.array(g_flops, float), np.zeros(n), np.zeros(n, np.int8), np.zeros(n, np.int8), np.zeros(n, bool))


def test_timeline_by_protocol_hand_computed() -> None:
    """Kernels of 5, 1, 1 us launched every 2 us: the GPU ends at 9 us (7, 8, 9); step sync adds the latency."""
    gpu = gpu_spec("H200")
    c = StepConstants(launch_s=2e-6, step_overhead_s=0.0, min_kernel_s=0.0, sync_s=1e-6, blocking_s=1e-6, param_host_s=0.0)
    fp32_peak = gpu.tflops_fp32 * 1e12 * c.compute_eff
    kl = _kernels([5e-6 * fp32_peak, 1e-6 * fp32_peak, 1e-6 * fp32_peak])
    assert kernel_times(kl, gpu, "fp32", c) == pytest.approx([5e-6, 1e-6, 1e-6])
    step = simulate(kl, gpu, "fp32", c, "step")
    assert step.step_s == pytest.approx(10e-6) and step.gpu_busy_s == pytest.approx(7e-6)
    assert step.host_s == pytest.approx(6e-6) and step.util == pytest.approx(70.0)
    window = simulate(kl, gpu, "fp32", c, "window")
    assert window.step_s == pytest.approx(7e-6) and window.util == pytest.approx(100.0)
    blocking = simulate(kl, gpu, "fp32", c, "kernel")
    assert blocking.step_s == pytest.approx(6e-6 + 3e-6 + 7e-6)  # launches + a wait each (blocking_s) + the kernels


def test_minimum_kernel_time_and_host_batches() -> None:
    """Tiny kernels take the minimum time; a host-memory batch blocks the host for bytes / copy bandwidth."""
    gpu = gpu_spec("A100 40GB")
    c = StepConstants(min_kernel_s=3e-6)
    kl = _kernels([1.0, 1.0])
    assert kernel_times(kl, gpu, "fp32", c) == pytest.approx([3e-6, 3e-6])
    kl.input_bytes = 12_000_000
    plain = simulate(kl, gpu, "fp32", c, "step")
    copied = simulate(kl, gpu, "fp32", c, "step", host_batches=True)
    assert copied.step_s - plain.step_s == pytest.approx(12e6 / (c.host_copy_gbs * 1e9))


def test_estimates_any_gpu_in_the_table_and_refuses_bad_input() -> None:
    """A faster GPU gives a shorter step; unknown GPUs, precisions and protocols are one-line errors."""
    model = _linear_relu()
    slow = estimate_onnx(model, 4096, "fp32", "sgd", "T4")
    fast = estimate_onnx(model, 4096, "fp32", "sgd", "H200")
    assert fast.gpu_busy_s < slow.gpu_busy_s and 0 < fast.util <= 100 and fast.kernels == slow.kernels == 13
    graph, _ = canonical_graph(model, 4)
    assert estimate_step(graph, 4, "bf16", "adam", "RTX 3090").kernels > 13
    for kwargs in ({"gpu": "Voodoo 2"}, {"precision": "int8"}, {"sync": "sometimes"}):
        args = {"precision": "fp32", "optimizer": "sgd", "gpu": "H200", "sync": "step", **kwargs}
        with pytest.raises(GpupredError):
            estimate_step(graph, 4, **args)


def test_step_model_is_torch_free() -> None:
    """Importing and running the step model never imports torch."""
    import subprocess

    code = ("import sys, gpupred.step.physics.model, gpupred.step.physics.timeline, gpupred.step.physics.fit; "
            "from onnx import helper; assert 'torch' not in sys.modules; "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr



def test_an_unfitted_gpu_borrows_host_constants_from_its_protocol_and_device_ones_from_its_architecture() -> None:
    """FIXTURE fits: launch cost and step overhead come from the same protocol's fits (geometric mean); efficiencies
    and the minimum kernel time from the same architecture's, else the published defaults; a protocol without fits
    gets the launch cost of every fit and the defaults otherwise; no fits at all, the defaults whole."""
    from gpupred.step.physics.constants import DEFAULT, ConstantsTable

    a = DEFAULT.with_fitted({"launch_s": 40e-6, "step_overhead_s": 4e-4, "memory_eff": 0.3}, "fixture a")
    b = DEFAULT.with_fitted({"launch_s": 10e-6, "step_overhead_s": 1e-4, "memory_eff": 0.9}, "fixture b")
    table = ConstantsTable({("H200", "nvml-poll"): a, ("RTX 3090", "nvml-poll"): b})
    assert table.get("H200") is a
    hopper = table.get("H100 SXM")  # H200's architecture
    assert hopper.launch_s == pytest.approx(20e-6) and hopper.step_overhead_s == pytest.approx(2e-4)
    assert hopper.memory_eff == pytest.approx(0.3) and hopper.min_kernel_s == pytest.approx(DEFAULT.min_kernel_s)
    assert "H200, RTX 3090" in hopper.source and "of H200 (same architecture)" in hopper.source
    assert table.get("A100 40GB").memory_eff == pytest.approx(0.9)  # RTX 3090's architecture (Ampere)
    ada = table.get("L4")
    assert ada.memory_eff == DEFAULT.memory_eff and ada.launch_s == pytest.approx(20e-6)
    other = table.get("H100 SXM", "dcgm-nonzero")  # a protocol without fits: the launch cost of every fit alone
    assert other.launch_s == pytest.approx(20e-6) and other.step_overhead_s == DEFAULT.step_overhead_s
    assert other.memory_eff == DEFAULT.memory_eff and "launch cost of" in other.source
    assert ConstantsTable({}).get("H100 SXM") == DEFAULT


def test_a_launch_cost_borrowed_across_protocols_moves_between_hosts_by_their_speed() -> None:
    """FIXTURE fits on hosts of single-core score 0.5 and of an unknown one (counted as the reference's, 1.0): another
    protocol borrows their launch costs at the reference host (40 us at 0.5 is 20 us there), or at its own host's
    score when known; a protocol's own fits and its same-protocol borrowing do not move; the card keeps the score,
    an unknown one as None, and reads it back."""
    from dataclasses import replace

    from gpupred.step.physics.constants import DEFAULT, ConstantsTable, constants_from_dict

    slow = replace(DEFAULT.with_fitted({"launch_s": 40e-6}, "fixture slow host"), host_score=0.5)
    unknown = DEFAULT.with_fitted({"launch_s": 5e-6}, "fixture unknown host")
    table = ConstantsTable({("H200", "nvml-poll"): slow, ("RTX 3090", "other"): unknown})
    at_reference = table.get("A100 40GB", "dcgm-nonzero")
    assert at_reference.launch_s == pytest.approx(np.sqrt(20e-6 * 5e-6)) and "reference host" in at_reference.source
    assert table.get("A100 40GB", "dcgm-nonzero", host_score=0.25).launch_s == pytest.approx(4 * np.sqrt(20e-6 * 5e-6))
    assert table.get("H200", "nvml-poll", host_score=0.25) is slow
    assert table.get("H100 SXM", "nvml-poll", host_score=0.25).launch_s == pytest.approx(40e-6)
    assert constants_from_dict(slow.as_dict()).host_score == 0.5
    assert unknown.as_dict()["host_score"] is None and np.isnan(constants_from_dict(unknown.as_dict()).host_score)


def test_autocast_item_sizes_ignore_integer_indices_and_one_element_scales() -> None:
    """Fixture: Gemm -> Gather(int64 indices) -> Mul(one-element fp32 scale). Under bf16 the Gemm writes 16 bits,
    and neither the int64 index nor the scale widens what Gather and Mul write (torch's type promotion): each moves
    half its fp32 bytes."""
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["h"], transB=1),
             helper.make_node("Gather", ["h", "idx"], ["g"], axis=1), helper.make_node("Mul", ["g", "s"], ["y"])]
    inits = [helper.make_tensor("W", TensorProto.FLOAT, [N, K], [0.0] * (N * K)),
             helper.make_tensor("b", TensorProto.FLOAT, [N], [0.0] * N),
             helper.make_tensor("idx", TensorProto.INT64, [2], [0, 3])]
    graph = helper.make_graph(nodes, "fixture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", K]),
                                                 helper.make_tensor_value_info("s", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    g, _ = canonical_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), B)
    for precision, item in (("fp32", 4), ("bf16", 2)):
        kl = step_kernels(g, precision, "sgd")
        fwd = kl.bytes[kl.phase == 0]
        gemm = int(np.flatnonzero(kl.tensor_core[kl.phase == 0])[0])
        assert fwd[gemm + 1] == item * B * 2 + 8 * 2 + item * B * 2  # Gather: the gathered columns, the indices, g
        assert fwd[gemm + 2] == item * B * 2 + 4 + item * B * 2  # Mul: g, the fp32 scale, y


def _model(nodes: list, inputs: list, out: str, inits: list):
    graph = helper.make_graph(nodes, "fixture", inputs, [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_depthwise_convolution_runs_on_cuda_cores_at_its_own_efficiency() -> None:
    """Fixture: a depthwise 3x3 conv (weight [C, 1, 3, 3], group C) then a dense 1x1 conv. The depthwise one's
    forward, data- and weight-gradient kernels are DEPTHWISE and priced at ``depthwise_eff`` of the FP32 peak
    whatever the precision; the dense one stays a (tensor-core) CONV."""
    from gpupred.step.physics.kernels import CONV, DEPTHWISE

    C = 8
    nodes = [helper.make_node("Conv", ["x", "Wd"], ["d"], group=C, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["d"], ["r"]), helper.make_node("Conv", ["r", "Wp"], ["y"])]
    inits = [helper.make_tensor("Wd", TensorProto.FLOAT, [C, 1, 3, 3], [0.0] * (C * 9)),
             helper.make_tensor("Wp", TensorProto.FLOAT, [C, C, 1, 1], [0.0] * (C * C))]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", C, 6, 6])], "y", inits)
    kl = step_kernels(canonical_graph(m, 2)[0], "bf16", "sgd")
    assert (kl.tensor_core == DEPTHWISE).sum() == 2  # forward and weight gradient (no data gradient of x)
    assert (kl.tensor_core == CONV).sum() == 3  # the 1x1 conv: forward, data and weight gradients
    gpu = gpu_spec("H200")
    c = StepConstants(depthwise_eff=0.01, memory_eff=1.0, min_kernel_s=0.0)
    dw = np.flatnonzero(kl.tensor_core == DEPTHWISE)[0]
    t = kernel_times(kl, gpu, "bf16", c)[dw]
    expected = max(kl.flops[dw] / (gpu.tflops_fp32 * 1e12 * 0.01), kl.bytes[dw] / (gpu.mem_bw_gbs * 1e9))
    assert t == pytest.approx(expected)


def _attention_model(sdpa: bool = True) -> object:
    """Fixture: q, k, v projections of x[B, S, D], then MatMul(q * c, k^T * c) -> Softmax -> MatMul(., v): torch's
    export of ``scaled_dot_product_attention`` (both operands scaled by the square root of the scale); with
    ``sdpa=False`` hand-written attention, ``(q * scale) @ k^T``."""
    S, D = 6, 4
    nodes = [helper.make_node("MatMul", ["x", f"W{n}"], [n]) for n in "qkv"]
    nodes += [helper.make_node("Mul", ["q", "scale"], ["qs"]),
              helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1])]
    if sdpa:
        nodes += [helper.make_node("Mul", ["kt", "scale"], ["kts"]), helper.make_node("MatMul", ["qs", "kts"], ["s"])]
    else:
        nodes.append(helper.make_node("MatMul", ["qs", "kt"], ["s"]))
    nodes += [helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"])]
    inits = [helper.make_tensor(f"W{n}", TensorProto.FLOAT, [D, D], [0.0] * D * D) for n in "qkv"]
    inits.append(helper.make_tensor("scale", TensorProto.FLOAT, [1], [0.5]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", S, D])], "o", inits)


def test_an_attention_core_is_one_fused_kernel_each_way() -> None:
    """The exported scaled_dot_product_attention chain (and its scales) is one forward kernel with both MatMuls'
    FLOPs, reading q, k, v and writing the output once; backward two kernels (a preprocessing pass, 2.5x the FLOPs)."""
    from gpupred.step.physics.attention import attention_cores

    S, D = 6, 4
    m = _attention_model()
    graph, _ = canonical_graph(m, B)
    cores = attention_cores(graph)
    assert len(cores) == 1 and (cores[0].q, cores[0].k, cores[0].v, cores[0].out) == ("q", "k", "v", "o")
    assert cores[0].sdpa
    kl = step_kernels(graph, "fp32", "sgd")
    proj = step_kernels(canonical_graph(_model(m.graph.node[:3], m.graph.input, "v", m.graph.initializer[:3]), B)[0],
                        "fp32", "sgd")
    flops = 2 * (2 * B * S * S * D)  # Q K^T and P V
    fused_fwd = kl.flops[(kl.phase == 0) & (kl.tensor_core > 0)]
    assert fused_fwd[-1] == flops and kl.bytes[(kl.phase == 0) & (kl.tensor_core > 0)][-1] == 4 * 4 * B * S * D
    assert kl.counts["forward"] == 3 + 1 + 2  # projections, the fused kernel, the loss
    assert (kl.flops[kl.phase == 1] == 2.5 * flops).sum() == 1
    assert kl.counts["backward"] - proj.counts["backward"] == 2  # the fused backward (x, an input, sums no gradient)


def test_hand_written_attention_runs_as_its_ops_unless_the_setup_fuses_it() -> None:
    """Under attention='auto' only cores exported from scaled_dot_product_attention are fused: hand-written
    attention (q alone scaled) runs as its ops (scale, scores, softmax, product by V: 4 forward kernels); 'sdpa'
    fuses it, 'eager' unfuses the exported one."""
    from gpupred.step.physics.attention import attention_cores
    from gpupred.setups import setup_of

    hand, _ = canonical_graph(_attention_model(sdpa=False), B)
    export, _ = canonical_graph(_attention_model(), B)
    assert [c.sdpa for c in attention_cores(hand)] == [False]
    auto = step_kernels(hand, setup=setup_of())
    fused = step_kernels(hand, setup=setup_of(attention="sdpa"))
    assert auto.counts["forward"] == 3 + 4 + 2 and fused.counts["forward"] == 3 + 1 + 2
    eager = step_kernels(export, setup=setup_of(attention="eager"))
    assert eager.counts["forward"] == 3 + 5 + 2  # both scales, scores, softmax, product by V
    assert step_kernels(export, setup=setup_of(attention="auto")).counts["forward"] == 3 + 1 + 2


def test_gan_recipe_runs_the_discriminator_again_and_steps_two_optimizers() -> None:
    """Fixture: D(real) = Gemm(real, Wd); G(z) = Gemm(z, Wg); D(G(z)) = Gemm(G(z), Wd). The second reader of Wd is
    the shared pass; the GAN step runs it once more each way, three BCE losses and one optimizer per network, and
    pays the per-step overhead twice (two zero_grad/backward/step cycles)."""
    from gpupred.step.physics.kernels import reread_nodes

    F, Z = 12, 5
    nodes = [helper.make_node("Gemm", ["real", "Wd"], ["d_real"], transB=1),
             helper.make_node("Gemm", ["z", "Wg"], ["fake"], transB=1),
             helper.make_node("Gemm", ["fake", "Wd"], ["d_fake"], transB=1)]
    inits = [helper.make_tensor("Wd", TensorProto.FLOAT, [1, F], [0.0] * F),
             helper.make_tensor("Wg", TensorProto.FLOAT, [F, Z], [0.0] * (F * Z))]
    m = _model(nodes, [helper.make_tensor_value_info("real", TensorProto.FLOAT, ["batch", F]),
                       helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", Z])], "d_fake", inits)
    graph, _ = canonical_graph(m, B)
    assert reread_nodes(graph) == {2}
    plain, gan = step_kernels(graph, "fp32", "sgd"), step_kernels(graph, "fp32", "sgd", "gan")
    assert plain.counts["optimizer"] == 3 and gan.counts["optimizer"] == 6  # SGD's 3 foreach ops per optimizer
    assert gan.counts["forward"] == plain.counts["forward"] - 2 + 1 + 3 * 5 + 1  # D again, 3 BCE, loss_d's add
    assert gan.counts["backward"] == plain.counts["backward"] - 3 + 2 + 3 * 3  # D's data and weight grads again
    assert (plain.cycles, gan.cycles) == (1, 2)
    c = StepConstants(step_overhead_s=1e-3)
    gpu = gpu_spec("H200")
    assert simulate(gan, gpu, "fp32", c).host_s - simulate(plain, gpu, "fp32", c).host_s > 1e-3
    from gpupred.step.physics.model import kernels_for

    with pytest.raises(GpupredError):
        kernels_for(m, B, "fp32", "sgd", recipe="triple")


def test_a_batchnorm_folded_by_the_canonical_form_still_runs_in_training_mode() -> None:
    """Fixture: Conv (no bias) -> BatchNormalization (scale, shift, running statistics as weights) -> Relu. The
    canonical form folds the BatchNorm into the Conv; the step still runs it (one kernel each way, no separate
    bias add) and the optimizer steps the conv weight, the scale and the shift (3 tensors)."""
    C = 4
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    inits = [helper.make_tensor("W", TensorProto.FLOAT, [C, C, 1, 1], [0.0] * C * C)]
    inits += [helper.make_tensor(n, TensorProto.FLOAT, [C], [1.0] * C) for n in ("gamma", "beta", "mean", "var")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", C, 3, 3])], "y", inits)
    graph, _ = canonical_graph(m, B)
    assert [n[0] for n in graph.nodes] == ["Conv", "Relu"]
    kl = step_kernels(graph, setup=setup_of(channels_last=True))  # no NCHW transposes around the convolution
    out = B * C * 9 * 4
    assert kl.counts["forward"] == 3 + 2  # Conv, its BatchNorm, Relu, the loss's two
    bn = (kl.flops == 7 * B * C * 9)  # statistics, normalize, affine: 7 FLOPs an element
    assert (bn & (kl.phase == 0) & (kl.bytes == 2 * out)).sum() == 1
    assert (bn & (kl.phase == 1) & (kl.bytes == 3 * out)).sum() == 1
    assert kl.param_tensors == 3


def test_nchw_tensor_core_convolutions_transpose_unless_channels_last() -> None:
    """Fixture: one 3x3 conv over x[B, C, 6, 6] (its input a graph input: no data gradient). In NCHW a tensor-core
    convolution (16-bit, or fp32 with TF32 on, torch's cuDNN default) transposes x in and y out forward and x and dy
    in for its weight gradient, each a copy of the tensor (read + write); channels_last, or fp32 convolutions on CUDA
    cores (TF32 off), have none; neither do depthwise convolutions (CUDA cores)."""
    C = 8
    m = _model([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", C, 6, 6])], "y",
               [helper.make_tensor("W", TensorProto.FLOAT, [C, C, 3, 3], [0.0] * C * C * 9)])
    graph, _ = canonical_graph(m, B)
    t = B * C * 36  # elements of x and of y
    kinds = {}
    for name, setup in {"bf16": setup_of("bf16"), "tf32": setup_of(), "no_tf32": setup_of(tf32_conv=False),
                        "nhwc": setup_of("bf16", channels_last=True)}.items():
        kl = step_kernels(graph, setup=setup)
        transposes = kl.library & (kl.tensor_core == 0) & (kl.flops == 0)
        kinds[name] = sorted(kl.bytes[transposes].tolist())
    assert kinds["bf16"] == [2 * 2 * t] * 4 and kinds["tf32"] == [2 * 4 * t] * 4
    assert kinds["no_tf32"] == [] and kinds["nhwc"] == []
    fp32 = step_kernels(graph, setup=setup_of(tf32_conv=False))
    assert not fp32.on_tc.any() and step_kernels(graph, setup=setup_of()).on_tc.any()


def test_a_permute_that_a_reshape_needs_contiguous_is_copied_each_way() -> None:
    """Fixture: x[B, 2, 3, 4] -> Transpose(0, 2, 1, 3) -> Reshape [B, 24] -> Relu. torch's reshape of the permuted
    tensor copies it (one kernel forward, one backward); a permute read only by an elementwise op stays a view, and so
    does a swap of the last two axes before a reshape-free matmul."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, 2, 3, 4])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [B, 24])
    copy = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
                   helper.make_node("Reshape", ["t", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                  [x], "y", [shape])
    view = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]), helper.make_node("Relu", ["t"], ["y"])],
                  [x], "y", [])
    a, b = step_kernels(canonical_graph(copy, B)[0]), step_kernels(canonical_graph(view, B)[0])
    assert a.counts["forward"] == b.counts["forward"] + 1 and a.counts["backward"] == b.counts["backward"] + 1
    assert ((a.flops == 0) & (a.bytes == 2 * 4 * B * 24)).sum() == 2  # the copy each way: read + write


def test_tf32_matmuls_run_on_tensor_cores_only_when_allowed() -> None:
    """fp32 matmuls run at the FP32 CUDA-core rate under torch's default (allow_tf32 False) and at the TF32 tensor
    rate with tf32_matmul; pure bf16 runs them at the bf16 rate, with 2-byte tensors and no casts."""
    graph, _ = canonical_graph(_linear_relu(), B)
    gpu = gpu_spec("H200")
    c = StepConstants(min_kernel_s=0.0, memory_eff=1e-9 ** -1)
    plain = step_kernels(graph, setup=setup_of())
    tf32 = step_kernels(graph, setup=setup_of(tf32_matmul=True))
    pure = step_kernels(graph, setup=setup_of("bf16-pure"))
    gemm = 0
    assert not plain.on_tc[gemm] and tf32.on_tc[gemm] and pure.on_tc[gemm]
    t_plain, t_tf32, t_pure = (kernel_times(k, gpu, "fp32", c)[gemm] for k in (plain, tf32, pure))
    assert t_plain == pytest.approx(plain.flops[gemm] / (gpu.tflops_fp32 * 1e12 * c.compute_eff))
    assert t_tf32 == pytest.approx(plain.flops[gemm] / (gpu.tflops_tf32 * 1e12 * c.tensor_eff))
    assert t_pure == pytest.approx(plain.flops[gemm] / (gpu.tflops_bf16 * 1e12 * c.tensor_eff))
    assert pure.bytes[gemm] == plain.bytes[gemm] / 2 and len(pure) == len(plain)


def test_failure_classes_from_graph_traits_and_time_shares() -> None:
    """Fixture: x -> Conv 3x3 and Conv 1x1 of the same x, summed (a RepVGG branch pair), twice. Two such sums mark
    the multi-branch class; depthwise time from DEPTHWISE_SHARE and CUDA-core matmul time from SHARE of the GPU time
    mark theirs on an architecture without fits."""
    from gpupred.step.physics.caveats import DEPTHWISE_SHARE, SHARE, job_caveats, multi_branch_sums, time_shares

    C = 4
    nodes, inits, x = [], [], "x"
    for k in range(2):
        nodes += [helper.make_node("Conv", [x, f"W3_{k}"], [f"a{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Conv", [x, f"W1_{k}"], [f"b{k}"]),
                  helper.make_node("Add", [f"a{k}", f"b{k}"], [f"y{k}"])]
        inits += [helper.make_tensor(f"W3_{k}", TensorProto.FLOAT, [C, C, 3, 3], [0.0] * C * C * 9),
                  helper.make_tensor(f"W1_{k}", TensorProto.FLOAT, [C, C, 1, 1], [0.0] * C * C)]
        x = f"y{k}"
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", C, 5, 5])], x, inits)
    graph, _ = canonical_graph(m, B)
    assert multi_branch_sums(graph) == 2
    assert step_kernels(graph).traits == {"multi_branch_sums": 2.0, "eager_attention_cores": 0.0, "attention_cores": 0.0}
    assert job_caveats({"multi_branch_sums": 2}, {}, True) == ["multi_branch"]
    times = np.array([1.0, 1.0, 18.0])
    shares = time_shares(times, np.array([True, False, False]), np.array([False, True, False]))
    assert shares == {"depthwise": 0.05, "fp32_matmul": 0.05} and DEPTHWISE_SHARE > 0.05 and SHARE > 0.05
    assert job_caveats({}, shares, False) == []
    assert job_caveats({"eager_attention_cores": 3}, {"depthwise": 0.12, "fp32_matmul": 0.5}, False) == [
        "eager_attention", "depthwise_heavy", "fp32_matmul_unfitted"]
    assert job_caveats({}, {"depthwise": 0.5, "fp32_matmul": 0.5}, True) == []


def test_a_masked_sdpa_export_with_its_nan_guard_is_one_core() -> None:
    """torch's export of scaled_dot_product_attention with a float mask writes Where(IsNaN(p), 0, p) after the
    softmax (Hugging Face's sdpa attention): still one fused core, the guard inside it."""
    from gpupred.step.physics.attention import attention_cores

    S, D = 6, 4
    nodes = [helper.make_node("MatMul", ["x", f"W{n}"], [n]) for n in "qkv"]
    nodes += [helper.make_node("Mul", ["q", "scale"], ["qs"]), helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
              helper.make_node("Mul", ["kt", "scale"], ["kts"]), helper.make_node("MatMul", ["qs", "kts"], ["s"]),
              helper.make_node("Add", ["s", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
              helper.make_node("IsNaN", ["p"], ["nan"]), helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
              helper.make_node("MatMul", ["pg", "v"], ["o"])]
    inits = [helper.make_tensor(f"W{n}", TensorProto.FLOAT, [D, D], [0.0] * D * D) for n in "qkv"]
    inits += [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.7]), helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", S, D]),
              helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", S, S])]
    graph, _ = canonical_graph(_model(nodes, inputs, "o", inits), B)
    cores = attention_cores(graph)
    assert len(cores) == 1 and cores[0].sdpa and cores[0].mask == "mask"
    assert {graph.nodes[i][0] for i in cores[0].nodes} >= {"IsNaN", "Where", "Softmax", "Add"}


def test_batched_layout_is_each_runs_own_arrays() -> None:
    """BatchedRuns lays every run's kernels end to end with its own GPU's peaks and bandwidth beside them: each run's
    slice holds the run's own arrays to the bit (a run whose kernels carry no tensor-core mask at its precision's
    rate); a run with a host wait inside its step is left out of the layout."""
    from dataclasses import replace

    from gpupred.hardware import gpu_spec
    from gpupred.step.physics.batched import BatchedRuns
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.step.physics.kernels import DEPTHWISE
    from gpupred.step.physics.timeline import on_tensor_cores, peaks
    from gpupred.workloads.spec import WorkloadSpec

    ids = ["resnet.resnet18-bs32-img64-bf16-sgd", "mobilenet.mobilenet_v2-bs16-img64-fp16-adam",
           "mobilenet.mobilenet_v2-bs16-img64-fp32-adam", "lstm.lstm-v10000-e256-h512-l2-bs32-seq64-bf16-adam"]
    kernels = [spec_kernels(WorkloadSpec.from_id(wid)) for wid in ids]
    kernels[2] = replace(kernels[2], on_tc=None, library=None)
    gpus, precisions = [gpu_spec(g) for g in ("H200", "RTX 3090", "L4", "H200")], ["bf16", "fp16", "bf16", "bf16"]
    batch = BatchedRuns.build(kernels, gpus, precisions, ["step"] * 4, [False] * 4)
    assert batch.per_run.tolist() == [False, True, False, False]
    for i in (0, 2, 3):
        kl, at = kernels[i], slice(batch.starts[i], batch.starts[i] + len(kernels[i]))
        rate = kl.precision if kl.on_tc is not None else precisions[i]
        tc, fp32 = peaks(gpus[i], rate)
        library = kl.library if kl.library is not None else np.zeros(len(kl), bool)
        for got, want in ((batch.flops, kl.flops), (batch.bytes, kl.bytes), (batch.phase, kl.phase.astype(int)),
                          (batch.tc_peak, np.where(on_tensor_cores(kl, rate), tc, 0.0)),
                          (batch.fp32_peak, np.full(len(kl), fp32)), (batch.depthwise, kl.tensor_core == DEPTHWISE),
                          (batch.bandwidth, np.full(len(kl), gpus[i].mem_bw_gbs * 1e9)), (batch.library, library)):
            assert got.dtype == want.dtype and np.array_equal(got[at], want), i


def test_simulate_many_is_each_runs_simulate_to_the_bit() -> None:
    """simulate_many prices every run's kernels in one pass and gives each run simulate's answer exactly: every sync
    mode, host batches, a host input pipeline, fp16 (a GradScaler's host wait), kernels without a tensor-core mask or
    library flags, and a run without kernels; under the defaults and other constants."""
    from dataclasses import replace

    from gpupred.hardware import gpu_spec
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.step.physics.constants import DEFAULT
    from gpupred.step.physics.timeline import LoaderTimes, simulate, simulate_many
    from gpupred.workloads.spec import WorkloadSpec

    ids = ["resnet.resnet18-bs32-img64-fp32-sgd", "lstm.lstm-v10000-e256-h512-l2-bs32-seq64-bf16-adam",
           "mobilenet.mobilenet_v2-bs16-img64-fp16-adam", "mlp.mlp-w1024-d2-bs64-in784-fp32-adam"]
    lists = [spec_kernels(WorkloadSpec.from_id(wid)) for wid in ids]
    lists += [replace(lists[0], on_tc=None, library=None), replace(lists[3], flops=lists[3].flops[:0],
              bytes=lists[3].bytes[:0], tensor_core=lists[3].tensor_core[:0], phase=lists[3].phase[:0],
              sync_after=lists[3].sync_after[:0], library=lists[3].library[:0], on_tc=lists[3].on_tc[:0])]
    runs = [(kl, gpu_spec(("H200", "RTX 3090", "L4")[(k + j) % 3]), ("fp32", "bf16", "fp16", "fp32", "bf16", "fp32")[k],
             sync, j == 1, LoaderTimes(2e-3, 1e-4, 2, 4.0) if j == 2 else None)
            for k, kl in enumerate(lists) for j, sync in enumerate(("step", "window", "kernel"))]
    for c in (DEFAULT, replace(DEFAULT, launch_s=40e-6, tensor_eff=0.3, min_kernel_s=7e-6, step_overhead_s=3e-4)):
        many = simulate_many(*[[r[j] for r in runs] for j in range(3)], c, *[[r[j] for r in runs] for j in (3, 4, 5)])
        assert many == [simulate(kl, gpu, prec, c, sync, host, loader) for kl, gpu, prec, sync, host, loader in runs]
    assert simulate_many([], [], [], DEFAULT, [], []) == []


def test_batched_timeline_is_the_per_run_timeline() -> None:
    """BatchedRuns (every run's kernels at once: what the constants fit evaluates) gives simulate's answers for store
    graphs of several kinds, every sync mode, host batches, 16-bit and fp16 (a GradScaler sync: the per-run path),
    on two GPUs and two sets of constants."""
    from dataclasses import replace

    from gpupred.hardware import gpu_spec
    from gpupred.step.physics.constants import DEFAULT
    from gpupred.step.physics.timeline import simulate
    from gpupred.step.physics.batched import BatchedRuns
    from gpupred.step.physics.columns import spec_kernels
    from gpupred.workloads.spec import WorkloadSpec

    ids = ["resnet.resnet18-bs32-img64-fp32-sgd", "lstm.lstm-v10000-e256-h512-l2-bs32-seq64-bf16-adam",
           "mobilenet.mobilenet_v2-bs16-img64-fp16-adam", "mlp.mlp-w1024-d2-bs64-in784-fp32-adam"]
    runs = []
    for k, wid in enumerate(ids):
        spec = WorkloadSpec.from_id(wid)
        for sync in ("step", "window", "kernel"):
            runs.append((spec_kernels(spec), gpu_spec(("H200", "RTX 3090")[k % 2]), spec.precision, sync, k == 1))
    kernels, gpus, precisions, syncs, hosts = (list(x) for x in zip(*runs))
    batch = BatchedRuns.build(kernels, gpus, precisions, syncs, hosts)
    assert batch.per_run.sum() == 3  # the fp16 runs (GradScaler's sync) take the per-run path
    for c in (DEFAULT, replace(DEFAULT, launch_s=40e-6, tensor_eff=0.3, min_kernel_s=7e-6, step_overhead_s=3e-4)):
        util, step = batch.simulate(c, kernels, gpus, precisions, syncs, hosts)
        for i, (kl, gpu, prec, sync, host) in enumerate(runs):
            est = simulate(kl, gpu, prec, c, sync, host)
            assert step[i] == pytest.approx(est.step_s, rel=1e-9) and util[i] == pytest.approx(est.util, rel=1e-9), i


def test_kept_kernel_lists_are_bounded_by_their_kernels_not_their_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """kernels_for keeps lists (a hit returns the same one) until more than KERNELS_KEPT kernels are kept, then drops
    the least recently used: the fixture's lists, at 2 and 4 batch sizes' worth of room."""
    from collections import OrderedDict

    from gpupred.step.physics import model

    monkeypatch.setattr(model, "_KERNELS", OrderedDict())
    monkeypatch.setattr(model, "_kept", 0)
    m = _linear_relu()
    first = model.kernels_for(m, 4, "fp32", "sgd", key="fixture")
    monkeypatch.setattr(model, "KERNELS_KEPT", 2 * len(first))
    assert model.kernels_for(m, 4, "fp32", "sgd", key="fixture") is first  # kept
    second = model.kernels_for(m, 8, "fp32", "sgd", key="fixture")
    assert len(model._KERNELS) == 2 and model._kept == len(first) + len(second)
    model.kernels_for(m, 4, "fp32", "sgd", key="fixture")  # batch 4 used last: batch 8 is the oldest now
    model.kernels_for(m, 16, "fp32", "sgd", key="fixture")
    assert [k[2] for k in model._KERNELS] == [4, 16] and model._kept == sum(len(v) for v in model._KERNELS.values())
    assert model.kernels_for(m, 4, "fp32", "sgd", key="fixture") is first
    assert model.kernels_for(m, 8, "fp32", "sgd", key="fixture") is not second  # dropped, made again
    monkeypatch.setattr(model, "KERNELS_KEPT", 0)
    model.kernels_for(m, 32, "fp32", "sgd", key="fixture")
    assert len(model._KERNELS) == 1  # the newest list always stays
