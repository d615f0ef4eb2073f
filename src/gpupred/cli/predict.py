"""``gpupred predict`` (utilization, SM activity, step time and memory, with intervals, of an ONNX model, whether it
fits on the GPU, and their breakdowns: the answer of :mod:`gpupred.predictor.answer`), ``gpupred fits`` (the largest batch that fits on every GPU of the table) and ``gpupred gpus``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from gpupred.loader.speed import HOST_SCORE_BAND  # constants alone: nothing heavy on the CLI's start

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def looks_like_file(text: str) -> bool:
    """Whether a MODEL argument names a file rather than a workload id (ids have no slash and no .onnx)."""
    return text.endswith(".onnx") or "/" in text or "\\" in text


def gpu_table() -> pd.DataFrame:
    """The hardware table with, per GPU, how many runs each committed predictor was trained on (0: extrapolated)."""
    from gpupred import config
    from gpupred.errors import GpupredError
    from gpupred.hardware import known_gpus
    from gpupred.predictor.loading import read_card

    table = known_gpus()
    for column, path in (("runs_default", config.PREDICTOR), ("runs_noncommercial", config.PREDICTOR_NONCOMMERCIAL)):
        try:
            measured = read_card(path).get("measured_gpus", {}) if path.is_file() else {}
        except GpupredError:
            measured = {}
        table[column] = table["name"].map(lambda name: int(measured.get(name, 0)))
    return table


def check_model_choice(model: str | None, timm: str | None, hf: str | None, head: str | None, seq_len: int | None,
                       image_size: int | None) -> bool:
    """Whether ``predict`` was given a model by name (--timm/--hf); one line when the choice is not exactly one."""
    from gpupred.errors import GpupredError

    named = timm is not None or hf is not None
    if named == (model is not None):
        raise GpupredError("give MODEL (an .onnx file or a workload id), or --timm NAME, or --hf MODEL")
    if not named and (head, seq_len, image_size) != (None, None, None):
        raise GpupredError("--head, --seq-len and --image-size go with --timm or --hf")
    return named


def job_setup(model: str | None, batch_size: int | None, precision: str | None, optimizer: str | None,
              options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The training setup ``predict``'s options ask for, and what differs from the job's own (a workload id's batch,
    precision and optimizer; else fp32 and SGD): every option applies, none is dropped (see
    :class:`gpupred.predictor.jobs.JobOptions`)."""
    from gpupred.predictor.pairing import job_defaults
    from gpupred.setups import setup_of

    from gpupred.errors import GpupredError

    own_batch, own_precision, own_optimizer = job_defaults(model) if model is not None else (None, "fp32", "sgd")
    try:
        setup = setup_of(precision or own_precision, optimizer or own_optimizer, **options)
    except GpupredError as err:
        raise GpupredError(f"{model}: {err}" if model is not None else str(err)) from None
    own = setup_of(own_precision, own_optimizer).as_dict()
    changes = {k: v for k, v in setup.as_dict().items() if v != own[k]}
    if own_batch is not None and batch_size is not None and batch_size != own_batch:
        changes = {"batch_size": batch_size, **changes}
    return setup, changes


def register(app: Any) -> None:
    """Add ``gpupred predict``, ``gpupred fits`` and ``gpupred gpus`` to the CLI."""
    _register_predict(app)
    app.command("fits")(fits_cmd)
    _register_gpus(app)


