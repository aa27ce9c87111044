"""The knob `max-rate` and `plan` turn: the arrival rate, `traffic.rate` or a trace's speed-up.

A closed-loop study (N clients) becomes open-loop Poisson arrivals at the rate, with the same number of
requests. With multi-turn sessions the rate counts conversations, as `traffic.rate` does; `requests_per_s`
converts. A trace keeps the shape of its arrivals: its rate is its mean arrival rate (requests over the span
of their arrivals at speed-up 1) times `traffic.trace_speedup`, which is what is turned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.workload.traces import summary


def trace_rate(sc: Scenario, base_dir: Path | None) -> float:
    """A trace's mean arrival rate at speed-up 1, requests per second: over its first `traffic.requests` arrivals
    (the summary the work estimate read, not the trace's requests built again)."""
    arrivals = summary(sc.traffic, base_dir).arrivals[: sc.traffic.requests]
    if not len(arrivals):
        raise InputError(f"{sc.traffic.trace}: trace has no requests")
    span = float(arrivals[-1] - arrivals[0])
    if len(arrivals) < 2 or span <= 0:
        raise InputError(f"traffic.trace: {len(arrivals)} request(s) arriving at once have no rate to turn")
    return (len(arrivals) - 1) / span


def current_rate(sc: Scenario, base_dir: Path | None) -> float | None:
    """The scenario's own rate (None for a closed loop)."""
    if sc.traffic.trace is not None:
        return trace_rate(sc, base_dir) * sc.traffic.trace_speedup
    return sc.traffic.rate


def rate_overrides(sc: Scenario, rate: float, base_dir: Path | None = None) -> dict[str, Any]:
    """`--set`-style overrides that put `sc` at `rate`."""
    t = sc.traffic
    if t.trace is not None:
        return {"traffic.trace_speedup": rate / trace_rate(sc, base_dir)}
    out: dict[str, Any] = {"traffic.rate": rate}
    if t.concurrency is not None:
        out["traffic.concurrency"] = None
        if t.duration_s is None:
            out["traffic.requests"] = t.requests
    return out


def unit(sc: Scenario) -> str:
    if sc.traffic.trace is not None:
        return "requests/s (the trace sped up or slowed down)"
    t = sc.traffic
    if t.agentic is not None:
        return f"agent tasks/s ({t.per_session} model calls each)"
    turns = t.sessions.turns
    return "requests/s" if turns == 1 else f"conversations/s ({turns} turns each)"


def requests_per_s(rate: float, metrics: dict[str, Any], sc: Scenario) -> float:
    """Requests per second at `rate`: the rate itself for single requests; for sessions, the requests issued per
    second of the arrival window (of the run's span when only a count bounds it)."""
    if sc.traffic.per_session == 1 or sc.traffic.trace is not None:
        return rate
    window = sc.traffic.duration_s or metrics["duration_s"]
    return round(metrics["requests"] / window, 4) if window else 0.0
