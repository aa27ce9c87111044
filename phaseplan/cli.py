"""The `phaseplan` command line. Bad input of any kind ends in one line on stderr and exit code 2."""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from phaseplan import calibrate, planner, validate
from phaseplan.calibration import profile_fit, profile_import
from simulator.config import loader
from simulator.console import PlainConsole, printable
from simulator.errors import InputError
from simulator.results import report
from simulator.results.record import RunRecord

PIPED_WIDTH = 80  # a report piped without COLUMNS: what a file, a pager or an email shows
WIDTHS = (20, 1000)  # COLUMNS outside these is read as the nearest (a report needs a few columns; none needs more)


def report_width() -> int | None:
    """The width reports follow: COLUMNS when set, else the terminal's own (None: Rich asks it, and follows a
    resize), else PIPED_WIDTH."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit():
        return min(max(int(cols), WIDTHS[0]), WIDTHS[1])
    return None if sys.stdout.isatty() else PIPED_WIDTH


# Everything from a file or an option prints as text, never as markup (simulator/console.py).
console = PlainConsole(width=report_width())

set_option = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="PATH=VALUE",
    help="Override a scenario field by its dotted path (repeatable), e.g. --set deployment.decode.tp=8.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
scenario_arg = click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))


def work_options(f: Any) -> Any:
    """--no-limits / --max-requests: the work estimate's limits a run must pass before it starts."""
    f = click.option(
        "--max-requests",
        type=planner.Whole(min=1),
        default=None,
        metavar="N",
        help="Raise (or lower) the limit of requests per run (default 1,000,000).",
    )(f)
    return click.option(
        "--no-limits",
        is_flag=True,
        help="Run whatever the work estimate says (requests, tokens, memory, sweep points).",
    )(f)


def limit_options(f: Any) -> Any:
    """The work limits and --allow-profile-mismatch: the checks a simulation passes before it starts."""
    f = click.option(
        "--allow-profile-mismatch",
        is_flag=True,
        help="Price with a profile made on another device than the scenario's hardware.",
    )(f)
    return work_options(f)


def dump(doc: Any, compact: bool = False) -> str:
    """Results as JSON; sweeps are compact, since a point carries its whole resolved scenario."""
    if compact:
        return json.dumps(doc, separators=(",", ":"), allow_nan=False)
    return json.dumps(doc, indent=2, allow_nan=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="phaseplan", message="phaseplan %(version)s")
def cli() -> None:
    """phaseplan: plan disaggregated LLM inference fleets on measured kernel profiles."""


@cli.command()
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--model",
    metavar="PRESET|CONFIG.json",
    help="A model preset, or a Hugging Face config.json (read locally); with a scenario it replaces the scenario's.",
)
@click.option(
    "--hardware", default="h200", show_default=True, help="GPU preset, without a scenario (else --set hardware=)."
)
@json_option
@set_option
def capacity(scenario: Path | None, model: str | None, hardware: str, as_json: bool, sets: tuple[str, ...]) -> None:
    """Weights, KV bytes per token and KV tokens/pages per pool (memory accounting only). Without a scenario,
    --model alone: one instance of the model's release on the fewest GPUs of one node that hold it."""
    from simulator.capacity import capacity_report, render_capacity
    from simulator.planning import model_only

    if scenario is None:
        if model is None:
            raise InputError("capacity: give a scenario, or --model PRESET|CONFIG.json")
        sc, _ = model_only.scenario(model, hardware, sets)
        pool = sc.deployment.decode
        click.echo(f"{sc.model.name} on {sc.hardware.name}: one TP{pool.tp} instance, {pool.weights} weights", err=True)
    else:
        sc, _ = loader.load(scenario, ((f"model={model}",) if model else ()) + sets)
    rep = capacity_report(sc)
    if as_json:
        click.echo(dump(rep))
    else:
        console.print(render_capacity(rep))


