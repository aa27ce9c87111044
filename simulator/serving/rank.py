"""The rank layer: one scheduler over its own pages, as every clock drives it — a whole instance without DP
attention, one of its `dp` ranks with it.

A clock decides *when* things happen; this layer fixes *in which order* they touch a rank's cache, so the
modeled clock and the replay executor make the same decisions:

* building the ranks of an instance from a pool (cache, integrity tracker, scheduler, the seeds they draw from);
* beginning a plan: a run's first step takes its pages before anything else may (transfers waiting for room
  get what is left), and later steps take theirs as their start times pass (`settle`);
* the transfer queue of a decode rank: FCFS, pages held from the start of a transfer, and a finished transfer
  joins the batch (publishing its prefix keys) only after the clock has booked the steps started by then;
* the hand-off of a prefilled request: the sequence a decode rank receives.

Each question a clock asks comes as a pair in the manner of a block manager's `can_allocate` / `allocate`:
`unbooked` / `settle`, `short_of_pages` / `start`, `load` (what routing compares) beside `queue_transfer`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.capacity import PoolCapacity
from simulator.config.scenario import Pool, Scenario
from simulator.serving.integrity import CheckingTracker, FaultInjector, NoopTracker
from simulator.serving.scheduler import Counters, Plan, Scheduler, StepEvents
from simulator.serving.sequence import Seq
from simulator.serving.speculation import Speculation
from simulator.serving.tiers import cache_for
from simulator.workload.request import Request


@dataclass
class PageChanges:
    """KV pages held by one rank, as (time, change) pairs at the times its clock names: changes commute, so the
    record is the same however the clock was cut into runs, and the occupancy curve is their running sum in time
    order."""

    page_t: list[float] = field(default_factory=list)
    page_d: list[int] = field(default_factory=list)

    def pages_changed(self, t: float, delta: int) -> None:
        if delta:
            self.page_t.append(t)
            self.page_d.append(delta)

    def page_changes(self) -> tuple[np.ndarray, np.ndarray]:
        """All (time, change) pairs, in no particular order."""
        return np.array(self.page_t, dtype=float), np.array(self.page_d, dtype=np.int64)


def build_ranks(
    sc: Scenario,
    name: str,
    pool: Pool,
    cap: PoolCapacity,
    injector: FaultInjector | None,
    seed: int,
    tracker: Any = None,
) -> list[Rank]:
    """The ranks of one instance of pool `name`: one without DP attention, `pool.dp` with it, each a scheduler
    over its own share of the instance's pages (`cap.per_rank`) with its share of the pool's limits —
    `max_running` and `max_batch_tokens` count the instance, as SGLang's --max-running-requests does (divided by
    dp_size under DP attention, tp_worker.py). `seed` numbers the instance in the deployment (1, 2, … across
    pools, in pool order), so its fault draws repeat; `tracker`: the integrity tracker to use instead of the
    simulator's own (the replay's device check)."""
    dp = pool.dp
    if dp == 1:
        rngs = [np.random.default_rng([sc.seed, 11, seed])]
        pages, running, tokens = cap.pages, pool.max_running, pool.max_batch_tokens
    else:
        assert cap.per_rank is not None
        rngs = [np.random.default_rng([sc.seed, 11, seed, r]) for r in range(dp)]
        pages = cap.per_rank["pages"]
        running, tokens = max(1, pool.max_running // dp), max(1, pool.max_batch_tokens // dp)
    return [
        Rank(r, _scheduler(sc, name, pool, cap, pages, running, tokens, injector, rng, tracker))
        for r, rng in enumerate(rngs)
    ]


def _scheduler(
    sc: Scenario,
    name: str,
    pool: Pool,
    cap: PoolCapacity,
    pages: int,
    max_running: int,
    max_batch_tokens: int,
    injector: FaultInjector | None,
    rng: np.random.Generator,
    tracker: Any,
) -> Scheduler:
    tiers = cap.tiers or {}
    cache = cache_for(
        pages,
        pool.page_size,
        sc.prefix_cache.enabled,
        tiers.get("host_pages", 0),
        tiers.get("storage_pages", 0),
        pool.kv_tier_write == "write_back",
    )
    prefill_only = name == "prefill"
    spec = None if prefill_only or pool.speculative is None else Speculation(pool.speculative, sc.seed, pool.page_size)
    if tracker is None:
        tracker = CheckingTracker() if sc.integrity.enabled else NoopTracker()
    return Scheduler(
        cache,
        max_running=max_running,
        max_batch_tokens=max_batch_tokens,
        chunk_size=pool.chunk_size,
        reserve_tokens=pool.decode_reserve_tokens,
        prefill_only=prefill_only,
        tracker=tracker,
        injector=None if prefill_only else injector,
        fault_rate=sc.integrity.fault_rate,
        rng=rng,
        speculation=spec,
        mixed=pool.mixed_chunked_prefill,
        max_preemptions=pool.max_preemptions,
    )


def fault_injector(sc: Scenario) -> FaultInjector | None:
    """The deployment's one fault injector (shared by its decode ranks), or None when no faults are planted."""
    if sc.integrity.fault_rate <= 0:
        return None
    return FaultInjector(list(sc.integrity.fault_kinds), np.random.default_rng([sc.seed, 7]))


