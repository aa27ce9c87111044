"""The planner's verbs, `max-rate` and `plan`, and the parallel options every many-run verb shares."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from phaseplan.progress import Counter, bar, status
from simulator.config.bounds import BOUNDS
from simulator.folding import Folding

if TYPE_CHECKING:
    from simulator.budget import Limits
    from simulator.config.scenario import Scenario
    from simulator.planning.backends import Backend

Dump = Callable[..., str]
RATE = BOUNDS[("Traffic", "rate")][:2]  # --start and --rate: the range traffic.rate itself may take
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class Finite(click.FloatRange):
    """A number in [lo, hi] that is finite: click's FloatRange lets NaN through (every comparison with it is
    false), and a NaN budget or rate is a traceback far from the option that brought it."""

    name = "finite number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv


jobs_option = click.option(
    "--jobs", type=click.IntRange(1, 256), default=None, help="Worker processes (default: one per CPU, at most 4)."
)
backend_option = click.option(
    "--backend",
    "backend_kind",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: worker processes here; ray: a Ray cluster (RAY_ADDRESS, else a local Ray).",
)
slo_option = click.option(
    "--slo",
    metavar="ttft_p95_ms=…,tpot_p95_ms=…[,attainment=…]",
    help="Limits the p95 TTFT and TPOT must meet, named as in the scenario's slo (default: the scenario's own).",
)


out_option = click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the answer here: its scenario (runs as-is), commands.sh, SGLang and vLLM launch commands, bench.sh "
    "(Kubernetes manifests where instances span nodes), JSON.",
)
engine_version_option = click.option(
    "--engine-version",
    "engine_versions_given",
    multiple=True,
    metavar="ENGINE=VERSION",
    help="The release --out's commands are written for (repeatable; sglang, sglang-router, vllm) [default: the "
    "newest whose flags are known, simulator/deploy/flags].",
)


def _num(v: float) -> str:
    """A number as it was given, for a command line that must ask the same question again."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def slo_text(limits: Any) -> str:
    items = [f"ttft_p95_ms={_num(limits.ttft_p95_ms)}", f"tpot_p95_ms={_num(limits.tpot_p95_ms)}"]
    if limits.attainment is not None:
        items.append(f"attainment={_num(limits.attainment)}")
    return ",".join(items)


def asked(
    verb: str, scenario: Path, options: list[str], sets: tuple[str, ...], no_limits: bool, max_requests: int | None
) -> list[str]:
    """The argv that asks the question again (outputs, JSON and parallelism left out: they change no figure)."""
    argv = ["phaseplan", verb, str(scenario.resolve()), *options]
    for s in sets:
        argv += ["--set", s]
    if no_limits:
        argv.append("--no-limits")
    if max_requests is not None:
        argv += ["--max-requests", str(max_requests)]
    return argv


def check_out(out: Path | None, scenario: Path, suffix: str) -> None:
    """Refuse an unwritable --out before any trial runs."""
    if out is not None:
        from simulator.atomic import check_target
        from simulator.deploy.bundle import NAMES

        check_target(out, [f"{scenario.stem}-{suffix}.yaml", *NAMES])


def write_answer(
    out: Path,
    scenario: Path,
    suffix: str,
    mapping: dict[str, Any],
    argv: list[str],
    header: list[str],
    text: str,
    versions: dict[str, str],
) -> None:
    """The answer's files, all or nothing (simulator/deploy/bundle.py)."""
    from simulator.atomic import write_files
    from simulator.config import loader
    from simulator.deploy.bundle import files

    sc = loader.validate(mapping, str(scenario))
    write_files(files(out, f"{scenario.stem}-{suffix}", mapping, sc, scenario.parent, argv, header, text, versions))


