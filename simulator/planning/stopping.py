"""The stopping rule of a planner's trial: lengthen it only while its verdict, or its rank, is still in doubt.

`max-rate` and `plan` judge a candidate by the p95 of each SLO limit, read over the run's steady-state window
with a 95% batch-means interval (`results.steady`). A run too short to show a steady state, or whose interval
still holds a limit, gives a verdict that is a coin toss; so such a trial is run again longer (the study's own
`traffic.duration_s`, or `traffic.requests` where only a count bounds it, doubled). It stops being lengthened as
soon as the verdict can no longer change within its intervals — one limit's whole interval above it (a clear
miss) or every limit's whole interval below it (a clear pass) — or the binding metric (the limit it comes
nearest, `SLO.tightest`) is known to ±`PRECISION`, or at the cap: `DOUBLINGS` doublings (4x the study's own
length), never past the work limits a run must pass. A half-width shrinks as one over the root of the run's
length, so the doublings a verdict needs are taken at once: enough to bring the binding half-width within the
larger of ±5% and the distance from its p95 to its limit.

A clearly failing candidate is therefore never lengthened, and a clear pass only where its figures decide the
answer: a trial asked to be `precise` (a plan's winner and the runners-up whose rank its intervals leave in
doubt, the rate `max-rate` answers with) is lengthened, from the run it already has, until its binding metric is
within ±5% or the cap, as every trial was before the rule looked at verdicts. A trial stopped early needs no
more: its miss is certain. A trace is as long as it is and is not lengthened. The length a trial ended with is
part of its answer (`overrides`), so the scenario a plan writes runs the very trial it was judged on.

The CLI and the app plan through this one rule, so they run the same trials and reach the same answer.
"""

from __future__ import annotations

import math
from typing import Any

from simulator.config.scenario import Scenario
from simulator.planning.slo import MISSES_ATTAINMENT, MISSES_TPOT, MISSES_TTFT, SLO

PRECISION = 0.05  # the binding metric's 95% half-width, as a share of it
DOUBLINGS = 2  # the cap: a trial runs at most 2**DOUBLINGS (4) times the study's own length
KEYS = {"TTFT": "ttft_ms", "TPOT": "tpot_ms"}
INTERVAL_MISSES = (MISSES_TTFT, MISSES_TPOT, MISSES_ATTAINMENT)  # the misses an interval can put in doubt


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


def _limits(metrics: dict[str, Any], slo: SLO) -> list[tuple[float | None, list[float] | None, float, bool]]:
    """Each limit the SLO sets: the run's figure for it, that figure's 95% interval ([low, high], or None), the
    limit, and whether a higher figure is worse (a p95) or better (the attainment)."""
    ci = metrics.get("ci95") or {}
    out = [
        (metrics[key]["p95"], (ci.get(key) or {}).get("p95"), limit, True)
        for key, limit in (("ttft_ms", slo.ttft_p95_ms), ("tpot_ms", slo.tpot_p95_ms))
    ]
    if slo.attainment is not None:
        out.append((metrics["slo_attainment"], ci.get("slo_attainment"), slo.attainment, False))
    return out


def settled(out: dict[str, Any], slo: SLO) -> bool:
    """Whether a run's verdict can no longer change within its intervals: a miss that is not a p95's or the
    attainment's (requests rejected or never finished: certain), a limit whose whole interval lies on the wrong
    side of it, or every limit's whole interval on the right side. Without a steady state there are no latency
    intervals, and nothing is settled."""
    reason = out["reason"]
    if out["stopped_early"] or (reason is not None and not reason.startswith(INTERVAL_MISSES)):
        return True
    m = out["metrics"]
    if not m["steady_state"]["reached"]:
        return False
    clear = []
    for _, ci, limit, higher_worse in _limits(m, slo):
        if ci is None:
            return False
        if (ci[0] > limit) if higher_worse else (ci[1] < limit):
            return True  # a clear miss
        clear.append(ci[1] <= limit if higher_worse else ci[0] >= limit)
    return all(clear)


def doublings_needed(rel: float | None, target: float = PRECISION) -> int:
    """How many doublings should bring a half-width of `rel` within `target`: a batch-means half-width shrinks
    as one over the square root of the run's length, so (rel / target)^2 times as long; one where the run
    shows no steady state yet (nothing to extrapolate from)."""
    if rel is None:
        return 1
    return max(1, math.ceil(math.log2((rel / target) ** 2)))


def wanted(out: dict[str, Any], slo: SLO, precise_figures: bool) -> int:
    """The doublings a trial's last run asks for (0: stop here). With `precise_figures`, until the binding
    metric is within ±`PRECISION`; otherwise none once the verdict is `settled`, and for each limit still inside
    its interval, enough to bring its half-width within the larger of ±`PRECISION` and its distance to the limit
    (then the interval no longer holds the limit, or the verdict is a call closer than the precision asked)."""
    if out["stopped_early"]:
        return 0
    m = out["metrics"]
    if precise_figures:
        rel = binding_precision(m, slo)
        return 0 if rel is not None and rel <= PRECISION else doublings_needed(rel)
    if settled(out, slo):
        return 0
    if not m["steady_state"]["reached"]:
        return 1
    need = 0
    for value, ci, limit, _ in _limits(m, slo):
        if ci is not None and not ci[0] <= limit <= ci[1]:
            continue  # this limit is clear of its interval
        if ci is None or not value:
            need = max(need, 1)
            continue
        rel, target = (ci[1] - ci[0]) / 2 / abs(value), max(PRECISION, abs(limit - value) / abs(value))
        if rel > target:
            need = max(need, doublings_needed(rel, target))
    return need


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
    metric's precision, and why it was not lengthened further where that is wider than ±5% — `steady state
    52-1,200 s of a trial of 1,200 s of arrivals (lengthened by the stopping rule); binding p95 ±9.6% (the cap:
    4x the study's length, or the work limits)`."""
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
    if answer.get("trial_settled") and (rel is None or rel > PRECISION):
        precision += " (its intervals clear of every limit: the verdict is settled, so not lengthened further)"
    elif rel is None or rel > PRECISION:
        precision += (
            f" (the cap: {2**DOUBLINGS}x the study's length, or the work limits)" if length else " (not lengthened)"
        )
    return f"{where} of {trial}; {precision}"
