"""The planner's verbs, `max-rate` and `plan`, and the parallel options every many-run verb shares."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from phaseplan.progress import Counter, bar, status

if TYPE_CHECKING:
    from simulator.budget import Limits
    from simulator.config.scenario import Scenario
    from simulator.planning.backends import Backend

Dump = Callable[..., str]
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

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
    metavar="ttft_ms=…,tpot_ms=…[,attainment=…]",
    help="Limits the p95 TTFT and TPOT must meet, named as in the scenario's slo (default: the scenario's own).",
)


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


def work_limits(no_limits: bool, max_requests: int | None) -> Limits:
    """The limits every trial's run must pass (`--no-limits`, `--max-requests`), as `run`'s."""
    from simulator.budget import Limits

    return Limits.none() if no_limits else Limits().with_max_requests(max_requests)


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
    @click.option("--start", type=click.FloatRange(min=1e-6), help="First rate to try (default: the scenario's).")
    @jobs_option
    @backend_option
    @set_option
    @work_options
    def max_rate_cmd(
        scenario: Path,
        slo: str | None,
        as_json: bool,
        start: float | None,
        jobs: int | None,
        backend_kind: str,
        sets: tuple[str, ...],
        no_limits: bool,
        max_requests: int | None,
    ) -> None:
        """The highest rate the configuration sustains within the SLO, and its cost per million tokens there."""
        from simulator.config import loader
        from simulator.planning.maxrate import max_rate
        from simulator.planning.report import print_max_rate
        from simulator.planning.slo import SLO

        sc, raw = loader.load(scenario, sets)
        limits = SLO.parse(slo, sc)
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
        if as_json:
            click.echo(dump(res))
        else:
            print_max_rate(console, res, sc.name)

    @cli.command()
    @scenario_arg
    @click.option(
        "--rate",
        type=click.FloatRange(min=1e-6, min_open=False),
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
        help="A dimension of the search (repeatable); default: instances and KV format of each pool.",
    )
    @click.option("--runners-up", type=click.IntRange(0, 50), default=3, show_default=True)
    @click.option(
        "--pareto",
        "pareto_out",
        type=click.Path(file_okay=False, path_type=Path),
        help="Also write the Pareto frontier (CSV, PNG) of the complete runs into this folder.",
    )
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
        as_json: bool,
        jobs: int | None,
        backend_kind: str,
        sets: tuple[str, ...],
        no_limits: bool,
        max_requests: int | None,
    ) -> None:
        """The fewest GPUs (or lowest cost) that meet the SLO at --rate: winner, runners-up, rejected and why."""
        from simulator.config import loader
        from simulator.planning import space as spaces
        from simulator.planning.report import print_plan
        from simulator.planning.search import plan as run_plan
        from simulator.planning.slo import SLO

        sc, raw = loader.load(scenario, sets)
        limits = SLO.parse(slo, sc)
        stem = (pareto_out or Path(".")) / f"{scenario.stem}-plan"
        if pareto_out is not None:  # checked before any candidate runs
            from simulator.atomic import check_target
            from simulator.planning.pareto import paths

            check_target(pareto_out, [p.name for p in paths(stem)], "--pareto")
        dims = spaces.parse(search) if search else spaces.default(sc)
        total = len(spaces.candidates(dims))
        with backend(backend_kind, jobs) as b, bar("simulating candidates", total) as tick:
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
        if pareto_out is not None and res["evaluated"]:
            from simulator.planning.pareto import write

            write(res["evaluated"], f"{sc.name} plan at {rate:g}", stem)
        if as_json:
            click.echo(dump(res))
        else:
            print_plan(console, res)
        if res["winner"] is None:
            click.echo("error: no candidate meets the SLO at this rate", err=True)
            sys.exit(1)
