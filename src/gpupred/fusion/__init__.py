"""Inter-trial fusion (issue 41): the fusion-count advisor and the fused runs measured so far.

``advise_fusion(model, gpu=...)`` (:mod:`gpupred.fusion.advisor`) picks how many copies of a model to fuse into one
job from predictions alone; :mod:`gpupred.fusion.measured` reads the fused and co-located runs of ``data/raw`` and
finds the measured knee the advice is compared with. Neither imports torch.
"""

from __future__ import annotations

from gpupred.fusion.advisor import TOLERANCE, FusionAdvice, advise_fusion, choose_f

__all__ = ["TOLERANCE", "FusionAdvice", "advise_fusion", "choose_f"]