def run_predict(model: str | None, setup: Any, batch_size: int | None, gpu: str | None, predictor_path: str | None,
                noncommercial: bool, calibration: str | None, no_calibration: bool, as_json: bool,
                named: tuple[Any, ...] | None = None, pipeline: Any = None) -> None:
    """``gpupred predict``'s work, once its options are read: checks, the predictor, one answer printed
    (:mod:`gpupred.predictor.answer`). ``named``: --timm, --hf, --head, --seq-len and --image-size, when the model is
    given by name; ``pipeline``: the job's host input pipeline (None: resident batches)."""
    from gpupred import config
    from gpupred.errors import GpupredError
    from gpupred.predictor.loading import load_predictor

    if named and batch_size is None:  # before minutes of export
        raise GpupredError(f"{'--timm ' + named[0] if named[0] is not None else '--hf ' + str(named[1])}: give the "
                           "training batch size (-b N)")
    if batch_size is not None and batch_size < 1:  # JobOptions' own check, said before any export
        raise GpupredError(f"batch size must be a positive whole number, got {batch_size!r}")
    if noncommercial and predictor_path:
        raise GpupredError("give --predictor PATH or --noncommercial, not both")
    if calibration and no_calibration:
        raise GpupredError("give --calibration FILE or --no-calibration, not both")
    predictor = load_predictor(config.PREDICTOR_NONCOMMERCIAL if noncommercial else predictor_path)
    if named:  # a missing predictor or an unknown GPU is said before minutes of export
        import sys

        from gpupred.calibration.use import check_gpu_known
        from gpupred.graph.named import describe_named, graph_for_options
        from gpupred.predictor.jobs import check_setup_on_gpu

        if gpu is not None:
            check_gpu_known(gpu, False if no_calibration else calibration)
            check_setup_on_gpu(setup, gpu)  # bf16 on a GPU without it: said before the export
        elif not calibration or no_calibration:  # no GPU named and none from a calibration file
            predictor.default_gpu()

        model = str(graph_for_options(*named, attention=setup.attention))
        print(describe_named(Path(model)), file=sys.stderr if as_json else sys.stdout)  # what was built
    answer = predictor.answer(model, batch_size=batch_size, precision=setup.precision, optimizer=setup.optimizer,
                              gpu=gpu, setup=setup, calibration=False if no_calibration else calibration,
                              pipeline=pipeline)
    print_prediction(answer, as_json)


Precision = Annotated[Optional[str], typer.Option("--precision", help="fp32; bf16 or fp16 (autocast; fp16 with "
                                                                       "GradScaler); bf16-pure (bf16 weights, no "
                                                                       "autocast) (default: a workload id's, else fp32).",
                                                   show_default=False)]
Optimizer = Annotated[Optional[str], typer.Option("--optimizer", help="sgd (momentum 0.9), adam, adamw, adamw8bit, "
                                                                       "paged_adamw, paged_adamw8bit (bitsandbytes) or "
                                                                       "adafactor (transformers) (default: a workload "
                                                                       "id's, else sgd).", show_default=False)]
OptimizerImpl = Annotated[Optional[str], typer.Option("--optimizer-impl", help="foreach (torch's default on CUDA), fused "
                                                                                 "or forloop.")]
NoMomentum = Annotated[bool, typer.Option("--no-momentum", help="SGD without momentum (torch's default).")]
WeightDecay = Annotated[Optional[float], typer.Option("--weight-decay", help="Weight decay (default: torch's: 0, AdamW "
                                                                               "0.01).")]
Tf32 = Annotated[Optional[bool], typer.Option("--tf32/--no-tf32", help="fp32 matmuls and convolutions on TF32 tensor "
                                                                         "cores (default: torch's: matmuls off, "
                                                                         "convolutions on).")]
Checkpointing = Annotated[bool, typer.Option("--checkpointing", help="Activation (gradient) checkpointing of every "
                                                                      "repeated block.")]
Accumulation = Annotated[int, typer.Option("--accumulation", help="Gradient accumulation: micro-batches of --batch-size "
                                                                   "per optimizer step.")]
Attention = Annotated[Optional[str], typer.Option("--attention", help="auto (as exported; --hf models: transformers' "
                                                                       "default, SDPA), eager, sdpa or flash.")]
ChannelsLast = Annotated[bool, typer.Option("--channels-last", help="Convolutions in channels_last (NHWC).")]
Lora = Annotated[Optional[int], typer.Option("--lora", help="LoRA rank R: peft adapters on a frozen base (default "
                                                             "targets: peft's for the model type).")]
LoraAlpha = Annotated[Optional[float], typer.Option("--lora-alpha", help="LoRA alpha (peft's default 8).")]
LoraTargets = Annotated[Optional[str], typer.Option("--lora-targets", help="Comma-separated target modules, e.g. "
                                                                            "q_proj,k_proj,v_proj,o_proj.")]
