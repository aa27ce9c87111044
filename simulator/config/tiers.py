"""KV-cache tiers below HBM, as a pool declares them: host DRAM per instance and, below it, local NVMe or a remote
store. What the tiers do (spill, load back, tags) lives in `simulator/serving/tiers.py`; what a load-back costs in
`simulator/pricing/tier_pricing.py`; how fast the GPU reaches host memory is the hardware's `host_link_gbs`.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat


class StorageTier(BaseModel):
    """A tier below host memory, per instance: local NVMe, or a remote store (Mooncake store, 3FS) reached over the
    network. A page found there is read into host memory first (latency + bytes / bandwidth), then loads back to
    the GPU over the host link like a host hit."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    capacity_gib: PositiveFloat = Field(description="GiB of KV pages the tier keeps for one instance.")
    bandwidth_gbs: PositiveFloat = Field(description="GB/s one instance reads from the tier.")
    latency_ms: NonNegativeFloat = Field(0.1, description="ms before one read's first byte arrives.")


class Tiered(Protocol):
    """The pool fields that declare tiers (the schema's Pool imports this module)."""

    host_tier_gib: float
    storage_tier: StorageTier | None


# Pool fields of this module with their defaults: a pool's JSON leaves them out while they are off, so Results of
# deployments without tiers keep their bytes.
TIER_DEFAULTS: dict[str, Any] = {"host_tier_gib": 0.0, "storage_tier": None}


def has_tiers(pool: Tiered) -> bool:
    """Whether the pool keeps KV pages anywhere below HBM."""
    return pool.host_tier_gib > 0 or pool.storage_tier is not None
