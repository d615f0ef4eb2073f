"""Fine-tune units (the campaign's stage 3): plan-line setup options, the run rows' ``setup`` column, the training step
gpupred.workloads.finetuning builds with peft and bitsandbytes (on the CPU, tiny transformers configs built here as
FIXTURES), and the predictor's per-tensor counts (gpupred.finetune) against the tensors those libraries allocate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpupred.errors import GpupredError
from gpupred.profile.units import member_setup_json, parse_plan_text, setup_options_from_json, setup_options_json
from gpupred.setups import DEFAULT_SETUP, setup_from_json, setup_json, setup_of

LLAMA = "llama.llama_1b-bs2-seq512-bf16-adam"


def test_plan_line_setup_options_make_the_unit_its_id_and_its_row() -> None:
    unit, = parse_plan_text(f"{LLAMA} attn=sdpa lora=16 optim=adamw qlora=1 ckpt=1")
    assert unit.setup == (("optimizer", "adamw"), ("checkpointing", True), ("attention", "sdpa"), ("lora_rank", 16),
                          ("qlora", True))  # plan-key order, whatever order the line gave them in
    assert unit.group_id == f"{LLAMA}~ft-optimadamw-ckpt-attnsdpa-lora16-qlora"
    row = json.loads(member_setup_json(unit.setup, LLAMA))
    assert row == {"precision": "bf16", "optimizer": "adamw", "checkpointing": True, "attention": "sdpa",
                   "lora_rank": 16, "qlora": True}  # the id's precision, the line's options
    assert setup_options_from_json(setup_options_json(unit.setup)) == unit.setup
    plain, = parse_plan_text(LLAMA)
    assert plain.setup == () and plain.group_id == LLAMA and member_setup_json((), LLAMA) == ""


def test_target_lists_get_a_hash_and_each_option_its_type() -> None:
    a, b = parse_plan_text(f"{LLAMA} lora=8 targets=q_proj,v_proj dropout=0.05 alpha=16\n"
                           f"{LLAMA} lora=8 targets=q_proj,k_proj dropout=0.05 alpha=16")
    assert dict(a.setup)["lora_targets"] == ("q_proj", "v_proj") and dict(a.setup)["lora_dropout"] == 0.05
    assert a.group_id != b.group_id and "lora8-alpha16" in a.group_id and "dropout0p05" in a.group_id
    assert a.member_setup(a.specs[0]).lora_targets == ("q_proj", "v_proj")


@pytest.mark.parametrize("line, words", [
    ("resnet.resnet50-bs128-img224-bf16-adam lora=8", "real-world transformers models"),
    ("llama.llama_1b-bs2-seq512-fp32-adam lora=8 qlora=1", "QLoRA is modelled computing in 16 bits"),
    (f"{LLAMA} qlora=1", "needs LoRA adapters"),
    (f"{LLAMA} lora=x", "lora='x' is malformed"),
    (f"{LLAMA} ckpt=yes", "ckpt='yes' is malformed"),
    (f"{LLAMA} optim=adamw optim=sgd", "optim= given twice"),
    (f"{LLAMA} optim=lion", "unknown optimizer 'lion'"),
    (f"{LLAMA} lora=0", "LoRA rank must be a whole number of 1 or more"),
])
def test_bad_setup_options_are_one_line_naming_the_line(line: str, words: str) -> None:
    with pytest.raises(GpupredError) as err:
        parse_plan_text(line, "plans/x.txt")
    assert str(err.value).startswith("plans/x.txt:1: ") and words in str(err.value) and "\n" not in str(err.value)


def test_setup_json_round_trips_and_empty_means_the_ids_own() -> None:
    setup = setup_of("bf16", "paged_adamw8bit", lora_rank=4, lora_targets=("q_proj", "o_proj"), qlora=True)
    assert setup_from_json(setup_json(setup)) == setup
    assert setup_from_json("") is None and setup_from_json(float("nan")) is None and setup_json(DEFAULT_SETUP) == "{}"
    with pytest.raises(GpupredError, match="not a JSON object of TrainingSetup options"):
        setup_from_json("{not json")


def test_the_dataset_keeps_fine_tune_rows_out_of_the_catalog_labels(tmp_path: object,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    import gpupred.profile.schema as schema
    from gpupred import dataset

    runs = pd.DataFrame({"sweep_dir": ["d/h100/s", "d/h100/s"], "run_id": ["a", "b~ft-lora8"],  # FIXTURE rows
                         "workload_id": [LLAMA, LLAMA], "simulated": [False, False], "group_size": [1, 1],
                         "status": ["oom", "ok"], "setup": ["", '{"lora_rank":8}']})
    monkeypatch.setattr(schema, "read_runs", lambda root: runs)
    rows, excluded = dataset.own_label_rows(tmp_path)  # type: ignore[arg-type]
    reasons = dict(zip(excluded["run_id"], excluded["reason"]))
    assert rows.empty and reasons["h100/s/a"] == "status oom"
    assert reasons["h100/s/b~ft-lora8"].startswith("trained under setup options")


# --- the training step, on tiny transformers models (FIXTURES) ---------------------------------------------------

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
bnb = pytest.importorskip("bitsandbytes")

from gpupred.finetune import LORA_TARGET_MODULES, alloc, nf4_bytes, optimizer_state_bytes  # noqa: E402
from gpupred.workloads.finetuning import prepare, quantize_linears, setup_optimizer, trainable_count  # noqa: E402


def _tiny_llama() -> object:
    """A FIXTURE: a 2-layer LLaMA, 64 wide, with grouped-query attention (2 KV heads of 4)."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg)


