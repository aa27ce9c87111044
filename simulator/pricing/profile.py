"""Kernel profiles: measured (or modeled) tables of op time by shape, and how to read between their points.

Per family, the entries whose categorical keys (formats, n, k, heads, …) equal the op's form one table over
one or two numeric axes. Times are interpolated linearly in the axis values: kernel times are close to
affine in batch, context, rows or pages between neighbouring profiled points (a floor plus bytes or FLOPs
that grow linearly), which linear interpolation reproduces exactly and log-log does not; the table's own
points come back exactly. Two-axis tables are read as columns: at a profiled outer value (decode batch,
chunk tokens, touched experts) along that column's inner axis; between two profiled outer values by
blending the two neighbouring columns. Anything outside a table is None here — the cost model then prices
the op on the roofline and counts it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.scenario import Scenario
from simulator.config.specs import HardwareSpec
from simulator.errors import InputError
from simulator.pricing.ops import COLLECTIVES, FAMILIES

Point = Callable[[Mapping[str, Any]], Any]


def _key(name: str) -> Point:
    return lambda s: s[name]


@dataclass(frozen=True)
class Axes:
    """A family's interpolation axes: `outer` (a key, or None for one-axis tables) and the inner value."""

    outer: str | None
    inner_keys: tuple[str, ...]  # the shape keys the inner value is made of
    inner: Point


AXES: dict[str, Axes] = {
    "decode_attention_mla": Axes("batch", ("context",), _key("context")),
    "decode_attention_gqa": Axes("batch", ("context",), _key("context")),
    "decode_indexer": Axes("batch", ("context",), _key("context")),
    # Prefill reads along the prefix (context before the chunk), so a chunk with no prefix lies inside the
    # table of every chunk size.
    "prefill_attention": Axes("tokens", ("context",), lambda s: s["context"] - s["tokens"]),
    "prefill_indexer": Axes("tokens", ("context",), lambda s: s["context"] - s["tokens"]),
    # Grouped expert GEMMs read along tokens per touched expert, which every expert count shares from 1 up.
    "moe_gemm": Axes("experts", ("tokens",), lambda s: s["tokens"] / s["experts"]),
    "gemm": Axes(None, ("m",), _key("m")),
    "kv_write": Axes(None, ("tokens",), _key("tokens")),
    "integrity_check": Axes(None, ("pages",), _key("pages")),
    "elementwise": Axes(None, ("bytes",), _key("bytes")),
}


