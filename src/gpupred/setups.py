"""The training setup of a job: the options that change a step's kernels and its memory, as one frozen object.

A :class:`TrainingSetup` is what the step model (:func:`gpupred.step.physics.kernels.step_kernels`), the memory footprint
(:mod:`gpupred.memory.physics`) and the predictor (``Predictor.predict``, ``gpupred predict``) take besides the graph, the
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
  cuDNN transpose each tensor-core convolution's operands;
- ``lora_rank`` (None: a full fine-tune): LoRA adapters as peft's ``LoraConfig`` adds them, with ``lora_alpha`` (peft's
  default 8; it scales, it costs nothing), ``lora_targets`` (None: peft's default target modules for the model type,
  :data:`gpupred.finetune.LORA_TARGET_MODULES`; a one-element tuple is a regular expression, as peft reads a string),
  ``lora_dropout`` (peft's default 0.0), ``lora_bias`` (``none``, ``all``, ``lora_only``) and
  ``lora_modules_to_save`` (modules trained whole, beside a frozen copy); every other parameter is frozen: no
  gradient, no optimizer state (:mod:`gpupred.finetune` counts what that changes);
- ``qlora``: the frozen Linear weights in 4-bit NF4 with double quantization (bitsandbytes' ``Params4bit``, as
  ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
  bnb_4bit_compute_dtype=torch.bfloat16)`` loads them), with LoRA adapters on top; it needs ``lora_rank`` and a 16-bit
  compute precision (bf16, fp16 or bf16-pure);
- optimizers from bitsandbytes and transformers: ``adamw8bit`` (``bnb.optim.AdamW8bit``: 8-bit blockwise moments),
  ``paged_adamw`` and ``paged_adamw8bit`` (``bnb.optim.PagedAdamW32bit`` / ``PagedAdamW8bit``: the moments in CUDA
  unified memory, counted as device memory at the peak), ``adafactor`` (``transformers.optimization.Adafactor`` with
  its defaults: factored second moment, no first moment); ``optimizer_impl`` applies to SGD, Adam and AdamW only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from typing import Any

from gpupred.errors import GpupredError

PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "bf16-pure")
AUTOCAST: frozenset[str] = frozenset({"bf16", "fp16"})  # autocast mixed precision (fp32 master weights)
HALF: frozenset[str] = frozenset({"bf16", "fp16", "bf16-pure"})  # contractions in 16 bits
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw", "adamw8bit", "paged_adamw", "paged_adamw8bit", "adafactor")
LORA_BIASES: tuple[str, ...] = ("none", "all", "lora_only")  # peft's LoraConfig.bias
OPTIMIZER_IMPLS: tuple[str, ...] = ("foreach", "fused", "forloop")
ATTENTIONS: tuple[str, ...] = ("auto", "eager", "sdpa", "flash")
TORCH_WEIGHT_DECAY: dict[str, float] = {  # torch.optim's defaults (bitsandbytes' AdamW: 0.01; transformers' Adafactor: 0)
    "sgd": 0.0, "adam": 0.0, "adamw": 0.01, "adamw8bit": 0.01, "paged_adamw": 0.01, "paged_adamw8bit": 0.01,
    "adafactor": 0.0}
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
    lora_rank: int | None = None  # None: every parameter trains (a full fine-tune)
    lora_alpha: float | None = None  # None: peft's default (8)
    lora_targets: tuple[str, ...] | None = None  # None: peft's default target modules for the model type
    lora_dropout: float = 0.0
    lora_bias: str = "none"
    lora_modules_to_save: tuple[str, ...] = ()
    qlora: bool = False

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
        self._check_lora()

    def _check_lora(self) -> None:
        """Refuse LoRA and QLoRA options that cannot run (one line each)."""
        for name in ("lora_targets", "lora_modules_to_save"):  # lists from JSON or typer: hashable tuples
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, (value,))
            elif value is not None:
                object.__setattr__(self, name, tuple(str(v) for v in value))
        _choice("LoRA bias", self.lora_bias, LORA_BIASES)
        if self.lora_rank is None:
            given = [n for n in ("lora_alpha", "lora_targets") if getattr(self, n) is not None]
            given += [n for n in ("lora_modules_to_save",) if getattr(self, n)] + (["qlora"] if self.qlora else [])
            if given:
                raise GpupredError(f"{given[0]} needs LoRA adapters: give a LoRA rank (--lora R, lora_rank=R)")
            return
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or self.lora_rank < 1:
            raise GpupredError(f"LoRA rank must be a whole number of 1 or more, got {self.lora_rank!r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise GpupredError(f"LoRA dropout must be from 0 to below 1, got {self.lora_dropout!r}")
        if self.lora_targets is not None and not self.lora_targets:
            raise GpupredError("LoRA target modules: the list is empty; name at least one module (or leave it out for "
                               "peft's default)")
        if self.qlora and self.precision not in HALF:
            raise GpupredError(f"QLoRA is modelled computing in 16 bits (bnb_4bit_compute_dtype bf16 or fp16, as the "
                               "QLoRA paper and peft's examples run it); fp32 compute, bitsandbytes' default, is not: "
                               f"precision {self.precision!r} is refused rather than guessed; use bf16, fp16 or "
                               "bf16-pure")

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
        """Parameter-sized buffers the optimizer keeps: SGD's momentum (0 without), Adam's and AdamW's two moments (in
        8 bits for the 8-bit ones), none for Adafactor (its factored second moment is a row and a column per matrix)."""
        if self.optimizer == "sgd":
            return 1.0 if self.sgd_momentum else 0.0
        return 0.0 if self.optimizer == "adafactor" else 2.0

    @property
    def lora(self) -> bool:
        """Whether LoRA adapters train on a frozen base (QLoRA included)."""
        return self.lora_rank is not None

    @property
    def recipe(self) -> str:
        """``full``, ``lora`` or ``qlora``: the fine-tuning recipe the setup is."""
        return "qlora" if self.qlora else "lora" if self.lora else "full"

    @property
    def counted_parameters(self) -> bool:
        """Whether the footprint counts weights, gradients and optimizer state tensor by tensor from the graph
        (:func:`gpupred.finetune.parameter_terms`): LoRA, QLoRA, or an optimizer whose state is not parameter-sized."""
        return self.lora or self.optimizer not in ("sgd", "adam", "adamw")

    @property
    def optimizer_key(self) -> str:
        """The optimizer as :data:`gpupred.memory.physics.OPTIMIZER_STATES` names it."""
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
        return tuple(getattr(self, name) for name in SETUP_FIELDS)

    def changes(self) -> dict[str, Any]:
        """The options that differ from the defaults (this project's sweeps)."""
        values = ((name, getattr(self, name)) for name in SETUP_FIELDS)  # plain values: asdict's copies cost 60 us
        return {k: v for k, v in values if v != getattr(DEFAULT_SETUP, k)}

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


SETUP_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(TrainingSetup))  # in order, found once: key() runs per job
DEFAULT_SETUP = TrainingSetup()


