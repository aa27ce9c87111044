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
from collections.abc import Callable
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


MAX_INSTANCES = 4096  # the schema's most instances in one pool: the bound's search for a passing count stops there


@dataclass(frozen=True)
class PoolBound:
    """One pool's throughput bound: the most it serves per second against what the load offers, in `unit`."""

    pool: str  # prefill | decode | colocated (one pool serving both phases)
    instances: int
    served: float
    offered: float
    unit: str
    per_instance: float  # what one instance serves (colocated: 1, an instance-second per second)

    def instances_needed(self) -> int:
        """The fewest instances whose bound reaches the offered load."""
        return max(1, math.ceil(self.offered / self.per_instance - 1e-9))


class Bounds:
    """Prunes candidates pool by pool (a pool's verdict holds for every candidate that has it); step prices are
    cached per pool layout, since candidates share layouts and an instance count does not change a step."""

    def __init__(self, slo: SLO) -> None:
        self.slo = slo
        self._costs: dict[str, CostModel] = {}
        self._steps: dict[tuple[str, int], float] = {}
        self._offered: dict[str, Offered | None] = {}

    def reason(self, sc: Scenario, base_dir: Path | None) -> str | None:
        """Why `sc` cannot meet the SLO without simulating it, or None when the bounds cannot tell."""
        colocated = sc.deployment.mode == "colocated"
        for name, pool in sc.deployment.pools().items():
            why = self.pool_reason(sc, base_dir, name, pool, colocated)
            if why is not None:
                return why
        return None

    def pool_reason(self, sc: Scenario, base_dir: Path | None, name: str, pool: Pool, colocated: bool) -> str | None:
        """Why pool `name` (`pool`, in `sc`'s model, hardware and traffic) rules out every candidate that has it:
        it does not fit, or cannot carry its share of the offered load; None when the bounds cannot tell."""
        cap = pool_capacity(sc.model, sc.hardware, pool)
        if not cap.fits:
            return f"{DOES_NOT_FIT}: deployment.{name}: {cap.reason.removeprefix('does not fit: ')}"
        load = self._load(sc, base_dir)
        if load is None:
            return None
        want_in = load.requests_per_s * load.new_tokens
        if name == "prefill":
            tps_in = self._prefill_tps(sc, pool, load, base_dir)
            if tps_in * pool.instances < want_in * MARGIN:
                return (
                    f"{CANNOT_SUSTAIN}: prefill pool computes at most {tps_in * pool.instances:,.0f} "
                    f"prompt tok/s < {want_in:,.0f} offered (analytic bound)"
                )
            return None
        step, b_max = self._decode_steps(sc, pool, load, base_dir)
        tps_out = b_max / step(b_max)  # per decode instance
        want_out = load.requests_per_s * load.output_tokens
        if colocated:
            busy = want_in / self._prefill_tps(sc, pool, load, base_dir) + want_out / tps_out
            if busy * MARGIN > pool.instances:  # instance-seconds of work per second
                return (
                    f"{CANNOT_SUSTAIN}: the offered load keeps {busy:,.1f} instances busy at best (prefill and "
                    f"decode at their fastest), {pool.instances} deployed (analytic bound)"
                )
        elif tps_out * pool.instances < want_out * MARGIN:
            return (
                f"{CANNOT_SUSTAIN}: decode pool produces at most {tps_out * pool.instances:,.0f} output "
                f"tok/s at its largest batch ({b_max}) < {want_out:,.0f} offered (analytic bound)"
            )
        floor_ms = step(1) * 1e3
        if floor_ms > self.slo.tpot_p95_ms:
            return f"{MISSES_TPOT}: a decode step at batch 1 takes {floor_ms:,.1f} ms > {self.slo.tpot_p95_ms:,g} ms"
        lo = _needed_batch(step, b_max, want_out / pool.instances)
        need_ms = step(lo) * 1e3
        if need_ms > self.slo.tpot_p95_ms * TPOT_MARGIN:
            return (
                f"{MISSES_TPOT}: the rate needs decode batches of {lo} per instance, whose steps take "
                f"{need_ms:,.1f} ms > {self.slo.tpot_p95_ms:,g} ms (analytic bound)"
            )
        return None

    def throughput(self, sc: Scenario, load: Offered, base_dir: Path | None) -> list[PoolBound]:
        """What each pool can do at most against what the load asks of it (disaggregated: prompt tokens of the
        prefill pool, output tokens of the decode pool; colocated: instances kept busy by both phases)."""
        pools = sc.deployment.pools()
        decode = pools["decode"]
        step, b_max = self._decode_steps(sc, decode, load, base_dir)
        tps_out = b_max / step(b_max)  # per decode instance
        want_out = load.requests_per_s * load.output_tokens
        prefill = pools.get("prefill", decode)
        tps_in = self._prefill_tps(sc, prefill, load, base_dir)
        want_in = load.requests_per_s * load.new_tokens
        if "prefill" not in pools:
            busy = want_in / tps_in + want_out / tps_out  # instance-seconds of work per second
            return [PoolBound("colocated", decode.instances, decode.instances, busy, "instances busy", 1.0)]
        return [
            PoolBound("prefill", prefill.instances, tps_in * prefill.instances, want_in, "prompt tok/s", tps_in),
            PoolBound("decode", decode.instances, tps_out * decode.instances, want_out, "output tok/s", tps_out),
        ]

    def decode_step_s(self, sc: Scenario, load: Offered, base_dir: Path | None, batch: int | None = None) -> float:
        """The decode pool's step time at the batch the offered load keeps on each instance (at least 1), or at
        `batch` (a closed loop's clients): the time per output token a request sees once the batch has filled."""
        pool = sc.deployment.decode
        step, b_max = self._decode_steps(sc, pool, load, base_dir)
        if batch is not None:
            return step(max(1, min(batch, b_max)))
        return step(_needed_batch(step, b_max, load.requests_per_s * load.output_tokens / pool.instances))

    def prefill_s(self, sc: Scenario, load: Offered, base_dir: Path | None) -> float:
        """Seconds one prefill instance takes over a mean prompt at its best rate (a TTFT with no queue)."""
        pool = sc.deployment.pools().get("prefill", sc.deployment.decode)
        return load.new_tokens / self._prefill_tps(sc, pool, load, base_dir)

    def _decode_steps(
        self, sc: Scenario, pool: Pool, load: Offered, base_dir: Path | None
    ) -> tuple[Callable[[int], float], int]:
        """A decode instance's step time by batch (mean-context requests, cached per pool layout) and the largest
        batch its KV holds."""
        ctx = load.prompt_tokens + load.output_tokens / 2
        key = f"{self._key(sc, pool)}|{ctx}"
        kv_tokens = pool_capacity(sc.model, sc.hardware, pool).kv_tokens
        b_max = max(1, min(pool.max_running, int(kv_tokens // ctx)))

        def step(b: int) -> float:
            if (key, b) not in self._steps:
                cost = self._cost(sc, pool, base_dir)
                self._steps[key, b] = cost.step_s(b, int(b * ctx), b * math.ceil(ctx / pool.page_size), [])
            return self._steps[key, b]

        return step, b_max

    def prefill_capacity(self, sc: Scenario, base_dir: Path | None, pool: Pool) -> float:
        """Prompt tokens per second the pool computes at best (every instance full of mean-length prompts)."""
        load = self._load(sc, base_dir)
        return 0.0 if load is None else self._prefill_tps(sc, pool, load, base_dir) * pool.instances

    def fewest_instances(
        self, sc: Scenario, base_dir: Path | None, name: str, pool: Pool, colocated: bool
    ) -> int | None:
        """The fewest instances of this pool layout the bounds let through (each bound only eases with more
        instances), or None when no count does: it does not fit, or a step at batch 1 already misses TPOT."""

        def ok(n: int) -> bool:
            return self.pool_reason(sc, base_dir, name, pool.model_copy(update={"instances": n}), colocated) is None

        if not ok(MAX_INSTANCES):
            return None
        lo, hi = 1, MAX_INSTANCES
        while lo < hi:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _load(self, sc: Scenario, base_dir: Path | None) -> Offered | None:
        key = f"{sc.traffic.model_dump_json()}|{sc.seed}|{sc.prefix_cache.enabled}"
        if key not in self._offered:
            self._offered[key] = offered(sc, base_dir)
        return self._offered[key]

    @staticmethod
    def _key(sc: Scenario, pool: Pool) -> str:
        """What a step's price depends on: the model, hardware, profile and the pool's layout (not its count)."""
        layout = pool.model_copy(update={"instances": 1}).model_dump_json()
        return (
            f"{sc.model.model_dump_json()}|{sc.hardware.model_dump_json()}|{sc.profile}|{sc.integrity.enabled}|{layout}"
        )

    def _cost(self, sc: Scenario, pool: Pool, base_dir: Path | None) -> CostModel:
        key = self._key(sc, pool)
        if key not in self._costs:
            profile = Profile.for_scenario(sc, base_dir)
            self._costs[key] = CostModel(sc.model, sc.hardware, pool, profile, sc.integrity.enabled)
        return self._costs[key]

    def _prefill_tps(self, sc: Scenario, pool: Pool, load: Offered, base_dir: Path | None) -> float:
        """Prompt tokens per second of one instance filling its batch with mean-length prompts. Under DP attention
        every rank fills its own share of `max_batch_tokens` at once (the scheduler divides it over the ranks)."""
        key = (f"{self._key(sc, pool)}|prefill|{load.new_tokens}", 0)  # beside the decode steps, at batch 0
        if key not in self._steps:
            budget = min(pool.chunk_size, pool.max_batch_tokens // pool.dp)
            length = max(1, min(budget, round(load.new_tokens)))
            k = max(1, budget // length) * pool.dp
            self._steps[key] = k * length / self._cost(sc, pool, base_dir).step_s(0, 0, 0, [(length, 0)] * k)
        return self._steps[key]


def _needed_batch(step: Callable[[int], float], b_max: int, per_instance: float) -> int:
    """The smallest batch (up to `b_max`) whose throughput `b / step(b)` matches `per_instance` tokens per second:
    throughput grows with the batch, so a bisection finds it."""
    lo, hi = 1, b_max
    while lo < hi:
        mid = (lo + hi) // 2
        if mid / step(mid) >= per_instance:
            hi = mid
        else:
            lo = mid + 1
    return lo
