"""The seam between the engine and what its steps cost: a `StepTimer` times every run of steps an instance plans.

The engine decides (schedules, books pages, advances); a step timer only says when the steps end. The default
is the cost model (`CostTimer`): a whole run of identical decode steps priced at once, vectorised over the
growing context. The replay executor's device timer (kernels/executor/clock.py) takes its place with the engine
in step mode — the replay is this engine run one step at a time, each step executed and timed on a device — so
its decisions are the scheduler's by construction and only the step times differ from `phaseplan run`.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from simulator.config.scenario import Pool
from simulator.pricing.costmodel import CostModel
from simulator.pricing.dpstep import DPSteps, RankStep
from simulator.pricing.step_overhead import StepOverhead
from simulator.pricing.tier_pricing import TierPricing
from simulator.pricing.usage import Usage
from simulator.serving.rank import Rank
from simulator.serving.scheduler import Plan


class Charge(Protocol):
    """Steps priced before they ran: charged once the engine knows how many of them did."""

    def charge(self, m: int, usage: Usage) -> None: ...


Timed = tuple[list[float], Charge | None]  # each step's end time, and what to charge (None: nothing, or done)


class Stepping(Protocol):
    """What a step timer reads of the instance whose steps it times (`engine.instance.Instance`)."""

    pool_name: str
    index: int
    pool: Pool
    cost: CostModel
    clock: float
    ranks: list[Rank]


class StepTimer(Protocol):
    """Times an instance's runs of steps. The engine hands it each rank's plan as the run starts (the first
    step's pages booked) and the steps it wants timed; it answers each step's end time."""

    def tracker(self, pool: str, index: int) -> Any:
        """The integrity tracker the instance's schedulers check pages with (None: the simulator's own)."""

    def attach(self, sim: Any) -> None:
        """Called once the instances exist, before the run."""

    def time_run(self, inst: Stepping, plans: list[Plan], n: int) -> Timed:
        """End times of the plans' next n steps, starting at the instance's clock."""


class HostTime:
    """The engine's CPU work per step (`pool.host_step_us`, and `dp_sync_us` more under DP attention, where the
    ranks' schedulers agree on each step's batches): with its overlap scheduler on, a step's CPU work runs while
    the GPU runs the previous step, so a step takes the longer of the two; off (SGLang under speculation), the two
    add. Across nodes the DP sync stays on the step even with overlap: SGLang's overlap path gathers the ranks'
    batch sizes over the CPU (gloo) group, a blocking collective, and the MTP post's 16-rank pair shows overlap
    hiding only the rest of the CPU work there (docs/validation.md; the magnitude is fitted). A GPU-side price
    never includes it, so it lives here, at the one seam every step passes."""

    __slots__ = ("s", "sync", "overlap")

    def __init__(self, pool: Pool) -> None:
        sync = (pool.dp_sync_us if pool.dp > 1 else 0.0) * 1e-6
        across = pool.nodes > 1
        self.s = pool.host_step_us * 1e-6 + (0.0 if across else sync)  # overlappable CPU work
        self.sync = sync if across else 0.0  # on every step
        self.overlap = pool.overlap_scheduler and (pool.speculative is None or pool.overlap_with_speculation)

    def step(self, gpu_s: float) -> float:
        """One step's seconds (exactly `gpu_s` without CPU work)."""
        return (max(gpu_s, self.s) if self.overlap else gpu_s + self.s) + self.sync

    def ends(self, clock: float, gpu_us: np.ndarray, gpu_ends: list[float] | None = None) -> list[float]:
        """End times of steps of `gpu_us` microseconds from `clock`, added one at a time (as a run of one does).
        `gpu_ends`: the steps' end times without CPU work, returned as they are where it changes no step (the
        same sums in the same order), so a run the GPU sets costs no second pass."""
        gpu = gpu_us * 1e-6
        if gpu_ends is not None and not self.sync and (not self.s or (self.overlap and gpu.min() >= self.s)):
            return gpu_ends
        d = (np.maximum(gpu, self.s) if self.overlap else gpu + self.s) + self.sync
        return np.add.accumulate(np.concatenate(([clock], d)))[1:].tolist()


