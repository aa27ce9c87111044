"""Speculative decoding in the serving model: how many tokens each verify step gives each sequence.

A verify step checks the k draft tokens of every batch sequence and keeps the accepted prefix plus the target
model's own next token: 1..k+1 tokens. How many is drawn per sequence and step, deterministically from the
scenario's seed and the request, and indexed by the sequence's output position: a sequence that has produced g
tokens gains a(g) at its next verify step, whichever clock runs it, however its steps are cut into runs, and
after a preemption too. A sequence's future from any point is then a fixed chain g → g + a(g), so a run of n
verify steps is known when it is planned: the pages each step takes, the context it reads and the step at which
each output ends — what a run of plain decode steps reads from the step count alone.

KV of the draft positions: a verify step writes k+1 positions before it knows how many it keeps, so a sequence
holds pages for k+1 tokens beyond its cache (SGLang allocates the draft slots ahead of the verify); the slots
of rejected positions are written again by the next step, not returned.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np
from numba import njit

from simulator.config.parallel import Speculative


@njit(cache=True)
def _chain(a: np.ndarray, g0: int, remaining: int, out: np.ndarray) -> int:
    """out[j]: tokens a sequence that has produced g0 gains in its first j verify steps, a(g) per step from
    output position g, the last step cut at `remaining`; returns the steps until its output ends."""
    out[0] = 0
    got, g, m = 0, g0, 0
    while got < remaining:
        step = a[g] if g < len(a) else 1
        got = min(remaining, got + step)
        g += step
        m += 1
        out[m] = got
    return m


OFF, LEN, ORIGIN, CACHED, HELD = range(5)  # a sequence's chain in the store, when it joined, tokens and pages then
FIELDS = 5


@njit(cache=True)
def _pages(tokens: int, k1: int, ps: int) -> int:
    """Pages that hold `tokens` cached plus the k+1 positions a verify step writes."""
    return -(-(tokens + k1) // ps)


@njit(cache=True)
def _new_pages(
    a: np.ndarray,
    n: int,
    store: np.ndarray,
    at: int,
    b: int,
    k: int,
    k1: int,
    ps: int,
    new: np.ndarray,
    ctx: np.ndarray,
) -> None:
    """new[i, s]: pages sequence i takes at step b+s of a run planned at step count `at` (s < k - b); ctx[s]: the
    tokens the batch has cached when that step starts."""
    for i in range(n):
        off, cached = a[OFF, i], a[CACHED, i]
        m = at - a[ORIGIN, i] + b
        prev = a[HELD, i] if m == 0 else _pages(cached + store[off + m - 1], k1, ps)
        for s in range(k - b):
            c = cached + store[off + m + s]
            pages = _pages(c, k1, ps)
            new[i, s] = pages - prev
            prev = pages
            ctx[s] += c


@njit(cache=True)
def _due(new: np.ndarray, rows: np.ndarray, out: np.ndarray, steps: np.ndarray, counts: np.ndarray) -> int:
    """Rows that take pages, step by step and in batch order within a step (a row once per page), into `out`; the
    steps that take pages into `steps` with how many into `counts`. Returns how many steps take pages."""
    r = m = 0
    for s in range(new.shape[1]):
        total = 0
        for i in range(new.shape[0]):
            for _ in range(new[i, s]):
                out[r] = rows[i]
                r += 1
            total += new[i, s]
        if total:
            steps[m] = s
            counts[m] = total
            m += 1
    return m


@njit(cache=True)
def _gained(a: np.ndarray, n: int, store: np.ndarray, at: int, k: int) -> int:
    """Tokens the batch's k verify steps from step count `at` gave."""
    total = 0
    for i in range(n):
        m = at - a[ORIGIN, i]
        total += store[a[OFF, i] + m + k] - store[a[OFF, i] + m]
    return total


