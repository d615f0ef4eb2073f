"""Input pipelines on the host: synthetic data (``synth``), the standard torch/torchvision/transformers loaders
(``standard``), the host profile (``hostprofile``: schema, writer, reader, log-log interpolation), the bench of the
standard kinds (``hostbench``), a user's own loader timed (``measure``), the single-core speed score (``speed``) and
the host's identity (``hostinfo``).

Importing this package, ``hostprofile`` or ``speed`` never imports torch; making a loader or measuring does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["HostProfile", "read_host_profile", "default_host_profile", "make_loader", "bench", "measure_loader"]

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.loader.hostbench import bench
    from gpupred.loader.hostprofile import HostProfile, default_host_profile, read_host_profile
    from gpupred.loader.measure import measure_loader
    from gpupred.loader.standard import make_loader

_LAZY = {"HostProfile": "gpupred.loader.hostprofile", "read_host_profile": "gpupred.loader.hostprofile",
         "default_host_profile": "gpupred.loader.hostprofile", "make_loader": "gpupred.loader.standard",
         "bench": "gpupred.loader.hostbench", "measure_loader": "gpupred.loader.measure"}


def __getattr__(name: str) -> Any:
    """Import the public names on first use, so ``import gpupred.loader`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gpupred.loader' has no attribute {name!r}")
