"""Paged KV cache: allocator invariants under random operation sequences (hypothesis state machine)."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from simulator.serving.cache import OutOfPages, PagedCache, page_keys
from simulator.serving.tables import BlockTable

PAGE = 4


class CacheMachine(RuleBasedStateMachine):
    """Sequences allocate, share cached prefixes, grow and free; the allocator must never double-book."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = PagedCache(num_pages=24, page_size=PAGE, prefix_caching=True)
        self.live: dict[int, tuple[BlockTable, list]] = {}
        self.next_id = 0

    @rule(prefix=st.integers(0, 2), extra=st.integers(0, 3), length=st.integers(1, 5))
    def admit(self, prefix: int, extra: int, length: int) -> None:
        # Prompts built from a few shared block families, so identical prefixes really occur.
        blocks = tuple(prefix * 1000 + i for i in range(length)) + tuple(
            9_000 + self.next_id * 10 + j for j in range(extra)
        )
        keys = page_keys(blocks, PAGE, PAGE, len(blocks) * PAGE)
        table = BlockTable()
        before = (self.cache.available, self.cache.free_pages(), self.cache.cached_pages())
        if self.cache.hold(table, keys, len(keys)) < 0:  # no room: nothing may have changed
            assert (self.cache.available, self.cache.free_pages(), self.cache.cached_pages()) == before
            assert table.n == 0
            return
        self.cache.publish(table, keys)
        self.live[self.next_id] = (table, keys)
        self.next_id += 1

    @precondition(lambda self: self.live)
    @rule(data=st.data(), n=st.integers(1, 3))
    def grow(self, data: st.DataObject, n: int) -> None:
        sid = data.draw(st.sampled_from(sorted(self.live)))
        table, _ = self.live[sid]
        if n <= self.cache.available:
            self.cache.allocate(table, n)
        else:
            with pytest.raises(OutOfPages):
                self.cache.allocate(table, n)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.live)))
        table, _ = self.live.pop(sid)
        self.cache.release(table)

    @invariant()
    def refcounts_match_holders(self) -> None:
        held = np.zeros(self.cache.num_pages, dtype=np.int64)
        for table, _ in self.live.values():
            for p in table.live_pages().tolist():
                held[p] += 1
        assert (self.cache.refcount >= 0).all()
        assert (held == self.cache.refcount).all()

    @invariant()
    def shared_pages_are_cached_prefixes(self) -> None:
        # A page held by two live sequences must be a keyed (cached-prefix) page they both asked for.
        owners: dict[int, list[int]] = {}
        for sid, (table, _) in self.live.items():
            for p in table.live_pages().tolist():
                owners.setdefault(p, []).append(sid)
        for page, sids in owners.items():
            if len(sids) > 1:
                key = self.cache.prefix_index().get(page)
                assert key is not None, f"page {page} shared by {sids} without a prefix key"
                for sid in sids:
                    assert key in self.live[sid][1], "prefix hit on a sequence whose prefix differs"

    @invariant()
    def every_page_accounted_once(self) -> None:
        free = set(self.cache.free_pages())
        cached = set(self.cache.cached_pages())
        assert len(cached) == len(self.cache.cached_pages()), "a page is cached twice"
        assert cached <= set(self.cache.prefix_index()), "a cached page without a key"
        held = {p for p in range(self.cache.num_pages) if self.cache.refcount[p] > 0}
        assert not (free & cached) and not (free & held) and not (cached & held)
        assert len(free) + len(cached) + len(held) == self.cache.num_pages
        assert len(free) == len(self.cache.free_pages()), "a page is on the free list twice"

    @invariant()
    def available_is_free_plus_evictable(self) -> None:
        assert self.cache.available == len(self.cache.free_pages()) + len(self.cache.cached_pages())

    @invariant()
    def prefix_hits_only_on_identical_keys(self) -> None:
        index = self.cache.prefix_index()  # checks that each key finds its page
        assert len(set(index.values())) == len(index), "two pages hold one key"


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_freed_pages_come_back() -> None:
    cache = PagedCache(num_pages=8, page_size=16, prefix_caching=False)
    t = BlockTable()
    cache.allocate(t, 8)
    assert cache.available == 0
    cache.release(t)
    assert cache.available == 8 and sorted(cache.free_pages()) == list(range(8))


