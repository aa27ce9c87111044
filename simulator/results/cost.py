"""Cost per million tokens on an honest basis: output tokens where requests generate, all tokens where they don't.

A prefill study's requests produce one output token each, so its cost per million *output* tokens is a
thousand times what serving its prompts costs; such a study is priced per million input + output tokens.
Every figure carries its basis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from simulator.config.scenario import Scenario

OUTPUT = "output tokens"
ALL = "input+output tokens"
GENERATING = 2.0  # mean output tokens per completed request from which a study counts as generating


def generating(metrics: dict[str, Any]) -> bool:
    """True when the requests generate answers (mean output of at least two tokens), not only prefill."""
    return bool(metrics["completed"]) and metrics["output_tokens"] / metrics["completed"] >= GENERATING


def per_mtok(metrics: dict[str, Any], gpu_hour_usd: float) -> dict[str, Any]:
    """`{"cost_per_mtok_usd", "cost_basis", "cost_per_m_output_tok_usd", "cost_per_m_total_tok_usd"}`: the fleet's
    price per second over the tokens it serves per second, as the Result reads them (its steady-state window)."""
    usd_per_s = metrics["gpus"] * gpu_hour_usd / 3600.0
    out = metrics["output_tokens_per_s"]
    total = out + metrics["input_tokens_per_s"]
    per_out = round(usd_per_s / (out / 1e6), 4) if out else None
    per_all = round(usd_per_s / (total / 1e6), 4) if total else None
    gen = generating(metrics)
    return {
        "cost_per_mtok_usd": per_out if gen else per_all,
        "cost_basis": OUTPUT if gen else ALL,
        "cost_per_m_output_tok_usd": per_out,
        "cost_per_m_total_tok_usd": per_all,
    }


def _per_gpu(override: float | None, pools: Iterable[tuple[int, float]]) -> float:
    """One price per GPU-hour for a fleet: the scenario's override, the one GPU's price, or the GPU-weighted mean of
    pools of different GPUs (so `gpus × price` is what the fleet costs an hour)."""
    if override is not None:
        return override
    pools = list(pools)
    prices = {price for _, price in pools}
    if len(prices) == 1:
        return prices.pop()
    return sum(g * price for g, price in pools) / sum(g for g, _ in pools)


def gpu_hour_usd(sc: Scenario) -> float:
    """The fleet's price per GPU-hour (`_per_gpu`) of a scenario."""
    pools = sc.deployment.pools().values()
    return _per_gpu(sc.cost.gpu_hour_usd, ((p.gpus, sc.hardware_of(p).gpu_hour_usd) for p in pools))


def result_gpu_hour_usd(scenario: dict[str, Any]) -> float:
    """The same for a Result's resolved scenario (its JSON form)."""
    dep, hw = scenario["deployment"], scenario["hardware"]
    pools = [dep["decode"]] + ([dep["prefill"]] if dep.get("mode") == "disaggregated" else [])
    gpus = ((p["instances"] * p["tp"], (p.get("hardware") or hw)["gpu_hour_usd"]) for p in pools)
    return _per_gpu(scenario["cost"]["gpu_hour_usd"], gpus)


def by_pool(sc: Scenario, metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What each pool's GPUs cost over the run, and its share of the fleet's cost (Results of fleets whose pools run
    on different GPUs carry it)."""
    span = metrics["duration_s"]
    out = {}
    for name, pool in sc.deployment.pools().items():
        price = sc.cost.gpu_hour_usd or sc.hardware_of(pool).gpu_hour_usd
        out[name] = {
            "hardware": sc.hardware_of(pool).name,
            "gpus": pool.gpus,
            "gpu_hour_usd": price,
            "usd_per_hour": round(pool.gpus * price, 6),
            "usd": round(pool.gpus * price * span / 3600.0, 6),
        }
    total = sum(p["usd_per_hour"] for p in out.values())
    for p in out.values():
        p["share"] = round(p["usd_per_hour"] / total, 4) if total else None
    return out
