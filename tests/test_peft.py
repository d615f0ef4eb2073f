"""LoRA, QLoRA and the bitsandbytes/transformers optimizers (gpupred.finetune, the footprint's parameter terms, the
step kernels, the CLI's flags). Graphs here are FIXTURES built with onnx.helper: a stack of named Linear weights."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

from gpupred import finetune
from gpupred.errors import GpupredError
from gpupred.finetune import alloc, nf4_bytes, optimizer_state_bytes, parameter_terms, read_adapter_config
from gpupred.setups import setup_of

B, SIZES = 4, (64, 128, 128, 32)  # x [4, 64] -> l1 -> h1 [4, 128] -> l2 -> h2 [4, 128] -> l3 -> logits [4, 32]


def _stack(names: tuple[str, ...] = ("l1.weight", "l2.weight", "l3.weight")) -> onnx.ModelProto:
    """A FIXTURE: three bias-free Linear layers as MatMuls on named [in, out] weights."""
    inits, nodes, prev = [], [], "x"
    for k, name in enumerate(names):
        shape = (SIZES[k], SIZES[k + 1])
        inits.append(helper.make_tensor(name, TensorProto.FLOAT, shape, np.zeros(shape, np.float32).ravel()))
        out = f"h{k + 1}" if k < len(names) - 1 else "logits"
        nodes.append(helper.make_node("MatMul", [prev, name], [out]))
        prev = out
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def cg() -> object:
    from gpupred.graph.loader import cached_graph

    return cached_graph(_stack(), B)[0].form(True)


def test_lora_terms_by_hand(cg: object) -> None:
    # fp32, LoRA r=4 on l2 only: adapters A (4 x 128) and B (128 x 4), fp32; l1, l2, l3 frozen
    t = parameter_terms(cg, setup_of("fp32", "adamw", lora_rank=4, lora_targets=("l2",)), "stack")
    base = 64 * 128 * 4 + 128 * 128 * 4 + 128 * 32 * 4  # 32768 + 65536 + 16384: each a multiple of 512 already
    adapters = 512 * 4 + 512 * 4
    assert t["weight_bytes"] == base + adapters
    assert t["grad_bytes"] == adapters and t["state_bytes"] == 2 * adapters  # AdamW: two fp32 moments
    assert t["copy_bytes"] == 0.0 and t["transient_bytes"] == 0.0  # no autocast, nothing quantized
    # h1 stays saved (l2's adapter A reads it); h2 is read only by the frozen l3, so nothing keeps it: -512 x 4 bytes;
    # B keeps A h1: 4 rows x r 4 x 4 bytes
    assert t["act_delta_bytes"] == 4 * 4 * 4 - 512 * 4


def test_qlora_terms_by_hand(cg: object) -> None:
    t = parameter_terms(cg, setup_of("bf16", "adamw", lora_rank=4, lora_targets=("l2",), qlora=True), "stack")
    # l1 (8,192 weights) and l2 (16,384) in NF4: packed codes, uint8 absmax per 64, fp32 absmax per 256 blocks, an
    # fp32 offset, the 16-entry code and the copy of the 256-entry second-level code (1 KiB), each allocation rounded
    # to 512 bytes; l3 is the head: kept in fp32
    assert nf4_bytes(8192) == 4096 + 4 * 512 + 1024 and nf4_bytes(16384) == 8192 + 4 * 512 + 1024
    adapters = 2 * 512 * 4
    assert t["weight_bytes"] == nf4_bytes(8192) + nf4_bytes(16384) + 128 * 32 * 4 + adapters
    assert t["copy_bytes"] == 2 * (128 * 32) + 2 * 1024  # l3's bf16 copy (held for its input gradient), the adapters'
    assert t["dequant_bytes"] == 2 * 16384 and t["transient_bytes"] == 0.0  # l2 dequantized to bf16, one at a time
    assert t["act_delta_bytes"] == 4 * 4 * 2 - 512 * 2  # A h1 in bf16; h2 (bf16) no longer saved


def test_lora_on_an_fp32_input_under_autocast() -> None:
    """An fp32 tensor two projections read (a LayerNormalization's output, as in a decoder's q/k/v) is saved under
    autocast as two 16-bit copies, one per projection (the footprint's half_elems); frozen, the projections keep
    neither, and the adapter's A keeps its own copy."""
    from gpupred.memory.physics import graph_terms
    from gpupred.graph.loader import cached_graph

    f = TensorProto.FLOAT
    inits = [helper.make_tensor(n, f, (64, 64), np.zeros(64 * 64, np.float32)) for n in ("q.weight", "v.weight")]
    inits += [helper.make_tensor(n, f, (64,), np.ones(64, np.float32)) for n in ("g", "b")]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "q.weight"], ["q"]), helper.make_node("MatMul", ["n", "v.weight"], ["v"]),
             helper.make_node("Mul", ["q", "v"], ["out"])]
    graph = helper.make_graph(nodes, "qv", [helper.make_tensor_value_info("x", f, ["batch", 64])],
                              [helper.make_tensor_value_info("out", f, ["batch", 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    full = graph_terms(model, B, setup_of("bf16", "adamw"))
    assert full["half_elems"] == 2 * B * 64 + 2 * B * 64  # n's two copies; q and v (the Mul saves both); not out
    assert full["fp32_elems"] == 0  # n itself: only the projections read it, each its own 16-bit copy
    lora = parameter_terms(cached_graph(model, B)[0].form(True),
                           setup_of("bf16", "adamw", lora_rank=2, lora_targets=("q",)), "qv")
    assert lora["act_delta_bytes"] == -2 * (2 * B * 64) + 2 * B * 64 + 2 * B * 2  # both copies gone; A's; A n


def _swiglu() -> onnx.ModelProto:
    """A FIXTURE: a pre-norm SwiGLU MLP block with a residual and a head, as in a LLaMA layer: the norm's fp32 output
    feeds gate and up, ``silu(gate) * up`` feeds down, the residual sum feeds the head."""
    f, width, inter = TensorProto.FLOAT, 64, 128
    shapes = {"gate.weight": (width, inter), "up.weight": (width, inter), "down.weight": (inter, width),
              "head.weight": (width, 32)}
    inits = [helper.make_tensor(n, f, s, np.zeros(s, np.float32).ravel()) for n, s in shapes.items()]
    inits += [helper.make_tensor(n, f, (width,), np.ones(width, np.float32)) for n in ("g", "b")]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "gate.weight"], ["gt"]),
             helper.make_node("MatMul", ["n", "up.weight"], ["u"]),
             helper.make_node("Sigmoid", ["gt"], ["s"]), helper.make_node("Mul", ["gt", "s"], ["a"]),
             helper.make_node("Mul", ["a", "u"], ["m"]), helper.make_node("MatMul", ["m", "down.weight"], ["d"]),
             helper.make_node("Add", ["x", "d"], ["r"]), helper.make_node("MatMul", ["r", "head.weight"], ["logits"])]
    graph = helper.make_graph(nodes, "swiglu", [helper.make_tensor_value_info("x", f, ["batch", width])],
                              [helper.make_tensor_value_info("logits", f, ["batch", 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_qlora_s_4bit_linears_write_their_input_s_dtype_under_autocast() -> None:
    """bitsandbytes' Linear4bit casts its output back to its input's dtype: the norm's fp32 output through 4-bit gate
    and up projections gives fp32 activations up to the next contraction, and every tensor the MLP's products save
    is 4 bytes wide instead of 2 (tests/test_finetune_units.py checks this premise on the library itself)."""
    from gpupred.graph.canonical import autocast_fp32
    from gpupred.graph.loader import cached_graph
    from gpupred.memory.physics import graph_terms

    model = _swiglu()
    cg_ = cached_graph(model, B)[0].form(True)
    producer = {o: node for node in cg_.nodes for o in node[3]}
    mlp = {"gt", "u", "a", "m", "d"}  # the canonical form fuses Sigmoid(gt) * gt into one SiLU (Swish) writing a
    assert not mlp & autocast_fp32(cg_, producer)  # nn.Linear under autocast: 16-bit outputs
    place = finetune.placement(cg_, setup_of("bf16", "adamw", lora_rank=2, lora_targets=("gate",), qlora=True), "s")
    assert place.quantized == {"gate.weight", "up.weight", "down.weight"}  # the head stays
    assert mlp <= autocast_fp32(cg_, producer, place.quantized)
    # a 4-bit contraction of a 16-bit input stays 16-bit: down alone quantized, m is still bf16
    assert "d" not in autocast_fp32(cg_, producer, {"down.weight"})

    setup = setup_of("bf16", "adamw")
    plain, four = graph_terms(model, B, setup), graph_terms(model, B, setup, quantized=place.quantized)
    # kept: gt (SiLU saves its input), a and u (the product's operands): B x 128 each, now fp32; m and r are saved
    # as the 16-bit copies their contractions take, and n as its two, either way
    assert four["fp32_elems"] - plain["fp32_elems"] == 3 * B * 128
    assert plain["half_elems"] - four["half_elems"] == 3 * B * 128
    assert four["saved_elems"] == plain["saved_elems"]


def test_a_product_by_a_frozen_weight_saves_nothing_of_its_operand() -> None:
    """FIXTURE graphs: an RMSNorm-like scale ``n = g * r`` before a LoRA-adapted Linear. In a full fine-tune the product
    saves r (for g's gradient); under LoRA g is frozen, so the product keeps g alone and r goes, unless the op that
    wrote it keeps it (a Relu saves its output)."""
    from gpupred.graph.loader import cached_graph

    f = TensorProto.FLOAT
    inits = [helper.make_tensor("q.weight", f, (64, 64), np.zeros(64 * 64, np.float32)),
             helper.make_tensor("norm.weight", f, (64,), np.ones(64, np.float32))]

    def delta(first: str) -> float:
        nodes = [helper.make_node(first, ["x"], ["r"]), helper.make_node("Mul", ["norm.weight", "r"], ["n"]),
                 helper.make_node("MatMul", ["n", "q.weight"], ["out"])]
        graph = helper.make_graph(nodes, first, [helper.make_tensor_value_info("x", f, ["batch", 64])],
                                  [helper.make_tensor_value_info("out", f, ["batch", 64])], inits)
        cg_ = cached_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), B)[0].form(True)
        terms = parameter_terms(cg_, setup_of("fp32", "adamw", lora_rank=2, lora_targets=("q",)), first)
        return terms["act_delta_bytes"]

    assert delta("Relu") == B * 2 * 4  # B keeps A n (fp32); r stays, kept by the Relu
    assert delta("Neg") == B * 2 * 4 - B * 64 * 4  # and r, kept by the product alone, is no longer saved


def test_dropout_and_pure_bf16_adapter_inputs(cg: object) -> None:
    drop = parameter_terms(cg, setup_of("fp32", "adamw", lora_rank=4, lora_targets=("l2",), lora_dropout=0.1), "s")
    # with dropout A saves its own dropped-out copy of h1 (4 bytes) and the mask (1 byte); h1 is then kept by nobody
    assert drop["act_delta_bytes"] == 64 - 2048 - 512 * 4 + 512 * 5
    pure = parameter_terms(cg, setup_of("bf16-pure", "adamw", lora_rank=4, lora_targets=("l2",)), "s")
    # peft casts h1 to the fp32 adapter's dtype: A saves that copy; h1 (bf16) and h2 are saved by nobody else
    assert pure["act_delta_bytes"] == 4 * 4 * 4 + 512 * 4 - 512 * 2 - 512 * 2
    assert pure["weight_bytes"] == (64 * 128 + 128 * 128 + 128 * 32) * 2 + 2 * 512 * 4  # bf16 base, fp32 adapters


def test_full_finetune_optimizers_by_tensor(cg: object) -> None:
    shapes = [(64, 128), (128, 128), (128, 32)]
    eight = parameter_terms(cg, setup_of("fp32", "adamw8bit"), "s")
    # 8,192 and 16,384 elements: 8-bit moments with an fp32 absmax per 256; 4,096 is not under min_8bit_size (4096)
    assert eight["state_bytes"] == sum(2 * (alloc(r * c) + alloc(4 * -(-r * c // 256))) for r, c in shapes)
    assert eight["grad_bytes"] == eight["weight_bytes"] == sum(r * c * 4 for r, c in shapes)
    ada = parameter_terms(cg, setup_of("fp32", "adafactor"), "s")
    # torch's [out, in] shapes: a row (out) and a column (in) per matrix, fp32, each rounded to 512 bytes; an RMS each
    assert ada["state_bytes"] == sum(alloc(c * 4) + alloc(r * 4) + 512 for r, c in shapes)
    assert ada["transient_bytes"] == 2 * 4 * 128 * 128
    assert parameter_terms(cg, setup_of("fp32", "adamw"), "s") == {}  # the sweeps' setups: the parameter-sized rule


def test_state_bytes_per_optimizer() -> None:
    n = 4096 * 4096
    assert optimizer_state_bytes("adamw8bit", (4096, 4096), 4) == 2 * (n + 4 * n // 256)
    assert optimizer_state_bytes("adamw8bit", (1000,), 4) == 2 * 4096  # under min_8bit_size: fp32 moments
    assert optimizer_state_bytes("paged_adamw", (4096, 4096), 2) == 2 * 4 * n  # bitsandbytes' 32-bit states: fp32
    assert optimizer_state_bytes("adafactor", (1000,), 4) == 4096 + 512  # exp_avg_sq and the 0-d RMS
    assert optimizer_state_bytes("sgd", (1000,), 4, sgd_momentum=False) == 0
    # 0.5159 bytes per 4-bit weight, plus 2 KiB of offset and code tables
    assert nf4_bytes(n) == n // 2 + n // 64 + 4 * n // (64 * 256) + 512 + 512 + 1024


def test_footprint_reads_the_parameter_terms(cg: object) -> None:
    from gpupred.memory.physics import MIB, term_sizes

    t = parameter_terms(cg, setup_of("bf16", "adamw", lora_rank=4, lora_targets=("l2",), qlora=True), "stack")
    row = {"param_bytes": 1e9, "activation_bytes": 1e6, "optimizer": "adamw", "precision": "bf16", **t}
    terms = term_sizes(pd.DataFrame([row, {**row, **{k: np.nan for k in t}}])).iloc
    assert terms[0]["weights"] * MIB == t["weight_bytes"] and terms[0]["optimizer"] * MIB == t["state_bytes"]
    assert terms[0]["gradients"] * MIB == t["grad_bytes"] and terms[0]["autocast_copies"] * MIB == t["copy_bytes"]
    assert terms[1]["weights"] * MIB == 1e9 and terms[1]["optimizer"] * MIB == 2e9  # without them: as before


def test_kept_tensor_rule_copies_match_the_footprint() -> None:
    from gpupred.memory import physics as footprint
    from gpupred.graph import canonical

    assert finetune.NO_INPUT_SAVE == footprint.NO_INPUT_SAVE and finetune.OUTPUT_SAVE == footprint.OUTPUT_SAVE
    assert finetune.PASS_OPS == (footprint.VIEW_OPS | footprint.ALIAS_OPS) - {"Shape", "Size", "Constant"}
    assert canonical.DTYPE_PASS_OPS == finetune.PASS_OPS  # autocast's dtype rule (autocast_fp32) sees the same views


def test_frozen_weights_launch_no_weight_gradient(cg: object) -> None:
    from gpupred.step.physics.kernels import BWD, FWD, MATMUL, step_kernels

    full = step_kernels(cg, setup=setup_of("fp32", "adamw"))
    lora = step_kernels(cg, setup=setup_of("fp32", "adamw", lora_rank=4, lora_targets=("l2",)))
    gemm = 2.0 * B  # 2 x rows per multiply-add column: a GEMM's FLOPs are 2 x rows x in x out
    weight_grads = gemm * (64 * 128 + 128 * 128 + 128 * 32)
    adapter = 2 * gemm * (128 * 4) * 2  # dW_A, dW_B, d(A x) and dx of the adapter: four rows x r x 128 GEMMs
    bwd = lambda kl: kl.flops[(kl.phase == BWD) & (kl.tensor_core == MATMUL)].sum()  # noqa: E731
    assert bwd(full) - bwd(lora) == pytest.approx(weight_grads - adapter)
    fwd = lambda kl: kl.flops[(kl.phase == FWD) & (kl.tensor_core == MATMUL)].sum()  # noqa: E731
    assert fwd(lora) - fwd(full) == pytest.approx(2 * gemm * 128 * 4)
    assert lora.param_tensors == 2 and full.param_tensors == 3  # the optimizer steps the adapters only
    q = step_kernels(cg, setup=setup_of("bf16", "adamw", lora_rank=4, lora_targets=("l2",), qlora=True))
    dequant = [nf4_bytes(n) + 2 * n for n in (8192, 16384)]
    absmax = Counter([5 * 128, 8 * 128, 5 * 256, 8 * 256])  # l1's 128 and l2's 256 blocks of 64: to fp32, + offset
    lora16 = step_kernels(cg, setup=setup_of("bf16", "adamw", lora_rank=4, lora_targets=("l2",)))
    for phase in (FWD, BWD):
        assert sorted(b for b in q.bytes[q.phase == phase] if b in dequant) == dequant  # one each way per weight
        extra = Counter(q.bytes[q.phase == phase].tolist()) - Counter(lora16.bytes[lora16.phase == phase].tolist())
        assert not absmax - extra
    count = lambda kl, phase: int((kl.phase == phase).sum())  # noqa: E731
    # forward: 3 dequantization kernels per 4-bit weight in place of autocast's cast of the frozen weight; l1 reads
    # the fp32 input x, so Linear4bit casts its output back to fp32; peft clones l2's (adapted) output
    assert count(q, FWD) - count(lora16, FWD) == 2 * (3 - 1) + 1 + 1
    assert count(q, BWD) - count(lora16, BWD) == 2 * 3 + 1  # dequantized again; l1's cast's gradient


def test_bad_lora_setups_are_one_line() -> None:
    for options, words in (({"lora_rank": 0}, "rank must be"), ({"qlora": True}, "needs LoRA adapters"),
                           ({"lora_rank": 8, "qlora": True, "precision": "fp32"}, "QLoRA is modelled computing in 16 bits"),
                           ({"lora_targets": ("q_proj",)}, "needs LoRA adapters"),
                           ({"lora_rank": 8, "lora_bias": "some"}, "unknown LoRA bias")):
        with pytest.raises(GpupredError, match=words) as err:
            setup_of(**{"precision": "bf16", "optimizer": "adamw", **options})
        assert "\n" not in str(err.value)


def test_targets_the_model_lacks_are_refused(cg: object) -> None:
    with pytest.raises(GpupredError, match="'q_proj' is not a Linear module of this model; its Linear modules are "
                                           "named l1, l2, l3"):
        parameter_terms(cg, setup_of("bf16", "adamw", lora_rank=8, lora_targets=("l2", "q_proj")), "stack.onnx")
    with pytest.raises(GpupredError, match="stack.onnx: peft has no default LoRA target modules"):
        parameter_terms(cg, setup_of("bf16", "adamw", lora_rank=8), "stack.onnx")
    from gpupred.graph.loader import cached_graph

    unnamed = cached_graph(_stack(("onnx::MatMul_1", "onnx::MatMul_2", "onnx::MatMul_3")), B)[0].form(True)
    with pytest.raises(GpupredError, match="keeps no Linear module names"):
        parameter_terms(unnamed, setup_of("bf16", "adamw", lora_rank=8, lora_targets=("l2",)), "unnamed.onnx")


def test_default_targets_are_peft_s() -> None:
    assert finetune.LORA_TARGET_MODULES["llama"] == ("q_proj", "v_proj")
    assert finetune.LORA_TARGET_MODULES["gpt2"] == ("c_attn",)
    from gpupred.graph.loader import cached_graph

    named = cached_graph(_stack(("m.layers.0.q_proj.weight", "m.layers.0.v_proj.weight", "lm_head.weight")), B)[0]
    place = finetune.placement(named.form(True), setup_of("bf16", "adamw", lora_rank=2), "x")
    assert sorted(place.adapted) == ["m.layers.0.q_proj.weight", "m.layers.0.v_proj.weight"]


def test_a_model_type_peft_has_no_default_for_is_refused_as_peft_refuses_it() -> None:
    """peft adapts a whisper or phi3 model only with targets named ("Please specify `target_modules`"): no guess, but
    the targets a guess would have taken and the graph's Linear modules; a graph of unknown type still gets the
    guess."""
    from gpupred.graph.loader import cached_graph

    named = cached_graph(_stack(("m.layers.0.q_proj.weight", "m.layers.0.v_proj.weight", "lm_head.weight")), B)[0]
    linears = finetune.linear_weights(named.form(True))
    with pytest.raises(GpupredError, match=r"^hf whisper: peft has no default LoRA target modules for this model "
                                           r"\(type whisper\) and asks for them; name them \(--lora-targets "
                                           r"q_proj,v_proj, say, .*its Linear modules are named lm_head, q_proj, "
                                           r"v_proj$"):
        finetune.default_targets(linears, "whisper", "hf whisper")
    assert finetune.default_targets(linears, None, "mine.onnx") == ("q_proj", "v_proj")
    assert finetune.default_targets(linears, "qwen3", "hf qwen3") == ("q_proj", "v_proj")


def test_adapter_config(tmp_path: Path) -> None:
    good = tmp_path / "adapter_config.json"
    good.write_text(json.dumps({"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"],
                                "lora_dropout": 0.05, "bias": "none", "modules_to_save": None}))
    assert read_adapter_config(good) == {"lora_rank": 16, "lora_alpha": 32, "lora_targets": ("q_proj", "v_proj"),
                                         "lora_dropout": 0.05, "lora_bias": "none", "lora_modules_to_save": ()}
    for body, words in (('{"r": "16"}', "field 'r' is malformed"), ('{"lora_alpha": 8}', "field 'r' .* is missing"),
                        ('{"r": 8, "target_modules": [1]}', "field 'target_modules' is malformed"),
                        ("{r: 8", "not JSON"), ('{"r": 8, "peft_type": "IA3"}', "field 'peft_type'")):
        bad = tmp_path / "bad.json"
        bad.write_text(body)
        with pytest.raises(GpupredError, match=f"{bad}: {words}"):
            read_adapter_config(bad)


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpupred.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_refuses_bad_lora_in_one_line(tmp_path: Path) -> None:
    onnx.save(_stack(), tmp_path / "stack.onnx")
    (tmp_path / "adapter_config.json").write_text('{"r": 8, "lora_dropout": "high"}')
    for args, words in ((["--lora", "0"], "LoRA rank must be"),
                        (["--lora", "8", "--qlora"], "QLoRA is modelled computing in 16"),
                        (["--lora-config", "adapter_config.json"], "adapter_config.json: field 'lora_dropout' is "
                                                                   "malformed"),
                        (["--lora", "8", "--lora-targets", "q_proj", "--precision", "bf16"],
                         "stack.onnx: LoRA target module 'q_proj' is not a Linear module")):
        result = _cli(tmp_path, "predict", "stack.onnx", "-b", "4", "--gpu", "H100 SXM", *args)
        assert result.returncode == 2, result.stderr
        assert words in result.stderr and result.stderr.count("\n") == 1, result.stderr
