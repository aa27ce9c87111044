"""The page-integrity check run on the device: the scheduler's tracker, with the check itself on device tensors.

Before a decode step reads the cache, the batch's block tables and recorded tags (the allocator's table store)
and a device copy of the current page tags go to the device, and the check kernel (`integrity_check`: the
Triton kernel on CUDA, its torch reference on CPU) marks each table ok / stale / out of range. The first bad
slot of a flagged table is found on the device too, so the violations — and hence the aborts, counts and
events — are the simulator's, decided by device tensors. The check's seconds are kept for the step they
precede (the op list prices `integrity_check` inside the decode step).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from kernels import reference as ref
from kernels.executor.device import synchronize
from simulator.serving.cache import PagedCache
from simulator.serving.integrity import Violation


class DeviceTracker:
    enabled = True

    def __init__(self, dev: torch.device) -> None:
        self.dev = dev
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
        t0 = time.perf_counter()
        out = self._check(rows, cache)
        synchronize(self.dev)
        self.seconds += time.perf_counter() - t0
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

            status = integrity_check(table.to(torch.int32), recorded.to(torch.int32), tags.to(torch.int32),
                                     lens.to(torch.int32))
        else:
            status = ref.integrity_check(table, recorded, tags, lens)
        flagged = torch.nonzero(status).flatten()
        if not flagged.numel():
            return [], int(lens_np.sum())
        ids, rec = table[flagged], recorded[flagged]
        used = torch.arange(width, device=dev)[None, :] < lens[flagged][:, None]
        valid = (ids >= 0) & (ids < n)
        bad = used & (~valid | (tags[ids.clamp(0, n - 1)] != rec))
        slot = bad.to(torch.int8).argmax(dim=1)  # first bad slot of each flagged table
        first_valid = valid.gather(1, slot[:, None]).flatten()
        out = [Violation(i, j, "tag_mismatch" if ok else "invalid_page")
               for i, j, ok in zip(flagged.tolist(), slot.tolist(), first_valid.tolist(), strict=True)]
        return out, int(lens_np.sum())
