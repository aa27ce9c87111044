"""An instance's KV tiers below HBM as host-memory tensors, and the page moves its cache logged, executed for real.

The cache (`simulator.serving.tiers.TieredCache`) decides what spills and what loads back and logs each move in
order; before a step runs, the executor copies those pages — HBM page to host slot, host slot back into a fresh HBM
page, storage slot to host slot and back — so a prefix loaded back is the very bytes that were spilled, and the
time the copies take is measured with the step. On the CPU "host" and "device" are the same memory: the copies
are real memcpys of the pool's page layout, timed as such. Host buffers are pinned on a GPU (`cudaMemcpyAsync`
through DMA, as vLLM's offloading connector and HiCache's direct backend copy). The storage tier is host memory
here too (no disk is written): its time in `run` is the tier's latency and bandwidth, priced; here only the copy.

When a tier has more slots than the replay's budget holds, slot s is stored at s mod physical, like the HBM pages
of `paged_kv` (a copy still moves a whole page's bytes); the Result says so.
"""

from __future__ import annotations

import torch

from kernels.executor.paged_kv import PagedKV
from simulator.serving.tiers import CASCADE, DOWN, FETCH, UP, TieredCache

GIB = 1024**3
TIER_BUDGET_GIB = 1.0  # host memory one instance's tier buffers may take in a replay (a choice, stated)


class TierBuffers:
    """One instance's tiers as tensors of its page layout: [layers, physical slots, page_size, row]."""

    def __init__(self, kv: PagedKV, cache: TieredCache) -> None:
        self.kv, self.cache = kv, cache
        cache.moves = []  # the cache logs every move from now on; `drain` executes and clears them
        page = kv.data[:, 0]
        slot_bytes = page.numel() * page.element_size()
        pin = kv.dev.type == "cuda"
        self.slots = [t.slots for t in cache.tiers]
        room = int(TIER_BUDGET_GIB * GIB // len(cache.tiers) // slot_bytes)
        self.physical = [max(1, min(n, room)) for n in self.slots]
        self.data = [
            torch.zeros((page.shape[0], n, *page.shape[1:]), dtype=page.dtype, pin_memory=pin) for n in self.physical
        ]
        self.moved = 0  # pages copied over the replay

    def drain(self) -> tuple[int, int]:
        """Execute the logged moves in order; returns (pages moved, of which loaded up into HBM)."""
        moves = self.cache.moves
        assert moves is not None
        hbm = self.kv.data
        up = 0
        for op, t, src, dst in moves:
            if op == DOWN:
                self.data[t][:, dst % self.physical[t]].copy_(hbm[:, self._page(src)])
            elif op == UP:
                hbm[:, self._page(dst)].copy_(self.data[t][:, src % self.physical[t]])
                up += 1
            elif op == FETCH:
                self.data[0][:, dst % self.physical[0]].copy_(self.data[1][:, src % self.physical[1]])
            else:
                assert op == CASCADE
                self.data[1][:, dst % self.physical[1]].copy_(self.data[0][:, src % self.physical[0]])
        n = len(moves)
        moves.clear()
        self.moved += n
        return n, up

    def _page(self, page: int) -> int:
        return page % self.kv.physical

    def provenance(self) -> dict[str, object]:
        return {
            t.name: {
                "slots": slots,
                "physical": phys,
                "shared_physical_slots": phys < slots,
                "gib": round(d.numel() * d.element_size() / GIB, 4),
            }
            for t, slots, phys, d in zip(self.cache.tiers, self.slots, self.physical, self.data, strict=True)
        } | {"pages_moved": self.moved, "pages_left_to_move": len(self.cache.moves or [])}  # (after the last step)
