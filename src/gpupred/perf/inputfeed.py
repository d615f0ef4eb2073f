"""A job's host input pipeline in the step model's terms: per-batch seconds on the job's host (torch-free).

A host profile (``gpupred loader bench`` on some host, or ``gpupred loader measure`` of a user's own loader;
:mod:`gpupred.loader.profile`) says what one sample of each standard kind costs one core of that host, at a few
sizes, and what the main process pays to receive a batch from a worker and to copy it. :func:`loader_times` reads
it for one job (its pipeline, batch size and batch bytes) and moves the costs to the job's host by the ratio of
single-core speeds (:attr:`gpupred.setups.InputPipeline.host_speed`). The timeline
(:func:`gpupred.perf.timeline.with_loader`) turns those seconds into the steady period and its stalls.

``LOADER_COLUMNS`` are the dataset's and a job frame's columns for them; a row without them (NaN) is resident.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gpupred.perf.timeline import LoaderTimes
from gpupred.setups import InputPipeline

LOADER_COLUMNS: tuple[str, ...] = ("loader_produce_s", "loader_main_s", "loader_workers", "loader_cores")
TOKEN_BYTES = 8  # a pre-tokenized sample's ids are int64: its tokens are its input bytes / 8


class HostCosts(Protocol):
    """What :func:`loader_times` reads of a host profile (:class:`gpupred.loader.profile.HostProfile`)."""

    ipc_per_batch_s: float
    ipc_per_byte_s: float
    copy_gbs: float

    def per_sample_s(self, kind: str, scale: float) -> float:
        """One core's seconds for one sample of ``kind`` at size ``scale``."""


def sample_scale(pipeline: InputPipeline, sample_bytes: float) -> float:
    """The size a profile's per-sample cost is read at (:meth:`InputPipeline.scale`; text: tokens per sample)."""
    if pipeline.kind == "text-tokens":
        return max(1.0, sample_bytes / TOKEN_BYTES)
    return pipeline.scale()


def loader_times(pipeline: InputPipeline, batch_size: int, batch_bytes: float, costs: HostCosts) -> LoaderTimes | None:
    """The pipeline's per-batch seconds on the job's host (None for resident batches): a batch's making on one core
    (its samples, and its pinning when the main process makes it), the main process's receiving and pinning when
    workers make it, the workers and the cores."""
    if pipeline.resident:
        return None
    speed = float(pipeline.host_speed)
    per_sample = costs.per_sample_s(pipeline.kind, sample_scale(pipeline, batch_bytes / max(batch_size, 1)))
    produce = batch_size * per_sample / speed
    pin = batch_bytes / (costs.copy_gbs * 1e9) / speed if pipeline.pin_memory else 0.0
    if pipeline.num_workers == 0:
        return LoaderTimes(produce + pin, 0.0, 0, pipeline.cores)
    receive = (costs.ipc_per_batch_s + costs.ipc_per_byte_s * batch_bytes) / speed
    return LoaderTimes(produce, receive + pin, pipeline.num_workers, pipeline.cores)


def loader_columns(times: LoaderTimes | None) -> dict[str, float]:
    """``LOADER_COLUMNS`` of one job (NaN for resident batches)."""
    if times is None:
        return dict.fromkeys(LOADER_COLUMNS, np.nan)
    return dict(zip(LOADER_COLUMNS, (times.produce_s, times.main_s, float(times.workers), float(times.cores))))



def host_costs(pipeline: InputPipeline) -> HostCosts:
    """The host profile a pipeline's costs come from: its own file, else this user's newest, else the committed
    reference (:func:`gpupred.loader.profile.host_profile_for`)."""
    from gpupred.loader.profile import host_profile_for

    return host_profile_for(pipeline.profile)
