"""An instance on the engine's clock: its ranks (`serving.rank.Rank`: one, or `dp` under DP attention), a SimPy
process that steps them in lock-step, and the times of its runs.

Every run is every rank's plan: it lasts until the first rank's plan must change (the min of their
`steps_until_change`), and a rank whose plan did not have to change makes the same plan again at the next run,
so the segment clock and the one-step clock stay identical. The step timer (`engine.timer`) says when each step
of the run ends; the instance books each step's pages as its start time passes (`settle`), so the caches see the
same operations in the same order as under a clock that runs one step at a time. An outside event (an arrival,
a finished transfer) that lands inside a run ends it at the step in flight — where a one-step clock would next
decide.

A request is placed on a rank when it reaches the instance (`routing.dp_rank`: colocated and prefill at arrival,
decode when its transfer is queued) and stays there, so admission, preemption and page shortfalls are per rank.

A pool with `recv_interval` N > 1 polls for new requests as SGLang's receive skipper does
(managers/scheduler_recv_skipper.py): a counter gains 1 a decode step and 1,000 a step with prefill rows, and the
scheduler receives when it reaches N (then 0); an idle instance polls at once. A request that reaches a decoding
instance waits in its inbox for that poll, so a run ends there while one waits.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import simpy

from simulator.config.scenario import Pool
from simulator.engine.stats import InstanceStats, wait_for_run
from simulator.engine.timer import StepTimer
from simulator.pricing.costmodel import CostModel
from simulator.results.record import InstanceRun, PageLog, RankRun
from simulator.serving.rank import Rank
from simulator.serving.routing import dp_rank
from simulator.serving.scheduler import Counters, Scheduler, StepEvents
from simulator.serving.sequence import Seq
from simulator.workload.request import Request

NO_RUN = 1 << 62  # a run length longer than any: no rank has anything to run


class Driver(Protocol):
    """What an instance asks of the simulation that drives it (`engine.simulation.Simulation`)."""

    env: simpy.Environment
    step_mode: bool

    def after_schedule(self, inst: Instance) -> None: ...

    def on_events(self, inst: Instance, ev: StepEvents, ends: list[float]) -> None: ...


class Instance:
    """One instance of a pool: its ranks, its clock, its inbound KV-transfer links (one a rank) and its stats."""

    def __init__(
        self,
        sim: Driver,
        pool_name: str,
        index: int,
        pool: Pool,
        ranks: list[Rank],
        cost: CostModel,
        timer: StepTimer,
    ) -> None:
        self.sim, self.pool_name, self.index, self.pool, self.cost = sim, pool_name, index, pool, cost
        self.ranks, self.timer = ranks, timer
        self.single = len(ranks) == 1  # no DP attention: every request is on the one rank
        self.env = sim.env
        self.page_size = ranks[0].cache.page_size
        self.num_pages = sum(r.cache.num_pages for r in ranks)
        self.prefill_only = pool_name == "prefill"
        self.wake: simpy.Event | None = None
        # Exact times: an instance's clock is a running sum of step times, and every wake-up carries the exact
        # time of its cause. env.now only orders events, so the segment and step-by-step clocks compute
        # bit-identical timelines.
        self.clock = 0.0
        self.wake_at = 0.0
        self.links = [0.0] * len(ranks)  # when each rank's inbound KV-transfer link (its own NIC) is next idle
        # The run in flight's start and step ends (plain lists: routing bisects every instance's run on each
        # hand-off). A step takes its pages when it starts.
        self._run_start = 0.0
        self._run_ends: list[float] = []
        self._rank_of: dict[int, Rank] = {}  # request id -> its rank, while the instance needs to look it up
        self._transfers = 0  # transfers queued on the ranks and not started (`pending`, read after every run)
        self.recv_interval = pool.recv_interval
        self._inbox: list[Request] = []  # new requests arrived while decoding, until the next poll
        self._polls = 0  # the receive skipper's counter: decode steps since the last poll
        self.stats = InstanceStats()
        self.env.process(self._loop())

    # -- placing requests on ranks ------------------------------------------------------------------------
    def _place(self, t: float) -> Rank:
        """The rank a request arriving at time t goes to (`routing.dp_rank`): on a prefill instance the least
        queued prompt tokens; else the least KV pages held, promised to transfers and queued to prefill."""
        if self.single:
            return self.ranks[0]
        if self.prefill_only:
            return self.ranks[dp_rank([r.sched.queued_tokens() for r in self.ranks])]
        k, size = self._started(t), self.page_size
        return self.ranks[dp_rank([r.load(k) + -(-r.sched.queued_tokens() // size) for r in self.ranks])]

    def _rank(self, req_id: int, keep: bool = False) -> Rank:
        """The rank a request was placed on (forgotten unless `keep`)."""
        if self.single:
            return self.ranks[0]
        return self._rank_of[req_id] if keep else self._rank_of.pop(req_id)

    def enqueue_new(self, req: Request, t: float) -> None:
        """A request reaches this instance at time t to prefill (colocated or prefill pool): its scheduler takes it
        now, or at its next poll if it polls every few steps and is busy."""
        if self.recv_interval > 1 and (self._inbox or self._busy()):
            self._inbox.append(req)
            return
        self._take(req, t)

    def _busy(self) -> bool:
        return any(r.sched.running or r.sched.waiting for r in self.ranks)

    def _poll(self, t: float) -> None:
        """The scheduler receives the requests waiting in the inbox, in arrival order, at time t."""
        self._polls = 0
        inbox, self._inbox = self._inbox, []
        for req in inbox:
            self._take(req, t)

    def _take(self, req: Request, t: float) -> None:
        rank = self._place(t)
        if self.prefill_only and not self.single:
            self._rank_of[req.id] = rank  # its pages are released by id once transferred
        rank.enqueue_new(req)

    def receive_at(self, pseq: Seq, src: Instance, t: float) -> Seq:
        """A request prefilled elsewhere, handed off at time t, goes to the rank least loaded then and stays there."""
        rank = self._place(t)
        if not self.single:
            self._rank_of[pseq.req.id] = rank
        return rank.receive(pseq, src.page_size)

    def queue_transfer(self, dseq: Seq, pseq: Seq, src: Instance) -> None:
        self._rank(dseq.req.id, keep=True).queue_transfer(dseq, pseq, src)
        self._transfers += 1

    def start_transfers(self, t: float) -> Iterator[tuple[Seq, Seq, Instance, int]]:
        """Each rank's transfers that start at time t (FCFS per rank), the pages they hold logged then."""
        for r in self.ranks:
            avail = r.cache.available
            for started in r.start_transfers():
                self._transfers -= 1
                r.log.pages_changed(t, avail - r.cache.available)
                avail = r.cache.available
                yield started

    def link_for(self, dseq: Seq) -> int:
        """The inbound link of the rank the sequence is on."""
        return self._rank(dseq.req.id, keep=True).index

    def finish_transfer(self, dseq: Seq) -> None:
        self._rank(dseq.req.id).finish_transfer(dseq)

    def release_at(self, seq: Seq, t: float) -> None:
        """A prefill instance frees a transferred sequence's pages at time t."""
        rank = self._rank(seq.req.id)
        avail = rank.cache.available
        rank.release(seq)
        rank.log.pages_changed(t, avail - rank.cache.available)

    @property
    def pending(self) -> bool:
        """Transfers waiting for room here."""
        return self._transfers > 0

    def has_waiting(self) -> bool:
        if self._inbox:
            return True
        if self.single:
            return bool(self.ranks[0].sched.waiting)
        return any(r.sched.waiting for r in self.ranks)

    def queued_tokens(self) -> int:
        """Prompt tokens queued or prefilling here, the inbox's included (prefill routing reads every instance per
        request)."""
        inbox = sum(req.prompt_tokens for req in self._inbox)
        if self.single:
            return self.ranks[0].sched.queued_tokens() + inbox
        return sum(r.sched.queued_tokens() for r in self.ranks) + inbox

    def waiting_requests(self) -> int:
        """Requests waiting here to be scheduled: in the inbox, queued to prefill, or prefilled elsewhere and
        waiting for room to start their KV transfer (what an engine reports as its waiting queue, and the gateway's
        queue scorer reads)."""
        return len(self._inbox) + sum(len(r.sched.waiting) + len(r.pending) for r in self.ranks)

    def prefix_pages(self, req: Request) -> int:
        return max(r.prefix_pages(req) for r in self.ranks)

    @property
    def schedulers(self) -> list[Scheduler]:
        return [r.sched for r in self.ranks]

    @property
    def counters(self) -> Counters:
        if self.single:
            return self.ranks[0].counters
        out = Counters()
        for r in self.ranks:
            c = r.counters
            out.preempted += c.preempted
            out.aborted += c.aborted
            out.detected += c.detected
            out.false_positives += c.false_positives
            out.tokens_lost += c.tokens_lost
            out.checked_pages += c.checked_pages
            out.preempt_aborts += c.preempt_aborts
            out.aborts += c.aborts
        return out

    def take_aborted(self) -> list[Seq]:
        return [seq for r in self.ranks for seq in r.take_aborted()]

    # -- load, as routing reads it at time t (also mid-run) ----------------------------------------------------
    def _started(self, t: float) -> int:
        """Steps of the run in flight that have started by time t (the one in flight at t included)."""
        ends = self._run_ends
        return min(len(ends), bisect_left(ends, t) + 1)

    def kv_load(self, t: float) -> int:
        """What least-KV routing compares: pages held at time t (the run's steps started by then included) plus
        pages of transfers waiting to start — Σ of the ranks' `Rank.load` at the steps started by t. Routing reads
        every instance for every request, so `Rank.load` is written out here (a test holds the two equal)."""
        ends = self._run_ends
        k = bisect_left(ends, t) + 1  # = self._started(t)
        if k > len(ends):
            k = len(ends)
        load = 0
        for r in self.ranks:
            cache, g = r.cache, r.run_growth
            load += cache.num_pages - cache.available + r.pending_pages
            if g is not None:
                b = r.run_plan.booked  # type: ignore[union-attr]
                if k > b:
                    load += g[k - 1] - (g[b - 1] if b else 0)
        return load

    def used_pages(self, t: float) -> int:
        """Pages held at time t, the run's steps started by then included (read-only: must not cut or book)."""
        return self.kv_load(t) - sum(r.pending_pages for r in self.ranks)

    def settle(self, t: float) -> None:
        """Book every rank's pages of the steps started by time t, before anything else touches its cache."""
        k = self._started(t)
        for r in self.ranks:
            r.settle(k, self._run_ends, self._run_start)

    def run_needs_more_than_free(self) -> bool:
        """True when the run in flight can no longer book all its remaining steps' pages on some rank."""
        n = len(self._run_ends)
        for r in self.ranks:
            if r.short_of_pages(n):
                return True
        return False

    def notify(self, at: float) -> None:
        self.wake_at = max(self.wake_at, at)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    # -- the lock-step loop -----------------------------------------------------------------------------------
    def _sleep(self) -> Iterator[simpy.Event]:
        """Wait until notified; the clock moves to the time of the cause."""
        self.wake = self.env.event()
        yield self.wake
        self.clock = max(self.clock, self.wake_at)

    def _loop(self) -> Iterator[Any]:
        """Each run of steps: every rank schedules and begins its plan (the first step takes its pages), the step
        timer says when the steps end, the instance waits them out (or until an outside event cuts the run at the
        step in flight), then every rank books the steps that ran and advances by them."""
        sim, st, ranks = self.sim, self.stats, self.ranks
        while True:
            if self._inbox and not self._busy():  # an idle scheduler polls at once
                self._poll(self.clock)
            idle = not self._transfers
            for r in ranks:
                if idle and (r.sched.waiting or r.sched.running):
                    idle = False
            if idle:  # nothing to decide
                yield from self._sleep()
                continue
            self._run_ends, self._run_start = [], self.clock
            plans, n, aborted = [], NO_RUN, False
            for r in ranks:
                p, k = r.start(self.clock, sim.step_mode)
                plans.append(p)
                aborted = aborted or bool(r.sched.aborted)
                if k and k < n:  # the run lasts until the first rank's plan must change
                    n = k
            if n == NO_RUN:  # no rank has anything to run
                sim.after_schedule(self)
                yield from self._sleep()
                continue
            if self._inbox:  # a request waits for the next poll: the run ends there
                n = min(n, self.recv_interval - self._polls)
            if self._transfers or aborted:
                sim.after_schedule(self)
            ends, priced = self.timer.time_run(self, plans, n)
            self._run_ends = ends
            m = yield from wait_for_run(self, ends, n)
            if priced is not None:
                priced.charge(m, self.cost.usage)
            if self.single:
                ev = ranks[0].finish(plans[0], m, ends, self._run_start)
                batch = busiest = len(plans[0].decode)
            else:  # the ranks' events of one run as the instance's
                ev, batch, busiest = StepEvents(), 0, 0
                for r, p in zip(ranks, plans, strict=True):
                    done = r.finish(p, m, ends, self._run_start)
                    ev.first_tokens += done.first_tokens
                    ev.finished += done.finished
                    ev.prefilled += done.prefilled
                    batch += len(p.decode)
                    busiest = max(busiest, len(p.decode))
            end = ends[m - 1]
            st.busy_s += end - self.clock
            st.steps += m
            if batch:
                st.decode_seq_steps += m * batch
                st.busiest_seq_steps += m * busiest
                if batch > st.max_batch:
                    st.max_batch = batch
            self.clock = end
            if self.recv_interval > 1:  # the receive skipper's counter: 1 a decode step, the interval a prefill
                prefill = any(p.prefill for p in plans)
                self._polls = 0 if prefill else (self._polls + m) % self.recv_interval
                if self._inbox and self._polls == 0:
                    self._poll(end)
            if ev.finished or ev.prefilled or ev.first_tokens or self._transfers:
                sim.on_events(self, ev, ends)

    # -- what the run leaves ----------------------------------------------------------------------------------
    def run_record(self) -> InstanceRun:
        """What the run left on this instance (and, under DP attention, on each of its ranks), as plain data."""
        st = self.stats
        logs = [PageLog(r.cache.num_pages, *r.log.page_changes()) for r in self.ranks]
        ranks = tuple(
            RankRun(g, r.cache.lookup_tokens, r.cache.hit_tokens) for g, r in zip(logs, self.ranks, strict=True)
        )
        if self.single:
            whole, ranks = logs[0], ()
        else:  # the instance's pages: every rank's changes (their order does not matter, `PageLog`)
            whole = PageLog(self.num_pages, np.concatenate([g.t for g in logs]), np.concatenate([g.d for g in logs]))
        return InstanceRun(
            busy_s=st.busy_s,
            steps=st.steps,
            decode_seq_steps=st.decode_seq_steps,
            busiest_seq_steps=st.busiest_seq_steps,
            max_batch=st.max_batch,
            log=whole,
            lookup_tokens=sum(r.cache.lookup_tokens for r in self.ranks),
            hit_tokens=sum(r.cache.hit_tokens for r in self.ranks),
            counters=self.counters,
            ranks=ranks,
            tiers=self._tier_counters(),
        )

    def _tier_counters(self) -> dict[str, int] | None:
        """Hits and page moves by tier, summed over the ranks (None: HBM only)."""
        caches = [r.cache for r in self.ranks if r.cache.tiered]
        if not caches:
            return None
        out: dict[str, int] = {}
        for c in caches:
            for k, v in c.counters().items():  # type: ignore[attr-defined]
                out[k] = out.get(k, 0) + v
        return out
