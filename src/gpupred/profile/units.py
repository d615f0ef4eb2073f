"""Reading a sweep plan into run units (solo or co-located): each with a deterministic id so a resume finds it.

PLAN is ``catalog`` (every spec), ``catalog:N`` (the first N), ``catalog:family=resnet,vgg``,
``fused`` / ``fused:N`` (the fused catalog), or a text file with one workload id per line, or a
group ``id1 + id2 [+ id3 [+ id4]]`` per line for a co-located unit; ``#`` starts a comment. A line may
end with options, in any order:

- ``sync=step``, ``sync=window`` or ``sync=kernel`` (``CUDA_LAUNCH_BLOCKING=1``): how the training loop
  synchronizes (RUN_SCHEMA's ``sync``); without it the unit takes the sweep's ``--sync`` (default ``step``);
- ``repeat=K`` (K >= 2): the K-th measurement of the same unit, its own unit with its own id (``~rep-K`` at the end
  of the group id), so a sweep runs it instead of skipping it as already done. ``repeat=1`` is the plain unit;
- ``pipeline=KIND`` and its options: every member is fed by a real torch DataLoader of that standard kind
  (:class:`gpupred.setups.InputPipeline`; ``image-files``, ``text-tokens``, ``audio-logmel``, ``host-tensors``) over
  synthetic files instead of a resident batch. Its options (:data:`PIPELINE_KEYS`): ``workers=N``, ``pin=0|1``,
  ``prefetch=N``, ``transforms=v1|v2``, ``image=WxH``, ``format=jpeg|png``, ``audio_s=S``. E.g.
  ``resnet.resnet50-bs128-img224-bf16-adam pipeline=image-files workers=8 pin=1``. Without ``pipeline=`` the
  batch is resident, as before;
- training-setup options (:data:`SETUP_KEYS`): every member trains under a :class:`gpupred.setups.TrainingSetup`
  made of its own id's precision and optimizer and these options, as :mod:`gpupred.workloads.finetuning` builds it
  (transformers models only): ``optim=adamw``, ``impl=fused``, ``lora=R``, ``alpha=A``, ``targets=q_proj,v_proj``,
  ``dropout=P``, ``qlora=1``, ``ckpt=1``, ``attn=sdpa``, ``precision=bf16-pure``, ``accum=K``, ``decay=W``. E.g.
  ``llama.llama_1b-bs1-seq1024-bf16-adam optim=adamw lora=16 qlora=1 attn=sdpa``.

The raw-data schema carries no new column for sync or repeat: both live in the group id (:func:`parse_group_id`),
so sweeps written before a marker existed read as they always did. A pipeline lives in the group id too
(``~pipe-...`` before the other markers, :func:`pipeline_slug`) and in the run rows' ``pipeline`` column (the
options' JSON, :func:`gpupred.setups.pipeline_json`; '' for a resident batch).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from gpupred.errors import GpupredError
from gpupred.profile.schema import SYNC_MODES
from gpupred.setups import RESIDENT, InputPipeline, TrainingSetup, pipeline_of, setup_of
from gpupred.workloads.spec import FAMILIES, WorkloadSpec

MAX_GROUP = 4
DEFAULT_SYNC = "step"
SYNC_SUFFIX = "~sync-"  # a group id's marker of a non-default sync mode
REPEAT_SUFFIX = "~rep-"  # a group id's marker of a repeated measurement (the K-th, K >= 2)
PIPE_SUFFIX = "~pipe-"  # a group id's marker of a unit fed by a host input pipeline
# plan-line option -> InputPipeline field (``pipeline`` names the kind; ``image=WxH`` sets width and height)
PIPELINE_KEYS: dict[str, str] = {"pipeline": "kind", "workers": "num_workers", "pin": "pin_memory",
                                 "prefetch": "prefetch_factor", "transforms": "transforms", "image": "image",
                                 "format": "image_format", "audio_s": "audio_s"}
PLAN_PIPELINE_KINDS: tuple[str, ...] = ("image-files", "host-tensors", "text-tokens", "audio-logmel")
SETUP_SUFFIX = "~ft-"  # a group id's marker of a unit trained under setup options
# plan-line option -> TrainingSetup field, in the order a group id's marker names them
SETUP_KEYS: dict[str, str] = {"precision": "precision", "optim": "optimizer", "impl": "optimizer_impl",
                              "decay": "weight_decay", "ckpt": "checkpointing", "accum": "accumulation",
                              "attn": "attention", "lora": "lora_rank", "alpha": "lora_alpha",
                              "targets": "lora_targets", "dropout": "lora_dropout", "qlora": "qlora"}
SETUP_INTS, SETUP_FLOATS, SETUP_FLAGS = ("lora", "accum"), ("alpha", "dropout", "decay"), ("qlora", "ckpt")


def check_sync(sync: str, where: str = "sync") -> str:
    """``sync`` if it is a known mode, else a one-line GpupredError."""
    if sync not in SYNC_MODES:
        raise GpupredError(f"{where}: unknown sync mode {sync!r}; use one of {', '.join(SYNC_MODES)}")
    return sync


@dataclass(frozen=True)
class Unit:
    """One run unit: a solo workload or a co-located group of 2-4, and how its training loops synchronize."""

    workload_ids: tuple[str, ...]
    sync: str = DEFAULT_SYNC
    repeat: int = 1  # the how-many-th measurement of this unit in its sweep (1: the first)
    pipeline: InputPipeline = RESIDENT  # how every member's batches reach the GPU (resident: as before)
    setup: tuple[tuple[str, object], ...] = ()  # TrainingSetup options over each member's own (plan-key order)

    @property
    def group_id(self) -> str:
        """Deterministic id: the workload id for a solo run, ``co<k>-<hash>`` for a group (file-name safe).

        A unit run with ``sync=window`` ends in ``~sync-window`` (``sync=kernel`` in ``~sync-kernel``) so every
        setting of one spec lives in one sweep; the K-th repeat (K >= 2) then ends in ``~rep-K``. A unit fed by a host
        pipeline has ``~pipe-...`` before both.
        """
        if len(self.workload_ids) == 1:
            base = self.workload_ids[0]
        else:
            digest = hashlib.sha1(" + ".join(self.workload_ids).encode()).hexdigest()[:12]
            base = f"co{len(self.workload_ids)}-{digest}"
        if not self.pipeline.resident:
            base = f"{base}{PIPE_SUFFIX}{pipeline_slug(self.pipeline)}"
        if self.setup:
            base = f"{base}{SETUP_SUFFIX}{setup_slug(self.setup)}"
        base = base if self.sync == DEFAULT_SYNC else f"{base}{SYNC_SUFFIX}{self.sync}"
        return base if self.repeat == 1 else f"{base}{REPEAT_SUFFIX}{self.repeat}"

    @property
    def specs(self) -> list[WorkloadSpec]:
        """The members' specs."""
        return [WorkloadSpec.from_id(w) for w in self.workload_ids]

    def member_setup(self, spec: WorkloadSpec) -> TrainingSetup | None:
        """The setup a member trains under: its id's precision and optimizer with the unit's options (None: none)."""
        return member_setup(self.setup, spec) if self.setup else None

    @property
    def label(self) -> str:
        """Readable: the ids joined by ' + '."""
        return " + ".join(self.workload_ids)


