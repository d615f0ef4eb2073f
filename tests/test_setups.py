"""Training setups (gpupred.setups) in the step model and the footprint, checked against torch's own counts on the CPU.

Fixtures are built here: small torch modules (a stem, repeated residual MLP blocks, a head) exported with
``gpupred.export_model``, and hand-built ONNX graphs. torch's side is counted with a ``TorchDispatchMode`` (the
dispatched aten ops: each launches at least one kernel on a GPU) and ``torch.autograd.graph.saved_tensors_hooks``
(the tensors autograd keeps for backward).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpupred.errors import GpupredError
from gpupred.memory.physics import graph_terms
from gpupred.step.physics.model import canonical_graph
from gpupred.step.physics.kernels import step_kernels
from gpupred.step.physics.kernels import OPT, optimizer_ops
from gpupred.setups import DEFAULT_SETUP, TrainingSetup, setup_of

torch = pytest.importorskip("torch")
nn = torch.nn

B, IN, D, C, L = 4, 12, 16, 5, 3  # batch, input features, block width, classes, blocks


class Block(nn.Module):
    """FIXTURE: x + Linear(ReLU(Linear(x)))."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x: Any) -> Any:
        return x + self.fc2(torch.relu(self.fc1(x)))


class Net(nn.Module):
    """FIXTURE: a stem, ``L`` blocks in a ModuleList (numbered ``layers.N``, as Hugging Face and timm name them), a head;
    ``checkpoint`` runs every block under torch.utils.checkpoint (reentrant: it saves the block's input)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem, self.head = nn.Linear(IN, D), nn.Linear(D, C)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.checkpoint = False

    def forward(self, x: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        x = self.stem(x)
        for block in self.layers:
            x = checkpoint(block, x, use_reentrant=True) if self.checkpoint else block(x)
        return self.head(x)


class Count:
    """Dispatched aten ops (views and profiler markers left out), under a TorchDispatchMode."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                outer.ops.append((func, args))
                return func(*args, **(kwargs or {}))

        self.ops: list[tuple[Any, Any]] = []
        self.mode = _Mode()

    def __enter__(self) -> "Count":
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)

    def kernels(self, zero_dim: bool = False) -> list[str]:
        """Ops that do work on tensors (``zero_dim``: also those on one-element tensors only, e.g. step counters)."""
        out = []
        for func, args in self.ops:
            name = str(func)
            if func.is_view or "profiler" in name or "lift_fresh" in name or "_local_scalar_dense" in name:
                continue
            tensors = [t for a in args for t in (a if isinstance(a, (list, tuple)) else [a]) if isinstance(t, torch.Tensor)]
            if tensors and (zero_dim or any(t.dim() > 0 for t in tensors)):
                out.append(name)
        return out

    def syncs(self) -> int:
        """Host reads of a device value (``.item()``)."""
        return sum("_local_scalar_dense" in str(f) for f, _ in self.ops)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The FIXTURE net exported as the predictor expects (structure only, symbolic batch)."""
    import gpupred

    path = tmp_path_factory.mktemp("setups") / "net.onnx"
    gpupred.export_model(Net(), torch.randn(B, IN), path)
    return path


def _graph(path: Path) -> Any:
    return canonical_graph(path, B)[0]


def _torch_optimizer(setup: TrainingSetup, params: Any) -> Any:
    impl = {"foreach": {"foreach": True}, "fused": {"fused": True}, "forloop": {"foreach": False}}[setup.optimizer_impl]
    if setup.optimizer == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9 if setup.sgd_momentum else 0.0, weight_decay=setup.decay,
                               **impl)
    cls = torch.optim.AdamW if setup.optimizer == "adamw" else torch.optim.Adam
    return cls(params, lr=1e-3, weight_decay=setup.decay, **impl)


def test_setup_defaults_are_the_sweeps_and_bad_options_are_refused() -> None:
    assert DEFAULT_SETUP == setup_of("fp32", "sgd")
    assert (DEFAULT_SETUP.tf32_matmul, DEFAULT_SETUP.tf32_conv, DEFAULT_SETUP.optimizer_impl) == (False, True, "foreach")
    assert setup_of("bf16", "adam").changes() == {"precision": "bf16", "optimizer": "adam"}
    assert setup_of("fp32", "adamw").decay == 0.01 and setup_of("fp32", "adam").decay == 0.0
    for bad in ({"precision": "fp8"}, {"optimizer": "lion"}, {"optimizer_impl": "apex"}, {"attention": "xformers"},
                {"accumulation": 0}, {"accumulation": 2.5}, {"weight_decay": -1.0}, {"attention": "flash"}):
        with pytest.raises(GpupredError):
            DEFAULT_SETUP.with_options(**bad)
    with pytest.raises(GpupredError, match="checkpoint"):
        DEFAULT_SETUP.with_options(checkpoint=True)  # a misspelt option is named, with the known ones


def test_the_default_setup_reproduces_the_precision_and_optimizer_pairs(exported: Path) -> None:
    graph = _graph(exported)
    for precision in ("fp32", "bf16", "fp16"):
        for optimizer in ("sgd", "adam"):
            a = step_kernels(graph, precision, optimizer)
            b = step_kernels(graph, setup=setup_of(precision, optimizer))
            assert np.array_equal(a.bytes, b.bytes) and np.array_equal(a.on_tc, b.on_tc) and a.counts == b.counts


@pytest.mark.parametrize("setup", [
    setup_of(optimizer="sgd"), setup_of(optimizer="sgd", sgd_momentum=False), setup_of(optimizer="adam"),
    setup_of(optimizer="adamw"), setup_of(optimizer="adamw", weight_decay=0.0), setup_of(optimizer="sgd", weight_decay=1e-4),
    setup_of(optimizer="sgd", optimizer_impl="fused"), setup_of(optimizer="adam", optimizer_impl="fused"),
    setup_of(optimizer="adamw", optimizer_impl="fused"), setup_of(optimizer="sgd", optimizer_impl="forloop"),
    setup_of(optimizer="adam", optimizer_impl="forloop"), setup_of(optimizer="adamw", optimizer_impl="forloop"),
], ids=lambda s: f"{s.optimizer}-{s.optimizer_impl}-m{int(s.sgd_momentum)}-wd{s.decay:g}")
def test_optimizer_kernels_match_torchs_dispatched_ops(exported: Path, setup: TrainingSetup) -> None:
    """torch's second optimizer step (state already made) dispatches, on parameter tensors, exactly the ops the step
    model launches from the host (a foreach op's further chunks are launched by torch's C++ loop, not dispatched):
    SGD 3 foreach ops (1 without momentum, +1 with coupled weight decay), Adam 7, AdamW 8 (7 with no decay), fused
    1 (+ Adam's device step counters), for-loop each op once per tensor. The fixture's tensors: 2 per Linear."""
    net = Net()
    opt = _torch_optimizer(setup, net.parameters())
    for _ in range(2):
        net(torch.randn(B, IN)).sum().backward()
        with Count() as count:
            opt.step()
    fused = setup.optimizer_impl == "fused"
    torch_ops = count.kernels(zero_dim=fused)  # fused Adam steps its counters on the GPU; the others on the host
    kl = step_kernels(_graph(exported), setup=setup)
    dispatched = int(((kl.phase == OPT) & ~kl.library).sum())
    assert kl.param_tensors == 2 * (L * 2 + 2)
    assert dispatched == len(torch_ops)
    if setup.optimizer_impl == "foreach":
        assert len(torch_ops) == len(optimizer_ops(setup))


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_grad_scaler_syncs_the_host_unless_the_optimizer_is_fused(exported: Path, impl: str) -> None:
    """fp16's GradScaler reads found_inf on the host (one ``.item()``) before a foreach step; a fused step takes it on
    the device: the step model's host synchronization is there for foreach and gone for fused."""
    from torch.utils._python_dispatch import _disable_current_modes

    net = Net()
    setup = setup_of("fp16", "adam", optimizer_impl=impl)
    opt = _torch_optimizer(setup, net.parameters())
    step = opt.step

    def uncounted(*args: Any, **kwargs: Any) -> Any:  # the optimizer's own host reads are of host-side step counters
        with _disable_current_modes():
            return step(*args, **kwargs)

    opt.step = uncounted
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        scaler.scale(net(torch.randn(B, IN)).sum()).backward()
        with Count() as count:
            scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    kl = step_kernels(_graph(exported), setup=setup)
    assert count.syncs() == int(kl.sync_after.sum()) == (0 if impl == "fused" else 1)


def test_gradient_accumulation_adds_one_kernel_per_parameter_per_extra_micro_batch(exported: Path) -> None:
    """A backward into existing ``.grad`` adds one add per parameter tensor (AccumulateGrad), as torch counts it; the
    step model runs k forward/backward passes, each with the loss divided by k, those adds for every micro-batch
    after the first, and one optimizer step."""
    net = Net()

    def backward_ops() -> list[str]:
        loss = net(torch.randn(B, IN)).sum()
        with Count() as count:
            loss.backward()
        return count.kernels()

    first = backward_ops()
    second = backward_ops()  # .grad exists now
    extra = len(second) - len(first)
    graph = _graph(exported)
    one, two = step_kernels(graph, setup=setup_of()), step_kernels(graph, setup=setup_of(accumulation=2))
    assert extra == one.param_tensors == 2 * (L * 2 + 2)
    assert two.counts["backward"] == 2 * (one.counts["backward"] + 1) + extra
    assert two.counts["forward"] == 2 * (one.counts["forward"] + 1)
    assert two.counts["optimizer"] == one.counts["optimizer"] and two.cycles == 2 and two.micro_batches == 2


def test_checkpointing_recomputes_each_blocks_forward_as_torch_does(exported: Path) -> None:
    """Under torch.utils.checkpoint every block's forward runs again in backward: torch's extra ops equal the step
    model's extra kernels (Linear -> addmm, ReLU, Linear, Add: 4 per block)."""
    from gpupred.step.physics.blocks import checkpoint_blocks

    def step_ops(checkpoint: bool) -> int:
        net = Net()
        net.checkpoint = checkpoint
        with Count() as count:
            net(torch.randn(B, IN, requires_grad=False)).sum().backward()
        return len(count.kernels())

    graph = _graph(exported)
    blocks = checkpoint_blocks(graph)
    assert [b.name.rsplit("/", 1)[-1] for b in blocks] == [f"layers.{i}" for i in range(L)]
    plain, ckpt = step_kernels(graph, setup=setup_of()), step_kernels(graph, setup=setup_of(checkpointing=True))
    assert len(ckpt) - len(plain) == step_ops(True) - step_ops(False) == 4 * L
    assert ckpt.counts["forward"] == plain.counts["forward"] + 4 * L  # launched as forward work, in the backward


class Saved:
    """Bytes of the distinct tensors autograd saves for backward (parameters and given inputs left out)."""

    def __init__(self, skip: Any = ()) -> None:
        self.skip = {t.data_ptr() for t in skip}
        self.seen: dict[int, int] = {}

    def pack(self, t: Any) -> Any:
        if t.data_ptr() not in self.skip and not isinstance(t, nn.Parameter) and t.dim() > 0 and t.is_floating_point():
            self.seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    @property
    def nbytes(self) -> int:
        return sum(self.seen.values())


def _saved(net: Any, x: Any, dtype: Any = None, loss: bool = True) -> Saved:
    """What autograd keeps for one forward and cross-entropy loss (``loss``) of ``net`` (its parameters and ``x``
    aside)."""
    params = list(net.parameters())
    saved = Saved([x, *params])
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
        if dtype is None:
            out = net(x)
        else:
            with torch.autocast("cpu", dtype=dtype):
                out = net(x)
        if loss:
            torch.nn.functional.cross_entropy(out.float(), torch.zeros(B, dtype=torch.long))
    return saved


def test_saved_activation_bytes_match_torch_in_fp32_and_pure_bf16(exported: Path) -> None:
    """fp32: the footprint's kept tensors (4 bytes each) and log_softmax's saved fp32 output (one of the loss's
    buffers, the size of the logits) are torch's saved bytes; pure bf16 (model.to(bfloat16)): every kept activation
    in 2 bytes, the loss's log_softmax output in fp32."""
    x = torch.randn(B, IN)
    t = graph_terms(exported, B)
    assert _saved(Net(), x).nbytes == 4 * t["saved_elems"] + 4 * t["output_elems"]
    pure = _saved(Net().to(torch.bfloat16), x.to(torch.bfloat16))
    assert pure.nbytes == 2 * t["saved_elems"] + 4 * t["output_elems"]


def test_checkpointed_saved_bytes_match_torch(exported: Path) -> None:
    """Checkpointing keeps each block's input and what is outside the blocks (torch's saved tensors with reentrant
    checkpoints), and the footprint adds the largest block's activations, which its backward recomputes."""
    x = torch.randn(B, IN)
    net = Net()
    net.checkpoint = True
    kept = _saved(net, x).nbytes
    block = Block()
    inner = _saved(block, torch.randn(B, D), loss=False).nbytes  # one block's own activations (its input aside)
    t = graph_terms(exported, B, setup_of(checkpointing=True))
    assert 4 * t["saved_elems"] + 4 * t["output_elems"] == kept + inner  # the loss's log_softmax output besides
    assert t["saved_elems"] < graph_terms(exported, B)["saved_elems"]


def _attention_net(sdpa: bool) -> Any:
    """FIXTURE: single-head self-attention over x[B, S, E] with q, k, v projections, by scaled_dot_product_attention or
    written out (softmax(q k^T / sqrt(E)) v)."""
    E = 8

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.q, self.k, self.v, self.o = (nn.Linear(E, E) for _ in range(4))

        def forward(self, x: Any) -> Any:
            q, k, v = self.q(x), self.k(x), self.v(x)
            if sdpa:
                a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            else:
                a = torch.softmax(q @ k.transpose(-2, -1) / E ** 0.5, dim=-1) @ v
            return self.o(a).mean(1)

    return Attention()


def test_attention_implementations_save_what_torch_saves(tmp_path: Path) -> None:
    """An exported scaled_dot_product_attention core runs fused under attention='auto' and keeps no scores; under
    'eager' the footprint keeps the scores torch's written-out attention saves. The difference equals torch's, less the
    fused kernel's row statistics (logsumexp, fp32 per query), which the footprint leaves out."""
    import gpupred

    S = 6
    path = tmp_path / "attention.onnx"
    gpupred.export_model(_attention_net(True), torch.randn(B, S, 8), path)
    x = torch.randn(B, S, 8)
    fused, eager = _saved(_attention_net(True), x).nbytes, _saved(_attention_net(False), x).nbytes
    auto = graph_terms(path, B)
    written = graph_terms(path, B, setup_of(attention="eager"))
    assert auto["softmax_elems"] > 0 and written["softmax_elems"] == 0

    def kept(t: dict[str, float]) -> float:  # what the footprint keeps in fp32 (activation_bytes, fused attention)
        return t["saved_elems"] - t["softmax_elems"] - t["attention_elems"]

    ours = 4 * (kept(written) - kept(auto))
    logsumexp = 4 * B * S
    assert ours == eager - (fused - logsumexp)


@pytest.mark.parametrize("setup", [setup_of(optimizer="adam"), setup_of(optimizer="adamw"), setup_of(optimizer="sgd"),
                                   setup_of(optimizer="sgd", sgd_momentum=False),
                                   setup_of(optimizer="adam", optimizer_impl="fused"), setup_of("bf16-pure", "adam")],
                         ids=lambda s: f"{s.precision}-{s.optimizer}-{s.optimizer_impl}-m{int(s.sgd_momentum)}")
def test_optimizer_state_matches_torch(exported: Path, setup: TrainingSetup) -> None:
    """The footprint's optimizer state is what torch's ``optimizer.state`` holds after a step (SGD's momentum, none
    without, Adam's and AdamW's two moments, in the weights' dtype: bf16 under pure bf16; the step counters aside)."""
    import pandas as pd

    from gpupred.memory.physics import MIB, term_sizes, setup_columns
    from gpupred.graph.features import featurize

    net = Net().to(torch.bfloat16) if setup.precision == "bf16-pure" else Net()
    opt = _torch_optimizer(setup, net.parameters())
    net(torch.randn(B, IN, dtype=next(net.parameters()).dtype)).sum().backward()
    opt.step()
    state = sum(t.numel() * t.element_size() for s in opt.state.values() for k, t in s.items()
                if isinstance(t, torch.Tensor) and k != "step")
    row = pd.DataFrame([{**featurize(exported, batch_size=B), **setup_columns(setup)}])
    terms = term_sizes(row).iloc[0]
    assert terms["optimizer"] * MIB == pytest.approx(state)
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    assert terms["weights"] * MIB == pytest.approx(params) == pytest.approx(terms["gradients"] * MIB)


def test_context_from_architecture_and_software() -> None:
    """The CUDA context: the H200's measured 619 MiB under the sweeps' software; elsewhere local memory (threads per
    SM x SMs x 1 KiB) + the software's share, plus the kernel images eager loading adds on old stacks."""
    from gpupred.memory.physics import EAGER_IMAGES_MIB, context_mib, lazy_loading, local_memory_mib, workspace_mib

    assert context_mib("H200") == 619.0 and local_memory_mib("H200") == 132 * 2048 / 1024
    software = 619.0 - 264.0
    assert context_mib("A100 40GB") == pytest.approx(108 * 2048 / 1024 + software)
    assert context_mib("RTX 3090") == pytest.approx(82 * 1536 / 1024 + software)  # compute capability 8.6
    assert context_mib("T4") == pytest.approx(40 * 1024 / 1024 + software)  # 7.5: 1,024 threads per SM
    assert lazy_loading("2.1", "12.1") and lazy_loading("1.12", "12.2") and not lazy_loading("1.12", "11.6")
    assert not lazy_loading("2.0", "11.6") and EAGER_IMAGES_MIB == pytest.approx(362.0, abs=0.5)
    assert context_mib("H200", "1.12", "11.3") == pytest.approx(619.0 + EAGER_IMAGES_MIB)
    assert workspace_mib("H100 SXM") == 64.0 and workspace_mib("A100 40GB") == 16.25
    with pytest.raises(GpupredError, match="version"):
        lazy_loading("two", "12.1")


def test_a_setups_key_and_changes_follow_its_fields() -> None:
    """key() and changes() read the field names found once (SETUP_FIELDS): every field, in the dataclass's order."""
    from dataclasses import fields

    from gpupred.setups import SETUP_FIELDS, TrainingSetup

    assert SETUP_FIELDS == tuple(f.name for f in fields(TrainingSetup))
    s = TrainingSetup(precision="bf16", optimizer="adamw", checkpointing=True, accumulation=2)
    assert s.key() == tuple(getattr(s, f.name) for f in fields(s))
    assert s.changes() == {"precision": "bf16", "optimizer": "adamw", "checkpointing": True, "accumulation": 2}