def setup_of(precision: str = "fp32", optimizer: str = "sgd", **options: Any) -> TrainingSetup:
    """The setup of a (precision, optimizer) pair as the catalog's ids name them, with any other options given."""
    if not options and isinstance(precision, str) and isinstance(optimizer, str):
        return _pair_setup(precision, optimizer)
    return DEFAULT_SETUP.with_options(precision=precision, optimizer=optimizer, **options)


@lru_cache(maxsize=64)
def _pair_setup(precision: str, optimizer: str) -> TrainingSetup:
    """:func:`setup_of` a pair alone, kept: a setup is a frozen value, and a queue asks for one per job."""
    return DEFAULT_SETUP.with_options(precision=precision, optimizer=optimizer)


def as_setup(setup: TrainingSetup | None, precision: str = "fp32", optimizer: str = "sgd") -> TrainingSetup:
    """``setup`` itself, or the setup of the (precision, optimizer) pair when there is none."""
    return setup if setup is not None else setup_of(precision, optimizer)


def setup_json(setup: TrainingSetup) -> str:
    """The options of ``setup`` that differ from the defaults as sorted JSON (a run row's ``setup``); lists as lists."""
    import json

    return json.dumps(setup.changes(), sort_keys=True, separators=(",", ":"))


def setup_from_json(text: Any) -> TrainingSetup | None:
    """The setup a JSON object of its options describes (a run row's ``setup``); None for empty or NaN (the workload
    id's own precision and optimizer)."""
    import json

    if text is None or (isinstance(text, float) and text != text) or text == "":
        return None
    try:
        options = json.loads(text) if isinstance(text, str) else dict(text)
        return DEFAULT_SETUP.with_options(**options)
    except (TypeError, ValueError) as e:
        raise GpupredError(f"training setup {str(text)[:60]!r}: not a JSON object of TrainingSetup options ({e})") from None


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


# ---- the input pipeline: how a job's batches reach the GPU ----