def member_setup(options: tuple[tuple[str, object], ...], spec: WorkloadSpec) -> TrainingSetup:
    """The setup a member trains under: its id's precision and optimizer, then the unit's ``options`` over them."""
    return setup_of(spec.precision, spec.optimizer).with_options(**dict(options))


def member_setup_json(options: tuple[tuple[str, object], ...], workload_id: str) -> str:
    """A member's run-row ``setup``: its whole training setup (its id's precision and optimizer with the unit's
    ``options``) as JSON; '' when there are no options."""
    from gpupred.setups import setup_json

    return setup_json(member_setup(options, WorkloadSpec.from_id(workload_id))) if options else ""


def setup_options_json(options: tuple[tuple[str, object], ...]) -> str:
    """A unit's setup options as JSON (what the harness hands each member; '' for none)."""
    return json.dumps(dict(options), sort_keys=True, separators=(",", ":")) if options else ""


def setup_options_from_json(text: str) -> tuple[tuple[str, object], ...]:
    """:func:`setup_options_json` reversed, in plan-key order (lists as tuples)."""
    if not text:
        return ()
    return ordered_setup({k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(text).items()})


def ordered_setup(options: dict[str, object]) -> tuple[tuple[str, object], ...]:
    """TrainingSetup options as a unit holds them: (field, value) pairs in :data:`SETUP_KEYS` order."""
    order = list(SETUP_KEYS.values())
    return tuple(sorted(options.items(), key=lambda kv: order.index(kv[0])))