def _progress(total: float) -> tuple[Progress | None, Any]:
    """A bar on a terminal for a run of many requests, whatever drives it (count, rate × duration or trace)."""
    if not math.isfinite(total) or total < 2000 or not sys.stderr.isatty():
        return None, None
    prog = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = prog.add_task("simulating", total=int(total))

    def tick(done: int) -> None:
        if done % 500 == 0:
            prog.update(task, completed=done)

    return prog, tick


def _simulate(sc: Any, base_dir: Path, expected: float = math.inf) -> tuple[dict[str, Any], RunRecord]:
    """The Result and the run's record (its per-request records)."""
    from simulator.engine.run import simulate

    prog, tick = _progress(expected)
    if prog is None:
        return simulate(sc, base_dir)
    with prog:
        return simulate(sc, base_dir, on_progress=tick)


def _preflight(sc: Any, base_dir: Path, limits: Any, allow_mismatch: bool, where: str = "") -> Any:
    """Everything a run is refused for, checked before it starts: the work it implies and its profile."""
    from simulator.budget import check
    from simulator.calibration.device_match import check_profile_device

    est = check(sc, base_dir, limits, where)
    check_profile_device(sc, base_dir, allow_mismatch)
    return est


def _warn_if_empty(sc: Any, result: dict[str, Any], label: str = "") -> None:
    if result["metrics"]["requests"] == 0:
        from simulator.budget import why_nothing_arrived

        click.echo(f"warning: {printable(label + 'no request arrived: ' + why_nothing_arrived(sc))}", err=True)


def _warn_if_overloaded(sc: Any, result: dict[str, Any], ran: RunRecord, base_dir: Path) -> None:
    """A run whose offered load a pool cannot serve still ends; say so, naming the pool and its bound."""
    from simulator.planning.overload import warnings

    for line in warnings(sc, result, ran.requests, base_dir):
        click.echo(f"warning: {printable(line)}", err=True)


def _run_names() -> list[str]:
    """The files of `run --out`: the Result, one row per request, and the latency and queue charts."""
    from simulator.results.charts import RUN_CHARTS

    return ["result.json", "requests.csv", *RUN_CHARTS]


def _run_files(out: Path, result: dict[str, Any], records: list[Any]) -> dict[Path, str | bytes]:
    from simulator.results import requests
    from simulator.results.charts import run_charts

    charts = run_charts(
        result,
        requests.ttft_ms(records),
        requests.tpot_ms(records),
        requests.waiting(records, result["metrics"]["duration_s"]),
    )
    contents = [dump(result) + "\n", requests.to_csv(records), *charts]
    return {out / n: c for n, c in zip(_run_names(), contents, strict=True)}


@cli.command()
@scenario_arg
@json_option
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Also write result.json, requests.csv (one row per request) and PNG charts here.",
)
@click.option(
    "--repeats",
    type=planner.Whole(1, 10_000),
    default=1,
    show_default=True,
    help="Runs over seeds seed..seed+N-1 (and the profile's p10-p90 spread): metrics with 95% intervals.",
)
@planner.slo_option
@planner.jobs_option
@planner.backend_option
@set_option
@limit_options
def run(
    scenario: Path,
    as_json: bool,
    out: Path | None,
    repeats: int,
    slo: str | None,
    jobs: int | None,
    backend_kind: str,
    sets: tuple[str, ...],
    no_limits: bool,
    max_requests: int | None,
    allow_profile_mismatch: bool,
) -> None:
    """Simulate a scenario on the modeled clock (its `sweep` block is ignored)."""
    from simulator.atomic import check_target, write_files

    sc, _ = loader.load(scenario, sets)
    if out is not None:
        check_target(out, ["repeats.json"] if repeats > 1 else _run_names())
    from phaseplan.preflight import check_fits

    check_fits(sc, scenario, sets)
    limits = planner.work_limits(no_limits, max_requests)
    est = _preflight(sc, scenario.parent, limits, allow_profile_mismatch)
    if repeats > 1:
        from simulator.budget import check_sweep_total

        check_sweep_total([est] * repeats, limits, what=f"--repeats {repeats}")
        planner.run_repeats(sc, scenario, repeats, slo, jobs, backend_kind, as_json, out, console, dump)
        return
    result, ran = _simulate(sc, scenario.parent, est.requests)
    _warn_if_empty(sc, result)
    _warn_if_overloaded(sc, result, ran, scenario.parent)
    if out is not None:  # the Result, its requests and charts: all or nothing
        write_files(_run_files(out, result, ran.requests))
    if as_json:
        click.echo(dump(result))
    else:
        report.print_run(console, result)
        print_bands(result)


