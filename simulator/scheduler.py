"""One instance's scheduler: continuous batching, chunked prefill, admission, preemption by recompute.

Free of SimPy and of wall-clock time: both clocks drive it the same way —

    plan = sched.schedule()                 # admit, preempt, check integrity, pick prefill chunks + decode batch
    n = sched.steps_until_change(plan)      # identical steps that follow before a decision can change
    sched.advance(plan, k)                  # apply k <= n of them

The modeled clock prices n steps at once; the real clock (replay executor) runs k = 1 at a time. The
decisions are the same because nothing a decision reads changes inside a run of identical steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from simulator.cache import BlockTable, OutOfPages, PagedCache, PageKey, page_keys
from simulator.integrity import CheckingTracker, Fault, FaultInjector, NoopTracker, release_after_fault
from simulator.request import Request


class SeqArrays:
    """Per-sequence progress as arrays, so a run of k decode steps updates a whole batch in a few numpy ops.

    A sequence gets a slot for its life on the instance; slots are never reused (a run holds a few thousand
    sequences per instance, a few hundred kB at most), so a finished sequence can still be read.
    """

    FIELDS = ("computed", "remaining", "generated", "fault_in")

    def __init__(self, capacity: int = 256) -> None:
        self.n = 0
        for f in self.FIELDS:
            setattr(self, f, np.zeros(capacity, dtype=np.int64))

    def new_slot(self) -> int:
        if self.n == len(self.computed):
            for f in self.FIELDS:
                setattr(self, f, np.concatenate([getattr(self, f), np.zeros(self.n, dtype=np.int64)]))
        self.n += 1
        return self.n - 1


def _array_field(name: str) -> property:
    def get(self: Seq) -> int:
        return int(getattr(self.arrays, name)[self.slot])

    def set_(self: Seq, value: int) -> None:
        getattr(self.arrays, name)[self.slot] = value

    return property(get, set_)


@dataclass(eq=False)
class Seq:
    """A request's life on one instance."""

    req: Request
    target: int  # tokens whose KV must be in cache before decoding (prompt, or prompt + output on recompute)
    arrays: SeqArrays
    slot: int
    table: BlockTable = field(default_factory=BlockTable)
    keys: list[PageKey] = field(default_factory=list)
    order: int = 0  # admission order: preemption takes the newest first
    fault: Fault | None = None
    status: str = "waiting"  # waiting | prefill | transfer | decode | prefilled | done | aborted

    computed = _array_field("computed")  # tokens whose KV is in this instance's cache
    remaining = _array_field("remaining")  # output tokens this instance still has to produce
    generated = _array_field("generated")  # output tokens produced so far (recompute must redo them)
    fault_in = _array_field("fault_in")  # decode steps before an injected fault (-1: none planned)


@dataclass(slots=True)
class Plan:
    prefill: list[tuple[Seq, int]] = field(default_factory=list)  # (sequence, tokens of this chunk)
    decode: list[Seq] = field(default_factory=list)
    # Read once when the decode batch is fixed (pricing, growth, checks and the advance all reuse them); None
    # for a plan without decode, which most empty schedules are, so building one stays cheap.
    idx: np.ndarray | None = None  # the decode batch's slots
    ctx: np.ndarray | None = None  # each sequence's tokens cached
    pages0: int = 0  # pages the batch holds before its first step
    per_offset: np.ndarray | None = None  # sequences needing a new page at step s, for s < page_size
    growth: np.ndarray | None = None  # cumulative new pages after each coming decode step, computed once
    booked: int = 0  # decode steps whose pages are allocated (a step takes its pages when it starts)
    offsets: np.ndarray | None = None  # each sequence's first step (mod page_size) that needs a new page
    # Batch rows grouped by offset, in batch order within a group, made on the first booking that needs them.
    by_offset: list[int] | None = None
    start: list[int] | None = None

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


@dataclass
class StepEvents:
    """What k applied steps produced; step indices are 0-based within the k steps."""

    first_tokens: list[tuple[Seq, int]] = field(default_factory=list)
    finished: list[tuple[Seq, int]] = field(default_factory=list)  # completed on this instance
    prefilled: list[tuple[Seq, int]] = field(default_factory=list)  # prefill-only: KV ready to transfer
    checked_pages: int = 0


