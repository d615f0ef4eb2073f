"""Co-location: measured pairs from every source (this project's sweeps, Lucid, Gavel), slowdown estimators from
zero-parameter priors to calibration from reference co-runs, held-out scoring by model group, and whether a pair fits
in memory.

Each name is imported from its own module: the measured pairs (:mod:`~gpupred.colocation.pairtable`,
:mod:`~gpupred.colocation.gavelpairs`), what the estimators read of them (:mod:`~gpupred.colocation.members`),
per-job effects (:mod:`~gpupred.colocation.effects`), memory fit (:mod:`~gpupred.colocation.memfit`), failures
(:mod:`~gpupred.colocation.failures`), matrices (:mod:`~gpupred.colocation.matrix`), the study and its closing
figures (:mod:`~gpupred.colocation.study`, :mod:`~gpupred.colocation.closing`) and what notebook 06 ships
(:mod:`~gpupred.colocation.served`); the estimators themselves are :mod:`gpupred.slowdown`'s.
"""
