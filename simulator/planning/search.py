"""`plan`: the fewest GPUs (or lowest cost per million tokens) that meet the SLO at a given rate.

Candidates are the product of the search space. Before any simulation, a candidate that is not a valid
scenario, does not fit in memory, or is ruled out by an analytic throughput bound (`bounds`) is pruned.
The rest are simulated in levels of equal GPU count (or fleet price), cheapest first, each level's trials in
parallel; a trial stops as soon as it certainly misses the SLO. The search ends with the level that brings
the winner and its runners-up; nothing cheaper was left unsimulated, so the winner is the cheapest that
passes. Between levels one inference prunes more: a candidate that differs from one that missed TPOT only by
more prefill instances misses it too (prefill capacity does not speed decode steps). Decisions are taken
only at level boundaries, so the answer is the same for every backend and worker count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from simulator.budget import Limits
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.deploy.layout import one_line
from simulator.errors import InputError
from simulator.planning.backends import Backend
from simulator.planning.bounds import Bounds
from simulator.planning.openloop import rate_overrides, unit
from simulator.planning.pareto import point
from simulator.planning.slo import MISSES_TPOT, SLO
from simulator.planning.space import candidates, label
from simulator.planning.trial import Trial, run_trial
from simulator.pricing.profile import Profile
from simulator.results.cost import per_mtok

OBJECTIVES = ("gpus", "cost")
PREFILL_COUNT = "deployment.prefill.instances"


@dataclass
class Candidate:
    index: int
    overrides: dict[str, Any]
    scenario: Scenario | None = None
    gpus: int = 0
    usd_per_hour: float = 0.0
    reason: str | None = None
    pruned: bool = False
    outcome: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return self.outcome is not None and bool(self.outcome["meets"])


def _entry(c: Candidate, slo: SLO) -> dict[str, Any]:
    assert c.outcome is not None and c.scenario is not None
    price = c.scenario.cost.gpu_hour_usd or c.scenario.hardware.gpu_hour_usd
    return {
        "overrides": c.overrides,
        "label": label(c.overrides),
        "layout": one_line(c.scenario),
        "gpus": c.gpus,
        **per_mtok(c.outcome["metrics"], price),
        "binding": slo.binding(c.outcome["metrics"]),
        "metrics": c.outcome["metrics"],
    }


def _rejected(c: Candidate) -> dict[str, Any]:
    out = {
        "overrides": c.overrides,
        "label": label(c.overrides),
        "gpus": c.gpus,
        "reason": c.reason,
        "pruned": c.pruned,
    }
    if c.scenario is not None:
        out["layout"] = one_line(c.scenario)
    if c.outcome is not None:
        out["stopped_early"] = c.outcome["stopped_early"]
    return out


def mapping(raw: dict[str, Any], fixed: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A candidate's scenario as the raw mapping it is validated from: the study (without its sweep), the shared
    overrides, the candidate's own. Written out as YAML it is the same scenario (`simulator.deploy.bundle`)."""
    return loader.apply_overrides({k: v for k, v in raw.items() if k != "sweep"}, {**fixed, **overrides})


def _infer(done: list[Candidate], rest: list[Candidate]) -> None:
    """Prune what a simulated failure implies: more prefill instances do not cure a TPOT miss."""
    for f in done:
        if f.passed or f.reason is None or not f.reason.startswith(MISSES_TPOT) or PREFILL_COUNT not in f.overrides:
            continue
        others = {k: v for k, v in f.overrides.items() if k != PREFILL_COUNT}
        for c in rest:
            if c.pruned or c.overrides[PREFILL_COUNT] <= f.overrides[PREFILL_COUNT]:
                continue
            if all(c.overrides[k] == v for k, v in others.items()):
                c.pruned = True
                c.reason = f"{MISSES_TPOT}: inferred from {label(f.overrides)} (more prefill does not speed decode)"


