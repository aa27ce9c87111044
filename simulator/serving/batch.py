"""The decode batch of one instance: its sequences in batch order and, as arrays, what a run of steps reads.

A run of identical decode steps needs four numbers from each sequence in the batch: its block table's row
(the integrity check and the pages a step reads), the page class that says at which step counts it needs a
new page (one every `page_size` steps), the step count at which its output ends and the one at which a
planned fault lands. Kept as the columns of one array in batch order, each question a run asks — how many
pages every coming step takes, when the run must stop, which tables take pages at which step — is one
compiled pass, where lists of sequences cost a Python operation per sequence per run.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import numpy as np
from numba import njit

T = TypeVar("T")  # what the batch carries for each sequence; it reads only the numbers it is given

ORDER, ROW, CLS, END, FAULT = range(5)  # admission order, table row, page class, end step, fault step (-1: none)
FIELDS = 5
NEVER = 1 << 62  # the end of an empty batch


@njit(cache=True)
def _insert(a: np.ndarray, n: int, order: int, row: int, cls: int, end: int, fault: int) -> int:
    """Put a sequence at its place by admission order among the first n; returns the place."""
    i = n
    while i > 0 and a[ORDER, i - 1] > order:
        i -= 1
    for f in range(FIELDS):
        for j in range(n, i, -1):
            a[f, j] = a[f, j - 1]
    a[ORDER, i] = order
    a[ROW, i] = row
    a[CLS, i] = cls
    a[END, i] = end
    a[FAULT, i] = fault
    return i


@njit(cache=True)
def _remove(a: np.ndarray, n: int, order: int) -> int:
    """Take out the sequence of this admission order; returns where it was."""
    i = 0
    while i < n and a[ORDER, i] != order:
        i += 1
    assert i < n, "not in the batch"
    for f in range(FIELDS):
        for j in range(i, n - 1):
            a[f, j] = a[f, j + 1]
    return i


@njit(cache=True)
def _summary(a: np.ndarray, n: int, lens: np.ndarray, at: int, ps: int, need: np.ndarray) -> tuple[int, int, int]:
    """need[s]: sequences that take a page at the s-th coming step (step count at + s), s < ps. Returns the
    pages the batch holds, the first step count at which an output ends and the first planned fault at or
    after `at` (-1: none)."""
    need[:] = 0
    pages = 0
    first_end = NEVER
    first_fault = -1
    for i in range(n):
        need[(a[CLS, i] - at) % ps] += 1
        pages += lens[a[ROW, i]]
        first_end = min(first_end, a[END, i])
        f = a[FAULT, i]
        if f >= at and (first_fault < 0 or f < first_fault):
            first_fault = f
    return pages, first_end, first_fault


@njit(cache=True)
def _growth(need: np.ndarray, growth: np.ndarray, grown: np.ndarray) -> None:
    """growth[i]: pages the first i+1 steps take (the need cycle repeats every page_size steps); grown[i]: the
    pages those steps read beyond what the batch held before them."""
    ps = len(need)
    g = total = 0
    for i in range(len(growth)):
        g += need[i % ps]
        growth[i] = g
        total += g
        grown[i] = total


@njit(cache=True)
def _due(
    a: np.ndarray,
    n: int,
    at: int,
    need: np.ndarray,
    b: int,
    k: int,
    steps: np.ndarray,
    counts: np.ndarray,
    rows: np.ndarray,
) -> int:
    """The tables that take a page at steps b..k-1: into `rows`, step by step and in batch order within a step
    (the order a clock that runs one step at a time hands pages out in); each step that takes pages into
    `steps`, with how many into `counts`. Returns how many steps take pages."""
    ps = len(need)
    m = r = 0
    if k - b <= ps:  # each page class comes up at most once: find its members by a scan of the batch
        for s in range(b, k):
            if need[s % ps] == 0:
                continue
            c = (at + s) % ps
            for i in range(n):
                if a[CLS, i] == c:
                    rows[r] = a[ROW, i]
                    r += 1
            steps[m] = s
            counts[m] = need[s % ps]
            m += 1
        return m
    start = np.zeros(ps + 1, dtype=np.int64)  # a long span: the batch's positions grouped by page class once
    for i in range(n):
        start[a[CLS, i] + 1] += 1
    for c in range(ps):
        start[c + 1] += start[c]
    fill = start[:ps].copy()
    by_class = np.empty(n, dtype=np.int64)
    for i in range(n):
        c = a[CLS, i]
        by_class[fill[c]] = i
        fill[c] += 1
    for s in range(b, k):
        if need[s % ps] == 0:
            continue
        c = (at + s) % ps
        for j in range(start[c], start[c + 1]):
            rows[r] = a[ROW, by_class[j]]
            r += 1
        steps[m] = s
        counts[m] = start[c + 1] - start[c]
        m += 1
    return m


@njit(cache=True)
def _ended(a: np.ndarray, n: int, now: int, out: np.ndarray) -> int:
    """Positions, in batch order, of the sequences whose output has ended by step count `now`."""
    m = 0
    for i in range(n):
        if a[END, i] <= now:
            out[m] = i
            m += 1
    return m


class DecodeBatch(Generic[T]):
    """The sequences a decode step runs, in batch (admission) order, and their columns."""

    def __init__(self, page_size: int, capacity: int = 64) -> None:
        self.page_size = page_size
        self.seqs: list[T] = []  # replaced, never changed in place: a plan keeps the batch it was made with
        self._a = np.zeros((FIELDS + 1, capacity), dtype=np.int64)  # the fields, and a row of scratch

    @property
    def rows(self) -> np.ndarray:
        """The tables' rows in the cache's table store, in batch order (a view: read it before a change)."""
        return self._a[ROW, : len(self.seqs)]

    @property
    def orders(self) -> np.ndarray:
        """The sequences' admission orders, in batch order (a view: read it before a change)."""
        return self._a[ORDER, : len(self.seqs)]

    def join(self, seq: T, order: int, row: int, computed: int, remaining: int, fault_in: int, at: int) -> None:
        """`seq` joins at step count `at` with `computed` tokens cached and `remaining` to produce (a planned fault
        `fault_in` steps on, or none when negative); its progress is then counted from there."""
        n = len(self.seqs)
        if n == self._a.shape[1]:
            self._a = np.concatenate((self._a, np.zeros_like(self._a)), axis=1)
        if row < 0:
            raise ValueError("a decode sequence without pages")
        fault = at + fault_in if fault_in >= 0 else -1
        i = _insert(self._a, n, order, row, (at - computed) % self.page_size, at + remaining, fault)
        self.seqs = [*self.seqs[:i], seq, *self.seqs[i:]]

    def leave(self, order: int) -> None:
        """The sequence admitted as `order` leaves the batch."""
        i = _remove(self._a, len(self.seqs), order)
        self.seqs = self.seqs[:i] + self.seqs[i + 1 :]

    def fault_done(self, i: int) -> None:
        """The planned fault of the sequence at position i was injected: none is planned any more."""
        self._a[FAULT, i] = -1

    def summary(self, lens: np.ndarray, at: int, need: np.ndarray) -> tuple[int, int, int]:
        """`_summary` of the batch at step count `at`."""
        return _summary(self._a, len(self.seqs), lens, at, self.page_size, need)

    def due(self, at: int, need: np.ndarray, b: int, k: int, pages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows that take a page at steps b..k-1 of a plan made at step count `at` (`pages` of them), and the
        steps that take pages with how many each."""
        buf = np.empty(2 * (k - b) + pages, dtype=np.int64)
        steps, counts, rows = buf[: k - b], buf[k - b : 2 * (k - b)], buf[2 * (k - b) :]
        m = _due(self._a, len(self.seqs), at, need, b, k, steps, counts, rows)
        return rows, steps[:m], counts[:m]

    def ended(self, now: int) -> list[T]:
        """The sequences whose output has ended by step count `now`, in batch order."""
        out = self._a[-1]  # scratch: the row after the columns
        m = _ended(self._a, len(self.seqs), now, out)
        return [self.seqs[i] for i in out[:m].tolist()]


def growth(need: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`_growth` of the need cycle over n steps: (pages taken by each step's end, pages read beyond the start)."""
    g, grown = np.empty((2, n), dtype=np.int64)
    _growth(need, g, grown)
    return g, grown
