"""Error bars: a scenario repeated over traffic seeds (and draws of the profile's p10–p90 spread).

Repeat `i` runs with seed `seed + i` (so repeat 0 is the plain run) and, when the profile records a spread,
prices steps with draw `i` of it (`spread`). Each metric is reported as the mean over repeats with a 95%
confidence interval (Student t, n − 1 degrees of freedom) and the range seen. SLO attainment is reported two
ways: the mean share of requests within both limits, with its interval, and the probability that a run
meets the SLO (p95 TTFT and TPOT within the limits), k of n runs with a Wilson score interval. Same seeds,
same repeats: the intervals are reproducible to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scipy import stats

from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.planning.backends import Backend
from simulator.planning.slo import SLO
from simulator.planning.spread import has_spread
from simulator.planning.trial import Trial, run_trial
from simulator.pricing.profile import Profile
from simulator.results.cost import gpu_hour_usd, per_mtok

Z95 = 1.959963984540054
METRICS = {  # reported name → (path into a trial's metrics, unit)
    "output_tokens_per_s": (("output_tokens_per_s",), "tok/s"),
    "output_tokens_per_s_per_gpu": (("output_tokens_per_s_per_gpu",), "tok/s"),
    "input_tokens_per_s": (("input_tokens_per_s",), "tok/s"),
    "ttft_p50_ms": (("ttft_ms", "p50"), "ms"),
    "ttft_p95_ms": (("ttft_ms", "p95"), "ms"),
    "ttft_p99_ms": (("ttft_ms", "p99"), "ms"),
    "tpot_p50_ms": (("tpot_ms", "p50"), "ms"),
    "tpot_p95_ms": (("tpot_ms", "p95"), "ms"),
    "tpot_p99_ms": (("tpot_ms", "p99"), "ms"),
    "e2e_p95_ms": (("e2e_ms", "p95"), "ms"),
    "kv_occupancy_max_pct": (("kv_occupancy", "max"), "%"),
    "slo_attainment_pct": (("slo_attainment",), "%"),
}


def interval(values: list[float]) -> dict[str, Any]:
    """Mean, 95% confidence interval of the mean, min and max (rounded for a stable JSON)."""
    n = len(values)
    mean = sum(values) / n
    if n > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
        lo, hi = mean - half, mean + half
    else:
        lo = hi = None
    r = 4
    return {
        "mean": round(mean, r),
        "ci95": None if lo is None else [round(lo, r), round(hi, r)],  # type: ignore[arg-type]
        "min": round(min(values), r),
        "max": round(max(values), r),
        "n": n,
    }


def wilson(k: int, n: int) -> list[float]:
    """95% Wilson score interval of a probability seen k times in n."""
    z2 = Z95 * Z95
    centre = (k + z2 / 2) / (n + z2)
    half = Z95 * math.sqrt(k * (n - k) / n + z2 / 4) / (n + z2)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def _value(m: dict[str, Any], path: tuple[str, ...], unit: str) -> float | None:
    v: Any = m
    for k in path:
        v = v[k]
    if v is None:
        return None
    return float(v) * 100 if unit == "%" else float(v)


def repeat(
    sc: Scenario,
    base_dir: Path | None,
    n: int,
    slo: SLO,
    backend: Backend,
    on_done: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """n runs of `sc` (seeds seed..seed+n-1), summarised with intervals."""
    if n < 1:
        raise InputError(f"--repeats {n}: needs at least 1")
    spread = has_spread(sc, base_dir)
    trials = [
        Trial(sc.model_copy(update={"seed": sc.seed + i}), base_dir, None, i if spread else None) for i in range(n)
    ]
    outs = backend.map(run_trial, trials, on_done)
    if outs[0]["metrics"] is None:  # the deployment does not fit: no repeat can run
        raise InputError(outs[0]["reason"])
    runs = [o["metrics"] for o in outs]
    price = gpu_hour_usd(sc)
    metrics: dict[str, Any] = {}
    for name, (path, unit) in METRICS.items():
        vals = [v for v in (_value(m, path, unit) for m in runs) if v is not None]
        if vals:
            metrics[name] = {**interval(vals), "unit": unit}
    costs = [per_mtok(m, price) for m in runs]
    if all(c["cost_per_mtok_usd"] is not None for c in costs):
        metrics["cost_per_mtok_usd"] = {
            **interval([c["cost_per_mtok_usd"] for c in costs]),
            "unit": "$",
            "basis": costs[0]["cost_basis"],
        }
    met = [slo.meets(m) for m in runs]
    k = sum(met)
    return {
        "scenario": sc.name,
        "repeats": n,
        "seeds": [sc.seed + i for i in range(n)],
        "varied": "traffic seed and profile p10-p90 draw"
        if spread
        else "traffic seed (the profile records no spread: roofline or median = p10 = p90)",
        "slo": slo.to_json(),
        "metrics": metrics,
        "slo_met": {"runs": k, "of": n, "probability": round(k / n, 4), "ci95": wilson(k, n)},
        "clock": "modeled",
        "provenance": {**Profile.for_scenario(sc, base_dir).provenance(), "engine": sc.engine.name},
    }
