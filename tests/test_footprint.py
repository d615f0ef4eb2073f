"""The analytic memory footprint and its learned correction, on hand-built graphs and FIXTURE frames (never data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from onnx import TensorProto, helper

from gpupred.errors import GpupredError
from gpupred.memory.physics import (
    MIB, REFERENCE_VARYING_MIB, WORKSPACE_MIB, Footprint, allocated_mib, allocator_reserve_mib, fit_allocator_law,
    fit_context_allocator, footprint_mib, footprint_terms, graph_terms, steady_varying, term_sizes,
)
from gpupred.memory.estimator import BEST, MemoryEstimator
from gpupred.memory.correction import CORRECTION_CLIP
from gpupred.setups import setup_of


def _attention_graph() -> object:
    """FIXTURE graph: x[2,4,8] -> Q,K (MatMul with weights) -> Transpose(K) -> scores=MatMul -> Mul(scale) ->
    Softmax -> MatMul(V=x) -> LayerNormalization -> out; plus BatchNormalization -> Relu on a second input."""
    f = TensorProto.FLOAT
    inits = [helper.make_tensor(n, f, [8, 8], [0.1] * 64) for n in ("wq", "wk")]
    inits += [helper.make_tensor("s", f, [], [0.5]), helper.make_tensor("g", f, [8], [1.0] * 8),
              helper.make_tensor("b", f, [8], [0.0] * 8)]
    inits += [helper.make_tensor(n, f, [3], [1.0] * 3) for n in ("bn_s", "bn_b", "bn_m", "bn_v")]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), helper.make_node("MatMul", ["q", "kt"], ["sc"]),
        helper.make_node("Mul", ["sc", "s"], ["ss"]), helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["o"]),
        helper.make_node("LayerNormalization", ["o", "g", "b"], ["y"], axis=-1),
        helper.make_node("BatchNormalization", ["z", "bn_s", "bn_b", "bn_m", "bn_v"], ["zn"]),
        helper.make_node("Relu", ["zn"], ["zr"]),
    ]
    graph = helper.make_graph(nodes, "fixture-attention", [
        helper.make_tensor_value_info("x", f, [2, 4, 8]), helper.make_tensor_value_info("z", f, [2, 3, 5, 5])],
        [helper.make_tensor_value_info("y", f, [2, 4, 8]), helper.make_tensor_value_info("zr", f, [2, 3, 5, 5])],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_graph_terms_by_hand() -> None:
    t = graph_terms(_attention_graph(), batch_size=2)
    # q, k: 2*4*8 = 64 each; scores sc, scaled ss, softmax p: 2*4*4 = 32 each; o, y: 64 each; zn, zr: 2*3*5*5 = 150
    # kept for backward: q and k (read by the QK^T MatMul; kt is a view of k), p (the Softmax saves its output; the
    # second MatMul reads it), o (LayerNorm's input), zr (the Relu saves its output). Not kept: sc (the Mul by a
    # one-element scale saves nothing of it, as torch's mul by a scalar), ss (Softmax saves no input), zn (the Relu
    # saves no input), kt (a view), y (a graph output no op saves: the loss's own buffers are the loss term).
    assert t["saved_elems"] == 64 + 64 + 32 + 64 + 150
    # under autocast (torch's CUDA lists), each saved tensor once at the dtype torch saves it in: q and k in 16 bits
    # (MatMul outputs the QK^T MatMul saves); p in fp32 (the Softmax saves it) and its 16-bit copy (the p x V MatMul
    # saves that); o's fp32 copy, which the LayerNormalization casts it to and saves (the 16-bit o is saved by
    # nobody); zr in fp32 (the BatchNormalization of the fp32 graph input z runs in fp32; the Relu saves its output)
    assert t["half_elems"] == 64 + 64 + 32
    assert t["fp32_elems"] == 32 + 64 + 150
    assert t["index_elems"] == 0 and t["output_elems"] == 64 + 150
    # hand-written attention (the scores scaled, not Q and K: no scaled_dot_product_attention export) runs as its
    # ops under the default attention='auto': no score a fused kernel would skip
    assert t["softmax_elems"] == 0 and t["attention_elems"] == 0
    fused = graph_terms(_attention_graph(), batch_size=2, setup=setup_of(attention="sdpa"))
    assert fused["softmax_elems"] == 32
    assert fused["attention_elems"] == 0  # of the scores chain (sc, ss, kt), none is kept
    assert fused["fused_fp32_elems"] == 32 and fused["fused_half_elems"] == 32  # p and its copy: neither written
    assert t["fused_fp32_elems"] == t["fused_half_elems"] == 0
    assert fused["saved_elems"] == t["saved_elems"]


def test_products_by_constants_and_silu_keep_what_torch_keeps() -> None:
    """FIXTURE graph, a rotary-like product and a SiLU: x[2,4,8] -> MatMul(wq) -> q -> Mul(q, cos: a Constant, as the
    positions' cos and sin fold) -> qc -> MatMul(wk) -> h -> h * Sigmoid(h) -> y. Torch keeps qc (the second MatMul's
    input) and h (SiLU's input: the two ops are one Swish), 64 elements each; not q (a product by a tensor needing no
    gradient saves only that tensor), not the sigmoid (torch's SiLU saves no output) and not y (a graph output)."""
    f = TensorProto.FLOAT
    inits = [helper.make_tensor(n, f, [8, 8], [0.1] * 64) for n in ("wq", "wk")]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("Constant", [], ["cos"], value=helper.make_tensor("v", f, [4, 8], [0.5] * 32)),
             helper.make_node("Mul", ["q", "cos"], ["qc"]), helper.make_node("MatMul", ["qc", "wk"], ["h"]),
             helper.make_node("Sigmoid", ["h"], ["s"]), helper.make_node("Mul", ["h", "s"], ["y"])]
    graph = helper.make_graph(nodes, "fixture-rotary-silu", [helper.make_tensor_value_info("x", f, [2, 4, 8])],
                              [helper.make_tensor_value_info("y", f, [2, 4, 8])], initializer=inits)
    t = graph_terms(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), batch_size=2)
    assert t["saved_elems"] == 2 * 64 and t["output_elems"] == 64


