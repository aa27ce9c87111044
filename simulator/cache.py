"""The paged KV cache of one instance: pages, free list, reference counts, prefix reuse, generation tags.

Written once and driven by both clocks (the SimPy model and the GPU replay executor), so it knows nothing
about time. Shaped after nano-vllm's block manager: a page is either free, held by live sequences
(refcount > 0), or cached — unreferenced but still holding a known prefix, evictable least recently used.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

PageKey = tuple[int, int]  # (chained prefix hash of the block holding the page's last token, end offset)


@dataclass
class BlockTable:
    """A sequence's pages in order and the generation tag each page had when this sequence got it.

    Kept as growable numpy arrays so the integrity check over a whole batch is one vectorised compare.
    """

    pages: np.ndarray = field(default_factory=lambda: np.empty(16, dtype=np.int64))
    tags: np.ndarray = field(default_factory=lambda: np.empty(16, dtype=np.int64))
    n: int = 0

    def append(self, page: int, tag: int) -> None:
        """One page: scalar stores, far cheaper than a one-element `extend`."""
        if self.n == len(self.pages):
            self._reserve(self.n + 1)
        self.pages[self.n] = page
        self.tags[self.n] = tag
        self.n += 1

    def extend(self, pages: np.ndarray, tags: np.ndarray) -> None:
        end = self.n + len(pages)
        if end > len(self.pages):
            self._reserve(end)
        self.pages[self.n : end] = pages
        self.tags[self.n : end] = tags
        self.n = end

    def _reserve(self, end: int) -> None:
        size = max(end, 2 * len(self.pages))
        self.pages = np.concatenate([self.pages[: self.n], np.empty(size - self.n, dtype=np.int64)])
        self.tags = np.concatenate([self.tags[: self.n], np.empty(size - self.n, dtype=np.int64)])

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
        # pages ever share a tag: a foreign page id can never carry the tag a sequence recorded.
        self.tag = np.zeros(num_pages, dtype=np.int64)
        self.next_tag = 1
        self.free: list[int] = list(range(num_pages - 1, -1, -1))  # pop() hands out low ids first
        self.cached: OrderedDict[int, None] = OrderedDict()  # unreferenced pages with a key, LRU first
        self.key_of: dict[int, PageKey] = {}
        self.page_of: dict[PageKey, int] = {}
        self.hit_tokens = 0
        self.lookup_tokens = 0

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
        table.extend(pages, tags)

    def allocate_many(self, tables: list[BlockTable], counts: list[int]) -> None:
        """`allocate` for several tables at once: one bulk take, then each table its slice, in order."""
        pages, tags = self._take(sum(counts))
        if len(pages) == len(tables):  # one page each (a decode run's growth, mostly): scalar appends
            for table, page, tag in zip(tables, pages.tolist(), tags.tolist(), strict=True):
                table.append(page, tag)
            return
        start = 0
        for table, c in zip(tables, counts, strict=True):
            table.extend(pages[start : start + c], tags[start : start + c])
            start += c

    def _take(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """`count` fresh pages and their new tags, now held once.

        Free pages go first, in bulk; only what they cannot cover is evicted from the cached prefixes, oldest
        first.
        """
        if count > self.available:
            raise OutOfPages
        bulk = min(count, len(self.free))
        cut = len(self.free) - bulk
        taken = self.free[cut:][::-1]  # pop() order: low page ids first
        del self.free[cut:]
        for _ in range(count - bulk):
            page, _ = self.cached.popitem(last=False)
            del self.page_of[self.key_of.pop(page)]
            taken.append(page)
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
        for k in keys[:n]:
            page = self.page_of[k]
            if self.refcount[page] == 0:
                del self.cached[page]
            self.refcount[page] += 1
            table.append(page, int(self.tag[page]))
        self.hit_tokens += n * self.page_size
        return n

    def publish(self, table: BlockTable, keys: list[PageKey]) -> None:
        """Give the table's leading full pages their prefix keys so later sequences can reuse them."""
        if not self.prefix_caching:
            return
        n = min(table.n, len(keys))
        pages = table.pages[:n].tolist()
        fresh = dict(zip(keys[:n], pages, strict=True))
        unique = len(fresh) == n == len(set(pages))
        if unique and self.page_of.keys().isdisjoint(fresh) and self.key_of.keys().isdisjoint(pages):
            self.page_of.update(fresh)  # the common case, all new: the loop below in bulk
            self.key_of.update(zip(pages, keys[:n], strict=True))
            return
        for page, k in zip(pages, keys, strict=False):
            if page in self.key_of or k in self.page_of:
                continue
            self.key_of[page] = k
            self.page_of[k] = page

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
        assert rc.min(initial=0) >= 0, "page refcount below zero"
        for page in pages[rc == 0].tolist():
            if page in self.key_of:
                self.cached[page] = None
            else:
                self.free.append(page)
        table.n = 0

    def force_free(self, page: int) -> None:
        """Fault injection only: free a page behind its owner's back (the bookkeeping bug we defend against)."""
        if page in self.key_of:
            del self.page_of[self.key_of.pop(page)]
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
        return [(b, 0) for b in blocks[:n]]
    return [(blocks[((i + 1) * page_size - 1) // block_tokens], (i + 1) * page_size % block_tokens) for i in range(n)]