def test_cached_prefix_is_evicted_lru_when_memory_is_needed() -> None:
    cache = PagedCache(num_pages=4, page_size=4, prefix_caching=True)
    a, b = BlockTable(), BlockTable()
    keys_a = page_keys((1, 2), 4, 4, 8)
    cache.allocate(a, 2)
    cache.publish(a, keys_a)
    cache.release(a)
    assert cache.cached_pages() == [0, 1] and cache.available == 4
    cache.allocate(b, 3)  # takes both free pages, then evicts the oldest cached one
    assert cache.match_prefix(keys_a) == 0  # the first page of the prefix is gone, so nothing matches


def test_tags_are_unique_across_pages_and_reallocations() -> None:
    cache = PagedCache(num_pages=4, page_size=4, prefix_caching=False)
    seen = set()
    for _ in range(5):
        t = BlockTable()
        cache.allocate(t, 4)
        tags = t.live_tags().tolist()
        assert not seen & set(tags)
        seen |= set(tags)
        cache.release(t)


def test_page_keys_need_whole_known_blocks() -> None:
    # 512-token blocks, 64-token pages: a 1000-token prompt with 1 known block gives 8 keyed pages.
    keys = page_keys((11,), 512, 64, 1000)
    assert len(keys) == 8 and len(set(keys.tolist())) == 8 and 11 not in keys.tolist()
    assert (keys >= 0).all()  # 63-bit: they fit the compiled index's int64 keys
    longer = page_keys((11, 12), 512, 64, 2000)
    assert longer[:8].tolist() == keys.tolist()  # the same prefix gives the same keys
    assert not set(longer[8:].tolist()) & set(keys.tolist())
    assert not set(page_keys((13,), 512, 64, 1000).tolist()) & set(keys.tolist())  # another block: other keys
    assert page_keys((), 512, 64, 1000).tolist() == []
    assert page_keys((5, 6, 7), 64, 64, 150).tolist() == [5, 6]  # page = block: the block's hash is the key


def test_table_store_grows_rows_and_columns_without_losing_entries() -> None:
    """More tables than the store's first rows and longer than its first columns: every entry survives each
    resize, released rows are padded again, and the batched check sees every page."""
    from serving_helpers import check_tables

    cache = PagedCache(num_pages=40_000, page_size=16, prefix_caching=False)
    tables, expect = [], []
    for i in range(150):  # 150 rows > 64; up to 300 pages > 64 columns
        t = BlockTable()
        cache.allocate(t, 1 + 2 * i)
        cache.allocate_rows(np.array([t.row, t.row]))
        tables.append(t)
        expect.append(t.live_pages().tolist())
    assert [t.live_pages().tolist() for t in tables] == expect
    assert check_tables(tables, cache) == ([], sum(len(e) for e in expect))
    for t in tables[::2]:
        row = t.row
        cache.release(t)
        assert (cache.store.pages[row] == cache.num_pages).all() and (cache.store.tags[row] == 0).all()
    live = tables[1::2]
    assert check_tables(live, cache)[0] == [] and len({t.row for t in live}) == len(live)


def test_growth_past_a_full_row_widens_the_store_first() -> None:
    """A table whose row is full gets its next pages only after the store widens, and loses nothing."""
    cache = PagedCache(num_pages=200, page_size=16, prefix_caching=False)
    t, u = BlockTable(), BlockTable()
    cache.allocate(t, cache.store.pages.shape[1])  # exactly one row's width
    cache.allocate(u, 3)
    before = t.live_pages().tolist()
    cache.allocate_rows(np.array([t.row, u.row, t.row]))
    assert t.n == len(before) + 2 and t.live_pages().tolist()[: len(before)] == before and u.n == 4
    assert len(set(t.live_pages().tolist()) | set(u.live_pages().tolist())) == t.n + u.n
    assert cache.available == 200 - t.n - u.n


def test_a_release_of_a_page_nobody_holds_fails_and_changes_nothing() -> None:
    cache = PagedCache(num_pages=8, page_size=4, prefix_caching=False)
    a, b = BlockTable(), BlockTable()
    cache.allocate(a, 3)
    cache.allocate(b, 2)
    b.pages[1] = a.pages[0]  # b's second entry names a's first page (a bookkeeping bug)
    cache.release(a)
    refcount, free = cache.refcount.copy(), cache.free_pages()
    with pytest.raises(ValueError, match="nobody holds"):
        cache.release(b)  # its first page is held, its second is free: nothing may change
    assert (cache.refcount == refcount).all() and cache.free_pages() == free and b.n == 2