def test_checkpointed_keeps_the_earliest_of_equal_blocks_in_every_process() -> None:
    """FIXTURE: three equal blocks of kept tensors; the recomputed block is the earliest, whatever order the set of
    kept tensors iterates in (it follows the string hash, which changes from one process to the next)."""
    import subprocess
    import sys

    code = ("from types import SimpleNamespace as N\n"
            "from gpupred.memory.physics import checkpointed\n"
            "names = [f'b{k}t{i}' for k in range(3) for i in range(4)]\n"
            "cg = N(nodes=[['Relu', '', [t], []] for t in names], graph_inputs=[])\n"  # each read inside its block
            "blocks = ([N(inputs=[], nodes=range(4 * k, 4 * k + 4)) for k in range(3)], {t: int(t[1]) for t in names})\n"
            "print(sorted(checkpointed(cg, set(names), {t: 8 for t in names}, blocks)))\n")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(4)}
    assert seen == {str([f"b0t{i}" for i in range(4)]) + "\n"}


def _row(**kw: object) -> pd.DataFrame:
    base = {"param_bytes": 4 * MIB, "activation_bytes": 10 * MIB, "input_bytes": 1 * MIB, "precision": "fp32",
            "optimizer": "adam", "gpu": "NVIDIA H200", "source": "gpupred"}
    return pd.DataFrame([{**base, **kw}])


