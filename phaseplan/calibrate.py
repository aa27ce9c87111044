"""`phaseplan calibrate`: an engine preset fitted to the operator's own benchmark result files.

The files are read and checked against the scenario first (`bench_files`, `bench_check`), the fit runs
(`simulator.calibration.engine_fit`), and only then is the engine file written, whole or not at all.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Column, Table

from phaseplan.planner import Whole
from simulator.calibration.bench_run import TOOLS, BenchRun
from simulator.console import printable

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def register(cli: click.Group, set_option: Decorator, json_option: Decorator, console: Console, dump: Any) -> None:
    """Add `calibrate` to the `phaseplan` group (the CLI's shared options and printers passed in)."""

    @cli.command("calibrate")
    @click.option(
        "--bench",
        "files",
        multiple=True,
        required=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="A benchmark result file of the deployment (repeatable): SGLang bench_serving JSON/JSONL, vllm bench "
        "serve JSON, GenAI-Perf/AIPerf profile export, guidellm report.",
    )
    @click.option(
        "--scenario",
        required=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="The scenario describing the measured deployment (model, GPUs, pools, formats); its traffic is "
        "replaced by each run's.",
    )
    @click.option("--engine", "base", default=None, help="Engine preset the fit starts from [default: the scenario's].")
    @click.option(
        "--format", "tool", type=click.Choice(TOOLS), default=None, help="The files' format [default: detected]."
    )
    @click.option(
        "--term",
        "terms",
        multiple=True,
        help="Fit only this engine term (repeatable) [default: every term the runs show].",
    )
    @click.option(
        "--max-requests",
        type=Whole(1, 20000),
        default=None,
        help="Requests simulated per run at most [default: 1,000].",
    )
    @click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Engine file to write (YAML).")
    @click.option("--name", default=None, help="The fitted engine's name [default: the --out file's stem].")
    @click.option(
        "--force",
        is_flag=True,
        help="Write the engine even where the fit makes it worse (a term on its bound, runs held out predicted "
        "worse than by the base preset).",
    )
    @set_option
    @json_option
    def calibrate_cmd(
        files: tuple[Path, ...],
        scenario: Path,
        base: str | None,
        tool: str | None,
        terms: tuple[str, ...],
        max_requests: int | None,
        out: Path | None,
        name: str | None,
        force: bool,
        sets: tuple[str, ...],
        as_json: bool,
    ) -> None:
        """Fit the engine's terms to benchmark runs of your deployment; report each run's error before and after
        (and leave-one-out with 4 runs or more); write the fitted engine preset with --out, unless the fit makes
        the engine worse (a term on its bound, or runs held out predicted worse than by the base preset: exit 1
        with the reasons; --force writes it anyway)."""
        from simulator.atomic import check_file_target, write_atomic
        from simulator.calibration import bench_check, bench_files, engine_fit
        from simulator.config import loader, presets, safe_yaml
        from simulator.errors import InputError

        if out is not None:
            check_file_target(out)
        if base is not None:  # a preset's name or an engine file, named by the option (never YAML: `{a: 1}`)
            try:
                presets.engine(base)
            except InputError as e:
                raise InputError(f"--engine {base}: {e}") from None
            sets = (*sets, f"engine={safe_yaml.quoted(base)}")
        sc, raw = loader.load(scenario, sets)
        runs = bench_files.read_all(list(files), tool, engine_fit.MAX_RUNS)  # type: ignore[arg-type]
        bench_check.check_config(runs, sc)
        fitted = engine_fit.calibrate(
            sc,
            raw,
            str(scenario),
            scenario.parent,
            runs,
            max_requests or engine_fit.MAX_REQUESTS,
            terms or None,
        )
        engine_name = name or (out.stem if out is not None else f"{sc.engine.name}-calibrated")
        doc = engine_document(fitted, engine_name, sc.engine.name, scenario, files, runs)
        refused = out is not None and bool(fitted.objections) and not force
        if out is not None and not refused:
            write_atomic(out, render(doc))
        if as_json:
            click.echo(dump({"engine": doc, "runs": _rows(fitted, runs), "objections": list(fitted.objections)}))
        else:
            _report(console, fitted, runs, doc, None if refused else out)
        if refused:
            click.echo(f"error: {out} not written: the fit makes {sc.engine.name} worse (--force writes it)", err=True)
            sys.exit(1)


def engine_document(
    fitted: Any, name: str, base: str, scenario: Path, files: tuple[Path, ...], runs: list[BenchRun]
) -> dict[str, Any]:
    """The engine preset: the base's terms with the fitted ones set, and where they come from."""
    from simulator.calibration import engine_fit

    doc = dict(fitted.engine)
    n = len(runs)
    doc["name"] = name
    doc["source"] = f"phaseplan calibrate: {base} fitted to {n} benchmark run(s) of {scenario}"
    doc["calibration"] = {
        "base": base,
        "deployment": str(scenario),
        "files": [
            {
                "path": str(f),
                "sha256": mine[0].sha256,
                "tool": mine[0].tool,
                "runs": len(mine),
                "date": next((r.date for r in mine if r.date), None),
            }
            for f in dict.fromkeys(files)
            if (mine := [r for r in runs if r.path == str(f)])
        ],
        "runs": n,
        "terms": fitted.terms,
        "error": engine_fit.bands(fitted.figures, fitted.leave_one_out),
    }
    return doc


def render(doc: dict[str, Any]) -> str:
    head = printable(  # one comment line, whatever the scenario's path holds
        f"# Engine preset fitted by `phaseplan calibrate` ({doc['calibration']['runs']} runs of "
        f"{doc['calibration']['deployment']}). A scenario names it as `engine: <this file>`."
    )
    return head + "\n" + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=110)