def print_bands(result: dict) -> None:
    """The validated error band of a run's headline figures (`simulator/validation/bands.py`)."""
    from simulator.folding import Folding
    from simulator.validation import bands

    text = Folding(console)
    for band in bands.headline(result, "output throughput", result["metrics"]["output_tokens_per_s"]):
        text.print(band)


@cli.command()
@scenario_arg
@json_option
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Write the sweep CSV, its JSON and one PNG chart per headline metric here (without it: the table only).",
)
@planner.jobs_option
@planner.backend_option
@click.option("--pareto", is_flag=True, help="Also write the Pareto frontier of throughput per GPU (CSV, PNG).")
@set_option
@limit_options
def sweep(
    scenario: Path,
    as_json: bool,
    out: Path | None,
    jobs: int | None,
    backend_kind: str,
    pareto: bool,
    sets: tuple[str, ...],
    no_limits: bool,
    max_requests: int | None,
    allow_profile_mismatch: bool,
) -> None:
    """Run every point of the scenario's `sweep` block; print a table, write a CSV. A failed point is kept."""
    from simulator.atomic import check_target, write_files
    from simulator.budget import check_points, check_sweep_total
    from simulator.config.sweep import points, scenario_at, to_csv
    from simulator.planning.pareto import paths as pareto_paths
    from simulator.planning.sweeps import run_sweep
    from simulator.results.charts import sweep_chart_names, sweep_charts
    from simulator.validation import bands

    sc, raw = loader.load(scenario, sets)
    if pareto and out is None:
        raise InputError("--pareto writes the frontier's CSV and chart: name a folder with --out DIR")
    folder = out or Path("out")  # the files' names; nothing is written without --out
    csv_path = folder / f"{scenario.stem}-sweep.csv"
    json_path = folder / f"{scenario.stem}-sweep.json"
    stem = folder / f"{scenario.stem}-sweep"
    charts = sweep_chart_names(stem.name) if sc.sweep else []
    if out is not None:
        check_target(
            out, [csv_path.name, json_path.name, *charts, *([p.name for p in pareto_paths(stem)] if pareto else [])]
        )
    limits = planner.work_limits(no_limits, max_requests)
    check_points(sc, limits)
    pts = points(sc)
    ests = []
    for p in pts:  # the work of every valid point, before any runs (an invalid one is kept by run_sweep)
        try:
            at = scenario_at(raw, p, str(scenario))
        except InputError:
            continue
        ests.append(_preflight(at, scenario.parent, limits, allow_profile_mismatch, _point_label(p)))
    check_sweep_total(ests, limits)
    with planner.backend(backend_kind, jobs) as b:
        with planner.bar("sweep points", len(pts)) as tick:
            results = run_sweep(sc, raw, str(scenario), scenario.parent, b, tick)
        pricing = None if as_json else planner.sweep_pricing(sc, raw, scenario, results, b)
    for r in results:
        if "metrics" in r:
            _warn_if_empty(scenario_at(raw, r["point"], str(scenario)), r, _point_label(r["point"]))
            r["bands"] = bands.headline_margins(r)  # each point's validated error band, in the JSON printed and written
    frontier: dict[Path, str | bytes] = {}
    if out is not None:
        files: dict[Path, str | bytes] = {csv_path: to_csv(results), json_path: dump(results, compact=True) + "\n"}
        if charts:
            pngs = sweep_charts(sc.name, list(sc.sweep), results)
            files |= {out / n: png for n, png in zip(charts, pngs, strict=True)}
        frontier = planner.pareto_files(sc.name, results, stem) if pareto else {}
        write_files(files | frontier)  # the CSV, JSON, charts and the frontier's CSV and chart: all or nothing
    if frontier:
        console.print(f"pareto: {', '.join(str(p) for p in frontier)}")
    if as_json:
        click.echo(dump(results, compact=True))
    else:
        report.print_sweep(console, sc, results, csv_path if out is not None else None)
        print_sweep_bands(results)
        planner.print_pricing(pricing)


