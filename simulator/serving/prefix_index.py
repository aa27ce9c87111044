"""The prefix index of one cache: prefix key -> page, an open-addressing hash table in one array of
(key, page) slots (a probe reads one cache line).

Compiled (numba) with the page bookkeeping that uses it, because a prompt's pages are looked up, keyed and
evicted one by one — about a hundred dictionary operations a request, which cost more as Python calls than
the work itself. A numba typed dict would do, but crossing into compiled code with one costs ~1 µs a call,
more than a whole lookup here. Linear probing with backward-shift deletion (no tombstones), at most half
full: a cache never holds more keys than pages.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: Fibonacci hashing spreads consecutive keys


def new_index(max_keys: int) -> np.ndarray:
    """An empty index with room for `max_keys` at a load of at most one half: slot i is (key, page)."""
    size = 1 << max(4, (2 * max_keys - 1).bit_length())
    index = np.zeros((size, 2), dtype=np.int64)
    index[:, 1] = EMPTY
    return index


@njit(cache=True, inline="always")
def _home(index: np.ndarray, key: int) -> int:
    h = key * _GOLDEN  # wraps: int64 arithmetic
    return (h ^ (h >> 32)) & (len(index) - 1)  # the table's size is a power of two


@njit(cache=True)
def lookup(index: np.ndarray, key: int) -> int:
    """The page holding `key`, or EMPTY."""
    mask = len(index) - 1
    i = _home(index, key)
    while index[i, 1] != EMPTY:
        if index[i, 0] == key:
            return index[i, 1]
        i = (i + 1) & mask
    return EMPTY


@njit(cache=True)
def insert(index: np.ndarray, key: int, page: int) -> None:
    """Add `key` (not present) -> `page`."""
    mask = len(index) - 1
    i = _home(index, key)
    while index[i, 1] != EMPTY:
        i = (i + 1) & mask
    index[i, 0] = key
    index[i, 1] = page


@njit(cache=True)
def delete(index: np.ndarray, key: int) -> None:
    """Remove `key` if present, moving later entries of its probe run back so no lookup stops short."""
    mask = len(index) - 1
    i = _home(index, key)
    while index[i, 1] != EMPTY and index[i, 0] != key:
        i = (i + 1) & mask
    if index[i, 1] == EMPTY:
        return
    j = i
    while True:
        j = (j + 1) & mask
        if index[j, 1] == EMPTY:
            break
        # the entry at j may fill the hole at i if i lies on its probe path (from its home to j)
        if ((j - _home(index, index[j, 0])) & mask) >= ((j - i) & mask):
            index[i, 0] = index[j, 0]
            index[i, 1] = index[j, 1]
            i = j
    index[i, 1] = EMPTY