class Rank:
    """A scheduler over its own pages, its transfer queue, and the run of steps in flight on it."""

    def __init__(self, index: int, sched: Scheduler) -> None:
        self.index = index
        self.sched, self.cache = sched, sched.cache
        self.pending: deque[tuple[Seq, Seq, Any]] = deque()  # decode: (seq here, seq on prefill, its instance)
        self.pending_pages = 0  # pages the pending transfers will hold (routing reads it per request)
        # The run of steps in flight: its plan and the decode batch's cumulative new pages after each step, as
        # ints. None between runs and for a run without decode. Read-only outside this class: routing reads two of
        # them per rank per request (`load`, and the instance's `kv_load`, which writes `load` out).
        self.run_plan: Plan | None = None
        self.run_growth: list[int] | None = None
        self.log = PageChanges()  # pages held over the run, at the times the clock names

    # -- requests arriving ---------------------------------------------------------------------------------
    def enqueue_new(self, req: Request) -> None:
        """A request arrives here to prefill (colocated or prefill pool)."""
        self.sched.enqueue(self.sched.new_seq(req, req.prompt_tokens, req.output_tokens))

    def receive(self, pseq: Seq, src_page_size: int) -> Seq:
        """The sequence this decode rank makes for a request prefilled elsewhere: the prefill's step sampled its
        first token; the prefill rank's page keys are reused when the page sizes agree."""
        req = pseq.req
        same_pages = self.cache.page_size == src_page_size
        return self.sched.new_seq(
            req, req.prompt_tokens, req.output_tokens - 1, pseq.keys if same_pages else None, generated=1
        )

    def release(self, seq: Seq) -> None:
        """A prefill rank frees a sequence's pages once its KV has been transferred."""
        self.sched.release(seq)

    def prefix_pages(self, req: Request) -> int:
        """Pages of the request's prompt this rank's cache holds (prefix-aware routing)."""
        return self.sched.cache.match_prefix(self.sched.keys_for(req))

    def take_aborted(self) -> list[Seq]:
        """Requests the integrity check stopped at the last plan (each reported once)."""
        out = list(self.sched.aborted)
        self.sched.aborted.clear()
        return out

    @property
    def counters(self) -> Counters:
        return self.sched.counters

    # -- the transfer queue --------------------------------------------------------------------------------
    def queue_transfer(self, dseq: Seq, pseq: Seq, src: Any) -> None:
        """A prefilled request waits here (FCFS) for room to start its KV transfer."""
        self.pending.append((dseq, pseq, src))
        self.pending_pages += -(-dseq.target // self.cache.page_size)

    def start_transfers(self) -> Iterator[tuple[Seq, Seq, Any, int]]:
        """Transfers that start now, FCFS while the head of the queue finds room: each holds its pages from here.
        Yields (sequence here, sequence on the prefill rank, its instance, prompt tokens found cached)."""
        while self.pending:
            cached = self.sched.take_kv(self.pending[0][0])
            if cached is None:
                return
            dseq, pseq, src = self.pending.popleft()
            self.pending_pages -= -(-dseq.target // self.cache.page_size)
            yield dseq, pseq, src, cached

    def finish_transfer(self, dseq: Seq) -> None:
        """A transfer landed: the sequence joins the batch at the next plan. The clock books the steps started
        by the landing time first (`settle`), so publishing its keys comes after those steps' evictions."""
        self.sched.start_decode(dseq)

    # -- a run of steps as the clock drives it: start, settle as step starts pass, finish ----------
    def start(self, now: float, one_step: bool = False) -> tuple[Plan, int]:
        """Schedule the next run and begin it at time `now`: its first step takes its pages now, before transfers
        waiting for room may start; preemptions' and aborts' releases and those pages are logged at `now`. Returns
        the plan and how many identical steps it can run (0: nothing to run; 1 with `one_step`, a clock that runs
        one step at a time). Routing reads the pages those steps will take (`run_growth`); a clock that runs fewer
        of them (the first of a DP instance's ranks to change ends every rank's run) reads only as far as it ran."""
        cache = self.cache
        avail = cache.available
        sched = self.sched
        plan = sched.schedule()
        if avail != cache.available:
            self.log.pages_changed(now, avail - cache.available)
        self.run_plan = plan
        if not plan.decode:
            return plan, 1 if plan.prefill else 0
        g0 = int(plan.need[0])  # type: ignore[index]  # the pages of the first step (need is per coming step)
        self.run_growth = [g0]
        if g0:
            self.settle(1, [], now)
        else:
            plan.booked = 1
        n = 1 if one_step else sched.steps_until_change(plan)
        if n > 1:
            self.run_growth = plan.growth[:n].tolist()  # type: ignore[index]
        return plan, n

    def unbooked(self, k: int) -> int:
        """Pages the run's first k steps take that are not allocated yet (0 between runs)."""
        plan, g = self.run_plan, self.run_growth
        if plan is None or g is None or k <= plan.booked:
            return 0
        return g[k - 1] - (g[plan.booked - 1] if plan.booked else 0)

    def settle(self, k: int, ends: list[float], start: float) -> None:
        """Allocate the pages of the run's first k steps not yet allocated (nothing between runs), before anything
        else touches the cache, and log them at each step's start (`start`, then the end of the step before)."""
        plan, g = self.run_plan, self.run_growth
        if plan is None or g is None:
            return
        b = plan.booked
        if k <= b:
            return
        if g[k - 1] == (g[b - 1] if b else 0):  # none of steps b..k-1 takes a page (most calls)
            plan.booked = k
            return
        steps, counts = self.sched.book(plan, k)
        log = self.log
        log.page_t += [ends[step - 1] if step else start for step in steps]
        log.page_d += counts

    def short_of_pages(self, k: int) -> bool:
        """True when the run in flight can no longer book its first k steps' pages from what is free."""
        return self.run_plan is not None and self.unbooked(k) > self.cache.available

    def load(self, k: int) -> int:
        """What least-KV routing compares, with the run's first k steps started: pages held (those steps' pages
        included) plus the pages of transfers waiting to start."""
        cache = self.cache
        return cache.num_pages - cache.available + self.pending_pages + self.unbooked(k)

    def finish(self, plan: Plan, m: int, ends: list[float], start: float) -> StepEvents:
        """The run's first m steps ran (ending at `ends`): book their pages, advance by them, log the releases."""
        if plan.decode:
            self.settle(m, ends, start)
        self.run_plan = self.run_growth = None
        cache = self.cache
        avail = cache.available
        ev = self.sched.advance(plan, m)
        if avail != cache.available:
            self.log.pages_changed(ends[m - 1], avail - cache.available)
        return ev
