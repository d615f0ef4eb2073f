"""The step model: the kernels of one training step, their GPU times and the host launch timeline (torch-free).

``estimate_step(graph, batch_size, precision, optimizer, gpu)`` (:mod:`gpupred.step.physics.model`) ->
:class:`~gpupred.step.physics.timeline.StepEstimate` (step, GPU-busy and host seconds, analytic utilization in percent,
kernel count); ``estimate_onnx`` does the same from a file. :class:`~gpupred.step.physics.constants.StepConstants`
holds the few constants (efficiencies, launch cost, per-step overhead, minimum kernel time): defaults from published
figures, fitted per (GPU kind, measurement protocol) by :mod:`gpupred.step.physics.fit`. ``STEP_COLUMNS``
(:mod:`gpupred.step.physics.timeline`) are the feature-table columns (``phys_*``) that
:mod:`gpupred.step.physics.columns` adds to the dataset. Each name is imported from its own module.
"""
