"""An engine preset fitted to an operator's own benchmark runs (`phaseplan calibrate`).

Each run becomes the scenario that reproduces it: the deployment the operator describes, driven as the run was
(`bench_traffic`), simulated end to end and read as the benchmark reads its requests (`validation.measure.served`).
Its figures — output throughput, TPOT and TTFT (median where stated, else mean) — are the targets of the same
linearised fit the validation suite uses (`validation.fit`), over the same few physical engine terms, starting at
the chosen preset and regularised toward it (`PRIOR`): runs that do not show a term leave it at the preset's
value, and a few runs move it only as far as their errors pay for. Never a per-run factor.

A term no run's figure moves (the CPU work of a step the GPU step hides, a two-batch-overlap share without TBO)
is left out of the fit and reported as not informed. With four runs or more each run's leave-one-out error (its
figures predicted by the terms fitted without it, simulated at them) is the error band the fitted engine
carries; with fewer, the fit's own residual, said as such.

A fit must not make the engine worse: one that ends a term on a bound of its range, or whose runs are predicted
worse by the terms fitted without them than by the base preset, carries its `objections`, and `phaseplan
calibrate` writes it only with `--force`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator import budget
from simulator.calibration.bench_run import BenchRun
from simulator.calibration.bench_traffic import MAX_REQUESTS, traffic_of
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate
from simulator.errors import InputError
from simulator.validation import fit, measure
from simulator.validation.cells import KIND_TEXT, KINDS, Kind, kind

MAX_RUNS = 64  # runs one calibration fits at most: each is simulated (1 + terms) times per fit iteration
PRIOR = 0.2  # a term's whole range costs as much as one figure 20% off in log (fit.fit's prior)
LITTLE_SLACK = 1.1  # a median TPOT is not the mean Little's law takes: a tenth's margin before one is refused
MIN_LOO_RUNS = 4  # fewer runs: the band is the fit's own residual, not a leave-one-out error
BOUND_EDGE = 1e-6  # a fitted term within this share of its range from a bound ended on it
# a run is simulated (1 + terms) times per fit iteration: a tighter bound on its work than one `run`'s
LIMITS = budget.Limits(max_requests=20_000, max_output_tokens=5e7)


@dataclass(frozen=True)
class Term:
    """An engine term calibration may move: bounds and the finite-difference step of the linearised fit."""

    name: str
    low: float
    high: float
    step: float
    why: str


TERMS = (
    Term("host_step_us", 0.0, 20000.0, 100.0, "the engine's CPU work per step, where the GPU step does not hide it"),
    Term("dp_sync_us", 0.0, 20000.0, 250.0, "CPU work more per step under DP attention"),
    Term("tbo_hidden_share", 0.0, 1.0, 0.02, "the share of the all-to-alls two-batch overlap hides"),
    Term("fp8_kv_read_factor", 0.5, 4.0, 0.05, "the cost of reading an FP8 KV cache in decode attention"),
    Term("decode_graph_floor_us", 0.5, 30.0, 0.5, "the least a decode kernel costs under CUDA graphs"),
    Term("fp8_gemm_mma_factor", 0.5, 4.0, 0.05, "the tensor-core time of the engine's block-FP8 GEMMs"),
)


@dataclass(frozen=True)
class Figure:
    """One measured figure of one run: what the fit matches."""

    run: int  # index into the runs
    metric: str  # a `measure.served` metric
    label: str
    measured: float
    before: float = math.nan  # predicted on the base preset
    after: float = math.nan  # predicted on the fitted engine
    loo: float = math.nan  # predicted by the terms fitted without this run (simulated at them: fit.left_out)

    @property
    def kind(self) -> Kind:
        return kind(self.metric)


@dataclass(frozen=True)
class Calibrated:
    """The fit's outcome: the engine document to write, and what the report shows."""

    engine: dict[str, Any]
    figures: list[Figure]
    terms: dict[str, dict[str, Any]]  # name -> before, after, informed
    notes: dict[int, tuple[str, ...]]  # run index -> what its scenario approximates
    leave_one_out: bool
    objections: tuple[str, ...] = ()  # why it should not be written (`objections`)


