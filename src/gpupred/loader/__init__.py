"""Input pipelines on the host: synthetic data (``synth``), the standard torch/torchvision/transformers loaders
(``standard``), the host profile (``hostprofile``: schema, writer, reader, log-log interpolation), the bench of the
standard kinds (``hostbench``), a user's own loader timed (``measure``), the single-core speed score (``speed``) and
the host's identity (``hostinfo``).

Importing this package, ``hostprofile`` or ``speed`` never imports torch; making a loader or measuring does.
"""
