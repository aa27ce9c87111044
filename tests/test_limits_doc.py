"""docs/limits.md's tables of limits list every bounded number of the schema and every kind of input file with its
limits, as the code holds them: a bound added or changed without the table fails here (the failure prints the
rows the table should have)."""

from __future__ import annotations

import math
from pathlib import Path

from simulator import input_files
from simulator.config.bounds import BOUNDS
from simulator.config.bounds import format_number as num

ROOT = Path(__file__).resolve().parents[1]
WHERE = {  # schema class -> where its fields sit in a scenario
    "Scenario": "top level",
    "HardwareSpec": "`hardware`",
    "RooflineFit": "`hardware.roofline`",
    "ModelSpec": "`model`",
    "MLA": "`model.attention` (MLA)",
    "GQA": "`model.attention` (GQA)",
    "Indexer": "`model.indexer`",
    "MoE": "`model.moe`",
    "FormatRule": "`model.formats.*`, `model.schemes.*`",
    "EngineSpec": "`engine`",
    "Calibration": "`engine.calibration`",
    "CalibrationFile": "`engine.calibration.files[]`",
    "CalibrationTerm": "`engine.calibration.terms.*`",
    "CalibrationError": "`engine.calibration.error.*`",
    "Pool": "`deployment.<pool>`",
    "Speculative": "`deployment.<pool>.speculative`",
    "StorageTier": "`deployment.<pool>.storage_tier`",
    "Transfer": "`deployment.transfer`",
    "Integrity": "`integrity`",
    "Routing": "`routing`",
    "ScorerWeights": "`routing.weights`",
    "Traffic": "`traffic`",
    "BenchRandom": "`traffic.bench_random`",
    "Length": "`traffic.prompt_tokens`, `traffic.output_tokens`",
    "Diurnal": "`traffic.diurnal`",
    "Sessions": "`traffic.sessions`",
    "Agentic": "`traffic.agentic`",
    "Retries": "`traffic.retries`",
    "SLO": "`slo`",
    "Cost": "`cost`",
}
SUPER = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def short(v: float) -> str:
    """4,096; 10⁶; 10⁻³; 2⁶³−1 — as docs/limits.md writes numbers."""
    if v == 2**63 - 1:
        return "2⁶³−1"
    if v and float(v) == 10 ** round(math.log10(abs(v))) and not 1e-2 <= abs(v) <= 1e4:
        return "10" + str(round(math.log10(abs(v)))).translate(SUPER)
    return num(v)


def schema_rows() -> list[str]:
    rows = []
    for cls, where in WHERE.items():
        fields = sorted((f, b) for (c, f), b in BOUNDS.items() if c == cls)  # by name: BOUNDS' order may move
        if fields:
            text = "; ".join(f"`{f}` {short(lo)}–{short(hi)}" for f, (lo, hi, _) in fields)
            rows.append(f"| {where} | {text} |")
    return rows


def file_rows() -> list[str]:
    rows = []
    for k in input_files.KINDS:
        size = input_files._bytes(k.max_bytes)
        lines = f"; {k.max_lines:,} lines of at most {input_files._bytes(k.max_line_bytes or 0)}" if k.max_lines else ""
        rows.append(f"| {k.what} | {size}{lines} |")
    return rows


def work_rows() -> list[str]:
    """The work table's rows for what many runs, a validation suite, a calibration and Ray may take (round three)."""
    from simulator.budget import Limits
    from simulator.calibration import engine_fit
    from simulator.planning import ray_cluster
    from simulator.validation import fit, suite

    lim, cal = Limits(), engine_fit.LIMITS
    each = f"1 + {fit.ITERATIONS} × (parameters + {fit.BACKTRACKS}) + parameters + 1"
    return [
        f"| sweep points or `run --repeats` runs; requests over all of them | {num(lim.max_points)}; "
        f"{num(lim.max_sweep_requests)} | same |",
        f"| `validate --suite`: case files; `fit.yaml` parameters; a served case (as a run); a batch case (on a pool "
        "its scenario has, within that pool's KV cache per rank, at most `max_running` prompts a step); requests "
        f"over the suite's simulations (each served case run up to {each} times by the fit) | "
        f"{num(suite.MAX_CASES)}; {fit.MAX_PARAMETERS}; the limits of a run; the pool's; "
        f"{num(suite.MAX_REQUESTS)} | error naming the case file, its line and field |",
        f"| `calibrate`: benchmark runs, counted as the files are read; requests and output tokens of one run; "
        f"requests over the fit's simulations (each run simulated up to 2 + terms + "
        f"{each.replace('parameters', 'terms')} times) | "
        f"{engine_fit.MAX_RUNS}; {num(cal.max_requests)} and {short(cal.max_output_tokens)}; "
        f"{num(cal.max_sweep_requests)} | error naming the file and line, or the run, or the estimate |",
        f"| `--backend ray`: the wait for `RAY_ADDRESS`'s cluster (a TCP answer, then Ray's own connection; "
        f"SIGTERM honoured while it waits) | {ray_cluster.CONNECT_S:g} s | error naming the address |",
    ]


def test_limits_page_lists_every_bound_and_file_kind() -> None:
    page = (ROOT / "docs" / "limits.md").read_text()
    missing = [row for row in schema_rows() + file_rows() + work_rows() if row not in page]
    assert not missing, "docs/limits.md's limits tables lack (or differs from) these rows:\n" + "\n".join(missing)
    assert set(WHERE) >= {c for c, _ in BOUNDS}, "a schema class with bounds has no place in WHERE"