def test_footprint_terms_by_hand() -> None:
    t = footprint_terms(_row()).iloc[0]
    # no graph terms: activations are the feature row's activation_bytes
    assert dict(t) == {"weights": 4, "gradients": 4, "optimizer": 8, "optimizer_step": 0, "autocast_copies": 0,
                       "activations": 10, "loss": 0, "inputs": 1, "workspace": WORKSPACE_MIB}
    row = _row(precision="bf16", optimizer="sgd", saved_elems=1 * MIB, fp32_elems=0.25 * MIB, half_elems=0.875 * MIB,
               softmax_elems=0.125 * MIB, attention_elems=0.25 * MIB, fused_fp32_elems=0.125 * MIB,
               fused_half_elems=0.375 * MIB, output_elems=0.5 * MIB, index_elems=0.0)
    t = footprint_terms(row).iloc[0]
    assert t["optimizer"] == 4 and t["autocast_copies"] == 2  # momentum: one buffer; 16-bit weight copies: p / 2
    # 2 B x 0.875 Mi saved in 16 bits + 4 B x 0.25 Mi in fp32, less fused attention's 4 x 0.125 + 2 x 0.375
    assert t["activations"] == pytest.approx(1.75 + 1.0 - 0.5 - 0.75)
    assert t["loss"] == pytest.approx(0.5 * 4 * 3)  # fp32 upcast + log_softmax output + its gradient
    # Lucid's protocol ran without fused attention: the scores stay
    assert footprint_terms(row, "lucid").iloc[0]["activations"] == pytest.approx(2.75)
    # fp32 and pure bf16 count every saved tensor once, at 4 and 2 bytes; fused attention's at the same width
    assert footprint_terms(_row(**{**row.iloc[0].to_dict(), "precision": "fp32"})).iloc[0]["activations"] == \
        pytest.approx(4.0 - 4 * 0.375)
    assert footprint_terms(_row(**{**row.iloc[0].to_dict(), "precision": "bf16-pure"})).iloc[0]["activations"] == \
        pytest.approx(2.0 - 2 * 0.375)
    with pytest.raises(GpupredError, match="optimizer"):
        footprint_terms(_row(optimizer="lion"))
    with pytest.raises(GpupredError, match="param_bytes"):
        footprint_terms(_row().drop(columns=["param_bytes"]))


