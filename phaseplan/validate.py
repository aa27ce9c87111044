"""`phaseplan validate`: the model against the corpus of published runs, each case's error with its source left out.

The table keeps a case to one line at 80 columns (issue 40): at that width it shows the case, its metric, the
published figure and the errors at the fit and with its source left out; a wider terminal (`WIDE` columns or
more) adds the GPU, engine, prediction and leave-one-out error. A case id too long for its column is shortened in
the middle ("…"), where ids of one page differ least; `--json` and `--out` carry every id whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from simulator.errors import InputError
from simulator.results.numbers import figure

WIDE = 120  # columns from which the table shows GPU, engine, prediction and leave-one-out error
METRIC = {  # a metric as the narrow table names it (the unit follows from the name)
    "output_tok_s": "out tok/s",
    "input_tok_s": "in tok/s",
    "total_tok_s": "tok/s",
    "request_throughput": "req/s",
    "mean_tpot_ms": "TPOT mean",
    "median_tpot_ms": "TPOT p50",
    "p99_tpot_ms": "TPOT p99",
    "mean_itl_ms": "ITL mean",
    "mean_ttft_ms": "TTFT mean",
    "median_ttft_ms": "TTFT p50",
    "p99_ttft_ms": "TTFT p99",
    "mean_e2el_ms": "E2E mean",
    "median_e2el_ms": "E2E p50",
    "duration_s": "duration",
    "step_ms": "step ms",
    "ratio": "ratio",
}


KIND = {"throughput": "tput", "tpot": "TPOT", "ttft": "TTFT", "e2el": "E2E"}
# A case in `--json`: what judges it (its figures and errors) and whose it is (`source`: its URL's place in the
# document's `source_urls`, each URL written once); where it is filed (GPU, weights, model class, regime), its engine
# version, unit and how it was measured are in `--out`'s CSV. Scripts read the document whole as one argument, which
# Linux caps at 128 KiB (`JSON_BUDGET`): the corpus must fit it as it grows.
JSON_FIELDS = (
    "id",
    "source_id",
    "source",
    "engine",
    "hardware",
    "metric",
    "published",
    "predicted",
    "error",
    "loo_error",
    "loso_error",
)
JSON_BUDGET = 128 * 1024
DIGITS = 6  # significant digits of a figure in --json; an error has one fewer decimal: far below any it states


def register(cli: click.Group, json_option: Callable[..., Any], console: Console, dump: Any) -> None:
    """Add `validate` to the `phaseplan` group (the CLI's shared options and printers passed in)."""

    @cli.command()
    @click.option("--case", "ids", multiple=True, metavar="ID", help="Only this case (repeatable); the fit uses these.")
    @json_option
    @click.option("--out", type=click.Path(path_type=Path), help="Also write validation.csv and validation.png here.")
    @click.option(
        "--suite",
        type=click.Path(file_okay=False, path_type=Path),
        help="A validation folder (cases/*.yaml, fit.yaml) [default: the bundled validation/].",
    )
    @click.option(
        "--coverage",
        is_flag=True,
        help="Print the coverage matrix (GPU × engine × weights × model class × regime: cases and sources); with "
        "--json, add it and the sources to the document.",
    )
    @click.option(
        "--write-bands", is_flag=True, help="Write the error bands run/max-rate/plan print (validation/bands.json)."
    )
    def validate(
        ids: tuple[str, ...], as_json: bool, out: Path | None, suite: Path | None, coverage: bool, write_bands: bool
    ) -> None:
        """The model against published SGLang/vLLM runs: per case published, predicted, error and the error with
        its whole source left out of the fit; then the summary and how often the printed bands hold."""
        from simulator.atomic import check_target, write_files
        from simulator.validation import bands
        from simulator.validation import suite as vsuite

        if write_bands and (ids or suite is not None):
            raise InputError("--write-bands: the bands come from the whole bundled corpus (no --case or --suite)")
        if out is not None:
            check_target(out, ["validation.csv", "validation.png"])
        res = vsuite.run(vsuite.SUITE if suite is None else suite, ids)
        if out is not None:
            write_files(
                {
                    out / "validation.csv": vsuite.to_csv(res["cases"]),
                    out / "validation.png": vsuite.chart(res["cases"]),
                }
            )
        if write_bands:
            write_files({bands.BANDS: json.dumps(bands.from_rows(res["cases"]), indent=1, sort_keys=True) + "\n"})
        if as_json:
            click.echo(dump(json_doc(res, coverage), compact=True))
            return
        if coverage:
            console.print(coverage_table(res["coverage"], bands.MIN_SOURCES, console.width))
            console.print()
            console.print(source_table(res["by_source"], console.width))
        else:
            console.print(case_table(res["cases"], console.width))
        console.print(summary_line(res))


def json_doc(res: dict[str, Any], coverage: bool) -> dict[str, Any]:
    """`--json`: each case's `JSON_FIELDS`, figures rounded (`DIGITS`), its source URL as its place in
    `source_urls`; the summary over the rounded figures (so it agrees with the cases exactly); the fitted values;
    with `--coverage` the matrix and the sources too."""
    from simulator.validation import suite as vsuite

    rounded = [{**r, **{k: _rounded(k, r[k]) for k in JSON_FIELDS}} for r in res["cases"]]
    urls = {url: i for i, url in enumerate(dict.fromkeys(r["source"] for r in rounded))}
    cases = [{k: urls[r[k]] if k == "source" else r[k] for k in JSON_FIELDS} for r in rounded]
    doc = {"cases": cases, "source_urls": list(urls), **vsuite.summary(rounded)}
    return doc | {k: res[k] for k in ("fitted", *(("coverage", "by_source") if coverage else ()))}


def _rounded(key: str, v: Any) -> Any:
    if not isinstance(v, float):
        return v
    return round(v, DIGITS - 1) if key.endswith("error") else float(f"{v:.{DIGITS}g}")


def case_table(rows: list[dict[str, Any]], width: int) -> Table:
    """One line a case at any width from 80 columns: see the module's docstring."""
    wide = width >= WIDE
    extra = [Column("GPU"), Column("engine"), Column("predicted", justify="right")] if wide else []
    tail = [Column("loo", justify="right")] if wide else []
    cols = [
        Column("case", no_wrap=True),
        *extra[:2],
        Column("metric", no_wrap=True),
        Column("published", justify="right"),
        *extra[2:],
        Column("error", justify="right"),
        *tail,
        Column(Text("source\nleft out"), justify="right"),  # a Text: the plain console would escape a str's break
    ]
    cells = [
        [
            r["id"],
            *([r["hardware"], r["engine"]] if wide else []),
            METRIC.get(r["metric"], r["metric"]),
            figure(r["published"]),
            *([figure(r["predicted"])] if wide else []),
            _pct(r["error"]),
            *([_pct(r["loo_error"])] if wide else []),
            _pct(r["loso_error"]),
        ]
        for r in rows
    ]
    others = [
        max(*map(len, str(c.header).split("\n")), *(len(row[i]) for row in cells)) for i, c in enumerate(cols) if i
    ]
    room = width - sum(others) - 2 * (len(cols) - 1)  # a space either side of each column but the outer edges
    for row in cells:
        row[0] = shorten(row[0], max(room, 12))
    t = _table(*cols)
    for row in cells:
        t.add_row(*row)
    return t


def shorten(text: str, width: int) -> str:
    """`text` in at most `width` characters: its middle replaced by "…" where it is longer."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def coverage_table(matrix: list[dict[str, Any]], min_sources: int, width: int) -> Table:
    """The coverage matrix, one line a cell: its axes, its cases and sources (a thin cell, with fewer than
    `min_sources`, marked "thin") and the median |error| of its cases with their source left out; from `WIDE`
    columns also the cases and sources of each kind of figure."""
    wide = width >= WIDE
    t = _table(
        "GPU",
        "engine",
        "weights",
        "class",
        "regime",
        Column("cases", justify="right"),
        Column("sources", justify="right"),
        Column("|loso|", justify="right"),
        *(["kinds: cases/sources"] if wide else []),
    )
    for c in matrix:
        thin = "" if c["sources"] >= min_sources else " thin"
        kinds = " ".join(f"{KIND[k]} {v['cases']}/{v['sources']}" for k, v in c["kinds"].items())
        axes = (c["hardware"], c["engine"], c["weights"], c["model_class"], c["regime"])
        counts = (str(c["cases"]), f"{c['sources']}{thin}", f"{c['median_abs_loso_error']:.1%}")
        t.add_row(*axes, *counts, *([kinds] if wide else []))
    return t


def source_table(sources: list[dict[str, Any]], width: int) -> Table:
    """One line a source: its id (shortened in the middle to fit), cases, cells and median |loso|."""
    rows = [(s["source_id"], str(s["cases"]), str(s["cells"]), f"{s['median_abs_loso_error']:.1%}") for s in sources]
    room = width - max(len("cases"), *(len(r[1]) for r in rows)) - len("cells") - len("|loso|") - 6
    t = _table(
        "source", Column("cases", justify="right"), Column("cells", justify="right"), Column("|loso|", justify="right")
    )
    for r in rows:
        t.add_row(shorten(r[0], max(room, 12)), *r[1:])
    return t


def _table(*cols: Column | str) -> Table:
    return Table(*cols, box=None, pad_edge=False, header_style="bold")


def _term(key: str) -> str:
    """A fitted value's name as printed: the term its path ends in, and the engine where engines fit it apart
    (`fit.keys`: `deployment.decode.request_latency_us@vllm-0.x` is `request_latency_us (vllm-0.x)`)."""
    path, _, engines = key.partition("@")
    term = path.rsplit(".", 1)[1]
    return f"{term} ({engines})" if engines else term


def summary_line(res: dict[str, Any]) -> str:
    fitted = ", ".join(f"{_term(k)} = {figure(v)}" for k, v in res["fitted"].items()) or "none"
    return (
        f"{len(res['cases'])} cases from {res['sources']} sources: median |error| {res['median_abs_error']:.1%}, "
        f"max {res['max_abs_error']:.1%}; with its source left out median {res['median_abs_loso_error']:.1%}, max "
        f"{res['max_abs_loso_error']:.1%} (leave-one-out {res['median_abs_loo_error']:.1%}); bands hold "
        f"{res['band_coverage']:.0%} of held-out errors (fitted: {fitted})"
    )


def _pct(e: float) -> str:
    return f"{e:+.1%}" if abs(e) < 10 else f"{e:+,.0%}"