@dataclass(frozen=True)
class AbortEvent:
    """One request the integrity check stopped: which page of its table failed, how, and what was injected."""

    request: int
    slot: int
    page: int  # the page id its table held there (−1 or out of range for an invalid id)
    kind: str  # "tag_mismatch" | "invalid_page"
    injected: str | None  # the fault planted there, None for a false positive


@dataclass
class Counters:
    preempted: int = 0
    aborted: int = 0
    detected: int = 0
    false_positives: int = 0
    tokens_lost: int = 0
    checked_pages: int = 0
    aborts: list[AbortEvent] = field(default_factory=list)


class Scheduler:
    def __init__(
        self,
        cache: PagedCache,
        *,
        max_running: int,
        max_batch_tokens: int,
        chunk_size: int,
        reserve_tokens: int,
        prefill_only: bool,
        tracker: CheckingTracker | NoopTracker,
        injector: FaultInjector | None = None,
        fault_rate: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.cache = cache
        self.max_running = max_running
        self.max_batch_tokens = max_batch_tokens
        self.chunk_size = chunk_size
        self.reserve_pages = -(-reserve_tokens // cache.page_size)
        self.prefill_only = prefill_only
        self.tracker = tracker
        self.injector = injector
        self.fault_rate = fault_rate
        self.rng = rng
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.arrays = SeqArrays()
        self._decode: list[Seq] = []
        self._decode_tables: list[BlockTable] = []
        self._decode_idx = np.zeros(0, dtype=np.int64)
        self._decode_dirty = False
        self.counters = Counters()
        self.aborted: list[Seq] = []
        self._order = 0

    # -- entry points ------------------------------------------------------------------------------
    def new_seq(self, req: Request, target: int, remaining: int, keys: list[PageKey] | None = None) -> Seq:
        """`keys`: the request's page keys if already known for this page size (the prefill instance's)."""
        seq = Seq(req, target=target, arrays=self.arrays, slot=self.arrays.new_slot())
        seq.remaining = remaining
        seq.fault_in = -1
        seq.keys = self.keys_for(req) if keys is None else keys
        return seq

    def keys_for(self, req: Request) -> list[PageKey]:
        return page_keys(req.blocks, req.block_tokens, self.cache.page_size, req.prompt_tokens)

    def enqueue(self, seq: Seq) -> None:
        """A request that must prefill here (new, or preempted and recomputing)."""
        seq.status = "waiting"
        self.waiting.append(seq)

    def can_take_kv(self, seq: Seq) -> bool:
        """Disaggregated decode: can this instance hold the transferred prompt plus growth room now?"""
        cost = self.cache.admission_cost(seq.keys, self._pages(seq.target))
        return len(self.running) < self.max_running and cost + self.reserve_pages <= self.cache.available

    def take_kv(self, seq: Seq) -> int:
        """Hold the pages for a transferred prompt (from the start of the transfer); returns cached tokens."""
        hit = self.cache.acquire_prefix(seq.table, seq.keys)
        self.cache.note_lookup(seq.req.prompt_tokens)
        self.cache.allocate(seq.table, self._pages(seq.target) - hit)
        seq.computed = seq.target
        seq.status = "transfer"
        self._admit(seq)
        return hit * self.cache.page_size

    def start_decode(self, seq: Seq) -> None:
        """Transfer finished: the sequence joins the decode batch."""
        self._set_status(seq, "decode")
        self.cache.publish(seq.table, seq.keys)

    def release(self, seq: Seq) -> None:
        """A prefill-only instance frees a sequence's pages once its KV has been transferred."""
        self.cache.release(seq.table)

    # -- scheduling --------------------------------------------------------------------------------
    def schedule(self) -> Plan:
        self._check_integrity()
        self._admit_waiting()
        plan = Plan()
        ps = self.cache.page_size
        while True:
            plan.decode, plan.idx = self._decode_batch()
            if not plan.decode:
                break
            plan.ctx = self.arrays.computed[plan.idx]
            # A sequence with c cached tokens needs a new page at step s (0-based) when c + 1 + s ≡ 1 (mod ps).
            plan.offsets = (-plan.ctx) % ps
            plan.per_offset = np.bincount(plan.offsets, minlength=ps)
            if int(plan.per_offset[0]) <= self.cache.available:
                plan.pages0 = int(((plan.ctx + (ps - 1)) // ps).sum())
                break
            self._preempt_newest()
        budget = self.max_batch_tokens - len(plan.decode)
        if len(self.running) > len(plan.decode):  # some sequence is not decoding: maybe prefilling
            for seq in self.running:
                if seq.status == "prefill" and budget > 0:
                    chunk = min(seq.target - seq.computed, self.chunk_size, budget)
                    plan.prefill.append((seq, chunk))
                    budget -= chunk
        return plan

    def steps_until_change(self, plan: Plan, limit: int = 1 << 30) -> int:
        """Identical decode steps that can follow: until a completion, a page shortfall or a planned fault."""
        if plan.prefill or not plan.decode:
            return 1 if not plan.empty else 0
        a, idx = self.arrays, plan.idx
        n = min(limit, int(a.remaining[idx].min()))
        if self.injector is not None:  # fault_in is only ever planned with an injector
            faults = a.fault_in[idx]
            faults = faults[faults >= 0]
            if faults.size:
                n = min(n, max(1, int(faults.min())))
        new_pages = self.growth(plan, n)
        if new_pages[-1] > self.cache.available:
            n = max(1, int(np.searchsorted(new_pages, self.cache.available, side="right")))
        return n

    def growth(self, plan: Plan, n: int) -> np.ndarray:
        """Cumulative new pages the decode batch needs after each of its next n steps (O(n + batch)), computed
        once per plan (pricing, checks, occupancy)."""
        if plan.growth is None or len(plan.growth) < n:
            per_offset = plan.per_offset
            assert per_offset is not None
            plan.growth = np.cumsum(per_offset[:n] if n <= len(per_offset) else np.resize(per_offset, n))
        return plan.growth[:n]

    def context_totals(self, plan: Plan, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Total context and total pages the batch reads at each of the next n steps (for pricing)."""
        steps = np.arange(1, n + 1, dtype=np.int64)
        return int(plan.ctx.sum()) + len(plan.idx) * steps, plan.pages0 + self.growth(plan, n)

    def book(self, plan: Plan, k: int) -> tuple[list[int], list[int]]:
        """Allocate the pages the plan's first k decode steps write. A step takes its pages when it starts, so
        a clock that runs many steps at once books them as their start times pass, in the same order of cache
        operations as one that runs them one by one. Returns the steps that took pages and how many each."""
        if not plan.decode or k <= plan.booked:
            return [], []
        ps, per_offset = self.cache.page_size, plan.per_offset
        assert plan.offsets is not None and per_offset is not None
        if plan.start is None:  # rows needing a page at offset o: by_offset[start[o] : start[o + 1]]
            plan.start = [0, *np.cumsum(per_offset).tolist()]
        start, b = plan.start, plan.booked
        if k - b <= ps:
            steps = [s for s in range(b, k) if start[s % ps + 1] > start[s % ps]]
        else:  # a long span: walk each offset that takes pages, every page_size steps
            steps = sorted(s for o in range(ps) if start[o + 1] > start[o] for s in range(b + (o - b) % ps, k, ps))
        plan.booked = k
        if not steps:
            return [], []
        if plan.by_offset is None:
            plan.by_offset = np.argsort(plan.offsets, kind="stable").tolist()
        by_offset, decode = plan.by_offset, plan.decode
        tables: list[BlockTable] = []  # step by step, batch order within a step: as a one-step clock hands out
        counts: list[int] = []
        for step in steps:
            o = step % ps
            lo, hi = start[o], start[o + 1]
            tables += [decode[j].table for j in by_offset[lo:hi]]
            counts.append(hi - lo)
        self.cache.allocate_many(tables, [1] * len(tables))
        return steps, counts

    def advance(self, plan: Plan, k: int) -> StepEvents:
        ev = StepEvents()
        for seq, chunk in plan.prefill:  # prefill plans are one step long
            seq.computed += chunk
            if seq.computed < seq.target:
                continue
            self.cache.publish(seq.table, seq.keys)
            if self.prefill_only:
                seq.status = "prefilled"
                self.running.remove(seq)
                ev.prefilled.append((seq, 0))
            elif seq.generated == 0:
                seq.generated = 1  # the last prefill step samples the first output token
                seq.remaining -= 1
                ev.first_tokens.append((seq, 0))
                if seq.remaining <= 0:
                    self._finish(seq, 0, ev)
                else:
                    self._set_status(seq, "decode")
            else:
                self._set_status(seq, "decode")  # recomputed after preemption: resume decoding
        if plan.decode:
            self._advance_decode(plan, k, ev)
        return ev

    def _advance_decode(self, plan: Plan, k: int, ev: StepEvents) -> None:
        a, idx = self.arrays, plan.idx
        if self.tracker.enabled:  # the pages read at each of the k steps
            ev.checked_pages = k * plan.pages0 + int(self.growth(plan, k).sum())
            self.counters.checked_pages += ev.checked_pages
        a.computed[idx] = plan.ctx + k  # nothing moves a batch sequence's progress between schedule and advance
        a.generated[idx] += k
        remaining = a.remaining[idx] - k
        a.remaining[idx] = remaining
        if self.injector is not None:
            f = a.fault_in[idx]
            a.fault_in[idx] = np.where(f >= 0, f - k, f)
        self.book(plan, k)
        for j in np.flatnonzero(remaining <= 0).tolist():
            self._finish(plan.decode[j], k - 1, ev)

    # -- internals ---------------------------------------------------------------------------------
    def _finish(self, seq: Seq, step: int, ev: StepEvents) -> None:
        self._set_status(seq, "done")
        self.running.remove(seq)
        release_after_fault(seq.table, self.cache, seq.fault)
        ev.finished.append((seq, step))

    def _set_status(self, seq: Seq, status: str) -> None:
        if "decode" in (seq.status, status):
            self._decode_dirty = True
        seq.status = status

    def _decode_batch(self) -> tuple[list[Seq], np.ndarray]:
        """The decode batch in running order, rebuilt only when a sequence joined or left it."""
        if self._decode_dirty:
            self._decode = [s for s in self.running if s.status == "decode"]
            self._decode_tables = [s.table for s in self._decode]
            self._decode_idx = np.array([s.slot for s in self._decode], dtype=np.int64)
            self._decode_dirty = False
        return self._decode, self._decode_idx

    def _grow(self, seq: Seq, tokens: int) -> None:
        need = self._pages(tokens) - seq.table.n
        if need > 0:
            self.cache.allocate(seq.table, need)

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.cache.page_size)

    def _admit(self, seq: Seq) -> None:
        self._order += 1
        seq.order = self._order
        if self.injector is not None and self.fault_rate > 0 and self.rng is not None and seq.fault_in < 0:
            seq.fault_in = int(self.rng.geometric(self.fault_rate)) - 1
        self.running.append(seq)

    def _admit_waiting(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            seq = self.waiting[0]
            reserve = 0 if self.prefill_only else self.reserve_pages
            if self.cache.admission_cost(seq.keys, self._pages(seq.target)) + reserve > self.cache.available:
                break  # FCFS: the head waits for pages, nobody overtakes it
            self.waiting.popleft()
            hit = self.cache.acquire_prefix(seq.table, seq.keys)
            if seq.generated == 0:
                self.cache.note_lookup(seq.req.prompt_tokens)
            seq.computed = hit * self.cache.page_size
            if seq.computed >= seq.target:  # whole prompt cached: recompute the last token
                seq.computed = seq.target - 1
            self._grow(seq, seq.target)
            seq.status = "prefill"
            self._admit(seq)

    def _preempt_newest(self) -> None:
        victim = max((s for s in self.running if s.status in ("decode", "prefill")), key=lambda s: s.order)
        self._set_status(victim, "waiting")
        self.running.remove(victim)
        release_after_fault(victim.table, self.cache, victim.fault)
        victim.fault = None
        victim.computed = 0
        victim.target = victim.req.prompt_tokens + victim.generated  # recompute what it had
        self.counters.preempted += 1
        self.waiting.appendleft(victim)

    def _check_integrity(self) -> None:
        batch, _ = self._decode_batch()
        if self.injector is not None:
            for seq in batch:
                if seq.fault_in == 0 and seq.fault is None:
                    seq.fault = self.injector.inject(seq.table, self.cache, self._decode_tables)
                    seq.fault_in = -1
        violations, _ = self.tracker.check(self._decode_tables, self.cache)
        for v in violations:
            seq = batch[v.index]
            if seq.fault is None:
                self.counters.false_positives += 1
            else:
                self.counters.detected += 1
            self.counters.aborted += 1
            self.counters.tokens_lost += seq.generated
            page = int(seq.table.pages[v.slot])
            self.counters.aborts.append(AbortEvent(seq.req.id, v.slot, page, v.kind, seq.fault and seq.fault.kind))
            self.running.remove(seq)
            release_after_fault(seq.table, self.cache, seq.fault)
            self._set_status(seq, "aborted")
            self.aborted.append(seq)



__all__ = ["AbortEvent", "Plan", "Scheduler", "Seq", "StepEvents", "OutOfPages"]
