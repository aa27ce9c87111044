"""What one GPU of a pool holds, for the capacity view: weights, KV pool, reserve and headroom, and how many
requests of a given context fit. Arithmetic over the simulator's memory accounting; nothing is simulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.capacity import pool_capacity
from simulator.config.scenario import Pool
from simulator.config.specs import HardwareSpec, ModelSpec

# The side-by-side variants: the same deployment in each weight x KV-cache format pair the study compares.
VARIANTS = [("fp8", "bf16"), ("fp8", "fp8_e4m3"), ("int4", "bf16"), ("int4", "fp8_e4m3")]


@dataclass(frozen=True)
class GpuMemory:
    """One GPU of one instance of a pool; KV tokens and pages are per instance (every rank holds the same)."""

    label: str
    weights: str
    kv_cache: str
    hbm_gib: float
    weights_gib: float
    kv_gib: float  # the KV pool: HBM x mem_fraction - weights - reserve
    reserve_gib: float
    headroom_gib: float  # outside mem_fraction: activations, CUDA graphs, communication buffers
    kv_bytes_per_token: int
    kv_tokens: int
    pages: int
    page_size: int
    max_running: int
    fits: bool
    reason: str

    def segments(self) -> dict[str, float]:
        """GiB per part of the stacked bar, bottom to top."""
        return {
            "weights": self.weights_gib,
            "KV pool": self.kv_gib,
            "reserve": self.reserve_gib,
            "headroom": self.headroom_gib,
        }

    def concurrency(self, context_tokens: int) -> int:
        """Requests of `context_tokens` (prompt + output) whose KV fits at once in one instance's pages."""
        if not self.fits or context_tokens < 1:
            return 0
        return self.pages // math.ceil(context_tokens / self.page_size)


def gpu_memory(model: ModelSpec, hw: HardwareSpec, pool: Pool, label: str) -> GpuMemory:
    cap = pool_capacity(model, hw, pool)
    kv = cap.kv_budget_gib_per_gpu if cap.fits else 0.0
    used = cap.weights_gib_per_gpu + kv + pool.reserve_gib
    return GpuMemory(
        label=label,
        weights=pool.weights,
        kv_cache=pool.kv_cache,
        hbm_gib=hw.hbm_gib,
        weights_gib=cap.weights_gib_per_gpu,
        kv_gib=kv,
        reserve_gib=pool.reserve_gib,
        headroom_gib=max(0.0, hw.hbm_gib - used),
        kv_bytes_per_token=cap.kv_bytes_per_token,
        kv_tokens=cap.kv_tokens,
        pages=cap.pages,
        page_size=pool.page_size,
        max_running=pool.max_running,
        fits=cap.fits,
        reason=cap.reason,
    )


def variants(model: ModelSpec, hw: HardwareSpec, pool: Pool) -> list[GpuMemory]:
    """The pool in each of VARIANTS' formats, everything else unchanged."""
    return [
        gpu_memory(model, hw, pool.model_copy(update={"weights": w, "kv_cache": kv}), f"{w} weights, {kv} KV")
        for w, kv in VARIANTS
    ]
