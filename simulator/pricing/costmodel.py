"""Step times of one serving instance: the step's op list priced by a profile, the roofline where none covers.

The engine prices runs of identical decode steps whose total context grows by `batch` each step, so a decode
step splits into what depends only on the batch (GEMMs, norms, all-reduces, KV writes: priced once per batch
size and cached) and what moves with the context (attention, the DSA indexer) or the pages (the integrity
check): those are evaluated on the whole array of steps at once. A single decode-only step (`step_s` without
chunks) goes through the same arithmetic, so pricing n steps at once or one by one gives bit-identical times.

A step with prefill chunks is priced as the sum of its parts (`ops.step_lines` and friends): the lines —
ops that depend on one count of the step only (its tokens, its sampled rows, its MLA-absorbed rows) —
priced for every count at once, a block of counts at a time, on first use; the decode batch's attention
at its context and pages (the decode pricing's parts); and each chunk's own ops, remembered per
(tokens, context before). Chunk sizes are continuous, so pricing `step_ops` whole per step would rebuild
and price ~40 ops each time; the parts reuse everything but the chunks' few attention ops. Each op is
priced by the same function as in a whole-list pricing; only the order of the sum differs, so a mixed step
equals its whole-list price to rounding (~1e-15 relative) and is the same on every call.

Every priced second is charged to where it came from — a profile table, the roofline fallback, or a
collective (modeled, unless a third-party profile measured it) — so a report can say how much of its step
time was measured. Booking is exact per call: each part keeps its seconds by source and its fallback op
counts alongside its time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from simulator.config.scenario import Pool
from simulator.config.specs import HardwareSpec, ModelSpec, RooflineFit
from simulator.pricing import overlap, roofline
from simulator.pricing.ops import (
    COLLECTIVES,
    DECODE_CONTEXT_FAMILIES,
    LINES,
    Op,
    Shape,
    Spec,
    chunk_ops,
    context_cap,
    line_ops,
    step_lines,
    step_ops,
)
from simulator.pricing.profile import AXES, Curve, Profile
from simulator.pricing.speculative import draft_ops, verify_ops

SOURCES = ("table", "fallback", "collective")
ATTENTION = frozenset({"decode_attention_mla", "decode_attention_gqa"})
VARYING = DECODE_CONTEXT_FAMILIES | {"integrity_check"}
CHUNK_CACHE = 1 << 16  # chunks remembered (a prompt's full-size chunks repeat; its last one rarely does)
LINE_BLOCK = 1024  # counts a line is priced for at once


@dataclass
class Usage:
    """Seconds of step time priced from each source, and how many op pricings fell back, by family.

    A decode run charges its step count against its pricing, whose per-step fallback counts are multiplied out when
    the counts are read: ~140,000 runs an hour would otherwise each update a counter per op family."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    _ops: Counter[str] = field(default_factory=Counter)
    _steps: Counter[_DecodePricing] = field(default_factory=Counter)  # decode steps charged, by pricing

    @property
    def fallback_ops(self) -> Counter[str]:
        for pricing, steps in self._steps.items():
            for fam, k in pricing.fallbacks:
                self._ops[fam] += k * steps
        self._steps.clear()
        return self._ops

    def charge_steps(self, pricing: _DecodePricing, steps: int) -> None:
        self._steps[pricing] += steps

    def merge(self, other: Usage) -> None:
        for k, v in other.seconds.items():
            self.seconds[k] += v
        self.fallback_ops.update(other.fallback_ops)

    def shares(self) -> dict[str, float]:
        total = sum(self.seconds.values())
        return {k: (v / total if total else 0.0) for k, v in self.seconds.items()}


@dataclass
class _Fixed:
    """Ops whose time does not move with the decode context: summed once."""

    us: float = 0.0
    by_source: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    by_family: dict[str, float] = field(default_factory=dict)
    fallbacks: Counter[str] = field(default_factory=Counter)


