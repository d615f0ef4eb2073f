"""The training setup of a job: the options that change a step's kernels and its memory, as one frozen object.

A :class:`TrainingSetup` is what the step model (:func:`gpupred.perf.kernels.step_kernels`), the memory footprint
(:mod:`gpupred.footprint`) and the predictor (``Predictor.predict``, ``gpupred predict``) take besides the graph, the
batch size and the GPU. Its defaults are what this project's sweeps ran (:mod:`gpupred.workloads.builders` and the
profiler's harness), so a catalog workload id keeps its meaning: ``-fp32-sgd`` is fp32 with torch's TF32 defaults,
``torch.optim.SGD(momentum=0.9)`` on its foreach path; ``-bf16-adam`` is bf16 autocast with ``torch.optim.Adam``'s
foreach path; ``-fp16-*`` adds ``torch.amp.GradScaler``. Every step zeroes gradients with ``set_to_none=True`` and
takes the cross-entropy of fp32 logits.

Options (torch's own default first):

- ``precision``: ``fp32``; ``bf16`` (autocast, fp32 master weights); ``fp16`` (autocast + GradScaler);
  ``bf16-pure`` (``model.to(torch.bfloat16)``: weights, gradients, optimizer state and activations in bf16, no
  autocast);
- ``tf32_matmul`` (``torch.backends.cuda.matmul.allow_tf32``, off by default since torch 1.12) and ``tf32_conv``
  (``torch.backends.cudnn.allow_tf32``, on by default): fp32 matmuls / cuDNN convolutions and RNNs on TF32 tensor
  cores (a 16-bit precision runs them all in 16 bits: other TF32 values there are refused, not ignored);
- ``optimizer``: ``sgd`` (with ``sgd_momentum``: the catalog's 0.9; torch's default is 0, no buffer; refused
  without SGD), ``adam``,
  ``adamw``; ``weight_decay`` None means torch's default (SGD and Adam 0, AdamW 0.01; the transformers Trainer
  passes 0.0); ``optimizer_impl``: ``foreach`` (torch's default on CUDA), ``fused`` (one kernel per multi-tensor
  chunk, the Trainer's default ``adamw_torch_fused`` since torch 2.8) or ``forloop`` (one op per tensor);
- ``checkpointing``: activation (gradient) checkpointing of every repeated block (each transformer layer, each
  residual block), as Hugging Face's ``gradient_checkpointing_enable()`` and timm's ``set_grad_checkpointing()`` do;
- ``accumulation``: micro-batches per optimizer step (the batch size is the micro-batch's); a step is then
  ``accumulation`` forward/backward passes and one optimizer step;
- ``attention``: ``auto`` (as the graph was exported: cores exported from ``scaled_dot_product_attention`` run
  fused, hand-written attention runs as its ops), ``eager`` (every core as its ops: Hugging Face's
  ``attn_implementation="eager"``), ``sdpa`` (every core fused: Hugging Face's default) or ``flash``
  (FlashAttention-2; 16-bit only);
- ``channels_last``: convolutions in NHWC (``model.to(memory_format=torch.channels_last)``); the default NCHW makes
  cuDNN transpose each tensor-core convolution's operands.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from gpupred.errors import GpupredError

PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "bf16-pure")
AUTOCAST: frozenset[str] = frozenset({"bf16", "fp16"})  # autocast mixed precision (fp32 master weights)
HALF: frozenset[str] = frozenset({"bf16", "fp16", "bf16-pure"})  # contractions in 16 bits
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw")
OPTIMIZER_IMPLS: tuple[str, ...] = ("foreach", "fused", "forloop")
ATTENTIONS: tuple[str, ...] = ("auto", "eager", "sdpa", "flash")
TORCH_WEIGHT_DECAY: dict[str, float] = {"sgd": 0.0, "adam": 0.0, "adamw": 0.01}  # torch.optim's defaults
MAX_ACCUMULATION = 4096


@dataclass(frozen=True)
class TrainingSetup:
    """How a job trains: precision and TF32, optimizer and its implementation, checkpointing, accumulation,
    attention kernel and memory format (see the module notes; the defaults are this project's sweeps')."""

    precision: str = "fp32"
    optimizer: str = "sgd"
    tf32_matmul: bool = False
    tf32_conv: bool = True
    sgd_momentum: bool = True
    weight_decay: float | None = None  # None: torch's default for the optimizer (TORCH_WEIGHT_DECAY)
    optimizer_impl: str = "foreach"
    checkpointing: bool = False
    accumulation: int = 1
    attention: str = "auto"
    channels_last: bool = False

    def __post_init__(self) -> None:
        _choice("precision", self.precision, PRECISIONS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("optimizer implementation", self.optimizer_impl, OPTIMIZER_IMPLS)
        _choice("attention implementation", self.attention, ATTENTIONS)
        if not isinstance(self.accumulation, int) or not 1 <= self.accumulation <= MAX_ACCUMULATION:
            raise GpupredError(f"gradient accumulation must be a whole number of micro-batches from 1 to "
                               f"{MAX_ACCUMULATION}, got {self.accumulation!r}")
        if self.weight_decay is not None and not self.weight_decay >= 0:
            raise GpupredError(f"weight decay must be 0 or more, got {self.weight_decay!r}")
        if self.precision in HALF and (self.tf32_matmul, self.tf32_conv) != (False, True):
            raise GpupredError(f"TF32 applies to fp32 matmuls and convolutions only, and precision {self.precision!r} "
                               "runs them in 16 bits: drop the TF32 option, or use precision fp32")
        if self.optimizer != "sgd" and not self.sgd_momentum:
            raise GpupredError(f"no momentum is an SGD option, and the optimizer is {self.optimizer!r}: drop it, or "
                               "use optimizer sgd")
        if self.attention == "flash" and self.precision not in HALF:
            raise GpupredError("attention 'flash' (FlashAttention-2) runs in bf16 or fp16 only; use precision bf16, "
                               "fp16 or bf16-pure, or attention 'sdpa' (torch picks its memory-efficient kernel in fp32)")

    @property
    def half(self) -> bool:
        """Whether contractions run in 16 bits (autocast or pure bf16)."""
        return self.precision in HALF

    @property
    def autocast(self) -> bool:
        """Whether autocast casts fp32 weights and activations to 16 bits (bf16 or fp16, not pure bf16)."""
        return self.precision in AUTOCAST

    @property
    def grad_scaler(self) -> bool:
        """Whether a ``torch.amp.GradScaler`` scales the loss (fp16)."""
        return self.precision == "fp16"

    @property
    def state_bytes(self) -> int:
        """Bytes per element of weights, gradients and optimizer state (fp32 masters unless pure bf16)."""
        return 2 if self.precision == "bf16-pure" else 4

    @property
    def decay(self) -> float:
        """The weight decay the optimizer applies (torch's default where not given)."""
        return TORCH_WEIGHT_DECAY[self.optimizer] if self.weight_decay is None else float(self.weight_decay)

    @property
    def state_buffers(self) -> float:
        """Parameter-sized buffers the optimizer keeps: SGD's momentum (0 without), Adam's and AdamW's two moments."""
        if self.optimizer == "sgd":
            return 1.0 if self.sgd_momentum else 0.0
        return 2.0

    @property
    def optimizer_key(self) -> str:
        """The optimizer as :data:`gpupred.footprint.OPTIMIZER_STATES` names it."""
        return "sgd_nomomentum" if self.optimizer == "sgd" and not self.sgd_momentum else self.optimizer

    @property
    def job_precision(self) -> str:
        """The catalog precision closest to this one (``bf16-pure`` -> ``bf16``): what the regressors' encodings take."""
        return "bf16" if self.precision == "bf16-pure" else self.precision

    @property
    def job_optimizer(self) -> str:
        """The catalog optimizer closest to this one (``adamw`` -> ``adam``): what the regressors' encodings take."""
        return "sgd" if self.optimizer == "sgd" else "adam"

    def key(self) -> tuple[Any, ...]:
        """A hashable key of every option (for caches)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def changes(self) -> dict[str, Any]:
        """The options that differ from the defaults (this project's sweeps)."""
        return {k: v for k, v in asdict(self).items() if v != getattr(DEFAULT_SETUP, k)}

    def with_options(self, **options: Any) -> "TrainingSetup":
        """A copy with ``options`` replaced (None values are left as they are)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise GpupredError(f"unknown training-setup option {unknown[0]!r}; known: {', '.join(sorted(known))}")
        return replace(self, **{k: v for k, v in options.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        """Plain values, for cards and JSON."""
        return asdict(self)


def _choice(what: str, value: Any, known: tuple[str, ...]) -> None:
    if value not in known:
        raise GpupredError(f"unknown {what} {value!r}; known: {', '.join(known)}")


DEFAULT_SETUP = TrainingSetup()


def setup_of(precision: str = "fp32", optimizer: str = "sgd", **options: Any) -> TrainingSetup:
    """The setup of a (precision, optimizer) pair as the catalog's ids name them, with any other options given."""
    return DEFAULT_SETUP.with_options(precision=precision, optimizer=optimizer, **options)


def as_setup(setup: TrainingSetup | None, precision: str = "fp32", optimizer: str = "sgd") -> TrainingSetup:
    """``setup`` itself, or the setup of the (precision, optimizer) pair when there is none."""
    return setup if setup is not None else setup_of(precision, optimizer)


# What the frameworks do when nobody says otherwise (the predictor's card states these beside DEFAULT_SETUP).
FRAMEWORK_DEFAULTS: dict[str, dict[str, Any]] = {
    "pytorch": {
        "precision": "fp32 (no autocast); torch.backends.cuda.matmul.allow_tf32=False (since 1.12), "
                     "torch.backends.cudnn.allow_tf32=True",
        "optimizer": "the one constructed; torch.optim.SGD momentum 0, weight decay 0; Adam weight decay 0; AdamW "
                     "weight decay 0.01; foreach on CUDA when every tensor is on the GPU, fused only when asked",
        "checkpointing": "off", "accumulation": 1, "attention": "whatever the module calls (nn.MultiheadAttention "
                                                                  "and F.scaled_dot_product_attention: fused)",
        "memory_format": "NCHW (torch.contiguous_format)",
    },
    "transformers_trainer": {
        "precision": "fp32 (bf16=False, fp16=False); tf32=None leaves torch's TF32 defaults",
        "optimizer": "adamw_torch_fused (torch >= 2.8; adamw_torch before), weight_decay=0.0",
        "checkpointing": "off (gradient_checkpointing=False)", "accumulation": 1,
        "attention": "sdpa (the model's default attn_implementation)", "memory_format": "NCHW",
    },
    "this_project": {"setup": DEFAULT_SETUP.as_dict(),
                     "meaning": "what the sweeps ran: the catalog's precision and optimizer from the workload id, "
                                "torch's TF32 defaults, SGD momentum 0.9, foreach, zero_grad(set_to_none=True), "
                                "cross-entropy on fp32 logits, cudnn.benchmark=True, NCHW"},
}
