"""Block tables: each sequence's pages and the generation tags it recorded, as rows of one store per cache.

The store is the layout a GPU's batched integrity check reads — `block_tables[batch, max_pages]` and each
row's length — so the check over a decode batch, the batch's page count and a decode step's growth are each
one compiled call over the batch's rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _rows_total(lens: np.ndarray, rows: np.ndarray) -> int:
    total = 0
    for r in rows:
        total += lens[r]
    return total


class TableStore:
    """Every block table of one cache as a row of two 2-D arrays, page ids and generation tags, and each row's
    length.

    It is the layout a GPU's batched integrity check reads (`block_tables[batch, max_pages]` and the lengths),
    and it lets the check over a whole decode batch and a decode step's growth each be one compiled call over
    the batch's rows. A table holds a row only while it holds pages, so rows stay few; columns grow to the
    longest table. Entries past a table's length hold the cache's null page with tag 0 (tag 0 for ever, and no
    live entry records 0: tags start at 1).
    """

    def __init__(self, null_page: int, rows: int = 64, width: int = 64) -> None:
        self.null_page = null_page
        self.pages = np.full((rows, width), null_page, dtype=np.int64)
        self.tags = np.zeros((rows, width), dtype=np.int64)
        self.lens = np.zeros(rows, dtype=np.int64)  # live entries of the table in each row
        self._free_rows = list(range(rows - 1, -1, -1))

    def take_row(self) -> int:
        if not self._free_rows:
            rows = len(self.pages)
            self._resize(2 * rows, self.pages.shape[1])
            self._free_rows = list(range(2 * rows - 1, rows - 1, -1))
        return self._free_rows.pop()

    def give_row(self, row: int) -> None:
        """A table gave its row back: pad it again."""
        n = self.lens[row]
        self.pages[row, :n] = self.null_page
        self.tags[row, :n] = 0
        self.lens[row] = 0
        self._free_rows.append(row)

    def reuse_row(self, row: int) -> None:
        """A row that is padded already (by a compiled release) can be taken again."""
        self._free_rows.append(row)

    def held(self, rows: np.ndarray) -> int:
        """Entries of the tables in these rows (a decode batch's pages, once per plan)."""
        return _rows_total(self.lens, rows)

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
        self.lens = np.concatenate((self.lens, np.zeros(rows - len(self.lens), dtype=np.int64)))


_NO_PAGES = np.zeros(0, dtype=np.int64)
_NO_PAGES.flags.writeable = False


class BlockTable:
    """A sequence's pages in order and the generation tag each page had when this sequence got it.

    Its entries live in a row of its cache's `TableStore` from the first page it gets until it releases
    them; `pages` and `tags` are views of that row (valid up to `n`), so a view must not be held across an
    allocation, which may move the store.
    """

    __slots__ = ("store", "row")

    def __init__(self) -> None:
        self.store: TableStore | None = None
        self.row = -1

    @property
    def n(self) -> int:
        """Pages in the table."""
        return 0 if self.store is None else int(self.store.lens[self.row])

    @property
    def pages(self) -> np.ndarray:
        return _NO_PAGES if self.store is None else self.store.pages[self.row]

    @property
    def tags(self) -> np.ndarray:
        return _NO_PAGES if self.store is None else self.store.tags[self.row]

    def attach(self, store: TableStore) -> None:
        if self.store is None:
            self.store, self.row = store, store.take_row()
        if self.store is not store:
            raise ValueError("a block table belongs to one cache")

    def detach(self) -> None:
        """The table released its pages: its row goes back to the store."""
        if self.store is not None:
            self.store.give_row(self.row)
        self.store, self.row = None, -1

    def extend(self, pages: np.ndarray, tags: np.ndarray) -> None:
        if self.store is None:
            raise ValueError("extend a table that holds no row (attach it first)")
        n = self.n
        end = n + len(pages)
        self.store.fit(end)
        self.store.pages[self.row, n:end] = pages
        self.store.tags[self.row, n:end] = tags
        self.store.lens[self.row] = end

    def live_pages(self) -> np.ndarray:
        return self.pages[: self.n]

    def live_tags(self) -> np.ndarray:
        return self.tags[: self.n]
