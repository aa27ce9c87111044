"""`plan`: the fewest GPUs (or lowest cost per million tokens) that meet the SLO at a given rate.

Candidates are the product of the search space (`space`), counted before any is built. Before any simulation,
each pool of each candidate is judged once for all candidates that share it (`judge`): a pool that is not
valid, does not fit in memory, or is ruled out by an analytic throughput bound (`bounds`) prunes every
candidate with it; the survivors are validated whole. They are simulated in levels of equal GPU count (or
fleet price), cheapest first, each level's trials in parallel; a trial stops as soon as it certainly misses the
SLO. A level runs in batches of `BATCH` trials; the search ends with the batch that brings the winner and its
runners-up. Every cheaper level was simulated or ruled out, so the winner has the fewest GPUs (or lowest price)
that pass; among candidates tied with it, it is the best of those simulated. Between batches one inference
prunes more: a candidate with the same decode pool as one that missed TPOT, and a prefill pool that computes at
least as many prompt tokens per second, misses it too (prefill capacity does not speed decode steps).
Decisions are taken only at batch boundaries, so the answer is the same for every backend and worker count.

A winner at the edge of a searched range of instance counts may have a cheaper neighbour outside it, so the
range is widened (doubled, or down to 1) and the search run again, trials already run reused; with no winner,
ranges are widened to what the bounds say would pass them. Where a range may not widen (the schema's limit, the
count limit, a list of values) the answer says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from simulator.budget import Limits
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.deploy.layout import formats, one_line, parallel
from simulator.errors import InputError
from simulator.planning.backends import Backend
from simulator.planning.bounds import MAX_INSTANCES, Bounds
from simulator.planning.judge import Judge, key, split
from simulator.planning.openloop import rate_overrides, unit
from simulator.planning.pareto import point
from simulator.planning.slo import MISSES_TPOT, SLO, reason_kind
from simulator.planning.space import MAX_CANDIDATES, Space, label
from simulator.planning.trial import Trial, run_trial
from simulator.pricing.profile import Profile
from simulator.results.cost import gpu_hour_usd, per_mtok

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
    branch: int = 0
    group: tuple[Any, ...] | None = None  # (branch, shared key, pool, layout key): the pool verdict that pruned it
    fewest: int | None = None  # with a group: the fewest instances of that pool layout the bounds let through
    decode_key: str | None = None  # disaggregated: its shared part and decode pool, which a TPOT miss is about

    @property
    def passed(self) -> bool:
        return self.outcome is not None and bool(self.outcome["meets"])


def _entry(c: Candidate, slo: SLO) -> dict[str, Any]:
    assert c.outcome is not None and c.scenario is not None
    price = gpu_hour_usd(c.scenario)
    return {
        "overrides": c.overrides,
        "label": label(c.overrides),
        "layout": one_line(c.scenario),
        "gpus": c.gpus,
        **per_mtok(c.outcome["metrics"], price),
        "binding": slo.binding(c.outcome["metrics"]),
        "trial": c.outcome["overrides"],  # the length the stopping rule ran it to (empty: the study's own)
        "trial_precision": c.outcome["precision"],
        "trial_settled": c.outcome["settled"],  # its intervals settle its verdict (so it was lengthened no further)
        "metrics": c.outcome["metrics"],
    }


def _first(winners: list[Candidate]) -> Candidate | None:
    return winners[0] if winners else None


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
        out["trial"] = c.outcome["overrides"]
    return out


def mapping(raw: dict[str, Any], fixed: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A candidate's scenario as the raw mapping it is validated from: the study (without its sweep), the shared
    overrides, the candidate's own. Written out as YAML it is the same scenario (`simulator.deploy.bundle`)."""
    return loader.one_point(raw, {**fixed, **overrides})


