"""`metrics.kv_tiers` of a Result: what the KV tiers below HBM did — prefix hits by tier, pages and bytes moved down
and back by tier, and how long the load-backs took inside the requests' time to first token. Present only where a
pool has a tier (`deployment.<pool>.host_tier_gib`, `storage_tier`), so other Results keep their bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.config.tiers import has_tiers
from simulator.pricing.tier_pricing import TierPricing
from simulator.results.record import RunRecord
from simulator.results.service import percentiles

GIB = 1024**3


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    out = percentiles(values)
    out["mean"] = round(float(values.mean()), 4) if values.size else None
    return out


def kv_tiers(run: RunRecord) -> dict[str, Any] | None:
    """The Result's `metrics.kv_tiers`, or None where no pool has a tier."""
    sc = run.scenario
    pools: dict[str, Any] = {}
    for name, pr in run.pools.items():
        if not has_tiers(pr.pool):
            continue
        c: dict[str, int] = {}
        for inst in pr.instances:
            for k, v in (inst.tiers or {}).items():
                c[k] = c.get(k, 0) + v
        price = TierPricing(sc.model, sc.hardware_of(pr.pool), pr.pool)
        names = [t for t in ("host", "storage") if f"hit_tokens_{t}" in c]
        lookups = c.get("lookup_tokens", 0)
        hits = {"hbm": c.get("hit_tokens_hbm", 0), **{t: c[f"hit_tokens_{t}"] for t in names}}
        slots = pr.capacity.tiers or {}
        pools[name] = {
            "hit_tokens": hits,
            "hit_rate": {t: round(v / lookups, 4) if lookups else 0.0 for t, v in hits.items()},
            "pages_per_rank": {t: slots.get(f"{t}_pages", 0) for t in names},
            "pages_written": {t: c[f"pages_written_{t}"] for t in names},
            "gib_written": {t: round(price.bytes_moved(t, c[f"pages_written_{t}"]) / GIB, 4) for t in names},
            "pages_loaded": {t: c[f"pages_loaded_{t}"] for t in names},
            "gib_loaded": {t: round(price.bytes_moved(t, c[f"pages_loaded_{t}"]) / GIB, 4) for t in names},
            "pages_dropped": {t: c[f"pages_dropped_{t}"] for t in names},
            "stale_caught": sum(c[f"stale_caught_{t}"] for t in names),
        }
    if not pools:
        return None
    done = [r for r in run.requests if r.status == "completed"]
    loading = np.array([r.load_s * 1e3 for r in done if r.load_s > 0])
    ttft = sum(r.first_token - r.arrival for r in done)
    return {
        "pools": pools,
        "requests_loading": int(loading.size),
        # each loading request's load-back time (storage read and host link), inside its time to first token
        "load_back_ms": _percentiles(loading),
        "load_back_share_of_ttft": round(float(loading.sum()) / 1e3 / ttft, 4) if ttft > 0 else 0.0,
    }
