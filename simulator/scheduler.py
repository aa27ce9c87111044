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


@dataclass(eq=False)
class Seq:
    """A request's life on one instance."""

    req: Request
    target: int  # tokens whose KV must be in cache before decoding (prompt, or prompt + output on recompute)
    remaining: int  # output tokens this instance still has to produce
    decode_only: bool = False  # arrived with its KV (disaggregated decode): never prefills here unless preempted
    table: BlockTable = field(default_factory=BlockTable)
    computed: int = 0
    keys: list[PageKey] = field(default_factory=list)
    order: int = 0  # admission order: preemption takes the newest first
    fault_in: int = -1  # decode steps left before an injected fault (-1: none planned)
    fault: Fault | None = None
    generated: int = 0
    status: str = "waiting"  # waiting | prefill | transfer | decode | prefilled | done | aborted


@dataclass
class Plan:
    prefill: list[tuple[Seq, int]] = field(default_factory=list)  # (sequence, tokens of this chunk)
    decode: list[Seq] = field(default_factory=list)

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


@dataclass
class Counters:
    preempted: int = 0
    aborted: int = 0
    detected: int = 0
    false_positives: int = 0
    tokens_lost: int = 0
    checked_pages: int = 0
    aborts: list[tuple[int, int, str]] = field(default_factory=list)  # (request id, slot, kind)


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
        self.counters = Counters()
        self.aborted: list[Seq] = []
        self._order = 0

    # -- entry points ------------------------------------------------------------------------------
    def new_seq(self, req: Request, target: int, remaining: int) -> Seq:
        seq = Seq(req, target=target, remaining=remaining)
        seq.keys = self.keys_for(req)
        return seq

    def keys_for(self, req: Request) -> list[PageKey]:
        return page_keys(req.blocks, req.block_tokens, self.cache.page_size, req.prompt_tokens)

    def enqueue(self, seq: Seq) -> None:
        """A request that must prefill here (new, or preempted and recomputing)."""
        seq.status = "waiting"
        self.waiting.append(seq)

    def can_take_kv(self, seq: Seq) -> bool:
        """Disaggregated decode: can this instance hold the transferred prompt plus growth room now?"""
        hit = self.cache.match_prefix(seq.keys)
        fresh = self._pages(seq.target) - hit
        return len(self.running) < self.max_running and fresh + self.reserve_pages <= self.cache.available

    def take_kv(self, seq: Seq) -> int:
        """Hold the pages for a transferred prompt (from the start of the transfer); returns cached tokens."""
        hit = self.cache.acquire_prefix(seq.table, seq.keys)
        self.cache.note_lookup(seq.req.prompt_tokens)
        self.cache.allocate(seq.table, self._pages(seq.target) - hit)
        seq.computed = seq.target
        seq.decode_only = True
        seq.status = "transfer"
        self._admit(seq)
        return hit * self.cache.page_size

    def start_decode(self, seq: Seq) -> None:
        """Transfer finished: the sequence joins the decode batch."""
        seq.status = "decode"
        self.cache.publish(seq.table, seq.keys)

    def release(self, seq: Seq) -> None:
        """A prefill-only instance frees a sequence's pages once its KV has been transferred."""
        self.cache.release(seq.table)

    # -- scheduling --------------------------------------------------------------------------------
    def schedule(self) -> Plan:
        self._check_integrity()
        self._admit_waiting()
        plan = Plan()
        budget = self.max_batch_tokens
        plan.decode = [s for s in self.running if s.status == "decode"]
        while plan.decode and self._pages_for_next_step(plan.decode) > self.cache.available:
            self._preempt_newest()
            plan.decode = [s for s in self.running if s.status == "decode"]
        budget -= len(plan.decode)
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
        n = min(limit, min(s.remaining for s in plan.decode))
        faults = [s.fault_in for s in plan.decode if s.fault_in >= 0]
        if faults:
            n = min(n, max(1, min(faults)))
        new_pages = self.page_growth(plan.decode, n)
        if new_pages[-1] > self.cache.available:
            n = max(1, int(np.searchsorted(new_pages, self.cache.available, side="right")))
        return n

    def page_growth(self, batch: list[Seq], n: int) -> np.ndarray:
        """Cumulative new pages the batch needs after each of the next n decode steps (O(n + batch))."""
        ps = self.cache.page_size
        # A sequence with c cached tokens needs a new page at step s (0-based) when c + 1 + s ≡ 1 (mod ps).
        offsets = np.fromiter(((-s.computed) % ps for s in batch), dtype=np.int64, count=len(batch))
        per_offset = np.bincount(offsets, minlength=ps)
        return np.cumsum(np.resize(per_offset, n))

    def context_totals(self, batch: list[Seq], n: int) -> tuple[np.ndarray, np.ndarray]:
        """Total context and total pages the batch reads at each of the next n steps (for pricing)."""
        c0 = sum(s.computed for s in batch)
        p0 = sum(s.table.n for s in batch)
        steps = np.arange(1, n + 1, dtype=np.int64)
        pages = p0 + self.page_growth(batch, n)
        return c0 + len(batch) * steps, pages

    def advance(self, plan: Plan, k: int) -> StepEvents:
        ev = StepEvents()
        for seq, chunk in plan.prefill:  # prefill plans are one step long
            self._grow(seq, seq.computed + chunk)
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
                self._after_token(seq, 0, ev)
            else:
                seq.status = "decode"  # recomputed after preemption: resume decoding
        if plan.decode:
            ev.checked_pages = int(self.context_totals(plan.decode, k)[1].sum()) if self.tracker.enabled else 0
            self.counters.checked_pages += ev.checked_pages
        for seq in plan.decode:
            self._grow(seq, seq.computed + k)
            seq.computed += k
            seq.generated += k
            seq.remaining -= k
            if seq.fault_in >= 0:
                seq.fault_in -= k
            self._after_token(seq, k - 1, ev)
        return ev

    # -- internals ---------------------------------------------------------------------------------
    def _after_token(self, seq: Seq, step: int, ev: StepEvents) -> None:
        if seq.remaining <= 0:
            seq.status = "done"
            self.running.remove(seq)
            self.cache.publish(seq.table, seq.keys)
            release_after_fault(seq.table, self.cache, seq.fault)
            ev.finished.append((seq, step))
        else:
            seq.status = "decode"

    def _grow(self, seq: Seq, tokens: int) -> None:
        need = self._pages(tokens) - seq.table.n
        if need > 0:
            self.cache.allocate(seq.table, need)

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.cache.page_size)

    def _pages_for_next_step(self, batch: list[Seq]) -> int:
        return int(self.page_growth(batch, 1)[0])

    def _admit(self, seq: Seq) -> None:
        self._order += 1
        seq.order = self._order
        if self.injector is not None and self.fault_rate > 0 and self.rng is not None and seq.fault_in < 0:
            seq.fault_in = int(self.rng.geometric(self.fault_rate)) - 1
        self.running.append(seq)

    def _admit_waiting(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            seq = self.waiting[0]
            hit_pages = self.cache.match_prefix(seq.keys)
            reserve = 0 if self.prefill_only else self.reserve_pages
            if self._pages(seq.target) - hit_pages + reserve > self.cache.available:
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
        self.running.remove(victim)
        release_after_fault(victim.table, self.cache, victim.fault)
        victim.fault = None
        victim.computed = 0
        victim.target = victim.req.prompt_tokens + victim.generated  # recompute what it had
        victim.decode_only = False
        self.counters.preempted += 1
        self.waiting.appendleft(victim)
        victim.status = "waiting"

    def _check_integrity(self) -> None:
        batch = [s for s in self.running if s.status == "decode"]
        if self.injector is not None:
            for seq in batch:
                if seq.fault_in == 0 and seq.fault is None:
                    seq.fault = self.injector.inject(seq.table, self.cache, [s.table for s in batch])
                    seq.fault_in = -1
        violations, _ = self.tracker.check([s.table for s in batch], self.cache)
        for v in violations:
            seq = batch[v.index]
            if seq.fault is None:
                self.counters.false_positives += 1
            else:
                self.counters.detected += 1
            self.counters.aborted += 1
            self.counters.tokens_lost += seq.generated
            self.counters.aborts.append((seq.req.id, v.slot, v.kind))
            self.running.remove(seq)
            release_after_fault(seq.table, self.cache, seq.fault)
            seq.status = "aborted"
            self.aborted.append(seq)

    def occupancy(self) -> float:
        return self.cache.used / self.cache.num_pages

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Scheduler(running={len(self.running)}, waiting={len(self.waiting)}, free={self.cache.available})"


__all__ = ["Plan", "Scheduler", "Seq", "StepEvents", "OutOfPages"]
