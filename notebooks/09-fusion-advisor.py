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
# # 09 · How many trials to fuse: the fusion-count advisor against Hydro's memory rule
# Hydro (OSDI'23) trains F hyper-parameter trials of one small model as one job (`gpupred.workloads.fused`: F
# copies stacked and vmapped) to fill a GPU that one small trial leaves idle, and picks F by memory alone: the
# largest F that fits. The advisor (`gpupred advise-fusion`, `gpupred.fusion.advisor.advise_fusion`) asks the exported
# predictor (notebook 08's `models/predictor.joblib`, its physics core) for the step time, utilization and memory
# of every F, with 90 % intervals, and advises the smallest F that fits whose trials/s (F / step time) is within
# `tolerance` of the best: past it more copies only cost memory and each trial's wall time. No GPU and no torch:
# the fused graphs come from the graph store. The fused step is modelled two ways: `vmap` (one copy's kernels each
# doing F times the work, as torch.func.vmap runs them; the advisor's default) and `graph` (the kernels of the
# stored fused graph, F copies one after another: what the predictor does with a fused workload id as it stands).
# No fused run has been measured yet, so both curves are predictions; once `data/raw` holds the runs of
# `plans/fusion.txt` and `plans/fusion-coloc.txt` (issue 41, docs/remote-sweeps.md) this notebook puts the measured
# knee, utilization, samples/s and memory beside them, and fused against co-located throughput at F = 2 and 4.
#
# A notebook of its own, after 08: it reads 08's exported predictor and answers a question none of 01–08 asks
# (how to size one job, not how to predict or pack jobs), so it changes none of their figures.

# %% tags=["parameters"]
models: list = []  # workload ids to advise; [] = the fused catalog's F = 1 specs (5 models x fp32/bf16)
gpus: list = ["H100 SXM", "H200"]  # GPU kinds to advise for (`gpupred gpus` lists them)
counts: list = [1, 2, 4, 8, 16, 32, 64]  # fused counts F to consider (the fused catalog's)
steps: list = ["vmap", "graph"]  # step models of a fused job: vmap (the advisor's default) and graph
tolerance: float = 0.05  # advise the smallest F within this share of the best trials/s
predictor_path: str = ""  # predictor artifact; "" = models/predictor.joblib (notebook 08's)

# %%
import matplotlib.pyplot as plt
import pandas as pd

from gpupred import config, reports
from gpupred.errors import GpupredError, MissingInput
from gpupred.fusion import advisor, figures, measured
from gpupred.predictor.loading import load_predictor

try:
    predictor = load_predictor(predictor_path or None)
except GpupredError as err:  # no exported predictor yet: notebook 08 makes it
    raise MissingInput(str(err)) from None
if predictor.core is None:  # exported without the physics core the advisor asks
    raise MissingInput("the predictor has no physics core (step model and footprint): notebook 08 exports one")
todo = models or advisor.catalog_models()
advice = [advisor.advise_fusion(m, gpu, tuple(counts), tolerance, step, predictor=predictor)
          for gpu in gpus for m in reports.progress_bar(iterable=todo, desc=f"advise {gpu}") for step in steps]
table = advisor.advise_table(advice)
table[["model", "gpu", "step", "f", "f_low", "f_high", "hydro_f", "trials_per_s", "trials_per_s_low",
       "trials_per_s_high", "extrapolated"]].round(1)

# %% [markdown]
# Per GPU kind, one row per model: predicted utilization, samples/s (all copies) and memory against F (log scales
# but utilization), fp32 blue and bf16 orange, the `vmap` step model solid with its 90 % band, the `graph` one
# dotted; the advisor's F is the star, Hydro's the triangle (on the `vmap` curves), the card's memory the black line.

# %%
curves = advisor.curve_long(advice)
found = measured.measured_curves()
for gpu in gpus:
    fig = figures.curves_figure(curves, table, found, gpu)
    reports.save_figure(fig, f"09-fusion-curves-{gpu.replace(' ', '-').lower()}")
    plt.show()

# %% [markdown]
# The measured side: the knee per model (the same rule on measured trials/s), whether it lies in the advisor's
# interval, and what share of the best measured trials/s the advisor's F and Hydro's F reach.

# %%
if found.empty:
    print(f"no fused runs under {config.RAW} yet: the comparison with the measured knee and fused vs co-located "
          "throughput wait for plans/fusion.txt and plans/fusion-coloc.txt to be run (issue 41); skipped")
    comparison = pd.DataFrame()
else:
    comparison = measured.compare_with_advice(table, found, tolerance)
    display(comparison.round(3))  # noqa: F821 - IPython's display
    display(measured.fusion_vs_colocation(found).round(3))  # noqa: F821

# %%
vmap = table[table["step"] == "vmap"]
reports.write_metrics(advisor.FUSION_METRICS, {"fusion_advisor": {
    "tolerance": tolerance,
    "advised": {f"{r.model} @ {r.gpu}": {"f": r.f, "f_low": r.f_low, "f_high": r.f_high, "hydro_f": r.hydro_f}
                for r in vmap.itertuples()},
    "measured_models": int(found["model"].nunique()) if len(found) else 0,
    "knee_in_interval": None if comparison.empty else float(comparison["knee_in_interval"].mean()),
}})
vmap.groupby("gpu")[["f", "hydro_f"]].describe().round(1)
