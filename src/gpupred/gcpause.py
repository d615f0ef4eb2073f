"""Pausing Python's cyclic garbage collector around allocation-heavy batch work.

Scoring a queue allocates millions of small objects (kernel tuples, tensor shapes, rows) and keeps thousands of jobs
alive while it runs. Each time the collector's thresholds trip it walks the young objects, and about every tenth
time every live container in the process: the loaded predictor's models, the modules, the jobs so far. On the
2-core machine that walking took about a quarter of a 10,000-job queue (``benchmarks/bench_predict.py --queue``)
and freed nothing, since that work makes no reference cycles. Reference counting frees everything else as before;
whatever cycles a paused call leaves are collected by the first collection after it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """Inside, the cyclic garbage collector does not run automatically; on leaving, it is enabled again if it was.
    Nested pauses (or a caller's own ``gc.disable()``) are left as they were."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
