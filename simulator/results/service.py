"""The service figures of a stretch of a run — throughput, latency percentiles, SLO attainment, cost — over the
whole run (as a benchmark measures it) and over its steady-state window, with the window's 95% intervals.

How the window is found and the intervals are formed is `steady`'s; this module reads the figures over it:

* **Latency** (TTFT, TPOT, E2E, SLO attainment) of the requests that arrived in the window, served whenever they
  were: the drain serves the last of them, but the figures are theirs, not the drain's.
* **Throughput** counts the tokens of the requests that arrived, over the seconds they arrived in: in a steady
  state the tokens served per second are the tokens arriving per second, and reading it so needs no filled
  batch. Where arrivals do not depend on the service (open-loop traffic, a trace) every arrival counts, from the
  first: the arrival process has no warm-up, and cutting one would only throw data away. Where they do (a closed
  loop's clients, a conversation's next turn), only the window's arrivals count, since its first wave is part of
  the transient. Either way the window must show the fleet keeping up with the work arriving in it
  (`steady.KEEPS_UP`); a fleet that falls behind is filling its batch or building a queue, and is flagged.
* **Cost** is the fleet's price per second over that throughput.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.results import steady
from simulator.results.record import RunRecord


def percentiles(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {"p50": None, "p95": None, "p99": None}
    p = np.percentile(values, [50, 95, 99])
    return {"p50": round(float(p[0]), 4), "p95": round(float(p[1]), 4), "p99": round(float(p[2]), 4)}


def service(
    ttft: np.ndarray,
    tpot: np.ndarray,
    e2e: np.ndarray,
    out_tok: float,
    in_tok: float,
    span: float,
    gpus: int,
    price: float,
    attainment: float | None,
) -> dict[str, Any]:
    """The service figures of `span` seconds that served these tokens and latencies."""
    usd = gpus * price * span / 3600.0
    return {
        "output_tokens_per_s": round(out_tok / span, 3),
        "input_tokens_per_s": round(in_tok / span, 3),
        "output_tokens_per_s_per_gpu": round(out_tok / span / gpus, 3),
        "ttft_ms": percentiles(ttft),
        "tpot_ms": percentiles(tpot),
        "e2e_ms": percentiles(e2e),
        "slo_attainment": attainment,
        "cost_per_mtok_usd": round(usd / (out_tok / 1e6), 4) if out_tok else None,
    }


def _latencies(s: steady.Served, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """TTFT, TPOT (of requests with more than one output token, and which those are) and E2E in ms of `rows`."""
    first, arrival, finish, output = s.first[rows], s.arrival[rows], s.finish[rows], s.output[rows]
    many = output > 1
    tpot = (finish[many] - first[many]) * 1e3 / (output[many] - 1)
    return (first - arrival) * 1e3, tpot, many, (finish - arrival) * 1e3


def _within(s: steady.Served, rows: np.ndarray, limits: tuple[float, float]) -> np.ndarray:
    """Which completed requests of `rows` met both per-request limits (TPOT only with more than one token)."""
    first, arrival, finish, output = s.first[rows], s.arrival[rows], s.finish[rows], s.output[rows]
    tpot = np.where(output > 1, (finish - first) * 1e3 / np.maximum(output - 1, 1), 0.0)
    return ((first - arrival) * 1e3 <= limits[0]) & ((output <= 1) | (tpot <= limits[1]))


def _batch_of(times: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The batch (0 .. BATCHES - 1) of [lo, hi] each time falls in."""
    span = max(hi - lo, 1e-12)
    return np.clip(((times - lo) / span * steady.BATCHES).astype(int), 0, steady.BATCHES - 1)


