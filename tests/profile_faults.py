"""Test helpers for the profiler: tiny CPU settings and made-up (fixture) runs; none of this is data."""

from __future__ import annotations

from gpupred.profile.harness import HarnessConfig

TINY = "mlp.mlp-w64-d2-bs8-in32-fp32-sgd"
TINY2 = "mlp.mlp-w32-d1-bs4-in16-fp32-sgd"


def tiny_config(**kw: object) -> HarnessConfig:
    """A CPU harness config with sub-second warm-up and window."""
    base = dict(device="cpu", window_s=0.2, min_iters=3, warmup_min_s=0.05, warmup_min_iters=1, warmup_max_s=2.0,
                max_window_s=3.0, startup_timeout_s=90.0, slack_s=10.0, interval_ms=50.0)
    base.update(kw)
    return HarnessConfig(**base)  # type: ignore[arg-type]


def tiny_ids(n: int) -> list[str]:
    """``n`` distinct tiny MLP workload ids."""
    return [f"mlp.mlp-w{16 + 8 * i}-d1-bs4-in16-fp32-sgd" for i in range(n)]
