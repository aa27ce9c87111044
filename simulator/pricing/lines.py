"""Step parts priced for every count at once: a line (`ops.step_lines`: ops that depend on one count of a step
only — its tokens, its sampled rows, its MLA-absorbed rows) is priced for every count 0, 1, 2, … a block of
counts at a time on first use (`Line`), and a chunk's own ops are remembered per (tokens, context before)
(`Part`). A step with prefill chunks is the sum of such parts; `price_ops` prices a list of ops at many step
sizes in one numpy pass, with the same per-op arithmetic as `reference.price_op` (tested equal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.config.specs import HardwareSpec
from simulator.pricing import roofline
from simulator.pricing.ops import COLLECTIVES, Spec
from simulator.pricing.profile import AXES, Profile
from simulator.pricing.usage import SOURCES, Usage

LINE_BLOCK = 1024  # counts a line is priced for at once


@dataclass
class PricedAt:
    """Microseconds of a list of ops at n step sizes at once, by source, by family, and the fallback op counts."""

    us: np.ndarray
    by_source: dict[str, np.ndarray]
    by_family: dict[str, np.ndarray]
    fallbacks: dict[str, np.ndarray]


class Line:
    """One line (`ops.step_lines`) priced at every count 0, 1, 2, …, a block of counts at a time on first use.

    Kept as Python lists by count (microseconds; table, fallback, collective microseconds; fallback op counts
    by family): reading a count is a few list indexes, where numpy scalars would cost microseconds a step. What
    charge a count adds is also kept whole, one tuple a count, so a charge reads one entry.
    """

    def __init__(self, price: Callable[[np.ndarray], PricedAt]) -> None:
        self.price = price
        self.done: list[bool] = []
        self.us: list[float] = []
        self.table: list[float] = []
        self.fallback: list[float] = []
        self.collective: list[float] = []
        self.fallbacks: dict[str, list[int]] = {}
        # per count: microseconds; table, fallback, collective seconds; (family, fallback ops) with ops > 0
        self._charges: list[tuple[float, float, float, float, tuple[tuple[str, int], ...]] | None] = []

    def charge(self, x: int, usage: Usage) -> float:
        """Microseconds at count `x`; charges its seconds and fallback ops in `usage`."""
        charge = self._charges[x] if x < len(self._charges) else None
        us, table, fallback, collective, ops = self._charge(x) if charge is None else charge
        usage.add_sources(table, fallback, collective)
        if ops:
            usage.count_all(ops)
        return us

    def values(self, xs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Microseconds, microseconds by source and fallback op counts at each count of `xs`; zero where a
        count is 0 (a step with no such rows skips the line)."""
        for block in np.unique(xs // LINE_BLOCK).tolist():
            if block >= len(self.done) or not self.done[block]:
                self._fill(block)
        lo, hi = int(xs.min()), int(xs.max()) + 1

        def pick(col: list[float] | list[int]) -> np.ndarray:
            return np.where(xs > 0, np.array(col[lo:hi], dtype=float)[xs - lo], 0.0)

        by_source = {"table": pick(self.table), "fallback": pick(self.fallback), "collective": pick(self.collective)}
        return pick(self.us), by_source, {fam: pick(k).astype(np.int64) for fam, k in self.fallbacks.items()}

    def _fill(self, block: int) -> None:
        if block >= len(self.done):
            grow = (block + 1 - len(self.done)) * LINE_BLOCK
            self.done += [False] * (block + 1 - len(self.done))
            for col in (self.us, self.table, self.fallback, self.collective, *self.fallbacks.values()):
                col += [0] * grow
        lo, hi = block * LINE_BLOCK, (block + 1) * LINE_BLOCK
        p = self.price(np.arange(lo, hi, dtype=np.int64))
        self.us[lo:hi] = p.us.tolist()
        for src, col in (("table", self.table), ("fallback", self.fallback), ("collective", self.collective)):
            col[lo:hi] = p.by_source[src].tolist()
        for fam, k in p.fallbacks.items():
            self.fallbacks.setdefault(fam, [0] * len(self.us))[lo:hi] = k.tolist()
        self.done[block] = True

    def _charge(self, x: int) -> tuple[float, float, float, float, tuple[tuple[str, int], ...]]:
        """What charging count `x` adds, made on its first charge and kept."""
        block = x // LINE_BLOCK
        if block >= len(self.done) or not self.done[block]:
            self._fill(block)
        if x >= len(self._charges):
            self._charges += [None] * (x + 1 - len(self._charges))
        ops = tuple((fam, k[x]) for fam, k in self.fallbacks.items() if k[x])
        charge = (self.us[x], self.table[x] * 1e-6, self.fallback[x] * 1e-6, self.collective[x] * 1e-6, ops)
        self._charges[x] = charge
        return charge


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~1.5 µs more to build, once per new chunk
class Part:
    """One priced part of a step: microseconds, the same by source, and the fallback op counts by family."""

    us: float
    table: float
    fallback: float
    collective: float
    fallbacks: tuple[tuple[str, int], ...]

    def charge(self, usage: Usage) -> float:
        usage.add_sources(self.table * 1e-6, self.fallback * 1e-6, self.collective * 1e-6)
        if self.fallbacks:
            usage.count_all(self.fallbacks)
        return self.us


def price_ops(ops: list[Spec], n: int, profile: Profile, hw: HardwareSpec) -> PricedAt:
    """Ops whose shape values may be arrays of n step sizes, priced at each (numpy, the same per-op arithmetic as
    `reference.price_op`); `hw`: the roofline's hardware."""
    p = PricedAt(np.zeros(n), {src: np.zeros(n) for src in SOURCES}, {}, {})
    for op in ops:
        params = op.params
        if op.family in COLLECTIVES:  # a measured table where the profile has one, else the collective model
            t = table_us(profile, op.family, params, n)
            miss = np.isnan(t)
            us = np.where(miss, np.broadcast_to(roofline.op_us(op.family, params, hw), (n,)), t) * op.count
            p.by_source["collective"] += np.where(miss, us, 0.0)
            p.by_source["table"] += np.where(miss, 0.0, us)
        else:
            t = table_us(profile, op.family, params, n)
            miss = np.isnan(t)
            if miss.any():
                roof = np.broadcast_to(roofline.op_us(op.family, params, hw), (n,))
                t = np.where(miss, roof, t)
                p.fallbacks[op.family] = p.fallbacks.get(op.family, 0) + miss * op.count
            us = t * op.count
            p.by_source["table"] += np.where(miss, 0.0, us)
            p.by_source["fallback"] += np.where(miss, us, 0.0)
        p.us += us
        p.by_family[op.family] = p.by_family.get(op.family, 0.0) + us
    return p


def table_us(profile: Profile, family: str, params: dict[str, Any], n: int) -> np.ndarray:
    """The table's microseconds per op at each of n step sizes; NaN where it does not reach."""
    table = profile.table(family, params)
    if table is None:
        return np.full(n, np.nan)
    ax = AXES[family]
    inner = np.broadcast_to(np.asarray(ax.inner(params), dtype=float), (n,))
    if ax.outer is None:
        return np.asarray(table.us(0.0, inner), dtype=float)
    outer = np.broadcast_to(params[ax.outer], (n,))
    out = np.empty(n)
    for o in np.unique(outer):
        sel = outer == o
        out[sel] = table.us(float(o), inner[sel])
    return out
