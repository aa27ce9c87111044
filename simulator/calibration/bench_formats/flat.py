"""The flat `mean_ttft_ms` / `p99_tpot_ms` key family SGLang's bench_serving inherited from vLLM's
benchmark_serving.py: `{mean|median|std|pNN}_{metric}_ms`, each in milliseconds, 0 when nothing was measured
(both tools write `np.mean(values or 0)`)."""

from __future__ import annotations

from typing import Any

from simulator.calibration.bench_fields import Doc
from simulator.calibration.bench_run import Latency

STATS = ("mean", "median", "p90", "p95", "p99")


def latency(doc: Doc, metric: str, kind: str) -> Latency:
    """The `{stat}_{metric}_ms` keys the file has; `p50_` stands in for a missing `median_`."""
    v = {s: doc.num(f"{s}_{metric}_ms", kind, zero_absent=True) for s in STATS}
    if v["median"] is None:
        v["median"] = doc.num(f"p50_{metric}_ms", kind, zero_absent=True)
    return Latency(**v)


def keys(metric: str, lat: Latency, stats: tuple[str, ...] = STATS) -> dict[str, Any]:
    """The keys a tool writes for `lat`, in its order (mean, median, then percentiles), None left out."""
    return {f"{s}_{metric}_ms": getattr(lat, s) for s in stats if getattr(lat, s) is not None}


def only(lat: Latency, stats: tuple[str, ...]) -> Latency:
    """`lat` with the statistics a format does not write dropped."""
    return Latency(**{s: getattr(lat, s) if s in stats else None for s in STATS})
