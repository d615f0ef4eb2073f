"""The slowdown estimators: how much a training job slows down beside another on one GPU, as a physics prior
(time-sharing of the members' GPU-busy fractions, or their step times) times a learned correction or per-job
effects adapted from reference co-runs, each in scikit-learn form.

- :mod:`gpupred.slowdown.physics`: the time-sharing prior from the members' busy fractions;
- :mod:`gpupred.slowdown.correction`: the learned correction of the prior, its inner grouped folds and Spearman;
- :mod:`gpupred.slowdown.estimator`: :class:`SlowdownEstimator` and its kinds, from zero-parameter priors to
  :class:`SlowdownModel` (adaptation from reference co-runs);
- :mod:`gpupred.slowdown.evaluate`: held-out scoring by whole model group (notebook 06; evaluation only).

Each name is imported from its own module. The measured pairs, their features and the study that scores every
estimator on them are :mod:`gpupred.colocation`'s.
"""
