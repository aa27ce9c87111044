"""The modeled clock: SimPy wires arrivals, instances and KV-transfer links around the shared schedulers.

An instance advances a whole run of identical decode steps at once: it prices them with the cost model
(vectorised over the growing context), and if an outside event (an arrival, a finished transfer) lands
inside the run it stops at the end of the step in flight — exactly where a step-by-step clock would next
decide. `step_mode=True` forces one step at a time; a test requires both to give identical timelines.

A `StepTimer` (the replay executor's real clock, on the kernels side) may take over a step's time in step
mode: the engine hands it each plan as the step starts (its pages booked) and advances by the seconds it
returns, or by the cost model where it returns None. The decisions stay this engine's own.
"""

from __future__ import annotations

import gc
import math
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import simpy

from simulator.capacity import PoolCapacity, kv_bytes_per_token, pool_capacity
from simulator.config.scenario import Pool, Scenario
from simulator.errors import InputError
from simulator.modeled.dp import DPInstance
from simulator.modeled.stats import InstanceStats, wait_for_run
from simulator.pricing.costmodel import CostModel, DecodeSteps
from simulator.pricing.profile import Profile
from simulator.serving.instance import Instance as ServingInstance
from simulator.serving.instance import build_ranks, build_scheduler, fault_injector
from simulator.serving.routing import Router
from simulator.serving.scheduler import Plan, Scheduler, StepEvents
from simulator.serving.sequence import Seq
from simulator.workload.request import Request
from simulator.workload.traffic import TrafficSource, make_source


@dataclass(slots=True)
class Record:
    """One request's outcome; times in seconds since the start of the run."""

    id: int
    arrival: float
    prompt: int
    output: int
    first_token: float = math.nan
    finish: float = math.nan
    status: str = "pending"  # completed | rejected | aborted | pending
    cached_tokens: int = 0
    reason: str = ""  # why a rejected request was rejected (REJECT_REASONS)
    prefill_instance: int = -1  # the instance index it was routed to in each pool (-1: none; colocated: decode)
    decode_instance: int = -1


class StepTimer(Protocol):
    """What times a step instead of the cost model (step mode only)."""

    def attach(self, sim: Simulation) -> None:
        """Called once the instances exist, before the run."""

    def step_s(self, inst: Instance, plan: Plan) -> float | None:
        """Seconds of the plan's first step, starting now (None: the cost model's)."""


@contextmanager
def _rare_collections() -> Iterator[None]:
    """Run the cyclic garbage collector rarely while simulating. A run allocates millions of short-lived
    objects (plans, events, page lists) that reference counting frees; at the default thresholds the collector
    would run every 700 net allocations and now and then walk every live record, sequence and event, to find
    the few cycles SimPy's processes leave."""
    old = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)


