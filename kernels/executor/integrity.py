"""The page-integrity check run on the device: the scheduler's tracker, with the check itself on device tensors.

Before a decode step reads the cache, the batch's block tables and recorded tags (the allocator's table store)
and a device copy of the current page tags go to the device; on CUDA the Triton `integrity_check` kernel flags
the bad tables and `first_bad` finds their first bad slot, on CPU `first_bad` (whole-tensor torch ops) does
both. The violations — and hence the aborts, counts and events — are the simulator's, decided by device
tensors. The check's seconds are kept for the step they
precede (the op list prices `integrity_check` inside the decode step).
"""

from __future__ import annotations

import numpy as np
import torch

from kernels.executor.device import synchronize
from kernels.timing import clock
from simulator.serving.cache import PagedCache
from simulator.serving.integrity import Violation


class DeviceTracker:
    enabled = True

    def __init__(self, dev: torch.device) -> None:
        self.dev = dev
        self.now = clock(dev.type)
        self.seconds = 0.0  # spent checking since the clock last took it
        self.checks = 0

    def take_seconds(self) -> float:
        s, self.seconds = self.seconds, 0.0
        return s

    def check(self, rows: np.ndarray, cache: PagedCache) -> tuple[list[Violation], int]:
        rows = rows[rows >= 0]  # a table without pages has no row
        if not len(rows):
            return [], 0
        synchronize(self.dev)
        t0 = self.now()
        out = self._check(rows, cache)
        synchronize(self.dev)
        self.seconds += self.now() - t0
        self.checks += 1
        return out

    def _check(self, rows: np.ndarray, cache: PagedCache) -> tuple[list[Violation], int]:
        store, dev, n = cache.store, self.dev, cache.num_pages
        lens_np = store.lens[rows]
        width = max(1, int(lens_np.max()))
        table = torch.from_numpy(store.pages[rows, :width]).to(dev)
        recorded = torch.from_numpy(store.tags[rows, :width]).to(dev)
        tags = torch.from_numpy(cache.tag[:n]).to(dev)  # the device copy of the current page tags
        lens = torch.from_numpy(lens_np).to(dev)
        if dev.type == "cuda":
            from kernels.integrity_check import integrity_check

            status = integrity_check(
                table.to(torch.int32), recorded.to(torch.int32), tags.to(torch.int32), lens.to(torch.int32)
            )
            flagged = torch.nonzero(status).flatten()
            if not flagged.numel():
                return [], int(lens_np.sum())
            index, slot, valid = first_bad(table[flagged], recorded[flagged], tags, lens[flagged])
            index = flagged[index]
        else:
            index, slot, valid = first_bad(table, recorded, tags, lens)
        out = [
            Violation(i, j, "tag_mismatch" if ok else "invalid_page")
            for i, j, ok in zip(index.tolist(), slot.tolist(), valid.tolist(), strict=True)
        ]
        return out, int(lens_np.sum())


def first_bad(
    table: torch.Tensor, recorded: torch.Tensor, tags: torch.Tensor, lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batched check as whole-tensor torch ops (what the CPU replay runs and the CPU profile times; the
    reference `integrity_check` walks tables one by one in Python): for every table with a bad used slot, its
    index, its first bad slot and whether the page id there is valid (else it is out of range). A page id is
    validated before it indexes `tags`."""
    n, width = tags.shape[0], table.shape[1]
    used = torch.arange(width, device=table.device)[None, :] < lens[:, None]
    valid = (table >= 0) & (table < n)
    bad = used & (~valid | (tags[table.clamp(0, n - 1)] != recorded))
    index = torch.nonzero(bad.any(dim=1)).flatten()
    slot = bad[index].to(torch.int8).argmax(dim=1)
    return index, slot, valid[index].gather(1, slot[:, None]).flatten()