def figures_of(i: int, run: BenchRun, running: int | None = None) -> tuple[list[Figure], tuple[str, ...]]:
    """The figures a run states that the model predicts: throughput, and TPOT and TTFT (median, else mean); and
    why any was left out.

    A TPOT is a time per token while a request decodes, so output tok/s × TPOT is the number decoding at once
    (Little's law). Where that exceeds `running`, the most the deployment runs, the measured TPOT also counts
    time the requests spent out of the batch (queued behind a cap, retracted); the model's TPOT does not, so
    fitting it would move the engine's terms to explain a queue. It is kept out, and the note says so."""
    out = [Figure(i, "output_tok_s", "output tok/s", run.output_throughput)]
    for name, lat in (("tpot", run.tpot), ("ttft", run.ttft)):
        if lat.median is not None:
            out.append(Figure(i, f"median_{name}_ms", f"median {name.upper()} ms", lat.median))
        elif lat.mean is not None:
            out.append(Figure(i, f"mean_{name}_ms", f"mean {name.upper()} ms", lat.mean))
    kept, notes = [], []
    for f in out:
        decoding = run.output_throughput * f.measured / 1000
        if "tpot" in f.metric and running is not None and decoding > LITTLE_SLACK * running:
            notes.append(
                f"{f.label} {f.measured:.4g} × output {run.output_throughput:,.4g} tok/s = {decoding:,.0f} requests "
                f"decoding at once, more than the {running:,} the deployment runs: the TPOT counts time out of "
                "the batch, which the model's does not; kept out of the fit"
            )
        elif f.measured > 0:
            kept.append(f)
    return kept, tuple(notes)


def running_cap(sc: Scenario) -> int | None:
    """The most requests the deployment's decoding pools run at once (None: no stated cap)."""
    pools = sc.deployment.pools()
    decoding = [p for name, p in pools.items() if name == "decode"]
    if not decoding or any(p.max_running is None for p in decoding):
        return None
    return sum(p.instances * p.max_running for p in decoding)


class _Runs:
    """Each run's scenario simulated once per engine-term point (a fit asks for the same point per figure)."""

    def __init__(self, raws: list[dict[str, Any]], base_dir: Path, metrics: dict[int, set[str]]) -> None:
        self.raws, self.base_dir, self.metrics = raws, base_dir, metrics
        self.cache: dict[tuple[int, tuple[tuple[str, float], ...]], dict[str, float]] = {}

    def figure(self, run: int, metric: str, overrides: dict[str, Any]) -> float:
        key = (run, tuple(sorted(overrides.items())))
        if key not in self.cache:
            sc = loader.validate(loader.apply_overrides(self.raws[run], overrides), f"run {run + 1}")
            done = [r for r in simulate(sc, self.base_dir)[1].requests if r.status == "completed"]
            self.cache[key] = {m: measure.served(done, m) for m in self.metrics[run]}
        return self.cache[key][metric]


def run_scenarios(
    raw: dict[str, Any], source: str, base_dir: Path, runs: list[BenchRun], max_requests: int = MAX_REQUESTS
) -> tuple[list[dict[str, Any]], dict[int, tuple[str, ...]], list[float]]:
    """The deployment's raw mapping driven as each run was (each checked to validate), its notes and the requests
    one simulation of it takes; an impossible one names the run."""
    out, notes, requests = [], {}, []
    for i, run in enumerate(runs):
        t = traffic_of(run, max_requests)
        one = loader.one_point(raw, {"traffic": t.traffic})
        try:
            sc = loader.validate(one, source)
        except InputError as e:
            raise InputError(f"{run.where}: its traffic does not fit the scenario: {e}") from None
        try:  # the work a simulation of it implies, under the run limits (it is simulated dozens of times)
            requests.append(budget.check(sc, base_dir, LIMITS).requests)
        except InputError as e:
            why = str(e).split("; pass --no-limits")[0]
            raise InputError(f"{run.where}: {why} (a smaller --max-requests simulates less of it)") from None
        out.append(one)
        notes[i] = t.notes
    return out, notes, requests


