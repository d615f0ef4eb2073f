"""The step estimator: GPU utilization, SM activity and iteration time of a training job, as the step model's answer
(:mod:`gpupred.perf`) times a learned correction, with its interval rule inside.

- :mod:`gpupred.step.physics`: each run's kernels, constants fitted per (GPU kind, protocol), extrapolation widths;
- :mod:`gpupred.step.correction`: the learned correction of ``measured / physics``, its bounds and CV+ intervals;
- :mod:`gpupred.step.estimator`: :class:`StepEstimator` (scikit-learn style: ``fit``, ``predict``, ``get_params``,
  ``describe``), the model notebook 03 scores and the predictor ships;
- :mod:`gpupred.step.evaluate`: the estimator beside its baselines on notebook 03's splits (evaluation only: nothing
  at run time imports it).
"""

from gpupred.step.estimator import STEP_TARGETS, StepEstimator
from gpupred.step.physics import PHYSICS_TARGETS, PhysicsData, physics_data

__all__ = ["PHYSICS_TARGETS", "STEP_TARGETS", "PhysicsData", "StepEstimator", "physics_data"]
