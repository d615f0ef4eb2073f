"""Workloads: frozen specs with stable ids, the catalog (sweep plan) and torch builders.

This namespace is torch-free. The catalog is ``gpupred.workloads.catalog`` (``catalog()``, ``get()``...;
not re-exported here, so the submodule name is not shadowed by its function); the torch builders live
in ``gpupred.workloads.builders``.
"""

from gpupred.workloads.spec import FAMILIES, Family, WorkloadSpec

__all__ = ["FAMILIES", "Family", "WorkloadSpec"]
