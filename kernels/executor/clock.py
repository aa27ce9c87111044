"""The real clock's step timer: each step's plan executed on the device, timed, and the time handed back to the
engine that made the plan (`simulator.engine`, run one step at a time, with this timer in place of the cost model
behind its `StepTimer` seam), so the decisions are the scheduler's own by construction and only the step times
differ from `phaseplan run`.

A long scenario must fit a device budget, so steps are bucketed — decode batch exactly, the batch's mean
context and each prefill chunk's tokens and context in quarter-octave buckets (2^(k/4)) — and each bucket is
executed `samples` times; later steps of a bucket reuse the median of its samples. Once `budget_s` of device
time is spent, unmeasured buckets are priced by the cost model (counted apart). Once per bucket, after its
samples, one more execution times every op family (synchronizing around each op) next to the cost model's
price of the same step: what `phaseplan compare` reports by family.

What one device cannot run is priced, never measured: the TP all-reduce / all-gather of a step (the cost
model's collective roofline, added to the step's time and totalled apart) and the KV-transfer link (the
engine's link model, as in `run`). With `clock="modeled"` the executor runs as before (same buckets and
executions, the same device integrity check deciding aborts), but time advances by the cost model: the
Result's metrics and timelines equal `run`'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kernels.executor import footprint
from kernels.executor.buckets import BUCKET_RULE, Sampler, bucket_key
from kernels.executor.collectives import Collectives
from kernels.executor.device import Stopwatch
from kernels.executor.integrity import DeviceTracker
from kernels.executor.paged_kv import PagedKV, token_bytes
from kernels.executor.runner import LayerPlan, MTPModule, RankModel
from kernels.executor.step import build
from kernels.executor.tiers import TierBuffers
from kernels.timing import preemptions
from simulator.capacity import draft_pool, draft_weights_bytes_per_gpu, weights_bytes_per_gpu
from simulator.config.scenario import Pool, Scenario
from simulator.engine.timer import CostTimer, Stepping, Timed
from simulator.errors import InputError
from simulator.pricing.ops import COLLECTIVES
from simulator.pricing.usage import Usage
from simulator.serving.scheduler import Plan

GIB = 1024**3
WEIGHT_SHARE = footprint.WEIGHT_SHARE


def _shard(pool: Pool) -> tuple[Any, ...]:
    """What a rank's weights depend on: instances, memory and scheduling limits do not change them."""
    return pool.tp, pool.ep, pool.weights, pool.int4_group_size


@dataclass
class Families:
    """Op-family seconds of the sampled steps, measured and priced."""

    steps: int = 0
    measured: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # each sampled step as the cost model prices it: (pool, decode batch, its context tokens, its pages, chunks), so
    # `compare` can price them again by a profile it measured meanwhile
    sampled: list[tuple[str, int, int, int, list[tuple[int, int]]]] = field(default_factory=list)
    priced: dict[str, float] = field(default_factory=lambda: defaultdict(float))