def setup_slug(options: tuple[tuple[str, object], ...]) -> str:
    """A file-name-safe, readable name of setup options for group ids, e.g. ``optimadamw-ckpt-attnsdpa-lora16-qlora``;
    target lists add a short hash."""
    plan_key = {field: key for key, field in SETUP_KEYS.items()}
    parts, rest = [], {}
    for name, value in options:
        key = plan_key[name]
        if key == "targets":
            rest[name] = list(value)  # type: ignore[call-overload]
        elif isinstance(value, bool):
            parts += [key] if value else [f"no{key}"]
        else:
            parts.append(f"{key}{value:g}" if isinstance(value, float) else f"{key}{value}")
    if rest:
        parts.append(hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:8])
    return "-".join(parts).replace(".", "p")


def pipeline_slug(pipeline: InputPipeline) -> str:
    """A file-name-safe, readable name of a pipeline for group ids, e.g. ``image-files-w8-pin1`` or
    ``image-files-w8-pin1-v2-png-640x480``; options beyond the plan line's add a short hash."""
    p = pipeline
    parts = [p.kind, f"w{p.num_workers}", f"pin{int(p.pin_memory)}"]
    parts += [f"pf{p.prefetch_factor}"] if p.prefetch_factor is not None else []
    if p.kind == "image-files":
        image = (p.transforms, p.image_format, f"{p.image_width}x{p.image_height}")
        default = (RESIDENT.transforms, RESIDENT.image_format, f"{RESIDENT.image_width}x{RESIDENT.image_height}")
        parts += [x for x, d in zip(image, default) if x != d]
    if p.kind == "audio-logmel" and p.audio_s != RESIDENT.audio_s:
        parts.append(f"a{p.audio_s:g}s")
    named = {"kind", "num_workers", "pin_memory", "prefetch_factor", "transforms", "image_format", "image_width",
             "image_height", "audio_s"}
    rest = {k: v for k, v in p.changes().items() if k not in named}
    if rest:
        parts.append(hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:8])
    return "-".join(parts).replace(".", "p")


def check_pipeline(spec: WorkloadSpec, pipeline: InputPipeline, where: str) -> None:
    """A one-line GpupredError unless ``spec``'s input is what the pipeline's loader yields."""
    if pipeline.resident:
        return
    token, family = FAMILIES[spec.family].input_token, spec.family
    fits = {"image-files": token == "img" and family != "dcgan", "host-tensors": token == "img" and family != "dcgan",
            "text-tokens": token == "seq" and family != "whisper", "audio-logmel": family == "whisper"}
    if pipeline.kind not in PLAN_PIPELINE_KINDS:
        raise GpupredError(f"{where}: pipeline={pipeline.kind} is not one a plan can run; use one of "
                           f"{', '.join(PLAN_PIPELINE_KINDS)}")
    if not fits[pipeline.kind]:
        raise GpupredError(f"{where}: {spec.id} does not take the input pipeline={pipeline.kind} yields (images: "
                           "image models; text-tokens: token models; audio-logmel: whisper)")
    if spec.fused > 1:
        raise GpupredError(f"{where}: {spec.id} is fused; a pipeline feeds plain (unfused) workloads only")


