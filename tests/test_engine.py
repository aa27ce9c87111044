"""The serving model end to end on the modeled clock: determinism, exactness, conservation, queueing sanity."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.engine.run import simulate


def scenario(**over: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "t",
        "model": "llama-3.1-70b",
        "hardware": "h200",
        "deployment": {
            "mode": "disaggregated",
            "prefill": {"instances": 1, "tp": 4, "weights": "fp8", "kv_cache": "fp8_e4m3"},
            "decode": {"instances": 2, "tp": 4, "weights": "fp8", "kv_cache": "fp8_e4m3", "page_size": 16},
        },
        "traffic": {
            "rate": 6.0,
            "requests": 120,
            "arrival": "bursty",
            "burst_cv": 2.0,
            "prompt_tokens": {"dist": "lognormal", "median": 900, "sigma": 0.7, "max": 8000},
            "output_tokens": {"dist": "lognormal", "median": 150, "sigma": 0.7, "max": 1500},
            "sessions": {"turns": 2, "think_time_s": 1.0},
            "shared_prefix_tokens": 256,
        },
        "routing": {"policy": "session_affinity"},
        "seed": 3,
    }
    return loader.validate(loader.apply_overrides(base, over), "test")


WIDE_EP = {
    "instances": 1,
    "nodes": 2,
    "tp": 16,
    "dp": 16,
    "ep": 16,
    "weights": "fp8",
    "kv_cache": "fp8_e4m3",
    "max_batch_tokens": 4096,
    "chunk_size": 1024,
}


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, sort_keys=True)


def test_same_seed_same_bytes_other_seed_other_arrivals() -> None:
    a, _ = simulate(scenario())
    b, _ = simulate(scenario())
    c, _ = simulate(scenario(seed=4))
    assert dumps(a) == dumps(b)
    assert dumps(a) != dumps(c)


@pytest.mark.parametrize(
    "over",
    [
        {},
        {
            "deployment.mode": "colocated",
            "deployment.decode.max_batch_tokens": 2048,
            "deployment.decode.chunk_size": 512,
        },
        # memory pressure: few pages, so preemption and admission waits happen
        {
            "deployment.decode.mem_fraction": 0.225,
            "integrity.fault_rate": 0.002,
            "integrity.fault_kinds": ["stale", "foreign", "out_of_range"],
        },
        # load-aware routing over several decode instances reads their state between step boundaries
        {
            "routing.policy": "least_kv",
            "deployment.decode.instances": 3,
            "deployment.decode.mem_fraction": 0.2,
            "traffic.rate": 12.0,
        },
        # the engines' routers over colocated instances short of pages, with shared prefixes: in-flight counts,
        # the router's prefix tree, waiting queues, KV use and polled token loads read mid-run
        *(
            {
                "routing.policy": policy,
                "deployment.mode": "colocated",
                "deployment.decode.instances": 3,
                "deployment.decode.mem_fraction": 0.13,
                "deployment.decode.decode_reserve_tokens": 16,
                "traffic.rate": 20.0,
                "traffic.sessions.turns": 3,
                "traffic.output_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.6, "max": 3000},
            }
            for policy in ("cache_aware", "scorers", "power_of_two")
        ),
        # transfers land mid-run on instances short of pages: prefix reuse, eviction order and preemption
        {
            "routing.policy": "prefix_aware",
            "deployment.decode.instances": 2,
            "deployment.decode.mem_fraction": 0.14,
            "deployment.decode.decode_reserve_tokens": 16,
            "traffic.rate": 20.0,
            "traffic.output_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.6, "max": 3000},
        },
        # transfers waiting for room start right after a plan (pages freed by preemption): they must leave the
        # plan's first step its pages (this ran out of pages at that step once)
        # (mem_fraction 0.13: at 0.14 the H200 all-gather's own fit, ~6 us a step, left it without preemption)
        {
            "routing.policy": "session_affinity",
            "deployment.decode.instances": 1,
            "deployment.decode.mem_fraction": 0.13,
            "deployment.decode.decode_reserve_tokens": 16,
            "traffic.rate": 30.0,
            "seed": 0,
            "traffic.sessions.turns": 4,
            "traffic.sessions.think_time_s": 0.2,
            "traffic.output_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.6, "max": 3000},
        },
        # pages a plan's preemption frees admit the head of the queue at the next step: a run must stop there
        {
            "deployment.decode.instances": 2,
            "deployment.decode.mem_fraction": 0.13,
            "deployment.decode.page_size": 1,
            "deployment.decode.decode_reserve_tokens": 0,
            "deployment.decode.max_running": 32,
            "deployment.decode.chunk_size": 256,
            "deployment.prefill.instances": 2,
            "routing.policy": "least_kv",
            "traffic.rate": 12.0,
            "traffic.sessions.think_time_s": 0.3,
            "traffic.sessions.turns": 4,
            "seed": 626,
            "traffic.output_tokens": {"dist": "lognormal", "median": 600, "sigma": 0.7, "max": 3000},
        },
        # speculative decoding with a draft model (tokens drawn per sequence and step), short of memory: preemptions
        {
            "deployment.decode.speculative": {
                "method": "draft",
                "draft_tokens": 3,
                "draft_model": "llama-3.1-8b",
                "acceptance": [0.8, 0.6, 0.4],
            },
            "deployment.decode.mem_fraction": 0.15,
            "deployment.decode.decode_reserve_tokens": 16,
            "traffic.rate": 20.0,
            "traffic.output_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.6, "max": 3000},
        },
        # DP attention + wide EP across 2 nodes, redundant experts, imbalance, MTP; decode short of memory
        {
            "model": "deepseek-v3",
            "deployment.prefill": WIDE_EP,
            "traffic.rate": 20.0,
            "traffic.output_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.6, "max": 3000},
            "deployment.decode": {
                **WIDE_EP,
                "mem_fraction": 0.423,
                "page_size": 16,
                "redundant_experts": 16,
                "expert_imbalance": 1.3,
                "decode_reserve_tokens": 16,
                "speculative": {"method": "mtp", "draft_tokens": 2, "acceptance": [0.85, 0.6]},
            },
        },
        # DP ranks with their own pages, unbalanced: long-tailed prompts and outputs in bursts land unevenly,
        # one rank preempts while others have room; colocated, so chunks and decode share lock-step steps
        {
            "model": "deepseek-v3",
            "deployment.mode": "colocated",
            "traffic.rate": 30.0,
            "traffic.burst_cv": 4.0,
            "traffic.prompt_tokens": {"dist": "lognormal", "median": 900, "sigma": 1.2, "max": 12000},
            "traffic.output_tokens": {"dist": "lognormal", "median": 400, "sigma": 1.0, "max": 3000},
            "deployment.decode": {
                **WIDE_EP,
                "mem_fraction": 0.4075,
                "frontend_accept_us": 0,  # the bursts reach the ranks whole (no API server spreading them)
                "frontend_prepare_us": 0,
                "page_size": 16,
                "decode_reserve_tokens": 16,
                "max_batch_tokens": 2048,
                "chunk_size": 512,
            },
        },
        # two DP instances: least-KV routing over instances, then over each one's ranks; integrity faults;
        # all-to-alls overlapped with compute (two-batch overlap) in both pools
        {
            "model": "deepseek-v3",
            "deployment.prefill": {**WIDE_EP, "two_batch_overlap": True},
            "traffic.rate": 25.0,
            "routing.policy": "least_kv",
            "integrity.fault_rate": 0.002,
            "traffic.sessions.turns": 1,
            "traffic.output_tokens": {"dist": "lognormal", "median": 300, "sigma": 1.0, "max": 3000},
            "deployment.decode": {
                **WIDE_EP,
                "instances": 2,
                "mem_fraction": 0.425,
                "page_size": 64,
                "decode_reserve_tokens": 64,
                "two_batch_overlap": True,
            },
        },
        # prefix-aware routing over two DP instances reads their caches' prefixes mid-run: the steps started by
        # then must have evicted what they evict (this differed between the clocks once)
        {
            "model": "deepseek-v3",
            "seed": 402,
            "deployment.mode": "colocated",
            "routing.policy": "prefix_aware",
            "traffic.rate": 30.0,
            "traffic.output_tokens": {"dist": "lognormal", "median": 600, "sigma": 0.9, "max": 3000},
            "deployment.decode": {
                "instances": 2,
                "tp": 8,
                "dp": 4,
                "ep": 8,
                "weights": "fp8",
                "kv_cache": "fp8_e4m3",
                "page_size": 16,
                "max_batch_tokens": 1024,
                "chunk_size": 256,
                "mem_fraction": 0.61824,
            },
        },
    ],
    ids=[
        "disaggregated",
        "colocated-chunked",
        "pressure-faults",
        "least-kv-routing",
        "cache-aware-routing",
        "scorers-routing",
        "power-of-two-routing",
        "prefix-aware-preemption",
        "transfers-after-preemption",
        "admission-after-preemption",
        "speculative-draft-preemption",
        "wide-ep-mtp-preemption",
        "dp-ranks-colocated-unbalanced-preemption",
        "dp-ranks-two-instances-faults-overlap",
        "dp-ranks-prefix-aware-preemption",
    ],
)
def test_segments_and_single_steps_give_identical_timelines(
    over: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    sc = scenario(**over)
    seg, sim_seg = simulate(sc)
    step, sim_step = simulate(sc, step_mode=True)
    timeline = lambda run: [(r.id, r.arrival, r.first_token, r.finish, r.status) for r in run.requests]  # noqa: E731
    assert timeline(sim_seg) == timeline(sim_step)
    assert dumps(seg) == dumps(step)
    steps = lambda run: sum(i.steps for p in run.pools.values() for i in p.instances)  # noqa: E731
    assert steps(sim_seg) == steps(sim_step)
    assert seg["metrics"]["preempted"] > 0 or "preemption" not in request.node.callspec.id


def test_nothing_is_lost() -> None:
    """Every arrival ends completed, rejected or aborted — with preemption, faults and an impossible prompt."""
    sc = scenario(
        **{
            "deployment.decode.mem_fraction": 0.13,  # ~28K tokens per decode instance
            "integrity.fault_rate": 0.0005,
            "traffic.prompt_tokens": {"dist": "lognormal", "median": 1500, "sigma": 1.5, "max": 400_000},
            "traffic.output_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.5, "max": 2000},
            "traffic.truncate_to_context": True,  # prompts past Llama's 128K are cut to it: still far over 28K
        }
    )
    result, sim = simulate(sc)
    m, it = result["metrics"], result["integrity"]
    statuses = [r.status for r in sim.requests]
    assert "pending" not in statuses
    assert m["completed"] + m["rejected"] + m["aborted"] == m["requests"] == len(statuses)
    assert m["rejected"] > 0 and m["preempted"] > 0 and m["aborted"] > 0
    assert it["aborted_requests"] == m["aborted"] == it["detected"] == it["injected"]
    assert it["false_positives"] == 0
    expect = {"stale": "tag_mismatch", "foreign": "tag_mismatch", "out_of_range": "invalid_page"}
    assert len(it["events"]) == m["aborted"]
    assert all(e["kind"] == expect[e["injected"]] for e in it["events"])
    assert {e["request"] for e in it["events"]} == {r.id for r in sim.requests if r.status == "aborted"}


def test_queueing_matches_md1_closed_form() -> None:
    """One server, no batching, fixed work per request: an M/D/1 queue. Mean wait = rho * S / (2 (1 - rho))."""
    base = {
        "deployment": {
            "mode": "colocated",
            # the server alone: no request path outside it (the engine's request_latency_us is not queueing)
            "decode": {
                "instances": 1,
                "tp": 4,
                "weights": "fp8",
                "kv_cache": "fp8_e4m3",
                "max_running": 1,
                "request_latency_us": 0,
            },
        },
        "prefix_cache": {"enabled": False},
        "integrity": {"enabled": False},
        "routing": {"policy": "round_robin"},
    }
    traffic = {"prompt_tokens": 32, "output_tokens": 64}
    one = scenario(**base, traffic={"concurrency": 1, "requests": 3, **traffic})
    _, sim1 = simulate(one)
    service = np.mean([r.finish - r.arrival for r in sim1.requests])
    rho = 0.5
    open_ = scenario(**base, traffic={"rate": rho / service, "requests": 6000, **traffic}, seed=11)
    _, sim = simulate(open_)
    wait = np.mean([r.finish - r.arrival for r in sim.requests]) - service
    expected = rho * service / (2 * (1 - rho))
    assert wait == pytest.approx(expected, rel=0.1)


def test_closed_loop_never_exceeds_concurrency() -> None:
    result, sim = simulate(
        scenario(traffic={"concurrency": 3, "requests": 30, "prompt_tokens": 500, "output_tokens": 50})
    )
    events = sorted([(r.arrival, 1) for r in sim.requests] + [(r.finish, -1) for r in sim.requests])
    assert max(np.cumsum([e for _, e in events])) <= 3
    assert result["metrics"]["completed"] == 30


@pytest.mark.parametrize(
    "over",
    [
        {
            "deployment.mode": "colocated",
            "deployment.decode.max_batch_tokens": 2048,
            "deployment.decode.chunk_size": 512,
            "deployment.decode.mem_fraction": 0.13,
            "deployment.decode.decode_reserve_tokens": 16,
            "traffic.rate": 20.0,
        },
        {
            "deployment.prefill.instances": 2,
            "deployment.prefill.max_batch_tokens": 1024,
            "deployment.prefill.chunk_size": 256,
            "traffic.rate": 20.0,
        },
    ],
    ids=["colocated-preemption", "prefill-queues"],
)
def test_queued_tokens_kept_as_they_change_equal_the_sum_over_the_queue(
    over: dict[str, Any], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Prefill routing reads a running count; it must be Σ (target − cached) over waiting and prefilling
    sequences at every decision, preemptions and chunked prompts included."""
    from simulator.serving.scheduler import Scheduler

    seen = []
    schedule = Scheduler.schedule

    def checked(self: Scheduler):  # type: ignore[no-untyped-def]
        direct = sum(s.target - s.computed for s in self.waiting)
        direct += sum(s.target - s.computed for s in self.running if s.status == "prefill")
        assert self.queued_tokens() == direct
        seen.append(direct)
        return schedule(self)

    monkeypatch.setattr(Scheduler, "schedule", checked)
    result, _ = simulate(scenario(**over))
    assert max(seen) > 0
    assert result["metrics"]["preempted"] > 0 or "preemption" not in request.node.callspec.id