def plan(
    raw: dict[str, Any],
    sc: Scenario,
    source: str,
    base_dir: Path | None,
    *,
    rate: float,
    slo: SLO,
    space: dict[str, list[Any]],
    objective: str,
    runners_up: int,
    backend: Backend,
    on_level: Callable[[int, int], None] | None = None,
    on_done: Callable[[int], None] | None = None,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """The answer as JSON-ready data (see the module doc); `on_level(todo, total)` before each level's trials."""
    if objective not in OBJECTIVES:
        raise InputError(f"--objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    base = {**rate_overrides(sc, rate, base_dir), **slo.overrides()}
    bounds = Bounds(slo)
    cands: list[Candidate] = []
    for i, overrides in enumerate(candidates(space)):
        c = Candidate(i, overrides)
        cands.append(c)
        try:
            c.scenario = loader.validate(mapping(raw, base, overrides), source)
        except InputError as e:
            c.pruned, c.reason = True, f"invalid: {e}"
            continue
        c.gpus = sum(p.gpus for p in c.scenario.deployment.pools().values())
        c.usd_per_hour = c.gpus * (c.scenario.cost.gpu_hour_usd or c.scenario.hardware.gpu_hour_usd)
        c.reason = bounds.reason(c.scenario, base_dir)
        c.pruned = c.reason is not None
    pruned_first = sum(c.pruned for c in cands)

    def level_key(c: Candidate) -> float:
        return c.gpus if objective == "gpus" else c.usd_per_hour

    queue = sorted((c for c in cands if not c.pruned), key=lambda c: (level_key(c), c.index))
    levels = [list(g) for _, g in groupby(queue, key=level_key)]
    simulated: list[Candidate] = []
    passed = 0
    for n, level in enumerate(levels):
        todo = [c for c in level if not c.pruned]
        if on_level is not None:
            on_level(len(todo), sum(len(lv) for lv in levels[n:]))
        outs = backend.map(run_trial, [Trial(c.scenario, base_dir, slo, limits=limits) for c in todo], on_done)  # type: ignore[arg-type]
        for c, out in zip(todo, outs, strict=True):
            c.outcome, c.reason = out, out["reason"]
            simulated.append(c)
        passed += sum(c.passed for c in todo)
        if passed >= 1 + runners_up:
            break
        _infer(todo, [c for lv in levels[n + 1 :] for c in lv])

    def rank(c: Candidate) -> tuple:
        e = _entry(c, slo)
        cost = e["cost_per_mtok_usd"] if e["cost_per_mtok_usd"] is not None else float("inf")
        ttft = e["metrics"]["ttft_ms"]["p95"] or 0.0
        return (c.gpus, cost, ttft, c.index) if objective == "gpus" else (cost, c.gpus, ttft, c.index)

    winners = sorted((c for c in simulated if c.passed), key=rank)
    rejected = [c for c in cands if c.pruned or (c.outcome is not None and not c.passed)]
    return {
        "question": {
            "scenario": sc.name,
            "rate": rate,
            "rate_unit": unit(sc),
            "slo": slo.to_json(),
            "objective": objective,
            "space": space,
            "fixed": base,  # the overrides every candidate shares: the rate and the SLO (`mapping`)
        },
        "winner": _entry(winners[0], slo) if winners else None,
        "runners_up": [_entry(c, slo) for c in winners[1 : 1 + runners_up]],
        "rejected": [_rejected(c) for c in rejected],
        "candidates": len(cands),
        "pruned": sum(c.pruned for c in cands),
        "pruned_before_simulating": pruned_first,
        "simulated": len(simulated),
        "stopped_early": sum(1 for c in simulated if c.outcome and c.outcome["stopped_early"]),
        "not_simulated": len(cands) - sum(c.pruned for c in cands) - len(simulated),
        "evaluated": [
            point(label(c.overrides), c.outcome["metrics"], meets=c.passed)  # type: ignore[index]
            for c in simulated
            if c.outcome["metrics"] and not c.outcome["stopped_early"]
        ],  # type: ignore[index]
        "clock": "modeled",
        "provenance": Profile.for_scenario(sc, base_dir).provenance(),
    }
