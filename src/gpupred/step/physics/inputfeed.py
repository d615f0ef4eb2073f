"""A job's host input pipeline in the step model's terms: per-batch seconds on the job's host (torch-free).

A host profile (``gpupred loader bench`` on some host, or ``gpupred loader measure`` of a user's own loader;
:mod:`gpupred.loader.profile`) says what one sample of each standard kind costs one core of that host, at a few
sizes, and what the main process pays to receive a batch from a worker and to copy it. :func:`loader_times` reads
it for one job (its pipeline, batch size and batch bytes) and moves the costs to the job's host by the ratio of
single-core speeds (:func:`job_host_speed`: as the job says, else a GPU server's as this project measured them, about
half the reference host's). The timeline
(:func:`gpupred.step.physics.timeline.with_loader`) turns those seconds into the steady period and its stalls.

``LOADER_COLUMNS`` are the dataset's and a job frame's columns for them; a row without them (NaN) is resident.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from gpupred.loader.speed import GPU_HOST_SCORE
from gpupred.step.physics.timeline import LoaderTimes
from gpupred.setups import InputPipeline

LOADER_TIME_COLUMNS: tuple[str, ...] = (  # LoaderTimes' times, workers and cores, in its order
    "loader_produce_s", "loader_main_s", "loader_workers", "loader_cores", "loader_pin_s")
HOST_GUESSED_COLUMN = "loader_host_guessed"  # 1 where the job named no host (LoaderTimes.host_guessed)
LOADER_COLUMNS: tuple[str, ...] = (*LOADER_TIME_COLUMNS, HOST_GUESSED_COLUMN)
TOKEN_BYTES = 8  # a pre-tokenized sample's ids are int64: its tokens are its input bytes / 8


class HostCosts(Protocol):
    """What :func:`loader_times` reads of a host: per-sample costs, the main process's receiving and copying."""

    ipc_per_batch_s: float
    ipc_per_byte_s: float
    copy_gbs: float
    single_core_score: float  # of the host these costs were measured on (gpupred.loader.speed)

    def per_sample_s(self, kind: str, scale: float, variant: str | None = None) -> float:
        """One core's seconds for one sample of ``kind`` at size ``scale``."""


@dataclass(frozen=True)
class ProfileCosts:
    """A host profile's costs as :func:`loader_times` reads them: a measured loader's profile (which holds no receive
    or copy figures) borrows those of the reference profile
    (:func:`gpupred.loader.hostprofile.default_host_profile`)."""

    profile: Any
    reference: Any

    def _pick(self, name: str) -> float:
        value = getattr(self.profile, name)
        return float(getattr(self.reference, name) if value is None else value)

    @property
    def ipc_per_batch_s(self) -> float:
        return self._pick("ipc_per_batch_s")

    @property
    def ipc_per_byte_s(self) -> float:
        return self._pick("ipc_per_byte_s")

    @property
    def copy_gbs(self) -> float:
        return self._pick("copy_gbs")

    @property
    def single_core_score(self) -> float:
        return float(self.profile.single_core_score)

    def per_sample_s(self, kind: str, scale: float, variant: str | None = None) -> float:
        """One core's seconds for one sample (the profile's own measurement)."""
        return float(self.profile.per_sample_s(kind, scale, variant))


def variant_of(pipeline: InputPipeline) -> str | None:
    """The host profile's variant of a pipeline's kind: images by format and transforms (``jpeg-v1``), array files
    by format (``txt``, ``txt-legacy``; ``.npy`` is the default), the kind's default otherwise."""
    if pipeline.kind == "image-files":
        return f"{pipeline.image_format}-{pipeline.transforms}"
    if pipeline.kind == "array-files" and pipeline.array_format != "npy":
        return pipeline.array_format
    return None


