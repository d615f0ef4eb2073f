"""The step model: the kernels of one training step, their GPU times and the host launch timeline (torch-free).

``estimate_step(graph, batch_size, precision, optimizer, gpu)`` -> :class:`StepEstimate` (step, GPU-busy and host
seconds, analytic utilization in percent, kernel count); ``estimate_onnx`` does the same from a file.
:class:`StepConstants` holds the few constants (efficiencies, launch cost, per-step overhead, minimum kernel
time): defaults from published figures, fitted per (GPU kind, measurement protocol) by :mod:`gpupred.step.physics.fit`.
``STEP_COLUMNS`` are the feature-table columns (``phys_*``) that :mod:`gpupred.step.physics.columns` adds to the dataset.
"""

from __future__ import annotations

from gpupred.step.physics.constants import DEFAULT, FITTED, ConstantsTable, StepConstants, constants_from_dict
from gpupred.step.physics.kernels import KernelList, step_kernels
from gpupred.step.physics.model import canonical_graph, estimate_onnx, estimate_step, kernels_for
from gpupred.step.physics.timeline import STEP_COLUMNS, SYNC_MODES, LoaderTimes, StepEstimate, kernel_times, simulate

__all__ = [
    "DEFAULT", "FITTED", "ConstantsTable", "StepConstants", "constants_from_dict", "KernelList", "step_kernels",
    "canonical_graph", "estimate_onnx", "estimate_step", "kernels_for", "STEP_COLUMNS", "SYNC_MODES", "LoaderTimes", "StepEstimate",
    "kernel_times", "simulate",
]