def windowed(run: RunRecord, end: float, gpus: int, price: float) -> dict[str, Any]:
    """The window (`window_s`), whether it shows a steady state (`steady_state`), the service figures over it and
    their 95% intervals (`ci95`, the figures' shape; None where an interval would mislead)."""
    sc, recs = run.scenario, run.requests
    s = steady.served(recs, end)
    arrivals = np.array([r.arrival for r in recs], dtype=float)
    t0, t1 = float(arrivals.min()), float(arrivals.max())
    w = steady.find_window(s, t0, t1, end)
    own = sc.traffic.concurrency is None and sc.traffic.sessions.turns == 1 and w.start < w.end <= t1
    lo, hi = (t0, t1) if own else (w.start, w.end)  # the seconds whose arrivals the throughput counts
    # A closed loop's clients all send their first request at its start: that wave is how the run began, not work
    # arriving at the pace of the service, so a window is (start, end] there (a later request arrives the moment
    # an earlier one ends: in (start, end] they are the completions of those seconds); else [start, end], and so
    # where no served request arrived after the start (a burst: the wave is all there is).
    after = (s.arrival > w.start) & (s.arrival <= w.end)
    wave = sc.traffic.concurrency is not None and bool(after.any())

    def within(t: np.ndarray, a: float, b: float) -> np.ndarray:
        return ((t > a) if wave else (t >= a)) & (t <= b)

    counted, inside = within(s.arrival, lo, hi), within(s.arrival, w.start, w.end)
    ttft, tpot, many, e2e = _latencies(s, inside)
    limits = (sc.slo.ttft_p95_ms, sc.slo.tpot_p95_ms)
    ok = _within(s, inside, limits)
    arrived = int(np.count_nonzero(within(arrivals, w.start, w.end)))
    out_tok, in_tok = float(s.output[counted].sum()), float(s.prompt[counted].sum())
    span = max(hi - lo, 1e-12)
    figures = service(ttft, tpot, e2e, out_tok, in_tok, span, gpus, price, round(int(ok.sum()) / arrived, 4))
    which = _batch_of(s.arrival[inside], w.start, w.end)
    batch_s = (w.end - w.start) / steady.BATCHES
    why = w.why or steady.too_short(s, w, float(s.output[inside].sum()), which, batch_s, e2e)
    ci = _throughput_intervals(s, counted, lo, hi, figures, gpus)
    if why is None:
        ci |= _latency_intervals(ttft, tpot, e2e, many, ok, which, figures)
    return {
        "window_s": [w.start, w.end],  # at full precision: the requests in it are those arriving in it
        "steady_state": {
            "reached": why is None,
            "why": why,
            "warmup_cut_s": w.start,
            "throughput_s": [lo, hi],
            "method": steady.METHOD,
            "batches": steady.BATCHES,
            "batch_s": round(batch_s, 6),
            "requests": arrived,
        },
        **figures,
        "ci95": ci,
    }


def _throughput_intervals(
    s: steady.Served, counted: np.ndarray, lo: float, hi: float, figures: dict[str, Any], gpus: int
) -> dict[str, Any]:
    """Throughput's and cost's intervals from the tokens arriving in each batch of [lo, hi]: arrivals in disjoint
    spans are independent, so these hold wherever the window is (a latency's need a steady state)."""
    names = ("output_tokens_per_s", "input_tokens_per_s", "output_tokens_per_s_per_gpu", "cost_per_mtok_usd")
    if hi <= lo:  # every request arrived at once: no span to cut into batches
        return dict.fromkeys(names)
    which = _batch_of(s.arrival[counted], lo, hi)
    width = (hi - lo) / steady.BATCHES
    ci: dict[str, Any] = {}
    for name, tokens in (("output_tokens_per_s", s.output[counted]), ("input_tokens_per_s", s.prompt[counted])):
        per = np.bincount(which, weights=tokens, minlength=steady.BATCHES) / width
        ci[name] = _round(steady.t_interval(per, figures[name]), 3)
    tp = ci["output_tokens_per_s"]
    ci["output_tokens_per_s_per_gpu"] = _round([v / gpus for v in tp] if tp else None, 3)
    cost, rate = figures["cost_per_mtok_usd"], figures["output_tokens_per_s"]
    ci["cost_per_mtok_usd"] = (  # the fleet's price over throughput: the interval of its inverse
        _round([cost * rate / tp[1], cost * rate / tp[0]], 4) if tp and cost and tp[0] > 0 else None
    )
    return ci


def _latency_intervals(
    ttft: np.ndarray,
    tpot: np.ndarray,
    e2e: np.ndarray,
    many: np.ndarray,
    ok: np.ndarray,
    which: np.ndarray,
    figures: dict[str, Any],
) -> dict[str, Any]:
    """Each latency percentile's and the attainment's interval from the window's batches (by arrival)."""
    ci: dict[str, Any] = {}
    for name, values, b in (("ttft_ms", ttft, which), ("tpot_ms", tpot, which[many]), ("e2e_ms", e2e, which)):
        per = [values[b == k] for k in range(steady.BATCHES)]
        ci[name] = {}
        for key, q in (("p50", 50), ("p95", 95), ("p99", 99)):
            batch = np.array([np.percentile(v, q) if v.size else np.nan for v in per])
            centre = figures[name][key]
            ci[name][key] = None if centre is None else _round(steady.t_interval(batch, centre), 4)
    shares = np.bincount(which, weights=ok, minlength=steady.BATCHES) / np.bincount(which, minlength=steady.BATCHES)
    ci["slo_attainment"] = _round(steady.t_interval(shares, figures["slo_attainment"]), 4)
    return ci


def _round(ci: list[float] | None, digits: int) -> list[float] | None:
    return None if ci is None else [round(float(v), digits) for v in ci]