def print_sweep_bands(results: list[dict[str, Any]]) -> None:
    """Each headline figure's validated error band across the sweep's points (`bands.sweep_lines`)."""
    from simulator.folding import Folding
    from simulator.validation import bands

    lines = bands.sweep_lines(results)
    if lines:
        text = Folding(console)
        text.print("validated model error of each point's figures (docs/validation.md):")
        for line in lines:
            text.print(f"  {line}")


def _point_label(point: dict[str, Any]) -> str:
    return f"sweep point {', '.join(f'{k}={v}' for k, v in point.items())}: " if point else ""


@cli.group(invoke_without_command=True)
@click.option(
    "--device",
    type=click.Choice(["cuda", "cpu", "roofline"]),
    help="cuda: Triton kernels on a GPU; cpu: torch reference ops; roofline: the modeled profile.",
)
@click.option("--hardware", default="h200", show_default=True, help="Hardware preset (roofline only).")
@click.option("--out", type=click.Path(path_type=Path), help="Profile JSON to write.")
@click.option("--quick", is_flag=True, help="Fewer shapes (for smoke tests).")
@click.option(
    "--scenario",
    "only",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Measure exactly this scenario's op shapes, every sweep point (cpu/cuda; `make profile-cpu`).",
)
@click.pass_context
def profile(
    ctx: click.Context, device: str | None, hardware: str, out: Path | None, quick: bool, only: Path | None
) -> None:
    """Measure (or model) every kernel shape the bundled scenarios' op lists produce (`profile import` converts
    a third party's measured tables instead)."""
    if ctx.invoked_subcommand is not None:
        return
    if device is None or out is None:
        raise click.UsageError("profile needs --device and --out (or a subcommand: profile import ...)")
    from simulator.atomic import check_file_target

    check_file_target(out)
    if only is not None:
        from kernels.scenario_profile import write_scenario_profile

        if device == "roofline":
            raise InputError("--scenario measures on a device: --device cpu or cuda")
        console.print(f"wrote {write_scenario_profile(only, device, out)}")
        return
    from kernels.profiler import write_profile
    from simulator.config import presets as p

    if device == "roofline":
        try:
            p.hardware(hardware)
        except InputError as e:
            raise InputError(f"--hardware {hardware}: {e}") from None
    else:
        _need_device(device)
    path = write_profile(device, hardware, out, quick=quick)
    console.print(f"wrote {path}")


profile.add_command(profile_import)
profile.add_command(profile_fit)


def _need_device(device: str) -> None:
    """A measured profile needs torch, and for `cuda` a visible GPU: say so in one line before any work."""
    try:
        import torch
    except ImportError:
        raise InputError(f"--device {device}: torch is not installed (pip install -e '.[kernels]')") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError(
            "--device cuda: no CUDA GPU is visible here (torch.cuda.is_available() is False); "
            "use --device cpu or --device roofline"
        )


device_option = click.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    required=True,
    help="cuda: the Triton kernels on a GPU; cpu: the torch reference ops.",
)
budget_option = click.option(
    "--budget-s",
    type=planner.Finite(0, 1e6),
    default=120.0,
    show_default=True,
    help="Device seconds to spend executing; later steps reuse their bucket's time.",
)


