"""The paged KV cache of one instance: pages, free list, reference counts, prefix reuse, generation tags.

Written once and driven by both clocks (the SimPy model and the GPU replay executor), so it knows nothing
about time. Shaped after nano-vllm's block manager: a page is either free, held by live sequences
(refcount > 0), or cached — unreferenced but still holding a known prefix, evictable least recently used.

A request's pages are allocated, keyed, released and evicted one by one, ~100 of them a request; the
per-page work is compiled (numba) over arrays — a free stack, a doubly linked LRU list, the prefix index —
so one Python call moves a whole prompt's pages.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simulator.serving import prefix_index as px
from simulator.serving.tables import BlockTable, TableStore

# A page's prefix identity: the chained hash of the block holding its last token, mixed with its end offset in
# that block when pages are smaller than blocks (63 bits either way, so it fits the compiled index's int64).
PageKey = int


_NO_KEYS = np.zeros(0, dtype=np.int64)  # what a cache without prefix caching looks up


class OutOfPages(Exception):
    """Raised when an allocation cannot be covered by free plus evictable pages."""


# -- compiled page bookkeeping ------------------------------------------------------------------------------
# A cache's per-page state is one int64 matrix, a row per page and a column per field: a compiled call takes
# few arguments (each costs at the boundary), and a page's fields share a cache line (evictions and releases
# touch pages all over the cache). Its cached pages form a doubly linked LRU list through columns NXT/PRV (the
# sentinel at row num_pages: NXT is the oldest; -1: not listed); column FREE is a stack whose first
# `meta[N_FREE]` entries are the free pages, the last one handed out first. Generation tags are an array of
# their own: the integrity check reads one per page of every table in a batch, and a dense array of them
# stays in cache between checks. Results come back in a caller's buffer: a returned array costs more to hand
# over than these calls' work.
REF, NXT, PRV, KEY, KEYED, FREE = range(6)
N_FREE, N_CACHED, NEXT_TAG, N_EVICTED = range(4)  # a tiered cache's meta has N_EVICTED (`serving/tiers.py`)


@njit(cache=True, inline="always")
def _unlink(st: np.ndarray, p: int) -> None:
    """Take row p out of the LRU list threaded through columns NXT/PRV (the tiers' slots use the same columns)."""
    a, b = st[p, PRV], st[p, NXT]
    st[a, NXT] = b
    st[b, PRV] = a
    st[p, NXT] = st[p, PRV] = -1


@njit(cache=True, inline="always")
def _link_newest(st: np.ndarray, p: int) -> None:
    """Put row p at the newest end of the LRU list (before the sentinel, the last row)."""
    head = st.shape[0] - 1
    tail = st[head, PRV]
    st[tail, NXT] = p
    st[p, PRV] = tail
    st[p, NXT] = head
    st[head, PRV] = p


@njit(cache=True)
def _take(count: int, meta: np.ndarray, st: np.ndarray, tag: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
    """`count` pages into out[0] — free ones first, then the oldest cached ones, whose keys go — each held
    once with a new tag, into out[1]. The caller has checked that there are enough. A tiered cache's `out` has
    two rows more: each evicted page's key and id, in eviction order (from out[:, meta[N_EVICTED]] on), which
    it spills to the tier below."""
    k = 0
    while k < count and meta[N_FREE] > 0:
        meta[N_FREE] -= 1
        out[0, k] = st[meta[N_FREE], FREE]
        k += 1
    head = st.shape[0] - 1
    while k < count:
        p = st[head, NXT]
        _unlink(st, p)
        if out.shape[0] > 2:
            e = meta[N_EVICTED]
            out[2, e] = st[p, KEY]
            out[3, e] = p
            meta[N_EVICTED] = e + 1
        px.delete(index, st[p, KEY])
        st[p, KEYED] = 0
        meta[N_CACHED] -= 1
        out[0, k] = p
        k += 1
    for i in range(count):
        p = out[0, i]
        out[1, i] = tag[p] = meta[NEXT_TAG]
        meta[NEXT_TAG] += 1
        st[p, REF] = 1


@njit(cache=True)
def _take_rows(
    meta: np.ndarray,
    st: np.ndarray,
    tag: np.ndarray,
    index: np.ndarray,
    out: np.ndarray,
    pages: np.ndarray,
    tags: np.ndarray,
    lens: np.ndarray,
    rows: np.ndarray,
) -> int:
    """One fresh page (`_take`) appended to the table in each listed row, in order (a row listed twice gets
    two). Returns 0, or — having changed nothing — the width the store needs first."""
    width = 0
    for r in rows:
        lens[r] += 1
        width = max(width, lens[r])
    for r in rows:
        lens[r] -= 1
    if width > pages.shape[1]:
        return width
    _take(len(rows), meta, st, tag, index, out)
    for i in range(len(rows)):
        r = rows[i]
        pages[r, lens[r]] = out[0, i]
        tags[r, lens[r]] = out[1, i]
        lens[r] += 1
    return 0


@njit(cache=True)
def _take_span(
    count: int,
    meta: np.ndarray,
    st: np.ndarray,
    tag: np.ndarray,
    index: np.ndarray,
    out: np.ndarray,
    pages: np.ndarray,
    tags: np.ndarray,
    lens: np.ndarray,
    row: int,
) -> None:
    """`count` fresh pages (`_take`) appended to the table in one row; the store has room."""
    _take(count, meta, st, tag, index, out)
    col = lens[row]
    pages[row, col : col + count] = out[0, :count]
    tags[row, col : col + count] = out[1, :count]
    lens[row] = col + count


@njit(cache=True)
def _release(pages: np.ndarray, meta: np.ndarray, st: np.ndarray) -> int:
    """Drop one reference to each page (a table never lists a page twice); a page nobody holds any more is
    cached (newest in the LRU) if it has a key, else freed. Returns the pages that became available, or -1 if
    a page id is out of range or a refcount would go below zero (then nothing changed)."""
    head = st.shape[0] - 1
    for i in range(len(pages)):
        p = pages[i]
        if p < 0 or p >= head or st[p, REF] <= 0:
            for j in range(i):  # undo
                st[pages[j], REF] += 1
            return -1
        st[p, REF] -= 1
    freed = 0
    for p in pages:  # in table order, so the LRU evicts a prefix's start first
        if st[p, REF]:
            continue
        freed += 1
        if st[p, KEYED]:
            _link_newest(st, p)
            meta[N_CACHED] += 1
        else:
            st[meta[N_FREE], FREE] = p
            meta[N_FREE] += 1
    return freed


@njit(cache=True)
def _release_row(
    meta: np.ndarray, st: np.ndarray, pages: np.ndarray, tags: np.ndarray, lens: np.ndarray, row: int
) -> int:
    """`_release` of the pages of the table in one row of a store, and the row padded again."""
    n = lens[row]
    freed = _release(pages[row, :n], meta, st)
    if freed >= 0:
        pages[row, :n] = st.shape[0] - 1  # the null page
        tags[row, :n] = 0
        lens[row] = 0
    return freed


@njit(cache=True)
def _match(keys: np.ndarray, index: np.ndarray) -> int:
    n = 0
    while n < len(keys) and px.lookup(index, keys[n]) != px.EMPTY:
        n += 1
    return n


@njit(cache=True)
def _admission_cost(keys: np.ndarray, pages: int, index: np.ndarray, st: np.ndarray) -> int:
    cost = pages
    for k in keys:
        p = px.lookup(index, k)
        if p == px.EMPTY:
            break
        cost += -1 if st[p, REF] else 0  # a reused page nobody holds stops being evictable: no saving
    return cost


@njit(cache=True)
def _acquire(
    keys: np.ndarray, meta: np.ndarray, st: np.ndarray, tag: np.ndarray, index: np.ndarray, out: np.ndarray
) -> int:
    """Hold the pages of the leading keys found (into out[0], their tags into out[1]); cached pages nobody held
    leave the LRU. Returns how many."""
    n = _match(keys, index)
    for i in range(n):
        p = px.lookup(index, keys[i])
        if st[p, REF] == 0:
            _unlink(st, p)
            meta[N_CACHED] -= 1
        st[p, REF] += 1  # a prefix never lists a page twice
        out[0, i] = p
        out[1, i] = tag[p]
    return n


@njit(cache=True)
def _hold(
    keys: np.ndarray,
    pages: int,
    meta: np.ndarray,
    st: np.ndarray,
    tag: np.ndarray,
    index: np.ndarray,
    out: np.ndarray,
    tpages: np.ndarray,
    ttags: np.ndarray,
    lens: np.ndarray,
    row: int,
) -> int:
    """`_acquire` into the empty table in one row of a store, then fresh pages (`_take_span`) up to `pages`; the
    caller has checked that they fit. Returns the prefix pages reused."""
    n = _acquire(keys, meta, st, tag, index, out)
    tpages[row, :n] = out[0, :n]
    ttags[row, :n] = out[1, :n]
    lens[row] = n
    _take_span(pages - n, meta, st, tag, index, out, tpages, ttags, lens, row)
    return n


@njit(cache=True)
def _publish(
    pages: np.ndarray, lens: np.ndarray, row: int, keys: np.ndarray, st: np.ndarray, index: np.ndarray
) -> None:
    """Key the leading pages of the table in one row of a store: a page keeps its first key, a key its first
    page."""
    for i in range(min(lens[row], len(keys))):
        p, k = pages[row, i], keys[i]
        if 0 <= p < st.shape[0] - 1 and not st[p, KEYED] and px.lookup(index, k) == px.EMPTY:
            st[p, KEYED] = 1
            st[p, KEY] = k
            px.insert(index, k, p)


@njit(cache=True)
def _force_free(p: int, meta: np.ndarray, st: np.ndarray, tag: np.ndarray, index: np.ndarray) -> None:
    if st[p, KEYED]:
        px.delete(index, st[p, KEY])
        st[p, KEYED] = 0
    if st[p, NXT] >= 0:
        _unlink(st, p)
        meta[N_CACHED] -= 1
    st[p, REF] = 0
    tag[p] = meta[NEXT_TAG]  # what its reallocation to another sequence would do
    meta[NEXT_TAG] += 1
    st[meta[N_FREE], FREE] = p
    meta[N_FREE] += 1


class PagedCache:
    tiered = False  # a cache with tiers below HBM (`serving/tiers.py`) says what each hold loads back

    def __init__(self, num_pages: int, page_size: int, prefix_caching: bool = True) -> None:
        self.num_pages = num_pages
        self.page_size = page_size
        self.prefix_caching = prefix_caching
        self._st = np.zeros((num_pages + 1, 6), dtype=np.int64)
        self._st[:, NXT] = self._st[:, PRV] = -1
        self._st[num_pages, NXT] = self._st[num_pages, PRV] = num_pages  # the LRU list's sentinel: empty
        self._st[:num_pages, FREE] = np.arange(num_pages - 1, -1, -1)  # the stack hands out low ids first
        self._meta = np.array([num_pages, 0, 1], dtype=np.int64)  # free, cached, next tag
        self._index = px.new_index(num_pages)
        self._out = np.empty((2, num_pages), dtype=np.int64)  # compiled calls' pages and tags
        self.refcount = self._st[:num_pages, REF]
        # Generation tags are drawn from one counter for the whole cache, so no two allocations of any
        # pages ever share a tag: a foreign page id can never carry the tag a sequence recorded. One more
        # entry, the null page (id num_pages, tag 0 for ever), pads the table store; it is never handed out.
        self.tag = np.zeros(num_pages + 1, dtype=np.int64)
        self.available = num_pages  # free pages plus cached ones an allocation may evict; kept as pages move
        self.hit_tokens = 0
        self.lookup_tokens = 0
        self.store = TableStore(null_page=num_pages)

    # -- allocation -------------------------------------------------------------------------------
    def allocate(self, table: BlockTable, count: int) -> None:
        """Append `count` fresh pages to a table, each recorded with its new generation tag."""
        self._check_room(count)
        table.attach(self.store)
        store = self.store
        store.fit(table.n + count)
        self.available -= count
        _take_span(
            count,
            self._meta,
            self._st,
            self.tag,
            self._index,
            self._out,
            store.pages,
            store.tags,
            store.lens,
            table.row,
        )

    def allocate_rows(self, rows: np.ndarray) -> None:
        """One fresh page appended to the table in each listed row of the store, in list order (a decode step's
        growth; a row listed twice gets two). The tables hold pages already, so they have rows."""
        if len(rows) > self.available:
            raise OutOfPages
        store = self.store
        self.available -= len(rows)
        width = _take_rows(
            self._meta, self._st, self.tag, self._index, self._out, store.pages, store.tags, store.lens, rows
        )
        if width:  # the store grows first; nothing was taken
            store.fit(width)
            _take_rows(
                self._meta, self._st, self.tag, self._index, self._out, store.pages, store.tags, store.lens, rows
            )

    def _check_room(self, count: int) -> None:
        """Raise before anything changes if free plus evictable pages cannot cover `count`."""
        if count > self.available:
            raise OutOfPages

    def match_prefix(self, keys: np.ndarray) -> int:
        """How many leading pages of `keys` are cached (no side effects; routing uses it)."""
        return _match(keys, self._index) if self.prefix_caching else 0

    def cost(self, keys: np.ndarray, pages: int) -> int:
        """How much of `available` holding a `pages`-page sequence with these prefix keys takes: its fresh pages,
        plus the cached prefix pages it reuses that nobody holds now (they stop being evictable). No side effects."""
        return _admission_cost(keys if self.prefix_caching else _NO_KEYS, pages, self._index, self._st)

    def hold(self, table: BlockTable, keys: np.ndarray, pages: int, reserve: int = 0) -> int:
        """Give an empty table a new sequence's `pages` pages — the cached leading pages of `keys` shared, the rest
        fresh — if they fit with `reserve` pages to spare. Returns the prefix pages reused, or -1 (then nothing
        changed)."""
        if table.store is not None:
            raise ValueError("hold fills an empty table")
        if not self.prefix_caching:
            keys = _NO_KEYS
        cost = self.cost(keys, pages)
        if cost + reserve > self.available:
            return -1
        table.attach(self.store)
        store = self.store
        store.fit(pages)
        n = _hold(
            keys,
            pages,
            self._meta,
            self._st,
            self.tag,
            self._index,
            self._out,
            store.pages,
            store.tags,
            store.lens,
            table.row,
        )
        self.available -= cost
        self.hit_tokens += n * self.page_size
        return n

    def publish(self, table: BlockTable, keys: np.ndarray) -> None:
        """Give the table's leading full pages their prefix keys so later sequences can reuse them."""
        store = table.store
        if self.prefix_caching and store is not None:
            _publish(store.pages, store.lens, table.row, keys, self._st, self._index)

    def release(self, table: BlockTable, skip: frozenset[int] = frozenset()) -> None:
        """Drop a sequence's references; keyed pages stay cached, others go back to the free list.

        `skip` names table slots the sequence no longer owns (a stale mapping found by the integrity check):
        releasing those would free another sequence's page.
        """
        if table.store is None:
            return
        if skip:
            freed = _release(np.delete(table.live_pages(), sorted(skip)), self._meta, self._st)
            table.detach()
        else:
            store = table.store
            freed = _release_row(self._meta, self._st, store.pages, store.tags, store.lens, table.row)
            if freed >= 0:
                store.reuse_row(table.row)
                table.store, table.row = None, -1
        if freed < 0:
            raise ValueError("released a page id out of range or a page nobody holds")
        self.available += freed

    def force_free(self, page: int) -> None:
        """Fault injection only: free a page behind its owner's back (the bookkeeping bug we defend against)."""
        held = self.refcount[page] > 0
        _force_free(page, self._meta, self._st, self.tag, self._index)
        self.available += int(held)

    def note_lookup(self, tokens: int) -> None:
        self.lookup_tokens += tokens

    # -- inspection (tests) -----------------------------------------------------------------------
    def free_pages(self) -> list[int]:
        """The free stack, bottom first."""
        return self._st[: self._meta[N_FREE], FREE].tolist()

    def cached_pages(self) -> list[int]:
        """The evictable pages, oldest first."""
        out, p = [], int(self._st[self.num_pages, NXT])
        while p != self.num_pages:
            out.append(p)
            p = int(self._st[p, NXT])
        return out

    def prefix_index(self) -> dict[int, PageKey]:
        """Every keyed page and its key; each key also finds its page in the index."""
        out = {}
        for p in np.flatnonzero(self._st[: self.num_pages, KEYED]).tolist():
            k = int(self._st[p, KEY])
            assert px.lookup(self._index, k) == p, f"key of page {p} does not find it"
            out[p] = k
        return out


@njit(cache=True)
def _mix(x: int) -> int:
    """splitmix64's finaliser in wrapping int64 arithmetic (shifts made logical by masking)."""
    x = (x ^ ((x >> 30) & 0x3FFFFFFFF)) * -4658895280553007687  # 0xBF58476D1CE4E5B9
    x = (x ^ ((x >> 27) & 0x1FFFFFFFFF)) * -7723592293110705685  # 0x94D049BB133111EB
    return x ^ ((x >> 31) & 0x1FFFFFFFF)


@njit(cache=True)
def _sub_block_keys(blocks: np.ndarray, block_tokens: int, page_size: int, n: int) -> np.ndarray:
    keys = np.empty(n, dtype=np.int64)
    for i in range(n):
        end = (i + 1) * page_size
        block = blocks[(end - 1) // block_tokens]
        keys[i] = _mix(block ^ _mix(end % block_tokens + 1)) & 0x7FFFFFFFFFFFFFFF  # 63 bits, like block hashes
    return keys


def page_keys(blocks: tuple[int, ...], block_tokens: int, page_size: int, tokens: int) -> np.ndarray:
    """Keys of the full pages among a prompt's first `tokens` tokens that lie inside known blocks.

    A page's key is the chained hash of the block holding its last token, mixed with its end offset in that
    block, so two pages share a key only when everything from the start of the sequence up to that block is
    identical (and the offset is too), up to a 2^-63 chance per pair. When pages and blocks are one size the
    block's hash is the key.
    """
    n = min(tokens, len(blocks) * block_tokens) // page_size
    if block_tokens == page_size:
        return np.array(blocks[:n], dtype=np.int64)
    return _sub_block_keys(np.array(blocks, dtype=np.int64), block_tokens, page_size, n)