def simulations(terms: int) -> int:
    """How many times a calibration simulates each run at most: on the base preset, one step of each term (does
    it move anything?), each point the fit evaluates, and on the fitted engine."""
    return 1 + terms + fit.evaluations(terms) + 1


def check_work(requests: list[float], terms: int) -> None:
    """The requests of every simulation the fit will make, bounded as a sweep's are, before the first one runs
    (each run alone is within LIMITS; issue 37's 64 of them, each simulated dozens of times, ran for minutes)."""
    each = simulations(terms)
    total = sum(requests) * each
    if total > LIMITS.max_sweep_requests:
        raise InputError(
            f"calibrate: about {total:,.0f} requests over the fit's simulations ({len(requests)} runs of up to "
            f"{max(requests):,.0f} requests, each simulated up to {each} times for {terms} terms), over the limit "
            f"of {LIMITS.max_sweep_requests:,.0f}; fewer runs, fewer --term or a smaller --max-requests fit in it"
        )


def calibrate(
    sc: Scenario,
    raw: dict[str, Any],
    source: str,
    base_dir: Path,
    runs: list[BenchRun],
    max_requests: int = MAX_REQUESTS,
    terms: tuple[str, ...] | None = None,
) -> Calibrated:
    """Fit the scenario's engine terms to the runs (the scenario names the engine the fit starts from)."""
    if not runs:
        raise InputError("calibrate: no benchmark runs to fit")
    if len(runs) > MAX_RUNS:
        raise InputError(f"calibrate: {len(runs)} runs; one calibration fits at most {MAX_RUNS}")
    raws, notes, requests = run_scenarios(raw, source, base_dir, runs, max_requests)
    params = _parameters(sc, terms)
    check_work(requests, len(params))
    running = running_cap(sc)
    figures = []
    for i, run in enumerate(runs):
        kept, why = figures_of(i, run, running)
        figures += kept
        notes[i] = notes[i] + why
    sims = _Runs(raws, base_dir, {i: {f.metric for f in figures if f.run == i} for i in range(len(runs))})
    if not figures:
        raise InputError("calibrate: the runs state no figure the model predicts (throughput, TPOT, TTFT)")
    start = {p.path: p.start for p in params}
    before = [sims.figure(f.run, f.metric, start) for f in figures]
    _check_predicted(runs, figures, before)
    informed = [p for p in params if _moves(sims, figures, p, before)]
    targets = [fit.Target(sc.engine.name, f.measured, _target(sims, f)) for f in figures]
    fitted = fit.fit(targets, informed, PRIOR, [f.run for f in figures])
    held = fit.left_out(targets, informed, fitted, [f.run for f in figures])
    values = {**start, **{k: float(f"{v:.6g}") for k, v in fitted.values.items()}}
    after = [sims.figure(f.run, f.metric, values) for f in figures]
    out = [
        Figure(f.run, f.metric, f.label, f.measured, b, a, loo)
        for f, b, a, loo in zip(figures, before, after, held, strict=True)
    ]
    term_table = {
        p.path.removeprefix("engine."): {"before": p.start, "after": values[p.path], "informed": p in informed}
        for p in params
    }
    loo = len(runs) >= MIN_LOO_RUNS and bool(informed)
    worse = objections(sc.engine.name, informed, values, out, len(runs))
    return Calibrated(_engine_doc(sc, term_table), out, term_table, notes, loo, worse)


def _rms_log(figures: list[Figure], which: str) -> float:
    """The root-mean-square log error of the figures' `which` prediction, as a share (exp(rms) − 1): the
    quantity the fit minimises on the runs it sees, taken here on predictions it made without them."""
    logs = [math.log(getattr(f, which) / f.measured) ** 2 for f in figures]
    return math.exp(math.sqrt(statistics.fmean(logs))) - 1 if logs else 0.0