class Speculation:
    """The accepted tokens of one decode instance's sequences, and what a run of verify steps needs of the cache.

    Each batch sequence's chain lives in one flat store (appended at its join, compacted when half of it is
    chains of sequences that left), and its columns in batch order beside the batch's own, so a run's questions
    are one compiled pass each.
    """

    def __init__(self, spec: Speculative, seed: int, page_size: int) -> None:
        self.k = spec.draft_tokens
        self.probs = np.array(spec.position_probs)
        self.seed = seed
        self.page_size = page_size
        self._a = np.zeros((FIELDS, 64), dtype=np.int64)  # columns in batch (admission) order
        self._orders: list[int] = []  # the batch's admission orders, ascending, as the batch keeps them
        self._store = np.zeros(1024, dtype=np.int64)
        self._used = 0  # store entries written
        self._live = 0  # of which, chains of batch sequences
        self.verify_seq_steps = 0  # Σ over verify steps of the batch size
        self.tokens = 0  # tokens those steps gave

    def accepted(self, req_id: int, output: int) -> np.ndarray:
        """a(g) for output positions g < output: 1 + the run of leading draft positions accepted (position i
        with probability p_i once all before it were). The draws are one stream per request, row g for position
        g, so any prefix of them is the same however long the request."""
        u = np.random.default_rng([self.seed, 13, req_id]).random((output, self.k))
        return 1 + np.cumprod(u < self.probs, axis=1).sum(axis=1)

    def join(
        self, order: int, req_id: int, output: int, generated: int, remaining: int, cached: int, held: int, at: int
    ) -> np.ndarray:
        """A sequence joins the batch at step count `at` (the batch places it by admission order, and so does
        this): its chain from there (returned: its progress reads it), whose length less one is the verify steps
        until its output ends."""
        if self._used + remaining + 1 > len(self._store):
            self._compact(remaining + 1)
        off = self._used
        m = _chain(self.accepted(req_id, output), generated, remaining, self._store[off:])
        self._used += m + 1
        self._live += m + 1
        i = bisect_left(self._orders, order)
        self._orders.insert(i, order)
        n = len(self._orders)
        if n > self._a.shape[1]:
            self._a = np.concatenate((self._a, np.zeros_like(self._a)), axis=1)
        self._a[:, i + 1 : n] = self._a[:, i : n - 1].copy()
        self._a[:, i] = (off, m + 1, at, cached, held)
        return self._store[off : off + m + 1].copy()

    def leave(self, order: int) -> None:
        i = bisect_left(self._orders, order)
        del self._orders[i]
        self._live -= int(self._a[LEN, i])
        n = len(self._orders)
        self._a[:, i:n] = self._a[:, i + 1 : n + 1].copy()

    def _compact(self, room: int) -> None:
        """Move the batch's chains to the front of the store (growing it if they and `room` do not fit)."""
        n = len(self._orders)
        size = len(self._store)
        while self._live + room > size // 2:
            size *= 2
        store = np.zeros(size, dtype=np.int64)
        used = 0
        for i in range(n):
            off, length = self._a[OFF, i], self._a[LEN, i]
            store[used : used + length] = self._store[off : off + length]
            self._a[OFF, i] = used
            used += length
        self._store, self._used = store, used

    def _new(self, at: int, b: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(self._orders)
        new = np.empty((n, k - b), dtype=np.int64)
        ctx = np.full(k - b, n, dtype=np.int64)  # one position per sequence, as a plain step reads
        _new_pages(self._a, n, self._store, at, b, k, self.k + 1, self.page_size, new, ctx)
        return new, ctx

    def horizon(self, at: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The run's next n verify steps: cumulative new pages after each, the running sum of those (pages read
        beyond the start) and the context each step reads (Σ cached + 1 per sequence, as a plain step reads)."""
        new, ctx = self._new(at, 0, n)
        growth = np.cumsum(new.sum(axis=0))
        return growth, np.cumsum(growth), ctx

    def first_pages(self, at: int) -> int:
        """Pages the run's first verify step takes."""
        return int(self._new(at, 0, 1)[0].sum())

    def due(self, rows: np.ndarray, at: int, b: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batch's table `rows` that take pages at steps b..k-1, step by step and in batch order within a step
        (a row once per page), and the steps that take pages with how many each: `DecodeBatch.due` for verify
        steps."""
        new, _ = self._new(at, b, k)
        out = np.empty(int(new.sum()), dtype=np.int64)
        steps, counts = np.empty((2, k - b), dtype=np.int64)
        m = _due(new, rows, out, steps, counts)
        return out, b + steps[:m], counts[:m]

    def advanced(self, at: int, k: int) -> None:
        """k verify steps ran from step count `at`: count the batch's steps and the tokens they gave."""
        n = len(self._orders)
        self.verify_seq_steps += k * n
        self.tokens += _gained(self._a, n, self._store, at, k)
