"""The advisor's settings a caller can name without loading the advisor (the CLI reads them to build its options)."""

from __future__ import annotations

TOLERANCE = 0.05  # the advisor's F reaches this close to the best fitting F's trials/s
STEP_MODELS: tuple[str, ...] = ("vmap", "graph")  # how a fused step is modelled: vmap's kernels, or the stored graph's
