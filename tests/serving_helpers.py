"""Test-side conveniences over the serving layer (the product checks a batch's rows; tests hold tables)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.serving.cache import PagedCache
from simulator.serving.integrity import Violation, check_rows
from simulator.serving.tables import BlockTable


def check_tables(tables: Sequence[BlockTable], cache: PagedCache) -> tuple[list[Violation], int]:
    """`check_rows` of these tables (a table without pages has no row, and passes)."""
    return check_rows(np.array([t.row for t in tables], dtype=np.int64), cache)