def objections(
    base: str, informed: list[fit.Parameter], values: dict[str, float], figures: list[Figure], runs: int
) -> tuple[str, ...]:
    """Why the fitted engine should not be written: a term that ended on a bound of its range (the runs push it
    past what it can physically be, so it absorbs something the model does not express), or runs predicted no
    better by the terms fitted without them than by the base preset: per kind of figure (a band is per kind, and
    misses no term moves, as TTFT's, would hide a TPOT made worse), in the root-mean-square log error the fit
    minimises (one run made worse counts, where a median would hide it). With one run nothing is held out, so
    nothing shows the fit carries to another."""
    out = []
    for p in informed:
        v, edge = values[p.path], BOUND_EDGE * (p.high - p.low)
        if v <= p.low + edge or v >= p.high - edge:
            out.append(
                f"{p.path.removeprefix('engine.')} ended on a bound of its range ({p.start:g} → {v:g}, range "
                f"{p.low:g}–{p.high:g}): the runs push it past what it can be, so it absorbs something else"
            )
    if not informed:
        return tuple(out)
    if runs < 2:
        return (*out, "one run: nothing is held out, so nothing shows the fit carries to another run")
    for k in KINDS:
        mine = [f for f in figures if f.kind == k]
        before, held = _rms_log(mine, "before"), _rms_log(mine, "loo")
        if mine and held > before:
            out.append(
                f"its {KIND_TEXT[k]} figures, each predicted by the terms fitted without its run, are off by "
                f"{held:.1%} (root mean square), more than the {before:.1%} of {base} itself: the fit does not "
                "carry to a run it has not seen"
            )
    return tuple(out)


def _parameters(sc: Scenario, terms: tuple[str, ...] | None) -> list[fit.Parameter]:
    known = {t.name: t for t in TERMS}
    if terms is not None:
        unknown = [t for t in terms if t not in known]
        if unknown:
            raise InputError(f"--term {unknown[0]}: not a calibrated engine term (one of {', '.join(known)})")
    params = []
    for t in TERMS:
        value = getattr(sc.engine, t.name)
        if (terms is not None and t.name not in terms) or value is None:
            continue  # a term the engine leaves to the roofline (None) has no preset value to start from
        start = min(max(float(value), t.low), t.high)
        params.append(
            fit.Parameter(
                path=f"engine.{t.name}",
                engines=[sc.engine.name],
                start=start,
                low=t.low,
                high=t.high,
                step=t.step,
                why=t.why,
                informs=[],
            )
        )
    return params


def _target(sims: _Runs, f: Figure) -> Callable[[dict[str, Any]], float]:
    return lambda overrides: sims.figure(f.run, f.metric, overrides)


def _moves(sims: _Runs, figures: list[Figure], p: fit.Parameter, before: list[float]) -> bool:
    """Does one step of the term move any figure? (The simulation is exact: an unseen term changes nothing.)"""
    h = p.step if p.start + p.step <= p.high else -p.step
    point = {p.path: p.start + h}
    return any(sims.figure(f.run, f.metric, point) != b for f, b in zip(figures, before, strict=True))


def _check_predicted(runs: list[BenchRun], figures: list[Figure], predicted: list[float]) -> None:
    for f, v in zip(figures, predicted, strict=True):
        if not (math.isfinite(v) and v > 0):
            raise InputError(
                f"{runs[f.run].where}: the model predicts no {f.label} for this run (no request completed?)"
            )


def _engine_doc(sc: Scenario, terms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The base engine's document with the fitted terms set (the calibration block is added by the caller)."""
    doc = sc.engine.model_dump(mode="json", exclude_none=False)
    doc.pop("calibration", None)
    sources = dict(doc.get("sources") or {})
    for name, t in terms.items():
        doc[name] = t["after"]
        if t["informed"]:
            sources[name] = f"Fitted by phaseplan calibrate ({sc.engine.name}'s {t['before']:g} → {t['after']:g})."
    doc["sources"] = sources
    return doc


def bands(figures: list[Figure], leave_one_out: bool) -> dict[str, dict[str, Any]]:
    """Per kind of figure: median and worst |error| — leave-one-out when the fit had enough runs, else after."""
    out: dict[str, dict[str, Any]] = {}
    for k in KINDS:
        errs = [abs((f.loo if leave_one_out else f.after) / f.measured - 1) for f in figures if f.kind == k]
        if errs:
            out[k] = {
                "median": round(statistics.median(errs), 4),
                "max": round(max(errs), 4),
                "cases": len(errs),
                "leave_one_out": leave_one_out,
            }
    return out