PIPELINE_KINDS: tuple[str, ...] = (
    "resident",  # the batch lives on the GPU (this project's sweeps): no host pipeline
    "host-tensors",  # pre-decoded arrays in memory, per sample through torchvision's CIFAR transforms
    "image-files",  # JPEG/PNG files decoded and augmented per sample (torchvision's training transforms)
    "text-tokens",  # pre-tokenized ids, padded and collated
    "audio-logmel",  # raw audio turned into log-mel features per sample (Whisper's feature extractor)
    "array-files",  # one array file read per sample (point clouds: .npy, or text as np.loadtxt reads it)
    "measured",  # a user's own DataLoader, timed by `gpupred loader measure` (gpupred.measure_loader)
)
IMAGE_FORMATS: tuple[str, ...] = ("jpeg", "png")
TRANSFORMS: tuple[str, ...] = ("v1", "v2")
ARRAY_FORMATS: tuple[str, ...] = (  # how array files are read, one per sample
    "npy",  # np.load of a .npy file
    "txt",  # np.loadtxt of a text file of numbers (as ShapeNet's .pts), with numpy's C parser (numpy 1.23 and later)
    "txt-legacy",  # the same with numpy before 1.23, whose loadtxt parsed in Python, 10-20x slower
)
MAX_WORKERS = 512
KIND_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {  # the options only one kind reads: (fields, what sets them)
    "image-files": (("image_width", "image_height", "image_format", "transforms"), "--image-source"),
    "audio-logmel": (("audio_s",), "audio_s"),
    "array-files": (("array_bytes", "array_format"), "--array-source"),
}


