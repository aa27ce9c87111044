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

from dataclasses import dataclass

import numpy as np
from numba import njit

from simulator.config.parallel import Speculative
from simulator.serving.batch import DecodeBatch


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


@dataclass(slots=True)
class _Track:
    """A batch sequence's chain from the step count it joined at."""

    gains: np.ndarray  # tokens gained after j verify steps since joining (gains[0] = 0)
    cached: int  # tokens cached when it joined
    origin: int  # the step count when it joined
    held: int  # pages it held when it joined


class Speculation:
    """The accepted tokens of one decode instance's sequences, and what a run of verify steps needs of the cache."""

    def __init__(self, spec: Speculative, seed: int, page_size: int) -> None:
        self.k = spec.draft_tokens
        self.probs = np.array(spec.position_probs)
        self.seed = seed
        self.page_size = page_size
        self._tracks: dict[int, _Track] = {}  # by admission order
        self.verify_seq_steps = 0  # Σ over verify steps of the batch size
        self.tokens = 0  # tokens those steps gave

    def accepted(self, req_id: int, output: int) -> np.ndarray:
        """a(g) for output positions g < output: 1 + the run of leading draft positions accepted (position i
        with probability p_i once all before it were). The draws are one stream per request, row g for position
        g, so any prefix of them is the same however long the request."""
        u = np.random.default_rng([self.seed, 13, req_id]).random((output, self.k))
        return 1 + np.cumprod(u < self.probs, axis=1).sum(axis=1)

    def join(self, order: int, req_id: int, output: int, generated: int, remaining: int, cached: int, held: int,
             at: int) -> np.ndarray:
        """A sequence joins the batch at step count `at`: its chain from there (returned: the caller's progress
        reads it), whose length less one is the verify steps until its output ends."""
        out = np.empty(remaining + 1, dtype=np.int64)
        m = _chain(self.accepted(req_id, output), generated, remaining, out)
        gains = out[: m + 1]
        self._tracks[order] = _Track(gains, cached, at, held)
        return gains

    def leave(self, order: int) -> None:
        del self._tracks[order]

    def _pages(self, tokens: np.ndarray | int) -> np.ndarray | int:
        """Pages that hold `tokens` cached plus the k+1 positions a verify step writes."""
        return -(-(tokens + self.k + 1) // self.page_size)

    def _new_pages(self, t: _Track, at: int, b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Pages the sequence takes at steps b..n-1 of a run planned at step count `at`, and the tokens it has
        cached when each of those steps starts."""
        m = at - t.origin + b
        cached = t.cached + t.gains[m : m + n - b]
        before = t.held if m == 0 else self._pages(t.cached + int(t.gains[m - 1]))
        pages = self._pages(cached)
        return np.diff(pages, prepend=before), cached

    def horizon(self, batch: DecodeBatch, at: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The run's next n verify steps: cumulative new pages after each, the running sum of those (pages read
        beyond the start) and the context each step reads (Σ cached + 1 per sequence, as a plain step reads)."""
        need = np.zeros(n, dtype=np.int64)
        ctx = np.full(n, len(batch.seqs), dtype=np.int64)
        for order in batch.orders.tolist():
            new, cached = self._new_pages(self._tracks[order], at, 0, n)
            need += new
            ctx += cached
        growth = np.cumsum(need)
        return growth, np.cumsum(growth), ctx

    def first_pages(self, batch: DecodeBatch, at: int) -> int:
        """Pages the run's first verify step takes."""
        return sum(int(self._new_pages(self._tracks[o], at, 0, 1)[0][0]) for o in batch.orders.tolist())

    def due(self, batch: DecodeBatch, at: int, b: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows that take pages at steps b..k-1, step by step and in batch order within a step (a row listed once
        per page), and the steps that take pages with how many each — `DecodeBatch.due` for verify steps."""
        orders = batch.orders.tolist()
        new = np.empty((len(orders), k - b), dtype=np.int64)
        for i, order in enumerate(orders):
            new[i] = self._new_pages(self._tracks[order], at, b, k)[0]
        counts = new.sum(axis=0)
        steps = np.flatnonzero(counts)
        rows = np.repeat(np.broadcast_to(batch.rows[:, None], new.shape).T.ravel(), new.T.ravel())
        return rows, b + steps, counts[steps]

    def advanced(self, batch: DecodeBatch, at: int, k: int) -> None:
        """k verify steps ran from step count `at`: count the batch's steps and the tokens they gave."""
        self.verify_seq_steps += k * len(batch.seqs)
        for order in batch.orders.tolist():
            t = self._tracks[order]
            m = at - t.origin
            self.tokens += int(t.gains[m + k] - t.gains[m])
