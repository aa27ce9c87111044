"""The band beside an answer: how far the model was from published runs like it, each with its source left out.

A case's held-out error is its leave-one-source-out error (`suite`): the error it had when the fitted parameters
had seen nothing of its page, post or thread — what the next deployment can expect, not the fit's own residual.
Cases are filed by kind of figure and cell (`cells`); an answer of a kind (throughput, TPOT, TTFT) reads:

* **its own cell's band** where `MIN_SOURCES` or more sources stand behind it: the |held-out error| at `LEVEL`
  (`width`: the conformal quantile, so a new error falls inside with probability ≥ `LEVEL` where the errors are
  exchangeable — the 90th percentile, not the median);
* else it is **outside the validated region**, and says so, naming what no published run measured: its band is
  the widest among its neighbours', a neighbour region being the cell with one axis left free (the same GPU,
  engine, class and regime in any weight format, …), or two where no one-axis region has `MIN_SOURCES` sources,
  and so on out to every case of the kind. The widest, so a thin cell never borrows a narrow band;
* **no band** where no case measures its kind (a plain line says so).

`band_coverage` says whether the bands hold: for every case, the band an answer in its cell would have printed had
its source not been published (the bands computed from the other sources' held-out errors: nested
leave-source-out), and whether its own held-out error falls inside; the share that does. (The other sources'
errors come from fits that saw this source — a second-order leak the nesting leaves.) `phaseplan validate
--write-bands` writes the held-out errors to `validation/bands.json` (a test checks it is the corpus's current
answer); `run`, `max-rate`, `plan` and the app read it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import combinations
from typing import Any

from simulator.config.specs import EngineSpec
from simulator.results.numbers import figure
from simulator.validation.case import REPO
from simulator.validation.cells import AXES, KIND_TEXT, Cell, Kind, fields_of, kind, of_answer

BANDS = REPO / "validation" / "bands.json"
LEVEL = 0.9  # the share of held-out errors a band holds
MIN_SOURCES = 3  # sources a region needs for a band of its own
RELAXED = [r for n in range(len(AXES) + 1) for r in combinations(AXES, n)]  # axes left free, fewest first


def width(errors: Sequence[float]) -> float:
    """The band of these |held-out errors| at `LEVEL`: the ⌈LEVEL·(n+1)⌉-th smallest (the largest where n is
    too few for that), the quantile that holds a new exchangeable error with probability ≥ LEVEL."""
    ordered = sorted(errors)
    return ordered[min(math.ceil(LEVEL * (len(ordered) + 1)), len(ordered)) - 1]


@dataclass(frozen=True)
class Band:
    """An answer's band: its width, the held-out errors and sources behind it, the axes its region leaves free
    (none: the answer's own cell), and how many sources the answer's own cell has."""

    width: float
    cases: int
    sources: int
    relaxed: tuple[str, ...]
    own_sources: int

    @property
    def inside(self) -> bool:
        """The answer is inside the validated region: its own cell has the sources."""
        return not self.relaxed


class Index:
    """Held-out errors filed for picking: per kind, per set of free axes, per value of the others."""

    def __init__(self, rows: Iterable[dict[str, Any]]) -> None:
        errors: dict[tuple[Any, ...], list[float]] = defaultdict(list)
        sources: dict[tuple[Any, ...], set[str]] = defaultdict(set)
        for r in rows:
            for relaxed in RELAXED:
                key = (r["kind"], relaxed, tuple(r[a] for a in AXES if a not in relaxed))
                errors[key].append(abs(r["loso_error"]))
                sources[key].add(r["source_id"])
        self.regions = {k: (width(e), len(e), len(sources[k])) for k, e in errors.items()}

    def pick(self, k: Kind, cell: Cell) -> Band | None:
        """The band of an answer of kind `k` in `cell`; None where no case is of that kind."""
        values = fields_of(cell)

        def region(relaxed: tuple[str, ...]) -> tuple[float, int, int] | None:
            return self.regions.get((k, relaxed, tuple(values[a] for a in AXES if a not in relaxed)))

        every = region(AXES)
        if every is None:
            return None
        own = region(())
        own_sources = own[2] if own else 0
        for n in range(len(AXES) + 1):
            found = [
                Band(g[0], g[1], g[2], relaxed, own_sources)
                for relaxed in RELAXED
                if len(relaxed) == n and (g := region(relaxed)) is not None and g[2] >= MIN_SOURCES
            ]
            if found:
                return max(found, key=lambda b: b.width)  # the first of the widest: deterministic
        return Band(every[0], every[1], every[2], AXES, own_sources)  # fewer than MIN_SOURCES measure the kind


def judged(rows: list[dict[str, Any]]) -> list[Band | None]:
    """Per row, the band an answer in its cell would print with its whole source unpublished (nested
    leave-source-out): the bands of the other sources' held-out errors."""
    out: list[Band | None] = [None] * len(rows)
    for s in dict.fromkeys(r["source_id"] for r in rows):
        others = Index(r for r in rows if r["source_id"] != s)
        for i, r in enumerate(rows):
            if r["source_id"] == s:
                out[i] = others.pick(r["kind"], Cell(*(r[a] for a in AXES)))
    return out


def band_coverage(rows: list[dict[str, Any]]) -> float:
    """The share of cases whose held-out error lies inside the band printed for them (`judged`); a case no band
    would be printed for counts as outside."""
    bands = judged(rows)
    inside = sum(b is not None and abs(r["loso_error"]) <= b.width for r, b in zip(rows, bands, strict=True))
    return inside / len(rows) if rows else 0.0


def from_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What `validation/bands.json` holds: the level, the sources a band needs, and every case's held-out error
    with its kind, cell and source (rounded to 4 decimals)."""
    errors = [
        {"id": r["id"], "source_id": r["source_id"], "kind": r["kind"], **{a: r[a] for a in AXES}}
        | {"loso_error": round(r["loso_error"], 4)}
        for r in sorted(rows, key=lambda r: r["id"])
    ]
    return {"level": LEVEL, "min_sources": MIN_SOURCES, "errors": errors}


@cache
def _committed() -> Index:
    doc = json.loads(BANDS.read_text()) if BANDS.is_file() else {"errors": []}
    return Index(doc["errors"])


def line(engine: EngineSpec, k: Kind, what: str, value: float, unit: str, cell: Cell) -> str:
    """The answer with its band, e.g. "TPOT p95 52.4 ms: validated model error ±12% on sglang-0.5 (90% of 41
    held-out runs of 5 sources …): 46.8–59.5", or outside the validated region with its neighbours' widest band,
    or no band where no case measures the kind. The range is what the published figure would be for an error
    anywhere in the band (error = predicted / published − 1). An engine fitted by `phaseplan calibrate` carries
    its own band: its fit's error on the operator's runs (leave-one-run-out where it had enough runs)."""
    head = f"{what} {figure(value)} {unit}"
    if engine.calibration is not None:
        c = engine.calibration
        e = _calibrated(engine, k)
        if e is None:
            return f"{head}: no error band: the runs {engine.name} was calibrated on state no {KIND_TEXT[k]}"
        how = "leave-one-run-out median" if e.leave_one_out else "fit's own residual (under 4 runs, nothing held out)"
        why = f"fitted to {c.runs} runs of {c.deployment}: their {how} over {e.cases} figures, worst {e.max:.0%}"
        return f"{head}: validated model error ±{e.median:.0%} on {engine.name} ({why}): {_range(value, e.median)}"
    b = _committed().pick(k, cell)
    if b is None:
        return f"{head}: no error band: no published run in the corpus measures {KIND_TEXT[k]}"
    behind = f"{LEVEL:.0%} of {b.cases} held-out runs from {b.sources} sources"
    if b.inside:
        return (
            f"{head}: validated model error ±{b.width:.0%} on {cell.engine} ({behind} of "
            f"{cell.words(('engine',))}, each with its source left out; docs/validation.md): {_range(value, b.width)}"
        )
    own = "no published run" if b.own_sources == 0 else f"only {b.own_sources} published source(s)"
    verb = "measures" if b.own_sources == 0 else "measure"
    return (
        f"{head}: outside the validated region: {own} of {cell.words()} {verb} {KIND_TEXT[k]} (a band needs "
        f"{MIN_SOURCES} sources); its neighbours' widest band: model error ±{b.width:.0%} ({behind} of "
        f"{cell.words(b.relaxed)}): {_range(value, b.width)}"
    )


def _calibrated(engine: EngineSpec, k: Kind) -> Any:
    """A fitted engine's own error of kind `k` (None where its runs state none)."""
    e = engine.calibration.error if engine.calibration is not None else {}
    return e.get(k) or (e.get("latency") if k != "throughput" else None)  # "latency": older files