@cli.command()
@scenario_arg
@device_option
@click.option(
    "--clock",
    type=click.Choice(["measured", "modeled"]),
    default="measured",
    show_default=True,
    help="measured: time advances by executed steps; modeled: by the cost model (equals `run`).",
)
@json_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Also write result.json here.")
@budget_option
@set_option
@work_options
def replay(
    scenario: Path,
    device: str,
    clock: str,
    as_json: bool,
    out: Path | None,
    budget_s: float,
    sets: tuple[str, ...],
    no_limits: bool,
    max_requests: int | None,
) -> None:
    """Run a scenario's steps on a device with the same scheduler (the real clock); the Result of `run`."""
    from phaseplan.replay import replay_command

    replay_command(
        scenario, sets, device, clock, budget_s, out, as_json, console, planner.work_limits(no_limits, max_requests)
    )


@cli.command()
@scenario_arg
@device_option
@click.option(
    "--profile",
    "profile_path",
    help="Profile the simulation prices by: a file, or 'here' to time the scenario's op shapes on the device in this "
    "run (the default on the CPU; on a GPU the scenario's profile).",
)
@json_option
@budget_option
@set_option
@work_options
def compare(
    scenario: Path,
    device: str,
    profile_path: str | None,
    as_json: bool,
    budget_s: float,
    sets: tuple[str, ...],
    no_limits: bool,
    max_requests: int | None,
) -> None:
    """Simulate and replay a scenario; each headline metric sim vs replay, then op families priced vs measured."""
    from phaseplan.replay import compare_command

    compare_command(
        scenario, sets, device, profile_path, budget_s, as_json, console, planner.work_limits(no_limits, max_requests)
    )


@cli.command("bench-sim")
@click.option("--hours", type=planner.Finite(0.01, 10_000), default=1.0, show_default=True)
@click.option("--rate", type=planner.Finite(0.1, 1e6), default=20.0, show_default=True, help="Requests per second.")
@set_option
@limit_options
def bench_sim(
    hours: float,
    rate: float,
    sets: tuple[str, ...],
    no_limits: bool,
    max_requests: int | None,
    allow_profile_mismatch: bool,
) -> None:
    """Simulator speed: open-loop traffic on 8 prefill + 16 decode instances; requests per wall-second."""
    from phaseplan.bench import bench, scenario

    limits = planner.work_limits(no_limits, max_requests)
    _preflight(scenario(hours, rate, sets), Path.cwd(), limits, allow_profile_mismatch)
    for line in bench(hours, rate, sets=sets):
        click.echo(line)


@cli.command()
@click.option("--model", default="kimi-k2.6", show_default=True, help="Model preset (phaseplan presets lists them).")
@click.option("--hardware", default="h200", show_default=True, help="GPU preset.")
@click.option("--rate", type=planner.Finite(1e-6, 1e6), help="Open loop: requests per second [default: 2].")
@click.option("--concurrency", type=planner.Whole(1, 1 << 20), help="Closed loop instead: this many clients.")
@click.option("--prompt-tokens", type=planner.Whole(1, 100_000_000), default=4096, show_default=True)
@click.option("--output-tokens", type=planner.Whole(1, 100_000_000), default=512, show_default=True)
@click.option(
    "--duration-s",
    type=planner.Finite(1e-3, 1e8),
    help="Seconds of arrivals [default: long enough for the rate to show a steady state].",
)
@click.option(
    "--slo", metavar="ttft_p95_ms=…,tpot_p95_ms=…", help="The SLO's limits [default: ttft_p95_ms=2000,tpot_p95_ms=50]."
)
@click.option("--name", help="The scenario's name [default: MODEL-HARDWARE].")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the scenario here (else stdout).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
def init(
    model: str,
    hardware: str,
    rate: float | None,
    concurrency: int | None,
    prompt_tokens: int,
    output_tokens: int,
    duration_s: float | None,
    slo: str | None,
    name: str | None,
    out: Path | None,
    force: bool,
) -> None:
    """Write a commented scenario from a few answers, ready to run: a disaggregated deployment sized to the
    model's memory and the load (every choice explained in the file)."""
    from simulator.atomic import check_file_target, write_atomic
    from simulator.config.scenario import SLO as ScenarioSLO
    from simulator.planning.slo import SLO
    from simulator.planning.starter import Ask, starter

    if rate is not None and concurrency is not None:
        raise InputError("--rate and --concurrency: give one (open loop or closed loop)")
    limits = SLO.parse(slo, ScenarioSLO())
    if limits.attainment is not None:
        raise InputError("--slo attainment: a scenario's slo holds ttft_p95_ms and tpot_p95_ms (attainment is plan's)")
    if out is not None:
        check_file_target(out)
        if out.exists() and not force:
            raise InputError(f"--out {out}: exists; pass --force to replace it")
    ask = Ask(
        model,
        hardware,
        rate,
        concurrency,
        prompt_tokens,
        output_tokens,
        limits.ttft_p95_ms,
        limits.tpot_p95_ms,
        duration_s,
        name,
    )
    given = {"rate": rate, "concurrency": concurrency, "prompt-tokens": prompt_tokens, "output-tokens": output_tokens}
    given |= {"duration-s": duration_s, "slo": slo, "name": name}
    ctx = click.get_current_context()
    words = [f"--model {model}", f"--hardware {hardware}"] + [
        f"--{k} {shlex.quote(f'{v:g}' if isinstance(v, float) else str(v))}"
        for k, v in given.items()
        if ctx.get_parameter_source(k.replace("-", "_")) == click.core.ParameterSource.COMMANDLINE
    ]
    text = starter(ask, " ".join(["phaseplan init", *words]))
    if out is None:
        click.echo(text, nl=False)
        return
    write_atomic(out, text)
    click.echo(printable(f"wrote {out}: phaseplan run {out}"), err=True)