def _pipeline_option(key: str, value: str, where: str) -> dict[str, object]:
    """The InputPipeline fields of one plan-line pipeline option (one-line GpupredError if malformed)."""
    name = PIPELINE_KEYS[key]
    try:
        if key in ("workers", "prefetch"):
            return {name: int(value)}
        if key == "pin":
            if value not in ("0", "1"):
                raise ValueError(value)
            return {name: value == "1"}
        if key == "audio_s":
            return {name: float(value)}
        if key == "image":
            w, h = value.lower().split("x")
            return {"image_width": int(w), "image_height": int(h)}
    except ValueError:
        raise GpupredError(f"{where}: {key}={value!r} is malformed (e.g. workers=8 pin=1 prefetch=2 image=500x375 "
                           "audio_s=30)") from None
    return {name: value}


def _catalog_units(kind: str, arg: str) -> list[Unit]:
    from gpupred.workloads.catalog import catalog, fused_catalog

    specs = catalog() if kind == "catalog" else fused_catalog()
    if arg.startswith("family="):
        fams = {f.strip() for f in arg[len("family="):].split(",") if f.strip()}
        known = {s.family for s in specs}
        unknown = sorted(fams - known)
        if unknown:
            raise GpupredError(f"plan {kind}:{arg}: unknown families {unknown}; known: {', '.join(sorted(known))}")
        specs = [s for s in specs if s.family in fams]
    elif arg:
        try:
            n = int(arg)
        except ValueError:
            raise GpupredError(f"plan {kind}:{arg}: expected {kind}:N or {kind}:family=a,b") from None
        if n < 1:
            raise GpupredError(f"plan {kind}:{arg}: N must be at least 1 (plain {kind} runs every spec)")
        specs = specs[:n]
    return [Unit((s.id,)) for s in specs]


def parse_group_id(group_id: str) -> tuple[str, str, int]:
    """(the group id without its markers, its sync mode, its repeat number): :attr:`Unit.group_id` reversed."""
    base, repeat = group_id, 1
    head, marker, tail = base.rpartition(REPEAT_SUFFIX)
    if marker and tail.isdigit() and int(tail) >= 2:
        base, repeat = head, int(tail)
    head, marker, tail = base.rpartition(SYNC_SUFFIX)
    if marker and tail in SYNC_MODES:
        return head, tail, repeat
    return base, DEFAULT_SYNC, repeat


def _check_repeat(value: str, where: str) -> int:
    """The repeat number of a ``repeat=K`` option, else a one-line GpupredError."""
    if not value.isdigit() or int(value) < 1:
        raise GpupredError(f"{where}: repeat={value!r} must be a whole number >= 1 (2 for the second measurement)")
    return int(value)


def _line_options(line: str, default_sync: str, where: str) -> tuple[str, str, int, InputPipeline, tuple]:
    """(the line without its trailing ``sync=MODE`` / ``repeat=K`` / pipeline / setup options, the unit's sync mode,
    its repeat, its input pipeline, its setup options)."""
    sync, repeat, seen, options, setup = default_sync, 1, set(), {}, {}
    while True:
        head, _, last = line.rpartition(" ")
        key, eq, value = last.partition("=")
        if not eq or key not in ("sync", "repeat", *PIPELINE_KEYS, *SETUP_KEYS):
            return line, sync, repeat, _line_pipeline(options, where), ordered_setup(setup)
        if key in seen:
            raise GpupredError(f"{where}: {key}= given twice")
        seen.add(key)
        if key == "sync":
            sync = check_sync(value, where)
        elif key == "repeat":
            repeat = _check_repeat(value, where)
        elif key in SETUP_KEYS:
            setup[SETUP_KEYS[key]] = _setup_option(key, value, where)
        else:
            options.update(_pipeline_option(key, value, where))
        line = head.strip()


