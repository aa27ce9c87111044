"""Two Results side by side: each headline figure of A and B with B's change, and which figures reverse when the
same two runs are priced another way (another kernel profile of the GPU, another engine preset).

The app's Compare view prints the table and the reversal notice; `sweep` and `plan` print the reversal in one line
(`planning.pricings`): the same figures, the same rule. A change counts towards a reversal only where it is beyond
the runs' noise: the two figures' 95% intervals (`metrics.ci95`, `results.steady`) do not meet. Where a Result
carries no interval for a figure (no steady state), its noise is unknown: the change must then exceed
`UNKNOWN_NOISE` (a share: that many points), twice the ±5% the stopping rule asks of a p95 (`planning.stopping`),
so a 3x reversal between two kernel profiles is still said and a few percent is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.sweep import lookup

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
HEADLINE = ("output throughput", "TTFT p95", "TPOT p95", "SLO attainment", "cost")
UNKNOWN_NOISE = 0.10


@dataclass(frozen=True)
class Delta:
    label: str
    unit: str
    a: float | None
    b: float | None
    change: float | None  # b - a (for a share: in points, not relative)
    ratio: float | None  # b / a - 1; None for a share, whose relative change misleads (+632% of a 11% share)
    better: bool | None  # whether b is better than a; None when equal or not comparable
    clear: bool = False  # the change is beyond the runs' noise: their 95% intervals do not meet (or UNKNOWN_NOISE)


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
        ia, ib = interval(a, path), interval(b, path)
        if ia is not None and ib is not None:
            clear = apart(ia, ib)
        else:  # no interval: beyond UNKNOWN_NOISE (relative; a share's change in points)
            size = ratio if ratio is not None else change
            clear = size is not None and abs(size) > UNKNOWN_NOISE
        out.append(Delta(label, unit, x, y, change, ratio, better, clear))
    return out


def interval(result: dict[str, Any], path: str) -> list[float] | None:
    """A figure's 95% interval in a Result (`metrics.ttft_ms.p95` -> `metrics.ci95.ttft_ms.p95`), or None."""
    ci = lookup(result, path.replace("metrics.", "metrics.ci95.", 1))
    return ci if isinstance(ci, list) and len(ci) == 2 else None


def apart(a: list[float] | None, b: list[float] | None) -> bool:
    """Whether two 95% intervals do not meet (False where either is missing: the noise is then unknown)."""
    return a is not None and b is not None and (a[1] < b[0] or b[1] < a[0])


def reversals(one: list[Delta], other: list[Delta]) -> list[tuple[Delta, Delta]]:
    """The headline figures on which B beats A priced one way and loses to it priced the other, each change beyond
    its runs' noise (`Delta.clear`)."""
    by_label = {d.label: d for d in other}
    return [
        (d, by_label[d.label])
        for d in one
        if d.label in HEADLINE
        and d.better is not None
        and d.clear
        and by_label[d.label].clear
        and by_label[d.label].better is (not d.better)
    ]