class CostTimer:
    """The cost model as the step timer: one rank's steps by its pool's `CostModel`, a DP instance's lock-step
    steps by `DPSteps` (the slowest rank plus the routed experts every rank shares), each step at least the
    engine's CPU work (`HostTime`). Where the profile measured its executor's work beyond the kernels
    (`pricing.step_overhead`, the CPU replay's: its glue, and its kernels' in-step slowdown), a one-rank step adds
    it on the device's own clock: a speculative step as its verify pass over (k+1)·batch rows (its draft passes'
    glue is not measured); DP instances, which the replay does not run, go without it."""

    def __init__(self) -> None:
        self._dp: dict[str, DPSteps] = {}
        self._host: dict[str, HostTime] = {}

    def tracker(self, pool: str, index: int) -> None:
        return None

    def attach(self, sim: Any) -> None:
        pass

    def time_run(self, inst: Stepping, plans: list[Plan], n: int) -> Timed:
        """One rank's next n steps by its pool's cost model (a step with prefill chunks is always a run of one,
        charged at once; a decode run is charged for the steps that ran), or a DP instance's lock-step steps."""
        host = self._host.get(inst.pool_name)
        if host is None:
            host = self._host[inst.pool_name] = HostTime(inst.pool)
        executor = inst.cost.profile.step_overhead.get(inst.cost.model.name)
        if len(plans) > 1:
            pricer = self._dp.get(inst.pool_name)
            if pricer is None:
                pricer = self._dp[inst.pool_name] = DPSteps(inst.cost)
            return dp_run(pricer, inst, plans, n, host)
        plan, cost, clock = plans[0], inst.cost, inst.clock
        if plan.prefill:
            d = plan.decode
            chunks = [(c, s.computed) for s, c in plan.prefill]  # a prefilling sequence is not in the batch
            ctx = sum(s.computed + 1 for s in d)
            t = cost.step_s(len(d), ctx, sum(s.table.n for s in d), chunks)
            if executor is not None:
                rows = len(d) + sum(c for c, _ in chunks)
                t += executor.in_step(t) + executor.seconds(len(d), len(chunks), rows, ctx, cost.integrity)
            if cost.tiers is not None:
                t = with_loads(cost.tiers, t, [plan])
            return [clock + host.step(t)], None
        growth = inst.ranks[0].sched.growth(plan, n)
        b = len(plan.decode)
        if plan.ctx is not None:  # verify steps: each reads the context its drawn tokens left
            priced = cost.decode_steps(b, plan.ctx[:n], plan.pages0 + growth)
            if executor is None:
                return host.ends(clock, priced.us), priced
            spec = inst.pool.speculative
            rows = b * (spec.draft_tokens + 1) if spec is not None else b
            return host.ends(clock, _with_us(executor, priced.us, rows, plan.ctx[:n], cost.integrity)), priced
        priced, ends = cost.decode_run(b, plan.ctx0, plan.pages0, growth, clock)
        if executor is not None:  # step i reads ctx0 + b·(i+1) tokens, as the cost model prices it
            ctx = plan.ctx0 + b * np.arange(1, n + 1, dtype=np.float64)
            return host.ends(clock, _with_us(executor, priced.us, b, ctx, cost.integrity)), priced
        return host.ends(clock, priced.us, ends), priced


def _with_us(executor: StepOverhead, kernels_us: np.ndarray, rows: int, ctx: np.ndarray, checked: bool) -> np.ndarray:
    """µs of decode steps of `rows` rows priced `kernels_us` by the op list, step i reading `ctx[i]` cached tokens in
    all, with the executor's work beyond its kernels: their in-step slowdown and the glue."""
    glue = executor.seconds(rows, 0, rows, 0.0, checked) + executor.per_kv_token_us * 1e-6 * ctx
    return kernels_us + executor.in_step(kernels_us) + glue * 1e6


def with_loads(tiers: TierPricing, compute_s: float, plans: list[Plan]) -> float:
    """A prefill step with the load-backs of the chunks that start a sequence found below HBM: each rank loads over
    its own GPUs' links in lock-step, so the rank that loads most sets the step; each sequence is told its own
    load-back time (its part of the time to its first token)."""
    host = storage = 0
    for plan in plans:
        h = s = 0
        for seq, _ in plan.prefill:
            if seq.loads is not None:
                h += seq.loads.host
                s += seq.loads.storage
                seq.load_s = tiers.load_s(seq.loads.host, seq.loads.storage)
        if h + s > host + storage:
            host, storage = h, s
    return tiers.step_s(compute_s, host, storage) if host + storage else compute_s


def dp_run(pricer: DPSteps, inst: Stepping, plans: list[Plan], n: int, host: HostTime) -> Timed:
    """End times of a DP instance's next n lock-step steps."""
    ranks = zip(inst.ranks, plans, strict=True)
    if any(p.prefill for p in plans):
        steps: list[RankStep] = []
        for r, p in ranks:
            if p.decode and r.sched.spec is not None:  # a verify step beside other ranks' chunks
                g = r.sched.growth(p, 1)
                steps.append((len(p.decode), int(p.ctx[0]), p.pages0 + int(g[0]), (), True))  # type: ignore[index]
            else:
                steps.append(
                    (
                        len(p.decode),
                        sum(s.computed + 1 for s in p.decode),
                        sum(s.table.n for s in p.decode),
                        [(c, s.computed) for s, c in p.prefill],
                        False,
                    )
                )
        t = pricer.step_s(steps)
        if inst.cost.tiers is not None:
            t = with_loads(inst.cost.tiers, t, plans)
        return [inst.clock + host.step(t)], None
    runs = []
    for r, p in ranks:
        if p.decode:
            growth = r.sched.growth(p, n)
            b = len(p.decode)  # a verify run reads the context its drawn tokens left; a plain one b more a step
            ctx = p.ctx[:n] if p.ctx is not None else p.ctx0 + b * np.arange(1, n + 1, dtype=np.int64)
            runs.append((b, ctx, p.pages0 + growth))
    priced, ends = pricer.decode_run(runs, inst.clock)
    return host.ends(inst.clock, priced.us, ends), priced