LoraDropout = Annotated[Optional[float], typer.Option("--lora-dropout", help="LoRA dropout (peft's default 0).")]
LoraConfig = Annotated[Optional[str], typer.Option("--lora-config", help="A peft adapter_config.json (r, lora_alpha, "
                                                                          "target_modules, lora_dropout, bias, "
                                                                          "modules_to_save).")]
Qlora = Annotated[bool, typer.Option("--qlora", help="QLoRA: 4-bit NF4 base weights, double quantization, 16-bit "
                                                      "compute (with --lora R).")]
Gpu = Annotated[Optional[str], typer.Option("--gpu", help="GPU name, e.g. 'H100 SXM' (`gpupred gpus` lists them). "
                                                           "Needed unless the predictor was trained on one GPU kind "
                                                           "or --calibration FILE names it; the shipped predictors "
                                                           "were trained on several.")]
PredictorPath = Annotated[Optional[str], typer.Option("--predictor", help="Predictor artifact (default "
                                                                           "models/predictor.joblib).")]
Noncommercial = Annotated[bool, typer.Option("--noncommercial", help="Use models/predictor-noncommercial.joblib, "
                                                                      "trained with imported data (non-commercial use "
                                                                      "only).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print a JSON object.")]
Model = Annotated[Optional[str], typer.Argument(help="An ONNX model file (or a workload id, which needs torch).",
                                                show_default=False)]
BatchSize = Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Training batch size (required for an "
                                                                               "ONNX file).")]
Timm = Annotated[Optional[str], typer.Option("--timm", help="A timm model by name instead of MODEL (random weights, no "
                                                             "download; exported once, then cached).")]
Hf = Annotated[Optional[str], typer.Option("--hf", help="A Hugging Face model instead of MODEL: a model type (llama, "
                                                         "bert, gpt2...), a config.json or its folder, or a hub id "
                                                         "(`gpupred named`: those known offline).")]
Head = Annotated[Optional[str], typer.Option("--head", help="With --hf: causal-lm, masked-lm, seq-cls, image-cls, "
                                                             "seq2seq-lm or speech-seq2seq (default: the config's).")]
SeqLen = Annotated[Optional[int], typer.Option("--seq-len", help="With --hf: tokens per sample (default: the model's "
                                                                  "longest position, at most 2048).")]
Data = Annotated[Optional[str], typer.Option("--data", help="How batches reach the GPU: resident (default: already on "
                                                               "it, as the sweeps ran), host-tensors, image-files, "
                                                               "text-tokens, audio-logmel, array-files or measured "
                                                               "(with --loader-profile).", show_default=False)]
Workers = Annotated[Optional[int], typer.Option("--workers", help="DataLoader num_workers (torch's default 0: the main "
                                                                   "process loads in line).", show_default=False)]
PinMemory = Annotated[Optional[bool], typer.Option("--pin-memory", help="DataLoader pin_memory=True.",
                                                    show_default=False)]
PrefetchFactor = Annotated[Optional[int], typer.Option("--prefetch-factor", help="DataLoader prefetch_factor (torch's "
                                                                                  "default 2 with workers).",
                                                        show_default=False)]
HostCores = Annotated[Optional[float], typer.Option("--host-cores", help="CPU cores the job gets (default: one per "
                                                                          "worker plus the main process).",
                                                    show_default=False)]
HostSpeed = Annotated[Optional[float], typer.Option("--host-speed", help="The host's single-core speed relative to the "
                                                                          "host profile's (`gpupred loader bench` "
                                                                          "prints its score). Default: 1 with "
                                                                          "--loader-profile; without, the host a "
                                                                          "calibration in use recorded, else a GPU "
                                                                          "server as this project measured them, about "
                                                                          "half the reference host's.",
                                                    show_default=False)]
HostScore = Annotated[Optional[float], typer.Option("--host-score", help="The host's single-core score as `gpupred "
                                                                          "loader bench` prints it (1.0: the reference "
                                                                          "host). Named, the host narrows the "
                                                                          "intervals, which otherwise span hosts "
                                                                          f"scoring {HOST_SCORE_BAND[0]:.2f}-"
                                                                          f"{HOST_SCORE_BAND[1]:.2f}.",
                                                    show_default=False)]
ImageSource = Annotated[Optional[str], typer.Option("--image-source", help="Source images WxH[:jpeg|png][:v1|v2] "
                                                                            "(default 500x375:jpeg:v1).",
                                                    show_default=False)]
