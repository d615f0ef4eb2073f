"""Co-location: measured pairs from every source (this project's sweeps, Lucid, Gavel), slowdown estimators from
zero-parameter priors to calibration from reference co-runs, held-out scoring by model group, and whether a pair fits
in memory."""

from gpupred.colocation.effects import job_effects, monotone_ceiling, partner_rows, self_pair_noise
from gpupred.slowdown.estimator import (
    PAIR_KEYS,
    CorrectedSlowdown,
    SlowdownEstimator,
    SlowdownModel,
    StepShare,
    SummedUtilization,
    TimeSharing,
    pair_frame,
)
from gpupred.colocation.failures import FailureModel
from gpupred.colocation.members import (
    FEATURE_KEYS,
    align,
    baseline_slowdown,
    measured_features,
    predicted_features,
    usable_groups,
    with_busy,
)
from gpupred.colocation.gavelpairs import cross_gpu_busy, gavel_job_features, gavel_solo_truth, gavel_table, load_gavel
from gpupred.colocation.matrix import PairKnowledge, heldout_matrices, ordered_pairs
from gpupred.colocation.memfit import (
    fits_together,
    group_memory_fit,
    pair_memory_quantile,
    pair_oom_probability,
)
from gpupred.slowdown.evaluate import (
    Cell,
    calibration_predictions,
    crossfit_predict,
    group_cells,
    reference_jobs,
    score,
    solo_baseline_flags,
)
from gpupred.colocation.study import (
    Slice,
    SliceResult,
    gavel_slice,
    lucid_slices,
    own_slices,
    run_slice,
    slice_metrics,
    utilization_slice,
)
from gpupred.colocation.pairtable import (
    LUCID_PAIR_COLUMNS,
    LUCID_SOLO_COLUMNS,
    SOLO_COLUMNS,
    TABLE_COLUMNS,
    colocation_table,
    failed_groups,
    load_colocation,
    load_pair_sources,
    lucid_solo_truth,
    lucid_table,
    own_solo_truth,
    pair_slowdown_matrix,
    read_solo_samples,
    refuse_simulated,
    solo_measurements,
    source_summary,
    window_means,
)
from gpupred.slowdown.physics import busy_fraction, group_timeshare, pair_timeshare, timeshare_slowdown

__all__ = [
    "FEATURE_KEYS", "LUCID_PAIR_COLUMNS", "LUCID_SOLO_COLUMNS", "PAIR_KEYS", "SOLO_COLUMNS", "TABLE_COLUMNS", "Cell",
    "CorrectedSlowdown", "FailureModel", "PairKnowledge", "Slice", "SliceResult", "SlowdownEstimator", "SlowdownModel",
    "StepShare", "SummedUtilization", "TimeSharing", "align", "baseline_slowdown", "busy_fraction",
    "calibration_predictions", "colocation_table", "cross_gpu_busy", "crossfit_predict", "failed_groups",
    "fits_together", "gavel_job_features", "gavel_slice", "gavel_solo_truth", "gavel_table", "group_cells",
    "group_memory_fit", "group_timeshare", "heldout_matrices", "job_effects", "load_colocation", "load_gavel",
    "load_pair_sources", "lucid_slices", "lucid_solo_truth", "lucid_table", "measured_features", "monotone_ceiling",
    "ordered_pairs", "own_slices", "own_solo_truth", "pair_frame", "pair_memory_quantile", "pair_oom_probability",
    "pair_slowdown_matrix", "pair_timeshare", "partner_rows", "predicted_features", "read_solo_samples",
    "reference_jobs", "refuse_simulated", "run_slice", "score", "self_pair_noise", "slice_metrics", "solo_baseline_flags",
    "solo_measurements", "source_summary", "timeshare_slowdown", "usable_groups", "utilization_slice", "window_means",
    "with_busy",
]