def margin(engine: EngineSpec, k: Kind, cell: Cell) -> str:
    """The band of `line` in a few words, short enough to stand whole beside a number on the page: `±16% model
    error` inside the validated region, `±16% error (extrapolated)` outside it (its neighbours' band), `±16% error
    (fitted engine)` for a calibrated engine; `no error band` where none."""
    if engine.calibration is not None:
        e = _calibrated(engine, k)
        return "no error band" if e is None else f"±{e.median:.0%} error (fitted engine)"
    b = _committed().pick(k, cell)
    if b is None:
        return "no error band"
    return f"±{b.width:.0%} model error" if b.inside else f"±{b.width:.0%} error (extrapolated)"


def headline_margins(result: dict[str, Any]) -> dict[str, str]:
    """`margin` of a Result's headline throughput, TPOT p95 and TTFT p95, keyed by their metrics' names."""
    sc, m = result["scenario"], result["metrics"]
    engine, cell = EngineSpec.model_validate(sc["engine"]), of_answer(sc, m)
    return {key: margin(engine, kind(key), cell) for key in ("output_tok_s", "tpot_ms", "ttft_ms")}


def _range(value: float, w: float) -> str:
    """The published figure for an error within ±w of the prediction `value`."""
    low = figure(value / (1 + w))
    return f"{low}–{figure(value / (1 - w))}" if w < 1 else f"{low} or more"