def _tiny_gpt2() -> object:
    """A FIXTURE: a 2-layer GPT-2, 64 wide (its projections are transformers' Conv1D; its head is tied to wte)."""
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256,
                                                                n_positions=64))


def _step(model: object, setup: object, vocab: int = 256) -> float:
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = setup_optimizer(setup, trainable, 1e-3)
    ids = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=setup.autocast):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    return float(loss)


def test_lora_trains_only_peft_s_default_targets() -> None:
    setup = setup_of("bf16", "adamw", lora_rank=4, attention="sdpa")
    model = prepare(_tiny_llama(), setup, "cpu")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(("lora_A" in n or "lora_B" in n) for n in names)
    assert {n.split(".")[-4] for n in names} == {"q_proj", "v_proj"}  # peft's default for llama
    # q: 64 -> 64, v: 64 -> 32 (2 KV heads x 16): r x (in + out) each, 2 layers
    trainable, total = trainable_count(model)
    assert trainable == 2 * 4 * ((64 + 64) + (64 + 32))
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if "lora_" in n)  # fp32 adapters
    before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    assert math.isfinite(_step(model, setup))
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters() if n in before)  # the base is frozen


def test_qlora_quantizes_every_linear_but_the_head_and_tied_weights() -> None:
    setup = setup_of("bf16", "adamw", lora_rank=4, qlora=True)
    llama = prepare(_tiny_llama(), setup, "cpu")
    fours = [n for n, m in llama.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(fours) == 2 * 7  # q, k, v, o, gate, up, down per layer; lm_head stays
    assert not isinstance(llama.get_output_embeddings(), bnb.nn.Linear4bit)
    assert all(m.weight.dtype == torch.uint8 for m in llama.modules() if isinstance(m, bnb.nn.Linear4bit))
    assert math.isfinite(_step(llama, setup))


def _saved_mlp_dtypes(model: object) -> list[object]:
    """The dtypes of the tensors autograd saves, in one forward under the setup's autocast, that are as wide as the
    tiny LLaMA's MLP (intermediate 128): its SwiGLU's activations."""
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    found: list[object] = []

    def pack(t: object) -> object:
        if tuple(t.shape) == (2, 16, 128):
            found.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids).logits.float().mean().backward()
    return found


