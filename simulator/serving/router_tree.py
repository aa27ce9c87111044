"""What a router remembers of the prompts it sent to each instance: an approximate prefix tree.

Cache-aware routers do not ask the engines what they cache; they remember what they routed. SGLang's router keeps a
radix tree of request text with, at each node, the workers it sent that text to (sgl-model-gateway
src/policies/tree.rs), evicting least-recently-used leaves past `max_tree_size`; the Gateway API inference
extension's prefix scorer (used by llm-d) keeps block hashes of the prompt in an LRU index of servers
(pkg/epp/scheduling/framework/plugins/multi/prefix). Both are the same structure at the granularity a request's
prefix identity has here: the chained block hashes of `Request.blocks` (equal hash, equal prefix up to that block).

A prefix key maps to the bit set of instances the router sent it to. A routed request refreshes its keys deepest
first, so a block is never fresher than the blocks before it: eviction (least recently routed first) takes leaves
before their parents, a block is held only where every block before it is, and the instances holding block b
shrink as b grows — the longest match is found by bisection.
"""

from __future__ import annotations

from collections import OrderedDict

from simulator.workload.request import Request


class PrefixTree:
    """Prefix keys routed to each instance, at most `capacity_tokens` tokens of them (least recently routed out
    first)."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._owners: OrderedDict[int, int] = OrderedDict()  # block key -> bit set of instance indices
        self._tokens: dict[int, int] = {}  # block key -> its tokens (traces vary the block size)
        self.size_tokens = 0

    def _depth(self, blocks: tuple[int, ...]) -> int:
        """How many leading blocks some instance holds (bisection: holders shrink as blocks deepen)."""
        owners = self._owners
        lo, hi = 0, len(blocks)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if blocks[mid - 1] in owners:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def longest(self, req: Request, max_blocks: int | None = None) -> tuple[int, list[int]]:
        """(tokens of the longest prefix any instance holds, the instances holding that much), over the first
        `max_blocks` blocks of the prompt (None: all)."""
        blocks = req.blocks if max_blocks is None else req.blocks[:max_blocks]
        depth = self._depth(blocks)
        if not depth:
            return 0, []
        return depth * req.block_tokens, _members(self._owners[blocks[depth - 1]])

    def matches(self, req: Request, want: int, max_blocks: int | None = None) -> dict[int, int]:
        """Matched tokens per instance for up to `want` instances, searched from the longest prefix down (the
        gateway's prefix scorer matches `DefaultNumServersToMatch` = 2 servers this way)."""
        blocks = req.blocks if max_blocks is None else req.blocks[:max_blocks]
        found: dict[int, int] = {}
        owners = self._owners
        for b in range(self._depth(blocks), 0, -1):
            for i in _members(owners[blocks[b - 1]]):
                if i not in found:
                    found[i] = b * req.block_tokens
            if len(found) >= want:
                break
        return found

    def insert(self, req: Request, index: int) -> None:
        """The request was routed to instance `index`: its prompt's blocks are remembered there, the first block
        freshest."""
        owners, sizes, bit = self._owners, self._tokens, 1 << index
        for key in reversed(req.blocks):
            held = owners.get(key)
            if held is None:
                owners[key] = bit
                sizes[key] = req.block_tokens
                self.size_tokens += req.block_tokens
            else:
                owners[key] = held | bit
                owners.move_to_end(key)
        while self.size_tokens > self.capacity_tokens and owners:
            key, _ = owners.popitem(last=False)
            self.size_tokens -= sizes.pop(key)


def _members(bits: int) -> list[int]:
    """The instance indices in a bit set, ascending."""
    out = []
    i = 0
    while bits:
        if bits & 1:
            out.append(i)
        bits >>= 1
        i += 1
    return out
