"""The metrics contracts of the notebooks that score estimators: which keys each may write to
``reports/metrics/<notebook>.json`` and what each means, assembled from the key groups of the modules whose figures
it writes.

Each estimator's ``evaluate`` module computes its figures (with the shared metric functions and splits of
:mod:`gpupred.learn.evaluation`) and declares their keys beside them: to add a held-out figure of the step
estimator, compute it in :mod:`gpupred.step.evaluate` and declare its key in ``STEP_METRIC_KEYS`` there; the
notebook's contract below picks it up. Notebooks whose figures one module owns keep their schema there
(``MEMORY_METRICS`` of notebook 05 in :mod:`gpupred.memory.evaluate`, notebook 07's in :mod:`gpupred.sim.metrics`;
:data:`gpupred.digest.SCHEMAS` lists every notebook's).
"""

from __future__ import annotations

from gpupred.colocation.memfit import MEMFIT_METRIC_KEYS
from gpupred.learn.summary import CHOICE_METRIC_KEYS, REGRESSOR_METRIC_KEYS
from gpupred.memory.evaluate import MEMORY_METRIC_KEYS
from gpupred.predictor.realworld_report import REALWORLD_METRIC_KEYS
from gpupred.reports import MetricsSchema
from gpupred.slowdown.evaluate import SLOWDOWN_METRIC_KEYS
from gpupred.step.evaluate import STEP_METRIC_KEYS

# notebook 03-compare-regressors: the nested regressor baselines, across GPU kinds, the twins, the dataset's counts
LEARNING_METRICS = MetricsSchema.assemble("03-compare-regressors", REGRESSOR_METRIC_KEYS)
# notebook 03-physics-first: the shipped step and memory estimators beside their baselines, the real-world section,
# the input pipelines, the headline figures, and the baselines chosen for export
ESTIMATOR_METRICS = MetricsSchema.assemble("03-physics-first", STEP_METRIC_KEYS, MEMORY_METRIC_KEYS,
                                           REALWORLD_METRIC_KEYS, CHOICE_METRIC_KEYS)
# notebook 06: the slowdown estimators held out by model group, and the pair memory fit
COLOCATION_METRICS = MetricsSchema.assemble("06-colocation", SLOWDOWN_METRIC_KEYS, MEMFIT_METRIC_KEYS)