def _drawn(k: int) -> dict[str, Any]:
    """A deployment drawn at random (seeded), short of memory so that admissions wait, transfers queue and
    decode preempts: pool sizes, page sizes, reserves, limits, routing, faults, sessions, lengths. How the two
    clocks were fuzzed; two bugs it found are cases of the test above."""
    rng = np.random.default_rng([2026, k])

    def pick(*xs: Any) -> Any:
        return xs[int(rng.integers(len(xs)))]

    over: dict[str, Any] = {
        "seed": int(rng.integers(1000)),
        "deployment.mode": pick("disaggregated", "disaggregated", "colocated"),
        "deployment.decode.instances": pick(1, 2, 3),
        "deployment.decode.mem_fraction": pick(0.13, 0.13, 0.14),
        "deployment.decode.page_size": pick(1, 16, 64),
        "deployment.decode.decode_reserve_tokens": pick(0, 16, 256),
        "deployment.decode.max_running": pick(8, 32, 256),
        "deployment.decode.max_batch_tokens": pick(512, 2048, 8192),
        "deployment.decode.chunk_size": pick(256, 1024, 8192),
        "deployment.prefill.page_size": pick(16, 64),
        "routing.policy": pick("round_robin", "least_kv", "session_affinity", "prefix_aware"),
        "prefix_cache.enabled": bool(rng.random() < 0.8),
        "traffic.rate": pick(12.0, 30.0),
        "traffic.sessions.turns": pick(1, 2, 4),
        "traffic.output_tokens": {"dist": "lognormal", "median": pick(150, 600), "sigma": 0.7, "max": 3000},
    }
    if rng.random() < 0.3:
        over["integrity.fault_rate"] = pick(0.0005, 0.005)
    if rng.random() < 0.5:  # drawn last, so the draws above stay those the fuzzing found bugs with
        over["routing.policy"] = pick("cache_aware", "scorers", "power_of_two")
    return over


@pytest.mark.parametrize("k", range(8))
def test_drawn_deployments_give_identical_timelines_on_both_clocks(k: int) -> None:
    sc = scenario(**_drawn(k))
    seg, _ = simulate(sc)
    step, _ = simulate(sc, step_mode=True)
    assert dumps(seg) == dumps(step)
