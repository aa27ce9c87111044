"""What the model predicts for a case, measured the way the source measured it.

* `decode_batch`: one decode step priced at a filled batch (every DP rank alike), tokens per step over its time —
  what a decode benchmark at a fixed batch reports, without queueing or prefill.
* `prefill_batch`: one prefill step of whole prompts on every rank, prompt tokens over its time.
* `serve`: the scenario's traffic simulated end to end; the metric read from the completed requests as a serving
  benchmark computes it (vLLM's and SGLang's `bench_serve`: TPOT per request excludes the first token).
* `ratio`: one of the two above on the case's scenario over the same on the scenario with other overrides.

Under DP attention a step is priced as the engine runs it, lock-step over ranks (`pricing.dpstep.DPSteps`), so
two-batch overlap and the shared routed experts count as in a simulated run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.budget import mean_length
from simulator.capacity import format_rule
from simulator.config.scenario import Pool, Scenario
from simulator.engine.run import simulate
from simulator.engine.timer import HostTime
from simulator.errors import InputError
from simulator.pricing.costmodel import CostModel, blackwell_fp8_factor
from simulator.pricing.dpstep import DPSteps
from simulator.pricing.profile import Profile
from simulator.results.record import RequestRecord
from simulator.validation import cells
from simulator.validation.case import REPO, Case, DecodeBatch, Per, PrefillBatch, Ratio
from simulator.validation.cells import Cell

ROOT = REPO  # a scenario's relative files (profiles, traces) resolve from the repo


def predict(case: Case, overrides: dict[str, Any]) -> float:
    """The model's figure for the case's metric, with `overrides` (fitted parameters) set on its scenario."""
    how, metric = case.spec.how, case.spec.metric
    sc = case.scenario_with(overrides)
    if isinstance(how, Ratio):
        other = case.scenario_with({**how.over, **overrides})
        unit = "input_tok_s" if isinstance(how.of, PrefillBatch) else "output_tok_s"
        return _pool_figure(sc, how.of, unit) / _pool_figure(other, how.of, unit)
    if isinstance(how, DecodeBatch | PrefillBatch):
        return _pool_figure(sc, how, metric)
    if metric == "mean_itl_ms" and any(p.speculative for p in sc.deployment.pools().values()):
        raise InputError(
            f"{case.path}: metric: mean_itl_ms under speculation: a benchmark's chunks then carry several tokens, "
            "which the model does not stream; use mean_tpot_ms"
        )
    return served(_completed(sc), metric)


_RUNS: dict[str, list[RequestRecord]] = {}
_RUNS_KEPT = 4  # runs remembered: a run's figures are several cases (its TPOT, its TTFT), listed side by side


def _completed(sc: Scenario) -> list[RequestRecord]:
    """The completed requests of the scenario's run, simulated once for every case that reads a figure of it (a
    run is a pure function of its scenario, seed included)."""
    key = sc.model_dump_json()
    done = _RUNS.get(key)
    if done is None:
        if len(_RUNS) >= _RUNS_KEPT:
            del _RUNS[next(iter(_RUNS))]
        done = _RUNS[key] = [r for r in simulate(sc, ROOT)[1].requests if r.status == "completed"]
    return done


def sequences(case: Case) -> int:
    """The most sequences one decode instance runs at once in the case's measurement, which files its error under
    a batch regime (`cells.regime`): a filled batch's per-rank batch over all DP ranks; a prefill step's prompts;
    a closed loop's clients per decode instance; an open loop's as the model runs it (its peak decode batch)."""
    how, sc = case.spec.how, case.scenario
    if isinstance(how, Ratio):
        how = how.of
    if isinstance(how, DecodeBatch | PrefillBatch):
        pool = sc.deployment.pools()[how.pool]
        return (how.batch if isinstance(how, DecodeBatch) else max(how.tokens // how.prompt, 1)) * pool.dp
    clients = sc.traffic.concurrency
    if clients is None:
        return int(simulate(sc, ROOT)[0]["metrics"]["max_running"])
    decode = sc.deployment.decode
    return min(math.ceil(min(clients, sc.traffic.requests or clients) / decode.instances), decode.max_running)


# Engine terms a price reads only under a pool setting: without it no figure of the pool moves with the term, so
# the fit simulates no finite-difference step of it there (`fit.Target.moved_by`).
_READ_ONLY_WHERE: dict[str, Callable[[Scenario, Pool], bool]] = {
    "dp_sync_us": lambda sc, p: p.dp > 1,  # engine.timer.HostTime: `pool.dp_sync_us if pool.dp > 1 else 0.0`
    "tbo_hidden_share": lambda sc, p: p.two_batch_overlap,  # pricing.dpstep.DPSteps: only `if self.overlap`
    "fp8_kv_read_factor": lambda sc, p: p.kv_cache == "fp8_e4m3",  # pricing.roofline: `if kv == "fp8_e4m3"`
    # pricing.roofline: `if w == "fp8"`, an op's weights being the pool's format or its rule's rest
    # (capacity.component_format), and not on a GPU where the engine's Blackwell factor replaces it (pricing.costmodel)
    "fp8_gemm_mma_factor": lambda sc, p: (
        "fp8" in (p.weights, format_rule(sc.model, p.weights, p.weights_scheme).rest)
        and not blackwell_fp8_factor(p, sc.hardware_of(p))
    ),
}


# Engine terms some figures never read: a request's time outside the GPU steps only a simulated run
# (engine.simulation), never a figure priced from one step; a graphed decode step's per-layer cost
# (pricing.costmodel `layer_us`) no prefill step.
_NOT_READ_BY: dict[str, tuple[type, ...]] = {
    "request_latency_us": (DecodeBatch, PrefillBatch, Ratio),
    "decode_layer_us": (PrefillBatch,),
}


def moved_by(case: Case, path: str) -> bool:
    """Whether a fitted parameter (a dotted scenario path) can move the case's figure at all: not where it sets a
    pool the case's scenarios (a ratio has two) do not have, nor an engine term on pools lacking the setting
    under which a price reads it (`_READ_ONLY_WHERE`), nor a term on a figure that never reads it
    (`_NOT_READ_BY`); every other path can."""
    head, *rest = path.split(".")
    how = case.spec.how
    of = how.of if isinstance(how, Ratio) else None
    if rest and (isinstance(how, _NOT_READ_BY.get(rest[-1], ())) or isinstance(of, _NOT_READ_BY.get(rest[-1], ()))):
        return False
    scenarios = [case.scenario]
    if isinstance(case.spec.how, Ratio):
        scenarios.append(case.scenario_with(case.spec.how.over))
    if head == "deployment" and len(rest) == 2:
        pools = [(sc, p) for sc in scenarios if (p := sc.deployment.pools().get(rest[0])) is not None]
    elif head == "engine" and len(rest) == 1:
        pools = [(sc, p) for sc in scenarios for p in sc.deployment.pools().values()]
    else:
        return True
    reads = _READ_ONLY_WHERE.get(rest[-1])
    return any(reads is None or reads(sc, p) for sc, p in pools)


def cell(case: Case, sequences: int) -> Cell:
    """The case's cell: its scenario measured on the pool its figure comes from, at `sequences` a decode
    instance, with its traffic's prompt tokens per output token (a prefill step: all prompt; a decode step:
    none; a trace: not known before a run, so filed by its sequences alone)."""
    how, sc = case.spec.how, case.scenario
    of = how.of if isinstance(how, Ratio) else how
    if isinstance(of, PrefillBatch):
        pool, ratio = of.pool, math.inf
    elif isinstance(of, DecodeBatch):
        pool, ratio = of.pool, 0.0
    else:
        t = sc.traffic
        pool = "decode"
        ratio = None if t.trace else mean_length(t.prompt_tokens) / mean_length(t.output_tokens)
    return cells.cell(sc.model_dump(mode="json"), pool, sequences, ratio)


def _pool_figure(sc: Scenario, how: DecodeBatch | PrefillBatch, metric: str) -> float:
    pool = sc.deployment.pools()[how.pool]
    hw = sc.hardware_of(pool)
    cost = CostModel(sc.model, hw, pool, Profile.for_scenario(sc, ROOT).for_pool(sc, pool), sc.integrity.enabled)
    if isinstance(how, DecodeBatch):
        seconds = decode_step_s(cost, pool, how.batch, how.context)
        if metric == "step_ms":
            return seconds * 1e3
        per_step = how.batch * pool.dp * (pool.speculative.tokens_per_step if pool.speculative else 1.0)
    else:
        seconds = prefill_step_s(cost, pool, how.tokens, how.prompt)
        per_step = (how.tokens // how.prompt) * how.prompt * pool.dp
    return per_step / seconds * _scale(pool, hw.gpus_per_node, how.per)


def decode_step_s(cost: CostModel, pool: Pool, batch: int, context: int) -> float:
    """Seconds of one decode (or verify-and-draft) step: `batch` sequences of `context` tokens on every rank,
    the engine's CPU work per step included as a run prices it (`engine.timer.HostTime`)."""
    pages = np.array([float(batch * math.ceil(context / pool.page_size))])
    if pool.dp == 1:
        return HostTime(pool).step(float(cost.decode_step_s(batch, np.array([float(batch * context)]), pages)[0]))
    rank = (batch, np.array([batch * context], dtype=np.int64), pages.astype(np.int64))
    _, ends = DPSteps(cost).decode_run([rank] * pool.dp, 0.0)
    return HostTime(pool).step(ends[0])


