"""What the app does, without the UI: list studies, apply what-if overrides, run, and shape the results.

Kept free of Streamlit so it is tested like the rest of the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.capacity import capacity_report
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.results.result import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
MAX_REQUESTS = 3000  # an interactive what-if answers in seconds; the CLI runs the full scenario


@dataclass(frozen=True)
class WhatIf:
    """The knobs the page offers; None leaves the scenario's own value."""

    rate: float | None = None
    concurrency: int | None = None
    prompt_median: int | None = None
    output_median: int | None = None
    prefill_instances: int | None = None
    decode_instances: int | None = None
    weights: str | None = None
    kv_cache: str | None = None
    mem_fraction: float | None = None
    integrity: bool | None = None

    def overrides(self, sc: Scenario) -> dict[str, Any]:
        """Dotted-path overrides, exactly what `--set` would take on the command line."""
        out: dict[str, Any] = {}
        if self.rate is not None and sc.traffic.rate is not None:
            out["traffic.rate"] = self.rate
        if self.concurrency is not None and sc.traffic.concurrency is not None:
            out["traffic.concurrency"] = self.concurrency
        for field, path in (("prompt_median", "traffic.prompt_tokens"), ("output_median", "traffic.output_tokens")):
            value = getattr(self, field)
            if value is not None:
                out[path] = {"dist": "lognormal", "median": value, "sigma": 0.5, "max": 8 * value}
        pools = sc.deployment.pools()
        if self.prefill_instances is not None and "prefill" in pools:
            out["deployment.prefill.instances"] = self.prefill_instances
        for field, key in (("decode_instances", "instances"), ("weights", "weights"), ("kv_cache", "kv_cache"),
                           ("mem_fraction", "mem_fraction")):
            value = getattr(self, field)
            if value is not None:
                out[f"deployment.decode.{key}"] = value
        if self.integrity is not None:
            out["integrity.enabled"] = self.integrity
        return out


def studies() -> list[Path]:
    return sorted(SCENARIOS.glob("*.yaml"))


def load(path: Path, what_if: WhatIf | None = None) -> Scenario:
    """The study with the what-if applied and traffic capped at MAX_REQUESTS; errors are InputError lines."""
    sc, raw = loader.load(path)
    over = what_if.overrides(sc) if what_if else {}
    if sc.traffic.requests is None or sc.traffic.requests > MAX_REQUESTS:
        over["traffic.requests"] = MAX_REQUESTS
    data = loader.apply_overrides({k: v for k, v in raw.items() if k != "sweep"}, over)
    return loader.validate(data, str(path), overridden=frozenset(over))


def run(path: Path, what_if: WhatIf | None = None) -> tuple[Scenario, dict[str, Any], dict[str, Any]]:
    sc = load(path, what_if)
    result, _ = simulate(sc, path.parent)
    return sc, capacity_report(sc), result


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """The numbers an operator reads first, flat, for a metrics row."""
    m = result["metrics"]
    return {
        "output tok/s": m["output_tokens_per_s"],
        "tok/s per GPU": m["output_tokens_per_s_per_gpu"],
        "TTFT p95 ms": m["ttft_ms"]["p95"],
        "TPOT p95 ms": m["tpot_ms"]["p95"],
        "max running": m["max_running"],
        "preempted": m["preempted"],
        "SLO": m["slo_attainment"],
        "$ per M tok": m["cost_per_mtok_usd"],
    }