@dataclass(frozen=True)
class InputPipeline:
    """How a job's batches reach the GPU: a kind (``PIPELINE_KINDS``), its source, torch's DataLoader options and the
    host. Defaults are torch's, torchvision's and transformers' (DataLoader: ``num_workers=0``, ``pin_memory=False``,
    ``prefetch_factor=2`` with workers; images 500x375 JPEG, about ImageNet's mean size; 30 s of audio, Whisper's
    window). ``host_cores`` None gives each worker and the main process a core of its own; ``host_speed`` is the
    host's single-core speed relative to the host profile's (``gpupred loader bench``), so the profile's costs move
    by that ratio (None: a profile the job names is its own host's, 1; with none, the job runs on a GPU server like
    those this project measured, :func:`gpupred.step.physics.inputfeed.job_host_speed`); ``host_score`` the host's
    single-core score itself (:mod:`gpupred.loader.speed`, 1.0 = the reference host: what ``gpupred loader bench``
    prints and ``gpupred calibrate`` records, which a prediction with a calibration takes), moving the profile's costs
    by its ratio to the profile's score; ``profile`` a host-profile file (None: the committed reference host's)."""

    kind: str = "resident"
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    host_cores: float | None = None
    host_speed: float | None = None
    host_score: float | None = None
    image_width: int = 500
    image_height: int = 375
    image_format: str = "jpeg"
    transforms: str = "v1"
    audio_s: float = 30.0
    array_bytes: int = 30_000  # 2,500 points x 3 float32, a ShapeNet point cloud
    array_format: str = "npy"
    profile: str | None = None

    def __post_init__(self) -> None:
        _choice("input pipeline", self.kind, PIPELINE_KINDS)
        _choice("image format", self.image_format, IMAGE_FORMATS)
        _choice("transforms version", self.transforms, TRANSFORMS)
        _choice("array file format", self.array_format, ARRAY_FORMATS)
        if not isinstance(self.num_workers, int) or not 0 <= self.num_workers <= MAX_WORKERS:
            raise GpupredError(f"DataLoader workers must be a whole number from 0 to {MAX_WORKERS}, got {self.num_workers!r}")
        if self.prefetch_factor is not None and (self.num_workers == 0 or not self.prefetch_factor >= 1):
            raise GpupredError("prefetch_factor goes with workers (num_workers > 0) and is at least 1, as torch's "
                               f"DataLoader requires; got {self.prefetch_factor!r} with {self.num_workers} workers")
        for name in ("host_cores", "host_speed", "host_score", "audio_s"):
            value = getattr(self, name)
            if value is not None and not float(value) > 0:
                raise GpupredError(f"{name.replace('_', ' ')} must be more than 0, got {value!r}")
        if min(self.image_width, self.image_height, self.array_bytes) < 1:
            raise GpupredError("image sides and array bytes must be at least 1")
        self._check_kind_options()
        if self.kind == "measured" and self.profile is None:
            raise GpupredError("a measured pipeline needs the file `gpupred loader measure` wrote: give its path as "
                               "the pipeline's profile (--loader-profile FILE)")

    def _check_kind_options(self) -> None:
        """Refuse a source option of another kind (an image size on host tensors, say): no kind reads it, and an
        option is never ignored."""
        defaults = {f.name: f.default for f in fields(self)}
        for kind, (names, flag) in KIND_OPTIONS.items():
            moved = [n for n in names if kind != self.kind and getattr(self, n) != defaults[n]]
            if moved:
                a = "an" if self.kind[0] in "aeiou" else "a"
                raise GpupredError(f"{', '.join(moved)} ({flag}) describe{'s' if len(moved) == 1 else ''} the "
                                   f"sources of an {kind} pipeline; {a} {self.kind} pipeline reads none of "
                                   f"{'it' if len(moved) == 1 else 'them'}: drop {flag} or give --data {kind}")

    @property
    def resident(self) -> bool:
        """Whether the batch already sits on the GPU (no host pipeline)."""
        return self.kind == "resident"

    @property
    def cores(self) -> float:
        """The CPU cores the job's processes share: as given, else one per worker plus the main process."""
        return float(self.host_cores) if self.host_cores is not None else float(self.num_workers + 1)

    @property
    def host_named_by(self) -> str | None:
        """Which field names the job's host, the first given of ``host_speed``, ``host_score`` and ``profile`` (in
        the order :func:`gpupred.step.physics.inputfeed.job_host_speed` reads them); None when none does."""
        for name in ("host_speed", "host_score", "profile"):
            if getattr(self, name) is not None:
                return name
        return None

    def on_host(self, score: float | None) -> "InputPipeline":
        """This pipeline on a host of single-core score ``score`` (the one a GPU's calibration recorded), unless it
        names its host already (:attr:`host_named_by`) or the score is unknown (None)."""
        named = self.host_named_by is not None
        return self if score is None or self.resident or named else replace(self, host_score=float(score))

    @property
    def prefetch(self) -> int:
        """Batches each worker keeps ready (torch's default 2 with workers; 0 without)."""
        if self.num_workers == 0:
            return 0
        return 2 if self.prefetch_factor is None else int(self.prefetch_factor)

    def scale(self) -> float:
        """The size a host profile's per-sample cost is read at: source pixels for images, seconds for audio, bytes
        for array files, 1 for host tensors, tokens (the job's sequence) for text and 1 for the rest."""
        if self.kind == "image-files":
            return float(self.image_width * self.image_height)
        if self.kind == "audio-logmel":
            return float(self.audio_s)
        if self.kind == "array-files":
            return float(self.array_bytes)
        return 1.0

    def key(self) -> tuple[Any, ...]:
        """A hashable key of every option (for caches)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def changes(self) -> dict[str, Any]:
        """The options that differ from the defaults (a resident batch)."""
        return {k: v for k, v in asdict(self).items() if v != getattr(RESIDENT, k)}

    def as_dict(self) -> dict[str, Any]:
        """Plain values, for cards and JSON."""
        return asdict(self)


RESIDENT = InputPipeline()


def pipeline_of(kind: str | None = None, **options: Any) -> InputPipeline:
    """The input pipeline of a kind with any options given (None values are left at their defaults)."""
    known = {f.name for f in fields(InputPipeline)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise GpupredError(f"unknown input-pipeline option {unknown[0]!r}; known: {', '.join(sorted(known))}")
    given = {k: v for k, v in options.items() if v is not None}
    if kind in (None, "resident") and any(k != "profile" for k in given):
        raise GpupredError(f"{', '.join(sorted(given))} describe a host input pipeline: give its kind too (--data "
                           f"{'|'.join(PIPELINE_KINDS[1:])})")
    return replace(RESIDENT, kind=kind or "resident", **given)


def pipeline_json(pipeline: InputPipeline) -> str:
    """A run row's and a job frame's ``pipeline``: the options that differ from a resident batch as sorted JSON (''
    when resident); :func:`pipeline_from_json` reads it back."""
    import json

    if pipeline.resident:
        return ""
    return json.dumps(pipeline.changes(), sort_keys=True, separators=(",", ":"))


def pipeline_from_json(text: Any) -> InputPipeline:
    """The pipeline a JSON object of its options describes (a dataset record's ``pipeline``; empty or NaN: resident)."""
    import json

    if text is None or (isinstance(text, float) and text != text) or text == "":
        return RESIDENT
    try:
        options = json.loads(text) if isinstance(text, str) else dict(text)
    except (TypeError, ValueError) as e:
        raise GpupredError(f"input pipeline {str(text)[:60]!r}: not a JSON object of InputPipeline options ({e})") from None
    return pipeline_of(**options)