def test_qlora_s_4bit_linears_leave_the_mlp_s_saved_activations_in_fp32() -> None:
    """The premise of the footprint's QLoRA activations (gpupred.finetune's notes, autocast_fp32's ``input_dtype``):
    bitsandbytes' Linear4bit casts its output back to its input's dtype, the fp32 normalized residual, so SiLU and
    the product save fp32 tensors where nn.Linear under autocast leaves them bf16."""
    lora = _saved_mlp_dtypes(prepare(_tiny_llama(), setup_of("bf16", "adamw", lora_rank=4), "cpu"))
    qlora = _saved_mlp_dtypes(prepare(_tiny_llama(), setup_of("bf16", "adamw", lora_rank=4, qlora=True), "cpu"))
    assert len(lora) == len(qlora) == 2 * 3  # per layer: SiLU's input, the product's two operands
    assert set(lora) == {torch.bfloat16} and set(qlora) == {torch.float32}


def test_gpt2_s_conv1d_is_quantized_transposed() -> None:
    from bitsandbytes.functional import dequantize_4bit

    model = _tiny_gpt2()
    original = model.transformer.h[0].attn.c_attn.weight.detach().clone()  # Conv1D: [in 64, out 192]
    assert quantize_linears(model, torch.bfloat16) == 2 * 4  # c_attn, c_proj, c_fc, mlp c_proj per layer
    model = model.to("cpu")
    q = model.transformer.h[0].attn.c_attn
    back = dequantize_4bit(q.weight.data, q.weight.quant_state).float()
    assert back.shape == (192, 64) and (back - original.t()).abs().mean() < 0.1 * original.abs().mean()
    assert not isinstance(model.lm_head, bnb.nn.Linear4bit)  # tied to wte: kept


def test_nf4_bytes_are_the_tensors_bitsandbytes_keeps_per_weight() -> None:
    layers = []
    for rows, cols in ((512, 256), (300, 1000), (5632, 2048)):
        q = bnb.nn.Linear4bit(cols, rows, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True,
                              quant_type="nf4", device="cpu")
        q.weight = bnb.nn.Params4bit(torch.randn(rows, cols), requires_grad=False, compress_statistics=True,
                                     quant_type="nf4", blocksize=64)
        layers.append(q.to("cpu"))
        s = layers[-1].weight.quant_state
        own = (layers[-1].weight.data, s.absmax, s.code, s.offset, s.state2.absmax, s.state2.code)
        assert sum(alloc(t.numel() * t.element_size()) for t in own) == nf4_bytes(rows * cols)
    # each weight's nested state holds its own copy of the 256-entry dynamic code (1 KiB), not a shared table
    assert len({q.weight.quant_state.state2.code.data_ptr() for q in layers}) == len(layers)


def test_8bit_adamw_and_adafactor_state_are_the_tensors_the_libraries_keep() -> None:
    from transformers.optimization import Adafactor

    params = [torch.nn.Parameter(torch.randn(*shape)) for shape in ((300, 64), (64, 64), (1000,))]
    opt = bnb.optim.AdamW8bit(params, lr=1e-3)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()
    for p in params:
        state = {k: v for k, v in opt.state[p].items() if torch.is_tensor(v) and not k.startswith("qmap")}
        assert sum(alloc(v.numel() * v.element_size()) for v in state.values()) == \
            optimizer_state_bytes("adamw8bit", tuple(p.shape), 4), tuple(p.shape)
    assert len({opt.state[p]["qmap1"].data_ptr() for p in params if "qmap1" in opt.state[p]}) == 1  # shared maps
    ada = Adafactor(params, lr=None, relative_step=True, scale_parameter=True, warmup_init=False)
    ada.step()
    for p in params:
        state = [v for v in ada.state[p].values() if torch.is_tensor(v)]
        assert sum(alloc(v.numel() * v.element_size()) for v in state) == \
            optimizer_state_bytes("adafactor", tuple(p.shape), 4), tuple(p.shape)