class _Varying:
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
def _line_run(
    a: float, b: float, c: float, ctx0: int, batch: int, pages0: int, growth: np.ndarray, clock: float
) -> np.ndarray:
    """Microseconds, end times and running microseconds of a run of decode steps whose varying parts are all on
    one roofline line (rows 0, 1, 2): step i reads `ctx0 + batch·(i+1)` tokens and `pages0 + growth[i]` pages.
    The same arithmetic, in the same order, as `_DecodePricing.price` and a clock that adds one step at a time,
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


class _DecodePricing:
    """Steps of one shape (decode batch size, prefill chunks): fixed ops, and ops that move with the decode
    context and pages.

    Roofline parts that are one line fold into `a + b·ctx_total + c·pages`; the rest are added part by part,
    and where a table does not reach a step, the roofline prices that part of that step. The arithmetic is
    elementwise and in the same order however many steps are priced, so one step or many give bit-identical
    times.
    """

    def __init__(self, batch: int, fixed: _Fixed, parts: list[_Varying]) -> None:
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

    pricing: _DecodePricing
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
        seconds = usage.seconds
        if roof_us is None:
            seconds["fallback"] += var_us * 1e-6
        else:
            seconds["table"] += (var_us - roof_us) * 1e-6
            seconds["fallback"] += roof_us * 1e-6
        for src, fixed_s in pricing.by_source:
            seconds[src] += fixed_s * k
        usage.charge_steps(pricing, k)
        for (fam, _, ops), n in zip(self.misses, missed, strict=True):
            usage._ops[fam] += n * ops


@dataclass
class _Priced:
    """Microseconds of a list of ops at n step sizes at once, by source, by family, and the fallback op counts."""

    us: np.ndarray
    by_source: dict[str, np.ndarray]
    by_family: dict[str, np.ndarray]
    fallbacks: dict[str, np.ndarray]


class _Line:
    """One line (`ops.step_lines`) priced at every count 0, 1, 2, …, a block of counts at a time on first use.

    Kept as Python lists by count (microseconds; table, fallback, collective microseconds; fallback op counts
    by family): reading a count is a few list indexes, where numpy scalars would cost microseconds a step. What
    charge a count adds is also kept whole, one tuple a count, so a charge reads one entry.
    """

    def __init__(self, price: Callable[[np.ndarray], _Priced]) -> None:
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
        seconds = usage.seconds
        seconds["table"] += table
        seconds["fallback"] += fallback
        seconds["collective"] += collective
        if ops:
            counts = usage._ops  # counted now: no pending decode steps to fold here
            for fam, k in ops:
                counts[fam] += k
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
class _Part:
    """One priced part of a step: microseconds, the same by source, and the fallback op counts by family."""

    us: float
    table: float
    fallback: float
    collective: float
    fallbacks: tuple[tuple[str, int], ...]

    def charge(self, usage: Usage) -> float:
        seconds = usage.seconds
        seconds["table"] += self.table * 1e-6
        seconds["fallback"] += self.fallback * 1e-6
        if self.collective:
            seconds["collective"] += self.collective * 1e-6
        ops = usage._ops
        for fam, k in self.fallbacks:
            ops[fam] += k
        return self.us


class CostModel:
    """Prices steps of one instance of `pool` (model, hardware, formats) from `profile`."""

    def __init__(self, model: ModelSpec, hw: HardwareSpec, pool: Pool, profile: Profile, integrity: bool) -> None:
        if pool.fp8_kv_read_factor is not None:  # the pool's engine reads an FP8 cache at its own cost
            factors = {**(hw.roofline.factors if hw.roofline else {}), "fp8_kv_dequant_factor": pool.fp8_kv_read_factor}
            source = hw.roofline.source if hw.roofline else "documented defaults"
            hw = hw.model_copy(update={"roofline": RooflineFit(source=source, factors=factors)})
        self.model, self.hw, self.pool, self.profile, self.integrity = model, hw, pool, profile, integrity
        # A profile that measured whole fused-MoE calls prices each layer's routed experts as one op.
        self.fused_moe = any(family == "fused_moe" for family, _ in profile.tables)
        # Decode-only steps replay a CUDA graph: the roofline's generic launch floor is the graph's (the pool's
        # `decode_graph_floor_us`); mixed and prefill steps launch eagerly.
        floor = pool.decode_graph_floor_us
        self.decode_hw = hw if floor is None else hw.model_copy(update={"kernel_floor_us": floor})
        self.usage = Usage()
        self._prices: dict[tuple[str, Shape], tuple[float, str]] = {}
        self._decode: dict[int, _DecodePricing] = {}
        self._varyings: dict[tuple[Op, bool], _Varying] = {}
        self._eager: dict[int, list[_Varying]] = {}
        # Speculative decoding: a decode step is a verify step and its draft steps (`pricing/speculative.py`); a
        # mixed step's decode part reads the plain pricing.
        self._plain: dict[int, _DecodePricing] = self._decode if pool.speculative is None else {}
        self._lines = {line: _Line(self._line_pricer(line)) for line in LINES}
        # A prompt's first chunk (nothing before it) is most chunks and varies only in length: priced like a
        # line, for every length at once, instead of op by op per new length.
        self._first_chunks = _Line(lambda xs: self._price_ops(chunk_ops(self.model, self.pool, xs, 0), xs.size))
        self._chunks: dict[tuple[int, int], _Part] = {}
        # A step that is one whole prompt and nothing else (most prefill steps), by the prompt's length: its
        # parts summed for every length at once, a block of lengths at a time.
        self._solos = _Line(self._solo_pricer)

    # -- public ------------------------------------------------------------------------------------------
    def decode_run(
        self, batch: int, ctx0: int, pages0: int, growth: np.ndarray, clock: float
    ) -> tuple[DecodeSteps, list[float]]:
        """A run of decode steps of `batch` sequences that hold `ctx0` tokens and `pages0` pages before it and
        take `growth[i]` more pages by step i, starting at `clock`: the priced steps (charged by the caller once
        it knows how many ran) and each step's end time."""
        pricing = self._pricing(batch)
        if not pricing.parts:
            run = _line_run(pricing.a, pricing.b, pricing.c, ctx0, batch, pages0, growth, clock)
            return DecodeSteps(pricing, run[0], None, (), run[2]), run[1].tolist()
        steps = pricing.price(ctx0 + batch * np.arange(1, len(growth) + 1, dtype=np.int64), pages0 + growth)
        return steps, np.add.accumulate(np.concatenate(([clock], steps.us * 1e-6)))[1:].tolist()

    def decode_steps(self, batch: int, ctx_total: np.ndarray, pages_total: np.ndarray) -> DecodeSteps:
        """Decode-only steps of `batch` sequences, one per element of the context/page totals, priced but not
        charged: the caller charges the steps that ran (a run of steps may be cut short)."""
        return self._pricing(batch).price(ctx_total, pages_total)

    def decode_step_s(
        self, batch: int, ctx_total: np.ndarray, pages_total: np.ndarray, usage: Usage | None = None
    ) -> np.ndarray:
        """Seconds of decode-only steps, all charged to `usage` (default: this model's own)."""
        steps = self.decode_steps(batch, ctx_total, pages_total)
        steps.charge(len(steps.us), self.usage if usage is None else usage)
        return steps.us * 1e-6

    def step_s(
        self,
        decode_batch: int,
        decode_ctx_total: int,
        decode_pages: int,
        chunks: Sequence[tuple[int, int]],
        usage: Usage | None = None,
    ) -> float:
        """Seconds of one step: decode of `decode_batch` sequences plus prefill chunks (new, context before)."""
        todo = _chunks(chunks)
        if not todo:
            return float(
                self.decode_step_s(
                    decode_batch, np.array([float(decode_ctx_total)]), np.array([float(decode_pages)]), usage
                )[0]
            )
        usage = self.usage if usage is None else usage
        if not decode_batch and len(todo) == 1 and todo[0][1] == 0:  # a prompt alone, the usual prefill step
            return self._solos.charge(todo[0][0], usage) * 1e-6
        us = 0.0
        for line, x in step_lines(self.model, decode_batch, todo).items():
            if x:
                us += self._lines[line].charge(x, usage)
        if decode_batch:
            us += self._decode_parts(decode_batch, decode_ctx_total, decode_pages, usage)
        for key in todo if self.pool.dp == 1 else busiest_rank(todo, self.pool.dp):
            if key[1] == 0:
                us += self._first_chunks.charge(key[0], usage)
                continue
            c = self._chunks.get(key)
            if c is None:
                if len(self._chunks) >= CHUNK_CACHE:
                    self._chunks.clear()
                c = self._chunks[key] = self._chunk(*key)
            us += c.charge(usage)
        return us * 1e-6

    def breakdown(
        self, decode_batch: int, decode_ctx_total: int, decode_pages: int, chunks: Sequence[tuple[int, int]] = ()
    ) -> dict[str, float]:
        """Seconds per op family of one step (what `step_s` sums), largest first; charges no usage."""
        todo = _chunks(chunks)
        out: dict[str, float] = {}
        if not todo:
            pricing = self._pricing(decode_batch)
            out.update(pricing.fixed.by_family)
            parts = pricing.all_parts
        else:
            lines = step_lines(self.model, decode_batch, todo)
            ops = [
                op
                for line, x in lines.items()
                if x
                for op in line_ops(self.model, self.pool, line, np.array([x]), self.fused_moe)
            ]
            mine = todo if self.pool.dp == 1 else busiest_rank(todo, self.pool.dp)
            ops += [op for t, before in mine for op in chunk_ops(self.model, self.pool, t, before)]
            for fam, us in self._price_ops(ops, 1).by_family.items():
                out[fam] = float(us[0])
            parts = self._mixed_parts(decode_batch) if decode_batch else []
        ctx = decode_ctx_total / max(decode_batch, 1)
        for v in parts:
            x = np.array([float(decode_pages) if v.key == "pages" else ctx])
            if v.cap is not None:
                x = np.minimum(x, v.cap)
            t = v.at(x)
            out[v.family] = out.get(v.family, 0.0) + float(v.roof(x)[0] if np.isnan(t[0]) else t[0])
        return {f: us * 1e-6 for f, us in sorted(out.items(), key=lambda kv: -kv[1])}

    def ops_breakdown(self, ops: list[Op]) -> dict[str, float]:
        """Seconds per op family of a list of ops at the shapes they name (e.g. a verify step and its draft
        steps, apart), as a decode-only step runs them (under its CUDA graph); charges no usage."""
        by_family = self._price_ops([Spec(op.family, op.params, op.count) for op in ops], 1, self.decode_hw).by_family
        return {f: float(us[0]) * 1e-6 for f, us in sorted(by_family.items(), key=lambda kv: -float(kv[1][0]))}

    # -- internals ---------------------------------------------------------------------------------------
    def _pricing(self, batch: int) -> _DecodePricing:
        """A decode-only step of `batch` sequences: plain, or a verify step and its drafts with speculation on."""
        pricing = self._decode.get(batch)
        if pricing is None:
            pricing = self._decode[batch] = self._build(batch, self.pool.speculative is not None)
        return pricing

    def _plain_pricing(self, batch: int) -> _DecodePricing:
        """The decode pricing without speculation (a mixed step's decode part; `_pricing` without speculation)."""
        pricing = self._plain.get(batch)
        if pricing is None:
            pricing = self._plain[batch] = self._build(batch, False)
        return pricing

    def _build(self, batch: int, speculative: bool) -> _DecodePricing:
        """A speculative step is a verify step and its draft steps: the scheduler draws the tokens it gives."""
        pages = 1 if self.integrity else 0
        if speculative:
            verify, draft = self.speculative_ops(batch, 1, pages)
            ops = verify + draft
        else:
            ops = step_ops(self.model, self.pool, batch, 1, (), pages, fused_moe=self.fused_moe)
            if overlap.applies(self.model, self.pool, batch):  # shared experts beside the routed ones
                ops = overlap.overlapped(
                    ops, self.model, self.pool, batch, self.fused_moe, lambda op: self._price(op)[0] * op.count
                )
        return _DecodePricing(batch, self._fix(ops), [self._varying(op) for op in ops if op.family in VARYING])

    def speculative_ops(self, batch: int, context: int, pages: int) -> tuple[list[Op], list[Op]]:
        """A speculative step's verify ops (over (k+1)·batch rows, shared experts beside the routed ones where the
        engine overlaps them, as in a plain decode step) and its draft ops."""
        spec = self.pool.speculative
        assert spec is not None
        verify = verify_ops(self.model, self.pool, batch, context, pages, fused_moe=self.fused_moe)
        rows = (spec.draft_tokens + 1) * batch
        if overlap.applies(self.model, self.pool, rows):
            verify = overlap.overlapped(
                verify, self.model, self.pool, rows, self.fused_moe, lambda op: self._price(op)[0] * op.count
            )
        return verify, draft_ops(self.model, self.pool, batch, context)

    def _mixed_parts(self, batch: int) -> list[_Varying]:
        """The decode batch's varying parts as a mixed step runs them: without speculation, and eagerly (no CUDA
        graph)."""
        if self.decode_hw is self.hw:
            return self._plain_pricing(batch).all_parts
        parts = self._eager.get(batch)
        if parts is None:
            ops = step_ops(self.model, self.pool, batch, 1, (), 1 if self.integrity else 0, fused_moe=self.fused_moe)
            parts = self._eager[batch] = [self._varying(op, eager=True) for op in ops if op.family in VARYING]
        return parts

    def _decode_parts(self, batch: int, ctx_total: int, pages: int, usage: Usage) -> float:
        """Microseconds of the decode batch's attention, indexer and integrity check in a mixed step (the
        decode pricing's parts, one step, in plain floats); charges them to `usage`."""
        ctx = ctx_total / batch
        us = 0.0
        for v in self._mixed_parts(batch):
            x = float(pages) if v.key == "pages" else ctx
            if v.cap is not None:
                x = min(x, v.cap)
            t = math.nan if v.curve is None else float(v.curve.us(x))
            if math.isnan(t):
                t = float(v.roof(x))
                usage.seconds["fallback"] += t * 1e-6
                usage._ops[v.family] += v.ops
            else:
                usage.seconds["table"] += t * 1e-6
            us += t
        return us

    def _solo_pricer(self, xs: np.ndarray) -> _Priced:
        """Steps that are one whole prompt of each length in `xs`: the lines at the prompt's counts, then its
        first chunk, added elementwise in the order `step_s` adds a step's parts (a part a step skips adds
        zero), so each length gets the bits pricing it part by part gives. By source, the parts' seconds are
        summed in that order and the sum kept in microseconds, as charging the parts to a fresh usage and
        reading it back would."""
        n = xs.size
        counts = step_lines(self.model, 0, ((xs, 0),))  # each an array over xs, or one count for all
        parts = [(self._lines[line], np.broadcast_to(counts[line], (n,))) for line in LINES]
        parts.append((self._first_chunks, xs))
        p = _Priced(np.zeros(n), {src: np.zeros(n) for src in SOURCES}, {}, {})
        for part, at in parts:
            us, by_source, fallbacks = part.values(at)
            p.us += us
            for src in SOURCES:
                p.by_source[src] += by_source[src] * 1e-6
            for fam, k in fallbacks.items():
                p.fallbacks[fam] = p.fallbacks.get(fam, 0) + k
        for src in SOURCES:
            p.by_source[src] *= 1e6
        return p

    def _chunk(self, tokens: int, before: int) -> _Part:
        """A chunk's own ops, priced one by one in plain floats (the same per-op arithmetic as `_price_ops`)."""
        us = table = fallback = 0.0
        fallbacks: list[tuple[str, int]] = []
        lookup = self.profile.lookup if self.profile.tables else None
        for family, params, count in chunk_ops(self.model, self.pool, tokens, before):
            t = None if lookup is None else lookup(family, params)
            if t is None:
                t = float(roofline.op_us(family, params, self.hw)) * count
                fallback += t
                fallbacks.append((family, count))
            else:
                t *= count
                table += t
            us += t
        return _Part(us, table, fallback, 0.0, tuple(fallbacks))

    def _line_pricer(self, line: str) -> Callable[[np.ndarray], _Priced]:
        return lambda xs: self._price_ops(line_ops(self.model, self.pool, line, xs, self.fused_moe), xs.size)

    def _price_ops(self, ops: list[Spec], n: int, hw: HardwareSpec | None = None) -> _Priced:
        """Ops whose shape values may be arrays of n step sizes, priced at each (numpy, same per-op arithmetic
        as `_price`); `hw`: the roofline's hardware (default the eager one)."""
        hw = self.hw if hw is None else hw
        p = _Priced(np.zeros(n), {src: np.zeros(n) for src in SOURCES}, {}, {})
        for op in ops:
            params = op.params
            if op.family in COLLECTIVES:  # a measured table where the profile has one, else the collective model
                t = self._table_us(op.family, params, n)
                miss = np.isnan(t)
                us = np.where(miss, np.broadcast_to(roofline.op_us(op.family, params, hw), (n,)), t) * op.count
                p.by_source["collective"] += np.where(miss, us, 0.0)
                p.by_source["table"] += np.where(miss, 0.0, us)
            else:
                t = self._table_us(op.family, params, n)
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

    def _table_us(self, family: str, params: dict[str, Any], n: int) -> np.ndarray:
        """The table's microseconds per op at each of n step sizes; NaN where it does not reach."""
        table = self.profile.table(family, params)
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

    def _varying(self, op: Op, eager: bool = False) -> _Varying:
        v = self._varyings.get((op, eager))
        if v is None:
            params = op.params
            key = "pages" if op.family == "integrity_check" else "context"
            cap = context_cap(self.model) if op.family in ATTENTION else None
            curve = self.profile.curve(op.family, params)
            v = self._varyings[op, eager] = _Varying(
                op.family, params, op.count, key, cap, curve, self.hw if eager else self.decode_hw
            )
        return v

    def _fix(self, ops: list[Op]) -> _Fixed:
        fixed = _Fixed()
        for op in ops:
            if op.family in VARYING:
                continue
            us, src = self._price(op)
            us *= op.count
            fixed.us += us
            fixed.by_source[src] += us
            fixed.by_family[op.family] = fixed.by_family.get(op.family, 0.0) + us
            if src == "fallback":
                fixed.fallbacks[op.family] += op.count
        return fixed

    def _price(self, op: Op) -> tuple[float, str]:
        """Microseconds of one op of a decode-only step and where the number came from."""
        key = (op.family, op.shape)
        hit = self._prices.get(key)
        if hit is None:
            params = op.params
            t = self.profile.lookup(op.family, params)
            hw = self.decode_hw
            if op.family in COLLECTIVES:
                hit = (t, "table") if t is not None else (float(roofline.op_us(op.family, params, hw)), "collective")
            else:
                hit = (t, "table") if t is not None else (float(roofline.op_us(op.family, params, hw)), "fallback")
            self._prices[key] = hit
        return hit


def _chunks(chunks: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple((int(t), int(c)) for t, c in chunks if t > 0)


def busiest_rank(chunks: tuple[tuple[int, int], ...], dp: int) -> tuple[tuple[int, int], ...]:
    """Under DP attention a step's prefill chunks run on different ranks at once; their own ops (attention over
    the prompt so far) are priced on the busiest rank: chunks dealt out one per rank, it gets ceil(n / dp) of
    them, taken as the largest (the step's lines already spread its rows evenly, `ops._rank_rows`)."""
    if len(chunks) <= 1:
        return chunks
    return tuple(sorted(chunks, key=lambda c: (-c[0], -c[1]))[: -(-len(chunks) // dp)])