def _rows(fitted: Any, runs: list[BenchRun]) -> list[dict[str, Any]]:
    return [
        {
            "run": runs[f.run].where,
            "figure": f.label,
            "measured": f.measured,
            "before": f.before,
            "after": f.after,
            "leave_one_out": f.loo if fitted.leave_one_out else None,
        }
        for f in fitted.figures
    ]


def _report(console: Console, fitted: Any, runs: list[BenchRun], doc: dict[str, Any], out: Path | None) -> None:
    cal = doc["calibration"]
    console.print(
        f"{cal['base']} fitted to {cal['runs']} run(s) of {cal['deployment']} "
        f"(files: {', '.join(f['path'] for f in cal['files'])}); every prediction is MODELED"
    )
    for term, t in fitted.terms.items():
        how = "fitted" if t["informed"] else "not shown by these runs: kept at the preset's value"
        console.print(f"  {term}: {t['before']:g} → {t['after']:g} ({how})")
    loo = fitted.leave_one_out
    cols = ["measured", "before", "after"] + (["leave-one-out"] if loo else [])
    table = Table(Column("run", overflow="fold"), "figure", *cols)
    for f in fitted.figures:
        cells = [_fig(f.measured), _err(f.before, f.measured), _err(f.after, f.measured)]
        table.add_row(runs[f.run].where, f.label, *(cells + ([_err(f.loo, f.measured)] if loo else [])))
    console.print(table)
    for i, notes in fitted.notes.items():
        for note in notes:
            console.print(f"  {runs[i].where}: {note}")
    before = statistics.median(abs(f.before / f.measured - 1) for f in fitted.figures)
    after = statistics.median(abs(f.after / f.measured - 1) for f in fitted.figures)
    console.print(f"median |error| over {len(fitted.figures)} figures: {before:.1%} on {cal['base']} → {after:.1%}")
    for kind, b in cal["error"].items():
        what = "leave-one-out" if b["leave_one_out"] else "the fit's own residual (fewer than 4 runs: no leave-one-out)"
        console.print(f"  {kind} band: ±{b['median']:.1%} ({what} median over {b['cases']}, worst {b['max']:.1%})")
    for why in fitted.objections:
        console.print(f"  the fit makes {cal['base']} worse: {why}")
    if out is not None:
        console.print(f"wrote {out}: a scenario runs on it as `engine: {out}` (or --set engine={out})")


def _fig(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _err(v: float, measured: float) -> str:
    return f"{_fig(v)} ({v / measured - 1:+.1%})"
