"""Whether the pricing decides a study: the decision it turns on, priced by every other bundled way to price it.

A study's answer is priced by one profile (the roofline, or a kernel profile of its GPU) on one engine preset. The
other bundled profiles of the same GPU (`profiles/<gpu>-*.json`) and the other engine presets price the same runs
differently, and where they reverse the decision — B better than A on a headline figure one way, worse the other
(`results.compare.reversals`, the rule the app's Compare view applies) — a person must hear it next to the answer:

* `sweep`: the study's first swept field that is not its load (FP8 vs BF16 KV, INT4 vs FP8 weights, ...), its
  first two values, at the study's `focus` point (else the last value of every other swept field, its heaviest
  load), run again under each other pricing;
* `plan`: the winner against the first runner-up at the planned rate, each on the trial it was judged on, under
  each other pricing: does the winner still meet the SLO, and is it still ahead.

Either counts only beyond the runs' noise, the 95% intervals every Result carries: a figure reverses where the two
intervals do not meet (`results.compare.apart`), a miss where its interval settles it (`stopping.settled`); a
0.02% difference in cost is not a decision the pricing makes.

Each is one line; the JSON carries the figures behind it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config import presets
from simulator.config.scenario import Scenario
from simulator.config.sweep import lookup
from simulator.errors import InputError
from simulator.planning import stopping
from simulator.planning.slo import SLO
from simulator.results.compare import Delta, apart, deltas, interval, reversals

BUNDLED = Path(__file__).resolve().parents[2] / "profiles"
ROOFLINE = "roofline"
LOAD = ("traffic.concurrency", "traffic.rate", "traffic.trace_speedup")


def bundled_profiles(hardware: str) -> list[Path]:
    """The bundled kernel profiles of a GPU preset: the files named for it (`profiles/h200-*.json`), so no choice
    prices one GPU with another's kernels."""
    return sorted(BUNDLED.glob(f"{hardware}-*.json"))


@dataclass(frozen=True)
class Alternative:
    """Another way to price a study: the override that makes it, how a notice names it and the study's own, and
    a short column name."""

    override: dict[str, str]
    label: str
    instead_of: str
    column: str


def profile_label(value: str) -> str:
    return "roofline: modeled from the hardware preset" if value == ROOFLINE else f"{Path(value).name}: kernel profile"


def alternatives(hardware: str, profile: str, engine: str, base_dir: Path) -> list[Alternative]:
    """Every other profile of the GPU (the roofline and its bundled profiles, as `profile` values relative to
    `base_dir`) on the same engine, and every other engine preset on the same profile."""
    values = [ROOFLINE] + [Path(os.path.relpath(p, base_dir)).as_posix() for p in bundled_profiles(hardware)]
    own = profile_label(profile)
    out = [
        Alternative({"profile": v}, profile_label(v), own, v.rsplit("/", 1)[-1])
        for v in values
        if not same_profile(v, profile, base_dir)
    ]
    return out + [
        Alternative({"engine": e}, f"the engine {e}", f"the engine {engine}", e)
        for e in presets.names("engines")
        if e != engine
    ]


def same_profile(a: str, b: str, base_dir: Path) -> bool:
    """Whether two `profile` values (relative to `base_dir`) name the same pricing."""
    if ROOFLINE in (a, b):
        return a == b
    return (base_dir / a).resolve() == (base_dir / b).resolve()


def own_pricing(sc: Scenario) -> str:
    """How a study is priced, in a few words: `roofline on the engine sglang-0.5.10`."""
    return f"{_short(profile_label(sc.profile))} on the engine {sc.engine.name}"


def of(sc: Scenario, base_dir: Path) -> list[Alternative]:
    return alternatives(sc.hardware.name, sc.profile, sc.engine.name, base_dir)


def _fmt(v: float, unit: str) -> str:
    if unit == "%":
        return f"{v:.1%}"
    if unit.startswith("$"):
        return f"${v:,.2f}"
    return f"{v:,.0f} {unit}" if abs(v) >= 100 else f"{v:,.1f} {unit}"