LoaderProfile = Annotated[Optional[str], typer.Option("--loader-profile", help="A host profile from `gpupred loader "
                                                                                "bench` or `loader measure` (default: "
                                                                                "the committed reference host's).",
                                                      show_default=False)]


ArraySource = Annotated[Optional[str], typer.Option("--array-source", help="Array files BYTES[:npy|txt|txt-legacy]: "
                                                                            "float32 bytes of a sample's values and how "
                                                                            "they are read (txt-legacy: np.loadtxt of "
                                                                            "numpy before 1.23; default 30000:npy).",
                                                    show_default=False)]


def source_options(image_source: str | None, array_source: str | None) -> dict[str, Any]:
    """The InputPipeline options of ``--image-source WxH[:jpeg|png][:v1|v2]`` and ``--array-source BYTES[:FORMAT]``."""
    from gpupred.errors import GpupredError

    options: dict[str, Any] = {}
    if image_source is not None:
        parts = image_source.lower().split(":")
        try:
            width, height = (int(v) for v in parts[0].split("x"))
        except ValueError:
            raise GpupredError(f"--image-source {image_source!r}: expected WxH[:jpeg|png][:v1|v2], e.g. 500x375") from None
        options.update({"image_width": width, "image_height": height,
                        **{("transforms" if p in ("v1", "v2") else "image_format"): p for p in parts[1:]}})
    if array_source is not None:
        size, _, fmt = array_source.lower().partition(":")
        if not size.isdigit() or fmt.count(":"):
            raise GpupredError(f"--array-source {array_source!r}: expected BYTES[:npy|txt|txt-legacy], e.g. 45000:txt")
        options.update({"array_bytes": int(size), **({"array_format": fmt} if fmt else {})})
    return options


def pipeline_options(data: str | None, workers: int | None, pin_memory: bool | None, prefetch: int | None,
                     cores: float | None, speed: float | None, image_source: str | None, profile: str | None,
                     array_source: str | None = None, score: float | None = None) -> Any:
    """The :class:`gpupred.setups.InputPipeline` of ``predict``'s pipeline flags (None: resident, nothing asked)."""
    from gpupred.setups import pipeline_of

    options = {"num_workers": workers, "pin_memory": pin_memory, "prefetch_factor": prefetch, "host_cores": cores,
               "host_speed": speed, "host_score": score, "profile": profile,
               **source_options(image_source, array_source)}
    if data is None and all(v is None for v in options.values()):
        return None
    return pipeline_of(data, **options)


ImageSize = Annotated[Optional[int], typer.Option("--image-size", help="With --timm or an image --hf model: the image "
                                                                        "side.")]


def training_options(optimizer_impl: str | None = None, no_momentum: bool = False, weight_decay: float | None = None,
                     tf32: bool | None = None, checkpointing: bool = False, accumulation: int = 1,
                     attention: str | None = None, channels_last: bool = False,
                     lora: tuple[Any, ...] = (None, None, None, None, None, False)) -> dict[str, Any]:
    """The :class:`gpupred.setups.TrainingSetup` options of the CLI's flags besides precision and optimizer; ``lora``:
    (--lora, --lora-alpha, --lora-targets, --lora-dropout, --lora-config, --qlora), the flags overriding the config
    file's fields."""
    rank, alpha, targets, dropout, config, qlora = lora
    options: dict[str, Any] = {}
    if config is not None:
        from gpupred.finetune import read_adapter_config

        options = read_adapter_config(config)
    flags = {"lora_rank": rank, "lora_alpha": alpha, "lora_dropout": dropout, "qlora": qlora or None,
             "lora_targets": tuple(t.strip() for t in targets.split(",") if t.strip()) if targets is not None else None}
    options.update({k: v for k, v in flags.items() if v is not None})
    return {"optimizer_impl": optimizer_impl, "sgd_momentum": False if no_momentum else None,
            "weight_decay": weight_decay, "tf32_matmul": tf32, "tf32_conv": tf32, "checkpointing": checkpointing,
            "accumulation": accumulation, "attention": attention, "channels_last": channels_last, **options}


