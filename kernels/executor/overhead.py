"""The executor's work per step beyond the op list's kernels, measured on probe steps of its own
(`simulator.pricing.step_overhead`): what a CPU profile must carry for the model to price the replay's steps.

A probe is a step the executor runs beside a replay, never one of its steps — decode batches and prefill chunks at
fixed sizes, with page tables of their own in the replay's KV cache, their pages scattered over it (a replay's
sequences grow side by side, taking pages from a free stack in turn, and the profile times attention over permuted
pages; a decode batch of 16 at 192 tokens read contiguous pages ~5% faster on the 2-core VM) — one execution at a
time between the replay's executed steps (after the op shapes `compare` times there), so it runs under the same load
and after the same cache traffic as a replayed step does; what the replay leaves runs after it. Each probe runs
REPEATS times two ways. Timed op by op (the stopwatch on, as the replay's sampled steps), its kernels — every family
but the composites `GLUE` — against the profile's price of the same shapes give the term's `kernel_share`: how much
longer the kernels take inside a step than timed alone (operands evicted by the ops before; on a loaded machine, the
preemptions a step's length catches and the cache refill after each), over all probes, each probe's median
execution. Timed whole (the stopwatch off, as the replay's clock times a step), what it takes beyond its price with
that share — the Python and tensor glue between ops, the norms, ropes, routing and activations the executor runs as
several torch ops where the op list counts one kernel, the KV write into the real cache — is, as a median over the
executions, one point of the rest of the term (`fit`); so the two parts together give back a probe's whole time as
the replay's clock counts it. Where the scenario checks page integrity, probe batches' tables are checked by the
device tracker too, and what that takes beyond the check's priced kernel is the term's `check_us`.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

import numpy as np

from kernels.executor.device import Stopwatch
from kernels.executor.integrity import DeviceTracker
from kernels.executor.step import assemble
from simulator.config.scenario import Scenario
from simulator.pricing.costmodel import CostModel
from simulator.pricing.ops import COLLECTIVES
from simulator.pricing.profile import Profile
from simulator.pricing.step_overhead import StepOverhead, fit
from simulator.serving.cache import PagedCache
from simulator.serving.tables import BlockTable

GLUE = frozenset({"elementwise", "kv_write"})
REPEATS = 5  # each probe executed this many times (stopwatch on); the median
# (decode batch, tokens each decode sequence holds, prefill chunks' tokens): decode-only batches at a short and a
# longer context, prefill steps of one and two chunks, mixed steps; batches past a pool's max_running and chunks
# past its max_batch_tokens are left out
PROBES: tuple[tuple[int, int, tuple[int, ...]], ...] = (
    (1, 48, ()),
    (4, 48, ()),
    (8, 48, ()),
    (16, 48, ()),
    (4, 192, ()),
    (16, 192, ()),
    (0, 0, (32,)),
    (0, 0, (128,)),
    (0, 0, (64, 64)),
    (4, 48, (32,)),
    (8, 96, (96,)),
)
CHECK_PROBES = ((4, 48), (16, 48), (16, 192))  # (decode batch, tokens each holds) whose pages are checked

Probe = tuple[str, int, int, tuple[int, ...]]  # pool, decode batch, context, chunks (none: a check probe)
Kind = Literal["timed", "whole", "check"]  # stopwatch on (by family), off (as the replay's clock), a page check


class Probes:
    """The probe executions of a scenario, one at a time (`next`, between a replay's steps), and the term from them
    (`finish`)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        pools = sc.deployment.pools()
        probes: list[Probe] = [
            (name, b, ctx, chunks)
            for name, pool in pools.items()
            for b, ctx, chunks in PROBES
            if b <= pool.max_running and b + sum(chunks) <= pool.max_batch_tokens
        ]
        checks: list[Probe] = (
            [(name, b, ctx, ()) for name, pool in pools.items() for b, ctx in CHECK_PROBES if b <= pool.max_running]
            if sc.integrity.enabled
            else []
        )
        self.todo: list[tuple[Kind, Probe]] = [
            (kind, p)
            for _ in range(REPEATS)
            for kind, ps in (("timed", probes), ("whole", probes), ("check", checks))
            for p in ps
        ]
        self.todo.reverse()  # popped from the end: every probe once, then again
        self.timed: dict[Probe, list[dict[str, float]]] = {}  # seconds by op family, each execution (stopwatch on)
        self.whole: dict[Probe, list[float]] = {}  # seconds of each execution as the replay's clock times a step
        self.checks: dict[Probe, list[float]] = {}
        self.caches: dict[str, PagedCache] = {}
        self.order: dict[str, np.ndarray] = {}  # each pool's pages in the order probes take them

    def next(self, clock: Any) -> None:
        """One probe execution on the replay's rank models and caches (`clock`: its `ReplayClock`)."""
        if not self.todo:
            return
        kind, probe = self.todo.pop()
        if kind == "check":
            self.checks.setdefault(probe, []).append(self._check(clock, probe))
        elif kind == "timed":
            self.timed.setdefault(probe, []).append(self._forward(clock, probe, True)[1])
        else:
            self.whole.setdefault(probe, []).append(self._forward(clock, probe, False)[0])

    def finish(self, clock: Any, profile: Profile) -> StepOverhead:
        """Run what the replay left, then the term: the kernels' in-step share, the glue beyond the whole price and
        that share, and the check, priced by `profile`."""
        while self.todo:
            self.next(clock)
        pools = self.sc.deployment.pools()
        costs = {
            (n, i): CostModel(self.sc.model, self.sc.hardware, p, profile, i)
            for n, p in pools.items()
            for i in (False, True)
        }
        priced = {
            (name, b, ctx, chunks): costs[name, False].breakdown(
                b, b * (ctx + 1), b * _pages(ctx, pools[name].page_size), [(c, 0) for c in chunks]
            )
            for name, b, ctx, chunks in self.timed
        }
        share = kernel_share([(runs, priced[p]) for p, runs in self.timed.items()])
        points = []
        for (name, b, ctx, chunks), runs in self.whole.items():
            price = sum(s for f, s in priced[name, b, ctx, chunks].items() if f not in COLLECTIVES)
            beyond = statistics.median(runs) - (1.0 + share) * price
            points.append((b, len(chunks), b + sum(chunks), b * (ctx + 1.0), beyond * 1e6))
        checks = [
            s - costs[name, True].breakdown(b, b * (ctx + 1), b * _pages(ctx, pools[name].page_size))["integrity_check"]
            for (name, b, ctx, _), runs in self.checks.items()
            for s in runs
        ]
        return fit(points, statistics.median(checks) * 1e6 if checks else 0.0, share)

    def _forward(self, clock: Any, probe: Probe, timed: bool) -> tuple[float, dict[str, float]]:
        """One execution's seconds and, stopwatch on (`timed`), its seconds by op family."""
        name, b, ctx, chunks = probe
        runner, kv = clock.runners[name], clock.kv[name, 0]
        ps = kv.page_size
        per = _pages(ctx, ps)
        order = self.order.get(name)
        if order is None:  # pages scattered over the cache, as the allocator leaves a replay's after some churn
            order = self.order[name] = np.random.default_rng(self.sc.seed).permutation(kv.logical)
        decode = [(i, ctx, order[i * per : (i + 1) * per]) for i in range(b)]
        at, prefill = b * per, []
        for j, c in enumerate(chunks):
            prefill.append((b + j, 0, order[at : at + _pages(c - 1, ps)], c))
            at += _pages(c - 1, ps)
        inp = assemble(decode, prefill, kv)
        sw = Stopwatch(runner.dev)
        sw.on = timed
        whole = sw.timed(lambda: runner.forward(inp.tokens, inp.batch, kv, inp.last_rows, sw))
        return whole, dict(sw.seconds)

    def _check(self, clock: Any, probe: Probe) -> float:
        name, b, ctx, _ = probe
        kv = clock.kv[name, 0]
        cache = self.caches.get(name)
        if cache is None:  # an instance's pages, tables of its own
            cache = self.caches[name] = PagedCache(kv.logical, kv.page_size)
        tables = [BlockTable() for _ in range(b)]
        for t in tables:
            cache.allocate(t, _pages(ctx, kv.page_size))
        tracker = DeviceTracker(kv.dev)
        tracker.check(np.array([t.row for t in tables], dtype=np.int64), cache)
        for t in tables:
            cache.release(t)
        return tracker.take_seconds()


def kernel_share(probes: list[tuple[list[dict[str, float]], dict[str, float]]]) -> float:
    """How much longer the kernels (every family but GLUE and the collectives) took inside the probe steps than
    the profile prices them: each probe's median execution, summed over probes, against their summed price; 0 with
    nothing priced. `probes`: each probe's executions (seconds by op family, each) and its price by family."""
    took = price = 0.0
    for runs, priced in probes:
        took += statistics.median(sum(s for f, s in fams.items() if _kernel(f)) for fams in runs)
        price += sum(s for f, s in priced.items() if _kernel(f))
    return took / price - 1.0 if price > 0 else 0.0


def _kernel(family: str) -> bool:
    return family not in GLUE and family not in COLLECTIVES


def _pages(context: int, page_size: int) -> int:
    """Pages a sequence of `context` cached tokens and the one it adds holds."""
    return -(-(context + 1) // page_size)
