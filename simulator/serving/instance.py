"""The instance layer: one instance of a pool as every clock drives it.

A clock decides *when* things happen; this layer fixes *in which order* they touch an instance's cache, so the
modeled clock and the replay executor make the same decisions:

* building an instance from a pool (cache, integrity tracker, scheduler, the seeds they draw from);
* beginning a plan: a run's first step takes its pages before anything else may (transfers waiting for room
  get what is left), and later steps take theirs as their start times pass (`book_to`);
* the transfer queue of a decode instance: FCFS, pages held from the start of a transfer, and a finished
  transfer joins the batch (publishing its prefix keys) only after the clock has booked the steps started by then;
* the hand-off of a prefilled request: the sequence a decode instance receives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np

from simulator.capacity import PoolCapacity
from simulator.config.scenario import Pool, Scenario
from simulator.serving.cache import PagedCache
from simulator.serving.integrity import CheckingTracker, FaultInjector, NoopTracker
from simulator.serving.scheduler import Counters, Plan, Scheduler
from simulator.serving.sequence import Seq
from simulator.serving.speculation import Speculation
from simulator.workload.request import Request


def build_scheduler(
    sc: Scenario, name: str, pool: Pool, cap: PoolCapacity, injector: FaultInjector | None, seed: int
) -> Scheduler:
    """The scheduler of one instance of pool `name`, over a fresh cache; `seed` numbers the instance in the
    deployment (1, 2, … across pools, in pool order), so its fault draws repeat."""
    return _scheduler(
        sc,
        name,
        pool,
        cap.pages,
        pool.max_running,
        pool.max_batch_tokens,
        injector,
        np.random.default_rng([sc.seed, 11, seed]),
    )


def build_ranks(
    sc: Scenario, name: str, pool: Pool, cap: PoolCapacity, injector: FaultInjector | None, seed: int
) -> list[Instance]:
    """DP attention: the `pool.dp` ranks of one instance, each a scheduler over its own share of the instance's
    pages (`cap.per_rank`) with its share of the pool's limits: `max_running` and `max_batch_tokens` count the
    instance, as SGLang's --max-running-requests does (divided by dp_size under DP attention, tp_worker.py)."""
    assert cap.per_rank is not None
    dp = pool.dp
    running, tokens = max(1, pool.max_running // dp), max(1, pool.max_batch_tokens // dp)
    return [
        Instance(
            name,
            r,
            pool,
            _scheduler(
                sc,
                name,
                pool,
                cap.per_rank["pages"],
                running,
                tokens,
                injector,
                np.random.default_rng([sc.seed, 11, seed, r]),
            ),
        )
        for r in range(dp)
    ]


def _scheduler(
    sc: Scenario,
    name: str,
    pool: Pool,
    pages: int,
    max_running: int,
    max_batch_tokens: int,
    injector: FaultInjector | None,
    rng: np.random.Generator,
) -> Scheduler:
    cache = PagedCache(pages, pool.page_size, sc.prefix_cache.enabled)
    prefill_only = name == "prefill"
    spec = None if prefill_only or pool.speculative is None else Speculation(pool.speculative, sc.seed, pool.page_size)
    return Scheduler(
        cache,
        max_running=max_running,
        max_batch_tokens=max_batch_tokens,
        chunk_size=pool.chunk_size,
        reserve_tokens=pool.decode_reserve_tokens,
        prefill_only=prefill_only,
        tracker=CheckingTracker() if sc.integrity.enabled else NoopTracker(),
        injector=None if prefill_only else injector,
        fault_rate=sc.integrity.fault_rate,
        rng=rng,
        speculation=spec,
    )


def fault_injector(sc: Scenario) -> FaultInjector | None:
    """The deployment's one fault injector (shared by its decode instances), or None when no faults are planted."""
    if sc.integrity.fault_rate <= 0:
        return None
    return FaultInjector(list(sc.integrity.fault_kinds), np.random.default_rng([sc.seed, 7]))


class Instance:
    """An instance's serving state and the order rules on it; a clock subclasses it to add time."""

    def __init__(self, pool_name: str, index: int, pool: Pool, sched: Scheduler) -> None:
        self.pool_name, self.index, self.pool = pool_name, index, pool
        self.sched, self.cache = sched, sched.cache
        self.pending: deque[tuple[Seq, Seq, Instance]] = deque()  # decode: (seq here, seq on prefill, src)
        self._pending_pages = 0  # pages the pending transfers will hold (routing reads it per request)
        # The run of steps in flight: its plan and the decode batch's cumulative new pages after each step, as
        # ints (routing reads two per instance per request). None between runs.
        self._run_plan: Plan | None = None
        self._run_growth: list[int] | None = None

    # -- what the simulation and routing ask of an instance (a DP-attention instance answers for its ranks) ------
    def enqueue_new(self, req: Request) -> None:
        """A request arrives here to prefill (colocated or prefill pool)."""
        self.sched.enqueue(self.sched.new_seq(req, req.prompt_tokens, req.output_tokens))

    def release(self, seq: Seq) -> None:
        """A prefill instance frees a sequence's pages once its KV has been transferred."""
        self.sched.release(seq)

    def has_waiting(self) -> bool:
        return bool(self.sched.waiting)

    def queued_tokens(self) -> int:
        return self.sched.queued_tokens()

    def prefix_pages(self, req: Request) -> int:
        """Pages of the request's prompt this instance's cache holds (prefix-aware routing)."""
        return self.sched.cache.match_prefix(self.sched.keys_for(req))

    @property
    def counters(self) -> Counters:
        return self.sched.counters

    @property
    def schedulers(self) -> list[Scheduler]:
        """Its schedulers: this one's (a DP-attention instance has one a rank)."""
        return [self.sched]

    # -- the transfer queue --------------------------------------------------------------------------
    def queue_transfer(self, dseq: Seq, pseq: Seq, src: Instance) -> None:
        """A prefilled request waits here (FCFS) for room to start its KV transfer."""
        self.pending.append((dseq, pseq, src))
        self._pending_pages += -(-dseq.target // self.cache.page_size)

    def start_transfers(self) -> Iterator[tuple[Seq, Seq, Instance, int]]:
        """Transfers that start now, FCFS while the head of the queue finds room: each holds its pages from here.
        Yields (sequence here, sequence on the prefill instance, that instance, prompt tokens found cached)."""
        while self.pending:
            cached = self.sched.take_kv(self.pending[0][0])
            if cached is None:
                return
            dseq, pseq, src = self.pending.popleft()
            self._pending_pages -= -(-dseq.target // self.cache.page_size)
            yield dseq, pseq, src, cached

    def finish_transfer(self, dseq: Seq) -> None:
        """A transfer landed: the sequence joins the batch at the next plan. The clock books the steps started
        by the landing time first (`book_to`), so publishing its keys comes after those steps' evictions."""
        self.sched.start_decode(dseq)

    def receive(self, pseq: Seq, src: Instance) -> Seq:
        """The sequence this decode instance makes for a request prefilled elsewhere: the prefill's step sampled
        its first token; the prefill instance's page keys are reused when the page sizes agree."""
        req = pseq.req
        same_pages = self.cache.page_size == src.cache.page_size
        return self.sched.new_seq(
            req, req.prompt_tokens, req.output_tokens - 1, pseq.keys if same_pages else None, generated=1
        )

    # -- runs of steps ---------------------------------------------------------------------------------
    def begin(self, plan: Plan) -> None:
        """A run starts: its first step takes its pages now, before transfers waiting for room may start."""
        self._run_plan = plan
        if plan.decode:
            g0 = int(plan.need[0])  # type: ignore[index]  # the pages of the first step (need is per coming step)
            self._run_growth = [g0]
            if g0:
                self.book_to(1)
            else:
                plan.booked = 1

    def planned(self, n: int) -> None:
        """The clock decided the run is n steps long: routing reads the pages its steps will take."""
        plan = self._run_plan
        if n > 1 and plan is not None and plan.decode:
            self._run_growth = plan.growth[:n].tolist()  # type: ignore[index]

    def book_to(self, k: int) -> tuple[list[int], list[int]]:
        """Allocate the pages of the run's first k steps not yet allocated; returns the steps that took pages and
        how many each (most calls find them allocated or taking no page, and stop here)."""
        plan, g = self._run_plan, self._run_growth
        if plan is None:
            raise RuntimeError("book_to outside a run")
        b = plan.booked
        if g is None or k <= b:
            return [], []
        if g[k - 1] == (g[b - 1] if b else 0):  # none of steps b..k-1 takes a page
            plan.booked = k
            return [], []
        return self.sched.book(plan, k)

    def unbooked(self, k: int) -> int:
        """Pages the run's first k steps take that are not allocated yet."""
        plan, g = self._run_plan, self._run_growth
        if plan is None or g is None or k <= plan.booked:
            return 0
        return g[k - 1] - (g[plan.booked - 1] if plan.booked else 0)

    def end_run(self) -> None:
        self._run_plan = self._run_growth = None

    def take_aborted(self) -> list[Seq]:
        """Requests the integrity check stopped at the last plan (each reported once)."""
        out = list(self.sched.aborted)
        self.sched.aborted.clear()
        return out
