"""Page integrity: before a decode step reads the cache, every page of every sequence in the batch is
checked against the generation tag the sequence recorded; a mismatch aborts that sequence only.

Two trackers share one interface (`CheckingTracker`, `NoopTracker`), and a `FaultInjector` plants the
bookkeeping bugs the check exists to catch, so detection is measured rather than assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from simulator.cache import BlockTable, PagedCache


@dataclass(frozen=True)
class Violation:
    index: int  # position of the sequence in the checked batch
    slot: int  # first bad slot of its block table
    kind: str  # "tag_mismatch" | "invalid_page"


def check_tables(tables: Sequence[BlockTable], cache: PagedCache) -> tuple[list[Violation], int]:
    """Vectorised batched check; returns the violations and the number of page entries checked.

    A page id is validated before it indexes the tag array: a −1 used as an index would silently read
    the last page's tag.
    """
    if not tables:
        return [], 0
    pages = np.concatenate([t.pages[: t.n] for t in tables])
    recorded = np.concatenate([t.tags[: t.n] for t in tables])
    total = len(pages)
    valid = (pages >= 0) & (pages < cache.num_pages)
    current = cache.tag[np.where(valid, pages, 0)]
    bad = ~valid | (current != recorded)
    if not bad.any():
        return [], total
    counts = np.array([t.n for t in tables], dtype=np.int64)
    owner = np.repeat(np.arange(len(tables)), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out: list[Violation] = []
    seen: set[int] = set()
    for pos in np.flatnonzero(bad).tolist():
        i = int(owner[pos])
        if i in seen:
            continue
        seen.add(i)
        kind = "invalid_page" if not valid[pos] else "tag_mismatch"
        out.append(Violation(i, pos - int(starts[i]), kind))
    return out, total


class CheckingTracker:
    enabled = True

    def check(self, tables: Sequence[BlockTable], cache: PagedCache) -> tuple[list[Violation], int]:
        return check_tables(tables, cache)


class NoopTracker:
    """Checking off: the same interface, nothing checked, nothing caught."""

    enabled = False

    def check(self, tables: Sequence[BlockTable], cache: PagedCache) -> tuple[list[Violation], int]:
        return [], 0


@dataclass
class Fault:
    kind: str  # "stale" | "foreign" | "out_of_range"
    slot: int
    original_page: int  # the page the slot held before the fault; still this sequence's to release
    owned: bool  # False for stale: the page was freed behind the sequence's back


@dataclass
class FaultInjector:
    """Plants one fault into a sequence's block table, the way a real bookkeeping bug would look."""

    kinds: list[str]
    rng: np.random.Generator
    injected: dict[str, int] = field(default_factory=dict)

    def inject(self, table: BlockTable, cache: PagedCache, others: Sequence[BlockTable]) -> Fault | None:
        if table.n == 0:
            return None
        kind = self.kinds[int(self.rng.integers(len(self.kinds)))]
        pages = table.live_pages()
        if kind == "stale":
            own = [s for s in range(table.n) if cache.refcount[pages[s]] == 1]
            if not own:
                kind = "out_of_range"  # every page shared: a stale free would hit the sharers too
            else:
                slot = own[int(self.rng.integers(len(own)))]
                cache.force_free(int(pages[slot]))
                return self._record(Fault("stale", slot, int(pages[slot]), owned=False))
        slot = int(self.rng.integers(table.n))
        original = int(pages[slot])
        if kind == "foreign":
            mine = set(pages.tolist())
            pool = [p for t in others if t is not table for p in t.live_pages().tolist() if p not in mine]
            if pool:
                table.pages[slot] = pool[int(self.rng.integers(len(pool)))]
                return self._record(Fault("foreign", slot, original, owned=True))
            kind = "out_of_range"
        table.pages[slot] = -1 if self.rng.random() < 0.5 else cache.num_pages + int(self.rng.integers(1, 64))
        return self._record(Fault("out_of_range", slot, original, owned=True))

    def _record(self, fault: Fault) -> Fault:
        self.injected[fault.kind] = self.injected.get(fault.kind, 0) + 1
        return fault


def release_after_fault(table: BlockTable, cache: PagedCache, fault: Fault | None) -> None:
    """Release an aborted sequence's pages without touching pages it does not own."""
    if fault is None:
        cache.release(table)
        return
    if fault.owned:
        table.pages[fault.slot] = fault.original_page
        cache.release(table)
    else:
        cache.release(table, skip=frozenset({fault.slot}))