def winner_mapping(raw: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    """The plan's winner as the scenario its last trial ran, the length the stopping rule chose included: run
    as-is, it reproduces the plan's figures."""
    w = res["winner"]
    return mapping(raw, res["question"]["fixed"], {**w["overrides"], **w["trial"]})


def _infer(done: list[Candidate], later: dict[str, list[Candidate]], judge: Judge) -> None:
    """Prune what a simulated failure implies: a TPOT miss, every candidate yet to run with the same shared part
    and decode pool whose prefill pool computes at least as many prompt tokens per second (prefill capacity does
    not speed decode steps)."""
    for f in done:
        if f.passed or f.reason is None or not f.reason.startswith(MISSES_TPOT) or f.decode_key is None:
            continue
        shared, parts = split(f.overrides)
        cap = judge.prefill_capacity(shared, parts["prefill"])
        for c in later.get(f.decode_key, []):
            if c.pruned or c.outcome is not None or c is f:
                continue
            c_shared, c_parts = split(c.overrides)
            if judge.prefill_capacity(c_shared, c_parts["prefill"]) >= cap:
                c.pruned = True
                c.reason = f"{MISSES_TPOT}: inferred from {label(f.overrides)} (more prefill does not speed decode)"


MAX_ROUNDS = 3  # searches in all: the first, and up to two with widened ranges
LISTED = 60  # rejected entries the JSON lists (all are counted): a wide search rejects thousands
BATCH = 4  # trials of a level decided on together (fixed, so the answer is the same for any worker count)


@dataclass
class _Round:
    cands: list[Candidate]
    simulated: list[Candidate]
    winners: list[Candidate]
    pruned_first: int


def _judge(cands: list[Candidate], judge: Judge, raw: dict[str, Any], base: dict[str, Any], source: str) -> None:
    """Prune what a pool's verdict, a duplicate or the whole scenario's validation rules out (see `judge`)."""
    kept: dict[str, Candidate] = {}
    for c in cands:
        shared, parts = split(c.overrides)
        why = judge.shared(shared)[2]
        if why is not None:
            c.pruned, c.reason = True, why
            continue
        roles = ("decode",) if judge.mode(shared) == "colocated" else ("prefill", "decode")
        for role in roles:
            v = judge.pool(shared, role, parts[role])
            if v.reason is not None:
                layout = {k: x for k, x in parts[role].items() if not k.endswith(".instances")}
                c.pruned, c.reason, c.fewest = True, v.reason, v.fewest
                c.group = (c.branch, key(shared), role, key(layout))
                break
        if c.pruned:
            continue
        same = key({"shared": shared, **{r: parts[r] for r in roles}})
        if same in kept:  # differs only in a pool this mode does not have
            c.pruned, c.reason = True, f"same as {label(kept[same].overrides)} (its other pools are not used here)"
            continue
        kept[same] = c
        if "prefill" in roles:
            c.decode_key = key({"shared": shared, "decode": parts["decode"]})
        try:
            c.scenario = loader.validate(mapping(raw, base, c.overrides), source)
        except InputError as e:
            c.pruned, c.reason = True, f"invalid: {e}"
            continue
        c.gpus = sum(p.gpus for p in c.scenario.deployment.pools().values())
        c.usd_per_hour = c.gpus * gpu_hour_usd(c.scenario)


def _candidates(space: Space) -> list[Candidate]:
    out: list[Candidate] = []
    space.candidates()  # refused by count first
    for b, branch in enumerate(space.branches):
        out += [Candidate(len(out) + i, o, branch=b) for i, o in enumerate(branch.combos())]
    return out


def _search(
    space: Space,
    judge: Judge,
    seen: dict[str, dict[str, Any]],
    run: Callable[[list[Candidate]], list[dict[str, Any]]],
    refine: Callable[[list[Candidate]], list[dict[str, Any]]],
    raw: dict[str, Any],
    base: dict[str, Any],
    source: str,
    objective: str,
    runners_up: int,
    slo: SLO,
    on_level: Callable[[int, int], None] | None,
) -> _Round:
    """One search over `space`; trials already run in an earlier round are reused from `seen`."""
    cands = _candidates(space)
    _judge(cands, judge, raw, base, source)
    pruned_first = sum(c.pruned for c in cands)

    def level_key(c: Candidate) -> float:
        return c.gpus if objective == "gpus" else c.usd_per_hour

    queue = sorted((c for c in cands if not c.pruned), key=lambda c: (level_key(c), c.index))
    levels = [list(g) for _, g in groupby(queue, key=level_key)]
    later: dict[str, list[Candidate]] = {}
    for c in queue:
        if c.decode_key is not None:
            later.setdefault(c.decode_key, []).append(c)
    simulated: list[Candidate] = []
    passed = 0
    for n, level in enumerate(levels):
        for i in range(0, len(level), BATCH):
            todo = [c for c in level[i : i + BATCH] if not c.pruned]
            fresh = [c for c in todo if key(c.overrides) not in seen]
            if on_level is not None and fresh:
                on_level(len(fresh), sum(len(lv) for lv in levels[n:]) - i)
            for c, out in zip(fresh, run(fresh), strict=True):
                seen[key(c.overrides)] = out
            for c in todo:
                c.outcome = seen[key(c.overrides)]
                c.reason = c.outcome["reason"]
                simulated.append(c)
            passed += sum(c.passed for c in todo)
            if passed >= 1 + runners_up:
                break
            _infer(todo, later, judge)
        if passed >= 1 + runners_up:
            break

    def rank(c: Candidate) -> tuple:
        e = _entry(c, slo)
        cost = e["cost_per_mtok_usd"] if e["cost_per_mtok_usd"] is not None else float("inf")
        ttft = e["metrics"]["ttft_ms"]["p95"] or 0.0
        return (c.gpus, cost, ttft, c.index) if objective == "gpus" else (cost, c.gpus, ttft, c.index)

    winners = sorted((c for c in simulated if c.passed), key=rank)
    while todo := [c for c in contenders(winners, objective) if not c.outcome.get("refined")]:  # type: ignore[union-attr]
        for c, out in zip(todo, refine(todo), strict=True):
            c.outcome = seen[key(c.overrides)] = {**out, "refined": True}
            c.reason = out["reason"]
        winners = sorted((c for c in simulated if c.passed), key=rank)
    return _Round(cands, simulated, winners, pruned_first)


def _cost_interval(c: Candidate) -> list[float] | None:
    m = c.outcome["metrics"]  # type: ignore[index]
    return (m.get("ci95") or {}).get("cost_per_mtok_usd")


def contenders(winners: list[Candidate], objective: str) -> list[Candidate]:
    """The winner and the candidates that pass whose rank against it its intervals leave in doubt: with as many
    GPUs (when GPUs rank first) and a cost per million tokens whose 95% interval meets the winner's (cost ranks
    next, then TTFT p95, which moves with the same run's noise). None but the winner: nothing can overtake it, and
    its verdict is settled, so no trial needs lengthening."""
    if len(winners) < 2:
        return []
    w, wc = winners[0], _cost_interval(winners[0])
    out = []
    for c in winners[1:]:
        if objective == "gpus" and c.gpus != w.gpus:
            continue
        cc = _cost_interval(c)
        if wc is None or cc is None or (cc[0] <= wc[1] and wc[0] <= cc[1]):
            out.append(c)
    return [w, *out] if out else []


def _widen(space: Space, r: _Round) -> tuple[Space | None, list[str], list[str]]:
    """(the space with the ranges the answer touches widened, or None; what was widened; what may not be)."""
    winner = r.winners[0] if r.winners else None
    widened: list[str] = []
    edges: list[str] = []
    for b, branch in enumerate(space.branches):
        if winner is not None and winner.branch != b:
            continue
        for path, values in branch.dims.items():
            counts = isinstance(values, range) and path.endswith(".instances")
            if winner is not None:
                v = winner.overrides.get(path)
                if not counts:
                    numeric = [x for x in values if isinstance(x, int | float) and not isinstance(x, bool)]
                    if len(numeric) > 1 and v == max(numeric):
                        edges.append(f"{path}: the winner has the largest value searched ({v}); larger were not")
                    continue
                lo, hi = values.start, values.stop - 1
                if v == hi and hi >= MAX_INSTANCES:
                    edges.append(f"{path}: the winner has {v}, the most the schema allows")
                new = range(
                    max(1, lo - (hi - lo + 1)) if v == lo and lo > 1 else lo,
                    (min(MAX_INSTANCES, 2 * hi) if v == hi else hi) + 1,
                )
                why = f"the winner has {v}, at the edge of {lo}..{hi}"
            else:
                if not counts or values.stop - 1 >= MAX_INSTANCES:
                    continue
                role = path.split(".")[1]
                mine = [c for c in r.cands if c.branch == b]
                curable = [c.fewest for c in mine if c.group and c.group[2] == role and c.fewest]
                if not curable and not any(c.outcome is not None for c in mine):
                    continue  # nothing more instances could cure
                hi = values.stop - 1
                top = min(MAX_INSTANCES, max(2 * hi, min(curable, default=0)))
                new = range(values.start, top + 1)
                why = "no candidate met the SLO"
            if new != values:
                trial = space.widen(b, path, new)
                if trial.count() > MAX_CANDIDATES:
                    edges.append(
                        f"{path}: {why}, but widening it to {new.start}..{new.stop - 1} would make "
                        f"{trial.count():,} candidates, more than {MAX_CANDIDATES:,}"
                    )
                    continue
                space = trial
                widened.append(f"{path} widened to {new.start}..{new.stop - 1} ({why})")
    return (space if widened else None), widened, edges


def _groups(cands: list[Candidate], judge: Judge) -> list[dict[str, Any]]:
    """Candidates pruned by one pool verdict, as one entry each: the pool layout, its instance counts, why."""
    found: dict[tuple[Any, ...], list[Candidate]] = {}
    for c in cands:
        if c.group is not None:
            found.setdefault(c.group, []).append(c)
    out = []
    for (_, _, role, _), members in found.items():
        first = members[0]
        counts = sorted({m.overrides.get(f"deployment.{role}.instances") for m in members} - {None})
        overrides = {k: v for k, v in first.overrides.items() if not k.endswith(f"{role}.instances")}
        entry: dict[str, Any] = {
            "overrides": {**overrides, f"deployment.{role}.instances": counts} if counts else overrides,
            "label": label(overrides) + (f" {role}.instances={_span(counts)}" if counts else ""),
            "pool": role,
            "layout": f"{role} {_layout_words(first, role, judge)}",
            "candidates": len(members),
            "gpus": None,
            "reason": max(members, key=lambda m: m.overrides.get(f"deployment.{role}.instances", 0)).reason,
            "pruned": True,
            "fewest_instances": first.fewest,
        }
        out.append(entry)
    return out


def _span(counts: list[int]) -> str:
    return (
        f"{counts[0]}..{counts[-1]}"
        if len(counts) > 2 and counts == list(range(counts[0], counts[-1] + 1))
        else ",".join(map(str, counts))
    )


def _hints(r: _Round, judge: Judge) -> list[str]:
    """With no winner: for each pool, the bound that fails and the instance count that would pass it; and the
    nearest simulated miss."""
    out = []
    for role in ("prefill", "decode"):
        pruned = [c for c in r.cands if c.group and c.group[2] == role]
        curable = [c for c in pruned if c.fewest]
        if curable:
            best = min(curable, key=lambda c: (c.fewest, c.index))
            searched = sorted({c.overrides.get(f"deployment.{role}.instances") for c in pruned} - {None})
            layout = _layout_words(best, role, judge)
            out.append(
                f"deployment.{role}.instances: {reason_kind(best.reason or '')} by the analytic bound "
                f"({best.reason}); it passes from {best.fewest} instances of {layout}; "
                + (f"searched {_span(searched)}" if searched else "not searched (search it to widen)")
            )
        elif pruned:
            out.append(
                f"deployment.{role}: every layout searched fails a bound no instance count passes, e.g. "
                f"{pruned[0].reason}"
            )
    misses = [c for c in r.simulated if not c.passed]
    if misses:
        nearest = min(misses, key=lambda c: (-(c.gpus), c.index))
        out.append(f"the largest simulated: {one_line(nearest.scenario)}: {nearest.reason}")  # type: ignore[arg-type]
    return out


def _layout_words(c: Candidate, role: str, judge: Judge) -> str:
    """The layout of the pool that pruned `c`, as the one-line layout says it: `TP8 (INT4, BF16 KV)`."""
    shared, parts = split(c.overrides)
    pool = judge.pool(shared, role, parts[role]).pool
    return f"{parallel(pool)} ({formats(pool)})" if pool is not None else role


def plan(
    raw: dict[str, Any],
    sc: Scenario,
    source: str,
    base_dir: Path | None,
    *,
    rate: float,
    slo: SLO,
    space: Space,
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
    judge = Judge(raw, base, source, base_dir, Bounds(slo))
    seen: dict[str, dict[str, Any]] = {}

    def run(todo: list[Candidate]) -> list[dict[str, Any]]:
        trials = [Trial(c.scenario, base_dir, slo, limits=limits) for c in todo]  # type: ignore[arg-type]
        return backend.map(run_trial, trials, on_done)

    def refine(todo: list[Candidate]) -> list[dict[str, Any]]:
        """The contenders' trials lengthened, from the runs they have, until their figures are within ±5%."""
        trials = [
            Trial(c.scenario, base_dir, slo, limits=limits, precise=True, resume=c.outcome)  # type: ignore[arg-type]
            for c in todo
        ]
        return backend.map(run_trial, trials)  # no new candidate: the progress count stays

    first = space
    widened: list[str] = []
    for n in range(MAX_ROUNDS):
        r = _search(space, judge, seen, run, refine, raw, base, source, objective, runners_up, slo, on_level)
        wider, more, edges = _widen(space, r)
        if wider is None or n == MAX_ROUNDS - 1:
            if wider is not None:
                edges += [
                    f"{w.split(' widened')[0]}: would widen again; stopped after {MAX_ROUNDS} searches" for w in more
                ]
            break
        widened += more
        space = wider
    winners = r.winners
    rejected = [c for c in r.cands if (c.pruned and c.group is None) or (c.outcome is not None and not c.passed)]
    listed = [_rejected(c) for c in rejected] + _groups(r.cands, judge)
    by_reason: Counter[str] = Counter()
    for e in listed:
        by_reason[reason_kind(e["reason"])] += e.get("candidates", 1)
    target = winners[0].gpus if winners else 0
    listed.sort(key=lambda e: (e["gpus"] is None, abs((e["gpus"] or 0) - target), e["pruned"]))
    simulated = r.simulated
    cands = r.cands
    return {
        "question": {
            "scenario": sc.name,
            "rate": rate,
            "rate_unit": unit(sc),
            "slo": slo.to_json(),
            "objective": objective,
            "space": first.to_json(),
            "fixed": base,  # the overrides every candidate shares: the rate and the SLO (`mapping`)
        },
        # the winner, and its scenario as `plan --out` writes it (the study with its overrides: each pool's GPU named)
        "winner": {**_entry(w, slo), "scenario": mapping(raw, base, w.overrides)} if (w := _first(winners)) else None,
        "runners_up": [_entry(c, slo) for c in winners[1 : 1 + runners_up]],
        "rejected": listed[:LISTED],  # nearest the winner first; a pool the bounds rule out is one entry
        "rejected_entries": len(listed),
        "rejected_by_reason": dict(by_reason.most_common()),
        "widened": widened,
        "edges": edges,
        "hints": [] if winners else _hints(r, judge),
        "searched": space.to_json(),
        "candidates": len(cands),
        "pruned": sum(c.pruned for c in cands),
        "pruned_before_simulating": r.pruned_first,
        "simulated": len(simulated),
        "simulations_run": len(seen),
        "stopped_early": sum(1 for c in simulated if c.outcome and c.outcome["stopped_early"]),
        "not_simulated": len(cands) - sum(c.pruned for c in cands) - len(simulated),
        "evaluated": [
            point(label(c.overrides), c.outcome["metrics"], meets=c.passed)  # type: ignore[index]
            for c in simulated
            if c.outcome["metrics"] and not c.outcome["stopped_early"]
        ],  # type: ignore[index]
        "clock": "modeled",
        "provenance": {**Profile.for_scenario(sc, base_dir).provenance(), "engine": sc.engine.name},
    }
