"""The item-8 comparison's metrics keys and figure (gpupred.learn.summary) on FIXTURE tables (never data)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupred.learn.summary import comparison_metrics, headline_metric, plot_methods


def _table() -> pd.DataFrame:
    """A FIXTURE comparison table (the columns of gpupred.learn.summary.comparison_table)."""
    return pd.DataFrame({"target": ["gpu_util", "memory_mib", "iter_time_mean_s"], "scheme": "leave one family out",
                         "tested": "H200", "method": "physics+correction", "rmsle": [0.2, 0.3, 0.4],
                         "median_rel_err": [0.5, 0.09, 0.2], "coverage": [0.9, 0.85, np.nan], "n": 10})


def test_memory_and_iteration_time_are_scored_by_relative_error() -> None:
    table = _table()
    assert headline_metric(table).tolist() == [0.2, 0.09, 0.2]
    h100 = table.assign(tested="H200->H100 SXM", rmsle=table["rmsle"] + 1, median_rel_err=table["median_rel_err"] + 1)
    constants = pd.DataFrame({"gpu": [], "protocol": []}).set_index(["gpu", "protocol"])
    out = comparison_metrics(pd.concat([table, h100]), ["H200", "H100 SXM"], {}, constants, "per_source")
    assert out["comparison_h100_sxm"]["memory_mib"]["leave one family out"] == {
        "H200->H100 SXM": {"physics+correction": 1.09}}
    assert list(out["comparison_h200"]["memory_mib"]["leave one family out"]) == ["H200"]
    assert out["comparison_h200"]["memory_mib"]["leave one family out"]["H200"] == {"physics+correction": 0.09}
    assert out["comparison_h200"]["gpu_util"]["leave one family out"]["H200"] == {"physics+correction": 0.2}
    assert out["comparison_h200_coverage"]["memory_mib"]["leave one family out"]["H200"] == {
        "physics+correction": 0.85}
    assert "iter_time_mean_s" not in out["comparison_h200_coverage"]  # no interval there: no key


def test_one_figure_has_a_panel_per_target() -> None:
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_methods(_table(), gpu="H200")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["gpu_util on H200 runs", "memory_mib on H200 runs", "iter_time_mean_s on H200 runs"]
    assert fig.axes[1].get_ylabel() == "median relative error" and fig.axes[0].get_ylabel() == "RMSLE"
