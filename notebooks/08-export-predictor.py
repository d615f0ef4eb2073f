# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Export the predictor
# Trains the model notebook 03 chose for each target (by a grouped inner cross-validation on every row)
# as a CV+ conformal regressor on all runs of every source, and writes `models/predictor.joblib` with its
# card `models/predictor.json`: feature order, transforms, the outer-fold figures of notebooks 03 and 05,
# the training sources with their licences, data fingerprint, library versions, sha256. Trained on
# published data, the predictor inherits its licences: Lucid's S-Lab License 1.0 allows non-commercial
# use only, and so does this artifact (the card says so).

# %% tags=["parameters"]
model: str = ""  # regressor for every target; "" = notebook 03's choice per target (reports/metrics.json), else xgboost
alpha: float = 0.1  # 1 - nominal interval coverage
n_folds: int = 5  # CV+ folds (grouped by workload)
tune: bool = False  # small grid search inside each fit

# %%
import json

import pandas as pd

from gpupred import config, dataset, reports
from gpupred.predictor import export_predictor, load_predictor, train_predictor
from gpupred.predictor.artifact import usage_restriction

df = dataset.load_dataset()  # MissingInput until data is imported or collected and notebook 02 has run
earlier = json.loads(config.METRICS.read_text()) if config.METRICS.exists() else {}
models = {t: model or earlier.get("util_best_model" if t == "gpu_util" else f"{t}_best_model") or "xgboost"
          for t in ("gpu_util", "memory_mib", "sm_active")}
print(f"models: {models}")
print(usage_restriction(df) or "no licence restriction inherited")

# %%
predictor = train_predictor(df, models=models, alpha=alpha, n_folds=n_folds, tune=tune)
keep = ("_rmsle_", "_interval_coverage_", "_best_model", "memory_median_rel_err", "memory_p90_rel_err", "n_workloads")
cv_metrics = {k: v for k, v in earlier.items() if any(part in k for part in keep)}  # notebooks 03 and 05, outer folds
path = export_predictor(predictor, df, config.PREDICTOR, cv_metrics=cv_metrics)
loaded = load_predictor(path)  # the loader's checks pass on what was just written
card = loaded.card
pd.DataFrame({name: {k: v for k, v in entry.items() if k in ("n_runs", "gpus", "licence", "commit")}
              for name, entry in card["sources"].items()}).T

# %%
{k: card[k] for k in ("sha256", "targets", "usage_restriction")}

# %% [markdown]
# The card carries the outer-fold RMSLE and interval coverage measured in notebook 03 (grouped random
# and leave-one-family-out, pooled and per source) and the memory errors of notebook 05, never a
# figure computed on the rows the exported model was fitted on. A new job is predicted as this
# project's own sweeps measure (NVML every 50 ms, a sync per step, device-resident batches).

# %%
reports.update_metrics({"predictor_sha256": card["sha256"], "predictor_models": models,
                        "predictor_usage_restriction": card["usage_restriction"]})
