"""The stopping rule of a planner's trial: lengthen it until the figure its verdict turns on is known to ±5%.

`max-rate` and `plan` judge a candidate by the p95 of the SLO limit it comes nearest (the binding metric, as
`SLO.tightest` names it), read over the run's steady-state window with a 95% batch-means interval
(`results.steady`). A run that is too short either shows no steady state or carries a wide interval, and a
verdict on it is a coin toss; so a trial that ran to its end is run again longer (the study's own
`traffic.duration_s`, or `traffic.requests` where only a count bounds it, doubled) until the binding metric's
interval is within ±`PRECISION` of it, at most `DOUBLINGS` doublings (the cap: 4x the study's own length) and
never past the work limits a run must pass. Where the interval says how much longer the run must be (a
half-width shrinks as one over the root of the length), the doublings it needs are taken at once, so most
trials run once or twice. A trial stopped early needs no more: its miss is certain. A trace is as long as it is
and is not lengthened. The length a trial ended with is part of its answer (`overrides`), so the scenario a plan
writes runs the very trial it was judged on.

The CLI and the app plan through this one rule, so they run the same trials and reach the same answer.
"""

from __future__ import annotations

import math
from typing import Any

from simulator.config.scenario import Scenario
from simulator.planning.slo import SLO

PRECISION = 0.05  # the binding metric's 95% half-width, as a share of it
DOUBLINGS = 2  # the cap: a trial runs at most 2**DOUBLINGS (4) times the study's own length
KEYS = {"TTFT": "ttft_ms", "TPOT": "tpot_ms"}


def binding_precision(metrics: dict[str, Any], slo: SLO) -> float | None:
    """The binding metric's 95% half-width as a share of it; None without a steady state or an interval."""
    tight = slo.tightest(metrics)
    ci = metrics.get("ci95") or {}
    if tight is None or not metrics["steady_state"]["reached"]:
        return None
    _, name, value, _ = tight
    bounds = (ci.get(KEYS[name]) or {}).get("p95")
    if bounds is None:
        return None
    return (bounds[1] - bounds[0]) / 2 / value if value else 0.0


def precise(metrics: dict[str, Any], slo: SLO) -> bool:
    rel = binding_precision(metrics, slo)
    return rel is not None and rel <= PRECISION


def doublings_needed(rel: float | None) -> int:
    """How many doublings should bring a half-width of `rel` within `PRECISION`: a batch-means half-width shrinks
    as one over the square root of the run's length, so (rel / PRECISION)^2 times as long; one where the run
    shows no steady state yet (nothing to extrapolate from)."""
    if rel is None:
        return 1
    return max(1, math.ceil(math.log2((rel / PRECISION) ** 2)))


def longer(sc: Scenario, factor: int) -> tuple[str, float | int] | None:
    """The override that runs `sc` `factor` times as long (the path and its value), or None for a trace."""
    t = sc.traffic
    if t.trace is not None:
        return None
    if t.duration_s is not None:
        return "traffic.duration_s", t.duration_s * factor
    if t.requests is not None:
        return "traffic.requests", t.requests * factor
    return None


def lengthened(sc: Scenario, path: str, value: float | int) -> Scenario:
    """`sc` with its length set (the field `longer` named): the same scenario validating the override gives."""
    field = path.split(".")[1]
    return sc.model_copy(update={"traffic": sc.traffic.model_copy(update={field: value})})


def describe(answer: dict[str, Any]) -> str:
    """What an answer's figures were read over, for a report: its window, the trial's length and the binding
    metric's precision — `steady state 52-1,200 s of a 1,200 s trial (the study's 300 s, lengthened by the
    stopping rule); binding p95 ±9.6% (cap reached: 4x)`."""
    m = answer["metrics"]
    w, state = m["window_s"], m["steady_state"]
    over = answer.get("trial") or {}
    length = ", ".join(
        f"{v:,g} s of arrivals" if k.endswith("duration_s") else f"{v:,} requests" for k, v in over.items()
    )
    trial = f"a trial of {length} (lengthened by the stopping rule)" if length else "the study's own trial"
    where = f"steady state {w[0]:,.0f}-{w[1]:,.0f} s" if state["reached"] else f"NO STEADY STATE ({state['why']})"
    rel = answer.get("trial_precision")
    precision = f"binding p95 ±{rel:.1%}" if rel is not None else "binding p95 without an interval"
    if rel is None or rel > PRECISION:
        precision += f" (the cap: {2**DOUBLINGS}x the study's length)" if length else " (not lengthened)"
    return f"{where} of {trial}; {precision}"