@cli.command()
def schema() -> None:
    """Print the scenario schema as Markdown: every field, its type, default, range and meaning (docs/schema.md)."""
    from simulator.config.schema_doc import render

    click.echo(render(), nl=False)


@cli.command()
def presets() -> None:
    """List the bundled model, hardware and serving-engine presets."""
    from simulator.config import presets as p

    t = Table("kind", "presets")
    t.add_row("models", ", ".join(p.names("models")))
    t.add_row("hardware", ", ".join(p.names("hardware")))
    t.add_row("engines", ", ".join(p.names("engines")))
    console.print(t)


planner.register(cli, scenario_arg, json_option, set_option, work_options, console, dump)
calibrate.register(cli, set_option, json_option, console, dump)
validate.register(cli, json_option, console, dump)


@cli.command("app")
@click.option("--port", type=planner.Whole(1, 65535), default=8501, show_default=True)
@click.option("--address", default="localhost", show_default=True, help="Interface to serve on.")
def app_page(port: int, address: str) -> None:
    """Serve the planner page (capacity, what-if, compare): Streamlit, headless, usage statistics off."""
    from phaseplan.app import serve

    serve(port, address)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt, so that outputs being written are finished or
    undone (`simulator.atomic`) and worker processes are stopped (`Backend`) before the process ends."""


def _terminate(signum: int, _frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated


def main() -> None:
    """The console script: every failure one `error:` line and an exit code, SIGTERM a clean exit 143."""
    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        _main()
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


def _main() -> None:
    console.width = report_width()  # type: ignore[assignment]  # None: the terminal's, as at start-up
    try:
        cli.main(standalone_mode=False)
    except InputError as e:
        click.echo(f"error: {printable(str(e))}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        sys.exit(130)
    except Terminated:
        click.echo("error: terminated (SIGTERM)", err=True)
        sys.exit(143)
    except click.ClickException as e:
        click.echo(f"error: {printable(e.format_message())}", err=True)
        sys.exit(2)
    except (MemoryError, RecursionError) as e:  # last resort: the checks above should have refused the input first
        click.echo(
            f"error: the input needs more than this process has ({type(e).__name__}); see the limits in the README",
            err=True,
        )
        sys.exit(2)
    except RuntimeError as e:  # a SIGTERM raised inside code that wraps it (e.g. a class body's __set_name__)
        if not _caused_by_terminated(e):
            raise
        click.echo("error: terminated (SIGTERM)", err=True)
        sys.exit(143)


def _caused_by_terminated(e: BaseException) -> bool:
    """Whether `Terminated` is in the exception's cause or context chain."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, Terminated):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False
