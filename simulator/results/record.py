"""What a finished run hands to `results/`: plain dataclasses and arrays, no SimPy and no live engine.

Either clock writes one (the modeled engine, or the same engine in step mode behind the replay's device timer),
and every part of the Result — metrics, integrity, step anatomy — is built from it alone, so a Result can be
rebuilt from a record kept or made elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.capacity import PoolCapacity
from simulator.config.scenario import Pool, Scenario
from simulator.pricing.profile import Profile
from simulator.serving.scheduler import Counters


@dataclass(slots=True)
class RequestRecord:
    """One request's outcome; times in seconds since the start of the run."""

    id: int
    arrival: float
    prompt: int
    output: int
    first_token: float = math.nan
    finish: float = math.nan
    status: str = "pending"  # completed | rejected | aborted | pending
    cached_tokens: int = 0
    reason: str = ""  # why it was rejected (REJECT_REASONS) or aborted (integrity, preemption)
    prefill_instance: int = -1  # the instance index it was routed to in each pool (-1: none; colocated: decode)
    decode_instance: int = -1
    load_s: float = 0.0  # seconds loading its prefix back from the KV tiers below HBM (part of its TTFT)
    # The client's retries of failed attempts (traffic.retries): one record a request, its arrival the first send
    retries: int = 0
    retry_prompt: int = 0  # prompt tokens the failed attempts had prefilled (prefilled again)
    retry_output: int = 0  # output tokens the failed attempts had generated (generated again)
    retry_prefill_s: float = 0.0  # their prompts' prefill, priced on an idle entry instance


@dataclass(frozen=True)
class PageLog:
    """KV pages held by one cache over the run, as (time, change) pairs in no particular order: changes commute, so
    the log is the same however the clock was cut into runs, and occupancy is their running sum in time order."""

    pages: int  # the cache's size
    t: np.ndarray
    d: np.ndarray


@dataclass(frozen=True)
class RankRun:
    """One DP-attention rank of an instance: its pages over the run and its prefix-cache lookups."""

    log: PageLog
    lookup_tokens: int
    hit_tokens: int


@dataclass(frozen=True)
class InstanceRun:
    """One instance's run: busy time, steps, batch sizes, pages held (all ranks together), scheduler counters."""

    busy_s: float
    steps: int
    decode_seq_steps: int  # Σ over steps of the decode batch (all ranks): mean batch = this / steps
    busiest_seq_steps: int  # Σ over steps of the busiest rank's decode batch (= decode_seq_steps with one rank)
    max_batch: int
    log: PageLog
    lookup_tokens: int
    hit_tokens: int
    counters: Counters
    ranks: tuple[RankRun, ...] = ()  # DP attention: each rank's own (empty with one rank)
    tiers: dict[str, int] | None = None  # KV tiers below HBM: hits and page moves by tier, all ranks (None: none)


@dataclass(frozen=True)
class PoolRun:
    """A pool's instances after the run, with what priced their steps."""

    pool: Pool
    capacity: PoolCapacity
    instances: tuple[InstanceRun, ...]
    priced_from: dict[str, float]  # share of the pool's step seconds by source: table, fallback, collective
    verify_seq_steps: int = 0  # speculative decoding: Σ over verify steps of the batch, and the tokens they gave
    accepted_tokens: int = 0


@dataclass(frozen=True)
class RunRecord:
    """A finished run: the scenario and the profile that priced it, the pools, and every request's outcome."""

    scenario: Scenario
    profile: Profile
    pools: dict[str, PoolRun]
    entry: str  # the pool new requests enter (prefill, or decode when colocated)
    requests: list[RequestRecord]
    injected: dict[str, int] | None = None  # planted faults by kind (None: no fault injection)