def predict_cmd(model: Model = None, batch_size: BatchSize = None, precision: Precision = None,
                optimizer: Optimizer = None, optimizer_impl: OptimizerImpl = None, no_momentum: NoMomentum = False,
                weight_decay: WeightDecay = None, tf32: Tf32 = None, checkpointing: Checkpointing = False,
                accumulation: Accumulation = 1, attention: Attention = None, channels_last: ChannelsLast = False,
                lora: Lora = None, lora_alpha: LoraAlpha = None, lora_targets: LoraTargets = None,
                lora_dropout: LoraDropout = None, lora_config: LoraConfig = None, qlora: Qlora = False,
                gpu: Gpu = None, predictor_path: PredictorPath = None, noncommercial: Noncommercial = False,
                as_json: AsJson = False,
                calibration: Annotated[Optional[str], typer.Option("--calibration", help="A file `gpupred calibrate` "
                                       "wrote for the GPU (default: the newest of this user's for --gpu).")] = None,
                no_calibration: Annotated[bool, typer.Option("--no-calibration", help="Use no calibration, not even "
                                                                                     "this user's.")] = False,
                timm: Timm = None, hf: Hf = None, head: Head = None, seq_len: SeqLen = None,
                image_size: ImageSize = None, data: Data = None, workers: Workers = None, pin_memory: PinMemory = None,
                prefetch_factor: PrefetchFactor = None, host_cores: HostCores = None, host_speed: HostSpeed = None,
                image_source: ImageSource = None, array_source: ArraySource = None,
                loader_profile: LoaderProfile = None, host_score: HostScore = None) -> None:
    """Predict GPU utilization, SM activity, step time and memory of a training job from its ONNX graph (or a model by
    name), whether it fits on the GPU, and their breakdowns; with --data, fed by a host input pipeline. Prints the
    versioned answer (schema gpupred.prediction/4; --json: as JSON)."""
    from gpupred.errors import GpupredError

    named = check_model_choice(model, timm, hf, head, seq_len, image_size)
    if model is not None and looks_like_file(model) and not Path(model).is_file():  # the user's file first
        raise GpupredError(f"{model}: no such file; give the path of an .onnx model (or a catalog workload id)")
    setup, _ = job_setup(model, batch_size, precision, optimizer, training_options(
        optimizer_impl, no_momentum, weight_decay, tf32, checkpointing, accumulation, attention, channels_last,
        (lora, lora_alpha, lora_targets, lora_dropout, lora_config, qlora)))
    pipeline = pipeline_options(data, workers, pin_memory, prefetch_factor, host_cores, host_speed, image_source,
                                loader_profile, array_source, host_score)
    run_predict(model, setup, batch_size, gpu, predictor_path, noncommercial, calibration, no_calibration, as_json,
                named=(timm, hf, head, seq_len, image_size) if named else None, pipeline=pipeline)


def _register_predict(app: Any) -> None:
    """Add ``gpupred predict``."""
    app.command("predict")(predict_cmd)


