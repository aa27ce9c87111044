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

from simulator.serving.batch import NEVER, DecodeBatch, growth
from simulator.serving.cache import OutOfPages, PagedCache, page_keys
from simulator.serving.integrity import CheckingTracker, FaultInjector, NoopTracker, release_after_fault
from simulator.serving.sequence import Seq, StepCounter
from simulator.serving.speculation import Speculation
from simulator.workload.request import Request


@dataclass(slots=True)
class Plan:
    """One step's decisions, or a run of identical decode steps: the prefill chunks and the decode batch."""

    prefill: list[tuple[Seq, int]] = field(default_factory=list)  # (sequence, tokens of this chunk)
    decode: list[Seq] = field(default_factory=list)
    # Read once when the decode batch is fixed (pricing, growth, checks and the advance all reuse them); left
    # at their defaults for a plan without decode, so building one stays cheap.
    at: int = 0  # the scheduler's step count when the plan was made
    ctx0: int = 0  # tokens the batch has cached before its first step
    pages0: int = 0  # pages the batch holds before its first step
    first_end: int = NEVER  # the step count at which the first batch sequence's output ends
    first_fault: int = -1  # the step count of the first planned fault (-1: none)
    need: np.ndarray | None = None  # sequences needing a new page at step s, for s < page_size
    growth: np.ndarray | None = None  # cumulative new pages after each coming decode step, computed once
    grown: np.ndarray | None = None  # running sum of `growth`: the pages the first s+1 steps read beyond pages0
    ctx: np.ndarray | None = None  # speculative decoding: the context each coming step reads (else ctx0 + batch·s)
    booked: int = 0  # decode steps whose pages are allocated (a step takes its pages when it starts)

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


