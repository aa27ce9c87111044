"""Kernel profiles: measured (or modeled) tables of op time by shape, and how to read between their points.

Per family, the entries whose categorical keys (formats, n, k, heads, …) equal the op's form one table over
one or two numeric axes. Times are interpolated linearly in the axis values: kernel times are close to
affine in batch, context, rows or pages between neighbouring profiled points (a floor plus bytes or FLOPs
that grow linearly), which linear interpolation reproduces exactly and log-log does not; the table's own
points come back exactly. Two-axis tables are read as columns: at a profiled outer value (decode batch,
chunk tokens, touched experts) along that column's inner axis; between two profiled outer values by
blending the two neighbouring columns. Anything outside a table is None here — the cost model then prices
the op on the roofline and counts it.

Two readings a profile opts into, for third-party tables measured on their own grids (docs/ops.md): a key
written as "any" (page size, the BF16 cache layout) matches every value of that key; and `interpolate:
{"gemm": ["n", "k"]}` lets a GEMM whose (n, k) was not measured be read between the four measured (n, k)
points around it — a derived number, which `provenance()` counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.scenario import Pool, Scenario
from simulator.config.specs import HardwareSpec
from simulator.pricing import profile_file
from simulator.pricing.step_overhead import StepOverhead

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
    "decode_attention_triton": Axes("batch", ("context",), _key("context")),
    "decode_indexer": Axes("batch", ("context",), _key("context")),
    # Prefill reads along the prefix (context before the chunk), so a chunk with no prefix lies inside the
    # table of every chunk size.
    "prefill_attention": Axes("tokens", ("context",), lambda s: s["context"] - s["tokens"]),
    "prefill_attention_triton": Axes("tokens", ("context",), lambda s: s["context"] - s["tokens"]),
    "prefill_indexer": Axes("tokens", ("context",), lambda s: s["context"] - s["tokens"]),
    # Grouped expert GEMMs read along tokens per touched expert, which every expert count shares from 1 up.
    "moe_gemm": Axes("experts", ("tokens",), lambda s: s["tokens"] / s["experts"]),
    "gemm": Axes(None, ("m",), _key("m")),
    "kv_write": Axes(None, ("tokens",), _key("tokens")),
    "integrity_check": Axes(None, ("pages",), _key("pages")),
    "elementwise": Axes(None, ("bytes",), _key("bytes")),
    "fused_moe": Axes(None, ("tokens",), _key("tokens")),
    # Collectives are measured by third parties (several GPUs at once), never by phaseplan's profiler.
    "allreduce": Axes(None, ("bytes",), _key("bytes")),
    "allgather": Axes(None, ("bytes",), _key("bytes")),
}
ANY = "any"  # a key the measurement did not vary: the table holds for every value of it
WILDCARDS = (("page_size",), ("layout",), ("layout", "page_size"))  # tried in this order after an exact miss


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

    def __init__(
        self,
        device: str,
        source: str,
        kernels: Mapping[str, list[tuple[Mapping[str, Any], float]]],
        file: str | None = None,
        date: str | None = None,
        measured_by: Mapping[str, Any] | None = None,
        interpolate_gemm: bool = False,
    ) -> None:
        self.device, self.source, self.file, self.date = device, source, file, date
        self.measured_by = dict(measured_by) if measured_by else None  # a third party's measurements: whose
        # where the roofline's factors came from when a hardware preset carries fitted ones (ops without a table
        # are priced by it): set by `for_scenario`, None for judged factors
        self.roofline_fit: str | None = None
        # by model: what a device executor spends per step beyond the priced kernels, measured by the profiler on
        # probe steps (`step_overhead.py`; `compare --device cpu` measures it in the run), priced at the step seam
        self.step_overhead: dict[str, StepOverhead] = {}
        grouped: dict[tuple[str, tuple], list[tuple[Mapping[str, Any], float]]] = {}
        for family, entries in kernels.items():
            for shape, us in entries:
                grouped.setdefault((family, categorical(family, shape)), []).append((shape, us))
        self.tables = {key: _build(key[0], entries) for key, entries in grouped.items()}
        self._wild = any(v == ANY for _, key in self.tables for _, v in key)
        self._resolved: dict[tuple[str, tuple], Table | None] = {}
        self.derived: set[tuple] = set()  # GEMM forms read between measured (n, k) points
        self._gemm_grid: dict[tuple, tuple[list[int], list[int]]] = {}
        if interpolate_gemm:
            grid: dict[tuple, tuple[set[int], set[int]]] = {}
            for family, key in self.tables:
                if family == "gemm":
                    d = dict(key)
                    ns, ks = grid.setdefault((d["batch"], d["weights"], d["group"]), (set(), set()))
                    ns.add(d["n"])
                    ks.add(d["k"])
            self._gemm_grid = {g: (sorted(ns), sorted(ks)) for g, (ns, ks) in grid.items()}

    @classmethod
    def roofline(cls, hw: HardwareSpec) -> Profile:
        return cls(hw.name, "modeled", {})

    @classmethod
    def for_scenario(cls, sc: Scenario, base_dir: Path | None = None) -> Profile:
        """The scenario's `profile`: `roofline`, or a file (relative to the scenario's folder, else cwd)."""
        hw = sc.hardware
        if not isinstance(hw, HardwareSpec):
            raise TypeError("a scenario's hardware preset is resolved before its profile")
        if sc.profile == "roofline":
            prof = cls.roofline(hw)
        else:
            path = Path(sc.profile)
            if not path.is_absolute() and base_dir is not None and (base_dir / path).is_file():
                path = base_dir / path
            prof = cls.load(path)
        prof.roofline_fit = hw.roofline.source if hw.roofline is not None else None
        return prof

    def for_pool(self, sc: Scenario, pool: Pool) -> Profile:
        """What prices a pool's steps: this (the scenario's) profile, or the roofline of a pool's own GPU (a profile
        file measures one device; `consistency` refuses one beside pools of another GPU)."""
        hw = sc.hardware_of(pool)
        if hw.name == sc.hardware.name:
            return self
        prof = Profile.roofline(hw)
        prof.roofline_fit = hw.roofline.source if hw.roofline is not None else None
        return prof

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read and validate a profile JSON (docs/ops.md); any defect is one InputError naming the file."""
        f = read_file(path)
        kernels = {fam: [(e.shape, e.median_us) for e in es] for fam, es in f.kernels.items()}
        return cls(f.device, f.source, kernels, str(path), f.date, f.measured_by, f.interpolate_gemm)

    def provenance(self) -> dict[str, Any]:
        out = {"profile_source": self.source, "device": self.device, "file": self.file, "date": self.date}
        if self.measured_by is not None:
            out["measured_by"] = self.measured_by["summary"]
            out["derived_gemm_forms"] = len(self.derived)
        if self.roofline_fit is not None:
            out["roofline_fit"] = self.roofline_fit
        if self.step_overhead:
            out["step_overhead"] = {m: t.as_doc() for m, t in self.step_overhead.items()}
        return out

    def table(self, family: str, shape: Mapping[str, Any]) -> Table | None:
        if not self.tables or family not in AXES:
            return None
        key = (family, categorical(family, shape))
        t = self.tables.get(key)
        if t is not None or not (self._wild or self._gemm_grid):
            return t
        if key not in self._resolved:
            self._resolved[key] = self._resolve(key)
        return self._resolved[key]

    def _resolve(self, key: tuple[str, tuple]) -> Table | None:
        """A table for a form no table holds exactly: one keyed "any" where the form differs, else (GEMM) one
        derived from the measured (n, k) points around it."""
        family, cat = key
        for keys in WILDCARDS:
            if all(k in dict(cat) for k in keys):
                t = self.tables.get((family, tuple((k, ANY if k in keys else v) for k, v in cat)))
                if t is not None:
                    return t
        return self._derive_gemm(dict(cat)) if family == "gemm" else None

    def _derive_gemm(self, c: dict[str, Any]) -> Table | None:
        """Log time bilinear in (log n, log k) between the four measured neighbours, at every m all four
        measured: a GEMM's time scales as n·k where bytes or FLOPs rule, which this reproduces exactly."""
        grid = self._gemm_grid.get((c["batch"], c["weights"], c["group"]))
        if grid is None:
            return None
        corners = []
        for axis, v in zip(grid, (c["n"], c["k"]), strict=True):
            i = int(np.searchsorted(axis, v))
            if i == len(axis) or (axis[i] != v and i == 0):
                return None
            lo, hi = (axis[i], axis[i]) if axis[i] == v else (axis[i - 1], axis[i])
            corners.append((lo, hi, 0.0 if lo == hi else (np.log(v) - np.log(lo)) / (np.log(hi) - np.log(lo))))
        (n0, n1, wn), (k0, k1, wk) = corners
        curves = []
        for n, k, w in (
            (n0, k0, (1 - wn) * (1 - wk)),
            (n0, k1, (1 - wn) * wk),
            (n1, k0, wn * (1 - wk)),
            (n1, k1, wn * wk),
        ):
            t = self.tables.get(("gemm", categorical("gemm", {**c, "n": n, "k": k, "m": 0})))
            if t is None or 0.0 not in t.columns:
                return None
            curves.append((t.columns[0.0], w))
        lo, hi = max(cv.x[0] for cv, _ in curves), min(cv.x[-1] for cv, _ in curves)
        x = np.unique(np.concatenate([cv.x for cv, _ in curves]))
        x = x[(x >= lo) & (x <= hi)]
        if not x.size:
            return None
        log_us = sum(w * np.log(np.interp(x, cv.x, cv.us_at)) for cv, w in curves)
        self.derived.add(tuple(sorted(c.items())))
        return Table({0.0: Curve(x, np.exp(log_us))})

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


# Per family, the shape keys its tables are read along (numbers; every other key names a table).
NUMERIC_KEYS = {family: frozenset(k for k in (ax.outer, *ax.inner_keys) if k) for family, ax in AXES.items()}


def read_file(path: str | Path) -> profile_file.ProfileFile:
    """A profile file checked entry by entry (`profile_file`), its spread kept: what `load` and the repeats'
    draws of the p10–p90 spread read."""
    return profile_file.read(path, NUMERIC_KEYS)
