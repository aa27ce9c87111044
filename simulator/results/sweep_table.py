"""A sweep's table for the terminal's width: the swept values, then as many metrics as fit, most telling first.

Every column has its unit in the header (% for shares, ms, tok/s, $) and the CSV has them all. A point that
failed keeps its row, marked, with its reason listed under the table.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from simulator.config.sweep import COLUMNS, lookup, scaled

WIDTH = 80  # a piped report's width
# Metric columns in the order they are given room; the rest are in the CSV.
PRIORITY = [
    "tok/s/GPU",
    "TTFT p95 ms",
    "TPOT p95 ms",
    "SLO %",
    "$/Mtok out",
    "out tok/s",
    "KV occ max %",
    "preempted",
    "max running",
    "TPOT p50 ms",
    "in tok/s",
    "decode step ms",
    "prefill chunk ms",
    "prefill GEMM ms",
]


def cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _width(header: str, cells: list[str]) -> int:
    """Columns of a rich table column: its widest text plus padding and one border."""
    return max([len(header), *map(len, cells)]) + 3


def sweep_table(
    title: str, paths: list[str], results: list[dict[str, Any]], width: int = WIDTH
) -> tuple[Table, list[str]]:
    """The table, and the headers of the metric columns that did not fit (in the CSV)."""
    keys = [p.split(".")[-1] for p in paths]
    point_cells = [[cell(r["point"][p]) for r in results] for p in paths]
    used = 1 + sum(_width(k, c) for k, c in zip(keys, point_cells, strict=True))
    by_header = {h: (p, u) for h, p, u in COLUMNS}
    chosen, left = [], []
    for h in PRIORITY:
        path, unit = by_header[h]
        cells = [
            ("failed" if not chosen else "-") if "error" in r else cell(scaled(lookup(r, path), unit)) for r in results
        ]
        w = _width(h, cells)
        if not left and used + w <= width:
            chosen.append((h, cells))
            used += w
        else:  # from the first that does not fit on, all go to the CSV: never a detail without what it details
            left.append(h)
    t = Table(title=title)
    for k in keys:
        t.add_column(k, no_wrap=True)
    for h, _ in chosen:
        t.add_column(h, justify="right", no_wrap=True)
    for i in range(len(results)):
        t.add_row(*[c[i] for c in point_cells], *[c[i] for _, c in chosen])
    return t, left