class Instance(ServingInstance):
    """An instance on the modeled clock: the shared serving state, a SimPy process and the times of its run."""

    def __init__(
        self, sim: Simulation, pool_name: str, index: int, pool: Pool, sched: Scheduler, cost: CostModel
    ) -> None:
        super().__init__(pool_name, index, pool, sched)
        self.sim, self.cost = sim, cost
        self.env = sim.env
        self.wake: simpy.Event | None = None
        # Exact times: an instance's clock is a running sum of step times, and every wake-up carries the
        # exact time of its cause. env.now only orders events, so the segment and step-by-step clocks
        # compute bit-identical timelines.
        self.clock = 0.0
        self.wake_at = 0.0
        self.links = [0.0]  # when the inbound KV-transfer link is next idle
        # The run in flight's start and step ends. A step takes its pages when it starts; the run books them as
        # their start times pass (`settle`), so the cache sees the same operations in the same order as under a
        # clock that runs one step at a time.
        self._run_start = 0.0
        self._run_ends: list[float] = []  # plain lists: routing bisects every instance's run on each hand-off
        self.stats = InstanceStats()
        self.env.process(self._loop())

    def _started(self, t: float) -> int:
        """Steps of the run in flight that have started by time t (the one in flight at t included)."""
        ends = self._run_ends
        return min(len(ends), bisect_left(ends, t) + 1)

    def used_pages(self, t: float) -> int:
        """Pages held at time t, the run's steps started by then included (read-only: must not cut or book)."""
        return self.kv_load(t) - self._pending_pages

    def kv_load(self, t: float) -> int:
        """What least-KV routing compares: pages held at time t (`used_pages`) plus pages of transfers waiting to
        start. Routing reads every instance for every request, so this is one flat method."""
        cache = self.cache
        load = cache.num_pages - cache.available + self._pending_pages
        g = self._run_growth
        if g is None:  # no decode run in flight
            return load
        ends, b = self._run_ends, self._run_plan.booked  # type: ignore[union-attr]
        k = bisect_left(ends, t) + 1  # = self._started(t)
        if k > len(ends):
            k = len(ends)
        if k <= b:
            return load
        return load + g[k - 1] - (g[b - 1] if b else 0)  # + self.unbooked(k)

    def settle(self, t: float) -> None:
        """Book the pages of the run's steps that started by time t, before anything else touches the cache."""
        if self._run_growth is not None:
            k = self._started(t)
            if k > self._run_plan.booked:  # type: ignore[union-attr]
                self.book_to(k)

    def book_to(self, k: int) -> tuple[list[int], list[int]]:
        """`ServingInstance.book_to`, with the occupancy record of the pages taken at each step's start."""
        steps, counts = super().book_to(k)
        if steps:
            ends, start = self._run_ends, self._run_start  # a step starts when the one before it ends
            self.stats.page_t += [ends[step - 1] if step else start for step in steps]
            self.stats.page_d += counts
        return steps, counts

    def run_needs_more_than_free(self) -> bool:
        """True when the run in flight can no longer book all its remaining steps' pages."""
        return self._run_plan is not None and self.unbooked(len(self._run_ends)) > self.cache.available

    def notify(self, at: float) -> None:
        self.wake_at = max(self.wake_at, at)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def receive_at(self, pseq: Seq, src: ServingInstance, t: float) -> Seq:
        """`receive`, handed off at time t (a DP-attention instance places the request on a rank then)."""
        return self.receive(pseq, src)

    def release_at(self, pseq: Seq, t: float) -> None:
        """A prefill instance frees a transferred sequence's pages at time t."""
        avail = self.cache.available
        self.release(pseq)
        self.stats.pages_changed(t, avail - self.cache.available)

    def link_for(self, dseq: Seq) -> int:
        """The inbound link a transfer takes (one without DP attention)."""
        return 0

    # -- the step loop -------------------------------------------------------------------------------
    def _price(self, plan: Plan, n: int) -> tuple[list[float], DecodeSteps | None]:
        """End times of the plan's next n steps (plain floats: the loop and routing read them one at a time),
        and for a decode run the priced steps to charge once it is known how many ran. A step with prefill
        chunks is always a run of one, so it is charged at once."""
        timer = self.sim.timer
        if timer is not None:
            t = timer.step_s(self, plan)
            if t is not None:
                return [self.clock + t], None
        if plan.prefill:
            d = plan.decode
            chunks = [(c, s._computed) for s, c in plan.prefill]  # a prefilling sequence is not in the batch
            t = self.cost.step_s(len(d), sum(s.computed + 1 for s in d), sum(s.table.n for s in d), chunks)
            return [self.clock + t], None
        growth = self.sched.growth(plan, n)
        if plan.ctx is not None:  # verify steps: each reads the context its drawn tokens left
            priced = self.cost.decode_steps(len(plan.decode), plan.ctx[:n], plan.pages0 + growth)
            return np.add.accumulate(np.concatenate(([self.clock], priced.us * 1e-6)))[1:].tolist(), priced
        priced, ends = self.cost.decode_run(len(plan.decode), plan.ctx0, plan.pages0, growth, self.clock)
        return ends, priced

    def _sleep(self):
        """Wait until notified; the clock moves to the time of the cause."""
        self.wake = self.env.event()
        yield self.wake
        self.clock = max(self.clock, self.wake_at)

    def _loop(self):
        sched, st, cache, sim = self.sched, self.stats, self.cache, self.sim
        while True:
            if not (sched.waiting or sched.running or self.pending):  # nothing to decide
                yield from self._sleep()
                continue
            avail = cache.available
            plan = sched.schedule()
            if avail != cache.available:  # preemptions' and aborts' releases
                st.pages_changed(self.clock, avail - cache.available)
            decode = plan.decode
            if not (decode or plan.prefill):
                sim.after_schedule(self)
                yield from self._sleep()
                continue
            self._run_ends, self._run_start = [], self.clock
            self.begin(plan)
            if sched.aborted or self.pending:
                sim.after_schedule(self)
            n = 1 if sim.step_mode else sched.steps_until_change(plan)
            ends, priced = self._price(plan, n)
            self._run_ends = ends
            self.planned(n)
            m = yield from wait_for_run(self, ends, n)
            if priced is not None:
                priced.charge(m, self.cost.usage)
            if decode:
                self.book_to(m)
            self.end_run()
            avail = cache.available
            ev = sched.advance(plan, m)
            end = ends[m - 1]
            if avail != cache.available:  # completions' releases
                st.pages_changed(end, avail - cache.available)
            st.busy_s += end - self.clock
            st.steps += m
            if decode:
                st.decode_seq_steps += m * len(decode)
                if len(decode) > st.max_batch:
                    st.max_batch = len(decode)
            self.clock = end
            if ev.finished or ev.prefilled or ev.first_tokens or self.pending:
                sim.on_events(self, ev, ends)