def test_the_default_lora_targets_are_the_installed_peft_s() -> None:
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as mapping

    assert LORA_TARGET_MODULES == {k: (v,) if isinstance(v, str) else tuple(v) for k, v in mapping.items()}  # a string:
    # a regular expression, kept as a one-element tuple


def test_every_optimizer_of_the_setups_builds_over_trainable_parameters() -> None:
    p = [torch.nn.Parameter(torch.randn(64, 64))]
    for name in ("sgd", "adam", "adamw", "adamw8bit", "adafactor"):
        assert setup_optimizer(setup_of("fp32", name), p, 1e-3).param_groups[0]["params"] == p
    fused = setup_optimizer(setup_of("fp32", "adamw", optimizer_impl="fused"), p, 1e-3)
    assert fused.defaults["fused"] is True and fused.defaults["weight_decay"] == 0.01


@pytest.mark.slow
def test_a_qlora_unit_runs_in_the_harness_and_its_rows_say_how_it_trained() -> None:
    """The whole path a GPU sweep takes, on the CPU with the fake NVML backend (simulated, never data): the plan line,
    the child's setup step (peft + bitsandbytes), the run row's ``setup``. BERT-base, the smallest transformers model
    of the named set: bitsandbytes' CPU path dequantizes every 4-bit weight in Python each way, and GPT-2 medium's
    window ran past the harness's hard timeout on a slow 2-core machine."""
    from profile_faults import tiny_config

    from gpupred.profile.fake import FakeBackend
    from gpupred.profile.harness import run_unit
    from gpupred.setups import setup_from_json

    unit, = parse_plan_text("hfbert.bert_base-bs1-seq16-bf16-adam optim=adamw attn=sdpa lora=4 qlora=1")
    r = run_unit(unit.specs, FakeBackend(), tiny_config(max_window_s=20.0, warmup_max_s=20.0), unit.group_id,
                 "fixture", setup=setup_options_json(unit.setup))
    row = r.runs.to_pylist()[0]
    assert row["status"] == "ok", row["message"]
    assert row["group_id"].endswith("~ft-optimadamw-attnsdpa-lora4-qlora") and row["n_iters"] >= 3
    assert setup_from_json(row["setup"]) == setup_of("bf16", "adamw", attention="sdpa", lora_rank=4, qlora=True)


def test_the_campaigns_fine_tune_preflight_names_what_failed_in_one_line() -> None:
    import time

    from gpupred.campaign.executors import finetune_preflight

    why = finetune_preflight(time.monotonic() + 120, device="nodevice")
    assert why.startswith("fine-tune preflight failed, so no fine-tune unit ran: ") and "\n" not in why
    assert "nodevice" in why


@pytest.mark.slow
def test_the_fine_tune_preflight_passes_on_this_cpu() -> None:
    import time

    from gpupred.campaign.executors import finetune_preflight

    assert finetune_preflight(time.monotonic() + 120, device="cpu") == ""