def _mlp_graph(hidden: int = 4, out: int = 16) -> object:
    """FIXTURE graph: x[B,4] -> MatMul w1[4,hidden] -> Relu -> MatMul w2[hidden,out] -> out."""
    f = TensorProto.FLOAT
    inits = [helper.make_tensor("w1", f, [4, hidden], [0.1] * 4 * hidden),
             helper.make_tensor("w2", f, [hidden, out], [0.1] * hidden * out)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["out"])]
    graph = helper.make_graph(nodes, "fixture-mlp", [helper.make_tensor_value_info("x", f, ["batch", 4])],
                              [helper.make_tensor_value_info("out", f, ["batch", out])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_gradients_live_at_the_backward_peak() -> None:
    # kept: r (the Relu's output, 2x4 = 8); not out (the graph output, 2x16 = 32: no op saves it); w1 (16) is read
    # first, w2 (64) last. Backward: first the loss's 3 fp32 buffers of out's size (96) beside r, no gradient: 104;
    # then node by node (gradients of the parameters read there or later + kept tensors first read there or before,
    # + the logits' gradient while the node that wrote out runs): MatMul w2: 64 + 8 + 32; Relu: 64 + 8; MatMul w1:
    # 80 + 0. The peak, 104, is the loss's: no gradient beyond the activations and the loss buffers (it was 72 while
    # the buffers were added to every node's); with a gradient and a loss element worth 2 activation elements
    # (autocast): 8 + 192 at the loss, 160 at MatMul w1: none either
    t = graph_terms(_mlp_graph(), batch_size=2)
    assert t["saved_elems"] == 8 and t["output_elems"] == 32
    assert t["peak_grad_elems"] == 0 and t["peak_grad_elems_half"] == 0
    # wide and few logits: r is 2x32 = 64, w1 128 (read first), w2 64, out 2x2 = 4. The loss: 64 + 12 = 76; MatMul
    # w2: 64 + 64 + 4; Relu: 64 + 64; MatMul w1: 192 + 0, the peak: 116 gradient elements beyond 64 + 12; autocast:
    # 88 at the loss, 2 x 192 = 384 at MatMul w1, (384 - 88) / 2 = 148
    wide = graph_terms(_mlp_graph(hidden=32, out=2), batch_size=2)
    assert wide["saved_elems"] == 64 and wide["output_elems"] == 4
    assert wide["peak_grad_elems"] == 116 and wide["peak_grad_elems_half"] == 148


def test_peak_is_the_backward_or_the_optimizer_step() -> None:
    # the gradients live at the backward's peak come from the graph terms, at most all of them
    big = _row(param_bytes=100 * MIB, saved_elems=2.5 * MIB, peak_grad_elems=1 * MIB, peak_grad_elems_half=1 * MIB)
    t = footprint_terms(big).iloc[0]
    # foreach Adam: backward 10 MiB of activations + 4 MiB of gradients < the step's 100 MiB of gradients + the
    # 100 MiB square root of the second moment: the peak is the optimizer step, the activations freed
    assert t["gradients"] == 100 and t["optimizer_step"] == 100 and t["activations"] == 0
    assert t["weights"] == 100 and t["optimizer"] == 200
    fused = footprint_terms(big.assign(optimizer_impl="fused")).iloc[0]  # no temporaries: still the step (100 > 14)
    assert fused["optimizer_step"] == 0 and fused["gradients"] == 100 and fused["activations"] == 0
    small = footprint_terms(_row(saved_elems=2.5 * MIB, peak_grad_elems=0.5 * MIB, peak_grad_elems_half=0.5 * MIB))
    assert small.iloc[0]["gradients"] == 2 and small.iloc[0]["activations"] == 10  # the backward: 2 of 4 MiB live
    # gradient accumulation keeps every gradient through the forward
    assert footprint_terms(_row(saved_elems=2.5 * MIB, peak_grad_elems=0.5 * MIB, peak_grad_elems_half=0.5 * MIB,
                                accumulation=4)).iloc[0]["gradients"] == 4
    # under checkpointing autocast's copies are gone by the backward: its peak holds the gradients or the copies
    half = dict(precision="bf16", optimizer="adamw", optimizer_impl="fused", saved_elems=2.5 * MIB,
                half_elems=2.5 * MIB, fp32_elems=0.0, peak_grad_elems=0.75 * MIB, peak_grad_elems_half=0.75 * MIB)
    assert footprint_terms(_row(**half)).iloc[0][["autocast_copies", "gradients"]].tolist() == [2, 3]
    ckpt = footprint_terms(_row(**half, checkpointing=True)).iloc[0]
    assert ckpt["autocast_copies"] == 0 and ckpt["gradients"] == 3 and ckpt["activations"] == 5
    copies = footprint_terms(_row(**{**half, "peak_grad_elems_half": 0.25 * MIB}, checkpointing=True)).iloc[0]
    assert copies["autocast_copies"] == 2 and copies["gradients"] == 0  # the forward's end: copies, no gradient
    # SGD's weight decay adds to a copy of the gradients (foreach); AdamW's decoupled decay does not
    sgd = _row(param_bytes=100 * MIB, optimizer="sgd", weight_decay=1e-4, peak_grad_elems=0.0, saved_elems=0.0)
    assert footprint_terms(sgd).iloc[0]["optimizer_step"] == 100
    assert footprint_terms(sgd.assign(optimizer="adamw")).iloc[0]["optimizer_step"] == 100  # its square root only
    assert footprint_terms(sgd.assign(weight_decay=0.0)).iloc[0]["optimizer_step"] == 0


def test_allocator_reserve_grows_on_the_varying_terms_only() -> None:
    row = _row(param_bytes=100 * MIB, optimizer="sgd", saved_elems=0.0, peak_grad_elems=0.0)
    fitted = Footprint(context_mib={"H200|gpupred": 500.0}, allocator={"H200|gpupred": 1.5})
    # weights 100 + momentum 100 + inputs 1 + workspace held as they are; gradients 100 and activations 10 x 1.5
    steady = 100 + 100 + 1 + WORKSPACE_MIB
    t = footprint_terms(row).iloc[0]
    assert t["gradients"] == 100 and t["activations"] == 0  # sgd without decay: the step's 100 > the backward's 10
    assert fitted.predict(row)[0] == pytest.approx(500 + steady + 1.5 * 100)


def test_footprint_defaults_and_fit() -> None:
    # defaults: the H200's measured 619 MiB context, allocator ratio 1
    assert footprint_mib({"param_bytes": 4 * MIB, "activation_bytes": 10 * MIB, "input_bytes": MIB}, "NVIDIA H200",
                         "fp32", "adam") == pytest.approx(619 + 4 + 4 + 8 + 10 + 1 + WORKSPACE_MIB)
    rng = np.random.default_rng(0)
    varying = rng.uniform(100, 20000, 60)
    allocated = varying + rng.uniform(0, 5000, 60)
    reserved = allocated + 0.15 * REFERENCE_VARYING_MIB * (varying / REFERENCE_VARYING_MIB) ** 0.8
    ratio, exponent = fit_allocator_law(varying, allocated, reserved)
    assert ratio == pytest.approx(1.15, rel=1e-3) and exponent == pytest.approx(0.8, abs=1e-3)
    ctx, linear = fit_context_allocator(varying, 900 + 1.2 * varying)
    assert ctx == pytest.approx(900, rel=0.02) and linear == pytest.approx(1.2, rel=0.01)


def test_allocator_reserve_grows_with_the_varying_terms_by_its_exponent() -> None:
    v = np.array([0.0, 512.0, 1024.0, 8192.0])
    assert allocator_reserve_mib(v, 1.2, 1.0) == pytest.approx(0.2 * v)  # exponent 1: the ratio on every MiB
    sub = allocator_reserve_mib(v, 1.2, 0.75)
    assert sub[2] == pytest.approx(0.2 * 1024) and sub[0] == 0  # the ratio holds at 1 GiB
    assert sub[3] < 0.2 * 8192 and sub[1] > 0.2 * 512  # slower than the bytes above it, faster below


def test_footprint_fits_each_constant_on_the_figure_it_is() -> None:
    # FIXTURE rows (never data): torch's peaks from a known allocator law, NVML's figure a known context above them;
    # a second source without torch's peaks: its context and a ratio on every varying MiB, on NVML's figure
    df = _fixture_frame(40).drop(columns="memory_mib")
    steady, varying = steady_varying(footprint_terms(df))
    reserve = allocator_reserve_mib(varying, 1.18, 0.8)
    df["torch_peak_allocated_mib"] = steady + varying
    df["torch_peak_reserved_mib"] = steady + varying + reserve
    df["memory_mib"] = 760.0 + df["torch_peak_reserved_mib"]
    other = df.assign(source="lucid", memory_mib=2100.0 + steady + 1.3 * varying,
                      torch_peak_allocated_mib=np.nan, torch_peak_reserved_mib=np.nan)
    fitted = Footprint().fit(pd.concat([df, other], ignore_index=True))
    c = fitted.constants()
    assert c["H200|gpupred"] == pytest.approx({"context_mib": 760.0, "allocator": 1.18, "allocator_exponent": 0.8},
                                              abs=2e-3)
    assert c["H200|lucid"] == pytest.approx({"context_mib": 2100.0, "allocator": 1.3, "allocator_exponent": 1.0},
                                            rel=2e-3)
    assert fitted.predict(df) == pytest.approx(df["memory_mib"].to_numpy(), rel=1e-5)


def _fixture_frame(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """FIXTURE rows from a toy formula (never data): memory = 700 + 1.1 x allocated, times a family factor."""
    rng = np.random.default_rng(seed)
    fams = np.array(["fa", "fb", "fc", "fd"])[np.arange(n) % 4]
    df = pd.DataFrame({
        "run_id": [f"fixture-{i}" for i in range(n)], "workload_id": [f"w{i}" for i in range(n)], "family": fams,
        "param_bytes": rng.uniform(5, 200, n) * MIB, "activation_bytes": rng.uniform(50, 3000, n) * MIB,
        "input_bytes": rng.uniform(0, 20, n) * MIB, "precision": np.where(np.arange(n) % 2, "bf16", "fp32"),
        "optimizer": np.where(np.arange(n) % 3, "adam", "sgd"), "gpu": "NVIDIA H200", "source": "gpupred",
        "is_bf16": (np.arange(n) % 2).astype(float), "is_adam": (np.arange(n) % 3 > 0).astype(float)})
    factor = pd.Series(fams).map({"fa": 1.0, "fb": 1.1, "fc": 0.95, "fd": 1.05}).to_numpy()
    df["memory_mib"] = (700 + 1.1 * allocated_mib(df)) * factor * rng.uniform(0.98, 1.02, n)
    return df


def test_the_estimates_footprint_and_torch_figures_are_the_footprints_own() -> None:
    """The estimator's footprint column is :meth:`Footprint.predict` to the bit, and its torch figures differ by the
    context and the allocator's reserve alone (FIXTURE rows with torch's peaks, so the law is fitted)."""
    df = _fixture_frame(40)
    steady, varying = steady_varying(footprint_terms(df))
    df["torch_peak_allocated_mib"] = steady + varying
    df["torch_peak_reserved_mib"] = steady + varying + allocator_reserve_mib(varying, 1.2, 0.75)
    model = MemoryEstimator().fit(df)
    parts = model.explain(df)
    assert np.array_equal(parts.figures["footprint"], model.footprint_.predict(df))
    reserve = parts.figures["reserved"] - parts.figures["allocated"]
    assert reserve == pytest.approx((parts.ratio - 1.0) * parts.varying, rel=1e-9)
    assert parts.figures["footprint"] == pytest.approx(parts.context + parts.figures["reserved"], rel=1e-9)
    assert 0.7 < model.footprint_.constants()["H200|gpupred"]["allocator_exponent"] < 0.8


def test_prediction_exceeds_largest_label_for_a_bigger_model() -> None:
    train = _fixture_frame()
    model = MemoryEstimator().fit(train)
    big = train.loc[[train["memory_mib"].idxmax()]].copy()
    for col in ("param_bytes", "activation_bytes", "input_bytes"):
        big[col] *= 4
    pred = model.predict(big)
    assert pred[BEST].iloc[0] > train["memory_mib"].max() * 2  # ~4x the allocation, not capped at the largest label
    assert pred["low"].iloc[0] < pred[BEST].iloc[0] < pred["high"].iloc[0]
    factor = pred[BEST].iloc[0] / pred["footprint"].iloc[0]
    assert np.exp(-CORRECTION_CLIP) - 1e-9 <= factor <= np.exp(CORRECTION_CLIP) + 1e-9


def test_unmeasured_gpu_gets_wider_intervals() -> None:
    model = MemoryEstimator().fit(_fixture_frame())
    row = _fixture_frame(4, seed=1)
    seen = model.predict(row)
    other = model.predict(row.assign(gpu="NVIDIA A100-SXM4-40GB"))
    assert ((other["high"] / other[BEST]) > (seen["high"] / seen[BEST])).all()
    assert set(model.halfwidth_) == {"gpupred"} and 0 < model.halfwidth_["gpupred"] < 0.5


def test_onnx_footprint_matches_the_terms() -> None:
    from gpupred.memory.physics import onnx_footprint_mib

    graph = _attention_graph()
    mib = onnx_footprint_mib(graph, 2, "fp32", "sgd", "NVIDIA H200")
    # params: wq, wk (64 each), the scalar s, LayerNorm's 8 + 8, BatchNorm's 3 + 3 (scale, bias); plain SGD with
    # momentum: weights + gradients + one buffer
    params = (64 + 64 + 1 + 8 + 8 + 3 + 3) * 4 / MIB
    t = graph_terms(graph, 2)
    act = 4 * t["saved_elems"] / MIB  # fp32; hand-written attention keeps its scores
    inputs = (64 + 150) * 4 / MIB
    loss = 2 * 4 * t["output_elems"] / MIB
    assert mib == pytest.approx(619 + 3 * params + act + loss + inputs + WORKSPACE_MIB, rel=1e-6)


def test_conv_batchnorm_relu_maxpool_by_hand() -> None:
    """FIXTURE graph x[1,1,4,4] -> Conv 3x3 (pad 1) -> BatchNormalization -> Relu -> MaxPool 2x2 -> y[1,1,2,2]."""
    f = TensorProto.FLOAT
    inits = [helper.make_tensor("w", f, [1, 1, 3, 3], [0.1] * 9)]
    inits += [helper.make_tensor(n, f, [1], [1.0]) for n in ("bs", "bb", "bm", "bv")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bs", "bb", "bm", "bv"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "fixture-cbrp", [helper.make_tensor_value_info("x", f, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", f, [1, 1, 2, 2])], initializer=inits)
    t = graph_terms(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), batch_size=1)
    # BatchNorm folds into the Conv, whose 16-element output training-mode BatchNorm keeps; the Relu keeps its
    # 16-element output (MaxPool reads it); not the 4-element graph output (no op saves it); MaxPool's argmax
    # indices: 4
    assert t["saved_elems"] == 16 + 16 and t["index_elems"] == 4 and t["fp32_elems"] == 0
    row = _row(saved_elems=t["saved_elems"], index_elems=t["index_elems"])
    assert term_sizes(row).iloc[0]["activations"] == pytest.approx((4 * 32 + 8 * 4) / MIB)


