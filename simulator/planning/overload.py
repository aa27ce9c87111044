"""A run that reads its own result: did the offered load exceed what a pool can serve?

An overloaded open-loop run still ends — every request is served in the end — and its report looks like any
other, with a TTFT p50 of minutes. `plan` and `max-rate` know better ("cannot sustain the rate"); this module
says it for `run`: the load the run offered, measured from its own arrivals (a trace's too), against each
pool's analytic throughput bound (`bounds.py`, which leans optimistic, so a pool it finds short is short),
with the queue the run built as the evidence. Closed-loop traffic cannot overload: its clients wait.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from simulator.config.scenario import Scenario
from simulator.planning.bounds import Bounds, Offered, PoolBound
from simulator.planning.slo import SLO


class Arrived(Protocol):
    """What a request's record must tell (the engine's `Record`)."""

    arrival: float
    first_token: float
    prompt: int
    output: int
    status: str


def offered_by(records: Sequence[Arrived], prefix_hit_rate: float) -> Offered | None:
    """The load a run offered: requests per second over its arrival window, mean prompt (the share its prefix
    cache served taken off what prefill computes) and mean output; None with fewer than two arrivals."""
    if len(records) < 2:
        return None
    arrivals = np.fromiter((r.arrival for r in records), float, len(records))
    window = float(arrivals.max() - arrivals.min())
    if window <= 0:
        return None
    prompt = float(np.mean([r.prompt for r in records]))
    output = float(np.mean([r.output for r in records]))
    return Offered((len(records) - 1) / window, prompt, max(1.0, prompt * (1 - prefix_hit_rate)), output)


def waiting_at(records: Sequence[Arrived], t: float) -> int:
    """Requests that had arrived by t and had no first token yet (queued or in prefill)."""
    return sum(
        1
        for r in records
        if r.status != "rejected" and r.arrival <= t and (math.isnan(r.first_token) or r.first_token > t)
    )


def warnings(sc: Scenario, result: dict[str, Any], records: Sequence[Arrived], base_dir: Path | None) -> list[str]:
    """One line per pool whose bound is below what the run offered (no line for a run that kept up)."""
    if sc.traffic.concurrency is not None or not records:
        return []
    m = result["metrics"]
    load = offered_by(records, m["prefix_hit_rate"])
    if load is None:
        return []
    short = [b for b in Bounds(SLO.parse(None, sc)).throughput(sc, load, base_dir) if b.offered > b.served]
    if not short:
        return []
    first = min(r.arrival for r in records)
    last = max(r.arrival for r in records)
    mid, end = waiting_at(records, (first + last) / 2), waiting_at(records, last)
    p50 = m["ttft_ms"]["p50"]
    queue = (
        f"the queue grew from {mid:,} requests waiting for a first token mid-way through the arrivals to {end:,} "
        f"at the last one (TTFT p50 {p50:,.0f} ms)"
        if p50 is not None
        else f"{end:,} requests waiting for a first token at the last arrival"
    )
    return [_line(b, load, queue) for b in short]


def _line(b: PoolBound, load: Offered, queue: str) -> str:
    n = "instance" if b.instances == 1 else "instances"
    if b.pool == "colocated":
        what = (
            f"the decode pool ({b.instances} {n}, prefill and decode colocated) is kept busy by "
            f"{b.offered:,.1f} instances' worth of work at best"
        )
    else:
        verb = "computes" if b.pool == "prefill" else "produces"
        what = f"the {b.pool} pool ({b.instances} {n}) {verb} at most {b.served:,.0f} {b.unit}, {b.offered:,.0f} "
        what += "offered"
    return (
        f"overloaded: {what} ({load.requests_per_s:,.2f} req/s, mean prompt {load.prompt_tokens:,.0f} and output "
        f"{load.output_tokens:,.0f} tokens; analytic bound, simulator/planning/bounds.py): {queue}; "
        f"at least {b.instances_needed()} {b.pool if b.pool != 'colocated' else 'decode'} instances needed"
    )