def headline(result: dict[str, Any], what: str, tok_s: float) -> list[str]:
    """The bands of a Result's headline throughput (`tok_s`, named `what`), TPOT p95 and TTFT p95, in the run's
    cell: what `phaseplan run` prints under its report and the app's What-if beside its numbers."""
    sc, m = result["scenario"], result["metrics"]
    engine, cell = EngineSpec.model_validate(sc["engine"]), of_answer(sc, m)
    out = [line(engine, kind("output_tok_s"), what, tok_s, "tok/s", cell)]
    for name, key in (("TPOT", "tpot_ms"), ("TTFT", "ttft_ms")):
        if m[key]["p95"]:
            out.append(line(engine, kind(key), f"{name} p95", m[key]["p95"], "ms", cell))
    return out


def max_rate_line(scenario: dict[str, Any], engine: EngineSpec, res: dict[str, Any]) -> str:
    """The band of a max-rate answer (`simulator.planning.maxrate`) on its scenario (its JSON dump): a
    throughput, in the cell of the run at that rate."""
    cell = of_answer(scenario, res["metrics"])
    return line(engine, "throughput", "max rate", res["max_rate_rps"], res["rate_unit"], cell)


def _winner(raw: dict[str, Any], res: dict[str, Any]) -> tuple[EngineSpec, Cell]:
    """A plan's winner's engine and cell: its own (its GPU, weights and batch may not be the study's)."""
    from simulator.config import loader
    from simulator.planning.search import mapping

    w = res["winner"]
    won = loader.validate(mapping(raw, res["question"]["fixed"], w["overrides"]), "the plan's winner")
    return won.engine, of_answer(won.model_dump(mode="json"), w["metrics"])


def plan_line(raw: dict[str, Any], res: dict[str, Any]) -> str | None:
    """The band of the limit a plan's winner binds on (its latency with the least headroom: TTFT or TPOT, each
    its own kind), in the winner's own cell; None without a winner or figures."""
    from simulator.planning.slo import SLO

    w = res.get("winner")
    tight = SLO(**res["question"]["slo"]).tightest(w["metrics"]) if w else None
    if tight is None:
        return None
    _, name, value, _ = tight
    engine, cell = _winner(raw, res)
    return line(engine, kind(f"{name.lower()}_ms"), f"the winner's {name} p95", value, "ms", cell)


def plan_margins(raw: dict[str, Any], res: dict[str, Any]) -> dict[str, str]:
    """`headline_margins` of a plan's winner, in its own cell; {} without a winner."""
    if not res.get("winner"):
        return {}
    engine, cell = _winner(raw, res)
    return {key: margin(engine, kind(key), cell) for key in ("output_tok_s", "tpot_ms", "ttft_ms")}


SWEEP_FIGURES = (("output_tok_s", "throughput"), ("tpot_ms", "TPOT p95"), ("ttft_ms", "TTFT p95"))


def _points_text(points: list[dict[str, Any]]) -> str:
    """Sweep points in few words: those alike but for the last swept value share one label, its values joined
    (`weights=fp8, concurrency=8/16/32`)."""
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for p in points:
        items = [f"{k.split('.')[-1]}={v}" for k, v in p.items()]
        groups[tuple(items[:-1])].append(str(list(p.values())[-1]))
    last = list(points[0])[-1].split(".")[-1]
    return " and ".join(", ".join([*head, f"{last}={'/'.join(vs)}"]) for head, vs in groups.items())


def sweep_lines(results: list[dict[str, Any]]) -> list[str]:
    """What `phaseplan sweep` prints under its table: each headline figure's band (`headline_margins`) across the
    points that ran, one line a figure — the band alone where every point shares it, else each band with the
    points it holds for. A band is each point's own error; a difference between points is not validated by it."""
    ran = [r for r in results if "metrics" in r]
    if not ran:
        return []
    margins = [r.get("bands") or headline_margins(r) for r in ran]
    out = []
    for key, name in SWEEP_FIGURES:
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r, m in zip(ran, margins, strict=True):
            by[m[key]].append(r["point"])
        if len(by) == 1:
            out.append(f"{name}: {next(iter(by))} at every point")
        else:
            out.append(f"{name}: " + "; ".join(f"{band} at {_points_text(pts)}" for band, pts in by.items()))
    return out
