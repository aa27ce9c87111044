"""Which steps of a replay are executed: a long scenario must fit a device budget, so steps are bucketed and each
bucket is executed a few times; later steps of a bucket reuse the median of its samples, and once the budget is
spent an unmeasured bucket's steps are priced by the cost model (counted apart)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from simulator.serving.scheduler import Plan

BUCKET_RULE = (
    "decode batch exact; the batch's mean context, and each prefill chunk's tokens and context "
    "before it, in quarter-octave buckets (round(4·log2 x))"
)
Decision = Literal["execute", "reuse", "price"]
COUNTED = {"execute": "executed", "reuse": "reused", "price": "priced"}  # how the Result counts each decision


def _q(x: float) -> int:
    return round(4 * math.log2(x)) if x > 0 else -1


def bucket_key(pool: str, plan: Plan) -> tuple[Any, ...]:
    """The bucket of a step (`BUCKET_RULE`)."""
    d = plan.decode
    ctx = _q(sum(s.computed + 1 for s in d) / len(d)) if d else -1
    chunks = tuple(sorted((_q(c), _q(s.computed + c)) for s, c in plan.prefill))
    return pool, len(d), ctx, chunks


@dataclass
class Bucket:
    samples: list[float] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)  # the OS took the core away during each sample this often
    profiled: bool = False  # its op families were timed once, after its samples

    def time(self) -> float:
        return statistics.median(self.samples)


@dataclass
class Sampler:
    """The budget: `samples` executions a bucket while `budget_s` device seconds last."""

    samples: int
    budget_s: float
    buckets: dict[tuple[Any, ...], Bucket] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"executed": 0, "reused": 0, "priced": 0})

    def decide(self, key: tuple[Any, ...], spent_s: float) -> tuple[Decision, Bucket]:
        """Execute the step (its bucket still wants samples and the budget lasts), reuse its bucket's median, or
        price it by the cost model; counted."""
        bucket = self.buckets.setdefault(key, Bucket())
        if len(bucket.samples) < self.samples and spent_s < self.budget_s:
            decision: Decision = "execute"
        elif bucket.samples:
            decision = "reuse"
        else:
            decision = "price"
        self.counts[COUNTED[decision]] += 1
        return decision, bucket

    def wants_families(self, bucket: Bucket, spent_s: float) -> bool:
        """Time the bucket's op families once, right after its last sample, if the budget lasts."""
        if len(bucket.samples) == self.samples and not bucket.profiled and spent_s < self.budget_s:
            bucket.profiled = True
            return True
        return False
