"""`phaseplan bench-sim`: how fast the modeled clock runs, with its own baseline in the same process.

The baseline is the same simulator forced one step at a time (what per-token Python work costs) on a
short slice of the same traffic; the ratio is the speed bought by advancing runs of identical steps —
and the slice's results must be identical both ways, or the speed is not worth having.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate

BENCH = {
    "name": "bench-sim",
    "model": "kimi-k2.6",
    "hardware": "h200",
    "profile": "roofline",
    "deployment": {
        "mode": "disaggregated",
        "prefill": {
            "instances": 8,
            "tp": 8,
            "weights": "int4",
            "kv_cache": "fp8_e4m3",
            "mem_fraction": 0.81,
            "chunk_size": 16384,
            "max_batch_tokens": 16384,
        },
        "decode": {
            "instances": 16,
            "tp": 8,
            "weights": "int4",
            "kv_cache": "fp8_e4m3",
            "mem_fraction": 0.81,
            "max_running": 256,
        },
    },
    "routing": {"policy": "least_kv"},
    "traffic": {
        "rate": 20.0,
        "arrival": "poisson",
        "prompt_tokens": {"dist": "lognormal", "median": 2000, "sigma": 0.6, "max": 32768},
        "output_tokens": {"dist": "lognormal", "median": 1000, "sigma": 0.3, "max": 4096},
    },
    "integrity": {"enabled": True},
    "seed": 1,
}


def scenario(hours: float, rate: float, sets: tuple[str, ...] = ()) -> Scenario:
    overrides = {"traffic.duration_s": hours * 3600.0, "traffic.rate": rate, **dict(map(loader.parse_set, sets))}
    data = loader.apply_overrides(BENCH, overrides)
    return loader.validate(data, "bench-sim", overridden=frozenset(overrides))


def bench(hours: float, rate: float, baseline_s: float = 2.0, sets: tuple[str, ...] = ()) -> Iterator[str]:
    """The baseline runs first, on a fresh heap (after the hour, its garbage collections would walk the hour's
    records too), and after a second of traffic that loads the compiled functions, which each process does once
    (~0.4 s)."""
    simulate(scenario(1 / 3600.0, rate, sets))
    short = scenario(baseline_s / 3600.0, rate, sets)
    t0 = time.perf_counter()
    seg, _ = simulate(short)
    t_seg = time.perf_counter() - t0
    t0 = time.perf_counter()
    step, _ = simulate(short, step_mode=True)
    t_step = time.perf_counter() - t0
    same = json.dumps(seg) == json.dumps(step)
    sc = scenario(hours, rate, sets)
    t0 = time.perf_counter()
    result, ran = simulate(sc)
    wall = time.perf_counter() - t0
    m = result["metrics"]
    yield (
        f"simulated {hours:g} h at {rate:g} req/s on 8 prefill + 16 decode instances: {m['requests']:,} requests, "
        f"{m['output_tokens']:,} output tokens, {sum(i.steps for p in ran.pools.values() for i in p.instances):,} steps"
    )
    yield (
        f"baseline ({baseline_s:g} s of traffic): one step at a time {t_step:.2f} s vs segments {t_seg:.2f} s "
        f"= {t_step / t_seg:.1f}x faster, identical results: {'yes' if same else 'NO'}"
    )
    yield f"wall {wall:.1f} s: {m['requests'] / wall:,.0f} requests simulated per wall-second"