class StepEvents:
    """What k applied steps produced; step indices are 0-based within the k steps. (A plain class: one is made
    per run of steps, and a dataclass's default factories cost more than the lists.)"""

    __slots__ = ("first_tokens", "finished", "prefilled", "checked_pages")

    def __init__(self) -> None:
        self.first_tokens: list[tuple[Seq, int]] = []
        self.finished: list[tuple[Seq, int]] = []  # completed on this instance
        self.prefilled: list[tuple[Seq, int]] = []  # prefill-only: KV ready to transfer
        self.checked_pages = 0


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
    preempt_aborts: int = 0  # requests aborted past the pool's max_preemptions
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
        speculation: Speculation | None = None,
        mixed: bool = True,
        max_preemptions: int | None = None,
    ) -> None:
        self.cache = cache
        self.max_running = max_running
        self.max_batch_tokens = max_batch_tokens
        self.chunk_size = chunk_size
        # growth room admission leaves free; a prefill-only instance's sequences do not grow there
        self.reserve_pages = 0 if prefill_only else -(-reserve_tokens // cache.page_size)
        self.prefill_only = prefill_only
        self.tracker = tracker
        self.injector = injector
        self.fault_rate = fault_rate
        self.rng = rng
        # Speculative decoding: a decode step is a verify step giving each sequence its drawn tokens, and a step
        # with prefill chunks runs them alone (SGLang turns mixed chunked prefill off with speculation).
        self.spec = speculation
        # Prefill chunks share a step with the decode batch only where the engine mixes them (vLLM's chunked
        # prefill does; SGLang's --enable-mixed-chunk is off by default, and off under speculation): otherwise a
        # step with chunks runs them alone, and the decode batch waits for the next step.
        self.mixed = mixed and speculation is None
        self.max_preemptions = max_preemptions  # a request preempted this often is aborted instead (None: never)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.counter = StepCounter()  # decode steps applied here: batch sequences' progress is counted from it
        self.batch = DecodeBatch(cache.page_size)
        self._joining: list[Seq] = []  # ready to decode: they join the batch when the next plan is made
        self._ctx_base = 0  # Σ over the batch of (cached tokens − steps at join): its context at a step count
        self.counters = Counters()
        self.aborted: list[Seq] = []
        self._order = 0
        self._queued = 0  # `queued_tokens`

    # -- entry points ------------------------------------------------------------------------------
    def new_seq(
        self, req: Request, target: int, remaining: int, keys: np.ndarray | None = None, generated: int = 0
    ) -> Seq:
        """`keys`: the request's page keys if already known for this page size (the prefill instance's);
        `generated`: output tokens it produced elsewhere (a transferred request's first)."""
        return Seq(req, target, self.counter, remaining, self.keys_for(req) if keys is None else keys, generated)

    def keys_for(self, req: Request) -> np.ndarray:
        return page_keys(req.blocks, req.block_tokens, self.cache.page_size, req.prompt_tokens)

    def enqueue(self, seq: Seq) -> None:
        """A request that must prefill here (new, or preempted and recomputing)."""
        seq.status = "waiting"
        self.waiting.append(seq)
        self._queued += seq.to_prefill()

    def queued_tokens(self) -> int:
        """Prompt tokens still to prefill here, queued or in progress (prefill routing reads it per request):
        Σ (target − cached) over the waiting and prefilling sequences, kept as they change."""
        return self._queued

    def take_kv(self, seq: Seq) -> int | None:
        """Disaggregated decode: hold the pages of a transferred prompt (from the start of the transfer) if this
        instance has room for it plus growth room now; returns the tokens found cached, or None (no room)."""
        if len(self.running) >= self.max_running:
            return None
        hit = self.cache.hold(seq.table, seq.keys, self._pages(seq.target), self.reserve_pages)
        if hit < 0:
            return None
        if self.cache.tiered:  # pages found below HBM load back with the hand-off
            seq.loads = self.cache.take_loads()  # type: ignore[attr-defined]
        self.cache.note_lookup(seq.req.prompt_tokens)
        seq.computed = seq.target  # (a transferring sequence is not in the batch)
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
        if self.waiting:
            self._admit_waiting()
        plan = Plan()
        if not self.mixed and self._prefill(plan, self.max_batch_tokens):
            return plan
        while True:
            plan.decode = decode = self.batch.seqs  # with the sequences that joined (placed by the check)
            if not decode:
                break
            at = self.counter.n
            plan.need = need = np.empty(self.cache.page_size, dtype=np.int64)
            plan.pages0, plan.first_end, plan.first_fault = self.batch.summary(self.cache.store.lens, at, need)
            if self.spec is not None:  # the page cycle of one token a step does not apply: the first step's pages
                need[0] = self.spec.first_pages(at)
            if need[0] <= self.cache.available:
                plan.at = at
                plan.ctx0 = self._ctx_base + len(decode) * at
                break
            self._preempt_newest()
        if self.mixed:
            self._prefill(plan, self.max_batch_tokens - len(plan.decode))
        return plan

    def _prefill(self, plan: Plan, budget: int) -> bool:
        """Add the prefill chunks of the step to the plan, within `budget` tokens; True if it has any."""
        if self._queued and len(self.running) > len(plan.decode):  # prompt tokens queued here: maybe prefilling
            for seq in self.running:
                if seq.status == "prefill" and budget > 0:
                    chunk = min(seq.to_prefill(), self.chunk_size, budget)  # (not in the batch)
                    plan.prefill.append((seq, chunk))
                    budget -= chunk
        return bool(plan.prefill)

    def steps_until_change(self, plan: Plan, limit: int = 1 << 30) -> int:
        """Identical decode steps that can follow: until a completion, a page shortfall or a planned fault."""
        if plan.prefill or not plan.decode:
            return 1 if not plan.empty else 0
        n = min(limit, plan.first_end - self.counter.n)
        if self.injector is not None and plan.first_fault >= 0:
            n = min(n, max(1, plan.first_fault - self.counter.n))
        if n > 1 and self.waiting and self._head_fits():
            return 1  # pages freed by this plan's preemptions admit the head of the queue at the next step
        new_pages = self.growth(plan, n)
        room = self.cache.available + (int(new_pages[plan.booked - 1]) if plan.booked else 0)  # + pages booked
        if new_pages[-1] > room:
            n = max(1, int(np.searchsorted(new_pages, room, side="right")))
        return n

    def _head_fits(self) -> bool:
        """Whether the head of the queue would be admitted now. Inside a run of decode steps pages are only taken,
        never freed, so if it does not fit at a run's first step it fits at none of the run's later ones."""
        seq = self.waiting[0]
        return (
            len(self.running) < self.max_running
            and self.cache.cost(seq.keys, self._pages(seq.target)) + self.reserve_pages <= self.cache.available
        )

    def growth(self, plan: Plan, n: int) -> np.ndarray:
        """Cumulative new pages the decode batch needs after each of its next n steps (O(n + batch)), computed
        once per plan (pricing, checks, occupancy)."""
        if plan.growth is None or len(plan.growth) < n:
            assert plan.need is not None
            if self.spec is None:
                plan.growth, plan.grown = growth(plan.need, n)
            else:
                plan.growth, plan.grown, plan.ctx = self.spec.horizon(plan.at, n)
        return plan.growth[:n]

    def book(self, plan: Plan, k: int) -> tuple[list[int], list[int]]:
        """Allocate the pages the plan's first k decode steps write. A step takes its pages when it starts, so
        a clock that runs many steps at once books them as their start times pass, in the same order of cache
        operations as one that runs them one by one. Returns the steps that took pages and how many each."""
        b = plan.booked
        if not plan.decode or k <= b:
            return [], []
        assert plan.need is not None
        g = self.growth(plan, k)
        pages = int(g[k - 1] - (g[b - 1] if b else 0))
        plan.booked = k
        if not pages:
            return [], []
        if self.spec is None:
            rows, steps, counts = self.batch.due(plan.at, plan.need, b, k, pages)
        else:
            rows, steps, counts = self.spec.due(self.batch.rows, plan.at, b, k)
        self.cache.allocate_rows(rows)
        return steps.tolist(), counts.tolist()

    def advance(self, plan: Plan, k: int) -> StepEvents:
        ev = StepEvents()
        for seq, chunk in plan.prefill:  # prefill plans are one step long; a prefilling sequence is not in the batch
            self._queued -= chunk
            seq.loads = None  # its first step loaded back what its hold found below HBM
            if not seq.prefilled(chunk):
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
        if k > plan.booked:
            self.book(plan, k)
        if self.tracker.enabled:  # the pages read at each of the k steps
            self.growth(plan, k)
            assert plan.grown is not None
            ev.checked_pages = k * plan.pages0 + int(plan.grown[k - 1])
            self.counters.checked_pages += ev.checked_pages
        if self.spec is not None:
            self.spec.advanced(plan.at, k)
        self.counter.n += k  # every batch sequence moves k steps (nothing joins or leaves between schedule and here)
        if plan.first_end <= self.counter.n:
            for seq in self.batch.ended(self.counter.n):
                self._finish(seq, k - 1, ev)

    # -- internals ---------------------------------------------------------------------------------
    def _finish(self, seq: Seq, step: int, ev: StepEvents) -> None:
        self._set_status(seq, "done")
        self.running.remove(seq)
        release_after_fault(seq.table, self.cache, seq.fault)
        ev.finished.append((seq, step))

    def _set_status(self, seq: Seq, status: str) -> None:
        if status == "decode" and seq.status != "decode":
            self._joining.append(seq)
        elif seq.status == "decode" and status != "decode":
            if not seq.in_batch:  # ready, not placed yet
                self._joining.remove(seq)
            else:  # it leaves the batch
                self.batch.leave(seq.order)
                if self.spec is not None:
                    self.spec.leave(seq.order)
                self._ctx_base -= seq.leave()
        seq.status = status

    def _place_joining(self) -> None:
        """Sequences that became ready to decode (a transfer finished mid-run) join the batch here, at the step
        count the run ended on: the next plan is the first to run them."""
        at = self.counter.n
        for seq in self._joining:
            computed, remaining, fault_in = seq.computed, seq.remaining, seq.fault_in  # (not in the batch yet)
            gains, steps = None, remaining
            if self.spec is not None:  # its drawn chain: the steps until its output ends
                gains = self.spec.join(
                    seq.order, seq.req.id, seq.req.output_tokens, seq.generated, remaining, computed, seq.table.n, at
                )
                steps = len(gains) - 1
            self._ctx_base += seq.join(at, gains)
            self.batch.join(seq, seq.order, seq.table.row, computed, steps, fault_in, at)
        self._joining.clear()

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
            hit = self.cache.hold(seq.table, seq.keys, self._pages(seq.target), self.reserve_pages)
            if hit < 0:
                break  # FCFS: the head waits for pages, nobody overtakes it
            self.waiting.popleft()
            if self.cache.tiered:  # pages found below HBM load back during its first prefill step
                seq.loads = self.cache.take_loads()  # type: ignore[attr-defined]
            if seq.generated == 0:
                self.cache.note_lookup(seq.req.prompt_tokens)
            cached = min(hit * self.cache.page_size, seq.target - 1)  # whole prompt cached: recompute the last token
            seq.computed = cached  # (a waiting sequence is not in the batch)
            self._queued -= cached
            seq.status = "prefill"
            self._admit(seq)

    def _preempt_newest(self) -> None:
        """Preempt the newest running request to recompute later, or abort it if it was preempted `max_preemptions`
        times already (its pages are freed either way; an abort is reported once, as an integrity abort is)."""
        victim = max((s for s in self.running if s.status in ("decode", "prefill")), key=lambda s: s.order)
        if victim.status == "prefill":
            self._queued -= victim.to_prefill()
        limit = self.max_preemptions is not None and victim.preemptions >= self.max_preemptions
        self._set_status(victim, "aborted" if limit else "waiting")
        self.running.remove(victim)
        release_after_fault(victim.table, self.cache, victim.fault)
        victim.fault = None
        victim.loads = None
        self.counters.preempted += 1
        if limit:
            self.counters.preempt_aborts += 1
            victim.aborted_by = "preemption"
            self.aborted.append(victim)
            return
        victim.preemptions += 1
        victim.computed = 0
        victim.target = victim.req.prompt_tokens + victim.generated  # recompute what it had
        self.waiting.appendleft(victim)
        self._queued += victim.target

    def _check_integrity(self) -> None:
        if self._joining:
            self._place_joining()
        batch = self.batch.seqs
        if not batch:
            return
        if self.injector is not None:
            for i, seq in enumerate(batch):
                if seq.fault_in == 0 and seq.fault is None:
                    seq.fault = self.injector.inject(seq.table, self.cache, [s.table for s in batch])
                    seq.fault_in = -1
                    self.batch.fault_done(i)
        violations, _ = self.tracker.check(self.batch.rows, self.cache)
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
            seq.aborted_by = "integrity"
            self.aborted.append(seq)


__all__ = ["AbortEvent", "Plan", "Scheduler", "Seq", "StepEvents", "OutOfPages"]