def _setup_option(key: str, value: str, where: str) -> object:
    """The TrainingSetup value of one plan-line setup option (one-line GpupredError if malformed)."""
    try:
        if key in SETUP_INTS:
            return int(value)
        if key in SETUP_FLOATS:
            return float(value)
        if key in SETUP_FLAGS:
            if value not in ("0", "1"):
                raise ValueError(value)
            return value == "1"
    except ValueError:
        raise GpupredError(f"{where}: {key}={value!r} is malformed (e.g. lora=16 alpha=32 dropout=0.05 qlora=1 ckpt=1 "
                           "accum=4 decay=0.01)") from None
    if key == "targets":
        return tuple(t for t in value.split(",") if t)
    return value


def check_setup(spec: WorkloadSpec, unit: "Unit", where: str) -> None:
    """A one-line GpupredError unless every member can train under the unit's setup options (a transformers model,
    unfused, fed resident batches, with options TrainingSetup accepts)."""
    if not unit.setup:
        return
    from gpupred.workloads.realworld import real_arch

    arch = real_arch(spec)
    if arch is None or arch.source != "hf":
        raise GpupredError(f"{where}: setup options run on the real-world transformers models (e.g. "
                           f"llama.llama_1b-bs1-seq1024-bf16-adam), not {spec.id}")
    if not unit.pipeline.resident:
        raise GpupredError(f"{where}: a unit with setup options trains on resident batches; drop pipeline=")
    try:
        unit.member_setup(spec)
    except GpupredError as err:
        raise GpupredError(f"{where}: {err}") from None


def _line_pipeline(options: dict[str, object], where: str) -> InputPipeline:
    """The input pipeline of a plan line's options (resident without any)."""
    if not options:
        return RESIDENT
    if "kind" not in options:
        raise GpupredError(f"{where}: {', '.join(sorted(options))} describe an input pipeline: add pipeline=KIND "
                           f"({', '.join(PLAN_PIPELINE_KINDS)})")
    try:
        return pipeline_of(**options)  # type: ignore[arg-type]
    except GpupredError as err:
        raise GpupredError(f"{where}: {err}") from None


def parse_plan_text(text: str, source: str = "<plan>", sync: str = DEFAULT_SYNC) -> list[Unit]:
    """Units from plan-file text (one id, or ``id + id ...``, per line, optionally ending in ``sync=MODE``,
    ``repeat=K``, pipeline and setup options)."""
    units: list[Unit] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        line, unit_sync, repeat, pipeline, setup = _line_options(line, sync, f"{source}:{lineno}")
        ids = tuple(p.strip() for p in line.split("+"))
        if not 1 <= len(ids) <= MAX_GROUP or any(not i for i in ids):
            raise GpupredError(f"{source}:{lineno}: expected a workload id or 2-{MAX_GROUP} ids joined by '+', got {line!r}")
        unit = Unit(ids, unit_sync, repeat, pipeline, setup)
        for i in ids:
            try:
                spec = WorkloadSpec.from_id(i)
            except GpupredError as err:
                raise GpupredError(f"{source}:{lineno}: {err}") from None
            check_pipeline(spec, pipeline, f"{source}:{lineno}")
            check_setup(spec, unit, f"{source}:{lineno}")
        units.append(unit)
    return units


def load_plan(plan: str, limit: int | None = None, sync: str = DEFAULT_SYNC) -> list[Unit]:
    """The plan's units in order, duplicates dropped, the first ``limit`` if given; ``sync`` is the default mode."""
    check_sync(sync)
    if limit is not None and limit < 1:
        raise GpupredError(f"limit {limit}: must be at least 1 unit (None for every unit)")
    head, _, arg = plan.partition(":")
    if head in ("catalog", "fused") and not Path(plan).is_file():
        units = [Unit(u.workload_ids, sync) for u in _catalog_units(head, arg)]
    else:
        path = Path(plan)
        if not path.is_file():
            raise GpupredError(f"plan {plan!r}: not a file and not catalog[:N|:family=..] or fused[:N]")
        units = parse_plan_text(path.read_text(), str(path), sync)
    seen: set[str] = set()
    out = []
    for u in units:
        if u.group_id not in seen:
            seen.add(u.group_id)
            out.append(u)
    if not out:
        raise GpupredError(f"plan {plan!r} holds no run units")
    return out if limit is None else out[:limit]