def test_a_new_gpu_takes_its_sources_constants() -> None:
    fitted = Footprint(context_mib={"H200|gpupred": 700.0, "A100 40GB|lucid": 1500.0},
                       allocator={"H200|gpupred": 1.2, "A100 40GB|lucid": 1.4})
    row = _row(gpu="NVIDIA A100-SXM4-40GB")  # allocated: 4 + 4 + 8 + 10 + 1 + workspace
    allocated = 27 + 2 * 8.125  # two cuBLAS workspaces of 8 MiB + 128 KiB off Hopper
    varying = 4 + 10  # gradients and activations: the allocator's reserve grows on these alone
    # local memory: 1 KiB for each of 2,048 threads on each of 108 SMs (A100), 132 SMs (H200)
    a100, h200 = 108 * 2048 / 1024, 132 * 2048 / 1024
    # this project's protocol, fitted on an H200: its software share (700 - H200's local memory) + the A100's
    assert fitted.predict(row)[0] == pytest.approx(700 - h200 + a100 + allocated + 0.2 * varying)
    # a protocol without fits: the mean software share of every fit, the A100's local memory
    share = ((700 - h200) + (1500 - a100)) / 2
    assert fitted.predict(row.assign(source="gpumemnet"))[0] == pytest.approx(share + a100 + allocated)
    # no fit at all: the sweeps' software share (619 MiB measured on the H200, less its local memory)
    assert Footprint().predict(row)[0] == pytest.approx(619 - h200 + a100 + allocated)


