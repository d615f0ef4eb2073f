"""Evaluation work spread over worker processes: each task on one BLAS/OpenMP thread, results in the tasks' order.

The figures do not depend on how many processes run them: a task computes the same thing in a worker as in the
caller (single-threaded numerics, seeds in its arguments). What a task changes in its arguments stays in the worker;
a task that fills a cache returns what it added (:func:`gpupred.step.evaluate.split_task`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

CORES_ENV = "GPUPRED_CORES"  # the cores a process may use, where something gives it fewer than the machine's


def cores() -> int:
    """The cores this process may use: :data:`CORES_ENV` where set (``gpupred pipeline`` gives each notebook its
    share of the machine, the cores divided among the notebooks running at once), else every core it may run on."""
    given = os.environ.get(CORES_ENV, "")
    if given.strip():
        try:
            return max(1, int(given))
        except ValueError:
            raise ValueError(f"{CORES_ENV}={given!r}: expected a whole number of cores") from None
    from gpupred.loader.hostinfo import affinity_cores

    return affinity_cores()


def jobs(n_jobs: int) -> int:
    """Processes for parallel work: ``n_jobs`` when positive, else :func:`cores` (a notebook's ``n_jobs = 0``)."""
    return n_jobs if n_jobs > 0 else cores()


def one_thread(user_api: str | None = None) -> Any:
    """A context in which the BLAS and OpenMP thread pools (``user_api``: only "blas" or "openmp") run one thread.

    It goes through threadpoolctl's cached controller, which inspects the loaded libraries again only after an
    import: a fresh ``threadpool_limits`` reads them all from ``/proc/self/maps`` each time (6 ms with the learning
    libraries loaded, 12 s of notebook 03-compare-regressors' 1,956 fits and predictions)."""
    from threadpoolctl import get_cached_controller

    return get_cached_controller().limit(limits=1, user_api=user_api)


def single_threaded(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on one BLAS/OpenMP thread: parallel tasks oversubscribe the cores otherwise."""
    with one_thread():
        return fn(*args)


def parallel_map(fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], n_jobs: int = 1, desc: str | None = None,
                 progress: bool = True, **bar: Any) -> list[Any]:
    """``fn(*task)`` for each of ``tasks``, single-threaded, on ``min(jobs(n_jobs), len(tasks))`` processes (in this
    one when that is 1; ``n_jobs`` 0: one per core given, :func:`cores`), in order, under a progress bar (``desc``;
    ``progress=False``: none)."""
    from joblib import Parallel, delayed

    from gpupred.reports import progress_bar

    results = Parallel(n_jobs=max(1, min(jobs(n_jobs), len(tasks))), return_as="generator")(
        delayed(single_threaded)(fn, *task) for task in tasks)
    return list(progress_bar(iterable=results, total=len(tasks), desc=desc, disable=not progress, **bar))
