"""The executor's work per step beyond the op list's kernels, measured on probe steps of its own
(`simulator.pricing.step_overhead`): what a CPU profile must carry for the model to price the replay's steps.

A probe is a step the executor runs beside a replay, never one of its steps — decode batches and prefill chunks
at fixed sizes, with page tables of their own in the replay's KV cache — one execution at a time between the
replay's executed steps (after the op shapes `compare` times there), so it runs under the same load and after
the same cache traffic as a replayed step does; what the replay leaves runs after it. Each is timed op by op as
the replay times its sampled steps (the stopwatch on). What it spends beyond its kernels is, in one execution,
the time no op took (the Python and tensor glue between ops; it also holds the stopwatch's own calls outside
each op, about a microsecond an op) plus the families the executor runs as composites of several torch ops where
the op list counts one kernel (`GLUE`: norms, ropes, routing, activations; the KV write into the real cache)
beyond the profile's price of the op list's shapes; the median over REPEATS executions. Every other family
(GEMMs, attention) is left out whole: how those run inside a step against alone stays the model's error, for
`compare` to show. Where the scenario checks page integrity, probe batches' tables are checked by the device
tracker too, and what that takes beyond the check's priced kernel is the term's `check_us`.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from kernels.executor.device import Stopwatch
from kernels.executor.integrity import DeviceTracker
from kernels.executor.step import assemble
from simulator.config.scenario import Scenario
from simulator.pricing.costmodel import CostModel
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
        self.todo: list[tuple[bool, Probe]] = [
            (c, p) for _ in range(REPEATS) for c, ps in ((False, probes), (True, checks)) for p in ps
        ]
        self.todo.reverse()  # popped from the end: every probe once, then again
        self.forward: dict[Probe, list[tuple[float, float]]] = {}  # (between ops, GLUE families) seconds each time
        self.checks: dict[Probe, list[float]] = {}
        self.caches: dict[str, PagedCache] = {}

    def next(self, clock: Any) -> None:
        """One probe execution on the replay's rank models and caches (`clock`: its `ReplayClock`)."""
        if not self.todo:
            return
        check, probe = self.todo.pop()
        if check:
            self.checks.setdefault(probe, []).append(self._check(clock, probe))
        else:
            self.forward.setdefault(probe, []).append(self._forward(clock, probe))

    def finish(self, clock: Any, profile: Profile) -> StepOverhead:
        """Run what the replay left, then the term, the GLUE families and the check priced by `profile`."""
        while self.todo:
            self.next(clock)
        pools = self.sc.deployment.pools()
        costs = {
            (n, i): CostModel(self.sc.model, self.sc.hardware, p, profile, i)
            for n, p in pools.items()
            for i in (False, True)
        }
        points = []
        for (name, b, ctx, chunks), runs in self.forward.items():
            per = _pages(ctx, pools[name].page_size)
            priced = costs[name, False].breakdown(b, b * (ctx + 1), b * per, [(c, 0) for c in chunks])
            glue = sum(priced.get(f, 0.0) for f in GLUE)
            beyond = statistics.median(between + timed - glue for between, timed in runs)
            points.append((b, len(chunks), b + sum(chunks), b * (ctx + 1.0), beyond * 1e6))
        checks = [
            s - costs[name, True].breakdown(b, b * (ctx + 1), b * _pages(ctx, pools[name].page_size))["integrity_check"]
            for (name, b, ctx, _), runs in self.checks.items()
            for s in runs
        ]
        return fit(points, statistics.median(checks) * 1e6 if checks else 0.0)

    def _forward(self, clock: Any, probe: Probe) -> tuple[float, float]:
        name, b, ctx, chunks = probe
        runner, kv = clock.runners[name], clock.kv[name, 0]
        ps = kv.page_size
        per = _pages(ctx, ps)
        decode = [(i, ctx, np.arange(i * per, (i + 1) * per)) for i in range(b)]
        at, prefill = b * per, []
        for j, c in enumerate(chunks):
            prefill.append((b + j, 0, np.arange(at, at + _pages(c - 1, ps)), c))
            at += _pages(c - 1, ps)
        inp = assemble(decode, prefill, kv)
        sw = Stopwatch(runner.dev)
        sw.on = True
        whole = sw.timed(lambda: runner.forward(inp.tokens, inp.batch, kv, inp.last_rows, sw))
        return whole - sum(sw.seconds.values()), sum(sw.seconds.get(f, 0.0) for f in GLUE)

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


def _pages(context: int, page_size: int) -> int:
    """Pages a sequence of `context` cached tokens and the one it adds holds."""
    return -(-(context + 1) // page_size)
