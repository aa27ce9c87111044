"""Comparing runs: whether a pinned result and another served the same traffic, and the points of curves of a few
configurations over load. The deltas and the reversal rule are the simulator's (`simulator.results.compare`)."""

from __future__ import annotations

from typing import Any

from simulator.errors import InputError


def same_traffic(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two Results served the same requests (same traffic and seed), so their deltas are like for like."""
    sa, sb = a["scenario"], b["scenario"]
    return sa["traffic"] == sb["traffic"] and sa["seed"] == sb["seed"]


def curve_points(vary: str, values: list[Any], x_path: str, xs: list[Any]) -> list[dict[str, Any]]:
    """The overrides of every point of a curve chart: up to three configurations, each over the load axis."""
    if not 1 <= len(values) <= 3:
        raise InputError(f"curves: pick one to three configurations (got {len(values)})")
    return [{vary: v, x_path: x} for v in values for x in xs]
