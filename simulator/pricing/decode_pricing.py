"""Runs of decode steps priced at once: what a step of a batch costs that does not move with the context is
summed once (`Priced`), what moves with the context or the pages (attention, the DSA indexer, the integrity
check) is kept as a function of it (`Varying`) and evaluated on the whole array of a run's steps.

The engine prices runs of identical decode steps whose total context grows by `batch` each step. Roofline parts
that are one line fold into `a + b·ctx_total + c·pages`, and a run whose varying parts all do is one compiled
pass (`line_run`); the arithmetic is elementwise and in the same order however many steps are priced, so one step
or many give bit-identical times. `reference.price` is the plain form of the same sums (tested equal).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from simulator.config.specs import HardwareSpec
from simulator.pricing import roofline
from simulator.pricing.profile import Curve
from simulator.pricing.reference import Priced
from simulator.pricing.usage import Usage


class Varying:
    """`count` ops of one shape whose `key` (context or pages) varies from step to step.

    Their roofline is affine in that key on each side of the max (bytes and FLOPs both grow linearly with
    the context or the pages read), so it is kept as two lines and evaluated without rebuilding the work.
    `cap` bounds the key first (DSA: the main attention reads at most top-k keys).
    """

    def __init__(
        self,
        family: str,
        shape: dict[str, Any],
        count: int,
        key: str,
        cap: float | None,
        curve: Curve | None,
        hw: HardwareSpec,
    ) -> None:
        self.count = count
        self.family, self.ops, self.key, self.cap = family, count, key, cap
        self.curve = None if curve is None else curve.scaled(self.count)  # all `count` ops
        (m0, c0, self.floor), (m1, c1, _) = (roofline.terms_us(family, {**shape, key: x}, hw) for x in (0, 1))
        self.mem0, self.mem1, self.mma0, self.mma1 = m0, m1 - m0, c0, c1 - c0
        m, c, _ = roofline.terms_us(family, {**shape, key: 4096}, hw)
        assert math.isclose(m, m0 + 4096 * self.mem1) and math.isclose(c, c0 + 4096 * self.mma1), family
        # Memory-bound at every x ≥ 0: the roofline is one line, and uncapped lines add up.
        self.membound = c0 <= m0 and self.mma1 <= self.mem1
        self.linear = self.membound and self.cap is None and self.curve is None

    def at(self, x: np.ndarray) -> np.ndarray:
        """Microseconds of the `count` ops at each x: the table, NaN where it does not reach."""
        return self.curve.us(x) if self.curve is not None else self.roof(x)

    def roof(self, x: np.ndarray) -> np.ndarray:
        if self.membound:
            return (self.mem0 + self.floor + self.mem1 * x) * self.count
        return (np.maximum(self.mem0 + self.mem1 * x, self.mma0 + self.mma1 * x) + self.floor) * self.count


@njit(cache=True)
def line_run(
    a: float, b: float, c: float, ctx0: int, batch: int, pages0: int, growth: np.ndarray, clock: float
) -> np.ndarray:
    """Microseconds, end times and running microseconds of a run of decode steps whose varying parts are all on
    one roofline line (rows 0, 1, 2): step i reads `ctx0 + batch·(i+1)` tokens and `pages0 + growth[i]` pages.
    The same arithmetic, in the same order, as `DecodePricing.price` and a clock that adds one step at a time,
    fused into one pass (a run is priced ~140,000 times in an hour of fleet traffic)."""
    out = np.empty((3, len(growth)))
    t = clock
    total = 0.0
    for i in range(len(growth)):
        u = a + b * (ctx0 + batch * (i + 1))
        if c != 0.0:
            u = u + c * (pages0 + growth[i])
        out[0, i] = u
        t = t + u * 1e-6
        out[1, i] = t
        total = total + u
        out[2, i] = total
    return out


class DecodePricing:
    """Steps of one shape (decode batch size, prefill chunks): fixed ops, and ops that move with the decode
    context and pages.

    Roofline parts that are one line fold into `a + b·ctx_total + c·pages`; the rest are added part by part,
    and where a table does not reach a step, the roofline prices that part of that step. The arithmetic is
    elementwise and in the same order however many steps are priced, so one step or many give bit-identical
    times.
    """

    def __init__(self, batch: int, fixed: Priced, parts: list[Varying]) -> None:
        self.batch, self.fixed = batch, fixed
        self.all_parts = parts
        lines = [v for v in parts if v.linear]
        self.parts = [v for v in parts if not v.linear]
        self.tabled = any(v.curve is not None for v in parts)
        self.a = fixed.us + sum(v.count * (v.mem0 + v.floor) for v in lines)
        self.b = sum(v.count * v.mem1 for v in lines if v.key == "context") / max(batch, 1)
        self.c = sum(v.count * v.mem1 for v in lines if v.key == "pages")
        self.fallbacks = tuple((fixed.fallbacks + Counter({v.family: v.ops for v in lines})).items())
        self.by_source = [(src, us * 1e-6) for src, us in fixed.by_source.items() if us]

    def price(self, ctx_total: np.ndarray, pages: np.ndarray) -> DecodeSteps:
        """Microseconds of each step, and what is needed to charge the ones that run (`DecodeSteps.charge`)."""
        us = self.a + self.b * ctx_total
        if self.c:
            us += self.c * pages
        if not self.parts:  # every varying part on one roofline line
            return DecodeSteps(self, us, None, (), np.add.accumulate(us))
        # With a profile table among the parts, the roofline's share is tracked step by step.
        roof = np.full(len(us), self.a - self.fixed.us) + self.b * ctx_total + self.c * pages if self.tabled else None
        misses = []
        ctx = ctx_total / max(self.batch, 1)
        for v in self.parts:
            x = pages if v.key == "pages" else ctx
            if v.cap is not None:
                x = np.minimum(x, v.cap)
            t = v.at(x)
            if v.curve is None:
                if roof is not None:
                    roof += t
            else:  # a table (so roof is tracked): where it misses a step, the roofline prices that step
                assert roof is not None
                miss = np.isnan(t)
                if miss.any():
                    t[miss] = v.roof(x[miss])
                    roof[miss] += t[miss]
                    misses.append((v.family, miss, v.ops))
            us += t
        return DecodeSteps(self, us, roof, tuple(misses), np.add.accumulate(us))


@dataclass(slots=True)
class DecodeSteps:
    """n decode steps priced, not yet charged: a run may stop early, and only the steps that ran are charged."""

    pricing: DecodePricing
    us: np.ndarray  # microseconds of each step
    roof: np.ndarray | None  # the roofline's microseconds of each step's varying part; None: all of it
    misses: tuple[tuple[str, np.ndarray, int], ...]  # (family, steps its table missed, ops per step)
    total: np.ndarray  # microseconds of the first i+1 steps, summed in step order

    def charge(self, m: int, usage: Usage) -> None:
        """Charge the first m steps' seconds by source and fallback op counts."""
        roof_us = None if self.roof is None else float(np.add.reduce(self.roof[:m]))
        self.book(usage, m, float(self.total[m - 1]), roof_us, [int(miss[:m].sum()) for _, miss, _ in self.misses])

    def book(self, usage: Usage, k: int, us: float, roof_us: float | None, missed: list[int]) -> None:
        """Charge k of these steps that took `us` microseconds in all, `roof_us` of their varying part from the
        roofline (None: all of it), and whose tables missed `missed[i]` steps of `misses[i]`'s family."""
        pricing = self.pricing
        var_us = us - pricing.fixed.us * k
        if roof_us is None:
            table, fallback = 0.0, var_us * 1e-6
        else:
            table, fallback = (var_us - roof_us) * 1e-6, roof_us * 1e-6
        ops = [(fam, n * per) for (fam, _, per), n in zip(self.misses, missed, strict=True)] if self.misses else []
        usage.book_steps(pricing, k, table, fallback, pricing.by_source, ops)
