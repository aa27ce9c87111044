"""A DP-attention instance on the modeled clock: its ranks each schedule their own sequences over their own pages,
and the instance steps them in lock-step (the slowest rank and the shared routed experts set each step,
`pricing.dpstep`).

A rank is the serving layer's `Instance` (a scheduler over its share of the pages, its own transfer queue, its
run of steps); this class is the clock around them. A request is placed on a rank when it reaches the instance
(`routing.dp_rank`: colocated and prefill at arrival, decode when its transfer is queued) and stays there, so
admission, preemption and page shortfalls are per rank. One run of steps is every rank's plan: it lasts until
the first rank's plan must change (the min of their `steps_until_change`), and a rank whose plan did not have to
change makes the same plan again at the next run, so the segment clock and the one-step clock stay identical.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import simpy

from simulator.config.scenario import Pool
from simulator.engine.stats import InstanceStats, wait_for_run
from simulator.pricing.costmodel import CostModel
from simulator.pricing.dpstep import DPDecodeSteps, DPSteps, RankStep
from simulator.results.record import InstanceRun, PageLog, RankRun
from simulator.serving.instance import Instance as Rank
from simulator.serving.routing import dp_rank
from simulator.serving.scheduler import Counters, Plan, Scheduler, StepEvents
from simulator.serving.sequence import Seq
from simulator.workload.request import Request


class Simulation(Protocol):
    """What a DP instance asks of the simulation that drives it (`engine.Simulation`)."""

    env: simpy.Environment
    step_mode: bool

    def after_schedule(self, inst: Any) -> None: ...

    def on_events(self, inst: Any, ev: StepEvents, ends: list[float]) -> None: ...


class RankCaches:
    """The ranks' caches read as the instance's: sums of pages, the shared page size."""

    def __init__(self, ranks: list[Rank]) -> None:
        self._caches = [r.cache for r in ranks]
        self.page_size = self._caches[0].page_size
        self.num_pages = sum(c.num_pages for c in self._caches)

    @property
    def available(self) -> int:
        return sum(c.available for c in self._caches)

    @property
    def lookup_tokens(self) -> int:
        return sum(c.lookup_tokens for c in self._caches)

    @property
    def hit_tokens(self) -> int:
        return sum(c.hit_tokens for c in self._caches)


class DPInstance:
    """One instance of a DP-attention pool on the modeled clock (what `engine.Instance` is for dp = 1)."""

    def __init__(
        self, sim: Simulation, pool_name: str, index: int, pool: Pool, ranks: list[Rank], cost: CostModel
    ) -> None:
        self.sim, self.pool_name, self.index, self.pool, self.cost = sim, pool_name, index, pool, cost
        self.ranks = ranks
        self.env = sim.env
        self.pricer = DPSteps(cost)
        self.cache = RankCaches(ranks)
        self.prefill_only = pool_name == "prefill"
        self.wake: simpy.Event | None = None
        self.clock = 0.0
        self.wake_at = 0.0
        self.links = [0.0] * pool.dp  # each rank's inbound KV-transfer link (its own NIC)
        self._run_start = 0.0
        self._run_ends: list[float] = []
        self._settled = 0.0  # the time of the last `settle`: transfers start then
        self._rank_of: dict[int, Rank] = {}  # request id -> its rank, while the instance needs to look it up
        self.stats = InstanceStats()
        self.rank_stats = [InstanceStats() for _ in ranks]  # pages held per rank (imbalance)
        self.busiest_seq_steps = 0  # Σ over steps of the busiest rank's decode batch (mean: decode_seq_steps / dp)
        self.env.process(self._loop())

    # -- placing requests on ranks ------------------------------------------------------------------------
    def _place(self, t: float) -> Rank:
        """The rank a request arriving at time t goes to (`routing.dp_rank`): on a prefill instance the least
        queued prompt tokens; else the least KV pages held, promised to transfers and queued to prefill."""
        if self.prefill_only:
            return self.ranks[dp_rank([r.sched.queued_tokens() for r in self.ranks])]
        size = self.cache.page_size
        return self.ranks[dp_rank([self._rank_load(r, t) + -(-r.sched.queued_tokens() // size) for r in self.ranks])]

    def enqueue_new(self, req: Request) -> None:
        rank = self._place(req.arrival)
        if self.prefill_only:
            self._rank_of[req.id] = rank  # its pages are released by id once transferred
        rank.sched.enqueue(rank.sched.new_seq(req, req.prompt_tokens, req.output_tokens))

    def receive_at(self, pseq: Seq, src: object, t: float) -> Seq:
        """A request prefilled elsewhere, handed off at time t, goes to the rank least loaded then and stays
        there (`Rank.receive` on it)."""
        rank = self._place(t)
        self._rank_of[pseq.req.id] = rank
        return rank.receive(pseq, src)  # type: ignore[arg-type]

    def queue_transfer(self, dseq: Seq, pseq: Seq, src: object) -> None:
        self._rank_of[dseq.req.id].queue_transfer(dseq, pseq, src)  # type: ignore[arg-type]

    @property
    def pending(self) -> bool:
        return any(r.pending for r in self.ranks)

    def start_transfers(self) -> Iterator[tuple[Seq, Seq, Rank, int]]:
        """Each rank's transfers that start now (FCFS per rank). The simulation records the instance's pages
        held; each rank's are recorded here, at the time of the `settle` that comes first."""
        for i, r in enumerate(self.ranks):
            avail = r.cache.available
            for started in r.start_transfers():
                self.rank_stats[i].pages_changed(self._settled, avail - r.cache.available)
                avail = r.cache.available
                yield started

    def link_for(self, dseq: Seq) -> int:
        """The inbound link of the rank the sequence is on."""
        return self._rank_of[dseq.req.id].index

    def finish_transfer(self, dseq: Seq) -> None:
        self._rank_of.pop(dseq.req.id).finish_transfer(dseq)

    def release_at(self, seq: Seq, t: float) -> None:
        rank = self._rank_of.pop(seq.req.id)
        avail = rank.cache.available
        rank.release(seq)
        self._pages_changed(rank.index, t, avail - rank.cache.available)

    def has_waiting(self) -> bool:
        return any(r.sched.waiting for r in self.ranks)

    def queued_tokens(self) -> int:
        return sum(r.sched.queued_tokens() for r in self.ranks)

    def prefix_pages(self, req: Request) -> int:
        return max(r.prefix_pages(req) for r in self.ranks)

    @property
    def schedulers(self) -> list[Scheduler]:
        return [r.sched for r in self.ranks]

    @property
    def counters(self) -> Counters:
        out = Counters()
        for r in self.ranks:
            c = r.sched.counters
            out.preempted += c.preempted
            out.aborted += c.aborted
            out.detected += c.detected
            out.false_positives += c.false_positives
            out.tokens_lost += c.tokens_lost
            out.checked_pages += c.checked_pages
            out.aborts += c.aborts
        return out

    def take_aborted(self) -> list[Seq]:
        return [seq for r in self.ranks for seq in r.take_aborted()]

    # -- load, as routing reads it at time t (also mid-run) ----------------------------------------------------
    def _started(self, t: float) -> int:
        ends = self._run_ends
        return min(len(ends), bisect_left(ends, t) + 1)

    def _rank_load(self, r: Rank, t: float) -> int:
        """Pages the rank holds at time t (its steps started by then included) plus its waiting transfers'."""
        cache = r.cache
        return cache.num_pages - cache.available + r._pending_pages + r.unbooked(self._started(t))

    def kv_load(self, t: float) -> int:
        return sum(self._rank_load(r, t) for r in self.ranks)

    def used_pages(self, t: float) -> int:
        return self.kv_load(t) - sum(r._pending_pages for r in self.ranks)

    def settle(self, t: float) -> None:
        """Book every rank's pages of the steps started by time t, before anything else touches its cache."""
        self._settled = t
        k = self._started(t)
        for i, r in enumerate(self.ranks):
            plan = r._run_plan
            if plan is not None and r._run_growth is not None and k > plan.booked:
                self._book(i, r, k)

    def _book(self, i: int, r: Rank, k: int) -> None:
        steps, counts = r.book_to(k)
        if steps:
            ends, start = self._run_ends, self._run_start
            times = [ends[step - 1] if step else start for step in steps]
            self.stats.page_t += times
            self.stats.page_d += counts
            self.rank_stats[i].page_t += times
            self.rank_stats[i].page_d += counts

    def _pages_changed(self, i: int, t: float, delta: int) -> None:
        self.stats.pages_changed(t, delta)
        self.rank_stats[i].pages_changed(t, delta)

    def run_needs_more_than_free(self) -> bool:
        n = len(self._run_ends)
        return any(r._run_plan is not None and r.unbooked(n) > r.cache.available for r in self.ranks)

    def notify(self, at: float) -> None:
        self.wake_at = max(self.wake_at, at)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def run_record(self) -> InstanceRun:
        """What the run left on this instance and each of its ranks, as plain data."""
        st, cache = self.stats, self.cache
        ranks = tuple(
            RankRun(PageLog(r.cache.num_pages, *rs.page_changes()), r.cache.lookup_tokens, r.cache.hit_tokens)
            for r, rs in zip(self.ranks, self.rank_stats, strict=True)
        )
        return InstanceRun(
            st.busy_s,
            st.steps,
            st.decode_seq_steps,
            self.busiest_seq_steps,
            st.max_batch,
            PageLog(cache.num_pages, *st.page_changes()),
            cache.lookup_tokens,
            cache.hit_tokens,
            self.counters,
            ranks,
        )

    # -- the lock-step loop -----------------------------------------------------------------------------------
    def _sleep(self):  # type: ignore[no-untyped-def]
        self.wake = self.env.event()
        yield self.wake
        self.clock = max(self.clock, self.wake_at)

    def _price(self, plans: list[Plan], n: int) -> tuple[list[float], DPDecodeSteps | None]:
        """End times of the lock-step's next n steps and, for a decode run, the priced steps to charge."""
        ranks = zip(self.ranks, plans, strict=True)
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
                            [(c, s._computed) for s, c in p.prefill],
                            False,
                        )
                    )
            return [self.clock + self.pricer.step_s(steps)], None
        runs = []
        for r, p in ranks:
            if p.decode:
                growth = r.sched.growth(p, n)
                b = len(p.decode)  # a verify run reads the context its drawn tokens left; a plain one b more a step
                ctx = p.ctx[:n] if p.ctx is not None else p.ctx0 + b * np.arange(1, n + 1, dtype=np.int64)
                runs.append((b, ctx, p.pages0 + growth))
        priced, ends = self.pricer.decode_run(runs, self.clock)
        return ends, priced

    def _loop(self):  # type: ignore[no-untyped-def]
        sim, st, ranks = self.sim, self.stats, self.ranks
        while True:
            if not any(r.sched.waiting or r.sched.running or r.pending for r in ranks):
                yield from self._sleep()
                continue
            plans = []
            for i, r in enumerate(ranks):
                avail = r.cache.available
                plans.append(r.sched.schedule())
                if avail != r.cache.available:  # preemptions' and aborts' releases
                    self._pages_changed(i, self.clock, avail - r.cache.available)
            if all(p.empty for p in plans):
                sim.after_schedule(self)
                yield from self._sleep()
                continue
            self._run_ends, self._run_start = [], self.clock
            for i, (r, p) in enumerate(zip(ranks, plans, strict=True)):
                r.begin(p)  # a decode run's first step takes its pages now
                if r._run_growth is not None and r._run_growth[0]:
                    self._pages_changed(i, self.clock, r._run_growth[0])
            if self.pending or any(r.sched.aborted for r in ranks):
                sim.after_schedule(self)
            n = (
                1
                if sim.step_mode
                else min(r.sched.steps_until_change(p) for r, p in zip(ranks, plans, strict=True) if not p.empty)
            )
            ends, priced = self._price(plans, n)
            self._run_ends = ends
            for r in ranks:
                r.planned(n)
            m = yield from wait_for_run(self, ends, n)
            if priced is not None:
                priced.charge(m, self.cost.usage)
            end = ends[m - 1]
            merged = StepEvents()
            batch = busiest = 0
            for i, (r, p) in enumerate(zip(ranks, plans, strict=True)):
                if p.decode:
                    self._book(i, r, m)
                r.end_run()
                avail = r.cache.available
                ev = r.sched.advance(p, m)
                if avail != r.cache.available:  # completions' releases
                    self._pages_changed(i, end, avail - r.cache.available)
                merged.first_tokens += ev.first_tokens
                merged.finished += ev.finished
                merged.prefilled += ev.prefilled
                batch += len(p.decode)
                busiest = max(busiest, len(p.decode))
            st.busy_s += end - self.clock
            st.steps += m
            if batch:
                st.decode_seq_steps += m * batch
                self.busiest_seq_steps += m * busiest
                st.max_batch = max(st.max_batch, batch)
            self.clock = end
            if merged.finished or merged.prefilled or merged.first_tokens or self.pending:
                sim.on_events(self, merged, ends)
