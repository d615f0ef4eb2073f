"""Co-location: measured pairs from every source, the time-sharing estimate and its learned correction, honest
(held-out) evaluation, and whether a pair fits in memory."""

from gpupred.colocation.effects import (
    EffectsModel,
    effect_predictability,
    job_effects,
    monotone_ceiling,
    partner_rows,
    self_pair_noise,
)
from gpupred.colocation.heldout import (
    ESTIMATES,
    FEATURE_KEYS,
    MEASURED_BASE,
    PREDICTED_BASE,
    CrossFit,
    align,
    assign_folds,
    baseline_slowdown,
    crossfit,
    evaluate_heldout,
    heldout_by_source,
    measured_features,
    plain_estimates,
    predicted_features,
    score,
    usable_groups,
    with_busy,
)
from gpupred.colocation.memfit import (
    fits_together,
    group_memory_fit,
    pair_memory_quantile,
    pair_oom_probability,
)
from gpupred.colocation.model import SlowdownModel, derive, group_features
from gpupred.colocation.table import (
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
from gpupred.colocation.timeshare import busy_fraction, group_timeshare, pair_timeshare, timeshare_slowdown

__all__ = [
    "ESTIMATES", "EffectsModel", "effect_predictability", "job_effects", "monotone_ceiling", "partner_rows",
    "self_pair_noise", "busy_fraction", "fits_together", "group_memory_fit", "group_timeshare", "pair_memory_quantile",
    "pair_oom_probability", "pair_timeshare", "plain_estimates", "score", "timeshare_slowdown", "with_busy",
    "FEATURE_KEYS", "LUCID_PAIR_COLUMNS", "LUCID_SOLO_COLUMNS", "MEASURED_BASE", "PREDICTED_BASE", "SOLO_COLUMNS",
    "TABLE_COLUMNS", "CrossFit", "SlowdownModel", "align", "assign_folds", "baseline_slowdown", "colocation_table",
    "crossfit", "derive", "evaluate_heldout", "failed_groups", "group_features", "heldout_by_source", "load_colocation",
    "load_pair_sources", "lucid_solo_truth", "lucid_table", "measured_features", "own_solo_truth",
    "pair_slowdown_matrix", "predicted_features", "read_solo_samples", "refuse_simulated", "solo_measurements", "source_summary",
    "usable_groups", "window_means",
]
