"""The planner's service-level objective: p95 limits a run must meet, optionally a share of requests.

`max-rate` and `plan` judge a run by its p95 TTFT and p95 TPOT (what operators quote), and, when an
`attainment` is given, by the share of all requests that met both limits one by one. A run either meets the
SLO or misses it for a reason a person can act on; the reasons are worded here, once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from simulator.config.bounds import BOUNDS
from simulator.config.bounds import format_number as num
from simulator.config.scenario import SLO as ScenarioSLO
from simulator.config.scenario import Scenario
from simulator.errors import InputError

# `--slo` spells its limits as the scenario's `slo` block does (one name for one limit, in YAML and on the command
# line). The old file spellings (`ttft_ms`, `tpot_ms`) still work, with a warning.
KEYS = ("ttft_p95_ms", "tpot_p95_ms", "attainment")
DEPRECATED = {"ttft_ms": "ttft_p95_ms", "tpot_ms": "tpot_p95_ms"}


def _stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


# What a rejected candidate failed on, in the order a verdict checks them.
DOES_NOT_FIT = "does not fit"
CANNOT_SUSTAIN = "cannot sustain the rate"
MISSES_TTFT = "misses TTFT"
MISSES_TPOT = "misses TPOT"
MISSES_ATTAINMENT = "misses attainment"
NO_REQUEST = "no request arrived"  # a run with nothing to judge meets no SLO


@dataclass(frozen=True)
class SLO:
    ttft_p95_ms: float
    tpot_p95_ms: float
    attainment: float | None = None  # share of requests that must meet both limits, e.g. 0.99

    @classmethod
    def parse(cls, text: str | None, sc: Scenario | ScenarioSLO, warn: Callable[[str], None] = _stderr_warning) -> SLO:
        """`ttft_p95_ms=2000,tpot_p95_ms=60[,attainment=0.99]`; a limit left out is the scenario's `slo` (or the
        `slo` block given)."""
        base = sc.slo if isinstance(sc, Scenario) else sc
        values: dict[str, float] = {"ttft_p95_ms": base.ttft_p95_ms, "tpot_p95_ms": base.tpot_p95_ms}
        given: set[str] = set()
        for item in (text or "").split(","):
            if not item.strip():
                continue
            key, sep, raw = item.partition("=")
            key = key.strip()
            if sep and key in DEPRECATED:
                warn(f"--slo {key} is deprecated, use {DEPRECATED[key]} (the scenario's slo key)")
                key = DEPRECATED[key]
            if not sep or key not in KEYS:
                raise InputError(f"--slo {item.strip()!r}: expected KEY=VALUE with KEY one of {', '.join(KEYS)}")
            if key in given:  # the last would silently win
                raise InputError(f"--slo {key}: given twice")
            given.add(key)
            try:
                v = float(raw)
            except ValueError:
                raise InputError(f"--slo {key}: expected a number, got {raw.strip()!r}") from None
            if not v > 0 or v != v or v == float("inf"):
                raise InputError(f"--slo {key}: must be a positive number, got {raw.strip()}")
            if key == "attainment" and v > 1:
                raise InputError(f"--slo attainment: a share of requests in (0, 1], got {raw.strip()}")
            if key != "attainment":  # the scenario's own slo fields take it: their range, named by the option
                lo, hi, what = BOUNDS[("SLO", key)]
                if not lo <= v <= hi:
                    raise InputError(
                        f"--slo {key}: {num(v)} is out of range: {what} must lie in [{num(lo)}, {num(hi)}]"
                    )
            values[key] = v
        return cls(**values)  # type: ignore[arg-type]

    def option(self) -> str:
        """This SLO as `--slo` takes it."""
        text = f"ttft_p95_ms={self.ttft_p95_ms:g},tpot_p95_ms={self.tpot_p95_ms:g}"
        return text + (f",attainment={self.attainment:g}" if self.attainment is not None else "")

    def overrides(self) -> dict[str, float]:
        """The scenario's per-request limits set to this SLO's, so a Result's `slo_attainment` counts against them."""
        return {"slo.ttft_p95_ms": self.ttft_p95_ms, "slo.tpot_p95_ms": self.tpot_p95_ms}

    def describe(self) -> str:
        s = f"p95 TTFT <= {self.ttft_p95_ms:,g} ms, p95 TPOT <= {self.tpot_p95_ms:,g} ms"
        if self.attainment is not None:
            s += f", >= {self.attainment:.1%} of requests within both"
        return s

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def verdict(self, m: dict[str, Any]) -> str | None:
        """Why a complete run's metrics miss this SLO, or None when they meet it."""
        if not m["requests"]:
            return f"{NO_REQUEST}: the run has no latency to hold to the SLO"
        if m["rejected"]:
            return f"{DOES_NOT_FIT}: {m['rejected']:,} requests larger than an instance's KV cache were rejected"
        if m["unfinished"] or m["aborted"]:
            return f"{CANNOT_SUSTAIN}: {m['unfinished'] + m['aborted']:,} of {m['requests']:,} requests never finished"
        ttft, tpot = m["ttft_ms"]["p95"], m["tpot_ms"]["p95"]
        if ttft is not None and ttft > self.ttft_p95_ms:
            return f"{MISSES_TTFT}: p95 {ttft:,.0f} ms > {self.ttft_p95_ms:,g} ms"
        if tpot is not None and tpot > self.tpot_p95_ms:
            return f"{MISSES_TPOT}: p95 {tpot:,.1f} ms > {self.tpot_p95_ms:,g} ms"
        att = m["slo_attainment"]
        if self.attainment is not None and att is not None and att < self.attainment:
            return f"{MISSES_ATTAINMENT}: {att:.1%} < {self.attainment:.1%} of requests within both limits"
        return None

    def tightest(self, m: dict[str, Any]) -> tuple[float, str, float, float] | None:
        """The limit with the least headroom in a run (the one a higher load breaks first): its share of the
        limit, its name (TTFT or TPOT), the p95 and the limit; None without figures."""
        shares = []
        for name, key, limit in (("TTFT", "ttft_ms", self.ttft_p95_ms), ("TPOT", "tpot_ms", self.tpot_p95_ms)):
            v = m[key]["p95"]
            if v is not None:
                shares.append((v / limit, name, v, limit))
        return max(shares) if shares else None

    def binding(self, m: dict[str, Any]) -> str | None:
        """The tightest limit of a run that meets the SLO, as the plan prints it:
        `TPOT p95 50.7 ms of 60 ms (85% of the limit)`; None without figures."""
        t = self.tightest(m)
        if t is None:
            return None
        share, name, v, limit = t
        return f"{name} p95 {v:,.1f} ms of {limit:,g} ms ({share:.0%} of the limit)"

    def meets(self, m: dict[str, Any]) -> bool:
        return self.verdict(m) is None


def reason_kind(reason: str) -> str:
    """The category a reason starts with (one of the constants above)."""
    return reason.split(":", 1)[0]