def test_checkpointing_keeps_the_largest_of_three_phases() -> None:
    """FIXTURE terms (MiB, hand-made): under checkpointing the forward's end (activations outside the recomputed
    block, every weight copy, one logits buffer), the loss's backward (the same activations, the frozen weights'
    copies, the loss buffers) or the recomputed block's backward (every activation, its copies, the gradients then),
    whichever is largest; a row without checkpointing is left as it was."""
    from gpupred.memory.physics import checkpoint_phases

    def phase(block: float, copies: float, cast: float, held: float, ckpt: bool = True) -> dict[str, float]:
        t = {"activations": np.array([100.0]), "autocast_copies": np.array([cast]), "loss": np.array([60.0]),
             "recompute": np.array([block]), "recompute_copies": np.array([copies]), "held_copies": np.array([held])}
        grads = checkpoint_phases(t, np.array([5.0]), np.array([ckpt]))
        assert set(t) == {"activations", "autocast_copies", "loss"}
        return {**{k: float(v[0]) for k, v in t.items()}, "gradients": float(grads[0])}

    # forward's end 20 + 90 + 20 = 130 against the loss's 20 + 10 + 60 = 90 and the block's 100 + 10 + 5 = 115
    assert phase(80.0, 10.0, 90.0, 10.0) == {"activations": 20.0, "autocast_copies": 90.0, "loss": 20.0,
                                             "gradients": 0.0}
    # the loss's 20 + 50 + 60 = 130 against 20 + 50 + 20 = 90 and 100 + 10 + 5 = 115
    assert phase(80.0, 10.0, 50.0, 50.0) == {"activations": 20.0, "autocast_copies": 50.0, "loss": 60.0,
                                             "gradients": 0.0}
    # the block's 100 + 40 + 5 = 145 against 20 + 10 + 20 = 50 and 20 + 0 + 60 = 80
    assert phase(80.0, 40.0, 10.0, 0.0) == {"activations": 100.0, "autocast_copies": 40.0, "loss": 0.0,
                                            "gradients": 5.0}
    assert phase(80.0, 40.0, 10.0, 0.0, ckpt=False) == {"activations": 100.0, "autocast_copies": 10.0, "loss": 60.0,
                                                        "gradients": 5.0}