def _change(d: Delta) -> str:
    """B's change over A with both figures: `-63% (417 vs 1,114 tok/s)`."""
    assert d.a is not None and d.b is not None
    rel = f"{d.ratio:+.0%}" if d.ratio is not None else f"{d.change * 100:+.1f} points"
    return f"{rel} ({_fmt(d.b, d.unit)} vs {_fmt(d.a, d.unit)})"


Runner = Callable[[list[tuple[Scenario, Path | None]]], list[dict[str, Any]]]


def sweep_decision(sc: Scenario, raw: dict[str, Any], source: str) -> tuple[str, list[Any], dict[str, Any]] | None:
    """(the swept field the study decides, its first two values, the other fields' values the decision is read
    at), or None when every swept field is a load."""
    fields = [p for p in sc.sweep if p not in LOAD and len(sc.sweep[p]) >= 2]
    if not fields:
        return None
    axis = fields[0]
    at = {p: (sc.focus[p] if p in sc.focus else v[-1]) for p, v in sc.sweep.items() if p != axis}
    return axis, list(sc.sweep[axis][:2]), at


def sweep_reversals(
    sc: Scenario, raw: dict[str, Any], source: str, base_dir: Path, results: list[dict[str, Any]], run: Runner
) -> dict[str, Any] | None:
    """The sweep's decision priced every other way: `{"axis", "values", "at", "priced", "reversed": [{"pricing",
    "instead_of", "figures": [[label, this pricing's change, the other's]]}]}`, or None when the sweep decides
    nothing or its two points did not run."""
    from simulator.config.sweep import scenario_at

    found = sweep_decision(sc, raw, source)
    if found is None:
        return None
    axis, (a, b), at = found
    pair = [next((r for r in results if r["point"] == {**at, axis: v} and "metrics" in r), None) for v in (a, b)]
    if pair[0] is None or pair[1] is None:
        return None
    mine = deltas(pair[0], pair[1])
    others, jobs = [], []
    for alt in of(sc, base_dir):
        try:
            jobs += [(scenario_at(raw, {**at, axis: v, **alt.override}, source), base_dir) for v in (a, b)]
        except InputError:
            continue  # a pricing this point cannot take (a profile of another GPU): not an alternative here
        others.append(alt)
    outs = run(jobs)
    flipped = []
    for i, alt in enumerate(others):
        x, y = outs[2 * i], outs[2 * i + 1]
        if "metrics" not in x or "metrics" not in y:
            continue
        flips = reversals(mine, deltas(x, y))
        if flips:
            figures = [[d.label, _change(d), _change(o)] for d, o in flips]
            flipped.append({"pricing": alt.label, "instead_of": alt.instead_of, "figures": figures})
    own, priced = own_pricing(sc), [o.label for o in others]
    return {"axis": axis, "values": [a, b], "at": at, "own": own, "priced": priced, "reversed": flipped}


def sweep_line(rev: dict[str, Any] | None) -> str | None:
    """One line where the pricing decides the sweep's comparison; None where every pricing agrees: `the pricing
    decides this study: kv_cache=fp8_e4m3 vs bf16 at concurrency=64 priced by roofline (this study's): output
    throughput +19%, cost -16%; the other way round priced by h200-sglang.json: output throughput -59% (519 vs
    1,259 tok/s), cost +143% ($44.94 vs $18.53)`."""
    if not rev or not rev["reversed"]:
        return None
    a, b = rev["values"]
    where = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in rev["at"].items())
    what = f"{rev['axis'].split('.')[-1]}={b} vs {a}" + (f" at {where}" if where else "")
    mine = {label: own.split(" (")[0] for r in rev["reversed"] for label, own, _ in r["figures"]}
    others = "; ".join(
        f"{_short(r['pricing'])}: " + ", ".join(f"{label} {theirs}" for label, _, theirs in r["figures"])
        for r in rev["reversed"]
    )
    changes = ", ".join(f"{label} {v}" for label, v in mine.items())
    return (
        f"the pricing decides this study: {what} priced by {rev['own']} (the study's): {changes}; "
        f"the other way round priced by {others}"
    )


def _short(label: str) -> str:
    """A pricing's label without its explanation: `h200-sglang.json`, `roofline`, `the engine vllm-0.x`."""
    return label.split(":")[0]


