"""Which instance of a pool gets a request: the `routing.policy` of a scenario.

Prefill instances are chosen to reuse cached prefixes where the policy cares about them, else by the
least queued work; decode instances by the named policy. Ties break on the lowest index, so runs repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from simulator.workload.request import Request


class Routable(Protocol):
    index: int

    def used_pages(self, t: float) -> int: ...

    def kv_load(self, t: float) -> int: ...

    def queued_tokens(self) -> int: ...

    def prefix_pages(self, req: Request) -> int: ...


def _session_slot(req: Request, n: int) -> int | None:
    return None if req.session is None else req.session % n


def _least(pool: Sequence[Routable], loads: list[int]) -> Routable:
    """The instance with the lowest load, ties to the lowest index (pools are in index order). The loads come as
    one list, read in a comprehension: this runs for every request on every instance."""
    return pool[loads.index(min(loads))]


class Router:
    def __init__(self, policy: str) -> None:
        self.policy = policy
        self._next = 0

    def prefill(self, pool: Sequence[Routable], req: Request) -> Routable:
        if self.policy == "session_affinity" and (slot := _session_slot(req, len(pool))) is not None:
            return pool[slot]
        if self.policy in ("prefix_aware", "session_affinity"):
            return min(pool, key=lambda i: (-i.prefix_pages(req), i.queued_tokens(), i.index))
        return _least(pool, [i.queued_tokens() for i in pool])

    def decode(self, pool: Sequence[Routable], req: Request, t: float) -> Routable:
        """The decode instance for `req` at time t (load is read as of t, also mid-run)."""
        if self.policy == "round_robin":
            inst = pool[self._next % len(pool)]
            self._next += 1
            return inst
        if self.policy == "session_affinity" and (slot := _session_slot(req, len(pool))) is not None:
            return pool[slot]
        if self.policy == "prefix_aware":
            return min(pool, key=lambda i: (-i.prefix_pages(req), i.used_pages(t), i.index))
        return _least(pool, [i.kv_load(t) for i in pool])


def dp_rank(loads: list[int]) -> int:
    """The DP-attention rank of an instance that gets a request: the least loaded, ties to the lowest rank. A
    request stays on its rank (its KV lives there). The load is the rank's KV pages held and promised (decode,
    colocated) or its queued prompt tokens (prefill), as SGLang's DataParallelController balances DP ranks by
    their tokens (`load_balance_method` minimum_tokens / total_tokens; round_robin and shortest_queue are its
    other methods, python/sglang/srt/managers/data_parallel_controller.py)."""
    return loads.index(min(loads))
