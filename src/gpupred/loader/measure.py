"""``gpupred loader measure`` and ``gpupred.measure_loader``: time a user's own DataLoader on the CPU at several worker
counts and write the host profile format with a ``measured`` entry.

For each worker count the loader is rebuilt as it was made (dataset, sampler or batch sampler, collate function,
worker init, prefetch factor) with that ``num_workers`` and ``pin_memory=False``; the first batch (worker start-up) is
timed apart, then up to ``batches`` batches. The main process runs with one torch thread, as a worker does. The
single-worker cost per sample is the 0-worker one (the main process doing the work in line) where measured, else the
1-worker one, else the fewest workers' per-batch time times their count.

Bad input is a one-line :class:`gpupred.errors.GpupredError` (exit 2 from the CLI), with the loader's workers ended:
a factory that does not import or raises, a loader that yields no batch or a batch of no known type (a tensor, a numpy
array, or dicts, lists and tuples of them), a batch that takes longer than ``timeout`` (DataLoader's own ``timeout``
with workers, a SIGALRM watchdog in the main process).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gpupred.errors import GpupredError

DEFAULT_BATCHES = 20
DEFAULT_WORKERS = (0, 1, 2)
DEFAULT_TIMEOUT_S = 60.0


class LoaderTimeout(BaseException):
    """The main-process watchdog fired (a BaseException, so that a loader's ``except Exception`` cannot swallow it)."""


def load_factory(target: str) -> Any:
    """Import ``module:factory`` (a dotted module, or a ``.py`` file's path) and call the factory for a DataLoader."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise GpupredError(f"{target!r}: expected module:factory (e.g. mypkg.data:make_loader or train.py:loader)")
    try:
        if module_name.endswith(".py") or Path(module_name).is_file():
            spec = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
            if spec is None or spec.loader is None or not Path(module_name).is_file():
                raise ImportError(f"no such file {module_name}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if "" not in sys.path:
                sys.path.insert(0, "")
            module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any failure of the user's module is a user error
        raise GpupredError(f"{target}: cannot import {module_name} ({type(err).__name__}: {err})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise GpupredError(f"{target}: {module_name} has no callable {attr!r}")
    try:
        loader = factory()
    except Exception as err:  # noqa: BLE001
        raise GpupredError(f"{target}: the factory raised {type(err).__name__}: {err}") from None
    return check_loader(loader, target)


def check_loader(loader: Any, shown: str) -> Any:
    """``loader`` if it is a torch DataLoader, else a one-line error."""
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader):
        raise GpupredError(f"{shown}: gave a {type(loader).__name__}, not a torch.utils.data.DataLoader")
    return loader


def rebuild(loader: Any, workers: int, timeout: float) -> Any:
    """The same loader with ``workers`` worker processes, no pinning and ``timeout`` per batch (workers only)."""
    from torch.utils.data import DataLoader, IterableDataset

    common: dict[str, Any] = {
        "num_workers": workers, "collate_fn": loader.collate_fn, "pin_memory": False,
        "timeout": float(timeout) if workers else 0, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context if workers else None,
        "generator": loader.generator, "prefetch_factor": (loader.prefetch_factor or 2) if workers else None}
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **common)
    if loader.batch_sampler is None:
        return DataLoader(loader.dataset, batch_size=None, sampler=loader.sampler, **common)
    return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **common)


def leaves(batch: Any) -> Iterator[Any]:
    """The leaves of a batch (dicts, lists and tuples opened)."""
    if isinstance(batch, dict):
        for value in batch.values():
            yield from leaves(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from leaves(value)
    else:
        yield batch


def batch_shape(batch: Any, shown: str) -> tuple[int, int]:
    """(samples, bytes) of a batch: tensors and numpy arrays counted, scalars and strings allowed, else an error."""
    import numpy as np
    import torch

    arrays, kinds = [], set()
    for leaf in leaves(batch):
        if isinstance(leaf, (torch.Tensor, np.ndarray)):
            arrays.append(leaf)
        elif not isinstance(leaf, (int, float, str, bytes, bool, type(None))):
            kinds.add(type(leaf).__name__)
    if kinds or not arrays:
        what = ", ".join(sorted(kinds)) or type(batch).__name__ + " without a tensor"
        raise GpupredError(f"{shown}: a batch of no known type ({what}); a loader must yield tensors or numpy arrays, "
                           "or dicts, lists or tuples of them")
    first = arrays[0]
    samples = int(first.shape[0]) if getattr(first, "ndim", 0) else 1
    nbytes = sum(int(a.nbytes) if isinstance(a, np.ndarray) else int(a.element_size() * a.nelement()) for a in arrays)
    return samples, nbytes


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise :class:`LoaderTimeout` in the main thread after ``seconds`` (a no-op outside the main thread).

    An interval timer armed by the caller (pytest-timeout's, a batch job's) keeps its deadline: the earlier of the two
    is armed, an outer deadline reached first goes to the outer handler, and what is left of it is re-armed after.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    start = time.monotonic()
    outer_handler = signal.getsignal(signal.SIGALRM)
    outer_left = signal.getitimer(signal.ITIMER_REAL)[0]  # 0.0: none armed (or spent inside this window)

    def fire(signum: int, frame: Any) -> None:
        nonlocal outer_left
        elapsed = time.monotonic() - start
        if outer_left and elapsed < seconds:  # the outer deadline came first: its handler, then ours re-armed
            outer_left = 0.0
            if callable(outer_handler):
                outer_handler(signum, frame)
            signal.setitimer(signal.ITIMER_REAL, max(seconds - elapsed, 1e-3))
            return
        raise LoaderTimeout()

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_left) if outer_left else seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - start), 1e-3))


def close_iterator(it: Any) -> None:
    """End a DataLoader iterator's worker processes now (terminated, then joined), whatever state they are in.

    Their pids leave torch's SIGCHLD watch first: a worker ended here is no failure, and torch's handler would
    otherwise raise "killed by signal" into the main thread at whatever line it is on, the shutdown included.
    """
    if getattr(it, "_worker_pids_set", False):
        from torch.utils.data._utils import signal_handling

        signal_handling._remove_worker_pids(id(it))
        it._worker_pids_set = False
    for proc in list(getattr(it, "_workers", []) or []):
        if proc.is_alive():
            proc.terminate()
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def next_batch(it: Any, shown: str, workers: int, index: int, timeout: float) -> Any:
    """The iterator's next batch (StopIteration passes), any failure of the loader as a one-line error."""
    try:
        with watchdog(timeout if workers == 0 else timeout + 5.0):
            return next(it)
    except StopIteration:
        raise
    except LoaderTimeout:
        raise GpupredError(f"{shown}: batch {index} at {workers} workers took longer than the {timeout:g} s timeout "
                           "(a hung loader?); raise --timeout if it is only slow") from None
    except Exception as err:  # noqa: BLE001 - the user's dataset or collate raised
        text = str(err).strip().splitlines()
        if workers and "timed out" in str(err):
            raise GpupredError(f"{shown}: batch {index} at {workers} workers took longer than the {timeout:g} s "
                               "timeout (a hung loader?); raise --timeout if it is only slow") from None
        raise GpupredError(f"{shown}: batch {index} at {workers} workers raised {type(err).__name__}: "
                           f"{text[-1] if text else ''}") from None


def time_workers(loader: Any, workers: int, batches: int, timeout: float, shown: str) -> dict[str, Any]:
    """One worker count's timing: the first batch apart, then per-batch and per-sample seconds, samples and bytes."""
    it = None
    try:
        it = iter(rebuild(loader, workers, timeout))
        t0 = time.perf_counter()
        try:
            first = next_batch(it, shown, workers, 0, timeout)
        except StopIteration:
            raise GpupredError(f"{shown}: the loader yielded no batches") from None
        first_s = time.perf_counter() - t0
        samples, nbytes = batch_shape(first, shown)
        times, counts = [], []
        for index in range(1, batches + 1):
            t0 = time.perf_counter()
            try:
                batch = next_batch(it, shown, workers, index, timeout)
            except StopIteration:
                break
            times.append(time.perf_counter() - t0)
            counts.append(batch_shape(batch, shown)[0])
    finally:
        if it is not None:
            close_iterator(it)
    per_batch = sum(times) / len(times) if times else first_s
    per_sample = (sum(times) / sum(counts)) if times else first_s / samples
    return {"per_batch_s": per_batch, "per_sample_s": per_sample, "first_batch_s": first_s, "batches": len(times),
            "samples_per_batch": samples, "batch_bytes": nbytes}


def single_worker_cost(per_workers: dict[str, dict[str, Any]]) -> tuple[float, str]:
    """The per-sample seconds one worker core spends, and which measurement it comes from."""
    if "0" in per_workers:
        return per_workers["0"]["per_sample_s"], "0 workers (main process in line)"
    if "1" in per_workers:
        return per_workers["1"]["per_sample_s"], "1 worker"
    fewest = min(per_workers, key=int)
    return per_workers[fewest]["per_sample_s"] * int(fewest), f"{fewest} workers x their count"


def measure_loader(loader: Any, batches: int = DEFAULT_BATCHES, workers: Sequence[int] = DEFAULT_WORKERS,
                   timeout: float = DEFAULT_TIMEOUT_S, out: str | Path | None = None, name: str = "loader") -> Any:
    """Time ``loader`` (a torch DataLoader) for ``batches`` batches at each worker count on the CPU, write its host
    profile (default: ``<host folder>/measured-<name>.json``) and return it as a :class:`HostProfile`."""
    import torch

    from gpupred.loader import hostinfo, speed
    from gpupred.loader.hostprofile import SCHEMA_NAME, SCHEMA_VERSION, read_host_profile, write_host_profile

    counts = sorted({int(w) for w in workers})
    if not counts or counts[0] < 0 or batches < 1 or not timeout > 0:
        raise GpupredError(f"{name}: need worker counts >= 0 (got {list(workers)}), batches >= 1 (got {batches}) and "
                           f"a positive timeout (got {timeout})")
    check_loader(loader, name)
    t0, threads = time.monotonic(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        per_workers = {str(w): time_workers(loader, w, batches, timeout, name) for w in counts}
    finally:
        torch.set_num_threads(threads)
    cost, source = single_worker_cost(per_workers)
    first = per_workers[str(counts[0])]
    measured = {"factory": name, "batch_size": first["samples_per_batch"], "batch_bytes": first["batch_bytes"],
                "workers": per_workers, "single_worker_per_sample_s": cost, "single_worker_from": source,
                "batches_asked": batches, "timeout_s": float(timeout),
                "original": {"num_workers": loader.num_workers, "pin_memory": bool(loader.pin_memory),
                             "prefetch_factor": loader.prefetch_factor}}
    data = {"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "created_at": hostinfo.now_utc(),
            "source": "measure", "wall_s": 0.0, "seconds_budget": None, "host": hostinfo.host_identity(),
            "software": hostinfo.software_versions(), "single_core": speed.single_core_score(), "torch_threads": 1,
            "kinds": {}, "ipc": None, "copy": None, "measured": measured}
    data["wall_s"] = round(time.monotonic() - t0, 2)
    if out is None:
        import re

        from gpupred import config

        out = config.host_profile_dir() / f"measured-{re.sub(r'[^A-Za-z0-9._-]+', '-', name).strip('-')}.json"
    return read_host_profile(write_host_profile(data, out))
