"""Will it fit? The fit probability read from the memory interval, the largest batch, `predict`'s fit columns and
`gpupred fits` (on a catalog graph of the committed store, with the committed predictor)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from gpupred.predictor.fits import capacity_mib, fit_columns, fit_probability, largest_batch


def test_probability_on_a_constructed_interval() -> None:
    low, high, alpha = 80.0, 125.0, 0.1  # a 90% interval around a median of 100 (80 x 125 = 100^2)
    assert fit_probability(100.0, low, high, 100.0, alpha) == pytest.approx(0.5)
    assert fit_probability(100.0, low, high, high, alpha) == pytest.approx(0.95)  # the upper quantile: 1 - alpha/2
    assert fit_probability(100.0, low, high, low, alpha) == pytest.approx(0.05)
    sigma = math.log(high / low) / (2 * 1.6448536269514722)
    assert fit_probability(100.0, low, high, 110.0, alpha) == pytest.approx(
        0.5 * (1 + math.erf(math.log(1.1) / sigma / math.sqrt(2))))
    assert fit_probability(100.0, 100.0, 100.0, 99.0, alpha) == 0.0  # a zero-width interval: fits or not
    assert fit_probability(100.0, 100.0, 100.0, 101.0, alpha) == 1.0


def test_probability_is_monotone() -> None:
    caps = [50.0 * k for k in range(1, 10)]
    by_capacity = [fit_probability(200.0, 150.0, 260.0, c, 0.1) for c in caps]
    assert by_capacity == sorted(by_capacity) and by_capacity[0] < 0.01 and by_capacity[-1] > 0.99
    by_memory = [fit_probability(m, 0.8 * m, 1.25 * m, 300.0, 0.1) for m in (100.0, 200.0, 250.0, 300.0, 400.0)]
    assert by_memory == sorted(by_memory, reverse=True)
    wider = fit_probability(200.0, 100.0, 400.0, 300.0, 0.1)
    assert 0.5 < wider < fit_probability(200.0, 150.0, 260.0, 300.0, 0.1)  # a wider interval: less sure


def test_fit_columns_and_capacity() -> None:
    assert capacity_mib("A100 SXM 80GB") == 81920.0 and capacity_mib("T4") == 16384.0
    cols = fit_columns(70000.0, 60000.0, 80000.0, "A100 SXM 80GB", 0.1)
    assert cols["fits"] and cols["headroom_mib"] == 11920.0 and 0.95 < cols["fit_probability"] < 1.0  # above high
    assert not fit_columns(90000.0, 80000.0, 100000.0, "A100 SXM 80GB", 0.1)["fits"]


def test_largest_batch_search() -> None:
    calls: list[int] = []

    def step(limit: int):
        def prob(batch: int) -> float:
            calls.append(batch)
            return 0.99 if batch <= limit else 0.5
        return prob

    for limit in (1, 2, 37, 64, 1000):
        assert largest_batch(step(limit), 0.95, 4096) == limit
    assert largest_batch(step(0), 0.95, 4096) == 0
    assert largest_batch(step(10_000), 0.95, 100) == 100
    calls.clear()
    largest_batch(step(1000), 0.95, 65536)
    assert len(calls) < 25  # doubling then bisection


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpupred.cli", *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])


WORKLOAD = "gpt.gpt-v50257-m256-h4-l4-bs8-seq256-bf16-adam"  # its graph is in the committed store
FP16 = ("--precision", "fp16")  # the T4 has no bfloat16 (the workload's): the job as it runs there


def test_fits_lists_the_largest_batch_per_gpu() -> None:
    result = _cli("fits", WORKLOAD, *FP16, "--gpu", "T4", "--gpu", "H100 SXM", "--gpu", "h100", "--max-batch", "512",
                  "--json")
    assert result.returncode == 0, result.stderr
    listed = [r["gpu"] for r in json.loads(result.stdout)]
    assert listed == ["T4", "H100 SXM"]  # one row per GPU, however often it is named
    rows = {r["gpu"]: r for r in json.loads(result.stdout)}
    assert rows["H100 SXM"]["measured"] is True and rows["T4"]["measured"] is False  # the shipped predictor's data
    t4, h100 = rows["T4"], rows["H100 SXM"]
    assert 1 <= t4["max_batch"] < h100["max_batch"] <= 512
    assert t4["fit_probability"] >= 0.95 and t4["memory_mib"] <= t4["capacity_mib"]
    result = _cli("predict", WORKLOAD.replace("-bs8-", f"-bs{t4['max_batch'] + 1}-"), *FP16, "--gpu", "T4", "--json")
    assert result.returncode == 0, result.stderr
    over = json.loads(result.stdout)["fit"]  # the answer contract (gpupred.predictor.answer)
    assert over["probability"] < 0.95 and over["capacity_mib"] == 16384.0  # one more sample: not at 95%
    assert set(over) >= {"fits", "probability", "capacity_mib", "headroom_mib"}
    text = _cli("fits", WORKLOAD, *FP16, "--gpu", "T4", "--max-batch", "64")
    assert text.returncode == 0 and "max_batch" in text.stdout and "T4" in text.stdout


def test_predict_says_whether_it_fits_first() -> None:
    result = _cli("predict", WORKLOAD, *FP16, "--gpu", "T4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("fits: yes (P(memory <= 16384 MiB) = ")


def test_bf16_is_refused_where_the_gpu_has_none_and_fits_leaves_those_gpus_out() -> None:
    """bfloat16 needs compute capability 8.0 (torch only emulates it on Volta, Turing and Pascal; transformers'
    Trainer refuses it): predict refuses it in one line on a T4, fits names the T4 only to refuse it, and lists,
    unasked, every table GPU but the six without it."""
    from gpupred.hardware import bf16_native, known_gpu_names

    refused = _cli("predict", WORKLOAD, "--gpu", "T4")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "T4 (compute capability 7.5) has no bfloat16" in refused.stderr and "use fp16" in refused.stderr
    assert _cli("fits", WORKLOAD, "--gpu", "T4", "--json").returncode == 2
    listed = {r["gpu"] for r in json.loads(_cli("fits", WORKLOAD, "--max-batch", "8", "--json").stdout)}
    without = {g for g in known_gpu_names() if not bf16_native(g)}
    assert without == {"V100 PCIe 16GB", "V100 PCIe", "V100 SXM2 16GB", "V100 SXM2 32GB", "T4", "P100"}
    assert listed == set(known_gpu_names()) - without