def categorical(family: str, shape: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    ax = AXES[family]
    numeric = {ax.outer, *ax.inner_keys}
    return tuple(sorted((k, v) for k, v in shape.items() if k not in numeric))


@dataclass(frozen=True)
class Curve:
    """Time along the inner axis at one outer value: piecewise linear through the profiled points."""

    x: np.ndarray
    us_at: np.ndarray

    def us(self, x: Any) -> np.ndarray:
        """Microseconds at inner values `x`; NaN outside the profiled range."""
        return np.interp(x, self.x, self.us_at, left=np.nan, right=np.nan)

    def scaled(self, factor: float) -> Curve:
        return Curve(self.x, self.us_at * factor)


@dataclass
class Table:
    """One family's entries with equal categorical keys: columns by outer value (0 for one-axis tables)."""

    columns: dict[float, Curve]
    outers: np.ndarray = field(init=False)
    _curves: dict[float, Curve | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.outers = np.array(sorted(self.columns))

    def curve(self, outer: float) -> Curve | None:
        if outer not in self._curves:
            self._curves[outer] = self._blend(outer)
        return self._curves[outer]

    def _blend(self, outer: float) -> Curve | None:
        if outer in self.columns:
            return self.columns[outer]
        i = int(np.searchsorted(self.outers, outer))
        if i == 0 or i == len(self.outers):
            return None
        o0, o1 = self.outers[i - 1], self.outers[i]
        c0, c1 = self.columns[o0], self.columns[o1]
        lo, hi = max(c0.x[0], c1.x[0]), min(c0.x[-1], c1.x[-1])
        if lo > hi:
            return None
        w = (outer - o0) / (o1 - o0)
        x = np.union1d(c0.x, c1.x)
        x = x[(x >= lo) & (x <= hi)]
        return Curve(x, (1 - w) * np.interp(x, c0.x, c0.us_at) + w * np.interp(x, c1.x, c1.us_at))

    def us(self, outer: float, inner: Any) -> Any:
        """Microseconds at inner value(s) `inner` for one outer value, NaN where the table does not reach.

        The blend of the neighbouring columns evaluated at `inner` (what `curve(outer)` holds there), without
        building the blended curve: outer values such as chunk sizes rarely repeat.
        """
        column = self.columns.get(outer)
        if column is not None:
            return column.us(inner)
        i = int(np.searchsorted(self.outers, outer))
        if i == 0 or i == len(self.outers):
            return np.full(np.shape(inner), np.nan)
        o0, o1 = self.outers[i - 1], self.outers[i]
        w = (outer - o0) / (o1 - o0)
        return (1 - w) * self.columns[o0].us(inner) + w * self.columns[o1].us(inner)

    def lookup(self, outer: float, inner: float) -> float | None:
        t = float(self.us(outer, inner))
        return None if np.isnan(t) else t


def _build(family: str, entries: list[tuple[Mapping[str, Any], float]]) -> Table:
    ax = AXES[family]
    times: dict[float, dict[float, list[float]]] = {}
    for shape, us in entries:
        outer = float(shape[ax.outer]) if ax.outer else 0.0
        times.setdefault(outer, {}).setdefault(float(ax.inner(shape)), []).append(us)
    columns = {}
    for outer, col in times.items():
        xs = sorted(col)  # a shape profiled twice counts once, at its mean
        columns[outer] = Curve(np.array(xs), np.array([sum(col[x]) / len(col[x]) for x in xs]))
    return Table(columns)


class Profile:
    """A profile file's tables plus where they came from; `roofline()` is the empty, modeled one."""

    def __init__(self, device: str, source: str, kernels: Mapping[str, list[tuple[Mapping[str, Any], float]]],
                 file: str | None = None, date: str | None = None) -> None:
        self.device, self.source, self.file, self.date = device, source, file, date
        grouped: dict[tuple[str, tuple], list[tuple[Mapping[str, Any], float]]] = {}
        for family, entries in kernels.items():
            for shape, us in entries:
                grouped.setdefault((family, categorical(family, shape)), []).append((shape, us))
        self.tables = {key: _build(key[0], entries) for key, entries in grouped.items()}

    @classmethod
    def roofline(cls, hw: HardwareSpec) -> Profile:
        return cls(hw.name, "modeled", {})

    @classmethod
    def for_scenario(cls, sc: Scenario, base_dir: Path | None = None) -> Profile:
        """The scenario's `profile`: `roofline`, or a file (relative to the scenario's folder, else cwd)."""
        if sc.profile == "roofline":
            assert isinstance(sc.hardware, HardwareSpec)
            return cls.roofline(sc.hardware)
        path = Path(sc.profile)
        if not path.is_absolute() and base_dir is not None and (base_dir / path).is_file():
            path = base_dir / path
        return cls.load(path)

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read and validate a profile JSON (docs/ops.md); any defect is one InputError naming the file."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as e:
            raise InputError(f"{path}: cannot read profile ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: a profile must be a JSON object")
        missing = [k for k in ("device", "source", "kernels") if k not in data]
        if missing:
            raise InputError(f"{path}: profile lacks {', '.join(missing)}")
        if data["source"] not in ("measured", "modeled"):
            raise InputError(f"{path}: source must be 'measured' or 'modeled', got {data['source']!r}")
        if not isinstance(data["kernels"], dict):
            raise InputError(f"{path}: kernels must map op family → list of entries")
        kernels = {f: _entries(path, f, es) for f, es in data["kernels"].items()}
        return cls(str(data["device"]), data["source"], kernels, str(path), data.get("date"))

    def provenance(self) -> dict[str, Any]:
        return {"profile_source": self.source, "device": self.device, "file": self.file, "date": self.date}

    def table(self, family: str, shape: Mapping[str, Any]) -> Table | None:
        if not self.tables or family not in AXES:
            return None
        return self.tables.get((family, categorical(family, shape)))

    def lookup(self, family: str, shape: Mapping[str, Any]) -> float | None:
        """Microseconds of one op from the tables, or None where no table covers it."""
        t = self.table(family, shape)
        if t is None:
            return None
        ax = AXES[family]
        return t.lookup(float(shape[ax.outer]) if ax.outer else 0.0, float(ax.inner(shape)))

    def curve(self, family: str, shape: Mapping[str, Any]) -> Curve | None:
        """The table's time along the inner axis at this shape's outer value (for vectorised pricing)."""
        t = self.table(family, shape)
        ax = AXES[family]
        return None if t is None else t.curve(float(shape[ax.outer]) if ax.outer else 0.0)


def _entries(path: str | Path, family: str, entries: Any) -> list[tuple[Mapping[str, Any], float]]:
    where = f"{path}: kernels.{family}"
    if family not in AXES:
        known = ", ".join(f for f in FAMILIES if f not in COLLECTIVES)
        raise InputError(f"{where}: unknown or unmeasurable op family (known: {known})")
    if not isinstance(entries, list):
        raise InputError(f"{where}: expected a list of entries")
    keys = set(FAMILIES[family])
    ax = AXES[family]
    numeric = {k for k in (ax.outer, *ax.inner_keys) if k}
    out = []
    for i, e in enumerate(entries):
        shape = e.get("shape") if isinstance(e, dict) else None
        us = e.get("median_us") if isinstance(e, dict) else None
        if not isinstance(shape, dict) or set(shape) != keys:
            raise InputError(f"{where}[{i}]: shape must have exactly the keys {', '.join(FAMILIES[family])}")
        if any(not isinstance(shape[k], int | float) or shape[k] < 0 for k in numeric):
            raise InputError(f"{where}[{i}]: {', '.join(sorted(numeric))} must be non-negative numbers")
        if not isinstance(us, int | float) or isinstance(us, bool) or not us > 0:
            raise InputError(f"{where}[{i}]: median_us must be a positive number, got {us!r}")
        out.append((shape, float(us)))
    return out
