"""The step estimator: GPU utilization, SM activity and iteration time of a training job, as the step model's answer
times a learned correction, with its interval rule inside.

- :mod:`gpupred.step.physics`: the step model itself (torch-free): the kernels of one training step from a canonical
  graph, their GPU times on a GPU's roofline, the host's launch timeline and the input pipeline that feeds it, the
  few constants and their fit per (GPU kind, protocol), the failure classes;
- :mod:`gpupred.step.rowphysics`: the step model applied to a dataset's rows: each run's kernels, constants fitted per
  (GPU kind, protocol) on training rows, the extrapolation widths;
- :mod:`gpupred.step.correction`: the learned correction of ``measured / physics``, its bounds and CV+ intervals;
- :mod:`gpupred.step.estimator`: :class:`StepEstimator` (scikit-learn style: ``fit``, ``predict``, ``get_params``,
  ``describe``), the model notebook 03 scores and the predictor ships;
- :mod:`gpupred.step.evaluate`: the estimator beside its baselines on notebook 03's splits (evaluation only: nothing
  at run time imports it).

The physics sits below the dataset (which joins its columns to each run), the estimator above the learning code, so
this package imports nothing when it is imported: each name is imported from its own module.
"""
