"""Page integrity: every injected fault is caught before the faulty request reads, and nothing else is."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from serving_helpers import check_tables

from simulator.serving.cache import PagedCache
from simulator.serving.integrity import CheckingTracker, FaultInjector, NoopTracker, release_after_fault
from simulator.serving.scheduler import Scheduler
from simulator.serving.tables import BlockTable
from simulator.workload.request import Request


def _reads_are_safe(tables: list[BlockTable], cache: PagedCache) -> bool:
    """What a decode step may read: valid page ids whose current tag is the recorded one."""
    for t in tables:
        p = t.live_pages()
        if ((p < 0) | (p >= cache.num_pages)).any():
            return False
        if (cache.tag[p] != t.live_tags()).any():
            return False
    return True


def _run_decode(rate: float, kinds: list[str], seed: int, steps: int = 200) -> tuple[Scheduler, int, int]:
    """Drive one decode instance step by step; assert the fail-closed property at every step."""
    cache = PagedCache(num_pages=9000, page_size=16, prefix_caching=False)
    sched = Scheduler(
        cache,
        max_running=64,
        max_batch_tokens=4096,
        chunk_size=4096,
        reserve_tokens=0,
        prefill_only=False,
        tracker=CheckingTracker(),
        injector=FaultInjector(kinds, np.random.default_rng(seed)),
        fault_rate=rate,
        rng=np.random.default_rng(seed + 1),
    )
    ids = iter(range(1 << 30))

    def admit() -> None:  # a request arriving with its KV already transferred (disaggregated decode)
        seq = sched.new_seq(Request(next(ids), 0.0, 1600, 10_000), 1600, 9_999)
        seq.generated = 1
        assert sched.take_kv(seq) is not None
        sched.start_decode(seq)

    for _ in range(64):
        admit()
    aborted_tokens: dict[int, int] = {}
    reads = 0
    for _ in range(steps):
        plan = sched.schedule()
        for seq in sched.aborted:
            assert seq.fault is not None, "a request without a fault was aborted"
            aborted_tokens[seq.req.id] = seq.generated
            admit()  # keep the batch full: the replacement joins from the next step on
        sched.aborted.clear()
        assert _reads_are_safe([s.table for s in plan.decode], cache), "a step would read a bad page"
        assert not any(s.req.id in aborted_tokens for s in plan.decode), "an aborted request kept decoding"
        reads += sum(-(-(s.computed + 1) // cache.page_size) for s in plan.decode)  # incl. this step's page
        sched.advance(plan, 1)
    return sched, reads, len(aborted_tokens)


@pytest.mark.parametrize("rate", [0.0005, 0.002, 0.01])
def test_every_injected_fault_is_detected_before_it_is_read(rate: float) -> None:
    sched, reads, aborted = _run_decode(rate, ["stale", "foreign"], seed=int(rate * 1e5))
    injected = sum(sched.injector.injected.values())
    c = sched.counters
    assert injected > 0
    assert c.detected == injected == aborted
    assert c.false_positives == 0
    assert c.checked_pages == reads  # the counter counts exactly the page reads it guarded
    assert reads >= 1_000_000


def test_one_million_checked_reads_without_false_positives() -> None:
    sched, reads, _ = _run_decode(0.0, ["stale"], seed=5)
    assert reads >= 1_000_000
    assert sched.counters.false_positives == 0 and sched.counters.aborted == 0


def test_negative_page_id_is_invalid_not_last_page() -> None:
    cache = PagedCache(num_pages=4, page_size=4, prefix_caching=False)
    t = BlockTable()
    cache.allocate(t, 4)
    t.tags[0] = cache.tag[3]  # make index -1 look valid if it were used as an index: it must not be
    t.pages[0] = -1
    violations, checked = check_tables([t], cache)
    assert checked == 4 and violations[0].kind == "invalid_page" and violations[0].slot == 0


@pytest.mark.parametrize("bad_id", [-1, 4, 5, 1 << 40])
def test_invalid_ids_fail_even_where_a_wrapped_or_clipped_index_would_pass(bad_id: int) -> None:
    """Page 0 and the null page (id num_pages, tag 0) are where a signed wrap or a clip would land; a live entry
    pointing past the end must fail however its id is turned into an index, and padding must pass."""
    cache = PagedCache(num_pages=4, page_size=4, prefix_caching=False)
    t, other = BlockTable(), BlockTable()
    cache.allocate(t, 1)  # page 0, so a -1 read as 0 would match its recorded tag
    cache.allocate(other, 3)
    t.pages[0] = bad_id
    violations, checked = check_tables([t, other], cache)
    assert checked == 4 and len(violations) == 1
    assert (violations[0].index, violations[0].slot, violations[0].kind) == (0, 0, "invalid_page")


def test_noop_tracker_checks_nothing() -> None:
    cache = PagedCache(num_pages=4, page_size=4, prefix_caching=False)
    t = BlockTable()
    cache.allocate(t, 2)
    t.pages[1] = 99
    rows = np.array([t.row])
    assert NoopTracker().check(rows, cache) == ([], 0)
    assert CheckingTracker().check(rows, cache)[0]


class IntegrityMachine(RuleBasedStateMachine):
    """Allocate, extend, free, reallocate, inject, check, step: no step ever reads a mismatched page."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = PagedCache(num_pages=32, page_size=4, prefix_caching=False)
        self.live: dict[int, BlockTable] = {}
        self.faults: dict[int, object] = {}
        self.injector = FaultInjector(["stale", "foreign", "out_of_range"], np.random.default_rng(0))
        self.tracker = CheckingTracker()
        self.n = 0

    @rule(pages=st.integers(1, 4))
    def allocate(self, pages: int) -> None:
        if pages <= self.cache.available:
            t = BlockTable()
            self.cache.allocate(t, pages)
            self.live[self.n] = t
            self.n += 1

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.live)))
        if self.cache.available:
            self.cache.allocate(self.live[sid], 1)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.live)))
        release_after_fault(self.live.pop(sid), self.cache, self.faults.pop(sid, None))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def inject(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.live)))
        if sid not in self.faults:
            f = self.injector.inject(self.live[sid], self.cache, list(self.live.values()))
            if f is not None:
                self.faults[sid] = f

    @precondition(lambda self: self.live)
    @rule()
    def check_then_step(self) -> None:
        ids = sorted(self.live)
        violations, _ = self.tracker.check(np.array([self.live[i].row for i in ids], dtype=np.int64), self.cache)
        bad = {ids[v.index] for v in violations}
        assert bad <= set(self.faults), "false positive"
        for sid in bad:  # fail closed: abort those, release only what they own
            release_after_fault(self.live.pop(sid), self.cache, self.faults.pop(sid))
        readers = [self.live[i] for i in sorted(self.live)]
        assert _reads_are_safe(readers, self.cache) or any(
            self.faults.get(i) is not None and self.faults[i].kind == "stale" for i in self.live
        )

    @invariant()
    def faulty_tables_never_pass(self) -> None:
        for sid, f in self.faults.items():
            t = self.live[sid]
            p = int(t.pages[f.slot])
            if f.kind == "stale":
                assert self.cache.tag[p] != t.tags[f.slot], "a freed page kept its tag"
            else:
                violations, _ = check_tables([t], self.cache)
                assert violations, f"{f.kind} fault not visible to the check"


TestIntegrityMachine = IntegrityMachine.TestCase
TestIntegrityMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
