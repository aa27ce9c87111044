"""The knob `max-rate` and `plan` turn: the open-loop arrival rate of a scenario's synthetic traffic.

A closed-loop study (N clients) becomes open-loop Poisson arrivals at the rate, with the same number of
requests; a trace keeps its own arrival times and has no rate to turn. With multi-turn sessions the rate
counts conversations, as `traffic.rate` does; `requests_per_s` converts.
"""

from __future__ import annotations

from typing import Any

from simulator.config.scenario import Scenario
from simulator.errors import InputError


def rate_overrides(sc: Scenario, rate: float) -> dict[str, Any]:
    """`--set`-style overrides that put `sc` at `rate`."""
    t = sc.traffic
    if t.trace is not None:
        raise InputError("traffic.trace: a trace has its own arrival times; max-rate and plan need synthetic "
                         "traffic (scale a trace with traffic.trace_speedup instead)")
    out: dict[str, Any] = {"traffic.rate": rate}
    if t.concurrency is not None:
        out["traffic.concurrency"] = None
        if t.duration_s is None:
            out["traffic.requests"] = t.requests
    return out


def unit(sc: Scenario) -> str:
    turns = sc.traffic.sessions.turns
    return "requests/s" if turns == 1 else f"conversations/s ({turns} turns each)"


def requests_per_s(rate: float, metrics: dict[str, Any], sc: Scenario) -> float:
    """Requests per second at `rate`: the rate itself for single requests; for sessions, the requests issued per
    second of the arrival window (of the run's span when only a count bounds it)."""
    if sc.traffic.sessions.turns == 1:
        return rate
    window = sc.traffic.duration_s or metrics["duration_s"]
    return round(metrics["requests"] / window, 4) if window else 0.0