def plan_reversals(
    res: dict[str, Any],
    raw: dict[str, Any],
    source: str,
    base_dir: Path,
    sc: Scenario,
    run: Callable[[list[Scenario]], list[dict[str, Any]]],
) -> dict[str, Any] | None:
    """The plan's winner and first runner-up (each on the trial it was judged on) under every other pricing:
    `{"priced", "reversed": [{"pricing", "why"}]}` where the winner misses the SLO or falls behind the runner-up
    by the plan's own ranking (GPUs or cost first), beyond the runs' noise; None without a winner."""
    from simulator.config import loader
    from simulator.planning.search import mapping

    w = res["winner"]
    if w is None:
        return None
    entries = [w, *res["runners_up"][:1]]
    fixed, objective = res["question"]["fixed"], res["question"]["objective"]
    others, jobs = [], []
    for alt in of(sc, base_dir):
        try:
            more = [
                loader.validate(mapping(raw, fixed, {**e["overrides"], **e["trial"], **alt.override}), source)
                for e in entries
            ]
        except InputError:
            continue
        others.append(alt)
        jobs += more
    outs = run(jobs)
    flipped = []
    n = len(entries)
    for i, alt in enumerate(others):
        got = outs[n * i : n * (i + 1)]
        why = _plan_flip(entries, got, objective, SLO(**res["question"]["slo"]))
        if why:
            flipped.append({"pricing": alt.label, "instead_of": alt.instead_of, "why": why})
    return {"own": own_pricing(sc), "priced": [o.label for o in others], "reversed": flipped}


def _ahead(a: dict[str, Any], ma: dict[str, Any], b: dict[str, Any], mb: dict[str, Any], objective: str) -> bool:
    """Whether candidate `a` (metrics `ma`) ranks ahead of `b` by the plan's ranking (`search.plan`: GPUs, cost,
    TTFT p95, or cost first) beyond the runs' noise: on the first figure that differs, their 95% intervals do not
    meet (`results.compare.apart`). A difference inside the noise reverses nothing."""
    order = ["gpus", "cost_per_mtok_usd", "ttft_ms.p95"]
    if objective != "gpus":
        order[:2] = order[1::-1]
    for path in order:
        if path == "gpus":
            if a["gpus"] != b["gpus"]:
                return a["gpus"] < b["gpus"]
            continue
        x, y = lookup({"metrics": ma}, f"metrics.{path}"), lookup({"metrics": mb}, f"metrics.{path}")
        if x == y:
            continue
        ia, ib = interval({"metrics": ma}, f"metrics.{path}"), interval({"metrics": mb}, f"metrics.{path}")
        return x is not None and y is not None and x < y and apart(ia, ib)
    return False


def _plan_flip(
    entries: list[dict[str, Any]], outs: list[dict[str, Any]], objective: str, slo: SLO | None = None
) -> str | None:
    """Why another pricing reverses the plan's answer, or None: the winner misses the SLO where its intervals
    settle the miss (`stopping.settled`), or the runner-up ranks ahead of it beyond the runs' noise."""
    win, got = entries[0], outs[0]
    if not got["meets"]:
        clear = slo is None or got["metrics"] is None or stopping.settled(got, slo)
        return f"the winner {got['reason']}" if clear else None
    if len(entries) < 2 or not outs[1]["meets"]:
        return None
    if _ahead(entries[1], outs[1]["metrics"], win, got["metrics"], objective):
        a, b = got["metrics"]["cost_per_mtok_usd"], outs[1]["metrics"]["cost_per_mtok_usd"]
        return f"the runner-up ({entries[1]['layout']}) ranks ahead of the winner (${b:,.3f} vs ${a:,.3f} per M tokens)"
    return None


def plan_line(rev: dict[str, Any] | None) -> str | None:
    """One line where another pricing reverses the plan's answer; None where every pricing agrees."""
    if not rev or not rev["reversed"]:
        return None
    parts = "; ".join(f"priced by {_short(r['pricing'])}, {r['why']}" for r in rev["reversed"])
    return f"the pricing decides this plan (its answer is priced by {rev['own']}): {parts}"
