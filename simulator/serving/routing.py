"""Which instance of a pool gets a request: the router a deployment of the scenario's engine runs.

`routing.policy` names it; unset, the engine preset's `router` (SGLang: `cache_aware`, vLLM: `scorers`). Both
clocks route here, at a request's arrival (the entry pool) and at its hand-off to decode (disaggregated); the
router's own counts (requests in flight, its prefix tree) change only at routing and at completion, so the segment
clock and the one-step clock see the same. Ties break on the lowest index (an engine's router breaks some at
random; a run must repeat).

The policies, each as its source describes it (docs/routing.md has the verbatim sources):

* `cache_aware` — SGLang's router default (sgl-project/sglang sgl-model-gateway src/policies/cache_aware.rs
  @ b93974f140de and the sglang-router 0.3.2 sdist's src/policies/cache_aware.rs; its launcher's defaults,
  src/sglang_router/router_args.py). A worker's load is the requests the router has in flight there. When the loads are
  imbalanced — max − min > `balance_abs_threshold` (64) and max > `balance_rel_threshold` (1.5) × min — the least
  loaded worker; else the worker holding the longest prefix of the request in the router's tree if the match
  covers more than `cache_threshold` (0.3) of the prompt, else the least loaded. The tree holds the routed request
  either way, bounded at `max_tree_size` 2^26 characters (about 2^24 tokens at the gateway's own 4 characters a
  token).
* `power_of_two` — SGLang's other load-aware policy (src/policies/power_of_two.rs): two distinct workers drawn at
  random, the one with the lower load (the first drawn on a tie), the load being each worker's tokens as its
  /get_load reports them (`num_tokens`: here KV tokens held and prompt tokens queued), polled every 5 s
  (`load_check_interval_secs`; here taken at the first routing after each 5 s).
* `scorers` — the Gateway API inference extension's endpoint picker as llm-d and the vLLM production stack deploy
  it (kubernetes-sigs/gateway-api-inference-extension config/charts/inferencepool/templates/epp-config.yaml
  @ 139eec852f4a: queue-scorer weight 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3; max-score picker).
  Queue: (max − waiting) / (max − min) of the requests waiting on each instance, 1 when all are equal (scorer/
  queue.go); KV: 1 − the share of KV pages in use (scorer/kvcache_utilization.go); prefix: matched / total blocks
  of the prompt in the router's LRU index, the two longest-matching servers scored (multi/prefix/plugin.go:
  128 blocks of 64 characters matched at most, about 2,048 tokens; an index of 50,000 blocks, 800,000 tokens at
  4 characters a token).
* `least_kv` — phaseplan's own: the fewest prompt tokens queued to prefill, then the fewest KV pages held and
  promised (held at time t, promised to transfers waiting to start), then the fewest requests in flight. (Pages
  held alone sent a burst of arrivals to one instance: queued prompts hold none yet.)
* `round_robin` — each pool in turn (SGLang's `round_robin`, the production stack's `roundrobin`).
* `session_affinity`, `prefix_aware` — a conversation's turns to one instance (by session id; without one, as
  `prefix_aware`), or the instance whose cache holds the longest prefix of the prompt (ties: least queued prompt
  tokens at prefill, least pages held at decode).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from simulator.config.scenario import Routing
from simulator.serving.router_tree import PrefixTree
from simulator.workload.request import Request

SGLANG_TREE_TOKENS = 2**26 // 4  # max_tree_size 2^26 characters at 4 characters a token
GATEWAY_INDEX_TOKENS = 50_000 * 64 // 4  # DefaultLRUIndexerCapacity blocks of DefaultHashBlockSize characters
GATEWAY_MATCH_TOKENS = 128 * 64 // 4  # DefaultMaxPrefixBlocks of DefaultHashBlockSize characters
GATEWAY_SERVERS_MATCHED = 2  # DefaultNumServersToMatch
LOAD_POLL_S = 5.0  # SGLang's router polls power_of_two's loads every 5 s (load_check_interval_secs)


class Routable(Protocol):
    """What a router reads of an instance, as of time t (also mid-run)."""

    index: int
    num_pages: int
    page_size: int

    def used_pages(self, t: float) -> int: ...

    def kv_load(self, t: float) -> int: ...

    def queued_tokens(self) -> int: ...

    def waiting_requests(self) -> int: ...

    def prefix_pages(self, req: Request) -> int: ...


def _session_slot(req: Request, n: int) -> int | None:
    return None if req.session is None else req.session % n


def _least(loads: list[Any]) -> int:
    """The index of the lowest load, ties to the lowest index."""
    return loads.index(min(loads))


class Router:
    """One deployment's router: its policy over every pool, what it has in flight on each instance, and (cache-aware
    policies) its tree of the prefixes it sent where."""

    def __init__(self, settings: Routing, pools: dict[str, int], seed: int) -> None:
        """`pools`: each pool's name and instance count."""
        assert settings.policy is not None, "the scenario resolves the engine's router"
        self.policy = settings.policy
        self.settings = settings
        self.inflight = {name: [0] * n for name, n in pools.items()}
        capacity = {"cache_aware": SGLANG_TREE_TOKENS, "scorers": GATEWAY_INDEX_TOKENS}.get(self.policy)
        self.trees = {name: PrefixTree(capacity) for name in pools} if capacity else {}
        self._next = dict.fromkeys(pools, 0)
        self._rng = np.random.default_rng([seed, 13])  # power_of_two's draws
        self._polled: dict[str, tuple[float, list[int]]] = {}  # power_of_two: (poll time, each instance's tokens)

    def route(self, name: str, pool: Sequence[Routable], req: Request, t: float) -> int:
        """The index of the instance of pool `name` (instances in index order) that gets `req` at time t; counted
        in flight there until `done`."""
        index = self._pick(name, pool, req, t)
        self.inflight[name][index] += 1
        tree = self.trees.get(name)
        if tree is not None:
            tree.insert(req, index)
        return index

    def done(self, name: str, index: int) -> None:
        """A request routed to instance `index` of pool `name` is no longer in flight there."""
        self.inflight[name][index] -= 1

    def _pick(self, name: str, pool: Sequence[Routable], req: Request, t: float) -> int:
        policy, n = self.policy, len(pool)
        if n == 1:
            return 0
        if policy == "cache_aware":
            return self._cache_aware(name, req)
        if policy == "scorers":
            return self._scorers(name, pool, req, t)
        if policy == "power_of_two":
            return self._power_of_two(name, pool, t)
        if policy == "round_robin":
            i = self._next[name] % n
            self._next[name] += 1
            return i
        if policy == "session_affinity" and (slot := _session_slot(req, n)) is not None:
            return slot
        if policy in ("prefix_aware", "session_affinity"):
            if name == "prefill":
                return min(pool, key=lambda i: (-i.prefix_pages(req), i.queued_tokens(), i.index)).index
            return min(pool, key=lambda i: (-i.prefix_pages(req), i.used_pages(t), i.index)).index
        return self._least_kv(name, pool, t)

    def _least_kv(self, name: str, pool: Sequence[Routable], t: float) -> int:
        inflight = self.inflight[name]
        return _least([(i.queued_tokens(), i.kv_load(t), inflight[i.index]) for i in pool])

    def _cache_aware(self, name: str, req: Request) -> int:
        s, loads = self.settings, self.inflight[name]
        lo, hi = min(loads), max(loads)
        if hi - lo > s.balance_abs_threshold and hi > lo * s.balance_rel_threshold:
            return _least(loads)
        matched, holders = self.trees[name].longest(req)
        if holders and matched > s.cache_threshold * req.prompt_tokens:
            return min(holders, key=lambda i: (loads[i], i))  # the tree names one worker; here the least loaded
        return _least(loads)

    def _power_of_two(self, name: str, pool: Sequence[Routable], t: float) -> int:
        polled = self._polled.get(name)
        if polled is None or t >= polled[0] + LOAD_POLL_S:  # the load monitor's next poll
            polled = self._polled[name] = (t, [_tokens(i, t) for i in pool])
        n, loads = len(pool), polled[1]
        a = int(self._rng.integers(n))
        b = (a + 1 + int(self._rng.integers(n - 1))) % n
        return a if loads[a] <= loads[b] else b

    def _scorers(self, name: str, pool: Sequence[Routable], req: Request, t: float) -> int:
        w = self.settings.weights
        waiting = [i.waiting_requests() for i in pool]
        lo, hi = min(waiting), max(waiting)
        cap = max(1, GATEWAY_MATCH_TOKENS // req.block_tokens)
        total = min(req.prompt_tokens, cap * req.block_tokens)
        hits = self.trees[name].matches(req, GATEWAY_SERVERS_MATCHED, cap) if total else {}
        best, pick = -1.0, 0
        for k, inst in enumerate(pool):
            queue = 1.0 if hi == lo else (hi - waiting[k]) / (hi - lo)
            kv = 1.0 - inst.used_pages(t) / inst.num_pages
            prefix = hits.get(inst.index, 0) / total if total else 0.0
            score = w.queue * queue + w.kv_cache * kv + w.prefix * prefix
            if score > best:
                best, pick = score, k
        return pick


def _tokens(inst: Routable, t: float) -> int:
    """An instance's load as SGLang's /get_load reports it: tokens held in its KV cache and queued to prefill."""
    return inst.kv_load(t) * inst.page_size + inst.queued_tokens()


def dp_rank(loads: list[int]) -> int:
    """The DP-attention rank of an instance that gets a request: the least loaded, ties to the lowest rank. A
    request stays on its rank (its KV lives there). The load is the rank's KV pages held and promised (decode,
    colocated) or its queued prompt tokens (prefill), as SGLang's DataParallelController balances DP ranks by
    their tokens (`load_balance_method` minimum_tokens / total_tokens; round_robin and shortest_queue are its
    other methods, python/sglang/srt/managers/data_parallel_controller.py)."""
    return loads.index(min(loads))
