"""Numbers as the page prints them: with their unit, grouped thousands, no raw floats."""

from __future__ import annotations

import json
import shlex
from typing import Any

from simulator.results.numbers import figure


def num(value: Any, unit: str = "") -> str:
    """`value` with `unit`; None (nothing to measure, e.g. no request finished) is a dash."""
    if value is None:
        return "–"
    if unit == "%":
        return f"{value:.1%}"
    if unit == "$/M tok":
        return f"${value:,.3f} /M tok"
    if unit == "$":  # a metric labelled "cost per M … tokens": the value alone, so a narrow column shows it whole
        return f"${value:,.3f}"
    if isinstance(value, bool):
        return "on" if value else "off"
    text = f"{value:,}" if isinstance(value, int) else figure(value)  # the CLI's formatter: never an exponent
    return f"{text} {unit}".rstrip()


def metric(where: Any, label: str, value: str, note: str | None = None, help: str | None = None) -> None:
    """A headline number with `note` (its error band, say) in small grey text right under it, inside its box."""
    if note is None:
        where.metric(label, value, help=help)
    else:
        where.metric(label, value, delta=note, delta_color="off", delta_arrow="off", help=help)


def signed(value: float | None, unit: str = "") -> str:
    """A change: its sign always shown."""
    if value is None:
        return "–"
    if unit == "%":
        return f"{value * 100:+.1f} pt".replace("-", "−")
    if unit == "$/M tok":
        return f"{value:+,.3f} $/M tok".replace("-", "−")
    return ("+" if value >= 0 else "−") + num(abs(value), unit)


def source_tag(result: dict[str, Any]) -> str:
    """A short tag for a metric's help text."""
    p = result["provenance"]
    if p.get("profile_source") == "measured":
        return f"measured profile on {p.get('device')} ({p.get('file')})"
    return f"modeled ({p.get('device')}, {p.get('file') or 'roofline'}); no kernel measured"


def cli_line(verb: str, source: str, sets: dict[str, Any], extra: str = "") -> str:
    """The `phaseplan` command that computes what the page shows: every knob a `--set` (mappings as JSON), each
    word quoted for the shell (a value may come from an uploaded file)."""
    parts = [f"phaseplan {verb} {shlex.quote(source)}", *([extra] if extra else [])]
    for k, v in sets.items():
        value = "null" if v is None else json.dumps(v) if isinstance(v, dict) else v
        parts.append(f"--set {shlex.quote(f'{k}={value}')}")
    return " ".join(parts)
