"""The memory estimator: GPU memory of a training job, as the analytic footprint (:mod:`gpupred.memory.physics`) times a
bounded learned correction, with its interval rule inside.

- :mod:`gpupred.memory.baselines`: the evaluation's analytical baselines (Horus's formula, the first analytical
  estimate); the estimator's own physics is :mod:`gpupred.memory.physics`;
- :mod:`gpupred.memory.correction`: the learned correction, its settings, and the leave-one-family-out that chooses
  one and calibrates the intervals;
- :mod:`gpupred.memory.estimator`: :class:`MemoryEstimator` (scikit-learn style: ``fit``, ``predict``,
  ``get_params``, ``describe``), the model notebook 03 scores and the predictor ships;
- :mod:`gpupred.memory.evaluate`: the estimator beside its baselines (notebooks 03 and 05; evaluation only).

Each name is imported from its own module; this package imports nothing, so importing the estimator never imports
the evaluation.
"""
