"""Inter-trial fusion (issue 41): the fusion-count advisor and the fused runs measured so far.

``advise_fusion(model, gpu=...)`` (:mod:`gpupred.fusion.advisor`) picks how many copies of a model to fuse into one
job from predictions alone; :mod:`gpupred.fusion.measured` reads the fused and co-located runs of ``data/raw`` and
finds the measured knee the advice is compared with. Neither imports torch. Importing this package is light (the CLI
imports it to register ``gpupred advise-fusion``): the advisor, with pandas behind it, loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gpupred.fusion.advisor import TOLERANCE, FusionAdvice, advise_fusion, choose_f

__all__ = ["TOLERANCE", "FusionAdvice", "advise_fusion", "choose_f"]


def __getattr__(name: str) -> Any:
    """Import the public names on first use."""
    if name in __all__:
        from gpupred.fusion import advisor

        return getattr(advisor, name)
    raise AttributeError(f"module 'gpupred.fusion' has no attribute {name!r}")