def sample_scale(pipeline: InputPipeline, sample_bytes: float) -> float:
    """The size a profile's per-sample cost is read at (:meth:`InputPipeline.scale`; text: tokens per sample, its
    input bytes over ``TOKEN_BYTES``)."""
    if pipeline.kind == "text-tokens":
        return max(1.0, sample_bytes / TOKEN_BYTES)
    return pipeline.scale()


def job_host_speed(pipeline: InputPipeline, costs: HostCosts) -> float:
    """The single-core speed of the job's host relative to the host ``costs`` were measured on: as the pipeline gives
    it (``host_speed``); else its host's score (``host_score``, e.g. from its GPU's calibration) over the costs'
    host's; else 1 for a host profile the job names (a bench or a measurement of its own host); else, the reference
    profile's costs moved to a GPU server like those this project measured
    (:data:`gpupred.loader.speed.GPU_HOST_SCORE` over the reference profile's own score: about 0.48). A job's CPU
    work is done on the machine its GPU is in, and the two GPU servers measured run a core at about half the
    reference host's speed."""
    named_by = pipeline.host_named_by
    if named_by == "host_speed":
        return float(pipeline.host_speed)  # type: ignore[arg-type]
    if named_by == "host_score":
        return float(pipeline.host_score) / float(costs.single_core_score)  # type: ignore[arg-type]
    if named_by == "profile":
        return 1.0
    return GPU_HOST_SCORE / float(costs.single_core_score)


def loader_times(pipeline: InputPipeline, batch_size: int, batch_bytes: float, costs: HostCosts) -> LoaderTimes | None:
    """The pipeline's per-batch seconds on the job's host (None for resident batches): a batch's making on one core
    (its samples, and its pinning when the main process makes it), the main process's receiving and pinning when
    workers make it, the workers and the cores."""
    if pipeline.resident:
        return None
    speed = job_host_speed(pipeline, costs)
    guessed = pipeline.host_named_by is None
    per_sample = costs.per_sample_s(pipeline.kind, sample_scale(pipeline, batch_bytes / max(batch_size, 1)),
                                    variant_of(pipeline))
    produce = batch_size * per_sample / speed
    copy = batch_bytes / (costs.copy_gbs * 1e9) / speed
    if pipeline.num_workers == 0:  # torch pins in line too
        return LoaderTimes(produce + (copy if pipeline.pin_memory else 0.0), 0.0, 0, pipeline.cores,
                           host_guessed=guessed)
    touch = costs.ipc_per_byte_s * batch_bytes / speed  # first touch of the worker's shared-memory batch
    handoff = costs.ipc_per_batch_s / speed + touch  # a worker puts each batch into shared memory and the queue:
    produce += handoff  # taken as costly as the main process's receiving it (the bench times the receiving side)
    if pipeline.pin_memory:  # the pin-memory thread touches and copies it; the main thread only receives
        return LoaderTimes(produce, costs.ipc_per_batch_s / speed, pipeline.num_workers, pipeline.cores, touch + copy,
                           guessed)
    return LoaderTimes(produce, handoff, pipeline.num_workers, pipeline.cores, host_guessed=guessed)


def loader_columns(times: LoaderTimes | None) -> dict[str, float]:
    """``LOADER_COLUMNS`` of one job (NaN for resident batches)."""
    if times is None:
        return dict.fromkeys(LOADER_COLUMNS, np.nan)
    return dict(zip(LOADER_COLUMNS, (times.produce_s, times.main_s, float(times.workers), float(times.cores),
                                     times.pin_s, float(times.host_guessed))))



def host_costs(pipeline: InputPipeline) -> HostCosts:
    """The host costs a pipeline's times come from: its own profile file (``gpupred loader bench`` or ``measure``),
    else the reference profile committed with gpupred (``gpupred.config.HOST_PROFILE``)."""
    from gpupred.loader.hostprofile import default_host_profile, read_host_profile

    reference = default_host_profile()
    return ProfileCosts(reference if pipeline.profile is None else read_host_profile(pipeline.profile), reference)
