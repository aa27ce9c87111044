"""Page-integrity kernel vs its torch reference (exact: the status is an integer)."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICES

from kernels import reference as ref
from kernels.integrity_check import integrity_check


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_integrity_matches_reference(device: str) -> None:
    gen = torch.Generator().manual_seed(1)
    bsz, max_pages, pages = 9, 37, 50
    table = torch.randint(0, pages - 1, (bsz, max_pages), generator=gen, dtype=torch.int32)
    tags = torch.randint(0, 1000, (pages,), generator=gen, dtype=torch.int32)
    used = torch.tensor([37, 5, 0, 20, 11, 3, 37, 1, 8], dtype=torch.int32)
    recorded = tags[table.long()].clone()
    for b in range(bsz):  # unused slots hold -1 and garbage tags: they must be ignored
        table[b, int(used[b]) :] = -1
        recorded[b, int(used[b]) :] = 12345
    recorded[1, 4] += 1  # stale page in the last used slot
    table[3, 0] = -1  # -1 in a used slot: must not read current_tags[-1]
    tags[-1] = recorded[3, 0]  # ... which would even look valid (page pages-1 is in no table)
    table[4, 10] = pages  # one past the end
    recorded[6, 36] -= 7
    table[6, 2] = -5  # out of range wins over a mismatch
    args = [t.to(device) for t in (table, recorded, tags, used)]
    got = integrity_check(*args).cpu()
    want = ref.integrity_check(table, recorded, tags, used)
    assert want.tolist() == [0, 1, 0, 2, 2, 0, 2, 0, 0]
    assert torch.equal(got, want), f"exact match required: {got.tolist()} vs {want.tolist()}"