class Simulation:
    def __init__(
        self,
        sc: Scenario,
        *,
        step_mode: bool = False,
        base_dir: Path | None = None,
        on_progress: Callable[[int], None] | None = None,
        timer: StepTimer | None = None,
        profile: Profile | None = None,
    ) -> None:
        if timer is not None and not step_mode:
            raise ValueError("a step timer times one step at a time: it needs step_mode")
        if timer is not None and any(p.dp > 1 for p in sc.deployment.pools().values()):
            raise InputError("replay runs one rank of a TP instance: DP attention ranks (dp > 1) are modeled only")
        self.sc = sc
        self.step_mode = step_mode
        self.timer = timer
        self.env = simpy.Environment()
        self.on_progress = on_progress
        self.profile = profile or Profile.for_scenario(sc, base_dir)  # a repeat passes a draw of its spread
        self.router = Router(sc.routing.policy)
        self.records: dict[int, Record] = {}
        self.source: TrafficSource = make_source(sc.traffic, sc.seed, base_dir, sc.model.context_tokens)
        self.injector = fault_injector(sc)
        self.pools: dict[str, list[Instance | DPInstance]] = {}
        self.capacity: dict[str, PoolCapacity] = {}
        rng_seed = 0
        colocated = sc.deployment.mode == "colocated"
        for name, pool in sc.deployment.pools().items():
            cap = pool_capacity(sc.model, sc.hardware, pool)
            self.capacity[name] = cap
            if not cap.fits:
                raise InputError(f"deployment.{name}: {cap.reason}")
            cost = CostModel(sc.model, sc.hardware, pool, self.profile, sc.integrity.enabled)
            insts: list[Instance | DPInstance] = []
            for i in range(pool.instances):
                rng_seed += 1
                if pool.dp > 1:  # DP attention: ranks with their own pages, stepped in lock-step
                    insts.append(
                        DPInstance(self, name, i, pool, build_ranks(sc, name, pool, cap, self.injector, rng_seed), cost)
                    )
                    continue
                sched = build_scheduler(sc, name, pool, cap, self.injector, rng_seed)
                insts.append(Instance(self, name, i, pool, sched, cost))
            self.pools[name] = insts
        self.entry = self.pools["decode"] if colocated else self.pools["prefill"]
        # The most tokens an empty instance holds: the prefill pool's bound a prompt, the decode pool's a whole request.
        # Under DP attention a request lives on one rank: the most it can hold is a rank's share of the pages.
        room = {
            name: insts[0].cache.num_pages // insts[0].pool.dp * insts[0].cache.page_size
            for name, insts in self.pools.items()
        }
        self._max_prompt = room.get("prefill", room["decode"])
        self._max_total = room["decode"]
        self.done = 0
        self.kv_bytes_transfer = self._transfer_bytes_per_token()
        tr = sc.deployment.transfer
        self._link_latency_s, self._link_bytes_per_s = tr.latency_ms / 1e3, tr.bandwidth_gbs * 1e9
        if timer is not None:
            timer.attach(self)

    def _transfer_bytes_per_token(self) -> float:
        """Bytes of one token's KV that cross the link: the prefill pool's cache format, one copy of every KV
        head (the per-GPU figure at tp=1 — MLA's latent is the same on every rank, GQA's heads are all of them)."""
        pool = self.sc.deployment.prefill
        if pool is None or "prefill" not in self.pools:
            return 0.0
        return float(kv_bytes_per_token(self.sc.model, pool.model_copy(update={"tp": 1, "dp": 1})))

    # -- traffic ---------------------------------------------------------------------------------------
    def run(self) -> None:
        self.env.process(self._feed(self.source.initial()))
        with _rare_collections():
            self.env.run()

    def _feed(self, reqs: list[Request]):
        for req in reqs:
            if req.arrival > self.env.now:
                yield self.env.timeout(req.arrival - self.env.now)
            self.arrive(req)

    def arrive(self, req: Request) -> None:
        rec = Record(req.id, req.arrival, req.prompt_tokens, req.output_tokens)
        self.records[req.id] = rec
        colocated = "prefill" not in self.pools
        reason = self._rejection(req)
        if reason:
            rec.status, rec.reason = "rejected", reason  # no instance could ever hold it, however long it waited
            rec.finish = req.arrival
            self._finished(req, req.arrival)
            return
        if colocated:
            inst = self._route_decode(self.entry, req, req.arrival)
            rec.decode_instance = inst.index
        else:
            inst = self.router.prefill(self.entry, req)
            rec.prefill_instance = inst.index
        inst.enqueue_new(req)
        inst.notify(req.arrival)

    def _rejection(self, req: Request) -> str:
        """Why no instance could ever hold the request ('' if one can): the prompt must fit an empty prefill
        instance, and prompt + output an empty decode instance."""
        if req.prompt_tokens > self._max_prompt:
            return "prompt_over_prefill_kv"
        if req.prompt_tokens + req.output_tokens > self._max_total:
            return "request_over_decode_kv"
        return ""

    def _finished(self, req: Request, t: float) -> None:
        self.done += 1
        if self.on_progress is not None:
            self.on_progress(self.done)
        nxt = self.source.on_complete(req, t)
        if nxt is not None:
            self.env.process(self._feed([nxt]))

    # -- instance callbacks ----------------------------------------------------------------------------
    def after_schedule(self, inst: Instance) -> None:
        for seq in inst.take_aborted():
            rec = self.records[seq.req.id]
            rec.status = "aborted"
            rec.finish = inst.clock
            self._finished(seq.req, inst.clock)
        if inst.pending:  # aborts and preemptions free pages too
            self.try_transfers(inst, inst.clock)

    def on_events(self, inst: Instance, ev: StepEvents, ends: list[float]) -> None:
        for seq, step in ev.first_tokens:
            self.records[seq.req.id].first_token = ends[step]
        for seq, step in ev.finished:
            rec = self.records[seq.req.id]
            rec.finish = ends[step]
            rec.status = "completed"
            self._finished(seq.req, rec.finish)
        for seq, step in ev.prefilled:
            self._hand_off(inst, seq, ends[step])
        if inst.pending:
            self.try_transfers(inst, inst.clock)

    def _route_decode(self, pool: list[Instance | DPInstance], req: Request, t: float) -> Instance | DPInstance:
        """The decode-side instance for `req` at time t. Prefix-aware routing reads each cache's prefix index,
        which the steps started by t have changed (their pages evict cached prefixes): book them first, as a
        clock that runs one step at a time has."""
        if self.router.policy == "prefix_aware":
            for inst in pool:
                inst.settle(t)
        return self.router.decode(pool, req, t)

    def _hand_off(self, src: Instance, pseq: Seq, t: float) -> None:
        req = pseq.req
        if req.output_tokens <= 1:  # the prefill's own token was the whole answer
            rec = self.records[req.id]
            rec.first_token = rec.finish = t
            rec.status = "completed"
            self._release(src, pseq, t)
            src.notify(t)
            self._finished(req, t)
            return
        dst = self._route_decode(self.pools["decode"], req, t)
        self.records[req.id].decode_instance = dst.index
        dst.queue_transfer(dst.receive_at(pseq, src, t), pseq, src)
        self.try_transfers(dst, t)

    def try_transfers(self, dst: Instance, t: float) -> None:
        """FCFS: start transfers while the head of the queue finds room on the decode instance.

        Pages are held on the decode side from the start of the transfer; the link moves one prompt at a
        time (latency + bytes / bandwidth), in the order the transfers started.
        """
        dst.settle(t)
        avail = dst.cache.available
        for dseq, pseq, src, cached in dst.start_transfers():
            dst.stats.pages_changed(t, avail - dst.cache.available)
            avail = dst.cache.available
            self.records[dseq.req.id].cached_tokens = cached
            tokens = dseq.req.prompt_tokens - cached
            links = dst.links
            i = dst.link_for(dseq)  # a DP rank's own link
            start = max(t, links[i])
            links[i] = start + self._link_latency_s + tokens * self.kv_bytes_transfer / self._link_bytes_per_s
            end = links[i]
            done = self.env.timeout(max(0.0, end - self.env.now))
            done.callbacks.append(lambda _, a=(dst, dseq, pseq, src, end): self._transfer_done(*a))
        if dst.run_needs_more_than_free():
            dst.notify(t)  # the run in flight can no longer book all its pages: end it at the step in flight

    def _release(self, src: Instance, pseq: Seq, t: float) -> None:
        src.release_at(pseq, t)

    def _transfer_done(self, dst: Instance, dseq: Seq, pseq: Seq, src: Instance, end: float) -> None:
        self._release(src, pseq, end)
        if src.has_waiting():  # freed pages may admit the head of its queue; else there is nothing to decide
            src.notify(end)
        dst.settle(end)  # publishing its prefix keys comes after the evictions of the steps started by now
        dst.finish_transfer(dseq)
        self.records[dseq.req.id].first_token = end
        dst.notify(end)
