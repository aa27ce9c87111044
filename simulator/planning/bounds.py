"""What rules a candidate out before it is simulated: memory, and analytic throughput bounds.

* **Memory**: a pool whose weights do not leave room for one KV page does not fit (`capacity`).
* **Decode throughput**: a decode instance produces at most `b / τ(b)` tokens per second at batch `b`, and
  `b` is limited by `max_running` and by how many average requests its KV cache holds. Fewer tokens than the
  offered output rate: the pool cannot sustain it. The rate needs a mean batch of at least `b*` (the batch
  whose throughput matches it — throughput is concave in the batch), so decode steps average at least
  `τ(b*)`: more than the TPOT limit and the SLO is out of reach.
* **Prefill throughput**: a prefill instance computes at most a full batch of mean-length prompts per step;
  fewer prompt tokens per second than offered (the tokens a prefix cache cannot serve): it cannot sustain.

Every estimate leans optimistic — contexts of first turns only (shortest), step times of the cheapest shape,
and a 10% allowance on the offered load — so a bound never rules out a candidate the simulation would pass
by more than that allowance; what it cannot decide, the simulation does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from simulator.capacity import pool_capacity
from simulator.config.scenario import Pool, Scenario
from simulator.planning.slo import CANNOT_SUSTAIN, DOES_NOT_FIT, MISSES_TPOT, SLO
from simulator.pricing.costmodel import CostModel
from simulator.pricing.profile import Profile
from simulator.workload.traffic import make_source

MARGIN = 0.9  # a pool must reach this share of the offered load before a bound rules it out
TPOT_MARGIN = 1.1  # the needed batch's step time must exceed the TPOT limit by this factor


@dataclass(frozen=True)
class Offered:
    """The open-loop load a scenario offers, from its own traffic (means over the generated first turns)."""

    requests_per_s: float
    prompt_tokens: float  # mean prompt of a first turn: the shortest context a decode step holds
    new_tokens: float  # prompt tokens a prefill must compute (the shared prefix excluded when it is cached)
    output_tokens: float


def offered(sc: Scenario, base_dir: Path | None) -> Offered | None:
    """The load of open-loop synthetic traffic; None for a closed loop or a trace (no rate to hold)."""
    t = sc.traffic
    if t.rate is None or t.trace is not None:
        return None
    reqs = make_source(t, sc.seed, base_dir).initial()
    if not reqs:
        return None
    window = t.duration_s if t.duration_s is not None else max(reqs[-1].arrival, 1e-9)
    think = t.sessions.think_time_s
    issued = sum(1 for r in reqs for i in range(t.sessions.turns) if r.arrival + i * think < window)
    if t.requests is not None:
        issued = min(issued, t.requests)
    prompt = sum(r.prompt_tokens for r in reqs) / len(reqs)
    shared = t.shared_prefix_tokens if sc.prefix_cache.enabled else 0
    output = sum(r.output_tokens for r in reqs) / len(reqs)
    return Offered(issued / window, prompt, max(1.0, prompt - shared), output)


class Bounds:
    """Prunes candidates; step prices are cached per pool, since candidates share pools."""

    def __init__(self, slo: SLO) -> None:
        self.slo = slo
        self._costs: dict[str, CostModel] = {}
        self._offered: dict[str, Offered | None] = {}

    def reason(self, sc: Scenario, base_dir: Path | None) -> str | None:
        """Why `sc` cannot meet the SLO without simulating it, or None when the bounds cannot tell."""
        pools = sc.deployment.pools()
        for name, pool in pools.items():
            cap = pool_capacity(sc.model, sc.hardware, pool)
            if not cap.fits:
                return f"{DOES_NOT_FIT}: deployment.{name}: {cap.reason.removeprefix('does not fit: ')}"
        key = f"{sc.traffic.model_dump_json()}|{sc.seed}|{sc.prefix_cache.enabled}"
        if key not in self._offered:
            self._offered[key] = offered(sc, base_dir)
        load = self._offered[key]
        if load is None:
            return None
        colocated = "prefill" not in pools
        decode = pools["decode"]
        ctx = load.prompt_tokens + load.output_tokens / 2
        cost = self._cost(sc, decode, base_dir)
        kv_tokens = pool_capacity(sc.model, sc.hardware, decode).kv_tokens
        b_max = max(1, min(decode.max_running, int(kv_tokens // ctx)))

        def step(b: int) -> float:
            return cost.step_s(b, int(b * ctx), b * math.ceil(ctx / decode.page_size), [])

        tps_out = b_max / step(b_max)  # per decode instance
        want_out = load.requests_per_s * load.output_tokens
        prefill_pool = decode if colocated else pools["prefill"]
        tps_in = self._prefill_tps(sc, prefill_pool, load, base_dir)
        want_in = load.requests_per_s * load.new_tokens
        if colocated:
            busy = want_in / tps_in + want_out / tps_out  # instance-seconds of work per second
            if busy * MARGIN > decode.instances:
                return (
                    f"{CANNOT_SUSTAIN}: the offered load keeps {busy:,.1f} instances busy at best (prefill and "
                    f"decode at their fastest), {decode.instances} deployed (analytic bound)"
                )
        else:
            if tps_in * prefill_pool.instances < want_in * MARGIN:
                return (
                    f"{CANNOT_SUSTAIN}: prefill pool computes at most {tps_in * prefill_pool.instances:,.0f} "
                    f"prompt tok/s < {want_in:,.0f} offered (analytic bound)"
                )
            if tps_out * decode.instances < want_out * MARGIN:
                return (
                    f"{CANNOT_SUSTAIN}: decode pool produces at most {tps_out * decode.instances:,.0f} output "
                    f"tok/s at its largest batch ({b_max}) < {want_out:,.0f} offered (analytic bound)"
                )
        floor_ms = step(1) * 1e3
        if floor_ms > self.slo.tpot_p95_ms:
            return f"{MISSES_TPOT}: a decode step at batch 1 takes {floor_ms:,.1f} ms > {self.slo.tpot_p95_ms:,g} ms"
        per_inst = want_out / decode.instances
        lo, hi = 1, b_max  # the smallest batch whose throughput matches the offered rate
        while lo < hi:
            mid = (lo + hi) // 2
            if mid / step(mid) >= per_inst:
                hi = mid
            else:
                lo = mid + 1
        need_ms = step(lo) * 1e3
        if need_ms > self.slo.tpot_p95_ms * TPOT_MARGIN:
            return (
                f"{MISSES_TPOT}: the rate needs decode batches of {lo} per instance, whose steps take "
                f"{need_ms:,.1f} ms > {self.slo.tpot_p95_ms:,g} ms (analytic bound)"
            )
        return None

    def _cost(self, sc: Scenario, pool: Pool, base_dir: Path | None) -> CostModel:
        key = f"{sc.model.name}|{sc.hardware.name}|{sc.profile}|{sc.integrity.enabled}|{pool.model_dump_json()}"
        if key not in self._costs:
            profile = Profile.for_scenario(sc, base_dir)
            self._costs[key] = CostModel(sc.model, sc.hardware, pool, profile, sc.integrity.enabled)
        return self._costs[key]

    def _prefill_tps(self, sc: Scenario, pool: Pool, load: Offered, base_dir: Path | None) -> float:
        """Prompt tokens per second of one instance filling its batch with mean-length prompts."""
        budget = min(pool.chunk_size, pool.max_batch_tokens)
        length = max(1, min(budget, round(load.new_tokens)))
        k = max(1, budget // length)
        return k * length / self._cost(sc, pool, base_dir).step_s(0, 0, 0, [(length, 0)] * k)
