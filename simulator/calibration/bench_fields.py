"""Typed, ranged reading of one benchmark document's fields: every defect is one line naming file, place, field.

A benchmark file is someone else's output and may be partial or hostile: a field missing, a string where a
number belongs, NaN or Infinity (Python's json reads both), a negative time, a throughput of 1e300. Each read
names the expected kind, whose physical range is in RANGES; the first value outside it stops the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.calibration.bench_run import Scalar
from simulator.config.bounds import TOKENS
from simulator.errors import InputError

MAX_TEXT = 4096  # characters of a stated string (a model path, a backend name)

# kind -> (low, high, what it is); a value must lie in [low, high]
RANGES: dict[str, tuple[float, float, str]] = {
    "latency_ms": (0.01, 1e8, "ms of a request latency (10 µs to about 28 hours)"),
    "step_ms": (0.01, 1e6, "ms per output token (10 µs to 1,000 s)"),
    "duration_s": (1e-3, 1e8, "seconds of benchmark (1 ms to about 3 years)"),
    "req_s": (1e-9, 1e7, "requests per second"),
    "tok_s": (1e-9, 1e9, "tokens per second"),
    "tokens": (1e-9, TOKENS, "tokens per request"),
    "total_tokens": (0, 1e15, "tokens"),
    "count": (0, 1e12, "requests"),
    "rate": (1e-6, 1e7, "requests per second"),
    "concurrency": (1, 1 << 24, "requests in flight"),
    "ratio": (0, 1, "range ratio"),
    "burstiness": (1e-3, 1e3, "gamma shape of inter-arrival gaps"),
    "accept_length": (1, 64, "tokens accepted per speculative verify step"),
    "timestamp_s": (1e8, 1e11, "Unix seconds"),
}


def short(v: Any) -> str:
    """A value as an error message shows it: repr (so a newline cannot break the one line), at most 40 chars."""
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


@dataclass(frozen=True)
class Where:
    """The file and the place in it (JSONL line, run index) that error messages name."""

    path: str
    line: int | None = None
    index: int | None = None

    def error(self, field: str, why: str) -> InputError:
        place = f"line {self.line}: " if self.line is not None else ""
        return InputError(f"{self.path}: {place}{field}: {why}" if field else f"{self.path}: {place}{why}")


class Doc:
    """A JSON object being read, with the dotted path that leads to it."""

    def __init__(self, data: dict[str, Any], where: Where, prefix: str = "") -> None:
        self.data = data
        self.where = where
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def error(self, key: str, why: str) -> InputError:
        return self.where.error(self.name(key), why)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def sub(self, key: str, required: bool = False) -> Doc | None:
        v = self.data.get(key)
        if v is None:
            if required:
                raise self.error(key, "missing (required)")
            return None
        if not isinstance(v, dict):
            raise self.error(key, f"expected an object, got {type(v).__name__} {short(v)}")
        return Doc(v, self.where, f"{self.name(key)}.")

    def need(self, key: str) -> Doc:
        """A required nested object."""
        sub = self.sub(key, required=True)
        assert sub is not None
        return sub

    def items(self, key: str, required: bool = False) -> list[Doc]:
        """A list of objects, each a Doc named key[i]."""
        v = self.data.get(key)
        if v is None:
            if required:
                raise self.error(key, "missing (required)")
            return []
        if not isinstance(v, list):
            raise self.error(key, f"expected a list, got {type(v).__name__} {short(v)}")
        out = []
        for i, item in enumerate(v):
            if not isinstance(item, dict):
                raise self.error(f"{key}[{i}]", f"expected an object, got {type(item).__name__} {short(item)}")
            out.append(Doc(item, Where(self.where.path, self.where.line, i), f"{self.name(key)}[{i}]."))
        return out

    def num(self, key: str, kind: str, required: bool = False, zero_absent: bool = False) -> float | None:
        """A finite number in RANGES[kind]. `zero_absent`: an exact 0 means "not measured" (the tools write
        `np.mean(values or 0)`, so an empty list reads 0) and returns None."""
        v = self.data.get(key)
        if v is None:
            if required:
                raise self.error(key, "missing (required)")
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.error(key, f"expected a number, got {type(v).__name__} {short(v)}")
        if zero_absent and v == 0:
            return None
        return check(self, key, float(v), kind)

    def need_num(self, key: str, kind: str) -> float:
        v = self.num(key, kind, required=True)
        assert v is not None
        return v

    def need_int(self, key: str, kind: str) -> int:
        v = self.integer(key, kind, required=True)
        assert v is not None
        return v

    def finite(self, key: str, required: bool = False) -> float | None:
        """A finite number of any size (for values scaled by a stated unit before their range is checked)."""
        v = self.data.get(key)
        if v is None:
            if required:
                raise self.error(key, "missing (required)")
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.error(key, f"expected a number, got {type(v).__name__} {short(v)}")
        if not math.isfinite(v):
            raise self.error(key, f"{v} is not a finite number")
        return float(v)

    def integer(self, key: str, kind: str, required: bool = False) -> int | None:
        """A whole number in RANGES[kind] (a float with no fraction counts: GenAI-Perf averages its counts)."""
        v = self.num(key, kind, required)
        if v is None:
            return None
        if not v.is_integer():
            raise self.error(key, f"expected a whole number, got {short(self.data[key])}")
        return int(v)

    def text(self, key: str, required: bool = False) -> str | None:
        v = self.data.get(key)
        if v is None:
            if required:
                raise self.error(key, "missing (required)")
            return None
        if not isinstance(v, str):
            raise self.error(key, f"expected a string, got {type(v).__name__} {short(v)}")
        if len(v) > MAX_TEXT:
            raise self.error(key, f"a string of {len(v):,} characters (at most {MAX_TEXT:,})")
        return v

    def first_text(self, key: str) -> str | None:
        """A string, or the first of a list of strings (GenAI-Perf's `model` / `model_names` take several)."""
        v = self.data.get(key)
        if isinstance(v, list):
            if not v:
                return None
            if not isinstance(v[0], str):
                raise self.error(f"{key}[0]", f"expected a string, got {type(v[0]).__name__} {short(v[0])}")
            return Doc({key: v[0]}, self.where, self.prefix).text(key)
        return self.text(key)

    def rate(self, key: str) -> float | None:
        """A request rate: a number, or infinity (SGLang's json.dumps writes `Infinity`, vLLM the string
        "inf") for "send every request at once"."""
        v = self.data.get(key)
        if v == "inf" or (isinstance(v, float) and v == math.inf):
            return math.inf
        return self.num(key, "rate")

    def scalars(self) -> dict[str, Scalar]:
        """The object's top-level scalar values (server arguments): nested values are left out."""
        out: dict[str, Scalar] = {}
        for k, v in self.data.items():
            if isinstance(v, str):
                if len(v) > MAX_TEXT:
                    raise self.error(k, f"a string of {len(v):,} characters (at most {MAX_TEXT:,})")
                out[k] = v
            elif v is None or isinstance(v, bool | int | float):
                out[k] = v
        return out


def check(doc: Doc, key: str, v: float, kind: str) -> float:
    lo, hi, what = RANGES[kind]
    if not math.isfinite(v):
        raise doc.error(key, f"{v} is not a finite number")
    if not lo <= v <= hi:
        raise doc.error(key, f"{v:g} is out of range: {what} must lie in [{lo:g}, {hi:g}]")
    return v
