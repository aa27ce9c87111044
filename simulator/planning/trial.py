"""One trial: a candidate scenario simulated against the SLO, stopped as soon as the SLO is certainly missed,
and lengthened while its verdict is in doubt (`stopping`).

A run is judged on its steady-state window (`results.steady`), which starts no later than the middle of the
arrivals. So a run that already has more requests over a limit, among those that arrived after that middle
(surely in the window), than the p95 of every request it can still complete allows, is stopped there: its
verdict is the one the whole run would reach, at a fraction of the cost. That is what makes a bisection on the
rate, or a search over configurations, affordable — most candidates fail. The outcome is plain JSON-ready
data, so a trial can run in another process or on a Ray worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from simulator.budget import Limits, check
from simulator.config.scenario import Scenario
from simulator.engine.simulation import Simulation
from simulator.errors import InputError
from simulator.planning import stopping
from simulator.planning.slo import CANNOT_SUSTAIN, DOES_NOT_FIT, MISSES_ATTAINMENT, MISSES_TPOT, MISSES_TTFT, SLO
from simulator.planning.spread import drawn_profile
from simulator.results.metrics import build_metrics
from simulator.results.record import RequestRecord

CHECKS = 40  # how often (per run) the watch counts the requests over a limit
ROUNDING = 1e-4  # ms: a Result rounds percentiles to 4 decimals; a stop needs a value clearly over the limit
GROWTH = 3.0  # TTFT of the last quarter of arrivals this many times the first quarter's: the queue builds up
OVER_LIMIT = "over the work limit"  # a candidate the run's work limits refuse (it fails; it is not simulated)


@dataclass(frozen=True)
class Trial:
    """What a worker needs: the scenario, its folder (for trace files), the SLO (None: run to the end and judge
    nothing), for a repeat which draw of the profile's p10–p90 spread to price steps with, and the work limits
    each run must pass, as a single run must (a probe at a high rate can imply millions of requests)."""

    scenario: Scenario
    base_dir: Path | None = None
    slo: SLO | None = None
    profile_draw: int | None = None
    limits: Limits | None = None
    lengthen: bool = True  # False: one run as given (a trial re-priced at the length it was judged on)
    precise: bool = False  # lengthen until the binding metric is within ±5%, whatever the verdict (`stopping`)
    resume: dict[str, Any] | None = None  # an earlier outcome of this trial to go on from, not run again


class _Missed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Watch:
    """Called as requests finish; raises `_Missed` once the run cannot meet the SLO however it ends.

    With at most `most` requests completing, p95 (numpy's linear interpolation) exceeds a limit as soon as
    `most - floor(0.95 (most - 1))` of them do: the value at that rank is then over the limit for any final
    count up to `most`, since the rank needed only grows with the count. Only requests arriving from `since` on
    are counted: those are in the window whatever warm-up it cuts, so the count holds for the window's p95. A
    request counts as soon as its latency is surely over a limit, finished or not: one still waiting for its first
    token at `settled()` (`Simulation.recorded_until`) has waited longer than that, one still decoding has run at
    least that long (unless a client retried it: its first token is then a later attempt's), and one that never
    finishes fails the run anyway (`SLO.verdict`). So a run whose queue builds up stops once the wait of the
    requests after `since` shows it, not when they are at last served.
    """

    def __init__(
        self, slo: SLO, most: int, records: dict[int, RequestRecord], since: float, settled: Callable[[], float]
    ) -> None:
        self.slo, self.most, self.records, self.since, self.settled = slo, most, records, since, settled
        self.every = max(1, most // CHECKS)
        self.over_p95 = most - math.floor(0.95 * (most - 1))

    def __call__(self, done: int) -> None:
        if done % self.every == 0:
            self.check(done)

    def check(self, done: int) -> None:
        slo, now = self.slo, self.settled()
        ttft_lim, tpot_lim = slo.ttft_p95_ms + ROUNDING, slo.tpot_p95_ms + ROUNDING
        over_ttft = over_tpot = failed = 0
        for r in self.records.values():
            if r.arrival < self.since:
                continue
            if r.status == "pending":
                first = r.first_token
                if first != first:  # NaN: no first token by `now`
                    over_ttft += (now - r.arrival) * 1e3 > ttft_lim
                elif r.output > 1 and not r.retries:  # a retry's first token comes later: its TPOT is not known
                    over_tpot += (now - first) * 1e3 / (r.output - 1) > tpot_lim
                continue
            if r.status != "completed":
                failed += 1
                continue
            ttft = (r.first_token - r.arrival) * 1e3
            tpot = (r.finish - r.first_token) * 1e3 / (r.output - 1) if r.output > 1 else 0.0
            over_ttft += ttft > ttft_lim
            over_tpot += tpot > tpot_lim
            failed += ttft > slo.ttft_p95_ms or tpot > slo.tpot_p95_ms
        tail = f"of at most {self.most:,} requests (stopped early after {done:,}; counted from {self.since:,.0f} s)"
        if over_ttft >= self.over_p95:
            raise _Missed(f"{MISSES_TTFT}: {over_ttft:,} {tail} took over {slo.ttft_p95_ms:,g} ms to the first token")
        if over_tpot >= self.over_p95:
            raise _Missed(f"{MISSES_TPOT}: {over_tpot:,} {tail} ran over {slo.tpot_p95_ms:,g} ms per output token")
        if slo.attainment is not None and (self.most - failed) / self.most < slo.attainment - ROUNDING:
            raise _Missed(
                f"{MISSES_ATTAINMENT}: {failed:,} {tail} missed a limit, more than {1 - slo.attainment:.1%} allow"
            )


def most_requests(sim: Simulation) -> int | None:
    """An upper bound on the requests a run issues (so on those it completes), or None when only time bounds it."""
    src, t = sim.source, sim.sc.traffic
    if src.total_expected is not None:
        return src.total_expected
    if t.rate is not None:  # conversations known up front; turn i comes at least i think times after the first
        think, end = t.session_gap_s, t.duration_s  # (an agent's sub-agents come at once: a bound all the same)
        n = sum(1 for r in src.initial() for i in range(t.per_session) if end is None or r.arrival + i * think < end)
        return min(n, t.requests) if t.requests is not None else n
    return t.requests


def backlog(records: dict[int, RequestRecord], ttft_limit_ms: float) -> str | None:
    """`cannot sustain the rate` when TTFT climbs over the run: arrivals outpace service and the queue grows."""
    done = sorted((r.arrival, r.first_token - r.arrival) for r in records.values() if r.status == "completed")
    q = len(done) // 4
    if q < 8:
        return None
    first = median(t for _, t in done[:q]) * 1e3
    last = median(t for _, t in done[-q:]) * 1e3
    if last > ttft_limit_ms and last > GROWTH * first:
        return (
            f"{CANNOT_SUSTAIN}: median TTFT grows from {first:,.0f} ms (first quarter of arrivals) to "
            f"{last:,.0f} ms (last quarter): the queue builds up"
        )
    return None


def compact(metrics: dict[str, Any]) -> dict[str, Any]:
    """A Result's metrics without the occupancy time series (planning reports many runs side by side)."""
    out = dict(metrics)
    out["kv_occupancy"] = {k: v for k, v in metrics["kv_occupancy"].items() if k != "series"}
    return out


def surely_measured_from(sim: Simulation) -> float | None:
    """A time from which every arrival is in the run's window: the middle of the arrivals, the latest a warm-up
    cut may fall (`results.steady`), bounded before the run from its first arrival and its arrivals' end (the
    arrival window, or a source's last request when none follows another); None where nothing bounds it."""
    initial, t = sim.source.initial(), sim.sc.traffic
    if not initial:
        return None
    first = initial[0].arrival
    if t.duration_s is not None:
        return (first + t.duration_s) / 2
    if t.concurrency is None and t.sessions.turns == 1:
        return (first + initial[-1].arrival) / 2
    return None


def _run(trial: Trial, sc: Scenario) -> dict[str, Any]:
    """One run of `sc` against the trial's SLO: `{"meets", "reason", "stopped_early", "metrics"}`."""
    slo = trial.slo
    try:
        check(sc, trial.base_dir, trial.limits)
    except InputError as e:
        return {"meets": False, "reason": f"{OVER_LIMIT}: {e}", "stopped_early": False, "metrics": None}
    profile = drawn_profile(sc, trial.base_dir, trial.profile_draw) if trial.profile_draw is not None else None
    try:
        sim = Simulation(sc, base_dir=trial.base_dir, profile=profile)
    except InputError as e:
        why = str(e).replace(f"{DOES_NOT_FIT}: ", "")
        return {"meets": False, "reason": f"{DOES_NOT_FIT}: {why}", "stopped_early": False, "metrics": None}
    most = most_requests(sim) if slo is not None else None
    since = surely_measured_from(sim)
    if slo is not None and most and since is not None:
        sim.on_progress = _Watch(slo, most, sim.records, since, sim.recorded_until)
    reason, stopped = None, False
    try:
        sim.run()
    except _Missed as e:
        reason, stopped = e.reason, True
    metrics = compact(build_metrics(sim.record()))
    if slo is None:
        return {"meets": None, "reason": None, "stopped_early": False, "metrics": metrics}
    if not stopped:
        reason = slo.verdict(metrics)
    if reason is not None and reason.startswith((MISSES_TTFT, CANNOT_SUSTAIN)):
        reason = backlog(sim.records, slo.ttft_p95_ms) or reason
    return {"meets": reason is None, "reason": reason, "stopped_early": stopped, "metrics": metrics}


def run_trial(trial: Trial) -> dict[str, Any]:
    """`{"meets", "reason", "stopped_early", "metrics", "overrides", "doublings", "precision", "settled",
    "as_written"}`: the verdict of the last run, lengthened by the stopping rule (`stopping`; a trial without an
    SLO runs once, as given), the overrides that make its length (empty: the scenario's own), its binding metric's
    relative half-width, whether its intervals settle its verdict, and why its first run, at the scenario's own
    length, misses the SLO (None: it meets it). A candidate that does not fit has no metrics."""
    sc, slo = trial.scenario, trial.slo
    if trial.resume is not None:
        out, over, n = trial.resume, dict(trial.resume["overrides"]), trial.resume["doublings"]
        first = trial.resume["as_written"]
    else:
        out, over, n = _run(trial, sc), {}, 0
        first = out["reason"]
    while trial.lengthen and slo is not None and n < stopping.DOUBLINGS and out["metrics"]:
        k = min(stopping.wanted(out, slo, trial.precise), stopping.DOUBLINGS - n)
        nxt = stopping.longer(trial.scenario, 2 ** (n + k)) if k else None
        if nxt is None:
            break
        longer = stopping.lengthened(trial.scenario, *nxt)
        try:
            check(longer, trial.base_dir, trial.limits)
        except InputError:
            break  # the work limits cap the trial where they stand
        over, n = {nxt[0]: nxt[1]}, n + k
        out = _run(trial, longer)
    judged = slo is not None and out["metrics"] is not None
    precision = stopping.binding_precision(out["metrics"], slo) if judged else None  # type: ignore[arg-type]
    return {
        **out,
        "overrides": over,
        "doublings": n,
        "precision": None if precision is None else round(precision, 4),
        "settled": judged and stopping.settled(out, slo),  # type: ignore[arg-type]
        "as_written": first,
    }
