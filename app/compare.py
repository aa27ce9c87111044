"""Comparing runs: a pinned result beside another with deltas, and curves of a few configurations over load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.sweep import lookup
from simulator.errors import InputError

# (label, dotted path into the Result, unit, True when higher is better)
ROWS: list[tuple[str, str, str, bool]] = [
    ("output throughput", "metrics.output_tokens_per_s", "tok/s", True),
    ("output per GPU", "metrics.output_tokens_per_s_per_gpu", "tok/s", True),
    ("input throughput", "metrics.input_tokens_per_s", "tok/s", True),
    ("TTFT p50", "metrics.ttft_ms.p50", "ms", False),
    ("TTFT p95", "metrics.ttft_ms.p95", "ms", False),
    ("TPOT p50", "metrics.tpot_ms.p50", "ms", False),
    ("TPOT p95", "metrics.tpot_ms.p95", "ms", False),
    ("E2E p95", "metrics.e2e_ms.p95", "ms", False),
    ("SLO attainment", "metrics.slo_attainment", "%", True),
    ("cost", "metrics.cost_per_mtok_usd", "$/M tok", False),
    ("max running", "metrics.max_running", "requests", True),
    ("preempted", "metrics.preempted", "requests", False),
    ("KV occupancy max", "metrics.kv_occupancy.max", "%", False),
    ("completed", "metrics.completed", "requests", True),
    ("GPUs", "metrics.gpus", "GPUs", False),
]


@dataclass(frozen=True)
class Delta:
    label: str
    unit: str
    a: float | None
    b: float | None
    change: float | None  # b - a (for a share: in points, not relative)
    ratio: float | None  # b / a - 1; None for a share, whose relative change misleads (+632% of a 11% share)
    better: bool | None  # whether b is better than a; None when equal or not comparable


def deltas(a: dict[str, Any], b: dict[str, Any]) -> list[Delta]:
    """Every ROWS figure of two Results, with B's change from A."""
    out = []
    for label, path, unit, higher in ROWS:
        x, y = lookup(a, path), lookup(b, path)
        change = ratio = better = None
        if x is not None and y is not None:
            change = y - x
            ratio = (y / x - 1) if x and unit != "%" else None
            better = None if y == x else (y > x) == higher
        out.append(Delta(label, unit, x, y, change, ratio, better))
    return out


def same_traffic(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two Results served the same requests (same traffic and seed), so their deltas are like for like."""
    sa, sb = a["scenario"], b["scenario"]
    return sa["traffic"] == sb["traffic"] and sa["seed"] == sb["seed"]


def curve_points(vary: str, values: list[Any], x_path: str, xs: list[Any]) -> list[dict[str, Any]]:
    """The overrides of every point of a curve chart: up to three configurations, each over the load axis."""
    if not 1 <= len(values) <= 3:
        raise InputError(f"curves: pick one to three configurations (got {len(values)})")
    return [{vary: v, x_path: x} for v in values for x in xs]


HEADLINE = ("output throughput", "TTFT p95", "TPOT p95", "SLO attainment", "cost")


def reversals(one: list[Delta], other: list[Delta]) -> list[tuple[Delta, Delta]]:
    """The headline figures on which B beats A priced one way and loses to it priced the other."""
    by_label = {d.label: d for d in other}
    return [
        (d, by_label[d.label])
        for d in one
        if d.label in HEADLINE and d.better is not None and by_label[d.label].better is (not d.better)
    ]
