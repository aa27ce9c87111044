"""`max-rate`: the highest arrival rate a configuration sustains within the SLO, and its cost there.

Bisection on the rate, geometric (rates span orders of magnitude), on rates rounded to three significant
digits so the answer is a number a person can type back (`--set traffic.rate=…` reproduces it exactly).
A bracket is found by doubling or halving from the scenario's own rate; each trial stops early once its
SLO is certainly missed, so the failing half of the search is cheap. Load curves are not always monotone
(a burst lands differently at a slightly different rate), so the answer is confirmed: rates 5, 10, 15 and 20%
above it must fail too, else the search goes on above them (with only +10% and +20% the fleet study stopped at
1.46 conversations/s while 1.68 met the SLO). Cost per million tokens is at the found rate —
the figure to compare hardware and formats by, since at a fixed offered load a faster fleet only idles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.budget import Limits
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.deploy.layout import one_line
from simulator.errors import InputError
from simulator.planning.backends import Backend
from simulator.planning.openloop import current_rate, rate_overrides, requests_per_s, unit
from simulator.planning.slo import NO_REQUEST, SLO
from simulator.planning.trial import Trial, run_trial
from simulator.pricing.profile import Profile
from simulator.results.cost import gpu_hour_usd, per_mtok

REL_TOL = 0.02  # bisection stops when the failing rate is within 2% of the passing one
CONFIRM = (1.05, 1.1, 1.15, 1.2)  # rates above the answer that must fail
MAX_DOUBLINGS = 20
MAX_ROUNDS = 4  # confirmations that may restart the search higher


def sig3(x: float) -> float:
    return float(f"{x:.3g}")


class _Search:
    def __init__(
        self,
        raw: dict[str, Any],
        sc: Scenario,
        source: str,
        base_dir: Path | None,
        slo: SLO,
        backend: Backend,
        on_trial: Callable[[str], None] | None,
        limits: Limits | None,
    ) -> None:
        self.raw, self.sc, self.source, self.base_dir, self.slo = raw, sc, source, base_dir, slo
        self.backend, self.on_trial, self.limits = backend, on_trial, limits
        self.seen: dict[float, dict[str, Any]] = {}

    def scenario(self, rate: float) -> Scenario:
        return loader.validate(mapping(self.raw, self.sc, rate, self.slo, self.base_dir), self.source)

    def run(self, rates: list[float]) -> list[dict[str, Any]]:
        todo = [r for r in dict.fromkeys(rates) if r not in self.seen]
        trials = [Trial(self.scenario(r), self.base_dir, self.slo, limits=self.limits) for r in todo]
        outs = self.backend.map(run_trial, trials)
        for r, out in zip(todo, outs, strict=True):
            self.seen[r] = out = as_written(out)
            if self.on_trial is not None:
                self.on_trial(f"{r:g}: {'meets the SLO' if out['meets'] else out['reason']}")
        return [self.seen[r] for r in rates]

    def meets(self, rate: float) -> bool:
        return bool(self.run([rate])[0]["meets"])

    def bracket(self, start: float) -> tuple[float, float]:
        """(a passing rate, a failing rate above it)."""
        r = sig3(start)
        for _ in range(MAX_DOUBLINGS):  # a rate so low that no request arrives says nothing: go up first
            if self.meets(r) or not self.seen[r]["reason"].startswith(NO_REQUEST):
                break
            r = sig3(r * 2)
        if self.meets(r):
            for _ in range(MAX_DOUBLINGS):
                nxt = sig3(r * 2)
                try:
                    ok = self.meets(nxt)
                except InputError:  # past the highest rate a scenario may have
                    break
                if not ok:
                    return r, nxt
                r = nxt
            raise InputError(f"max-rate: still within the SLO at {r:g} {unit(self.sc)}; no limit found")
        for _ in range(MAX_DOUBLINGS):
            nxt = sig3(r / 2)
            try:
                ok = self.meets(nxt)
            except InputError:  # below the lowest rate a scenario may have: nothing lower can be tried
                break
            if ok:
                return nxt, r
            r = nxt
            if self.seen[r]["reason"].startswith(NO_REQUEST):  # nor at any lower rate
                break
        # the lowest rate tried at which requests arrived says why (below it none came)
        served = [q for q in sorted(self.seen) if not self.seen[q]["reason"].startswith(NO_REQUEST)]
        r = served[0] if served else r
        raise InputError(
            f"max-rate: no rate meets the SLO ({self.slo.describe()}); even {r:g} {unit(self.sc)}: "
            f"{self.seen[r]['reason']}"
        )

    def bisect(self, lo: float, hi: float) -> tuple[float, float]:
        while hi > lo * (1 + REL_TOL):
            mid = sig3(math.sqrt(lo * hi))
            if mid in (lo, hi):
                break
            if self.meets(mid):
                lo = mid
            else:
                hi = mid
        return lo, hi


def as_written(out: dict[str, Any]) -> dict[str, Any]:
    """A rate's trial as the search counts it: met only where both its last run (the stopping rule's length) and
    its first (the study's own length, what `phaseplan run --set traffic.rate=R` runs) meet the SLO, so the
    answer holds for the study as written too; else missed, for the reason of the run that misses."""
    if not out["meets"] or out["as_written"] is None:
        return out
    return {**out, "meets": False, "reason": f"{out['as_written']} (at the study's own length; longer, it meets it)"}


def mapping(
    raw: dict[str, Any], sc: Scenario, rate: float, slo: SLO, base_dir: Path | None, trial: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The scenario at `rate` as the raw mapping its trial is validated from (the study without its sweep); with
    `trial`, the length the stopping rule ran it to, so that it runs the very trial the answer was judged on."""
    over = {**rate_overrides(sc, rate, base_dir), **slo.overrides(), **(trial or {})}
    return loader.one_point(raw, over)


def max_rate(
    raw: dict[str, Any],
    sc: Scenario,
    source: str,
    base_dir: Path | None,
    slo: SLO,
    backend: Backend,
    start: float | None = None,
    on_trial: Callable[[str], None] | None = None,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """The answer as JSON-ready data: rate, cost there, the metrics of the run at that rate, and the trials. A
    rate whose run the work `limits` refuse counts as failing."""
    search = _Search(raw, sc, source, base_dir, slo, backend, on_trial, limits)
    lo, hi = search.bracket(start or current_rate(sc, base_dir) or 1.0)
    for n in range(MAX_ROUNDS):
        lo, hi = search.bisect(lo, hi)
        probes = [sig3(lo * f) for f in CONFIRM]
        passing = [r for r, out in zip(probes, search.run(probes), strict=True) if out["meets"]]
        if not passing or n == MAX_ROUNDS - 1:
            break  # after the last round a passing probe stays in the answer, for a person to see
        lo, hi = search.bracket(max(passing))
    best = search.seen[lo]
    price = gpu_hour_usd(sc)
    at = loader.validate(mapping(raw, sc, lo, slo, base_dir, best["overrides"]), source)
    return {
        "max_rate_rps": lo,
        "layout": one_line(at),
        "rate_unit": unit(sc),
        "overrides": rate_overrides(sc, lo, base_dir),
        "requests_per_s": requests_per_s(lo, best["metrics"], at),
        **per_mtok(best["metrics"], price),
        "gpu_hour_usd": price,
        "slo": slo.to_json(),
        "binding": slo.binding(best["metrics"]),
        "trial": best["overrides"],  # the length the stopping rule ran the answer's trial to (empty: the study's)
        "trial_precision": best["precision"],
        "trial_settled": best["settled"],
        "metrics": best["metrics"],
        "above": {f"{r:g}": search.seen[r]["reason"] for r in probes},  # None: it met the SLO after all
        "trials": [
            {
                "rate": r,
                "meets": o["meets"],
                "reason": o["reason"],
                "stopped_early": o["stopped_early"],
                "trial": o["overrides"],
            }
            for r, o in sorted(search.seen.items())
        ],
        "clock": "modeled",
        "provenance": {**Profile.for_scenario(sc, base_dir).provenance(), "engine": sc.engine.name},
    }
