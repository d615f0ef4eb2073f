"""The measured fine-tunes' step times against the step model (notebook 03's real-world section, issue 78): on
FIXTURE run rows naming the campaign's 1.1B LLaMA units, with FIXTURE measurements."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpupred.contracts import ESTIMATOR_METRICS
from gpupred.predictor.realworld_report import finetune_step_metrics, finetune_steps
from gpupred.step.physics.constants import ConstantsTable

WORKLOAD = "llama.llama_1b-bs2-seq512-bf16-adam"  # a unit of plans/finetune.txt, its graph in the committed store
SETUPS = {"full": {"attention": "sdpa", "optimizer": "adamw", "precision": "bf16"},
          "lora": {"attention": "sdpa", "lora_rank": 16, "optimizer": "adamw", "precision": "bf16"},
          "qlora": {"attention": "sdpa", "lora_rank": 16, "optimizer": "adamw", "precision": "bf16", "qlora": True}}


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    """FIXTURE runs: one per recipe on an H200, each measured at 0.1 s a step and 50 % utilization."""
    runs = pd.DataFrame([{"group_id": f"FIXTURE-{r}", "workload_id": WORKLOAD, "setup": json.dumps(s),
                          "gpu_name": "NVIDIA H200", "status": "ok", "sync": "step", "iter_time_mean_s": 0.1,
                          "gpu_util": 50.0} for r, s in SETUPS.items()])
    return finetune_steps(ConstantsTable({}), runs).set_index("recipe")


def test_each_recipe_is_timed_as_it_trains(table: pd.DataFrame) -> None:
    """A LoRA step skips the base's weight gradients and optimizer: shorter than the full fine-tune's; QLoRA adds
    the dequantization of every base weight to LoRA's step: longer than it."""
    assert (table["note"] == "").all()
    step = table["step_predicted_s"]
    assert step["lora"] < step["full"] and step["qlora"] > step["lora"]
    assert np.allclose(table["step_log_error"], np.log(step / 0.1))
    assert np.allclose(table["util_error_points"], table["util_predicted"] - 50.0)


def test_the_figures_are_the_contracts_keys(table: pd.DataFrame) -> None:
    """The step figures per recipe and over all runs, each a key the notebook's metrics contract declares."""
    figures = finetune_step_metrics(table.reset_index())
    assert figures["realworld_finetune_runs"] == 3.0
    assert figures["realworld_finetune_step_median_error"] == pytest.approx(
        float(np.median(np.abs(table["step_predicted_s"] / 0.1 - 1))))
    assert {"realworld_finetune_step_full_median_error", "realworld_finetune_step_qlora_median_error"} <= set(figures)
    assert ESTIMATOR_METRICS.check(figures) == figures  # notebook 03's schema: an undeclared key raises
