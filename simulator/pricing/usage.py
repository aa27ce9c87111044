"""Where a run's step seconds came from: a profile table, the roofline fallback, or a collective (modeled unless
a profile measured it), and how many op pricings fell back, by family — so a report can say how much of its
step time was measured. Every pricer charges it through these methods."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

SOURCES = ("table", "fallback", "collective")


class StepPricing(Protocol):
    """A decode step's pricing: its fallback op counts per step, multiplied out when the counts are read."""

    fallbacks: tuple[tuple[str, int], ...]


@dataclass
class Usage:
    """Seconds of step time priced from each source, and fallback op pricings by family.

    A decode run charges its step count against its pricing, whose per-step fallback counts are multiplied out when
    the counts are read: ~140,000 runs an hour would otherwise each update a counter per op family."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    _ops: Counter[str] = field(default_factory=Counter)
    _steps: Counter[StepPricing] = field(default_factory=Counter)  # decode steps charged, by pricing

    def add(self, source: str, seconds: float) -> None:
        self.seconds[source] += seconds

    def add_sources(self, table: float, fallback: float, collective: float) -> None:
        """Seconds from each source at once (a priced part's)."""
        seconds = self.seconds
        seconds["table"] += table
        seconds["fallback"] += fallback
        seconds["collective"] += collective

    def count(self, family: str, ops: int) -> None:
        """`ops` pricings of `family` fell back to the roofline."""
        self._ops[family] += ops

    def count_all(self, fallbacks: Iterable[tuple[str, int]]) -> None:
        """Fallback pricings by family, as (family, ops) pairs."""
        ops = self._ops
        for fam, k in fallbacks:
            ops[fam] += k

    def charge_steps(self, pricing: StepPricing, steps: int) -> None:
        self._steps[pricing] += steps

    def book_steps(
        self,
        pricing: StepPricing,
        steps: int,
        table: float,
        fallback: float,
        fixed: list[tuple[str, float]],
        missed: list[tuple[str, int]],
    ) -> None:
        """A run of decode steps charged at once (one call per run: ~140,000 runs an hour): their varying parts'
        table and fallback seconds, `fixed` seconds by source per step, and fallback ops their tables missed."""
        seconds = self.seconds
        seconds["table"] += table
        seconds["fallback"] += fallback
        for src, s in fixed:
            seconds[src] += s * steps
        self._steps[pricing] += steps
        for fam, ops in missed:
            self._ops[fam] += ops

    def merge(self, other: Usage) -> None:
        for k, v in other.seconds.items():
            self.seconds[k] += v
        self.fallback_ops.update(other.fallback_ops)

    def take_back(self, other: Usage, share: float = 1.0) -> None:
        """Take `share` of another usage's seconds back off (seconds a step hid, or a part priced twice)."""
        for src, s in other.seconds.items():
            self.seconds[src] -= s if share == 1.0 else s * share

    def uncount(self, fallbacks: Mapping[str, int]) -> None:
        self._ops.subtract(fallbacks)

    @property
    def fallback_ops(self) -> Counter[str]:
        for pricing, steps in self._steps.items():
            for fam, k in pricing.fallbacks:
                self._ops[fam] += k * steps
        self._steps.clear()
        return self._ops

    def shares(self) -> dict[str, float]:
        total = sum(self.seconds.values())
        return {k: (v / total if total else 0.0) for k, v in self.seconds.items()}
