"""A discrete-event GPU cluster simulator: measured truth, predicted knowledge, six policies (slot, reactive, random
pairing, horus, ours, oracle pairing) on two traces (Alibaba's openb on measured pairs; openb's arrivals on Gavel's
matrix)."""

from gpupred.sim.openb import (
    TraceSlices,
    assign_workloads,
    cluster_for_load,
    fitting_jobs,
    gpu_tasks,
    homogeneous_scenario,
    load_openb,
    relative_speed,
    scenario,
    slice_trace,
    trace_counts,
    trace_jobs,
    with_speeds,
)
from gpupred.sim.cluster import (
    JOB_COLUMNS,
    BaselineSlowdown,
    Cluster,
    MatrixSlowdown,
    PairSlowdown,
    PredictedSlowdown,
    SimResult,
    Simulator,
    Slowdown,
    TruthLeak,
    simulate,
)
from gpupred.sim.experiment import (
    HISTORY_SEED,
    POLICY_ORDER,
    Settings,
    gain_spread,
    history_classes,
    make_ours,
    make_policies,
    measured_share,
    policy_metrics,
    perfect,
    run_trace,
    sharing_summary,
    trace_settings,
    tune_settings,
)
from gpupred.sim.metrics import (
    REPORT_KEYS,
    ci_halfwidth,
    interval,
    metrics_table,
    oracle_gain_share,
    paired_differences,
    report_metrics,
    summarize_seeds,
    util_timeseries,
)
from gpupred.sim.policies import (
    POLICIES,
    HorusClasses,
    HorusPolicy,
    OraclePolicy,
    OursPolicy,
    Policy,
    RandomPairPolicy,
    ReactivePolicy,
    SlotPolicy,
    horus_cost,
    make_policy,
    pair_gain,
)
from gpupred.sim.arrivals import WORKLOAD_COLUMNS, check_workload_table, load_trace_csv, synthetic_trace
from gpupred.sim.world import World, build_world, gavel_world

__all__ = [
    "HISTORY_SEED", "JOB_COLUMNS", "POLICIES", "POLICY_ORDER", "REPORT_KEYS", "WORKLOAD_COLUMNS", "BaselineSlowdown",
    "Cluster", "HorusClasses", "HorusPolicy", "MatrixSlowdown", "OraclePolicy", "OursPolicy", "PairSlowdown", "Policy",
    "PredictedSlowdown", "RandomPairPolicy", "ReactivePolicy", "Settings", "SimResult", "Simulator", "SlotPolicy",
    "Slowdown", "TraceSlices", "TruthLeak", "World", "assign_workloads", "build_world", "check_workload_table",
    "ci_halfwidth", "cluster_for_load", "fitting_jobs", "gain_spread", "gavel_world", "gpu_tasks", "history_classes",
    "homogeneous_scenario", "horus_cost", "interval", "load_openb", "load_trace_csv", "make_ours", "make_policies",
    "make_policy", "measured_share", "metrics_table", "oracle_gain_share", "pair_gain", "policy_metrics",
    "paired_differences", "perfect", "relative_speed", "report_metrics", "run_trace", "scenario", "sharing_summary",
    "simulate", "slice_trace", "summarize_seeds", "synthetic_trace", "trace_counts", "trace_jobs", "trace_settings",
    "tune_settings", "util_timeseries", "with_speeds",
]