def test_the_campaigns_preflight_child_is_told_where_to_write_the_host_overhead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's preflight measures the layers' host overhead into the sweep's own folder, so that the campaign packs
    it with the units (FIXTURE: the child is not started; the code it would run is read)."""
    import subprocess
    import time
    from types import SimpleNamespace

    from gpupred.campaign import executors

    ran: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: ran.append(argv) or SimpleNamespace(returncode=0,
                                                                                                   stderr=""))
    assert executors.finetune_preflight(time.monotonic() + 60, out=tmp_path / "sweep") == ""
    assert ran[0][-1].startswith("from gpupred.workloads.finetuning import preflight; preflight('cuda'); ")
    assert ran[0][-1].endswith(f"record_host_overhead('cuda', {str(tmp_path / 'sweep')!r})")
    assert executors.finetune_preflight(time.monotonic() + 60) == "" and "record_host_overhead" not in ran[1][-1]


@pytest.mark.slow
def test_the_host_overhead_of_4bit_layers_is_measured_and_written_beside_the_units(tmp_path: Path) -> None:
    """On this CPU (bitsandbytes' CPU path: the figures are this machine's, not a GPU host's), tiny stacks: each
    variant's step is timed, the per-layer differences follow from them, and each call adds its own file."""
    import json

    from gpupred.profile.hostoverhead import HOST_OVERHEAD_SCHEMA, host_overhead, write_host_overhead

    measured = host_overhead("cpu", layers=2, width=32, tokens=8, steps=3, warmup=1)
    steps = measured["step_s"]
    assert measured["schema"] == HOST_OVERHEAD_SCHEMA and set(steps) == {"plain", "lora", "qlora"}
    assert all(v > 0 for v in steps.values()) and measured["single_core_score"] > 0
    assert measured["per_layer_s"]["qlora_over_lora"] == pytest.approx((steps["qlora"] - steps["lora"]) / 2)
    assert {"torch", "bitsandbytes", "peft"} <= set(measured["versions"])
    path = write_host_overhead(measured, str(tmp_path))
    assert path.parent == tmp_path / "host-overhead" and json.loads(path.read_text()) == measured
    later = write_host_overhead({**measured, "created_at": "2030-01-01T00:00:00Z"}, str(tmp_path))
    again = write_host_overhead({**measured, "created_at": "2030-01-01T00:00:00Z"}, str(tmp_path))  # same second
    assert len({path, later, again}) == 3 and len(list((tmp_path / "host-overhead").glob("*.json"))) == 3


def test_a_failed_host_overhead_measurement_does_not_fail_the_preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The measurement rides on the preflight: if it fails (FIXTURE: made to raise), nothing is written, the preflight
    goes on (the fine-tune units run), and stderr says why in one line."""
    from gpupred.profile import hostoverhead

    def broken(device: str) -> dict[str, object]:
        raise RuntimeError("FIXTURE failure")

    monkeypatch.setattr(hostoverhead, "host_overhead", broken)
    assert hostoverhead.record_host_overhead("cpu", str(tmp_path)) is None
    said = [line for line in capsys.readouterr().err.splitlines() if "host overhead" in line]
    assert said == ["fine-tune preflight: host overhead not measured (RuntimeError: FIXTURE failure)"]
    assert not (tmp_path / "host-overhead").exists()


def _fixture_finetune_sweep(root: object, gid: str, setup_json_text: str, allocated: float, reserved: float,
                            device: float) -> None:
    """A FIXTURE sweep of one fine-tune run (made-up figures, written through the real writer): not a measurement."""
    import pyarrow as pa

    from gpupred.profile import store
    from gpupred.profile.schema import RUN_SCHEMA, SAMPLE_SCHEMA, SCHEMA_VERSION

    wid = gid.split("~")[0]
    row = {n: None for n in RUN_SCHEMA.names}
    row.update(schema_version=SCHEMA_VERSION, run_id=gid, group_id=gid, group_size=1, member=0, sweep_id="fixture",
               workload_id=wid, family=wid.split(".")[0], spec_json="{}", status="ok", message="", simulated=False,
               host_batches=False, sync="step", pipeline="", setup=setup_json_text, gpu_name="NVIDIA H100 80GB HBM3",
               gpu_uuid="GPU-fixture", gpu_sm_count=132, gpu_memory_total_mib=81559.0, window_start_s=1.0,
               window_end_s=2.0, n_iters=3, iter_times_s=[0.1] * 3, iter_time_mean_s=0.1, iter_time_median_s=0.1,
               torch_peak_allocated_mib=allocated, torch_peak_reserved_mib=reserved, mem_baseline_mib=0.0,
               cuda_context_mib=500.0, host="fixture", notes="FIXTURE")
    samples = pa.Table.from_pylist([{"group_id": gid, "t_s": 1.5, "metric": "mem_used_mib", "value": device,
                                     "member": -1, "source": "poll"}], schema=SAMPLE_SCHEMA)
    store.write_unit(root, gid, pa.Table.from_pylist([row], schema=RUN_SCHEMA), samples)


def test_measured_fine_tunes_meet_their_predictions_in_three_figures(tmp_path: object) -> None:
    import numpy as np

    from fixtures_learning import fixture_dataset

    from gpupred.memory.estimator import MemoryEstimator
    from gpupred.predictor.realworld_report import finetune_measured, finetune_measured_metrics, finetune_runs

    sweep = tmp_path / "h100" / "2026-12-finetune"  # type: ignore[operator]
    unit, = parse_plan_text(f"{LLAMA} optim=adamw attn=sdpa lora=16 qlora=1")
    _fixture_finetune_sweep(sweep, unit.group_id, member_setup_json(unit.setup, LLAMA), 4000.0, 4600.0, 5200.0)
    runs = finetune_runs(tmp_path)  # type: ignore[arg-type]
    assert list(runs["group_id"]) == [unit.group_id] and runs["memory_mib"].tolist() == [5200.0]
    estimator = MemoryEstimator().fit(fixture_dataset(n_batch_sizes=2))  # FIXTURE rows: the figures mean nothing
    table = finetune_measured(estimator, runs)
    row = table.iloc[0]
    assert (row["recipe"], row["seq_len"], row["batch"]) == ("qlora", 512, 2)
    assert row["torch_allocated_peak_predicted_mib"] < row["torch_reserved_peak_predicted_mib"] < \
        row["device_predicted_mib"]
    assert row["device_log_error"] == pytest.approx(np.log(row["device_predicted_mib"] / 5200.0))
    figures = finetune_measured_metrics(table)
    assert figures["memory_finetune_measured_runs"] == 1.0
    assert figures["memory_finetune_measured_device_median_error"] == pytest.approx(abs(np.expm1(row["device_log_error"])))


def test_every_fine_tune_plan_spec_has_a_stored_graph() -> None:
    """So that notebook 05 (no torch) can predict each measured fine-tune from the committed graph store."""
    from pathlib import Path

    from gpupred.graph.export import stored_graph
    from gpupred.graph.graphstore import store_specs
    from gpupred.profile.units import load_plan

    plan = Path(__file__).resolve().parents[1] / "plans" / "finetune.txt"
    stored = {s.arch_key for s in store_specs()}
    for unit in load_plan(str(plan)):
        spec = unit.specs[0]
        assert spec.arch_key in stored and stored_graph(spec) is not None, spec.id


def test_the_data_card_says_which_runs_trained_under_setups(tmp_path: object) -> None:
    import pandas as pd

    from gpupred.profile.datacard import setups_line

    lora, = parse_plan_text(f"{LLAMA} optim=adamw lora=16")
    qlora, = parse_plan_text(f"{LLAMA} optim=adamw lora=16 qlora=1")
    runs = pd.DataFrame({"setup": [member_setup_json(lora.setup, LLAMA), member_setup_json(qlora.setup, LLAMA), ""]})
    line = setups_line(runs)
    assert line.startswith("- trained under setup options in 2 of 3 runs") and "LoRA 1, QLoRA 1" in line
    assert setups_line(runs.iloc[2:]) == "" and setups_line(pd.DataFrame({"run_id": ["a"]})) == ""


def test_the_data_card_gives_the_host_overhead_measured_beside_the_units(tmp_path: Path) -> None:
    """FIXTURE measurement files (made-up figures in the writer's format), one line for all of them."""
    from gpupred.profile.datacard import host_overhead_line
    from gpupred.profile.hostoverhead import write_host_overhead

    assert host_overhead_line(tmp_path) == ""
    for stamp, q in (("2030-01-01T00:00:00Z", 3.6e-4), ("2030-01-02T00:00:00Z", 3.2e-4)):
        write_host_overhead({"created_at": stamp, "per_layer_s": {"qlora_over_lora": q, "lora_over_plain": 9e-5},
                             "notes": "FIXTURE"}, str(tmp_path))
    line = host_overhead_line(tmp_path)
    assert "(`host-overhead/`, 2 files): QLoRA over LoRA 360 us, LoRA over plain 90 us; QLoRA over LoRA 320 us" in line
