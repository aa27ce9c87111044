"""README's table of limits lists every bounded number of the schema and every kind of input file with its
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
    "Transfer": "`deployment.transfer`",
    "Integrity": "`integrity`",
    "Routing": "`routing`",
    "ScorerWeights": "`routing.weights`",
    "Traffic": "`traffic`",
    "Length": "`traffic.prompt_tokens`, `traffic.output_tokens`",
    "Diurnal": "`traffic.diurnal`",
    "Sessions": "`traffic.sessions`",
    "Retries": "`traffic.retries`",
    "SLO": "`slo`",
    "Cost": "`cost`",
}
SUPER = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def short(v: float) -> str:
    """4,096; 10⁶; 10⁻³; 2⁶³−1 — as the README writes numbers."""
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


def test_readme_lists_every_bound_and_file_kind() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [row for row in schema_rows() + file_rows() if row not in readme]
    assert not missing, "README's limits table lacks (or differs from) these rows:\n" + "\n".join(missing)
    assert set(WHERE) >= {c for c, _ in BOUNDS}, "a schema class with bounds has no place in WHERE"
