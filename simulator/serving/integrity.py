"""Page integrity: before a decode step reads the cache, every page of every sequence in the batch is
checked against the generation tag the sequence recorded; a mismatch aborts that sequence only.

Two trackers share one interface (`CheckingTracker`, `NoopTracker`), and a `FaultInjector` plants the
bookkeeping bugs the check exists to catch, so detection is measured rather than assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from simulator.serving.cache import PagedCache
from simulator.serving.tables import BlockTable


@dataclass(frozen=True)
class Violation:
    index: int  # position of the sequence in the checked batch
    slot: int  # first bad slot of its block table
    kind: str  # "tag_mismatch" | "invalid_page"


@njit(cache=True, nogil=True)
def _first_bad(
    pages: np.ndarray,
    recorded: np.ndarray,
    lens: np.ndarray,
    tag: np.ndarray,
    rows: np.ndarray,
    num_pages: int,
    out: np.ndarray,
) -> tuple[int, int]:
    """Into `out`, (batch index, slot) of the first bad entry of every table that has one, in batch order;
    returns how many tables are bad and how many entries were checked.

    The CPU twin of the GPU check kernel: it walks only the live entries of each table's row. An id that is
    negative or past the last page is bad without being used as an index, so it can never read a real page's
    tag and pass."""
    k = total = 0
    for i in range(len(rows)):
        r = rows[i]
        if r < 0:  # a table without pages has no row
            continue
        total += lens[r]
        for j in range(lens[r]):
            p = pages[r, j]
            if p < 0 or p >= num_pages or tag[p] != recorded[r, j]:
                out[k, 0] = i
                out[k, 1] = j
                k += 1
                break
    return k, total


def check_rows(rows: np.ndarray, cache: PagedCache, out: np.ndarray | None = None) -> tuple[list[Violation], int]:
    """Batched check of the tables in these rows of `cache`'s table store (a decode batch keeps its rows);
    returns the violations, by position in `rows`, and the number of page entries checked. `out`: room for a
    (position, slot) pair per row, if the caller keeps one."""
    if not len(rows):
        return [], 0
    store = cache.store
    if out is None:
        out = np.empty((len(rows), 2), dtype=np.int64)
    if len(out) < len(rows):
        raise ValueError("the compiled walk writes a pair per row and checks no bounds: `out` is too short")
    k, total = _first_bad(store.pages, store.tags, store.lens, cache.tag, rows, cache.num_pages, out)
    violations: list[Violation] = []
    if not k:
        return violations, total
    for i, slot in out[:k].tolist():
        valid = 0 <= store.pages[rows[i], slot] < cache.num_pages
        violations.append(Violation(i, slot, "tag_mismatch" if valid else "invalid_page"))
    return violations, total


class CheckingTracker:
    enabled = True

    def __init__(self) -> None:
        self._out = np.empty((64, 2), dtype=np.int64)  # the check's results, kept between checks

    def check(self, rows: np.ndarray, cache: PagedCache) -> tuple[list[Violation], int]:
        if len(rows) > len(self._out):
            self._out = np.empty((2 * len(rows), 2), dtype=np.int64)
        return check_rows(rows, cache, self._out)


class NoopTracker:
    """Checking off: the same interface, nothing checked, nothing caught."""

    enabled = False

    def check(self, rows: np.ndarray, cache: PagedCache) -> tuple[list[Violation], int]:
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
