"""What a load-back from the tiers below HBM costs, priced at the engine's one seam (`engine/timer.py`) with the step
that reads the pages.

Each GPU of an instance loads its own share of a page over its own host link (`hardware.host_link_gbs`: PCIe Gen5
x16, or NVLink-C2C on Grace parts), so a load's link time is pages × a GPU's page bytes / that bandwidth. A page
found in storage is read into host memory first — the tier's latency plus one copy of every KV head over its
bandwidth, not overlapped with compute (HiCache prefetches L3 into L2 before the request runs) — then crosses the
host link like a host hit.

The link time overlaps the prefill step's compute where the engine loads layer by layer (`kv_tier_layerwise`:
HiCache loads layer N+1 while layer N computes; LMCache's layer-wise mode) — a two-stage pipeline over the model's
layers, `max(load, compute) + min(load, compute) / layers` — and adds to it where the engine waits for the whole
load first (vLLM's offloading connector imports a request's KV before scheduling it).
"""

from __future__ import annotations

from simulator.capacity import draft_kv_bytes_per_token, kv_bytes_per_token
from simulator.config.scenario import Pool
from simulator.config.specs import HardwareSpec, ModelSpec


class TierPricing:
    """Load-back seconds of one instance of a pool with tiers."""

    def __init__(self, model: ModelSpec, hw: HardwareSpec, pool: Pool) -> None:
        per_gpu = kv_bytes_per_token(model, pool) + draft_kv_bytes_per_token(pool)
        self.gpu_page_bytes = pool.page_size * per_gpu
        whole = pool.model_copy(update={"tp": 1, "dp": 1})  # one copy of every KV head
        self.instance_page_bytes = pool.page_size * kv_bytes_per_token(model, whole)
        self.link_bps = hw.host_link_gbs * 1e9
        self.storage = pool.storage_tier
        self.layers = model.layers + model.mtp_layers
        self.layerwise = pool.kv_tier_layerwise
        self.rank_gpus = pool.tp // pool.dp

    def bytes_moved(self, tier: str, pages: int) -> float:
        """Bytes `pages` pages of one rank move into or out of a tier: every GPU of the rank its own share over its
        own host link; one copy of every KV head to or from storage."""
        if tier == "storage":
            return pages * self.instance_page_bytes
        return pages * self.gpu_page_bytes * self.rank_gpus

    def link_s(self, pages: int) -> float:
        """Seconds `pages` pages take over a GPU's host link."""
        return pages * self.gpu_page_bytes / self.link_bps

    def storage_s(self, pages: int) -> float:
        """Seconds reading `pages` pages from the storage tier into host memory (0 without any)."""
        if not pages or self.storage is None:
            return 0.0
        return self.storage.latency_ms * 1e-3 + pages * self.instance_page_bytes / (self.storage.bandwidth_gbs * 1e9)

    def load_s(self, host: int, storage: int) -> float:
        """What moving these pages up takes (storage read, then the host link): a request's load-back time."""
        return self.storage_s(storage) + self.link_s(host + storage)

    def step_s(self, compute_s: float, host: int, storage: int) -> float:
        """A prefill step of `compute_s` seconds whose chunks load these pages back first."""
        link = self.link_s(host + storage)
        fetch = self.storage_s(storage)
        if self.layerwise:
            return fetch + max(compute_s, link) + min(compute_s, link) / self.layers
        return fetch + link + compute_s