def prefill_step_s(cost: CostModel, pool: Pool, tokens: int, prompt: int) -> float:
    """Seconds of one prefill step of `tokens // prompt` whole prompts on every rank (CPU work included)."""
    chunks = [(prompt, 0)] * max(tokens // prompt, 1)
    if pool.dp == 1:
        return HostTime(pool).step(cost.step_s(0, 0, 0, chunks))
    return HostTime(pool).step(DPSteps(cost).step_s([(0, 0, 0, chunks, False)] * pool.dp))


def _scale(pool: Pool, gpus_per_node: int, per: Per) -> float:
    """From one instance's figure to the figure per `per`."""
    return {
        "gpu": 1 / pool.tp,
        "node": gpus_per_node / pool.tp,
        "rank": 1 / pool.dp,
        "instance": 1.0,
        "pool": float(pool.instances),
    }[per]


def served(done: list[RequestRecord], metric: str) -> float:
    """A serving benchmark's figure over the completed requests (times in seconds since the run began), computed
    as vLLM's and SGLang's bench_serve compute it: a p99 is numpy's linear percentile; the mean ITL pools every
    gap between two streamed tokens (one token a chunk, as a run without speculation streams)."""
    if not done:
        return math.nan
    start, end = min(r.arrival for r in done), max(r.finish for r in done)
    tpots = [(r.finish - r.first_token) / (r.output - 1) * 1e3 for r in done if r.output > 1]
    ttfts = [(r.first_token - r.arrival) * 1e3 for r in done]
    e2els = [(r.finish - r.arrival) * 1e3 for r in done]
    gaps = sum(r.output - 1 for r in done)
    figures = {
        "output_tok_s": lambda: sum(r.output for r in done) / (end - start),
        "input_tok_s": lambda: sum(r.prompt for r in done) / (end - start),
        "total_tok_s": lambda: sum(r.prompt + r.output for r in done) / (end - start),
        "request_throughput": lambda: len(done) / (end - start),
        "mean_tpot_ms": lambda: statistics.fmean(tpots) if tpots else math.nan,
        "median_tpot_ms": lambda: statistics.median(tpots) if tpots else math.nan,
        "p99_tpot_ms": lambda: np.percentile(tpots, 99) if tpots else math.nan,
        "mean_itl_ms": lambda: sum(r.finish - r.first_token for r in done) * 1e3 / gaps if gaps else math.nan,
        "mean_ttft_ms": lambda: statistics.fmean(ttfts),
        "median_ttft_ms": lambda: statistics.median(ttfts),
        "p99_ttft_ms": lambda: np.percentile(ttfts, 99),
        "mean_e2el_ms": lambda: statistics.fmean(e2els),
        "median_e2el_ms": lambda: statistics.median(e2els),
        "duration_s": lambda: end - start,
    }
    return float(figures[metric]())
