"""Per-request records of a run, as `run --out` writes them (requests.csv) and the charts and the app draw them.

The Result carries percentiles; these are the requests behind them, with times computed exactly as
`metrics.build_metrics` computes them (and written at full precision), so percentiles recomputed from the CSV
equal the Result's: over every completed request, its `full_run` figures; over those that arrived in its
`window_s`, its steady-state figures.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from simulator.results.metrics import SERIES_POINTS  # the queue series shares the KV occupancy series' grid

COLUMNS = [
    "id",
    "arrival_s",
    "status",  # completed | rejected | aborted | pending
    "reason",  # why a rejected request was rejected
    "prompt_tokens",
    "output_tokens",
    "ttft_ms",
    "tpot_ms",  # requests with more than one output token
    "e2e_ms",
    "prefill_instance",  # index in its pool; empty where the request never reached that pool (colocated: no prefill)
    "decode_instance",
    "cached_tokens",  # prompt tokens the decode instance already held: their KV was not transferred
]


class RunRecord(Protocol):
    """The fields of the engine's `Record` read here."""

    id: int
    arrival: float
    prompt: int
    output: int
    first_token: float
    finish: float
    status: str
    cached_tokens: int
    reason: str
    prefill_instance: int
    decode_instance: int


def ttft_ms(records: Sequence[RunRecord]) -> np.ndarray:
    """Time to first token of completed requests, as the Result's percentiles take it."""
    return np.array([(r.first_token - r.arrival) * 1e3 for r in records if r.status == "completed"])


def tpot_ms(records: Sequence[RunRecord]) -> np.ndarray:
    """Time per output token after the first, of completed requests with more than one."""
    return np.array(
        [(r.finish - r.first_token) * 1e3 / (r.output - 1) for r in records if r.status == "completed" and r.output > 1]
    )


def waiting(records: Sequence[RunRecord], span: float) -> np.ndarray:
    """(t seconds, requests that have arrived but not yet had their first token: queued or in prefill), on the
    grid of the Result's KV occupancy series (`span` is the Result's `metrics.duration_s`)."""
    served = [r for r in records if r.status != "rejected"]
    if not served:
        return np.zeros((0, 2))
    end = min(r.arrival for r in records) + span  # as the Result measures its span
    arrivals = np.sort([r.arrival for r in served])
    firsts = np.sort([r.first_token for r in served if not math.isnan(r.first_token)])
    grid = np.linspace(0.0, end, SERIES_POINTS + 1)
    count = np.searchsorted(arrivals, grid, side="right") - np.searchsorted(firsts, grid, side="right")
    return np.column_stack([grid, count])


def _num(v: float) -> str:
    return "" if math.isnan(v) else repr(float(v))


def to_csv(records: Sequence[RunRecord]) -> str:
    """One row per request, in request id order."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in sorted(records, key=lambda r: r.id):
        done = r.status == "completed"
        w.writerow(
            [
                r.id,
                repr(float(r.arrival)),
                r.status,
                r.reason,
                r.prompt,
                r.output,
                _num((r.first_token - r.arrival) * 1e3) if done else "",
                _num((r.finish - r.first_token) * 1e3 / (r.output - 1)) if done and r.output > 1 else "",
                _num((r.finish - r.arrival) * 1e3) if done else "",
                r.prefill_instance if r.prefill_instance >= 0 else "",
                r.decode_instance if r.decode_instance >= 0 else "",
                r.cached_tokens,
            ]
        )
    return buf.getvalue()
