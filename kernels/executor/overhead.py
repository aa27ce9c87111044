"""The executor's work per step beyond the op list's kernels, measured on probe steps of its own
(`simulator.pricing.step_overhead`): what a CPU profile must carry for the model to price the replay's steps.

A probe is a step the executor runs outside any replay — decode batches and prefill chunks at fixed sizes, with
page tables of their own in a replay's KV cache — timed op by op as the replay times its sampled steps (the
stopwatch on). What it spends beyond its kernels is, in one execution, the time no op took (the Python and
tensor glue between ops; it also holds the stopwatch's own calls outside each op, about a microsecond an op)
plus the families the executor runs as composites of several torch ops where the op list counts one kernel
(`GLUE`: norms, ropes, routing, activations; the KV write into the real cache) beyond the profile's price of
the op list's shapes; the median over REPEATS executions. Every other family (GEMMs, attention) is left out
whole: how those run inside a step against alone stays the model's error, for `compare` to show.
"""

from __future__ import annotations

import statistics

import numpy as np

from kernels.executor.device import Stopwatch
from kernels.executor.paged_kv import PagedKV
from kernels.executor.runner import RankModel
from kernels.executor.step import assemble
from simulator.config.scenario import Scenario
from simulator.pricing.costmodel import CostModel
from simulator.pricing.profile import Profile
from simulator.pricing.step_overhead import StepOverhead, fit

GLUE = frozenset({"elementwise", "kv_write"})
REPEATS = 7  # each probe executed this many times (stopwatch on); the median
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


def measure(
    sc: Scenario, runners: dict[str, RankModel], kv: dict[tuple[str, int], PagedKV], profile: Profile
) -> StepOverhead:
    """The term from every probe on each pool's rank model and first instance's cache (the probes write their
    own pages there: run it after the replay); the GLUE families priced by `profile`."""
    points: list[tuple[int, int, int, float, float]] = []
    for name, pool in sc.deployment.pools().items():
        runner, cache = runners[name], kv[name, 0]
        cost = CostModel(sc.model, sc.hardware, pool, profile, False)
        for batch, context, chunks in PROBES:
            if batch > pool.max_running or batch + sum(chunks) > pool.max_batch_tokens:
                continue
            extra_s = _beyond(runner, cache, cost, batch, context, chunks)
            points.append((batch, len(chunks), batch + sum(chunks), batch * (context + 1.0), extra_s * 1e6))
    return fit(points)


def _beyond(
    runner: RankModel, kv: PagedKV, cost: CostModel, batch: int, context: int, chunks: tuple[int, ...]
) -> float:
    """Seconds one probe step spends beyond its priced kernels (see the module's docstring)."""
    ps = kv.page_size
    per = -(-(context + 1) // ps)
    decode = [(i, context, np.arange(i * per, (i + 1) * per)) for i in range(batch)]
    at = batch * per
    prefill = []
    for j, c in enumerate(chunks):
        n = -(-c // ps)
        prefill.append((batch + j, 0, np.arange(at, at + n), c))
        at += n
    sw = Stopwatch(runner.dev)
    priced = cost.breakdown(batch, batch * (context + 1), batch * per, [(c, 0) for c in chunks])
    glue_priced = sum(priced.get(fam, 0.0) for fam in GLUE)
    beyond = []
    for _ in range(REPEATS):
        inp = assemble(decode, prefill, kv)  # fresh inputs each time, as each replayed step builds its own
        sw.seconds.clear()
        sw.on = True
        try:
            whole = sw.timed(lambda: runner.forward(inp.tokens, inp.batch, kv, inp.last_rows, sw))  # noqa: B023
        finally:
            sw.on = False
        between = whole - sum(sw.seconds.values())  # no op's: the Python and tensor glue between them
        beyond.append(between + sum(sw.seconds.get(fam, 0.0) for fam in GLUE) - glue_priced)
    return statistics.median(beyond)
