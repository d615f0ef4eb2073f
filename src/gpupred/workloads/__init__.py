"""Workloads: frozen specs with stable ids, the catalog (sweep plan) and torch builders.

This namespace is torch-free and imports nothing; each name is imported from its own module. The spec grammar
(``WorkloadSpec``, ``FAMILIES``) is ``gpupred.workloads.spec``; the catalog is ``gpupred.workloads.catalog``
(``catalog()``, ``get()``...); the torch builders live in ``gpupred.workloads.builders``.
"""
