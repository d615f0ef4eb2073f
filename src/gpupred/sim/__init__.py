"""A discrete-event GPU cluster simulator: measured truth, predicted knowledge, four policies (slot, reactive, horus, ours)."""

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
from gpupred.sim.alibaba import (
    TraceSlices,
    assign_workloads,
    cluster_for_load,
    fitting_jobs,
    gpu_tasks,
    load_openb,
    relative_speed,
    scenario,
    slice_trace,
    trace_counts,
    trace_jobs,
    with_speeds,
)
from gpupred.sim.experiment import (
    HISTORY_SEED,
    POLICY_ORDER,
    QUALITIES,
    Settings,
    gain_spread,
    history_classes,
    loads_sweep,
    make_ours,
    make_policies,
    measured_share,
    ours_jct,
    run_policies,
    run_qualities,
    run_seeds,
    sharing_summary,
    candidate_share,
    trace_settings,
    tune_settings,
    with_quality,
)
from gpupred.sim.metrics import (
    REPORT_KEYS,
    ci_halfwidth,
    metrics_table,
    paired_differences,
    report_metrics,
    summarize_seeds,
    util_timeseries,
    verdict,
    why_line,
)
from gpupred.sim.policies import (
    POLICIES,
    HorusClasses,
    HorusPolicy,
    OursPolicy,
    Policy,
    ReactivePolicy,
    SlotPolicy,
    horus_cost,
    make_policy,
    pair_gain,
)
from gpupred.sim.traces import WORKLOAD_COLUMNS, check_workload_table, load_trace_csv, synthetic_trace
from gpupred.sim.world import World, build_world

__all__ = [
    "QUALITIES", "TraceSlices", "candidate_share", "load_openb", "scenario", "sharing_summary", "trace_settings",
    "tune_settings", "gain_spread", "ours_jct", "verdict", "why_line", "assign_workloads", "cluster_for_load", "relative_speed", "with_speeds", "fitting_jobs", "gpu_tasks", "run_qualities",
    "slice_trace", "trace_counts", "trace_jobs", "with_quality",
    "HISTORY_SEED", "JOB_COLUMNS", "POLICIES", "POLICY_ORDER", "REPORT_KEYS", "WORKLOAD_COLUMNS", "BaselineSlowdown", "Cluster",
    "HorusClasses", "HorusPolicy", "MatrixSlowdown", "OursPolicy", "PairSlowdown", "Policy", "PredictedSlowdown",
    "ReactivePolicy", "Settings", "SimResult", "Simulator", "SlotPolicy", "Slowdown", "TruthLeak", "World", "pair_gain",
    "build_world", "check_workload_table", "ci_halfwidth", "history_classes", "horus_cost", "load_trace_csv",
    "loads_sweep", "make_ours", "make_policies", "make_policy", "measured_share", "metrics_table", "paired_differences",
    "report_metrics", "run_policies", "run_seeds", "simulate", "summarize_seeds", "synthetic_trace", "util_timeseries",
]
