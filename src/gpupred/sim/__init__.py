"""A discrete-event GPU cluster simulator for interference-aware scheduling (slot, reactive, proactive, ours)."""

from gpupred.sim.cluster import (
    JOB_COLUMNS,
    BaselineSlowdown,
    Cluster,
    MatrixSlowdown,
    SimResult,
    Simulator,
    Slowdown,
    simulate,
)
from gpupred.sim.metrics import metrics_table, report_metrics, util_timeseries
from gpupred.sim.policies import POLICIES, OursPolicy, Policy, ProactivePolicy, ReactivePolicy, SlotPolicy, make_policy
from gpupred.sim.traces import WORKLOAD_COLUMNS, load_trace_csv, synthetic_trace, workload_table

__all__ = [
    "JOB_COLUMNS", "WORKLOAD_COLUMNS", "BaselineSlowdown", "Cluster", "MatrixSlowdown", "SimResult", "Simulator",
    "Slowdown", "simulate", "metrics_table", "report_metrics", "util_timeseries", "POLICIES", "OursPolicy", "Policy",
    "ProactivePolicy", "ReactivePolicy", "SlotPolicy", "make_policy", "load_trace_csv", "synthetic_trace",
    "workload_table",
]