def fits_cmd(model: Model = None, precision: Precision = None, optimizer: Optimizer = None,
             optimizer_impl: OptimizerImpl = None, no_momentum: NoMomentum = False, weight_decay: WeightDecay = None,
             checkpointing: Checkpointing = False, accumulation: Accumulation = 1, attention: Attention = None,
             lora: Lora = None, lora_alpha: LoraAlpha = None, lora_targets: LoraTargets = None,
             lora_dropout: LoraDropout = None, lora_config: LoraConfig = None, qlora: Qlora = False,
             gpu: Annotated[Optional[list[str]], typer.Option("--gpu", help="Only these GPUs (repeat; default: every "
                                                                              "GPU of the hardware table).")] = None,
             threshold: Annotated[float, typer.Option("--threshold", help="Fit probability the batch must reach.")] = 0.95,
             max_batch: Annotated[int, typer.Option("--max-batch", help="The largest batch size tried.")] = 65536,
             predictor_path: PredictorPath = None, noncommercial: Noncommercial = False, as_json: AsJson = False,
             timm: Timm = None, hf: Hf = None, head: Head = None, seq_len: SeqLen = None,
             image_size: ImageSize = None) -> None:
    """For one job, every GPU of the hardware table with the largest batch that fits there at 95% (or --threshold)."""
    from gpupred import config
    from gpupred.errors import GpupredError
    from gpupred.hardware import gpu_spec, known_gpus
    from gpupred.predictor.loading import load_predictor
    from gpupred.predictor.fits import fits_table
    from gpupred.predictor.jobs import setup_runs_on

    named = check_model_choice(model, timm, hf, head, seq_len, image_size)
    if model is not None and looks_like_file(model) and not Path(model).is_file():
        raise GpupredError(f"{model}: no such file; give the path of an .onnx model (or a catalog workload id)")
    if not 0.0 < threshold < 1.0 or max_batch < 1:
        raise GpupredError(f"--threshold must be between 0 and 1 and --max-batch 1 or more, got {threshold}, {max_batch}")
    for name in gpu or []:  # an unknown GPU is said before minutes of export (fits reads the table alone)
        gpu_spec(name)
    setup, _ = job_setup(None if named else model, None, precision, optimizer, training_options(
        optimizer_impl, no_momentum, weight_decay, None, checkpointing, accumulation, attention, False,
        (lora, lora_alpha, lora_targets, lora_dropout, lora_config, qlora)))
    predictor = load_predictor(config.PREDICTOR_NONCOMMERCIAL if noncommercial else predictor_path)
    graph, label, setup, key, recipe = fits_job(model, setup, (timm, hf, head, seq_len, image_size) if named else None)
    table = fits_table(predictor, graph, label, setup, gpu, threshold, max_batch, key=key, recipe=recipe)
    if as_json:
        print(table.to_json(orient="records"))
        return
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}" if v < 1.5 else f"{v:.0f}"))
    print(f"max_batch: the largest batch whose memory fits at P >= {threshold:g} (0: not even batch 1); memory_mib and "
          "fit_probability at that batch; the memory interval read as a log-normal's (gpupred.predictor.fits); "
          "measured: the predictor was trained on runs on that GPU (False: extrapolated, a wider interval)")
    left = [] if gpu else [g for g in known_gpus()["name"] if not setup_runs_on(setup, g)]
    if left:  # the table's GPUs the setup cannot run on, which fits_table left out
        print(f"not listed: {', '.join(left)}: the setup does not run there (bfloat16 and FlashAttention-2 need "
              "compute capability 8.0 or later)")


def fits_job(model: str | None, setup: Any, named: tuple[Any, ...] | None) -> tuple[Any, str, Any, Any, str]:
    """(graph, label, setup, kernel key, recipe) of the job ``gpupred fits`` sizes: a file, a catalog workload's graph
    (``setup`` holds its precision and optimizer unless others were asked), or a model by name; its batch is what
    ``fits`` varies."""
    from gpupred.errors import GpupredError

    if named:
        from gpupred.graph.named import graph_for_options

        path = str(graph_for_options(*named, attention=setup.attention))
        return path, named[1] or named[0], setup, None, "standard"
    if looks_like_file(str(model)):
        return str(model), str(model), setup, None, "standard"
    from gpupred.graph.graphstore import graph_for
    from gpupred.step.physics.columns import recipe_of
    from gpupred.workloads.spec import WorkloadSpec

    try:
        spec = WorkloadSpec.from_id(str(model))
    except GpupredError:
        raise GpupredError(f"{model!r} is neither an ONNX file nor a workload id") from None
    return graph_for(spec), str(model), setup, spec.arch_key, recipe_of(spec.family)


def _register_gpus(app: Any) -> None:
    """Add ``gpupred gpus``."""
    import typer

    @app.command("gpus")
    def gpus_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON records.")) -> None:
        """List the GPUs gpupred knows (vendor specs) and how many measured runs each committed predictor has on them."""
        table = gpu_table()
        if as_json:
            print(table.to_json(orient="records"))
            return
        print(table.to_string(index=False))
        print("runs_*: measured runs in each predictor's training data; 0 = predictions there are extrapolated")


def print_prediction(answer: dict[str, Any], as_json: bool) -> None:
    """Print one answer (:mod:`gpupred.predictor.answer`): its JSON, or its text rendering."""
    from gpupred.predictor.answer import answer_json, render_text

    print(answer_json(answer) if as_json else render_text(answer))
