"""Inter-trial fusion (issue 41): the fusion-count advisor and the fused runs measured so far.

``advise_fusion(model, gpu=...)`` (:mod:`gpupred.fusion.advisor`) picks how many copies of a model to fuse into one
job from predictions alone; :mod:`gpupred.fusion.measured` reads the fused and co-located runs of ``data/raw`` and
finds the measured knee the advice is compared with. Neither imports torch. Importing this package imports nothing
(the CLI imports it to register ``gpupred advise-fusion``): each name is imported from its own module.
"""