class ReplayClock:
    """The replay's step timer: each step's plan executed on the device and timed (or priced, `Sampler`)."""

    def __init__(
        self,
        sc: Scenario,
        dev: torch.device,
        clock: str = "measured",
        budget_s: float = 120.0,
        samples: int = 3,
        shared: dict[tuple[Any, ...], RankModel] | None = None,
        between: Callable[[ReplayClock], None] | None = None,
    ) -> None:
        """`shared`: rank models kept across replays of one process (a sweep on one GPU builds a rank once)."""
        if any(p.dp > 1 for p in sc.deployment.pools().values()):
            raise InputError("replay runs one rank of a TP instance: DP attention ranks (dp > 1) are modeled only")
        self.sc, self.dev, self.clock = sc, dev, clock
        self.sampler = Sampler(samples, budget_s)
        self.cost = CostTimer()  # the modeled clock's times, and the price of a step no bucket measured
        self.shared = {} if shared is None else shared
        # run after each executed step, handed this clock (`compare` times op shapes and probe steps there, under
        # the same load)
        self.between = between
        self.sw = Stopwatch(dev)
        self.runners: dict[str, RankModel] = {}
        self.kv: dict[tuple[str, int], PagedKV] = {}
        # Speculative decoding: the draft model's rank model, or the model's MTP module, per pool, and its cache
        # per instance (the same pages)
        self.drafts: dict[str, RankModel] = {}
        self.draft_kv: dict[tuple[str, int], PagedKV] = {}
        self.trackers: dict[tuple[str, int], DeviceTracker] = {}
        self.tiers: dict[tuple[str, int], TierBuffers] = {}  # instances with KV tiers below HBM
        self.tier_s = 0.0  # of the measured seconds, the tiers' page copies (spills and load-backs)
        self.families = Families()
        self.device_s = 0.0  # spent executing (timed steps and family samples)
        self.measured_s = 0.0  # step seconds the clock advanced by that were measured (executed or reused)
        self.check_s = 0.0  # of which, the device integrity check
        self.collective_s = 0.0  # priced collectives added to step times
        self.fallback_s = 0.0  # priced by the cost model once the budget was spent
        self.collectives = Collectives(sc.hardware)

    # -- set-up ----------------------------------------------------------------------------------------------
    def tracker(self, pool: str, index: int) -> DeviceTracker | None:
        """The device integrity check, for each instance's scheduler (built with the instance)."""
        if not self.sc.integrity.enabled:
            return None
        tracker = self.trackers[pool, index] = DeviceTracker(self.dev)
        return tracker

    def attach(self, sim: Any) -> None:
        """One rank model per distinct weight shard (pools and instances with the same formats share it: the
        same random weights) and one KV tensor per instance."""
        sc = self.sc
        shards = {_shard(pool): pool for pool in sc.deployment.pools().values()}
        kept = [r for r in self.shared.values() if r.model == sc.model and _shard(r.pool) in shards]
        plan = kept[0].plan if kept else self._layer_plan(shards.values())
        for name, pool in sc.deployment.pools().items():
            key = (sc.model.name, _shard(pool), plan)
            if key not in self.shared:
                self.shared[key] = RankModel(sc.model, pool, plan, self.dev, seed=sc.seed)
            self.runners[name] = self.shared[key]
            spec = pool.speculative
            if spec is not None and spec.draft_model is not None:
                dkey = (spec.draft_model.name, _shard(draft_pool(pool)), "draft")
                if dkey not in self.shared:
                    self.shared[dkey] = RankModel(
                        spec.draft_model,
                        draft_pool(pool),
                        LayerPlan.whole(spec.draft_model),
                        self.dev,
                        seed=sc.seed + 1,
                    )
                self.drafts[name] = self.shared[dkey]
            elif spec is not None:
                dkey = (sc.model.name, _shard(pool), "mtp")
                if dkey not in self.shared:
                    self.shared[dkey] = MTPModule(sc.model, pool, self.dev, seed=sc.seed + 1)
                self.drafts[name] = self.shared[dkey]
        ranks = [*self.runners.values(), *self.drafts.values()]
        left = self._free_bytes(sum({id(r): r.weight_bytes for r in ranks}.values()), plan)
        insts = [(name, inst) for name, group in sim.pools.items() for inst in group]
        need = {(name, i.index): i.num_pages * i.page_size * self._token_bytes(name, i.pool, plan) for name, i in insts}
        ratio = min(1.0, 0.9 * left / sum(need.values())) if need and left > 0 else 0.0
        for name, inst in insts:
            key2 = (name, inst.index)
            logical = inst.num_pages
            physical = max(1, min(logical, math.floor(logical * ratio)))
            self.kv[key2] = PagedKV(sc.model, inst.pool, plan.layers, logical, physical, self.dev)
            cache = inst.ranks[0].cache
            if cache.tiered:
                self.tiers[key2] = TierBuffers(self.kv[key2], cache)
            if name in self.drafts:
                d = self.drafts[name]
                self.draft_kv[key2] = PagedKV(d.model, d.pool, d.plan.layers, logical, physical, self.dev)

    def _token_bytes(self, name: str, pool: Pool, plan: LayerPlan) -> int:
        """A token's bytes in an instance's caches: the target's layers run, and a draft model's whole."""
        d = self.drafts.get(name)
        return token_bytes(self.sc.model, pool, plan.layers) + (
            token_bytes(d.model, d.pool, d.plan.layers) if d is not None else 0
        )

    def _layer_plan(self, pools: Any) -> LayerPlan:
        """Every layer if the ranks' weights fit in WEIGHT_SHARE of the device, else the first of each kind
        in proportion (a TP8 rank of Kimi K2.6, ~70 GiB with INT4 experts, fits an H200 whole). On the CPU the
        rule counts what the torch reference really holds (`footprint`); on a GPU, a rank that cannot hold even
        one layer of each kind is refused before any weight is drawn."""
        m = self.sc.model
        if self.dev.type == "cpu":
            return LayerPlan(*footprint.layer_plan(self.sc, WEIGHT_SHARE * footprint.CPU_BUDGET_GIB * GIB, cpu=True))
        want = sum(weights_bytes_per_gpu(m, pool) + draft_weights_bytes_per_gpu(pool) for pool in pools)
        free = torch.cuda.mem_get_info(self.dev)[0]
        room = WEIGHT_SHARE * free
        if want <= room:
            return LayerPlan.whole(m)
        share = room / want
        dense, moe = m.layers - m.moe_layers, m.moe_layers
        plan = LayerPlan(
            min(dense, max(1, math.floor(dense * share))) if dense else 0, max(1, math.floor(moe * share)) if moe else 0
        )
        need = sum(r.held(plan.dense, plan.moe, cpu=False) for r in footprint.ranks(self.sc) if r.model == m)
        if need > free:
            raise InputError(
                f"replay --device {self.dev.type}: one layer of each kind of {m.name} per rank holds about "
                f"{need / GIB:,.1f} GiB, over the {free / GIB:,.1f} GiB free on the device"
            )
        return plan

    def _free_bytes(self, weights: int, plan: LayerPlan) -> float:
        """Room for the KV caches once the weights are in (on the CPU, as the reference holds them)."""
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()
            return 0.9 * torch.cuda.mem_get_info(self.dev)[0]
        held = sum(
            r.held(plan.dense, plan.moe)
            if r.model == self.sc.model
            else r.held(r.model.layers - r.model.moe_layers, r.model.moe_layers)
            for r in footprint.ranks(self.sc)
        )
        return footprint.CPU_BUDGET_GIB * GIB - max(held, weights)

    # -- the step timer (called by the engine with the plan whose first step's pages are booked) ------------
    def time_run(self, inst: Stepping, plans: list[Plan], n: int) -> Timed:
        """One step (the engine runs in step mode): executed, or its bucket's time reused, or priced; with
        `clock="modeled"` executed all the same but timed as `run` times it."""
        assert n == 1 and len(plans) == 1, "the replay times one step of one rank at a time"
        plan = plans[0]
        moved = self._move_pages(inst, plan)
        step, check = self._measure(inst, plan)
        if self.clock == "modeled":
            return self.cost.time_run(inst, plans, 1)
        if step is None:
            fallback = self._priced(inst, plan)
            self.fallback_s += fallback
            return [inst.clock + fallback + moved], None
        collectives = self.collectives.seconds(
            inst.pool_name, self.sc.model, inst.pool, plan, self.drafts.get(inst.pool_name)
        )
        self.measured_s += step + check + moved
        self.check_s += check
        self.collective_s += collectives
        return [inst.clock + step + check + collectives + moved], None

    def _move_pages(self, inst: Stepping, plan: Plan) -> float:
        """Copy the pages the instance's cache spilled and loaded back since its last step, before this step reads
        them, timed; returns the share of their seconds this step's own load-backs take (by pages), which join the
        step (not overlapped with its compute here). Spills run beside the steps in an engine (asynchronous copies)
        and a decode instance's load-backs ride with the KV hand-off, whose link is priced as in `run`: executed,
        timed and reported, not added. Each sequence loading in this step is told its share."""
        buffers = self.tiers.get((inst.pool_name, inst.index))
        if buffers is None:
            return 0.0
        counts = [0, 0]

        def run() -> None:
            counts[:] = buffers.drain()

        seconds = self.sw.timed(run)
        self.device_s += seconds
        self.tier_s += seconds
        moved, _ = counts
        if not moved:
            return 0.0
        mine = 0.0
        for seq, _ in plan.prefill:
            if seq.loads is not None:
                seq.load_s = seconds * seq.loads.pages / moved
                mine += seq.load_s
        return mine

    def _measure(self, inst: Stepping, plan: Plan) -> tuple[float | None, float]:
        """The step's measured seconds (executed now, or its bucket's median; None when it must be priced), and
        the seconds the device integrity check took before it."""
        key = (inst.pool_name, inst.index)
        kv, runner = self.kv[key], self.runners[inst.pool_name]
        tracker = self.trackers.get(key)
        check = tracker.take_seconds() if tracker is not None else 0.0
        decision, bucket = self.sampler.decide(bucket_key(inst.pool_name, plan), self.device_s)
        if decision == "price":
            return None, check
        if decision == "reuse":
            return bucket.time(), check
        away = preemptions()
        step = self._execute(inst, runner, plan, kv)
        bucket.samples.append(step)
        bucket.preempted.append(preemptions() - away)
        if self.sampler.wants_families(bucket, self.device_s):
            self._sample_families(inst, runner, plan, kv, check)
        if self.between is not None:
            self.between(self)
        return step, check

    # -- internals -------------------------------------------------------------------------------------------
    def _execute(self, inst: Any, runner: RankModel, plan: Plan, kv: PagedKV) -> float:
        """Seconds of the plan's step: the forward pass, or under speculation the verify pass over k+1 positions
        per sequence and the draft model's k decode passes."""
        spec = inst.pool.speculative
        if spec is None or not plan.decode:
            return self._forward(runner, build(plan, kv), kv)
        t = self._forward(runner, build(plan, kv, queries=spec.draft_tokens + 1), kv)
        key = (inst.pool_name, inst.index)
        dkv = self.draft_kv[key]
        for j in range(spec.draft_tokens):
            t += self._forward(self.drafts[inst.pool_name], build(plan, dkv, offset=j), dkv)
        return t

    def _forward(self, runner: RankModel, inp: Any, kv: PagedKV) -> float:
        extra = [0.0]

        def run() -> None:
            extra[0] = runner.forward(inp.tokens, inp.batch, kv, inp.last_rows, self.sw)[1]

        t = self.sw.timed(run)
        self.device_s += t
        return t + extra[0]

    def _sample_families(self, inst: Any, runner: RankModel, plan: Plan, kv: PagedKV, check: float) -> None:
        self.sw.seconds.clear()
        self.sw.on = True
        try:
            total = self._execute(inst, runner, plan, kv)
        finally:
            self.sw.on = False
        f = self.families
        f.steps += 1
        for fam, s in self.sw.seconds.items():
            f.measured[fam] += s
        f.measured["unattributed"] += max(0.0, total - sum(self.sw.seconds.values()))
        if check:
            f.measured["integrity_check"] += check
        d = plan.decode
        step = (inst.pool_name, len(d), sum(s.computed + 1 for s in d), sum(s.table.n for s in d))
        chunks = [(c, s.computed) for s, c in plan.prefill]
        f.sampled.append((*step, chunks))
        for fam, s in inst.cost.breakdown(*step[1:], chunks).items():
            if fam not in COLLECTIVES:
                f.priced[fam] += s

    def _priced(self, inst: Any, plan: Plan) -> float:
        """The cost model's seconds for a step no bucket measured (books into a throw-away usage)."""
        d = plan.decode
        chunks = [(c, s.computed) for s, c in plan.prefill]
        return inst.cost.step_s(
            len(d), sum(s.computed + 1 for s in d), sum(s.table.n for s in d), chunks, usage=Usage()
        )

    # -- what the Result says --------------------------------------------------------------------------------
    def provenance(self, device_name: str) -> dict[str, Any]:
        sc = self.sc
        runs = (
            "torch reference ops (kernels.reference), 1 thread"
            if self.dev.type == "cpu"
            else (
                "Triton kernels of kernels/ (decode attention, KV write, W4A16, integrity check), cuBLAS and "
                "torch._scaled_mm for BF16/FP8 GEMMs, SDPA for prefill attention"
            )
        )
        counts = self.sampler.counts
        total = sum(counts.values())
        return {
            "clock": self.clock,
            "device": device_name,
            "executed_with": runs,
            "time_from": (
                "measured step times (executed or reused), priced collectives added"
                if self.clock == "measured"
                else "the cost model (steps executed for their side effects)"
            ),
            "priced_not_measured": {
                "collectives": "TP all-reduce / all-gather: the cost model's collective roofline, per step",
                "kv_transfer": (
                    f"the link model: {sc.deployment.transfer.latency_ms} ms + bytes / "
                    f"{sc.deployment.transfer.bandwidth_gbs} GB/s per prompt, as in `run`"
                ),
            },
            "seconds": {
                "measured": round(self.measured_s, 6),
                "of_which_integrity_check": round(self.check_s, 6),
                "collectives_priced": round(self.collective_s, 6),
                "cost_model_fallback": round(self.fallback_s, 6),
                **({"of_which_tier_page_copies": round(self.tier_s, 6)} if self.tiers else {}),
                "device_time_spent": round(self.device_s, 6),
            },
            "steps": {"total": total, **counts},
            "buckets": {
                "rule": BUCKET_RULE,
                "count": len(self.sampler.buckets),
                "samples_each": self.sampler.samples,
                "budget_s": self.sampler.budget_s,
            },
            "ranks": {
                name: {
                    "tp": r.pool.tp,
                    "layers_run": {"dense": r.plan.dense, "moe": r.plan.moe},
                    "layers": {"dense": sc.model.layers - sc.model.moe_layers, "moe": sc.model.moe_layers},
                    "time_scaled": r.scaled,
                    "weights_gib": round(r.weight_bytes / GIB, 4),
                    "instances_share_weights": True,
                }
                for name, r in self.runners.items()
            },
            "kv_pages": {
                f"{name}/{i}": {
                    "allocator": kv.logical,
                    "physical": kv.physical,
                    "shared_physical_pages": kv.physical < kv.logical,
                    "gib": round(kv.nbytes / GIB, 4),
                }
                for (name, i), kv in self.kv.items()
            },
            "integrity_check": "on the device against a device copy of the page tags" if self.trackers else "off",
            **(
                {"kv_tiers": {f"{name}/{i}": b.provenance() for (name, i), b in self.tiers.items()}}
                if self.tiers
                else {}
            ),
            **(
                {
                    "speculative": {
                        name: {
                            "draft": "mtp module" if isinstance(d, MTPModule) else d.model.name,
                            "weights_gib": round(d.weight_bytes / GIB, 4),
                            "verify": "k+1 decode rows per sequence, each over the cache up to itself",
                            "tokens_accepted": "drawn by the scheduler, as in `run`",
                        }
                        for name, d in self.drafts.items()
                    }
                }
                if self.drafts
                else {}
            ),
        }

    def close(self) -> None:
        """Free the KV tensors (the rank models stay in `shared` for the next replay)."""
        self.kv.clear()
        self.draft_kv.clear()
