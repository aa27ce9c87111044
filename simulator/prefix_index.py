"""The prefix index of one cache: prefix key -> page, an open-addressing hash table in two arrays.

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


def new_index(max_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Empty (keys, pages) arrays with room for `max_keys` at a load of at most one half."""
    size = 1 << max(4, (2 * max_keys - 1).bit_length())
    return np.zeros(size, dtype=np.int64), np.full(size, EMPTY, dtype=np.int64)


@njit(cache=True, inline="always")
def _home(keys: np.ndarray, key: int) -> int:
    h = key * _GOLDEN  # wraps: int64 arithmetic
    return (h ^ (h >> 32)) & (len(keys) - 1)  # the table's size is a power of two


@njit(cache=True)
def lookup(keys: np.ndarray, pages: np.ndarray, key: int) -> int:
    """The page holding `key`, or EMPTY."""
    mask = len(keys) - 1
    i = _home(keys, key)
    while pages[i] != EMPTY:
        if keys[i] == key:
            return pages[i]
        i = (i + 1) & mask
    return EMPTY


@njit(cache=True)
def insert(keys: np.ndarray, pages: np.ndarray, key: int, page: int) -> None:
    """Add `key` (not present) -> `page`."""
    mask = len(keys) - 1
    i = _home(keys, key)
    while pages[i] != EMPTY:
        i = (i + 1) & mask
    keys[i] = key
    pages[i] = page


@njit(cache=True)
def delete(keys: np.ndarray, pages: np.ndarray, key: int) -> None:
    """Remove `key` if present, moving later entries of its probe run back so no lookup stops short."""
    mask = len(keys) - 1
    i = _home(keys, key)
    while pages[i] != EMPTY and keys[i] != key:
        i = (i + 1) & mask
    if pages[i] == EMPTY:
        return
    j = i
    while True:
        j = (j + 1) & mask
        if pages[j] == EMPTY:
            break
        # the entry at j may fill the hole at i if i lies on its probe path (from its home to j)
        if ((j - _home(keys, keys[j])) & mask) >= ((j - i) & mask):
            keys[i] = keys[j]
            pages[i] = pages[j]
            i = j
    pages[i] = EMPTY
