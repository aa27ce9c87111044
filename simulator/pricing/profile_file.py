"""A profile file read and checked: every number where it enters, each defect one line naming the file and the
entry (docs/ops.md has the format).

A profile's times price every step of a run, so a time that is a string, negative, infinite or 1e300, a shape
value that is a list, or a p10 above its median would become a traceback, a negative TPOT or a 300-digit
latency far from here. JSON's `NaN` and `Infinity` are read as the non-finite numbers they are and refused like
any other time out of range.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator import input_files
from simulator.config.bounds import DEFAULT_LIMIT, PROFILE_US
from simulator.config.bounds import format_number as num
from simulator.errors import InputError
from simulator.pricing.ops import FAMILIES

MAX_TEXT = 100  # characters of a categorical shape value (a format name, "any")
SPREAD_KEYS = ("p10_us", "p90_us")


@dataclass(frozen=True)
class Entry:
    """One measured (or modeled) shape: its time and the spread of its timings (p10 = median = p90 if none)."""

    shape: Mapping[str, Any]
    median_us: float
    p10_us: float
    p90_us: float


@dataclass(frozen=True)
class ProfileFile:
    device: str
    source: str
    kernels: dict[str, list[Entry]]
    date: str | None
    measured_by: dict[str, Any] | None
    interpolate_gemm: bool


def parse(path: str | Path) -> dict[str, Any]:
    """The file's JSON object, read under `input_files.PROFILE`'s limits."""
    text = input_files.read_text(path, input_files.PROFILE)
    try:
        data = json.loads(text, parse_constant=float)  # NaN, Infinity: refused where the number is checked
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: line {e.lineno}: not JSON ({e.msg})") from None
    except RecursionError:
        raise InputError(f"{path}: not a profile (JSON nested too deeply)") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise InputError(f"{path}: not a profile ({str(e).split(':')[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a profile must be a JSON object")
    return data


Axes = Mapping[str, frozenset[str]]  # per op family a table can be read for: its numeric (axis) shape keys


def read(path: str | Path, axes: Axes) -> ProfileFile:
    return check(parse(path), path, axes)


def check(data: dict[str, Any], path: str | Path, axes: Axes) -> ProfileFile:
    """The parsed document validated: any defect is one InputError naming the file (and the entry)."""
    missing = [k for k in ("device", "source", "kernels") if k not in data]
    if missing:
        raise InputError(f"{path}: profile lacks {', '.join(missing)}")
    if data["source"] not in ("measured", "modeled"):
        raise InputError(f"{path}: source must be 'measured' or 'modeled', got {_short(data['source'])}")
    if not isinstance(data["device"], str) or not 0 < len(data["device"]) <= 200:
        raise InputError(f"{path}: device must be the device's name (text), got {_short(data['device'])}")
    date = data.get("date")
    if date is not None and not isinstance(date, str):
        raise InputError(f"{path}: date must be text, got {_short(date)}")
    if not isinstance(data["kernels"], dict):
        raise InputError(f"{path}: kernels must map op family → list of entries")
    measured_by = data.get("measured_by")
    if measured_by is not None and not (isinstance(measured_by, dict) and isinstance(measured_by.get("summary"), str)):
        raise InputError(f"{path}: measured_by must be an object with a 'summary' line")
    interpolate = data.get("interpolate", {})
    if interpolate not in ({}, {"gemm": ["n", "k"]}):
        raise InputError(f'{path}: interpolate may only be {{"gemm": ["n", "k"]}}')
    kernels = {f: _entries(path, f, es, axes) for f, es in data["kernels"].items()}
    return ProfileFile(data["device"], data["source"], kernels, date, measured_by, bool(interpolate))


def _entries(path: str | Path, family: str, entries: Any, axes: Axes) -> list[Entry]:
    where = f"{path}: kernels.{family}"
    if family not in axes:
        known = ", ".join(f for f in FAMILIES if f in axes)
        raise InputError(f"{where}: unknown or unmeasurable op family (known: {_short(known, 400)})")
    if isinstance(entries, dict) and set(entries) == {"columns", "rows"}:
        entries = _rows_as_entries(where, family, entries["columns"], entries["rows"])
    if not isinstance(entries, list):
        raise InputError(f"{where}: expected a list of entries")
    keys = set(FAMILIES[family])
    numeric = axes[family]
    out = []
    for i, e in enumerate(entries):
        shape = e.get("shape") if isinstance(e, dict) else None
        if not isinstance(shape, dict) or set(shape) != keys:
            raise InputError(f"{where}[{i}]: shape must have exactly the keys {', '.join(FAMILIES[family])}")
        for k in FAMILIES[family]:
            v = shape[k]
            if k in numeric:
                if not _number(v) or not 0 <= v <= DEFAULT_LIMIT:
                    raise InputError(
                        f"{where}[{i}].shape.{k}: must be a number in [0, {num(DEFAULT_LIMIT)}], got {_short(v)}"
                    )
            elif not (isinstance(v, str) and len(v) <= MAX_TEXT) and not (
                _number(v) and -DEFAULT_LIMIT <= v <= DEFAULT_LIMIT
            ):
                raise InputError(
                    f"{where}[{i}].shape.{k}: must be a number or a name (text of at most {MAX_TEXT} "
                    f"characters), got {_short(v)}"
                )
        median = _time(where, i, "median_us", e.get("median_us"))
        p10 = _time(where, i, "p10_us", e["p10_us"]) if "p10_us" in e else median
        p90 = _time(where, i, "p90_us", e["p90_us"]) if "p90_us" in e else median
        if not p10 <= median <= p90:
            raise InputError(
                f"{where}[{i}]: needs p10_us <= median_us <= p90_us, got {num(p10)}, {num(median)}, {num(p90)}"
            )
        out.append(Entry(shape, median, p10, p90))
    return out


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _time(where: str, i: int, key: str, v: Any) -> float:
    lo, hi, what = PROFILE_US
    if not _number(v) or not lo <= v <= hi:
        raise InputError(f"{where}[{i}].{key}: must be a number of {what} in [{num(lo)}, {num(hi)}], got {_short(v)}")
    return float(v)


def _short(v: Any, n: int = 40) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _rows_as_entries(where: str, family: str, columns: Any, rows: Any) -> list[dict[str, Any]]:
    """The compact form of a large table, {"columns": [shape keys…, "median_us"], "rows": [[values…], …]}, as
    entries (then validated like any)."""
    want = {*FAMILIES[family], "median_us"}
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns) or set(columns) != want:
        raise InputError(f"{where}: columns must be the shape keys {', '.join(FAMILIES[family])} and median_us")
    if len(columns) != len(want):
        raise InputError(f"{where}: columns must name each shape key once, and median_us")
    if not isinstance(rows, list):
        raise InputError(f"{where}: rows must be a list")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, list) or len(r) != len(columns):
            raise InputError(f"{where}.rows[{i}]: expected {len(columns)} values")
        e = dict(zip(columns, r, strict=True))
        out.append({"median_us": e.pop("median_us"), "shape": e})
    return out
