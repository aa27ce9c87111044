"""The routers (simulator/serving/routing.py): each one's choice on hand-made instance states, the router's prefix
tree, the engines' defaults, and the property an operator relies on: adding instances never makes TTFT worse."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from simulator.config import loader
from simulator.config.scenario import Routing
from simulator.engine.run import simulate
from simulator.serving.router_tree import PrefixTree
from simulator.serving.routing import GATEWAY_MATCH_TOKENS, LOAD_POLL_S, Router
from simulator.workload.request import Request


@dataclass
class Inst:
    """An instance as a router reads it."""

    index: int
    pages: int = 0  # KV pages held (and promised to transfers)
    queued: int = 0  # prompt tokens queued to prefill
    waiting: int = 0  # requests waiting to be scheduled
    cached: int = 0  # pages of the prompt its own cache holds (prefix_aware)
    num_pages: int = 1000
    page_size: int = 64
    reads: list[float] = field(default_factory=list)

    def used_pages(self, t: float) -> int:
        self.reads.append(t)
        return self.pages

    def kv_load(self, t: float) -> int:
        self.reads.append(t)
        return self.pages

    def queued_tokens(self) -> int:
        return self.queued

    def waiting_requests(self) -> int:
        return self.waiting

    def prefix_pages(self, req: Request) -> int:
        return self.cached


def req(i: int = 0, blocks: tuple[int, ...] = (), prompt: int = 640, session: int | None = None) -> Request:
    return Request(i, 0.0, prompt, 100, session=session, blocks=blocks, block_tokens=64)


def router(policy: str, n: int = 3, **settings: object) -> Router:
    return Router(Routing(policy=policy, **settings), {"decode": n}, seed=0)  # type: ignore[arg-type]


def load(r: Router, counts: list[int]) -> None:
    """Requests in flight on each instance, as the router counted them."""
    r.inflight["decode"] = list(counts)


# -- cache_aware (SGLang's router) ------------------------------------------------------------------------------
def test_cache_aware_sends_a_miss_to_the_fewest_requests_in_flight_ties_to_the_first() -> None:
    r, pool = router("cache_aware"), [Inst(0), Inst(1), Inst(2)]
    load(r, [5, 3, 3])
    assert r.route("decode", pool, req(blocks=(1, 2, 3)), 0.0) == 1
    assert r.inflight["decode"] == [5, 4, 3]
    assert r.route("decode", pool, req(1, blocks=(7, 8, 9)), 0.0) == 2  # now the only one with 3


def test_cache_aware_follows_a_prefix_that_covers_more_than_the_threshold() -> None:
    r, pool = router("cache_aware"), [Inst(0), Inst(1), Inst(2)]
    load(r, [9, 2, 2])
    shared = (11, 12, 13, 14)  # 4 of the prompt's 10 blocks: 40% > cache_threshold 0.3
    r.trees["decode"].insert(req(blocks=shared), 0)
    assert r.route("decode", pool, req(1, blocks=(*shared, 21, 22, 23, 24, 25, 26)), 0.0) == 0
    # 2 of 10 blocks (20%) is not enough: the least loaded instead
    assert r.route("decode", pool, req(2, blocks=(11, 12, 31, 32, 33, 34, 35, 36, 37, 38)), 0.0) == 1


def test_cache_aware_balances_only_past_both_thresholds() -> None:
    shared = tuple(range(100, 110))
    # max − min = 70 > 64 and max 80 > 1.5 × min 10: imbalanced, the least loaded despite the whole match
    r, pool = router("cache_aware"), [Inst(0), Inst(1), Inst(2)]
    load(r, [80, 10, 40])
    r.trees["decode"].insert(req(blocks=shared), 0)
    assert r.route("decode", pool, req(1, blocks=shared), 0.0) == 1
    # max − min = 80 > 64, but max 280 < 1.5 × min 200: balanced, the cached prefix wins
    r, pool = router("cache_aware"), [Inst(0), Inst(1), Inst(2)]
    load(r, [280, 200, 240])
    r.trees["decode"].insert(req(blocks=shared), 0)
    assert r.route("decode", pool, req(1, blocks=shared), 0.0) == 0
    # the thresholds are the scenario's
    r, pool = router("cache_aware", balance_abs_threshold=4, balance_rel_threshold=1.1), [Inst(0), Inst(1)]
    load(r, [9, 2])
    r.trees["decode"].insert(req(blocks=shared), 0)
    assert r.route("decode", pool, req(1, blocks=shared), 0.0) == 1


def test_requests_leave_the_in_flight_count_when_done() -> None:
    r, pool = router("cache_aware", n=2), [Inst(0), Inst(1)]
    a = r.route("decode", pool, req(0, blocks=(1,)), 0.0)
    b = r.route("decode", pool, req(1, blocks=(2,)), 0.0)
    assert (a, b) == (0, 1) and r.inflight["decode"] == [1, 1]
    r.done("decode", 0)
    assert r.inflight["decode"] == [0, 1]
    assert r.route("decode", pool, req(2, blocks=(3,)), 0.0) == 0


# -- scorers (the gateway's endpoint picker: llm-d, vLLM production stack) -----------------------------------------
def test_scorers_weigh_queue_kv_use_and_prefix_as_configured() -> None:
    # queue: waiting 0/4/2 -> 1, 0, 0.5; KV: 1 − pages/1000; prefix: none cached yet
    pool = [Inst(0, pages=900, waiting=0), Inst(1, pages=0, waiting=4), Inst(2, pages=500, waiting=2)]
    # default weights 2/2/3: 2·1 + 2·0.1 = 2.2, 2·0 + 2·1 = 2.0, 2·0.5 + 2·0.5 = 2.0 -> instance 0
    assert router("scorers").route("decode", pool, req(blocks=(1, 2)), 0.0) == 0
    # KV use weighed up: 1 + 5·0.1 = 1.5, 0 + 5 = 5, 0.5 + 2.5 = 3 -> instance 1
    r = router("scorers", weights={"queue": 1, "kv_cache": 5, "prefix": 0})
    assert r.route("decode", pool, req(blocks=(1, 2)), 0.0) == 1
    # equal queues score 1 each (neutral), so KV use decides
    pool = [Inst(0, pages=300, waiting=2), Inst(1, pages=100, waiting=2), Inst(2, pages=200, waiting=2)]
    assert router("scorers").route("decode", pool, req(blocks=(1, 2)), 0.0) == 1


def test_scorers_prefix_counts_matched_blocks_of_the_first_tokens_and_two_servers() -> None:
    r = router("scorers", weights={"queue": 0, "kv_cache": 0, "prefix": 1})
    pool = [Inst(0), Inst(1), Inst(2)]
    cap = GATEWAY_MATCH_TOKENS // 64
    long = tuple(range(1000, 1000 + cap + 20))
    r.trees["decode"].insert(req(blocks=long[:4]), 2)
    r.trees["decode"].insert(req(blocks=long[: cap + 10]), 1)  # past the cap: scored as the whole cap
    assert r.route("decode", pool, req(9, blocks=long, prompt=len(long) * 64), 0.0) == 1
    # only the two longest-matching servers are scored: a third holder of a shorter prefix scores 0
    tree = PrefixTree(10**6)
    tree.insert(req(blocks=long[:6]), 0)
    tree.insert(req(blocks=long[:4]), 1)
    tree.insert(req(blocks=long[:2]), 2)
    assert tree.matches(req(blocks=long), 2) == {0: 6 * 64, 1: 4 * 64}


# -- power_of_two, least_kv, round_robin, session_affinity, prefix_aware -------------------------------------------
def test_power_of_two_takes_the_lower_of_two_drawn_by_polled_token_loads() -> None:
    r = router("power_of_two", n=2)
    pool = [Inst(0, pages=10), Inst(1, pages=2)]
    assert r.route("decode", pool, req(), 0.0) == 1  # two of two drawn: the lower always wins
    pool[1].pages = 50  # the load changed, but the router's poll is 5 s old at most: still 1
    assert r.route("decode", pool, req(1), LOAD_POLL_S / 2) == 1
    assert r.route("decode", pool, req(2), LOAD_POLL_S) == 0  # polled again


def test_power_of_two_draws_repeat_with_the_seed() -> None:
    pool = [Inst(i) for i in range(8)]  # equal loads: the first drawn wins, so the picks are the draws
    runs = [router("power_of_two", n=8) for _ in range(2)]
    picks = [[r.route("decode", pool, req(k), 0.0) for k in range(20)] for r in runs]
    assert picks[0] == picks[1] and len(set(picks[0])) > 1


def test_least_kv_counts_queued_prompts_before_pages_then_requests_in_flight() -> None:
    r = router("least_kv")
    pool = [Inst(0, pages=10, queued=8192), Inst(1, pages=400, queued=0), Inst(2, pages=300, queued=0)]
    assert r.route("decode", pool, req(), 0.0) == 2  # instance 0 holds fewest pages, but a prompt waits there
    pool = [Inst(0, pages=300), Inst(1, pages=300), Inst(2, pages=300)]
    load(r, [4, 2, 3])
    assert r.route("decode", pool, req(), 0.0) == 1


def test_round_robin_turns_each_pool_on_its_own() -> None:
    r = Router(Routing(policy="round_robin"), {"prefill": 2, "decode": 3}, seed=0)
    pre, dec = [Inst(0), Inst(1)], [Inst(0), Inst(1), Inst(2)]
    got = [r.route("decode", dec, req(), 0.0) for _ in range(4)] + [
        r.route("prefill", pre, req(), 0.0) for _ in range(3)
    ]
    assert got == [0, 1, 2, 0, 0, 1, 0]


def test_session_affinity_and_prefix_aware() -> None:
    pool = [Inst(0, cached=1), Inst(1, cached=5, pages=900), Inst(2, cached=5, pages=100)]
    assert router("session_affinity").route("decode", pool, req(session=7), 0.0) == 1  # 7 % 3
    assert router("session_affinity").route("decode", pool, req(), 0.0) == 2  # no session: prefix-aware
    assert router("prefix_aware").route("decode", pool, req(), 0.0) == 2  # most cached, then fewest pages


# -- the router's prefix tree --------------------------------------------------------------------------------------
def test_prefix_tree_longest_match_and_its_holders() -> None:
    tree = PrefixTree(10**6)
    tree.insert(req(blocks=(1, 2, 3)), 0)
    tree.insert(req(blocks=(1, 2, 9)), 2)
    assert tree.longest(req(blocks=(1, 2, 3, 4))) == (3 * 64, [0])
    assert tree.longest(req(blocks=(1, 2, 5))) == (2 * 64, [0, 2])
    assert tree.longest(req(blocks=(5, 6))) == (0, [])


def test_prefix_tree_evicts_the_least_recently_routed_leaves_first() -> None:
    tree = PrefixTree(4 * 64)
    tree.insert(req(blocks=(1, 2, 3)), 0)
    tree.insert(req(blocks=(1, 7)), 1)  # refreshes block 1; 4 blocks held
    tree.insert(req(blocks=(8,)), 1)  # one over: the oldest leaf goes (3), never a parent before its children
    assert tree.size_tokens == 4 * 64
    assert tree.longest(req(blocks=(1, 2, 3))) == (2 * 64, [0])
    assert tree.longest(req(blocks=(1, 7))) == (2 * 64, [1])


# -- the engines' routers as defaults ------------------------------------------------------------------------------
BASE = {
    "model": "kimi-k2.6",
    "deployment": {"mode": "colocated", "decode": {"instances": 2, "tp": 8, "weights": "int4"}},
    "traffic": {"rate": 1.0, "requests": 10},
}


@pytest.mark.parametrize(("engine", "router_name"), [("sglang-0.5", "cache_aware"), ("vllm-0.x", "scorers")])
def test_a_scenario_runs_its_engines_router_unless_it_names_one(engine: str, router_name: str) -> None:
    sc = loader.validate({**BASE, "engine": engine}, "test")
    assert sc.routing.policy == router_name
    sc = loader.validate({**BASE, "engine": engine, "routing": {"policy": "round_robin"}}, "test")
    assert sc.routing.policy == "round_robin"


# -- what an operator relies on ----------------------------------------------------------------------------------------
COLOCATED = Path(__file__).parent / "fixtures" / "colocated-kimi.yaml"


def _ttft_p95(instances: int) -> float:
    sc, _ = loader.load(COLOCATED, (f"deployment.decode.instances={instances}",))
    result, _ = simulate(sc)
    return result["metrics"]["ttft_ms"]["p95"]


def test_adding_instances_never_raises_ttft_under_the_default_router() -> None:
    """Kimi K2.6 colocated at 5 req/s of 8K/1K (issue 43's study): the default router herded once (TTFT p95 3,511
    / 3,947 / 2,583 ms on 6 / 9 / 12 instances). 10% is the run's noise: the p95 at 12 instances moves by about
    that across seeds 0-3 (810-905 ms)."""
    p6, p9, p12 = (_ttft_p95(n) for n in (6, 9, 12))
    assert p9 <= 1.10 * p6
    assert p12 <= 1.10 * p9
