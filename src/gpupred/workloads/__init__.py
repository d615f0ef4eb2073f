"""Workloads: frozen specs with stable ids, the catalog (sweep plan) and torch builders."""

from gpupred.workloads.spec import FAMILIES, Family, WorkloadSpec

__all__ = ["FAMILIES", "Family", "WorkloadSpec"]
