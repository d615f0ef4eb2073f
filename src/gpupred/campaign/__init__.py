"""The measurement campaign (issue 75): one prioritized queue that spends each lent GPU's minutes on what matters most.

- :mod:`.stages`: the eight stages in priority order, their plans and folders, and the capability checks that skip a
  stage whose CPU side has not landed;
- :mod:`.planner`: what is left of each stage (on disk under data/raw is done), each unit's estimated seconds, and
  the units that fit one call's budget;
- :mod:`.executors`: what runs a part (the existing sweep, ``gpupred calibrate``, ``gpupred trace run``) on the GPU,
  or simulated units for dry runs; :mod:`.simulated`: the made-up rows of those dry runs;
- :mod:`.execute`: ``gpupred campaign next`` (smoke test, the units, the tarball) and ``campaign plan``;
- :mod:`.pack`: the tarball, and unpacking it under data/raw without overwriting anything.

Importing this package imports neither torch nor NVML.
"""
