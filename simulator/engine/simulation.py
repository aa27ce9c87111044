"""The engine: SimPy wires arrivals, instances and KV-transfer links around the shared schedulers.

An instance advances a whole run of identical decode steps at once, timed by its step timer (the cost model,
vectorised over the growing context), and if an outside event (an arrival, a finished transfer) lands inside the
run it stops at the end of the step in flight — exactly where a step-by-step clock would next decide.
`step_mode=True` forces one step at a time; a test requires both to give identical timelines. The replay is this
engine in step mode with a device timer in place of the cost model (`engine.timer`).
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import simpy

from simulator.capacity import PoolCapacity, kv_bytes_per_token, pool_capacity
from simulator.config.scenario import Scenario
from simulator.engine.frontend import FrontEnd
from simulator.engine.instance import Instance
from simulator.engine.timer import CostTimer, StepTimer
from simulator.errors import InputError
from simulator.pricing.costmodel import CostModel
from simulator.pricing.profile import Profile
from simulator.pricing.usage import Usage
from simulator.results.record import PoolRun, RequestRecord, RunRecord
from simulator.serving.rank import build_ranks, fault_injector
from simulator.serving.routing import Router
from simulator.serving.scheduler import StepEvents
from simulator.serving.sequence import Seq
from simulator.workload.request import Request
from simulator.workload.traffic import TrafficSource, make_source

RETRY_STREAM = 17  # the random stream of retry jitter (seed, this, request id, attempt)


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
        self.timer: StepTimer = CostTimer() if timer is None else timer
        self.env = simpy.Environment()
        self.on_progress = on_progress
        self.profile = profile or Profile.for_scenario(sc, base_dir)  # a repeat passes a draw of its spread
        self.records: dict[int, RequestRecord] = {}
        self.source: TrafficSource = make_source(sc.traffic, sc.seed, base_dir, sc.model.context_tokens)
        self.injector = fault_injector(sc)
        self.pools: dict[str, list[Instance]] = {}
        self.capacity: dict[str, PoolCapacity] = {}
        rng_seed = 0
        colocated = sc.deployment.mode == "colocated"
        for name, pool in sc.deployment.pools().items():
            hw = sc.hardware_of(pool)
            cap = pool_capacity(sc.model, hw, pool)
            self.capacity[name] = cap
            if not cap.fits:
                raise InputError(f"deployment.{name}: {cap.reason}")
            cost = CostModel(sc.model, hw, pool, self.profile.for_pool(sc, pool), sc.integrity.enabled)
            insts = []
            for i in range(pool.instances):
                rng_seed += 1
                tracker = self.timer.tracker(name, i)
                ranks = build_ranks(sc, name, pool, cap, self.injector, rng_seed, tracker)
                insts.append(Instance(self, name, i, pool, ranks, cost, self.timer))
            self.pools[name] = insts
        self.router = Router(sc.routing, {name: len(insts) for name, insts in self.pools.items()}, sc.seed)
        self.entry = self.pools["decode"] if colocated else self.pools["prefill"]
        # The most tokens an empty instance holds: the prefill pool's bound a prompt, the decode pool's a whole request.
        # Under DP attention a request lives on one rank: the most it can hold is a rank's share of the pages.
        room = {name: insts[0].num_pages // insts[0].pool.dp * insts[0].page_size for name, insts in self.pools.items()}
        self._max_prompt = room.get("prefill", room["decode"])
        self._max_total = room["decode"]
        self._entry_latency_s = self.entry[0].pool.request_latency_us * 1e-6
        self._fronts = [FrontEnd.of(self.env, inst.pool) for inst in self.entry]  # each entry instance's API server
        self.done = 0
        self.kv_bytes_transfer = self._transfer_bytes_per_token()
        self._convert_s_per_token = self._conversion_s_per_token()
        tr = sc.deployment.transfer
        self._link_latency_s, self._link_bytes_per_s = tr.latency_ms / 1e3, tr.bandwidth_gbs * 1e9
        self.timer.attach(self)

    def _transfer_bytes_per_token(self) -> float:
        """Bytes of one token's KV that cross the link: the prefill pool's cache format, one copy of every KV
        head (the per-GPU figure at tp=1 — MLA's latent is the same on every rank, GQA's heads are all of them)."""
        pool = self.sc.deployment.prefill
        if pool is None or "prefill" not in self.pools:
            return 0.0
        return float(kv_bytes_per_token(self.sc.model, pool.model_copy(update={"tp": 1, "dp": 1})))

    def _conversion_s_per_token(self) -> float:
        """Seconds per token a decode GPU spends converting a handed-off prompt's KV where the pools cache in
        different formats or layouts (each rank reads the prefill pool's bytes and writes its own at its copy
        rate); 0 where they agree."""
        prefill, decode = self.sc.deployment.prefill, self.sc.deployment.decode
        if prefill is None or "prefill" not in self.pools:
            return 0.0
        if (prefill.kv_cache, prefill.kv_layout) == (decode.kv_cache, decode.kv_layout):
            return 0.0
        src = kv_bytes_per_token(self.sc.model, prefill.model_copy(update={"tp": decode.tp, "dp": decode.dp}))
        dst = kv_bytes_per_token(self.sc.model, decode)
        return (src + dst) / (self.sc.hardware_of(decode).copy_gbs * 1e9)

    def record(self) -> RunRecord:
        """The finished run as plain data: `results/` builds the Result from it alone."""
        pools = {}
        for name, insts in self.pools.items():
            specs = [s.spec for i in insts for s in i.schedulers if s.spec is not None]
            pools[name] = PoolRun(
                insts[0].pool,
                self.capacity[name],
                tuple(i.run_record() for i in insts),
                insts[0].cost.usage.shares(),
                sum(s.verify_seq_steps for s in specs),
                sum(s.tokens for s in specs),
            )
        entry = "decode" if self.entry is self.pools["decode"] else "prefill"
        injected = dict(self.injector.injected) if self.injector else None
        return RunRecord(self.sc, self.profile, pools, entry, list(self.records.values()), injected)

    def recorded_until(self) -> float:
        """A time before which every first token and finish is already in `records`: an instance reports a run's
        events when the run ends, so one not yet reported comes no earlier than the start of a run in flight (an
        instance's clock while it runs; a sleeping instance has none), nor than now. A request still waiting then
        waits at least this long, whatever follows: what lets a planner's trial stop on it (`planning.trial`)."""
        starts = [i.clock for insts in self.pools.values() for i in insts if i.wake is None or i.wake.triggered]
        return min([self.env.now, *starts])

    # -- traffic ---------------------------------------------------------------------------------------
    def run(self) -> None:
        self.env.process(self._feed(self.source.initial()))
        with _rare_collections():
            self.env.run()

    def _feed(self, reqs: list[Request]):
        """Each request reaches a scheduler once the path outside the GPU steps is crossed (the entry pool's
        `request_latency_us`: HTTP, the hand-off to the scheduler; the stream back to the client is counted on the
        same crossing, so every metric sees it once), and its instance's front end has taken it in
        (`engine.frontend`: one request at a time). Its record keeps the time it left its client."""
        for req in reqs:
            at = req.arrival + self._entry_latency_s
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            self.arrive(req)

    def arrive(self, req: Request) -> None:
        rec = self.records.get(req.id)
        if rec is None:
            rec = self.records[req.id] = RequestRecord(req.id, req.arrival, req.prompt_tokens, req.output_tokens)
        else:  # a client's retry: the same request, timed from its first send
            rec.first_token = rec.finish = math.nan
            rec.status, rec.reason, rec.cached_tokens = "pending", "", 0
            rec.prefill_instance = rec.decode_instance = -1
        reason = self._rejection(req)
        if reason:
            if self._retried(req, rec, req.arrival, "rejected", 0, 0):
                return
            rec.status, rec.reason = "rejected", reason  # no instance could ever hold it, however long it waited
            rec.finish = req.arrival
            self._finished(req, req.arrival)
            return
        t = req.arrival + self._entry_latency_s  # as the feed waits for it (a follow-up may be booked late)
        if "prefill" not in self.pools:
            inst = self._route_decode(req, t)
            rec.decode_instance = inst.index
        else:
            inst = self.entry[self.router.route("prefill", self.entry, req, t)]
            rec.prefill_instance = inst.index
        front = self._fronts[inst.index]
        if front is None:
            self._receive(inst, req, t)
        else:
            front.take(t, lambda ready: self._receive(inst, req, ready))

    @staticmethod
    def _receive(inst: Instance, req: Request, t: float) -> None:
        """The request reaches its instance's scheduler at time t."""
        inst.enqueue_new(req, t)
        inst.notify(t)

    def _rejection(self, req: Request) -> str:
        """Why no instance could ever hold the request ('' if one can): the prompt must fit an empty prefill
        instance, and prompt + output an empty decode instance."""
        if req.prompt_tokens > self._max_prompt:
            return "prompt_over_prefill_kv"
        if req.prompt_tokens + req.output_tokens > self._max_total:
            return "request_over_decode_kv"
        return ""

    def _retried(self, req: Request, rec: RequestRecord, t: float, cause: str, prompt: int, output: int) -> bool:
        """Whether the client sends a failed request again (`traffic.retries`): after the backoff of its retry
        count, its jitter drawn from the seed and the request's id and attempt (so the draw does not depend on the
        order failures are handled in). `prompt` and `output`: the tokens the failed attempt had computed."""
        r = self.sc.traffic.retries
        if rec.retries >= r.max or cause not in r.on:
            return False
        u = np.random.default_rng([self.sc.seed, RETRY_STREAM, req.id, rec.retries]).random()
        wait = min(r.backoff_s * r.multiplier**rec.retries, r.max_backoff_s) * (1.0 - r.jitter * u)
        rec.retries += 1
        rec.retry_prompt += prompt
        rec.retry_output += output
        if prompt:
            rec.retry_prefill_s += self._prefill_s(prompt)
        self.env.process(self._feed([dataclasses.replace(req, arrival=t + wait)]))  # all of it, sent again
        return True

    def _prefill_s(self, tokens: int) -> float:
        """Seconds to prefill a prompt of `tokens` on an idle instance of the entry pool, chunk by chunk (priced)."""
        inst = self.entry[0]
        chunk, done, s = inst.pool.chunk_size, 0, 0.0
        while done < tokens:
            n = min(chunk, tokens - done)
            s += inst.cost.step_s(0, 0, 0, [(n, done)], usage=Usage())
            done += n
        return s

    def _finished(self, req: Request, t: float) -> None:
        self.done += 1
        if self.on_progress is not None:
            self.on_progress(self.done)
        nxt = self.source.on_complete(req, t)
        if nxt:
            self.env.process(self._feed(nxt))

    # -- instance callbacks ----------------------------------------------------------------------------
    def after_schedule(self, inst: Instance) -> None:
        for seq in inst.take_aborted():
            self.router.done(inst.pool_name, inst.index)
            rec = self.records[seq.req.id]
            prompt = min(seq.computed, seq.req.prompt_tokens)  # what it had prefilled (part, if cut short)
            if self._retried(seq.req, rec, inst.clock, seq.aborted_by, prompt, seq.generated):
                continue
            rec.status, rec.reason = "aborted", seq.aborted_by
            rec.finish = inst.clock
            self._finished(seq.req, inst.clock)
        if inst.pending:  # aborts and preemptions free pages too
            self.try_transfers(inst, inst.clock)

    def on_events(self, inst: Instance, ev: StepEvents, ends: list[float]) -> None:
        for seq, step in ev.first_tokens:
            rec = self.records[seq.req.id]
            rec.first_token = ends[step]
            rec.load_s += seq.load_s
        for seq, step in ev.finished:
            self.router.done(inst.pool_name, inst.index)
            rec = self.records[seq.req.id]
            rec.finish = ends[step]
            rec.status = "completed"
            self._finished(seq.req, rec.finish)
        for seq, step in ev.prefilled:
            self._hand_off(inst, seq, ends[step])
        if inst.pending:
            self.try_transfers(inst, inst.clock)

    def _route_decode(self, req: Request, t: float) -> Instance:
        """The decode-side instance for `req` at time t. Prefix-aware routing reads each cache's prefix index,
        which the steps started by t have changed (their pages evict cached prefixes): book them first, as a
        clock that runs one step at a time has."""
        pool = self.pools["decode"]
        if self.router.policy in ("prefix_aware", "session_affinity"):
            for inst in pool:
                inst.settle(t)
        return pool[self.router.route("decode", pool, req, t)]

    def _hand_off(self, src: Instance, pseq: Seq, t: float) -> None:
        req = pseq.req
        self.records[req.id].load_s += pseq.load_s
        if req.output_tokens <= 1:  # the prefill's own token was the whole answer
            self.router.done("prefill", src.index)
            rec = self.records[req.id]
            rec.first_token = rec.finish = t
            rec.status = "completed"
            src.release_at(pseq, t)
            src.notify(t)
            self._finished(req, t)
            return
        dst = self._route_decode(req, t)
        self.records[req.id].decode_instance = dst.index
        dst.queue_transfer(dst.receive_at(pseq, src, t), pseq, src)
        self.try_transfers(dst, t)

    def try_transfers(self, dst: Instance, t: float) -> None:
        """FCFS: start transfers while the head of the queue finds room on the decode instance.

        Pages are held on the decode side from the start of the transfer; the link moves one prompt at a
        time (latency + bytes / bandwidth), in the order the transfers started.
        """
        dst.settle(t)
        for dseq, pseq, src, cached in dst.start_transfers(t):
            self.records[dseq.req.id].cached_tokens = cached
            tokens = dseq.req.prompt_tokens - cached
            links = dst.links
            i = dst.link_for(dseq)  # a DP rank's own link
            start = max(t, links[i])
            links[i] = start + self._link_latency_s + tokens * self.kv_bytes_transfer / self._link_bytes_per_s
            if self._convert_s_per_token:  # pools of different cache formats: the decode GPU converts on arrival
                links[i] += tokens * self._convert_s_per_token
            if dseq.loads is not None:  # the prompt's pages found below HBM here load back instead of crossing
                links[i] = self._load_back(dst, dseq, start, links[i])
            end = links[i]
            done = self.env.timeout(max(0.0, end - self.env.now))
            done.callbacks.append(lambda _, a=(dst, dseq, pseq, src, end): self._transfer_done(*a))
        if dst.run_needs_more_than_free():
            dst.notify(t)  # the run in flight can no longer book all its pages: end it at the step in flight

    def _load_back(self, dst: Instance, dseq: Seq, start: float, end: float) -> float:
        """When a hand-off that also loads pages back from the decode instance's own tiers is done. On a PCIe host the
        load crosses the GPU's link the inbound KV uses too, after it; over NVLink-C2C it runs beside it."""
        tiers, loads = dst.cost.tiers, dseq.loads
        assert tiers is not None and loads is not None
        load = tiers.load_s(loads.host, loads.storage)
        dseq.loads = None
        self.records[dseq.req.id].load_s += load
        if self.sc.hardware_of(dst.pool).host_link_shares_nic:
            return end + load
        return max(end, start + load)

    def _transfer_done(self, dst: Instance, dseq: Seq, pseq: Seq, src: Instance, end: float) -> None:
        src.release_at(pseq, end)
        self.router.done("prefill", src.index)  # the prefill instance held it until its KV left
        if src.has_waiting():  # freed pages may admit the head of its queue; else there is nothing to decide
            src.notify(end)
        dst.settle(end)  # publishing its prefix keys comes after the evictions of the steps started by now
        dst.finish_transfer(dseq)
        self.records[dseq.req.id].first_token = end
        dst.notify(end)
