"""The paged KV cache of one instance: pages, free list, reference counts, prefix reuse, generation tags.

Written once and driven by both clocks (the SimPy model and the GPU replay executor), so it knows nothing
about time. Shaped after nano-vllm's block manager: a page is either free, held by live sequences
(refcount > 0), or cached — unreferenced but still holding a known prefix, evictable least recently used.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice

import numpy as np

# A page's prefix identity: (chained hash of the block holding its last token, end offset in that block), or
# just the block's hash when pages and blocks are the same size (the offset is always 0; ints hash cheaper).
PageKey = int | tuple[int, int]


class TableStore:
    """Every block table of one cache as a row of two 2-D arrays, page ids and generation tags.

    It is the layout a GPU's batched integrity check reads (`block_tables[batch, max_pages]`), and it makes
    the check over a whole decode batch one gather and compare instead of a concatenation of every table.
    A table holds a row only while it holds pages, so rows stay few; columns grow to the longest table.
    Entries past a table's length hold the cache's null page with tag 0, which the check passes without a
    mask: the null page's tag is always 0 and no live entry records 0 (tags start at 1).
    """

    def __init__(self, null_page: int, rows: int = 64, width: int = 64) -> None:
        self.null_page = null_page
        self.pages = np.full((rows, width), null_page, dtype=np.int64)
        self.tags = np.zeros((rows, width), dtype=np.int64)
        self._free_rows = list(range(rows - 1, -1, -1))

    def take_row(self) -> int:
        if not self._free_rows:
            rows = len(self.pages)
            self._resize(2 * rows, self.pages.shape[1])
            self._free_rows = list(range(2 * rows - 1, rows - 1, -1))
        return self._free_rows.pop()

    def give_row(self, row: int, n: int) -> None:
        """A table of n entries gave its row back: pad it again."""
        self.pages[row, :n] = self.null_page
        self.tags[row, :n] = 0
        self._free_rows.append(row)

    def fit(self, width: int) -> None:
        """Make room for tables of `width` pages."""
        if width > self.pages.shape[1]:
            self._resize(len(self.pages), max(width, 2 * self.pages.shape[1]))

    def _resize(self, rows: int, width: int) -> None:
        for name, pad in (("pages", self.null_page), ("tags", 0)):
            old = getattr(self, name)
            new = np.full((rows, width), pad, dtype=np.int64)
            new[: old.shape[0], : old.shape[1]] = old
            setattr(self, name, new)


_NO_PAGES = np.zeros(0, dtype=np.int64)
_NO_PAGES.flags.writeable = False


class BlockTable:
    """A sequence's pages in order and the generation tag each page had when this sequence got it.

    Its entries live in a row of its cache's `TableStore` from the first page it gets until it releases
    them; `pages` and `tags` are views of that row (valid up to `n`), so a view must not be held across an
    allocation, which may move the store.
    """

    __slots__ = ("store", "row", "n")

    def __init__(self) -> None:
        self.store: TableStore | None = None
        self.row = -1
        self.n = 0

    @property
    def pages(self) -> np.ndarray:
        return _NO_PAGES if self.store is None else self.store.pages[self.row]

    @property
    def tags(self) -> np.ndarray:
        return _NO_PAGES if self.store is None else self.store.tags[self.row]

    def attach(self, store: TableStore) -> None:
        if self.store is None:
            self.store, self.row = store, store.take_row()
        assert self.store is store, "a block table belongs to one cache"

    def detach(self) -> None:
        """The table released its pages: its row goes back to the store."""
        if self.store is not None:
            self.store.give_row(self.row, self.n)
        self.store, self.row, self.n = None, -1, 0

    def extend(self, pages: np.ndarray, tags: np.ndarray) -> None:
        assert self.store is not None
        end = self.n + len(pages)
        self.store.fit(end)
        self.store.pages[self.row, self.n : end] = pages
        self.store.tags[self.row, self.n : end] = tags
        self.n = end

    def live_pages(self) -> np.ndarray:
        return self.pages[: self.n]

    def live_tags(self) -> np.ndarray:
        return self.tags[: self.n]


class OutOfPages(Exception):
    """Raised when an allocation cannot be covered by free plus evictable pages."""


class PagedCache:
    def __init__(self, num_pages: int, page_size: int, prefix_caching: bool = True) -> None:
        self.num_pages = num_pages
        self.page_size = page_size
        self.prefix_caching = prefix_caching
        self.refcount = np.zeros(num_pages, dtype=np.int64)
        # Generation tags are drawn from one counter for the whole cache, so no two allocations of any
        # pages ever share a tag: a foreign page id can never carry the tag a sequence recorded. One more
        # entry, the null page (id num_pages, tag 0 for ever), pads the table store; it is never handed out.
        self.tag = np.zeros(num_pages + 1, dtype=np.int64)
        self.next_tag = 1
        self.free: list[int] = list(range(num_pages - 1, -1, -1))  # pop() hands out low ids first
        self.cached: OrderedDict[int, None] = OrderedDict()  # unreferenced pages with a key, LRU first
        self.key_of: list[PageKey | None] = [None] * num_pages  # by page id: a list index, not a hash
        self.page_of: dict[PageKey, int] = {}
        self.hit_tokens = 0
        self.lookup_tokens = 0
        self.store = TableStore(null_page=num_pages)

    # -- capacity ---------------------------------------------------------------------------------
    @property
    def available(self) -> int:
        """Pages an allocation can take now: free ones plus cached ones it may evict."""
        return len(self.free) + len(self.cached)

    @property
    def used(self) -> int:
        """Pages held by live sequences (cached-but-unreferenced pages count as reclaimable)."""
        return self.num_pages - self.available

    # -- allocation -------------------------------------------------------------------------------
    def _bump(self, page: int) -> None:
        self.tag[page] = self.next_tag
        self.next_tag += 1

    def allocate(self, table: BlockTable, count: int) -> None:
        """Append `count` fresh pages to a table, each recorded with its new generation tag."""
        pages, tags = self._take(count)
        table.attach(self.store)
        table.extend(pages, tags)

    def allocate_many(self, tables: list[BlockTable], counts: list[int]) -> None:
        """`allocate` for several tables at once: one bulk take, then each table its slice, in order."""
        pages, tags = self._take(sum(counts))
        if len(pages) == len(tables):  # one page each (a decode run's growth, mostly): two scattered stores
            store, rows, cols = self.store, [], []
            for table in tables:  # a table listed twice gets consecutive columns
                if table.store is None:
                    table.attach(store)
                rows.append(table.row)
                cols.append(table.n)
                table.n += 1
            store.fit(max(cols) + 1)
            at = (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64))
            store.pages[at] = pages
            store.tags[at] = tags
            return
        start = 0
        for table, c in zip(tables, counts, strict=True):
            table.attach(self.store)
            table.extend(pages[start : start + c], tags[start : start + c])
            start += c

    def _take(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """`count` fresh pages and their new tags, now held once.

        Free pages go first, in bulk; only what they cannot cover is evicted from the cached prefixes, oldest
        first.
        """
        free, cached = self.free, self.cached
        if count > len(free) + len(cached):
            raise OutOfPages
        cut = max(0, len(free) - count)
        taken = free[cut:][::-1]  # pop() order: low page ids first
        del free[cut:]
        if len(taken) < count:  # evict the oldest cached prefixes
            victims = list(islice(cached, count - len(taken)))
            key_of, page_of = self.key_of, self.page_of
            for page in victims:
                del cached[page]
                del page_of[key_of[page]]
                key_of[page] = None
            taken += victims
        pages = np.array(taken, dtype=np.int64)
        tags = np.arange(self.next_tag, self.next_tag + count, dtype=np.int64)
        self.next_tag += count
        self.tag[pages] = tags
        self.refcount[pages] = 1
        return pages, tags

    def match_prefix(self, keys: list[PageKey]) -> int:
        """How many leading pages of `keys` are cached (no side effects; routing uses it)."""
        if not self.prefix_caching:
            return 0
        n = 0
        for k in keys:
            if k not in self.page_of:
                break
            n += 1
        return n

    def admission_cost(self, keys: list[PageKey], pages: int) -> int:
        """How much of `available` holding a `pages`-page sequence takes: its fresh pages, plus the cached prefix
        pages it reuses that nobody holds now (they stop being evictable)."""
        hit = self.match_prefix(keys)
        idle = sum(1 for k in keys[:hit] if self.refcount[self.page_of[k]] == 0)
        return pages - hit + idle

    def acquire_prefix(self, table: BlockTable, keys: list[PageKey]) -> int:
        """Share the cached leading pages of `keys` into an empty table; returns pages reused."""
        n = self.match_prefix(keys)
        if n:
            pages = np.array([self.page_of[k] for k in keys[:n]], dtype=np.int64)
            for page in pages[self.refcount[pages] == 0].tolist():
                del self.cached[page]  # held again: no longer evictable
            self.refcount[pages] += 1  # a prefix never lists a page twice
            table.attach(self.store)
            table.extend(pages, self.tag[pages])
        self.hit_tokens += n * self.page_size
        return n

    def publish(self, table: BlockTable, keys: list[PageKey]) -> None:
        """Give the table's leading full pages their prefix keys so later sequences can reuse them."""
        if not self.prefix_caching:
            return
        key_of, page_of = self.key_of, self.page_of
        for page, k in zip(table.pages[: min(table.n, len(keys))].tolist(), keys, strict=False):
            if key_of[page] is None and k not in page_of:  # a page keeps its first key; a key its first page
                key_of[page] = k
                page_of[k] = page

    def release(self, table: BlockTable, skip: frozenset[int] = frozenset()) -> None:
        """Drop a sequence's references; keyed pages stay cached, others go back to the free list.

        `skip` names table slots the sequence no longer owns (a stale mapping found by the integrity check):
        releasing those would free another sequence's page.
        """
        pages = table.live_pages()
        if skip:
            pages = np.delete(pages, sorted(skip))
        rc = self.refcount[pages] - 1
        self.refcount[pages] = rc  # a table never lists a page twice
        if rc.any():  # some pages stay held (shared prefixes)
            assert rc.min() >= 0, "page refcount below zero"
            freed = pages[rc == 0].tolist()
        else:
            freed = pages.tolist()
        key_of = self.key_of
        keyed = [p for p in freed if key_of[p] is not None] if self.page_of else []
        cached = self.cached
        for page in keyed:  # in table order, so the LRU evicts a prefix's start first (a loop: OrderedDict's
            cached[page] = None  # update is slower than item by item)
        self.free += freed if not keyed else [p for p in freed if key_of[p] is None]
        table.detach()

    def force_free(self, page: int) -> None:
        """Fault injection only: free a page behind its owner's back (the bookkeeping bug we defend against)."""
        key = self.key_of[page]
        if key is not None:
            del self.page_of[key]
            self.key_of[page] = None
        self.refcount[page] = 0
        self.cached.pop(page, None)
        self._bump(page)  # what its reallocation to another sequence would do
        self.free.append(page)

    def note_lookup(self, tokens: int) -> None:
        self.lookup_tokens += tokens


def page_keys(blocks: tuple[int, ...], block_tokens: int, page_size: int, tokens: int) -> list[PageKey]:
    """Keys of the full pages among a prompt's first `tokens` tokens that lie inside known blocks.

    A page's key is the chained hash of the block holding its last token plus its end offset, so two
    pages share a key only when everything from the start of the sequence up to that block is identical.
    """
    n = min(tokens, len(blocks) * block_tokens) // page_size
    if block_tokens == page_size:
        return list(blocks[:n])
    return [(blocks[((i + 1) * page_size - 1) // block_tokens], (i + 1) * page_size % block_tokens) for i in range(n)]
