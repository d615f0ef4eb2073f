"""The profiler: NVML sampling, solo and co-located training runs, resumable sweeps.

Importing this package imports nothing (no torch, no pandas); torch is imported only by the child processes
that run the training loops. The raw-data contract lives in :mod:`gpupred.profile.schema`.
"""