def engine_versions(items: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """--engine-version items checked (before anything runs), and as the options that ask for them again."""
    from simulator.deploy.flags import parse_choice

    return parse_choice(items), [a for item in items for a in ("--engine-version", item)]


def backend(kind: str, jobs: int | None) -> Backend:
    from simulator.planning.backends import Backend, default_jobs

    return Backend(kind, jobs or default_jobs())


def pareto_files(name: str, results: list[dict[str, Any]], stem: Path) -> dict[Path, str | bytes]:
    """The frontier of a sweep's points that ran (failed points have no figures), as files to write."""
    from simulator.planning.pareto import files, point
    from simulator.planning.space import label

    pts = [point(label(r["point"]), r["metrics"]) for r in results if "error" not in r]
    return files(pts, name, stem) if pts else {}


def run_repeats(
    sc: Scenario,
    scenario: Path,
    n: int,
    slo: str | None,
    jobs: int | None,
    backend_kind: str,
    as_json: bool,
    out: Path | None,
    console: Console,
    dump: Dump,
) -> None:
    """`run --repeats N`: the metrics over N seeds with their intervals."""
    from simulator.atomic import write_atomic
    from simulator.planning.repeats import repeat
    from simulator.planning.report import print_repeats
    from simulator.planning.slo import SLO

    limits = SLO.parse(slo, sc)
    with backend(backend_kind, jobs) as b, bar("repeats", n) as tick:
        res = repeat(sc, scenario.parent, n, limits, b, tick)
    if out is not None:
        write_atomic(out / "repeats.json", dump(res) + "\n")
    if as_json:
        click.echo(dump(res))
    else:
        print_repeats(console, res)


def sweep_pricing(
    sc: Scenario, raw: dict[str, Any], scenario: Path, results: list[dict[str, Any]], b: Backend
) -> str | None:
    """The line saying the pricing decides the sweep's comparison (`simulator/planning/pricings.py`), or None.
    Its runs are the decision's two points, priced every other bundled way (the text report only: a sweep's JSON
    is its points)."""
    from simulator.planning import pricings
    from simulator.planning.sweeps import sweep_point

    def run(jobs: list[Any]) -> list[dict[str, Any]]:
        return b.map(sweep_point, jobs)

    with status("pricing the decision the other bundled ways"):
        rev = pricings.sweep_reversals(sc, raw, str(scenario), scenario.parent, results, run)
    return pricings.sweep_line(rev)


def print_pricing(line: str | None) -> None:
    if line:
        Folding(Console()).print(line)


def work_limits(no_limits: bool, max_requests: int | None) -> Limits:
    """The limits every trial's run must pass (`--no-limits`, `--max-requests`), as `run`'s."""
    from simulator.budget import Limits

    return Limits.none() if no_limits else Limits().with_max_requests(max_requests)


def _plan_band(console: Any, sc: Any, res: dict[str, Any]) -> None:
    """The validated error band of the limit the plan's winner binds on (its latency with the least headroom)."""
    from simulator.planning.slo import SLO
    from simulator.validation import bands

    w = res.get("winner")
    tight = SLO(**res["question"]["slo"]).tightest(w["metrics"]) if w else None
    if tight is not None:
        _, name, v, _ = tight
        seqs, gpu = w["metrics"]["max_running"], w["overrides"].get("hardware", sc.hardware.name)
        band = bands.line(sc.engine, "latency", f"the winner's {name} p95", v, "ms", seqs, gpu)
        if band:
            Folding(console).print(band)


def _plan_pricing(
    raw: dict[str, Any], sc: Scenario, scenario: Path, res: dict[str, Any], slo: Any, b: Backend, limits: Limits
) -> dict[str, Any] | None:
    """The plan's winner and runner-up priced every other bundled way, each on the trial it was judged on."""
    from simulator.planning import pricings
    from simulator.planning.trial import Trial, run_trial

    def run(scs: list[Scenario]) -> list[dict[str, Any]]:
        return b.map(run_trial, [Trial(s, scenario.parent, slo, limits=limits, lengthen=False) for s in scs])

    with status("pricing the answer the other bundled ways"):
        return pricings.plan_reversals(res, raw, str(scenario), scenario.parent, sc, run)


def register(
    cli: click.Group,
    scenario_arg: Decorator,
    json_option: Decorator,
    set_option: Decorator,
    work_options: Decorator,
    console: Console,
    dump: Dump,
) -> None:
    """Add the planner's verbs to the `phaseplan` group (the CLI's shared options and printers passed in)."""

    @cli.command("max-rate")
    @scenario_arg
    @slo_option
    @json_option
    @click.option("--start", type=Finite(*RATE), help="First rate to try (default: the scenario's).")
    @out_option
    @engine_version_option
    @jobs_option
    @backend_option
    @set_option
    @work_options
    def max_rate_cmd(
        scenario: Path,
        slo: str | None,
        as_json: bool,
        start: float | None,
        out: Path | None,
        engine_versions_given: tuple[str, ...],
        jobs: int | None,
        backend_kind: str,
        sets: tuple[str, ...],
        no_limits: bool,
        max_requests: int | None,
    ) -> None:
        """The highest rate the configuration sustains within the SLO, and its cost per million tokens there."""
        from phaseplan.preflight import check_fits, check_trace
        from simulator.config import loader
        from simulator.planning.maxrate import max_rate
        from simulator.planning.report import print_max_rate
        from simulator.planning.slo import SLO

        sc, raw = loader.load(scenario, sets)
        limits = SLO.parse(slo, sc)
        check_out(out, scenario, "max-rate")
        versions, version_options = engine_versions(engine_versions_given)
        check_fits(sc, scenario, sets)  # a deployment that does not fit meets the SLO at no rate
        check_trace(sc, scenario, work_limits(no_limits, max_requests))
        with backend(backend_kind, jobs) as b, status("max-rate") as note:
            res = max_rate(
                raw,
                sc,
                str(scenario),
                scenario.parent,
                limits,
                b,
                start=start,
                on_trial=note,
                limits=work_limits(no_limits, max_requests),
            )
        if out is not None:
            from simulator.planning.maxrate import mapping

            options = ["--slo", slo_text(limits)] + (["--start", _num(start)] if start is not None else [])
            options += version_options
            write_answer(
                out,
                scenario,
                "max-rate",
                mapping(raw, sc, res["max_rate_rps"], limits, scenario.parent, res["trial"]),
                asked("max-rate", scenario, options, sets, no_limits, max_requests),
                [f"max-rate's answer: {res['max_rate_rps']:g} {res['rate_unit']} within {limits.describe()} (modeled)"],
                dump(res),
                versions,
            )
        if as_json:
            click.echo(dump(res))
        else:
            print_max_rate(console, res, sc.name)
            from simulator.validation import bands

            seqs = res["metrics"]["max_running"]
            band = bands.line(
                sc.engine, "throughput", "max rate", res["max_rate_rps"], res["rate_unit"], seqs, sc.hardware.name
            )
            if band:
                Folding(console).print(band)

    @cli.command()
    @scenario_arg
    @click.option(
        "--rate",
        type=Finite(*RATE),
        required=True,
        help="Arrival rate to plan for (traffic.rate's unit: conversations/s with multi-turn sessions).",
    )
    @slo_option
    @click.option("--objective", type=click.Choice(["gpus", "cost"]), default="gpus", show_default=True)
    @click.option(
        "--search",
        "search",
        multiple=True,
        metavar="PATH=V1,V2,…|LO..HI",
        help="A dimension of the search (repeatable); default: each pool's instances, parallel layout and KV "
        "format, the weight format, colocated and disaggregated.",
    )
    @click.option("--runners-up", type=click.IntRange(0, 50), default=3, show_default=True)
    @click.option(
        "--pareto",
        "pareto_out",
        type=click.Path(file_okay=False, path_type=Path),
        help="Also write the Pareto frontier (CSV, PNG) of the complete runs into this folder.",
    )
    @out_option
    @engine_version_option
    @json_option
    @jobs_option
    @backend_option
    @set_option
    @work_options
    def plan(
        scenario: Path,
        rate: float,
        slo: str | None,
        objective: str,
        search: tuple[str, ...],
        runners_up: int,
        pareto_out: Path | None,
        out: Path | None,
        engine_versions_given: tuple[str, ...],
        as_json: bool,
        jobs: int | None,
        backend_kind: str,
        sets: tuple[str, ...],
        no_limits: bool,
        max_requests: int | None,
    ) -> None:
        """The fewest GPUs (or lowest cost) that meet the SLO at --rate: winner, runners-up, rejected and why."""
        from phaseplan.preflight import check_trace
        from simulator.config import loader
        from simulator.planning import space as spaces
        from simulator.planning.report import print_plan
        from simulator.planning.search import plan as run_plan
        from simulator.planning.slo import SLO

        sc, raw = loader.load(scenario, sets)
        limits = SLO.parse(slo, sc)
        check_trace(sc, scenario, work_limits(no_limits, max_requests))
        stem = (pareto_out or Path(".")) / f"{scenario.stem}-plan"
        if pareto_out is not None:  # checked before any candidate runs
            from simulator.atomic import check_target
            from simulator.planning.pareto import paths

            check_target(pareto_out, [p.name for p in paths(stem)], "--pareto")
        check_out(out, scenario, "plan")
        versions, version_options = engine_versions(engine_versions_given)
        dims = spaces.parse(search) if search else spaces.default(sc, raw)
        total = dims.count()  # refused by count (space.MAX_CANDIDATES) before any candidate is built
        with backend(backend_kind, jobs) as b:
            with bar("simulating candidates", total) as tick:
                counter = Counter(tick)
                res = run_plan(
                    raw,
                    sc,
                    str(scenario),
                    scenario.parent,
                    rate=rate,
                    slo=limits,
                    space=dims,
                    objective=objective,
                    runners_up=runners_up,
                    backend=b,
                    on_level=lambda *_: counter.start_batch(),
                    on_done=counter,
                    limits=work_limits(no_limits, max_requests),
                )
            res["pricing"] = _plan_pricing(raw, sc, scenario, res, limits, b, work_limits(no_limits, max_requests))
        if pareto_out is not None and res["evaluated"]:
            from simulator.planning.pareto import write

            write(res["evaluated"], f"{sc.name} plan at {rate:g}", stem)
        w = res["winner"]
        if out is not None and w is not None:
            from simulator.planning.search import winner_mapping

            options = ["--rate", _num(rate), "--slo", slo_text(limits), "--objective", objective]
            options += ["--runners-up", str(runners_up)] + [a for s in search for a in ("--search", s)]
            options += version_options
            write_answer(
                out,
                scenario,
                "plan",
                winner_mapping(raw, res),
                asked("plan", scenario, options, sets, no_limits, max_requests),
                [f"plan's winner at {rate:g} {res['question']['rate_unit']} within {limits.describe()} (modeled)"],
                dump(res),
                versions,
            )
        if as_json:
            click.echo(dump(res))
        else:
            print_plan(console, res)
            _plan_band(console, sc, res)
            from simulator.planning.pricings import plan_line

            print_pricing(plan_line(res["pricing"]))
        if w is None:
            nothing = " (nothing written to --out)" if out is not None else ""
            click.echo(f"error: no candidate meets the SLO at this rate{nothing}", err=True)
            sys.exit(1)
