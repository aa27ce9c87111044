"""A benchmark run's load as phaseplan traffic: the scenario that drives the deployment as the run drove it.

A closed loop (`--request-rate inf --max-concurrency N`, guidellm's concurrent streams) is `concurrency: N`; an
open loop is a `rate` with Poisson or gamma gaps (vLLM's burstiness b is a gamma shape: coefficient of
variation 1/√b). Lengths are the run's own: fixed at the requested length when the run asked for one length
(range ratio 1 or unstated: the measured mean, which is what the tokenizer really sent), uniform in
[ratio·L, L] for SGLang's and vLLM's random dataset, else fixed at the measured means (a dataset such as
ShareGPT: its spread is not in the file, which `notes` says). What the traffic model cannot state (constant
gaps, a rate with a binding concurrency cap over more than a burst) is one InputError naming the run; a rate
that sends every request within 5% of the run, held to a concurrency cap, is the closed loop at that cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.calibration.bench_run import BenchRun, Lengths
from simulator.errors import InputError

MAX_REQUESTS = 1000  # requests simulated per run at most: a fit simulates every run dozens of times
# A rate whose requests all arrive within this share of the run's duration is a burst: what bounds the load is
# the concurrency cap, not the rate (GPUStack's 1,000 req/s for 1,000 requests of a 539 s run, 512 in flight).
BURST_SHARE = 0.05


@dataclass(frozen=True)
class RunTraffic:
    """The `traffic:` mapping of one run's scenario, and what it approximates."""

    traffic: dict[str, Any]
    notes: tuple[str, ...]


def traffic_of(run: BenchRun, max_requests: int = MAX_REQUESTS) -> RunTraffic:
    notes: list[str] = []
    sent = run.num_prompts or run.completed
    if sent is None:
        raise InputError(f"{run.where}: the run states neither its number of prompts nor its completed requests")
    requests = min(sent, max_requests)
    if requests < sent:
        notes.append(f"{requests:,} of its {sent:,} requests simulated")
    traffic: dict[str, Any] = {"requests": requests, **_load(run, sent, notes)}
    for key, lengths in (("prompt_tokens", run.input_tokens), ("output_tokens", run.output_tokens)):
        traffic[key] = _length(run, key, lengths, notes)
    return RunTraffic(traffic, tuple(notes))


def _load(run: BenchRun, sent: int, notes: list[str]) -> dict[str, Any]:
    load = run.load
    rate, cap = load.request_rate, load.max_concurrency
    if rate is None or math.isinf(rate):
        if cap is None:  # every request at once, none held back: a closed loop of all of them
            return {"concurrency": sent}
        return {"concurrency": cap}
    if cap is not None and cap < sent and run.duration_s is not None and sent / rate <= BURST_SHARE * run.duration_s:
        notes.append(
            f"request_rate {rate:g} sends all {sent:,} requests in {sent / rate:.3g} s of a {run.duration_s:,.4g} s "
            f"run: a burst held to {cap} in flight, simulated as a closed loop of {cap}"
        )
        return {"concurrency": cap}
    if cap is not None and cap < sent:
        raise InputError(
            f"{run.where}: request_rate {rate:g} with max_concurrency {cap}: phaseplan's traffic is an open loop "
            "or a closed one, not both (rerun the benchmark with one of them)"
        )
    if load.arrival in (None, "poisson") and load.burstiness in (None, 1.0):
        return {"rate": rate, "arrival": "poisson"}
    if load.arrival == "gamma" or load.burstiness is not None:
        b = load.burstiness if load.burstiness is not None else 1.0
        return {"rate": rate, "arrival": "bursty", "burst_cv": 1 / math.sqrt(b)}
    raise InputError(
        f"{run.where}: arrival {load.arrival!r}: phaseplan's open loop has Poisson or gamma gaps "
        "(rerun the benchmark with Poisson arrivals)"
    )


def _length(run: BenchRun, key: str, ln: Lengths, notes: list[str]) -> dict[str, Any] | int:
    what = "input" if key == "prompt_tokens" else "output"
    if ln.range_ratio is not None and ln.range_ratio < 1 and ln.requested is not None:
        low = max(1, math.floor(ln.range_ratio * ln.requested))
        return {"dist": "uniform", "low": low, "high": max(low, round(ln.requested))}
    value = ln.mean if ln.mean is not None else ln.requested
    if value is None:
        raise InputError(f"{run.where}: the run states no {what} length (neither a mean nor a requested length)")
    if ln.requested is None and ln.range_ratio is None:
        notes.append(f"{what} lengths fixed at the measured mean {value:,.0f} (the file states no spread)")
    return max(1, round(value))
