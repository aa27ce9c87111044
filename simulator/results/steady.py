"""Steady state: the measurement window of a run, and the confidence intervals of the figures read over it.

A run starts empty (an open loop fills its decode batch over about one request's lifetime; a closed loop sends
every client's first request at t = 0, a wave whose prompts queue together) and ends with a drain (arrivals
stop, the batch empties and steps speed up). Neither is the service a fleet gives in operation, so the figures
a planner quotes are read over a window that excludes both, as a steady-state simulation study reads them:

* **The window ends where arrivals end** (the last request's arrival); what is served after it is the drain.
* **The warm-up is detected from the run's own series** by MSER-5 (White 1997, "An effective truncation
  heuristic for bias reduction in simulation output", Simulation 69(6):323-334; its batch-of-5 form in White,
  Cobb & Spratt 2000, Proc. Winter Simulation Conference 755-760; Franklin & White 2008, WSC 541-546 on why it
  works). MSER-5 picks the truncation that minimises the standard error of the mean of what is kept, so it needs
  no tuning constant and no guess of the transient's shape, and it is the method Hoad, Robinson & Davies
  (2010, "Automating warm-up length estimation", J. Oper. Res. Soc. 61(9):1389-1403) recommend after comparing
  over forty. It runs on two series of `SERIES_POINTS` intervals each — output tokens produced per interval
  (the decode batch filling: throughput, TPOT, cost) and requests waiting for their first token (the prefill
  queue: TTFT, and a closed loop's first wave) — and the later of the two cuts starts the window, so every figure
  read over it is past its own transient. A cut past the middle of the arrivals means the run is too short to
  show a steady state (White 1997): the report says so.
* **Intervals come from batch means** (non-overlapping batches; Law, "Simulation Modeling and Analysis", 5th ed.
  2015, §9.5.3): the window is cut into `BATCHES` equal spans (within the 10-30 Schmeiser 1982, Oper. Res.
  30(3):556-568, recommends), each figure is computed on each batch, and the 95% half-width is
  t(0.975, B - 1) · s / sqrt(B). The point estimate is the figure over the whole window, the batches giving only
  its spread: "sectioning" (Asmussen & Glynn, "Stochastic Simulation", 2007, §III.5a), which keeps a percentile's
  estimate unbiased where the mean of batch percentiles would not be. Batches stand for independent samples
  only when each is longer than a request lives (its median E2E) and holds enough requests for its own p95;
  where they are not, the run has not reached a steady state that can be measured, and no interval is printed
  rather than a falsely tight one.

Tokens are counted when they are produced, not when their request finishes: a request's first token at its
first-token time, the rest evenly over its decode (what the step-by-step timeline gives to within one step),
and its prompt at its first token. All of it is computed from the finished run's records, never in the clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# The window's 10 batches and the 20 completed requests each needs for its p95 to be more than its largest value:
# config's, since a closed loop given no length is sized by them (`config.scenario.closed_loop_requests`).
from simulator.config.scenario import STEADY_BATCHES as BATCHES
from simulator.config.scenario import STEADY_PER_BATCH as MIN_PER_BATCH

SERIES_POINTS = 200  # observations of each warm-up series over the arrivals (MSER-5 batches them by 5)
MSER_BATCH = 5
T975 = 2.262157162798205  # Student t quantile 0.975 at BATCHES - 1 = 9 degrees of freedom (a test checks it)
KEEPS_UP = 0.95  # output tokens produced in the window over those arriving in it, at least (else still filling)
METHOD = "MSER-5 warm-up on output tokens and waiting requests; 95% intervals from 10 batch means"


@dataclass(frozen=True)
class Window:
    """The measurement window [start, end] (seconds since the run began), and whether it shows a steady state
    (`why` says what is missing when it does not)."""

    start: float
    end: float
    reached: bool
    why: str | None


def cumulative(
    times: np.ndarray, start: np.ndarray, end: np.ndarray, amount: np.ndarray, jump: np.ndarray
) -> np.ndarray:
    """At each of `times`, the total over items of `jump` (all of it at `start`) and `amount` (spread evenly over
    [start, end]; all at `start` when end <= start): piecewise linear, so exact at any time, in O(n log n)."""
    span = end - start
    flat = span <= 0
    slope = np.where(flat, 0.0, amount / np.where(flat, 1.0, span))
    at = np.concatenate([start, end])
    order = np.argsort(at, kind="stable")
    t = at[order]
    s = np.concatenate([slope, -slope])[order]
    j = np.concatenate([jump + np.where(flat, amount, 0.0), np.zeros(len(start))])[order]
    idx = np.searchsorted(t, times, side="right") - 1
    if not len(t):
        return np.zeros(len(times))
    sums = np.cumsum(j) + 0.0
    slopes, moments = np.cumsum(s), np.cumsum(s * t)
    safe = np.maximum(idx, 0)
    return np.where(idx >= 0, sums[safe] + times * slopes[safe] - moments[safe], 0.0)


def mser5(series: np.ndarray) -> tuple[int, bool]:
    """MSER-5's truncation point in observations, and whether it lies inside the search: the batch-of-5 means
    z_1..z_m, and the d minimising sum_{j > d} (z_j - mean_{j > d})^2 / (m - d)^2 over the first half of them
    (White 1997: the statistic is unstable near the end of a series, where few batches are left). A minimum at
    the half itself means the series was still settling there: the run is too short to show where it ends."""
    m = len(series) // MSER_BATCH
    if m < 4:
        return 0, False
    z = series[: m * MSER_BATCH].reshape(m, MSER_BATCH).mean(axis=1)
    z = z - z.mean()  # shifted: the sums of squares below lose no digits to a large mean
    kept = np.arange(m, 0, -1, dtype=float)  # batches kept by the cut d = 0 .. m - 1
    s1 = np.cumsum(z[::-1])[::-1]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    stat = np.maximum(s2 - s1 * s1 / kept, 0.0) / kept**2
    half = m // 2
    d = int(np.argmin(stat[: half + 1]))
    return d * MSER_BATCH, d < half


@dataclass(frozen=True)
class Served:
    """The completed requests' times as arrays (seconds), and every request's arrival and first-token time."""

    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    all_arrival: np.ndarray
    all_waited_until: np.ndarray  # each request's first token, or the run's end if it never had one

    def output_tokens(self, times: np.ndarray) -> np.ndarray:
        """Output tokens produced by each of `times`: the first at the first token, the rest evenly to the finish."""
        rest = np.maximum(self.output - 1, 0).astype(float)
        return cumulative(times, self.first, self.finish, rest, np.minimum(self.output, 1).astype(float))

    def waiting_area(self, times: np.ndarray) -> np.ndarray:
        """The integral, up to each of `times`, of the requests waiting for their first token."""
        a, w = self.all_arrival, self.all_waited_until
        return cumulative(times, a, w, np.maximum(w - a, 0.0), np.zeros(len(a)))


def served(records: list[Any], run_end: float) -> Served:
    done = [r for r in records if r.status == "completed"]
    waited = [r for r in records if r.status != "rejected"]

    def arr(rows: list[Any], f: Any) -> np.ndarray:
        return np.array([f(r) for r in rows], dtype=float)

    return Served(
        arrival=arr(done, lambda r: r.arrival),
        first=arr(done, lambda r: r.first_token),
        finish=arr(done, lambda r: r.finish),
        prompt=arr(done, lambda r: r.prompt),
        output=arr(done, lambda r: r.output),
        all_arrival=arr(waited, lambda r: r.arrival),
        all_waited_until=arr(waited, lambda r: run_end if math.isnan(r.first_token) else r.first_token),
    )


def _rates(cum: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.diff(cum) / np.diff(edges)


def warmup_cut(s: Served, t0: float, t1: float) -> tuple[float, bool]:
    """(where the warm-up ends, whether MSER-5 found its end inside the first half of the arrivals [t0, t1]): the
    later cut of the output-token and waiting-request series."""
    edges = np.linspace(t0, t1, SERIES_POINTS + 1)
    found = [mser5(x) for x in (_rates(s.output_tokens(edges), edges), _rates(s.waiting_area(edges), edges))]
    return float(edges[max(d for d, _ in found)]), all(inside for _, inside in found)


def find_window(s: Served, t0: float, t1: float, run_end: float) -> Window:
    """The window over the arrivals [t0, t1] with its warm-up cut; the whole run, not steady, where the arrivals
    span no time or no completed request arrived after the cut."""
    if not len(s.arrival):
        return Window(t0, max(run_end, t0), False, "no request completed")
    if t1 <= t0:
        return Window(t0, run_end, False, "every request arrived at once: there is no steady arrival to measure")
    start, early = warmup_cut(s, t0, t1)
    if not np.any((s.arrival >= start) & (s.arrival <= t1)):
        return Window(t0, run_end, False, "no completed request arrived after the warm-up")
    why = None
    if not early:
        why = (
            f"MSER-5 finds the warm-up still going at the middle of the {t1 - t0:,.0f} s of arrivals: the run is "
            "too short to show a steady state"
        )
    return Window(start, t1, why is None, why)


def t_interval(values: np.ndarray, centre: float) -> list[float] | None:
    """The 95% interval around `centre` from `BATCHES` batch values (None if any batch has no value)."""
    if len(values) != BATCHES or not np.all(np.isfinite(values)):
        return None
    half = T975 * float(np.std(values, ddof=1)) / math.sqrt(BATCHES)
    return [centre - half, centre + half]


def rel_half(ci: list[float] | None, centre: float | None) -> float | None:
    """The half-width of an interval as a share of its centre (None without either)."""
    if ci is None or centre is None or centre == 0:
        return None
    return (ci[1] - ci[0]) / 2 / abs(centre)


def too_short(
    s: Served, w: Window, arrived_tokens: float, which: np.ndarray, batch_s: float, e2e_ms: np.ndarray
) -> str | None:
    """Why a window MSER-5 accepted still shows no steady state that can be measured, or None: the fleet fell
    behind the work arriving in it (`KEEPS_UP`), a batch holds too few requests for its p95, or batches are
    shorter than a request lives (then they are not independent)."""
    produced = float(np.diff(s.output_tokens(np.array([w.start, w.end])))[0])
    if arrived_tokens and produced < KEEPS_UP * arrived_tokens:
        return (
            f"the fleet produced {produced / arrived_tokens:.0%} of the output tokens arriving in the window: "
            "its batch was still filling, or a queue built up"
        )
    fewest = int(np.bincount(which, minlength=BATCHES).min())
    if fewest < MIN_PER_BATCH:
        return f"a batch of the window holds only {fewest} completed requests (a p95 needs {MIN_PER_BATCH}): too short"
    median_e2e = float(np.median(e2e_ms)) / 1e3
    if batch_s < median_e2e:
        return (
            f"its {BATCHES} batches of {batch_s:,.1f} s are shorter than a request's median E2E "
            f"({median_e2e:,.1f} s), so they are not independent: too short"
        )
    return None


def run_length(lifetime_s: float, rate: float) -> float:
    """Seconds of arrivals a run at `rate` requests per second, each living about `lifetime_s`, needs to show a
    steady state this module can measure: its warm-up may take up to half the arrivals (a batch fills over about
    one lifetime; MSER-5 is allowed half), and the window after it holds `BATCHES` batches, each at least a
    lifetime long and holding `MIN_PER_BATCH` requests."""
    return 2 * BATCHES * max(lifetime_s, MIN_PER_BATCH / rate)
