"""What a layer costs the host per training step, beside the fine-tune units (the campaign's stage 3): peft's and
bitsandbytes' Python, which the step model's launch cost, fitted on torch's own modules, does not hold.

The campaign's fine-tune preflight child (:func:`gpupred.campaign.executors.finetune_preflight`) runs
:func:`record_host_overhead` once per call, after :func:`gpupred.workloads.finetuning.preflight` passed, and the file
lands in the sweep's folder under ``host-overhead/``, packed with the units; the data card gives it
(:func:`gpupred.profile.datacard.host_overhead_line`). Imports torch, peft and bitsandbytes (that child only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpupred.workloads.builders import SEED
from gpupred.workloads.finetuning import quantize_linears

HOST_OVERHEAD_SCHEMA = "gpupred.host-overhead/1"


def record_host_overhead(device: str, out: str) -> Path | None:
    """:func:`host_overhead` written into the sweep's folder ``out``; None, with one line on stderr saying why, when
    the measurement fails: it rides beside the fine-tune units and never stops them."""
    try:
        return write_host_overhead(host_overhead(device), out)
    except Exception as exc:
        import sys

        print(f"fine-tune preflight: host overhead not measured ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def host_overhead(device: str = "cuda", layers: int = 24, width: int = 256, tokens: int = 256, steps: int = 30,
                  warmup: int = 5) -> dict[str, Any]:
    """What a layer costs the host per training step (forward and backward, bf16 autocast), measured on a stack of
    ``layers`` Linear layers too small for the device to matter: plain (trainable ``nn.Linear``), LoRA (peft's
    adapter, rank 8, on a frozen ``nn.Linear``) and QLoRA (the same on bitsandbytes' NF4 ``Linear4bit``, built as the
    fine-tune units build it). Each step ends in a device sync and is timed by the wall clock; the median of ``steps``
    after ``warmup``. ``per_layer_s``: LoRA over plain and QLoRA over LoRA, per layer and step: the Python that peft's
    and bitsandbytes' layers run (``Linear4bit.forward``, ``matmul_4bit``, its autograd function, the 4-bit ops'
    dispatch and ctypes calls), which the step model's launch cost, fitted on torch's own modules, does not hold.
    Recorded with this host's single-core score (:mod:`gpupred.loader.speed`), which moves it to other hosts."""
    import statistics
    import time

    from peft import LoraConfig, get_peft_model

    from gpupred.loader.hostinfo import cpu_model, now_utc, software_versions
    from gpupred.loader.speed import single_core_score

    kind = torch.device(device).type
    targets = [str(i) for i in range(layers)]

    def stack(quantized: bool) -> nn.Module:
        torch.manual_seed(SEED)
        model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
        if quantized:
            quantize_linears(model, torch.bfloat16)
        return model.to(device)  # Linear4bit makes its codes here

    def sync() -> None:
        if kind == "cuda":
            torch.cuda.synchronize()

    def median_step_s(model: nn.Module) -> float:
        x = torch.randn(tokens, width, device=device)
        times = []
        for _ in range(warmup + steps):
            sync()
            start = time.perf_counter()
            model.zero_grad(set_to_none=True)
            with torch.autocast(kind, dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            loss.backward()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times[warmup:])

    step_s = {"plain": median_step_s(stack(False))}
    for name, quantized in (("lora", False), ("qlora", True)):
        step_s[name] = median_step_s(get_peft_model(stack(quantized), LoraConfig(r=8, target_modules=targets)))
    shown = torch.cuda.get_device_name(torch.device(device)) if kind == "cuda" else f"cpu ({cpu_model()})"
    versions = software_versions({"peft": "peft", "bitsandbytes": "bitsandbytes"})
    return {"schema": HOST_OVERHEAD_SCHEMA, "device": str(shown), "layers": layers, "width": width,
            "tokens": tokens, "steps": steps, "step_s": step_s,
            "per_layer_s": {"lora_over_plain": (step_s["lora"] - step_s["plain"]) / layers,
                            "qlora_over_lora": (step_s["qlora"] - step_s["lora"]) / layers},
            "versions": {**versions, "cuda": str(torch.version.cuda or "")},
            "single_core_score": float(single_core_score()["score"]), "created_at": now_utc()}


def write_host_overhead(measured: dict[str, Any], folder: str) -> Path:
    """Write one :func:`host_overhead` measurement into ``folder``/host-overhead/ atomically, named by its time (a
    later call adds a file, numbered if one of the same second is there: none is overwritten)."""
    import json

    from gpupred.files import atomic_write_bytes

    stamp = measured["created_at"].replace(":", "").replace("-", "")
    path, n = Path(folder) / "host-overhead" / f"host-overhead-{stamp}.json", 1
    while path.exists():
        n += 1
        path = path.with_name(f"host-overhead-{stamp}-{n}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(measured, indent=1, sort_keys=True) + "\n").encode())
    return path

